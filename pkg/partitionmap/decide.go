package partitionmap

import (
	"slices"
	"strconv"
)

// Decision reasons (spec "Decision"). A 400 carries "bad_bbox:" + a BBoxError reason.
const (
	ReasonLocality       = "locality"        // 200: the replica holding most touched partitions
	ReasonCapped         = "capped"          // 200 pool: outside the locality share cap
	ReasonNoPartition    = "no_partition"    // 200 pool: no healthy lawful replica holds a touched partition
	ReasonResidency      = "residency"       // 451: no replica in the product's allowed regions
	ReasonUnhealthy      = "unhealthy"       // 503: no lawful replica has capacity
	ReasonUnknownProduct = "unknown_product" // 404: the route names a product the domain does not have
	ReasonScriptError    = "script_error"    // 503: the Lua failed (never produced by the Go reference)
)

// Request is what the decision reads from one HTTP request.
type Request struct {
	Product   string // from the route's metadata
	BBox      string // the x-spatial-bbox header, "" when absent
	CRS       string // the x-spatial-crs header, "" when absent
	Path      string // the :path, with its query
	RequestID string // the x-request-id header, for the share cap
}

// Decision is the outcome for one request: a status, a reason, and for a 200 either a
// replica (by name) or the product's fallback pool.
type Decision struct {
	Status  int
	Reason  string
	Replica string // the chosen replica; "" for the pool or a refusal
	Pool    bool   // the product's fallback pool
}

// Score is one healthy lawful replica's locality score.
type Score struct {
	Replica string
	Score   int
}

// Trace records every step of a decision for explain-route. Decide fills it only when
// given one, so the request path does not pay for it.
type Trace struct {
	HasBBox    bool
	BBox       BBox
	Lawful     []string // replicas in an allowed region, name order
	Unlawful   []string
	Healthy    []string // lawful replicas with capacity
	Unhealthy  []string
	CapBucket  int // hash(x-request-id) mod 100; -1 without a cap
	Cells      []Cell
	CellCount  int
	Partitions []string // touched partitions, name order
	Scores     []Score  // healthy lawful replicas, best first
}

// RequestBucket is hash(id) mod 100 for the share cap: h = (h*31 + byte) mod
// 2147483647 over the bytes of id, from 0. Every intermediate value stays below 2^53,
// so Lua's doubles compute it exactly.
func RequestBucket(id string) int {
	var h int64
	for i := 0; i < len(id); i++ {
		h = (h*31 + int64(id[i])) % 2147483647
	}
	return int(h % 100)
}

// Decide runs the decision of spec "Decision" in its fixed order: parse, residency,
// health, locality (with the cap and maxCells), fallback. health[i] says whether replica
// i (name order) has selectable capacity. tr, when non-nil, receives every step.
func (m *Map) Decide(req Request, health []bool, tr *Trace) Decision {
	if tr != nil {
		*tr = Trace{CapBucket: -1}
	}
	p := m.productIndex(req.Product)
	if p < 0 {
		return Decision{Status: 404, Reason: ReasonUnknownProduct}
	}
	var q queryBBox
	if req.BBox == "" || req.CRS == "" {
		q = scanQuery(req.Path)
	}
	box, hasBox, err := bboxFrom(req.BBox, req.CRS, q)
	if err != nil {
		return Decision{Status: 400, Reason: err.Error()}
	}
	if tr != nil {
		tr.HasBBox, tr.BBox = hasBox, box
	}

	lawful := m.lawful[p]
	if tr != nil {
		m.traceResidency(tr, lawful, health)
	}
	if len(lawful) == 0 {
		return Decision{Status: 451, Reason: ReasonResidency}
	}
	anyHealthy := false
	for _, r := range lawful {
		if healthy(health, r) {
			anyHealthy = true
			break
		}
	}
	if !anyHealthy {
		return Decision{Status: 503, Reason: ReasonUnhealthy}
	}
	pool := func(reason string) Decision { return Decision{Status: 200, Reason: reason, Pool: true} }
	if !hasBox {
		return pool(ReasonNoBBox)
	}
	if c := m.domain.CapPercent; c != NoCap {
		b := RequestBucket(req.RequestID)
		if tr != nil {
			tr.CapBucket = b
		}
		if b >= c {
			return pool(ReasonCapped)
		}
	}
	g := m.domain.GridDeg
	xs, nx, y := spans(box, g)
	n := 0
	for _, s := range xs[:nx] {
		n += s.hi - s.lo + 1
	}
	n *= y.hi - y.lo + 1
	if tr != nil {
		tr.CellCount = n
	}
	if n > m.domain.MaxCells {
		return pool(ReasonTooManyCells)
	}

	// Stack buffers keep a decision allocation-free for ordinary domains.
	var seenBuf [256]bool
	var scoreBuf [64]int
	var seen []bool
	var score []int
	if np := len(m.partitions); np <= len(seenBuf) {
		seen = seenBuf[:np]
	} else {
		seen = make([]bool, np)
	}
	if nr := len(m.domain.Replicas); nr <= len(scoreBuf) {
		score = scoreBuf[:nr]
	} else {
		score = make([]int, nr)
	}
	for _, s := range xs[:nx] {
		for kx := s.lo; kx <= s.hi; kx++ {
			for ky := y.lo; ky <= y.hi; ky++ {
				if tr != nil {
					tr.Cells = append(tr.Cells, Cell{X: kx, Y: ky})
				}
				for _, pi := range m.cellPartitions(kx, ky) {
					if seen[pi] {
						continue
					}
					seen[pi] = true
					for _, r := range m.holders[pi] {
						score[r]++
					}
				}
			}
		}
	}
	best, bestScore := int32(-1), 0
	for _, r := range lawful {
		if healthy(health, r) && score[r] > bestScore {
			best, bestScore = r, score[r]
		}
	}
	if tr != nil {
		m.traceLocality(tr, seen, score, lawful, health)
	}
	if best < 0 {
		return pool(ReasonNoPartition)
	}
	return Decision{Status: 200, Reason: ReasonLocality, Replica: m.domain.Replicas[best].Name}
}

func healthy(health []bool, r int32) bool { return int(r) < len(health) && health[r] }

func (m *Map) traceResidency(tr *Trace, lawful []int32, health []bool) {
	for i, r := range m.domain.Replicas {
		switch {
		case !slices.Contains(lawful, int32(i)):
			tr.Unlawful = append(tr.Unlawful, r.Name)
		case healthy(health, int32(i)):
			tr.Lawful = append(tr.Lawful, r.Name)
			tr.Healthy = append(tr.Healthy, r.Name)
		default:
			tr.Lawful = append(tr.Lawful, r.Name)
			tr.Unhealthy = append(tr.Unhealthy, r.Name)
		}
	}
}

func (m *Map) traceLocality(tr *Trace, seen []bool, score []int, lawful []int32, health []bool) {
	for i, s := range seen {
		if s {
			tr.Partitions = append(tr.Partitions, m.partitions[i])
		}
	}
	for _, r := range lawful {
		if healthy(health, r) {
			tr.Scores = append(tr.Scores, Score{Replica: m.domain.Replicas[r].Name, Score: score[r]})
		}
	}
	// Best first: score descending, then name (lawful is in name order; the sort is stable).
	slices.SortStableFunc(tr.Scores, func(a, b Score) int { return b.Score - a.Score })
}

// CellKey is the readable key of a cell on a grid: "X*G:Y*G" in degrees.
func CellKey(c Cell, gridDeg int) string {
	return strconv.Itoa(c.X*gridDeg) + ":" + strconv.Itoa(c.Y*gridDeg)
}
