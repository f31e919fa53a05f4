package hashring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
)

// randomEndpoints is n endpoints over up to three localities, with random
// weights, some hash keys and some unhealthy, listed locality by locality
// as an assignment lists them.
func randomEndpoints(r *rand.Rand, n int) []Endpoint {
	eps := make([]Endpoint, n)
	zones := 1 + r.IntN(3)
	lw := []uint32{1 + r.Uint32N(5), 1 + r.Uint32N(5), 1 + r.Uint32N(5)}
	for i := range eps {
		z := i * zones / n
		eps[i] = Endpoint{
			Address:        fmt.Sprintf("10.0.%d.%d:8080", z, i),
			Weight:         1 + r.Uint32N(10),
			Locality:       Locality{Region: "r", Zone: fmt.Sprint("z", z)},
			LocalityWeight: lw[z],
			Healthy:        r.IntN(5) != 0,
		}
		if r.IntN(3) == 0 {
			eps[i].HashKey = fmt.Sprint("pod-", i)
		}
	}
	return eps
}

func encode(t *Table) []byte {
	var b []byte
	for i := 0; i < t.Len(); i++ {
		h, e := t.Entry(i)
		b = binary.LittleEndian.AppendUint64(b, h)
		b = binary.LittleEndian.AppendUint32(b, uint32(e))
	}
	return b
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		eps := randomEndpoints(r, 1+r.IntN(40))
		cfg := Config{MinRingSize: 64, MaxRingSize: 512, TableSize: 251, LocalityWeighted: r.IntN(2) == 0}
		for _, c := range Clients {
			a, errA := Build(c, cfg, eps)
			b, errB := Build(c, cfg, slices.Clone(eps))
			if errA != nil || errB != nil {
				t.Fatalf("%s: %v, %v", c, errA, errB)
			}
			if string(encode(a)) != string(encode(b)) {
				t.Fatalf("%s: two builds of one input differ", c)
			}
		}
	}
}

// byAddress is the table as address → entries, for comparing the tables
// of one set of endpoints listed in two orders.
func byAddress(tab *Table, eps []Endpoint) string {
	var b strings.Builder
	for i := 0; i < tab.Len(); i++ {
		h, e := tab.Entry(i)
		fmt.Fprintf(&b, "%d %s\n", h, eps[e].Address)
	}
	return b.String()
}

// TestOrderIndependence: Maglev and grpc-go sort their endpoints by key,
// so the order of the assignment does not matter to them.
func TestOrderIndependence(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		eps := randomEndpoints(r, 2+r.IntN(30))
		shuffled := slices.Clone(eps)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for _, c := range []Client{EnvoyMaglev, GRPCGo} {
			cfg := Config{MinRingSize: 100, MaxRingSize: 300, TableSize: 1009}
			a, b := mustBuild(t, c, cfg, eps), mustBuild(t, c, cfg, shuffled)
			if byAddress(a, eps) != byAddress(b, shuffled) {
				t.Fatalf("%s: the order of the endpoints changed the table", c)
			}
		}
	}
}

// TestGRPCJSKeepsAssignmentOrder: grpc-js lays endpoints out in the
// assignment's order, grpc-go in key order. With room for 2 entries among 4
// equal endpoints, the running target gives one entry to the first and the
// third walked (targets 0.5, 1, 1.5, 2): in grpc-js the first and third
// listed, in grpc-go :90 and :92 whatever the order.
func TestGRPCJSKeepsAssignmentOrder(t *testing.T) {
	t.Parallel()
	cfg := Config{MinRingSize: 2, MaxRingSize: 2}
	for _, order := range [][]int{{90, 91, 92, 93}, {93, 92, 91, 90}, {92, 90, 93, 91}} {
		eps := ports(order...)
		js := mustBuild(t, GRPCJS, cfg, eps).Shares()
		gos := mustBuild(t, GRPCGo, cfg, eps).Shares()
		for i, p := range order {
			wantJS := uint64(1 - i%2)
			wantGo := uint64(0)
			if p == 90 || p == 92 {
				wantGo = 1
			}
			if js[i].Entries != wantJS {
				t.Errorf("grpc-js, order %v: :%d has %d entries, want %d", order, p, js[i].Entries, wantJS)
			}
			if gos[i].Entries != wantGo {
				t.Errorf("grpc-go, order %v: :%d has %d entries, want %d", order, p, gos[i].Entries, wantGo)
			}
		}
	}
}

// TestGRPCJSIgnoresHashKey: grpc-js places endpoints by address only.
func TestGRPCJSIgnoresHashKey(t *testing.T) {
	t.Parallel()
	plain := weighted(ports(1, 2, 3, 4), 1, 2, 3, 4)
	keyed := slices.Clone(plain)
	for i := range keyed {
		keyed[i].HashKey = fmt.Sprint("key-", i)
	}
	if string(encode(mustBuild(t, GRPCJS, Config{}, plain))) != string(encode(mustBuild(t, GRPCJS, Config{}, keyed))) {
		t.Error("grpc-js's ring moved with the hash keys")
	}
	if string(encode(mustBuild(t, GRPCGo, Config{}, plain))) == string(encode(mustBuild(t, GRPCGo, Config{}, keyed))) {
		t.Error("grpc-go's ring did not move with the hash keys")
	}
}

// TestGRPCJSMatchesGRPCGoWhenEqual: with equal weights in one locality, no
// hash key, and the endpoints listed in key order, the two gRPC clients
// build the same ring, and their two searches agree.
func TestGRPCJSMatchesGRPCGoWhenEqual(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 7, 33, 100} {
		ps := make([]int, n)
		for i := range ps {
			ps[i] = 1000 + i
		}
		eps := ports(ps...) // "127.0.0.1:1000" ... sort as listed
		js, gog := mustBuild(t, GRPCJS, Config{}, eps), mustBuild(t, GRPCGo, Config{}, eps)
		if string(encode(js)) != string(encode(gog)) {
			t.Fatalf("%d endpoints: the gRPC clients' rings differ", n)
		}
		r := rand.New(rand.NewPCG(uint64(n), 5))
		for range 1000 {
			h := r.Uint64()
			a, _ := js.Pick(h)
			b, _ := gog.Pick(h)
			if a != b {
				t.Fatalf("%d endpoints: Pick(%d) = %d in grpc-js, %d in grpc-go", n, h, a, b)
			}
		}
	}
}

// TestKetamaIsLowerBound: the ketama search picks the first entry whose
// hash is ≥ the request's, else entry 0, duplicates included.
func TestKetamaIsLowerBound(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(6, 7))
	for range 2000 {
		hs := make([]uint64, 1+r.IntN(20))
		for i := range hs {
			hs[i] = r.Uint64N(50)
		}
		slices.Sort(hs)
		for h := uint64(0); h < 52; h++ {
			want := sort.Search(len(hs), func(i int) bool { return hs[i] >= h })
			if want == len(hs) {
				want = 0
			}
			if got := ketama(hs, h); got != want {
				t.Fatalf("ketama(%v, %d) = %d, want %d", hs, h, got, want)
			}
		}
	}
}

// TestSharesAreExact: the hashes owned sum to 2^64, the millionths to
// 1,000,000, the entries to the table's length; and each entry's first and
// last hash pick its endpoint.
func TestSharesAreExact(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(8, 9))
	for range 30 {
		eps := randomEndpoints(r, 1+r.IntN(25))
		for i := range eps {
			eps[i].Healthy = true
		}
		cfg := Config{MinRingSize: 1 + r.Uint64N(300), TableSize: 97}
		cfg.MaxRingSize = cfg.MinRingSize + r.Uint64N(300)
		for _, c := range Clients {
			tab := mustBuild(t, c, cfg, eps)
			var hashes Count
			var millionths, entries uint64
			for _, s := range tab.Shares() {
				hashes = hashes.add(s.Hashes)
				millionths += s.Millionths
				entries += s.Entries
			}
			if hashes != (Count{Hi: 1}) || millionths != 1_000_000 || entries != uint64(tab.Len()) {
				t.Fatalf("%s: shares sum to %+v hashes, %d millionths, %d entries of %d", c, hashes, millionths, entries, tab.Len())
			}
			for i := 0; i < tab.Len(); i++ {
				h, e := tab.Entry(i)
				if c == EnvoyMaglev {
					if got, _ := tab.Pick(h + uint64(tab.Len())*12345); got != e {
						t.Fatalf("%s: slot %d is %d's, Pick says %d", c, i, e, got)
					}
					continue
				}
				if got, _ := tab.Pick(h); got != e {
					t.Fatalf("%s: entry %d is %d's, Pick(%d) says %d", c, i, e, h, got)
				}
				if i > 0 {
					if prev, _ := tab.Entry(i - 1); prev != h {
						if got, _ := tab.Pick(prev + 1); got != e {
							t.Fatalf("%s: Pick(%d) = %d, want entry %d's %d", c, prev+1, got, i, e)
						}
					}
				}
			}
		}
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", MaxKeyLen+1)
	two := ports(1, 2)
	for _, tc := range []struct {
		name  string
		c     Client
		cfg   Config
		eps   []Endpoint
		err   error
		field string
	}{
		{"too many endpoints", GRPCGo, Config{}, make([]Endpoint, MaxEndpoints+1), ErrBound, "Endpoints"},
		{"zero weight", EnvoyRingHash, Config{}, weighted(ports(1), 0), ErrInvalid, "Endpoints[0].Weight"},
		{"long key", EnvoyMaglev, Config{}, []Endpoint{{Address: "a:1", HashKey: long, Weight: 1, Healthy: true}}, ErrBound, "Endpoints[0].HashKey"},
		{"address twice", GRPCJS, Config{}, append(ports(1), ports(1)...), ErrInvalid, "Endpoints[1].Address"},
		{"two locality weights", GRPCGo, Config{}, zoned(ports(1, 2), "AA", map[byte]uint32{'A': 1}), nil, ""},
		{"min over 8M", EnvoyRingHash, Config{MinRingSize: MaxRingSize + 1, MaxRingSize: MaxRingSize + 1}, two, ErrBound, "Config.MinRingSize"},
		{"max over 8M", GRPCJS, Config{MaxRingSize: MaxRingSize + 1}, two, ErrBound, "Config.MaxRingSize"},
		{"min over max, Envoy", EnvoyRingHash, Config{MinRingSize: 20, MaxRingSize: 10}, two, ErrInvalid, "Config.MinRingSize"},
		{"min over max, grpc-go", GRPCGo, Config{MinRingSize: 20, MaxRingSize: 10}, two, ErrInvalid, "Config.MinRingSize"},
		{"min over max, grpc-js takes it", GRPCJS, Config{MinRingSize: 20, MaxRingSize: 10}, two, nil, ""},
		{"cap over 8M", GRPCGo, Config{RingSizeCap: MaxRingSize + 1}, two, ErrBound, "Config.RingSizeCap"},
		{"table over 5000011", EnvoyMaglev, Config{TableSize: 5000017}, two, ErrBound, "Config.TableSize"},
		{"table not prime", EnvoyMaglev, Config{TableSize: 65536}, two, ErrInvalid, "Config.TableSize"},
		{"murmur for grpc-go", GRPCGo, Config{HashFunction: MurmurHash2}, two, ErrUnsupported, "Config.HashFunction"},
		{"murmur for grpc-js", GRPCJS, Config{HashFunction: MurmurHash2}, two, ErrUnsupported, "Config.HashFunction"},
		{"one hash key twice", EnvoyRingHash, Config{}, func() []Endpoint {
			eps := ports(1, 2)
			eps[0].HashKey, eps[1].HashKey = "k", "k"
			return eps
		}(), ErrTie, "Endpoints[1]"},
		{"one hash key twice, one not placed", EnvoyMaglev, Config{}, func() []Endpoint {
			eps := ports(1, 2)
			eps[0].HashKey, eps[1].HashKey = "k", "k"
			eps[1].Healthy = false
			return eps
		}(), nil, ""},
		{"no hostname", EnvoyRingHash, Config{UseHostname: true}, ports(1), ErrInvalid, "Endpoints[0].Hostname"},
		{"grpc-go legacy weights overflow", GRPCGo, Config{GRPCGoLegacyWeights: true}, func() []Endpoint {
			eps := weighted(ports(1), 1<<20)
			eps[0].LocalityWeight = 1 << 20
			return eps
		}(), ErrWeightOverflow, "Endpoints[0].Weight"},
		{"Envoy weights overflow", EnvoyRingHash, Config{}, weighted(ports(1, 2), 1<<31, 1<<31), ErrWeightOverflow, "Endpoints[1].Weight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.c, tc.cfg, tc.eps)
			if tc.name == "two locality weights" {
				tc.eps[1].LocalityWeight = 2
				_, err = Build(tc.c, tc.cfg, tc.eps)
				tc.err, tc.field = ErrInvalid, "Endpoints[1].LocalityWeight"
			}
			if tc.err == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.Is(err, tc.err) || !errors.As(err, &fe) || fe.Field != tc.field || fe.Client != tc.c {
				t.Fatalf("got %v, want %v on %s", err, tc.err, tc.field)
			}
		})
	}
	tab := mustBuild(t, GRPCGo, Config{}, two)
	if _, _, err := tab.PickAttempt(0, 1); !errors.Is(err, ErrNotEnvoy) {
		t.Errorf("PickAttempt on grpc-go: %v", err)
	}
	if _, err := Build(Client(0), Config{}, two); !errors.Is(err, ErrInvalid) {
		t.Errorf("Build of no client: %v", err)
	}
}

// TestRingSizeCaps: the gRPC clients cap both sizes at RingSizeCap (4096
// unless set); Envoy has no cap but its maximum.
func TestRingSizeCaps(t *testing.T) {
	t.Parallel()
	// The lightest endpoint wants 10002 entries for a whole one.
	eps := weighted(ports(1, 2, 3), 1, 1, 10000)
	for _, tc := range []struct {
		c    Client
		cfg  Config
		want int
	}{
		{EnvoyRingHash, Config{}, 10002},
		{GRPCGo, Config{}, 4096},
		{GRPCJS, Config{}, 4096},
		{GRPCGo, Config{RingSizeCap: 100}, 100},
		{GRPCJS, Config{RingSizeCap: 100, MinRingSize: 8}, 100},
	} {
		if got := mustBuild(t, tc.c, tc.cfg, eps).Len(); got < tc.want-1 || got > tc.want+1 {
			t.Errorf("%s %+v: ring of %d, want %d (±1)", tc.c, tc.cfg, got, tc.want)
		}
	}
}

func TestFusedMultiplyAddBuilds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(10, 11))
	for range 10 {
		eps := randomEndpoints(r, 2+r.IntN(20))
		for _, c := range []Client{EnvoyRingHash, GRPCGo} {
			a := mustBuild(t, c, Config{FusedMultiplyAdd: true}, eps)
			b := mustBuild(t, c, Config{}, eps)
			// Fused or not, the ring differs by at most one entry per endpoint.
			sa, sb := a.Shares(), b.Shares()
			for i := range sa {
				if d := int64(sa[i].Entries) - int64(sb[i].Entries); d > 1 || d < -1 {
					t.Fatalf("%s: endpoint %d has %d entries fused, %d not", c, i, sa[i].Entries, sb[i].Entries)
				}
			}
		}
	}
}
