package explain

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/xdsname"
)

// RouteReport explains one spatial routing decision step by step: the same Go reference
// the Lua repeats, on the map version and health the Lua carries. Its JSON field names
// are a stable interface documented in docs/spatial.md.
type RouteReport struct {
	Namespace   string       `json:"namespace"`
	Domain      string       `json:"domain"`
	Revision    uint64       `json:"revision"`
	MapVersion  string       `json:"mapVersion"`
	DataVersion string       `json:"dataVersion"`
	Request     RouteRequest `json:"request"`
	BBox        *BBox        `json:"bbox,omitempty"`
	Residency   Residency    `json:"residency"`
	Health      []Replica    `json:"health"`
	Locality    *Locality2   `json:"locality,omitempty"`
	Result      RouteResult  `json:"result"`
	// Loads are the domain's reported loads, from a running control plane only.
	Loads *RouteLoads `json:"loads,omitempty"`
	// Steps are the decision in words, one per step reached.
	Steps []string `json:"steps"`
}

// RouteRequest is the request being explained.
type RouteRequest struct {
	Product   string `json:"product"`
	BBox      string `json:"bbox,omitempty"`
	CRS       string `json:"crs,omitempty"`
	Path      string `json:"path,omitempty"`
	RequestID string `json:"requestId,omitempty"`
}

// BBox is the parsed box in CRS84.
type BBox struct {
	West  float64 `json:"west"`
	South float64 `json:"south"`
	East  float64 `json:"east"`
	North float64 `json:"north"`
}

// Residency is step 2.
type Residency struct {
	AllowedRegions []string  `json:"allowedRegions"`
	Lawful         []string  `json:"lawful"`
	Excluded       []Replica `json:"excluded"`
}

// Replica is one replica as a step saw it.
type Replica struct {
	Name     string `json:"name"`
	Region   string `json:"region"`
	Upstream string `json:"upstream"`
	Healthy  bool   `json:"healthy"`
	Note     string `json:"note,omitempty"`
}

// Locality2 is step 4 (named so to keep Locality for the weights report).
type Locality2 struct {
	CapPercent *int     `json:"capPercent,omitempty"`
	CapBucket  *int     `json:"capBucket,omitempty"`
	CellCount  int      `json:"cellCount"`
	MaxCells   int      `json:"maxCells"`
	Cells      []string `json:"cells,omitempty"`
	Partitions []string `json:"partitions,omitempty"`
	Scores     []Score  `json:"scores,omitempty"`
}

// Score is a healthy lawful replica's locality score.
type Score struct {
	Replica string `json:"replica"`
	Score   int    `json:"score"`
}

// RouteResult is what the request gets.
type RouteResult struct {
	Status  int    `json:"status"`
	Reason  string `json:"reason"`
	Replica string `json:"replica,omitempty"`
	Cluster string `json:"cluster,omitempty"`
}

// ExplainRoute decides req on the domain's map and health in the snapshot.
func ExplainRoute(s *topology.SpatialState, req partitionmap.Request) (*RouteReport, error) {
	k := s.Domain.Key
	if !s.Serving() {
		var why []string
		for _, p := range s.Problems {
			why = append(why, p.Message)
		}
		return nil, fmt.Errorf("SpatialDomain %s is not serving: %s", k, strings.Join(why, "; "))
	}
	m := s.Map
	var tr partitionmap.Trace
	dec := m.Decide(req, s.Health, &tr)
	r := &RouteReport{
		Namespace: k.Namespace, Domain: k.Name, Revision: s.Revision,
		MapVersion: m.Version(), DataVersion: m.DataVersion(s.Health),
		Request: RouteRequest{Product: req.Product, BBox: req.BBox, CRS: req.CRS, Path: req.Path, RequestID: req.RequestID},
		Result:  RouteResult{Status: dec.Status, Reason: dec.Reason, Replica: dec.Replica},
	}
	switch {
	case dec.Pool:
		r.Result.Cluster = xdsname.PoolCluster(k, req.Product)
	case dec.Replica != "":
		r.Result.Cluster = xdsname.ReplicaCluster(k, dec.Replica)
	}
	step := func(format string, args ...any) { r.Steps = append(r.Steps, fmt.Sprintf(format, args...)) }

	var product *partitionmap.Product
	for _, p := range m.Domain().Products {
		if p.Name == req.Product {
			product = &p
		}
	}
	if product == nil {
		step("product: %q is not a product of this domain → %d %s", req.Product, dec.Status, dec.Reason)
		return r, nil
	}
	if dec.Status == 400 {
		step("parse: %s → 400", dec.Reason)
		return r, nil
	}
	if tr.HasBBox {
		b := tr.BBox
		r.BBox = &BBox{b.West, b.South, b.East, b.North}
		across := ""
		if b.CrossesAntimeridian() {
			across = ", across the antimeridian"
		}
		step("parse: box lon %s..%s, lat %s..%s (CRS84%s)", num(b.West), num(b.East), num(b.South), num(b.North), across)
	} else {
		step("parse: no bbox")
	}

	r.Residency.AllowedRegions = product.AllowedRegions
	r.Residency.Lawful = tr.Lawful
	byName := map[string]topology.ReplicaState{}
	for _, rs := range s.Replicas {
		byName[rs.Name] = rs
	}
	for _, name := range tr.Unlawful {
		rs := byName[name]
		r.Residency.Excluded = append(r.Residency.Excluded, replica(rs, "region "+rs.Region+" not allowed"))
	}
	var excluded []string
	for _, e := range r.Residency.Excluded {
		if e.Name == e.Region {
			excluded = append(excluded, e.Name)
		} else {
			excluded = append(excluded, e.Name+" (region "+e.Region+")")
		}
	}
	step("residency: %s allows %s; lawful %s; excluded %s", product.Name, list(product.AllowedRegions), list(tr.Lawful), list(excluded))
	if dec.Status == 451 {
		step("result: no replica in an allowed region → 451 %s", dec.Reason)
		return r, nil
	}
	var hs []string
	for _, name := range tr.Lawful {
		rs := byName[name]
		note := ""
		switch {
		case !rs.Found:
			note = "Upstream " + rs.Upstream.String() + " not found"
		case !rs.Healthy:
			note = "Upstream " + rs.Upstream.String() + " has no eligible capacity; panic-eligible capacity does not count"
		}
		r.Health = append(r.Health, replica(rs, note))
		if rs.Healthy {
			hs = append(hs, name+" healthy")
		} else {
			hs = append(hs, name+" unhealthy ("+note+")")
		}
	}
	step("health: %s", strings.Join(hs, ", "))
	if dec.Status == 503 {
		step("result: no lawful replica has capacity → 503 %s", dec.Reason)
		return r, nil
	}
	if !tr.HasBBox {
		step("result: no bbox → 200 %s, pool %s", dec.Reason, r.Result.Cluster)
		return r, nil
	}
	dom := m.Domain()
	loc := &Locality2{CellCount: tr.CellCount, MaxCells: dom.MaxCells, Partitions: tr.Partitions}
	r.Locality = loc
	if dom.CapPercent != partitionmap.NoCap {
		c, b := dom.CapPercent, tr.CapBucket
		loc.CapPercent, loc.CapBucket = &c, &b
		verdict := "takes the locality step"
		if b >= c {
			verdict = "outside the cap"
		}
		step("cap: hash(x-request-id %q) mod 100 = %d, cap %d%% → %s", req.RequestID, b, c, verdict)
		if dec.Reason == partitionmap.ReasonCapped {
			step("result: 200 %s, pool %s", dec.Reason, r.Result.Cluster)
			return r, nil
		}
	}
	if dec.Reason == partitionmap.ReasonTooManyCells {
		step("locality: the box touches %d cells, more than maxCells %d", tr.CellCount, dom.MaxCells)
		step("result: 200 %s, pool %s", dec.Reason, r.Result.Cluster)
		return r, nil
	}
	for _, c := range tr.Cells {
		loc.Cells = append(loc.Cells, partitionmap.CellKey(c, dom.GridDeg))
	}
	var scores []string
	for _, sc := range tr.Scores {
		loc.Scores = append(loc.Scores, Score{Replica: sc.Replica, Score: sc.Score})
		scores = append(scores, fmt.Sprintf("%s %d/%d", sc.Replica, sc.Score, len(tr.Partitions)))
	}
	var held []string
	for _, p := range tr.Partitions {
		held = append(held, p+" (held by "+strings.Join(m.Holders(p), ", ")+")")
	}
	step("locality: %d cell(s) %s; partitions %s; scores %s", tr.CellCount, list(loc.Cells), list(held), list(scores))
	if dec.Replica != "" {
		step("result: 200 %s → replica %s, cluster %s", dec.Reason, dec.Replica, r.Result.Cluster)
	} else {
		step("result: no healthy lawful replica holds a touched partition → 200 %s, pool %s", dec.Reason, r.Result.Cluster)
	}
	return r, nil
}

func replica(rs topology.ReplicaState, note string) Replica {
	return Replica{Name: rs.Name, Region: rs.Region, Upstream: rs.Upstream.String(), Healthy: rs.Healthy, Note: note}
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// WriteRouteText prints a RouteReport for people.
func WriteRouteText(w io.Writer, r *RouteReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "spatial domain %s/%s: map version %s, data version %s (revision %d)\n", r.Namespace, r.Domain, r.MapVersion, r.DataVersion, r.Revision)
	q := r.Request
	fmt.Fprintf(&b, "request: product %s", q.Product)
	if q.BBox != "" {
		fmt.Fprintf(&b, ", x-spatial-bbox %q", q.BBox)
	}
	if q.CRS != "" {
		fmt.Fprintf(&b, ", x-spatial-crs %q", q.CRS)
	}
	if q.Path != "" {
		fmt.Fprintf(&b, ", path %q", q.Path)
	}
	if q.RequestID != "" {
		fmt.Fprintf(&b, ", x-request-id %q", q.RequestID)
	}
	b.WriteString("\n")
	for _, s := range r.Steps {
		name, rest, _ := strings.Cut(s, ": ")
		fmt.Fprintf(&b, "  %-10s %s\n", name+":", rest)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// FindDomain resolves NAMESPACE/NAME, or NAME the way Envoy matches x-spatial-domain:
// the serving domain of that name.
func FindDomain(snap *topology.Snapshot, name string) (*topology.SpatialState, error) {
	if strings.Contains(name, "/") {
		k, err := topology.ParseKey(name)
		if err != nil {
			return nil, err
		}
		if st := snap.SpatialDomain(k); st != nil {
			return st, nil
		}
		return nil, fmt.Errorf("no such SpatialDomain%s", DidYouMean(suggestDomain(snap, k.String(), true)))
	}
	var found []string
	for _, st := range snap.Spatial() {
		if st.Domain.Key.Name == name {
			if st.Serving() {
				return st, nil
			}
			found = append(found, st.Domain.Key.String())
		}
	}
	if len(found) > 0 {
		return nil, fmt.Errorf("SpatialDomain %s is not serving", strings.Join(found, ", "))
	}
	return nil, fmt.Errorf("no SpatialDomain of that name%s", DidYouMean(suggestDomain(snap, name, false)))
}
