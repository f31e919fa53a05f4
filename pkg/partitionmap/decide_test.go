package partitionmap

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// exampleDomain is the cadastre of examples/spatial: Europe and North America, parcels
// restricted to the EU.
func exampleDomain() (Domain, []Partition) {
	d := Domain{Name: "cadastre", GridDeg: 5, MaxCells: 256, CapPercent: NoCap,
		Replicas: []Replica{{"us-east", "cadastre-us-east", "us-east"}, {"eu-west", "cadastre-eu-west", "eu-west"},
			{"eu-central", "cadastre-eu-central", "eu-central"}},
		Products: []Product{{"parcels", "/collections/parcels", []string{"eu-west", "eu-central"}},
			{"buildings", "/collections/buildings", []string{"eu-west", "eu-central", "us-east"}},
			{"mines", "/collections/mines", []string{"ap-south"}}}}
	parts := []Partition{
		{"iberia", BBox{-10, 35, 5, 45}, []string{"eu-west"}},
		{"france", BBox{-5, 40, 10, 50}, []string{"eu-west", "eu-central"}},
		{"germany", BBox{5, 45, 15, 55}, []string{"eu-central"}},
		{"poland", BBox{15, 50, 25, 55}, []string{"eu-central"}},
		{"new-england", BBox{-75, 40, -65, 50}, []string{"us-east"}},
		{"ireland", BBox{-10, 50, -5, 55}, []string{"eu-west", "us-east"}},
	}
	return d, parts
}

func mustBuild(t testing.TB, d Domain, parts []Partition) *Map {
	t.Helper()
	m, problems, err := Build(d, parts)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if p.Reason != ProblemNoLawfulReplica {
			t.Fatalf("unexpected problem: %v", p)
		}
	}
	return m
}

func TestDecide(t *testing.T) {
	t.Parallel()
	d, parts := exampleDomain()
	m := mustBuild(t, d, parts)
	// replicas in name order: eu-central, eu-west, us-east
	all := []bool{true, true, true}
	tests := []struct {
		name    string
		req     Request
		health  []bool
		status  int
		reason  string
		replica string
		pool    bool
	}{
		{name: "germany goes to eu-central", req: Request{Product: "parcels", BBox: "8,48,9,49"}, status: 200, reason: ReasonLocality, replica: "eu-central"},
		{name: "iberia goes to eu-west", req: Request{Product: "parcels", BBox: "-8,37,-7,38"}, status: 200, reason: ReasonLocality, replica: "eu-west"},
		{name: "query bbox", req: Request{Product: "parcels", Path: "/collections/parcels/items?bbox=8,48,9,49"}, status: 200, reason: ReasonLocality, replica: "eu-central"},
		{name: "percent-encoded query bbox", req: Request{Product: "parcels", Path: "/x?f=json&bbox=8%2C48%2C9%2C49"}, status: 200, reason: ReasonLocality, replica: "eu-central"},
		{name: "header wins over query", req: Request{Product: "parcels", BBox: "-8,37,-7,38", Path: "/x?bbox=8,48,9,49"}, status: 200, reason: ReasonLocality, replica: "eu-west"},
		{name: "epsg 4326 swaps", req: Request{Product: "parcels", BBox: "48,8,49,9", CRS: "EPSG:4326"}, status: 200, reason: ReasonLocality, replica: "eu-central"},
		{name: "epsg 4326 from the query", req: Request{Product: "parcels", Path: "/x?bbox=48,8,49,9&bbox-crs=http://www.opengis.net/def/crs/EPSG/0/4326"}, status: 200, reason: ReasonLocality, replica: "eu-central"},
		{name: "six numbers", req: Request{Product: "parcels", BBox: "8,48,-100,9,49,100"}, status: 200, reason: ReasonLocality, replica: "eu-central"},
		// france and germany touched: eu-central holds both, eu-west one.
		{name: "most partitions wins", req: Request{Product: "parcels", BBox: "7,46,8,47"}, status: 200, reason: ReasonLocality, replica: "eu-central"},
		// france alone (held by both): the tie goes to the first name.
		{name: "tie broken by name", req: Request{Product: "parcels", BBox: "1,46,2,47"}, status: 200, reason: ReasonLocality, replica: "eu-central"},
		// ireland is held by eu-west and us-east; buildings may use both.
		{name: "ireland for buildings", req: Request{Product: "buildings", BBox: "-8,52,-7,53"}, status: 200, reason: ReasonLocality, replica: "eu-west"},
		// New England is only held by us-east, which parcels may not use: residency wins
		// over the nearer, unlawful replica, and the lawful pool serves it.
		{name: "residency beats locality", req: Request{Product: "parcels", BBox: "-72,42,-71,43"}, status: 200, reason: ReasonNoPartition, pool: true},
		{name: "new england for buildings", req: Request{Product: "buildings", BBox: "-72,42,-71,43"}, status: 200, reason: ReasonLocality, replica: "us-east"},
		{name: "unhealthy holder skipped", req: Request{Product: "parcels", BBox: "20,51,21,52"}, health: []bool{false, true, true}, status: 200, reason: ReasonNoPartition, pool: true},
		{name: "unhealthy best falls to next", req: Request{Product: "parcels", BBox: "8,48,9,49"}, health: []bool{false, true, true}, status: 200, reason: ReasonLocality, replica: "eu-west"},
		{name: "no lawful replica is 451", req: Request{Product: "mines", BBox: "8,48,9,49"}, status: 451, reason: ReasonResidency},
		{name: "451 even without bbox", req: Request{Product: "mines"}, status: 451, reason: ReasonResidency},
		{name: "no healthy lawful replica is 503", req: Request{Product: "parcels", BBox: "8,48,9,49"}, health: []bool{false, false, true}, status: 503, reason: ReasonUnhealthy},
		{name: "no bbox falls back", req: Request{Product: "parcels", Path: "/collections/parcels/items"}, status: 200, reason: ReasonNoBBox, pool: true},
		{name: "empty header is no bbox", req: Request{Product: "parcels", BBox: ""}, status: 200, reason: ReasonNoBBox, pool: true},
		{name: "ocean falls back", req: Request{Product: "parcels", BBox: "-40,30,-39,31"}, status: 200, reason: ReasonNoPartition, pool: true},
		{name: "huge box falls back", req: Request{Product: "parcels", BBox: "-180,-90,180,90"}, status: 200, reason: ReasonTooManyCells, pool: true},
		{name: "antimeridian box touching both ends", req: Request{Product: "buildings", BBox: "170,40,-170,45"}, status: 200, reason: ReasonNoPartition, pool: true},
		// box edge exactly on the cell edge at lon 5 does not touch germany's column
		{name: "edge does not touch the next cell", req: Request{Product: "parcels", BBox: "-10,35,5,40"}, status: 200, reason: ReasonLocality, replica: "eu-west"},
		{name: "degenerate box on an edge takes the cell starting there", req: Request{Product: "parcels", BBox: "15,50,15,50"}, status: 200, reason: ReasonLocality, replica: "eu-central"},
		{name: "bad number", req: Request{Product: "parcels", BBox: "0x1,2,3,4"}, status: 400, reason: "bad_bbox:number"},
		{name: "exponent", req: Request{Product: "parcels", BBox: "1e1,2,3,4"}, status: 400, reason: "bad_bbox:number"},
		{name: "nan", req: Request{Product: "parcels", BBox: "nan,2,3,4"}, status: 400, reason: "bad_bbox:number"},
		{name: "arity", req: Request{Product: "parcels", BBox: "1,2,3"}, status: 400, reason: "bad_bbox:arity"},
		{name: "range", req: Request{Product: "parcels", BBox: "1,2,3,91"}, status: 400, reason: "bad_bbox:range"},
		{name: "order", req: Request{Product: "parcels", BBox: "1,5,3,4"}, status: 400, reason: "bad_bbox:order"},
		{name: "crs", req: Request{Product: "parcels", BBox: "1,2,3,4", CRS: "EPSG:3857"}, status: 400, reason: "bad_bbox:crs"},
		{name: "duplicate query bbox", req: Request{Product: "parcels", Path: "/x?bbox=1,2,3,4&bbox=1,2,3,4"}, status: 400, reason: "bad_bbox:duplicate"},
		{name: "duplicate bbox-crs", req: Request{Product: "parcels", Path: "/x?bbox=1,2,3,4&bbox-crs=CRS84&bbox-crs=CRS84"}, status: 400, reason: "bad_bbox:duplicate"},
		{name: "400 comes before 451", req: Request{Product: "mines", BBox: "1,2,3"}, status: 400, reason: "bad_bbox:arity"},
		{name: "unknown product", req: Request{Product: "nope", BBox: "1,2,3,4"}, status: 404, reason: ReasonUnknownProduct},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.health
			if h == nil {
				h = all
			}
			var tr Trace
			got := m.Decide(tt.req, h, &tr)
			want := Decision{Status: tt.status, Reason: tt.reason, Replica: tt.replica, Pool: tt.pool}
			if got != want {
				t.Fatalf("Decide = %+v, want %+v (trace %+v)", got, want, tr)
			}
			if again := m.Decide(tt.req, h, nil); again != got {
				t.Fatalf("without a trace: %+v, with: %+v", again, got)
			}
		})
	}
}

func TestDecideCap(t *testing.T) {
	t.Parallel()
	d, parts := exampleDomain()
	d.CapPercent = 30
	m := mustBuild(t, d, parts)
	h := []bool{true, true, true}
	locality, capped := 0, 0
	for i := range 10000 {
		id := "req-" + string(rune('a'+i%26)) + string(rune('a'+(i/26)%26)) + string(rune('a'+(i/676)%26))
		dec := m.Decide(Request{Product: "parcels", BBox: "8,48,9,49", RequestID: id}, h, nil)
		switch want := RequestBucket(id) < 30; {
		case want && dec.Reason == ReasonLocality:
			locality++
		case !want && dec.Reason == ReasonCapped && dec.Pool:
			capped++
		default:
			t.Fatalf("id %q bucket %d: %+v", id, RequestBucket(id), dec)
		}
	}
	// The hash spreads request ids: the share is near the cap.
	if locality < 2500 || locality > 3500 {
		t.Errorf("%d of 10000 took locality with a 30%% cap", locality)
	}
	t.Logf("cap 30%%: %d locality, %d capped", locality, capped)
	if RequestBucket("") != 0 || RequestBucket("a") != 97 {
		t.Errorf("bucket of \"\" = %d, of \"a\" = %d", RequestBucket(""), RequestBucket("a"))
	}
}

func TestBuildProblems(t *testing.T) {
	t.Parallel()
	d, parts := exampleDomain()
	parts = append(parts,
		Partition{"atlantis", BBox{-30, 30, -20, 40}, []string{"eu-west", "eu-south"}},
		Partition{"broken", BBox{0, 10, 5, 5}, []string{"eu-west"}})
	m, problems, err := Build(d, parts)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range problems {
		got[p.Kind+"/"+p.Name] = p.Reason + " " + p.Field
	}
	want := map[string]string{
		"Partition/atlantis": ProblemUnknownReplica + " spec.replicas[1]",
		"Partition/broken":   ProblemInvalidExtent + " spec.extent",
		"Product/mines":      ProblemNoLawfulReplica + " spec.products[mines].allowedRegions",
	}
	if len(got) != len(want) {
		t.Fatalf("problems %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if len(m.Partitions()) != 6 || slices.Contains(m.Partitions(), "atlantis") {
		t.Errorf("partitions %v: the two bad ones must be left out", m.Partitions())
	}
	// The rest of the domain keeps working.
	if dec := m.Decide(Request{Product: "parcels", BBox: "8,48,9,49"}, []bool{true, true, true}, nil); dec.Replica != "eu-central" {
		t.Errorf("decision with problems present: %+v", dec)
	}

	bad := []Domain{
		{Name: "g", GridDeg: 7, MaxCells: 1, CapPercent: NoCap},
		{Name: "m", GridDeg: 5, MaxCells: 0, CapPercent: NoCap},
		{Name: "c", GridDeg: 5, MaxCells: 1, CapPercent: 101},
		{Name: "dup", GridDeg: 5, MaxCells: 1, CapPercent: NoCap, Replicas: []Replica{{"a", "u", "r"}, {"a", "u", "r"}}},
		{Name: "quote", GridDeg: 5, MaxCells: 1, CapPercent: NoCap, Replicas: []Replica{{"a\"b", "u", "r"}}},
		{Name: "region", GridDeg: 5, MaxCells: 1, CapPercent: NoCap, Products: []Product{{"p", "/", []string{"eu west"}}}},
		{Name: "dup-product", GridDeg: 5, MaxCells: 1, CapPercent: NoCap, Products: []Product{{"p", "/a", nil}, {"p", "/b", nil}}},
		{Name: "bad name]]", GridDeg: 5, MaxCells: 1, CapPercent: NoCap},
	}
	for _, d := range bad {
		if _, _, err := Build(d, nil); !errors.Is(err, ErrInvalidDomain) {
			t.Errorf("domain %q: err %v, want ErrInvalidDomain", d.Name, err)
		}
	}
}

// Identical input in any order gives the identical map, version and Lua, byte for byte.
func TestBuildIsOrderIndependent(t *testing.T) {
	t.Parallel()
	d, parts := exampleDomain()
	ref := mustBuild(t, d, parts)
	h := []bool{true, false, true}
	cl := Clusters{Replicas: []string{"a", "b", "c"}, Pools: []string{"p1", "p2", "p3"}}
	refLua, err := ref.RenderLua(h, 3, cl)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		d2 := d
		d2.Replicas = slices.Clone(d.Replicas)
		d2.Products = slices.Clone(d.Products)
		p2 := slices.Clone(parts)
		rng.Shuffle(len(d2.Replicas), func(i, j int) { d2.Replicas[i], d2.Replicas[j] = d2.Replicas[j], d2.Replicas[i] })
		rng.Shuffle(len(d2.Products), func(i, j int) { d2.Products[i], d2.Products[j] = d2.Products[j], d2.Products[i] })
		rng.Shuffle(len(p2), func(i, j int) { p2[i], p2[j] = p2[j], p2[i] })
		m := mustBuild(t, d2, p2)
		if m.Version() != ref.Version() {
			t.Fatalf("version %s, want %s", m.Version(), ref.Version())
		}
		lua, err := m.RenderLua(h, 3, cl)
		if err != nil {
			t.Fatal(err)
		}
		if lua != refLua {
			t.Fatal("the Lua differs for the same input in another order")
		}
	}
	// A change to any partition changes the version.
	parts[0].Replicas = []string{"eu-central"}
	if mustBuild(t, d, parts).Version() == ref.Version() {
		t.Error("the version did not change with a partition's holders")
	}
	if ref.DataVersion(h) != ref.Version()+"-h101" {
		t.Errorf("data version %s", ref.DataVersion(h))
	}
}

func TestRenderDataRefusesUnsafeIdentifiers(t *testing.T) {
	t.Parallel()
	d, parts := exampleDomain()
	m := mustBuild(t, d, parts)
	h := []bool{true, true, true}
	for _, cl := range []Clusters{
		{Replicas: []string{"a", "b\"..os.exit()..\"", "c"}, Pools: []string{"p1", "p2", "p3"}},
		{Replicas: []string{"a", "b", "c"}, Pools: []string{"p1", "p 2", "p3"}},
		{Replicas: []string{"a", "b"}, Pools: []string{"p1", "p2", "p3"}},
		{Replicas: []string{"", "b", "c"}, Pools: []string{"p1", "p2", "p3"}}, // healthy without a cluster
	} {
		if _, err := m.RenderData(h, 1, cl); err == nil {
			t.Errorf("RenderData accepted %+v", cl)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	d, parts := exampleDomain()
	m := mustBuild(b, d, parts)
	h := []bool{true, true, true}
	for _, bc := range []struct {
		name string
		req  Request
	}{
		{"locality-1-cell", Request{Product: "parcels", BBox: "8,48,9,49"}},
		{"locality-24-cells", Request{Product: "parcels", BBox: "-10,35,20,55"}},
		{"query", Request{Product: "parcels", Path: "/collections/parcels/items?limit=10&bbox=8%2C48%2C9%2C49"}},
		{"reject", Request{Product: "parcels", BBox: "1e1,2,3,4"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m.Decide(bc.req, h, nil)
			}
		})
	}
}
