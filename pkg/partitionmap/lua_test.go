package partitionmap

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"

	"poise.dev/poise/pkg/partitionmap/luatest"
)

// diffMap is one map of the differential test with the health and clusters it ships with.
type diffMap struct {
	name   string
	m      *Map
	health []bool
	cl     Clusters
}

func clustersFor(m *Map, health []bool, unresolved map[string]bool) Clusters {
	var cl Clusters
	for _, r := range m.Replicas() {
		if unresolved[r.Name] {
			cl.Replicas = append(cl.Replicas, "")
			continue
		}
		cl.Replicas = append(cl.Replicas, "spatial:default:"+m.domain.Name+":"+r.Name)
	}
	for _, p := range m.domain.Products {
		cl.Pools = append(cl.Pools, "spatial-pool:default:"+m.domain.Name+":"+p.Name)
	}
	return cl
}

// cluster maps a Go decision onto the cluster the Lua would select.
func (d diffMap) cluster(req Request, dec Decision) string {
	switch {
	case dec.Status != 200:
		return ""
	case dec.Pool:
		return d.cl.Pools[d.m.productIndex(req.Product)]
	default:
		return d.cl.Replicas[d.m.ReplicaIndex(dec.Replica)]
	}
}

func randomExtent(rng *rand.Rand, g int) BBox {
	coord := func(limit int) float64 {
		switch rng.IntN(3) {
		case 0: // on a cell edge
			k := rng.IntN(2*limit/g+1) - limit/g
			return math.Max(-float64(limit), math.Min(float64(limit), float64(k*g)))
		case 1:
			return float64(rng.IntN(2*limit+1) - limit)
		default:
			return (rng.Float64()*2 - 1) * float64(limit)
		}
	}
	w, e := coord(180), coord(180)
	s, n := coord(90), coord(90)
	if s > n {
		s, n = n, s
	}
	if rng.IntN(4) != 0 && w > e { // mostly ordinary boxes, some across the antimeridian
		w, e = e, w
	}
	return BBox{West: w, South: s, East: e, North: n}
}

// replicasFor makes n replicas named by nameFmt, on Upstream "up-NAME", spread over
// regions regions named by regionFmt; it returns them and their names.
func replicasFor(n int, nameFmt, regionFmt string, regions int) ([]Replica, []string) {
	var reps []Replica
	var names []string
	for i := range n {
		name := fmt.Sprintf(nameFmt, i)
		reps = append(reps, Replica{name, "up-" + name, fmt.Sprintf(regionFmt, i%regions)})
		names = append(names, name)
	}
	return reps, names
}

func buildDiffMaps(t testing.TB) []diffMap {
	t.Helper()
	rng := rand.New(rand.NewPCG(6, 6))
	var out []diffMap
	add := func(name string, d Domain, parts []Partition, healthSets [][]bool, unresolved map[string]bool) {
		m, _, err := Build(d, parts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, h := range healthSets {
			for j, r := range m.Replicas() {
				if unresolved[r.Name] {
					h[j] = false
				}
			}
			out = append(out, diffMap{name: fmt.Sprintf("%s/health%d", name, i), m: m, health: h, cl: clustersFor(m, h, unresolved)})
		}
	}
	randomParts := func(n, g int, replicas []string) []Partition {
		var ps []Partition
		for i := range n {
			var holders []string
			for _, r := range replicas {
				if rng.IntN(3) == 0 {
					holders = append(holders, r)
				}
			}
			if len(holders) == 0 {
				holders = []string{replicas[rng.IntN(len(replicas))]}
			}
			ps = append(ps, Partition{Name: fmt.Sprintf("p%03d", i), Extent: randomExtent(rng, g), Replicas: holders})
		}
		return ps
	}

	// The cadastre example: Europe and North America, a product restricted to the EU.
	cad := Domain{Name: "cadastre", GridDeg: 5, MaxCells: 256, CapPercent: NoCap,
		Replicas: []Replica{{"eu-west", "cad-eu-west", "eu-west"}, {"eu-central", "cad-eu-central", "eu-central"},
			{"us-east", "cad-us-east", "us-east"}, {"eu-north", "cad-eu-north", "eu-north"}},
		Products: []Product{{"parcels", "/collections/parcels", []string{"eu-west", "eu-central"}},
			{"buildings", "/collections/buildings", []string{"eu-west", "eu-central", "us-east", "eu-north"}},
			{"us-roads", "/collections/roads", []string{"us-east"}},
			{"asia", "/collections/asia", []string{"ap-south"}}}}
	cadParts := []Partition{
		{"fr", BBox{-5, 40, 10, 52}, []string{"eu-west", "eu-central"}},
		{"de", BBox{5, 45, 15, 55}, []string{"eu-central"}},
		{"ie", BBox{-11, 51, -5, 56}, []string{"eu-west"}},
		{"us-ne", BBox{-80, 35, -65, 48}, []string{"us-east"}},
		{"pacific", BBox{170, -20, -170, 10}, []string{"us-east", "eu-west"}},
		{"nordic", BBox{5, 55, 30, 70}, []string{"eu-north", "eu-central"}},
	}
	cadParts = append(cadParts, randomParts(10, 5, []string{"eu-west", "eu-central", "us-east", "eu-north"})...)
	add("cadastre", cad, cadParts, [][]bool{{true, true, true, true}, {false, true, true, true}, {false, false, true, false}},
		map[string]bool{"eu-north": true})

	// A fine grid with a share cap and a small maxCells.
	reps, names := replicasFor(8, "r%d", "region-%d", 4)
	fine := Domain{Name: "fine.grid", GridDeg: 1, MaxCells: 64, CapPercent: 37, Replicas: reps,
		Products: []Product{{"a", "/a", []string{"region-0", "region-1"}}, {"b", "/b", []string{"region-2", "region-3", "region-0"}},
			{"c", "/c", []string{"region-3"}}}}
	add("fine", fine, randomParts(40, 1, names), [][]bool{{true, true, true, true, true, true, true, true},
		{true, false, true, false, false, true, true, false}}, nil)

	// A grid that divides 180 but not 90: the last latitude row is only partly on Earth.
	twenty := Domain{Name: "twenty", GridDeg: 20, MaxCells: 30, CapPercent: 0, Replicas: reps[:3],
		Products: []Product{{"x", "/x", []string{"region-0", "region-1", "region-2"}}}}
	add("twenty-cap0", twenty, randomParts(12, 20, names[:3]), [][]bool{{true, true, true}}, nil)
	twenty.CapPercent = NoCap
	add("twenty", twenty, randomParts(12, 20, names[:3]), [][]bool{{true, false, true}}, nil)

	// One cell for the whole world, a full cap.
	world := Domain{Name: "world", GridDeg: 180, MaxCells: 1, CapPercent: 100, Replicas: reps[:4],
		Products: []Product{{"x", "/x", []string{"region-0", "region-1", "region-2", "region-3"}}}}
	add("world", world, randomParts(5, 180, names[:4]), [][]bool{{false, true, true, true}}, nil)

	// Ties everywhere: every partition is held by two replicas, so equal scores are
	// the rule and the name tie-break decides.
	tieReps := reps[:4]
	ties := Domain{Name: "ties", GridDeg: 30, MaxCells: 72, CapPercent: NoCap, Replicas: tieReps,
		Products: []Product{{"x", "/x", []string{"region-0", "region-1", "region-2", "region-3"}}}}
	var tieParts []Partition
	for i := range 24 {
		w, so := float64(i%12*30-180), float64(i/12*60-60)
		tieParts = append(tieParts, Partition{Name: fmt.Sprintf("t%02d", i), Extent: BBox{West: w, South: so, East: w + 30, North: so + 60},
			Replicas: []string{names[i%4], names[(i+1+i/12)%4]}})
	}
	add("ties", ties, tieParts, [][]bool{{true, true, true, true}, {true, false, true, true}}, nil)

	// More replicas and partitions than Decide's stack buffers hold.
	many, manyNames := replicasFor(70, "m%02d", "z%d", 7)
	big := Domain{Name: "big", GridDeg: 3, MaxCells: 4000, CapPercent: NoCap, Replicas: many,
		Products: []Product{{"all", "/all", []string{"z0", "z1", "z2", "z3", "z4", "z5", "z6"}}, {"some", "/some", []string{"z1", "z4"}}}}
	h := make([]bool, 70)
	for i := range h {
		h[i] = i%5 != 0
	}
	add("big", big, randomParts(300, 3, manyNames), [][]bool{h}, nil)
	return out
}

var adversarialNumbers = []string{
	"0x10", "0X1p4", "1e5", "1E5", "1e-5", "inf", "-inf", "Inf", "infinity", "nan", "NaN", "-nan",
	" 5", "5 ", "\t5", "", "+", "-", ".", "1_0", "--5", "+-5", "5..5", "5.5.5", "+.5", "5.", ".5", "-.5", "-0", "+0",
	"000001.5000", "1234567890123456789012345678901.", "12345678901234567890123456789012", "123456789012345678901234567890123",
	"١", "５", "5\x00", "1,5", "0.1", "179.99999999999997", "180.00000000000003", "90.000000000000014", "-90.00000000000001",
}

// number writes a coordinate of an axis of half-extent limit on grid g.
func number(rng *rand.Rand, g, limit int) string {
	switch rng.IntN(20) {
	case 0:
		return adversarialNumbers[rng.IntN(len(adversarialNumbers))]
	case 1, 2: // a cell edge
		k := rng.IntN(2*limit/g+3) - limit/g - 1
		return strconv.Itoa(k * g)
	case 3, 4: // one float step either side of an edge
		k := rng.IntN(2*limit/g+1) - limit/g
		v := math.Nextafter(float64(k*g), math.Inf(2*rng.IntN(2)-1))
		return strconv.FormatFloat(v, 'f', -1, 64)
	case 5:
		return []string{"180", "-180", "90", "-90", "180.0", "-90.000", "0", "-0.0"}[rng.IntN(8)]
	case 6:
		return strconv.Itoa(rng.IntN(2*limit+41) - limit - 20)
	default:
		v := (rng.Float64()*2 - 1) * float64(limit) * 1.02
		return strconv.FormatFloat(v, 'f', rng.IntN(18)-1, 64)
	}
}

var (
	goodCRS = []string{"", "", "", "CRS84", "crs84", "OGC:CRS84", "http://www.opengis.net/def/crs/OGC/1.3/CRS84",
		"EPSG:4326", "epsg:4326", "http://www.opengis.net/def/crs/EPSG/0/4326", "urn:ogc:def:crs:EPSG::4326"}
	badCRS = []string{"EPSG:3857", "CRS83", " CRS84", "\u212aRS84", "http://www.opengis.net/def/crs/EPSG/0/3857", "epsg:4326 "}
)

func escapeQuery(s string, rng *rand.Rand) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ',' && rng.IntN(2) == 0:
			b.WriteString("%2C")
		case c == '+' && rng.IntN(2) == 0:
			b.WriteString("%2B")
		case c == ' ' && rng.IntN(2) == 0:
			b.WriteString("+")
		case c == ':' || c == '/':
			if rng.IntN(2) == 0 {
				fmt.Fprintf(&b, "%%%02X", c)
			} else {
				b.WriteByte(c)
			}
		case c == '&' || c == '=' || c == '#' || c == '%' || c == '?' || c < 0x21 || c >= 0x7f:
			fmt.Fprintf(&b, "%%%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// randomRequest makes one random or adversarial request for a map.
func randomRequest(rng *rand.Rand, m *Map) (req Request, bboxAbsent, crsAbsent bool) {
	d := m.domain
	g := d.GridDeg
	req.Product = "unknown"
	if rng.IntN(40) != 0 {
		req.Product = d.Products[rng.IntN(len(d.Products))].Name
	}
	crs := goodCRS[rng.IntN(len(goodCRS))]
	if rng.IntN(12) == 0 {
		crs = badCRS[rng.IntN(len(badCRS))]
	}
	swap := strings.Contains(strings.ToLower(crs), "4326")
	arity := 4
	switch rng.IntN(20) {
	case 0:
		arity = 6
	case 1:
		arity = 3 + rng.IntN(5)
	}
	var nums []string
	for i := range arity {
		limit := 180
		if i%2 == 1 {
			limit = 90
		}
		if swap {
			limit = 270 - limit
		}
		nums = append(nums, number(rng, g, limit))
	}
	if arity == 4 && rng.IntN(3) == 0 { // a tiny box or a point around one value
		nums[2], nums[3] = nums[0], nums[1]
	}
	raw := strings.Join(nums, ",")
	if rng.IntN(100) == 0 {
		raw = strings.Repeat("1,", 200) + "1"
	}
	path := "/collections/items"
	var params []string
	bboxAbsent, crsAbsent = true, true
	switch rng.IntN(10) {
	case 0: // no bbox at all
	case 1, 2, 3: // in the query
		params = append(params, "bbox="+escapeQuery(raw, rng))
		if rng.IntN(15) == 0 {
			params = append(params, "bbox="+escapeQuery(raw, rng))
		}
	case 4: // header and a different query
		req.BBox = raw
		bboxAbsent = false
		params = append(params, "bbox=1,2,3,4")
	default:
		req.BBox = raw
		bboxAbsent = false
		if rng.IntN(30) == 0 {
			req.BBox = ""
		}
	}
	if crs != "" || rng.IntN(5) == 0 {
		if rng.IntN(2) == 0 {
			req.CRS = crs
			crsAbsent = false
		} else {
			params = append(params, "bbox-crs="+escapeQuery(crs, rng))
			if rng.IntN(15) == 0 {
				params = append(params, "bbox-crs=CRS84")
			}
		}
	}
	if rng.IntN(4) == 0 {
		params = append(params, "limit=10", "", "f=json")
	}
	rng.Shuffle(len(params), func(i, j int) { params[i], params[j] = params[j], params[i] })
	if len(params) > 0 {
		path += "?" + strings.Join(params, "&")
	}
	req.Path = path
	switch rng.IntN(4) {
	case 0:
	default:
		req.RequestID = fmt.Sprintf("%08x-%04x-%04x", rng.Uint32(), rng.IntN(65536), rng.IntN(65536))
	}
	return req, bboxAbsent, crsAbsent
}

type luaCase struct {
	req                   Request
	bboxAbsent, crsAbsent bool
}

// runCases runs the chunk under LuaJIT for each case (see luatest.Run).
func runCases(t testing.TB, bin, chunk string, cases []luaCase, extra ...string) []string {
	t.Helper()
	reqs := make([]luatest.Request, len(cases))
	for i, c := range cases {
		r := c.req
		reqs[i] = luatest.Request{Product: r.Product, BBox: r.BBox, CRS: r.CRS, Path: r.Path, RequestID: r.RequestID,
			NoBBox: c.bboxAbsent, NoCRS: c.crsAbsent}
	}
	return luatest.Run(t, bin, chunk, reqs, extra...)
}

// TestLuaMatchesGo runs the generated chunk under the real LuaJIT with a stub request
// handle and compares status, reason and cluster with the Go reference on random and
// adversarial requests over several maps.
func TestLuaMatchesGo(t *testing.T) {
	t.Parallel()
	bin := luatest.Need(t)
	perMap := 4000
	if testing.Short() {
		perMap = 300
	}
	rng := rand.New(rand.NewPCG(60, 61))
	total, mismatches := 0, 0
	reasons := map[string]int{}
	for _, dm := range buildDiffMaps(t) {
		chunk, err := dm.m.RenderLua(dm.health, 7, dm.cl)
		if err != nil {
			t.Fatalf("%s: %v", dm.name, err)
		}
		cases := make([]luaCase, perMap)
		for j := range cases {
			r, ba, ca := randomRequest(rng, dm.m)
			cases[j] = luaCase{r, ba, ca}
		}
		got := runCases(t, bin, chunk, cases)
		if len(got) != len(cases) {
			t.Fatalf("%s: %d results for %d requests", dm.name, len(got), len(cases))
		}
		for j, c := range cases {
			dec := dm.m.Decide(c.req, dm.health, nil)
			want := fmt.Sprintf("%d\t%s\t%s", dec.Status, dec.Reason, dm.cluster(c.req, dec))
			reasons[dec.Reason]++
			total++
			if got[j] != want {
				mismatches++
				if mismatches <= 20 {
					t.Errorf("%s request %d %+v (bbox absent %v, crs absent %v):\n  lua %q\n  go  %q", dm.name, j, c.req, c.bboxAbsent, c.crsAbsent, got[j], want)
				}
			}
		}
	}
	keys := make([]string, 0, len(reasons))
	for k := range reasons {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var summary []string
	for _, k := range keys {
		summary = append(summary, fmt.Sprintf("%s=%d", k, reasons[k]))
	}
	t.Logf("%d requests over %d map/health variants, %d mismatches; reasons: %s", total, len(buildDiffMaps(t)), mismatches, strings.Join(summary, " "))
	if mismatches > 0 {
		t.Fatalf("%d of %d decisions differ between LuaJIT and Go", mismatches, total)
	}
	// Every outcome must have been exercised, or the comparison proves little.
	for _, r := range []string{ReasonLocality, ReasonNoBBox, ReasonCapped, ReasonTooManyCells, ReasonNoPartition,
		ReasonResidency, ReasonUnhealthy, ReasonUnknownProduct, "bad_bbox:" + ReasonArity, "bad_bbox:" + ReasonNumber,
		"bad_bbox:" + ReasonCRS, "bad_bbox:" + ReasonRange, "bad_bbox:" + ReasonOrder, "bad_bbox:" + ReasonDuplicate, "bad_bbox:" + ReasonLength} {
		if reasons[r] == 0 && !testing.Short() {
			t.Errorf("no request ended with reason %s", r)
		}
	}
}

// TestLuaDecisionCost measures the pure decision cost in LuaJIT over a mixed request set
// (reported in the log; bounded loosely so a pathological slowdown fails).
func TestLuaDecisionCost(t *testing.T) {
	t.Parallel()
	bin := luatest.Need(t)
	if testing.Short() {
		t.Skip("skipping the LuaJIT timing in -short mode")
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for _, dm := range buildDiffMaps(t)[:1] {
		chunk, err := dm.m.RenderLua(dm.health, 1, dm.cl)
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []string{"mixed", "locality"} {
			var cases []luaCase
			for len(cases) < 2000 {
				r, ba, ca := randomRequest(rng, dm.m)
				if kind == "locality" && dm.m.Decide(r, dm.health, nil).Reason != ReasonLocality {
					continue
				}
				cases = append(cases, luaCase{r, ba, ca})
			}
			out := runCases(t, bin, chunk, cases, "200")
			f := strings.Fields(out[0])
			ns, err := strconv.ParseFloat(f[3], 64)
			if err != nil {
				t.Fatalf("harness output %q: %v", out[0], err)
			}
			t.Logf("%s (%s requests): %s decisions, %.0f ns per decision in LuaJIT", dm.name, kind, f[1], ns)
			if ns > 100_000 {
				t.Errorf("%.0f ns per decision: far above the few microseconds expected", ns)
			}
		}
	}
}

// TestLuaLoadsTheLargestMap: a 1° grid with every one of its 64,800 cells occupied is
// the largest DATA a domain can produce; LuaJIT must load it (a chunk's constants are
// limited) and decide as Go does.
func TestLuaLoadsTheLargestMap(t *testing.T) {
	t.Parallel()
	bin := luatest.Need(t)
	dom := Domain{Name: "world", GridDeg: 1, MaxCells: 256, CapPercent: NoCap,
		Replicas: []Replica{{"a", "ua", "r"}, {"b", "ub", "r"}}, Products: []Product{{"p", "/p", []string{"r"}}}}
	m, _, err := Build(dom, []Partition{{"all", BBox{-180, -90, 180, 90}, []string{"a"}}, {"north", BBox{-180, 0, 180, 90}, []string{"b"}},
		{"corner", BBox{179, 89, 180, 90}, []string{"b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if m.OccupiedCells() != 64800 {
		t.Fatalf("%d occupied cells", m.OccupiedCells())
	}
	h := []bool{true, true}
	cl := Clusters{Replicas: []string{"ca", "cb"}, Pools: []string{"pool"}}
	src, err := m.RenderLua(h, 1, cl)
	if err != nil {
		t.Fatal(err)
	}
	cases := []luaCase{{req: Request{Product: "p", BBox: "10,-10,11,-9"}, crsAbsent: true}, {req: Request{Product: "p", BBox: "179.5,89.5,180,90"}, crsAbsent: true},
		{req: Request{Product: "p", BBox: "-180,-90,-179,-89"}, crsAbsent: true}, {req: Request{Product: "p", BBox: "0,0,15,15"}, crsAbsent: true}}
	got := runCases(t, bin, src, cases)
	d := diffMap{m: m, health: h, cl: cl}
	for i, c := range cases {
		dec := m.Decide(c.req, h, nil)
		if want := fmt.Sprintf("%d\t%s\t%s", dec.Status, dec.Reason, d.cluster(c.req, dec)); got[i] != want {
			t.Errorf("%+v: lua %q, go %q", c.req, got[i], want)
		}
	}
	t.Logf("DATA of %d cells: %d bytes of Lua", m.OccupiedCells(), len(src))
}
