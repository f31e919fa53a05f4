package hashring

import (
	"fmt"
	"math"
	"testing"
)

// The vectors of this file are Envoy's own unit tests, each case naming the
// file and test it comes from (envoyproxy/envoy, the versions docs/keys.md
// lists).
const (
	envoyHashTest   = "test/common/common/hash_test.cc"
	envoyRingTest   = "test/extensions/load_balancing_policies/ring_hash/ring_hash_lb_test.cc"
	envoyMaglevTest = "test/extensions/load_balancing_policies/maglev/maglev_lb_test.cc"
)

func TestEnvoyHashVectors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from string
		in   string
		fn   func(string) uint64
		want uint64
	}{
		{"TEST(Hash, xxHash)", "foo", func(s string) uint64 { return xxHash64(s, 0) }, 3728699739546630719},
		{"TEST(Hash, xxHash)", "bar", func(s string) uint64 { return xxHash64(s, 0) }, 5234164152756840025},
		{"TEST(Hash, xxHash)", "foo\nbar", func(s string) uint64 { return xxHash64(s, 0) }, 8917841378505826757},
		{"TEST(Hash, xxHash)", "lyft", func(s string) uint64 { return xxHash64(s, 0) }, 4400747396090729504},
		{"TEST(Hash, xxHash)", "", func(s string) uint64 { return xxHash64(s, 0) }, 17241709254077376921},
		{"TEST(Hash, murmurHash2)", "foo", func(s string) uint64 { return murmurHash2(s, stdHashSeed) }, 9631199822919835226},
		{"TEST(Hash, murmurHash2)", "bar", func(s string) uint64 { return murmurHash2(s, stdHashSeed) }, 11474628671133349555},
		{"TEST(Hash, murmurHash2)", "foo\nbar", func(s string) uint64 { return murmurHash2(s, stdHashSeed) }, 16306510975912980159},
		{"TEST(Hash, murmurHash2)", "lyft", func(s string) uint64 { return murmurHash2(s, stdHashSeed) }, 12847078931730529320},
		{"TEST(Hash, murmurHash2)", "", func(s string) uint64 { return murmurHash2(s, stdHashSeed) }, 6142509188972423790},
	} {
		if got := tc.fn(tc.in); got != tc.want {
			t.Errorf("%s %s(%q) = %d, want %d", envoyHashTest, tc.from, tc.in, got, tc.want)
		}
	}
	// TEST(Hash, xxHashWithVector): {"foo", "bar"} chained, in that order.
	if got := xxHash64Chain([]string{"foo", "bar"}); got != 17745830980996999794 {
		t.Errorf("%s TEST(Hash, xxHashWithVector) = %d, want 17745830980996999794", envoyHashTest, got)
	}
	// The header hash sorts the values first (HeaderHashMethod), so order
	// does not matter, and a single value is plain xxHash64.
	a, _ := RequestHash(EnvoyRingHash, "foo", "bar")
	b, _ := RequestHash(EnvoyMaglev, "bar", "foo")
	if a != b || a != xxHash64Chain([]string{"bar", "foo"}) {
		t.Errorf("Envoy header hash of {foo, bar} = %d and %d, want both the chain over the sorted values", a, b)
	}
	if h, ok := RequestHash(EnvoyRingHash, "lyft"); !ok || h != 4400747396090729504 {
		t.Errorf("RequestHash(Envoy, lyft) = %d, %v", h, ok)
	}
	if _, ok := RequestHash(EnvoyRingHash); ok {
		t.Error("RequestHash with no value yields a hash")
	}
}

// ports is Envoy's test hosts "tcp://127.0.0.1:<port>", weight 1, healthy.
func ports(ps ...int) []Endpoint {
	eps := make([]Endpoint, len(ps))
	for i, p := range ps {
		eps[i] = Endpoint{Address: fmt.Sprintf("127.0.0.1:%d", p), Weight: 1, LocalityWeight: 1, Healthy: true}
	}
	return eps
}

// named is makeTestHost(info, "<port>", "tcp://127.0.0.1:<port>"): hostname
// and port alike; withKey sets the envoy.lb hash_key to it too.
func named(withKey bool, ps ...int) []Endpoint {
	eps := ports(ps...)
	for i := range eps {
		eps[i].Hostname = fmt.Sprint(ps[i])
		if withKey {
			eps[i].HashKey = eps[i].Hostname
		}
	}
	return eps
}

func weighted(eps []Endpoint, ws ...uint32) []Endpoint {
	for i, w := range ws {
		eps[i].Weight = w
	}
	return eps
}

func zoned(eps []Endpoint, zones string, lws map[byte]uint32) []Endpoint {
	for i := range eps {
		z := zones[i]
		eps[i].Locality = Locality{Zone: string(z)}
		eps[i].LocalityWeight = lws[z]
	}
	return eps
}

type ringEntry struct {
	hash uint64
	ep   int
}

func mustBuild(t *testing.T, c Client, cfg Config, eps []Endpoint) *Table {
	t.Helper()
	tab, err := Build(c, cfg, eps)
	if err != nil {
		t.Fatalf("Build(%s): %v", c, err)
	}
	return tab
}

func checkRing(t *testing.T, from string, tab *Table, want []ringEntry) {
	t.Helper()
	if tab.Len() != len(want) {
		t.Fatalf("%s: ring of %d entries, want %d", from, tab.Len(), len(want))
	}
	for i, w := range want {
		if h, e := tab.Entry(i); h != w.hash || e != w.ep {
			t.Errorf("%s: entry %d = (%d, endpoint %d), want (%d, endpoint %d)", from, i, h, e, w.hash, w.ep)
		}
	}
}

func checkLen(t *testing.T, from string, tab *Table, n int) {
	t.Helper()
	if tab.Len() != n {
		t.Errorf("%s: %d entries, want %d", from, tab.Len(), n)
	}
}

func checkPicks(t *testing.T, from string, tab *Table, picks map[uint64]int) {
	t.Helper()
	for h, want := range picks {
		if got, ok := tab.Pick(h); !ok || got != want {
			t.Errorf("%s: Pick(%d) = %d, %v, want %d", from, h, got, ok, want)
		}
	}
}

func checkEntries(t *testing.T, from string, tab *Table, lo, hi uint64) {
	t.Helper()
	gotLo, gotHi := uint64(math.MaxUint64), uint64(0)
	for _, s := range tab.Shares() {
		gotLo, gotHi = min(gotLo, s.Entries), max(gotHi, s.Entries)
	}
	if gotLo != lo || gotHi != hi {
		t.Errorf("%s: entries per endpoint from %d to %d, want %d to %d", from, gotLo, gotHi, lo, hi)
	}
}

// sweep counts the picks of n hashes spread as Envoy's tests spread them:
// i × (2^64-1)/n.
func sweep(tab *Table, n uint64, endpoints int) []int {
	counts := make([]int, endpoints)
	step := uint64(math.MaxUint64) / n
	for i := uint64(0); i < n; i++ {
		e, _ := tab.Pick(i * step)
		counts[e]++
	}
	return counts
}

var basicRing = []ringEntry{ // RingHashLoadBalancerTest.Basic's "hash ring" table
	{833437586790550860, 4}, {928266305478181108, 2}, {1033482794131418490, 0},
	{3551244743356806947, 5}, {3851675632748031481, 3}, {5583722120771150861, 1},
	{6311230543546372928, 1}, {7700377290971790572, 3}, {13144177310400110813, 5},
	{13444792449719432967, 2}, {15516499411664133160, 4}, {16117243373044804889, 0},
}

var hostnameRing = []ringEntry{ // BasicWithHostname's and BasicWithMetadataHashKey's
	{1975508444536362413, 5}, {2376063919839173711, 5}, {2386806903309390596, 3},
	{6749904478991551885, 4}, {6803900775736438537, 3}, {7225015537174310577, 2},
	{8787465352164086522, 0}, {11282020843382717940, 2}, {13723418369486627818, 1},
	{13776502110861797421, 0}, {14338313586354474791, 1}, {15364271037087512980, 4},
}

func TestEnvoyRingHashVectors(t *testing.T) {
	t.Parallel()
	min12 := Config{MinRingSize: 12}
	t.Run("Basic", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, Basic)"
		tab := mustBuild(t, EnvoyRingHash, min12, ports(90, 91, 92, 93, 94, 95))
		checkRing(t, from, tab, basicRing)
		checkEntries(t, from, tab, 2, 2)
		checkPicks(t, from, tab, map[uint64]int{0: 4, math.MaxUint64: 4, 3551244743356806947: 5, 3551244743356806948: 3, 16117243373044804880: 0})
		// No healthy host: panic places them all, the same ring.
		eps := ports(90, 91, 92, 93, 94, 95)
		for i := range eps {
			eps[i].Healthy = false
		}
		panicked := mustBuild(t, EnvoyRingHash, Config{MinRingSize: 12, Panic: true}, eps)
		checkPicks(t, from+" (in panic)", panicked, map[uint64]int{0: 4})
	})
	t.Run("BasicFailover", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashFailoverTest, BasicFailover)"
		checkEntries(t, from, mustBuild(t, EnvoyRingHash, min12, ports(82)), 12, 12)
	})
	t.Run("BasicWithMurmur2", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, BasicWithMurmur2)"
		tab := mustBuild(t, EnvoyRingHash, Config{MinRingSize: 12, HashFunction: MurmurHash2}, ports(80, 81, 82, 83, 84, 85))
		checkRing(t, from, tab, []ringEntry{
			{1358027074129602068, 5}, {4361834613929391114, 3}, {7224494972555149682, 4},
			{7701421856454313576, 1}, {8649315368077433379, 2}, {8739448859063030639, 4},
			{9887544217113020895, 1}, {10150910876324007731, 2}, {15168472011420622455, 3},
			{15427156902705414897, 0}, {16375050414328759093, 5}, {17613279263364193813, 0},
		})
		checkEntries(t, from, tab, 2, 2)
		checkPicks(t, from, tab, map[uint64]int{0: 5, math.MaxUint64: 5, 1358027074129602068: 5, 1358027074129602069: 3, 10150910876324007730: 2})
	})
	for _, tc := range []struct {
		name string
		key  bool
	}{{"BasicWithHostname", false}, {"BasicWithMetadataHashKey", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, " + tc.name + ")"
			tab := mustBuild(t, EnvoyRingHash, Config{MinRingSize: 12, UseHostname: true}, named(tc.key, 90, 91, 92, 93, 94, 95))
			checkRing(t, from, tab, hostnameRing)
			checkEntries(t, from, tab, 2, 2)
			checkPicks(t, from, tab, map[uint64]int{0: 5, math.MaxUint64: 5, 7225015537174310577: 2, 6803900775736438537: 3})
		})
	}
	t.Run("BasicWithRetryHostPredicate", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, BasicWithRetryHostPredicate)"
		tab := mustBuild(t, EnvoyRingHash, min12, ports(90, 91, 92, 93, 94, 95))
		for _, tc := range []struct {
			attempt uint32
			want    int
		}{{0, 4}, {1, 2}, {2, 0}, {13, 2}} {
			if got, ok, err := tab.PickAttempt(0, tc.attempt); err != nil || !ok || got != tc.want {
				t.Errorf("%s: PickAttempt(0, %d) = %d, %v, %v, want %d", from, tc.attempt, got, ok, err, tc.want)
			}
		}
	})
	t.Run("UnevenHosts", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, UnevenHosts)"
		tab := mustBuild(t, EnvoyRingHash, Config{MinRingSize: 3}, ports(80, 81))
		checkRing(t, from, tab, []ringEntry{{5454692015285649509, 0}, {7859399908942313493, 1}, {13838424394637650569, 0}, {16064866803292627174, 1}})
		checkEntries(t, from, tab, 2, 2)
		checkPicks(t, from, tab, map[uint64]int{0: 0})
		tab = mustBuild(t, EnvoyRingHash, Config{MinRingSize: 3}, ports(81, 82))
		checkRing(t, from, tab, []ringEntry{{7859399908942313493, 0}, {8241336090459785962, 1}, {12882406409176325258, 1}, {16064866803292627174, 0}})
		checkPicks(t, from, tab, map[uint64]int{0: 0})
	})
	tiny := map[uint64]int{928266305478181108: 2, 4443673547860492590: 2, 5583722120771150861: 1, 6311230543546372928: 1, 13444792449719432967: 2, 16117243373044804889: 0}
	t.Run("HostWeightedTinyRing", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, HostWeightedTinyRing)"
		tab := mustBuild(t, EnvoyRingHash, Config{MinRingSize: 6, MaxRingSize: 6}, weighted(ports(90, 91, 92), 1, 2, 3))
		checkLen(t, from, tab, 6)
		checkEntries(t, from, tab, 1, 3)
		checkPicks(t, from, tab, tiny)
	})
	t.Run("HostWeightedLargeRing", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, HostWeightedLargeRing)"
		tab := mustBuild(t, EnvoyRingHash, Config{MinRingSize: 6144}, weighted(ports(90, 91, 92), 1, 2, 3))
		checkEntries(t, from, tab, 1024, 3072)
		if got := sweep(tab, 6000, 3); fmt.Sprint(got) != "[987 1932 3081]" {
			t.Errorf("%s: picks of 6000 hashes %v, want [987 1932 3081]", from, got)
		}
	})
	t.Run("ZeroLocalityWeights", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, ZeroLocalityWeights)"
		tab := mustBuild(t, EnvoyRingHash, Config{LocalityWeighted: true}, zoned(ports(90, 91), "AB", map[byte]uint32{'A': 0, 'B': 0}))
		if _, ok := tab.Pick(0); ok || tab.Len() != 0 {
			t.Errorf("%s: a host was picked from %d entries", from, tab.Len())
		}
	})
	t.Run("LocalityWeightedTinyRing", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, LocalityWeightedTinyRing)"
		eps := zoned(ports(90, 91, 92, 93), "ABCD", map[byte]uint32{'A': 1, 'B': 2, 'C': 3, 'D': 0})
		tab := mustBuild(t, EnvoyRingHash, Config{MinRingSize: 6, MaxRingSize: 6, LocalityWeighted: true}, eps)
		checkLen(t, from, tab, 6)
		// min_hashes_per_host counts placed hosts only; :93 is not placed.
		if s := tab.Shares(); s[0].Entries != 1 || s[2].Entries != 3 || s[3].Entries != 0 {
			t.Errorf("%s: entries %v", from, s)
		}
		checkPicks(t, from, tab, tiny)
	})
	t.Run("LocalityWeightedLargeRing", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, LocalityWeightedLargeRing)"
		eps := zoned(ports(90, 91, 92, 93), "ABCD", map[byte]uint32{'A': 1, 'B': 2, 'C': 3, 'D': 0})
		tab := mustBuild(t, EnvoyRingHash, Config{MinRingSize: 6144, LocalityWeighted: true}, eps)
		checkLen(t, from, tab, 6144)
		if got := sweep(tab, 6000, 4); fmt.Sprint(got) != "[987 1932 3081 0]" {
			t.Errorf("%s: picks of 6000 hashes %v, want [987 1932 3081 0]", from, got)
		}
	})
	hostAndLocality := func() []Endpoint {
		return zoned(weighted(ports(90, 91, 92, 93), 1, 2, 1, 2), "AABB", map[byte]uint32{'A': 1, 'B': 2})
	}
	t.Run("HostAndLocalityWeightedTinyRing", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, HostAndLocalityWeightedTinyRing)"
		tab := mustBuild(t, EnvoyRingHash, Config{MinRingSize: 9, MaxRingSize: 9, LocalityWeighted: true}, hostAndLocality())
		checkLen(t, from, tab, 9)
		checkEntries(t, from, tab, 1, 4)
		checkPicks(t, from, tab, map[uint64]int{
			928266305478181108: 2, 3851675632748031481: 3, 5583722120771150861: 1,
			6311230543546372928: 1, 7700377290971790572: 3, 12559126875973811811: 3,
			13444792449719432967: 2, 13784988426630141778: 3, 16117243373044804889: 0,
		})
	})
	t.Run("HostAndLocalityWeightedLargeRing", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, HostAndLocalityWeightedLargeRing)"
		tab := mustBuild(t, EnvoyRingHash, Config{MinRingSize: 9216, LocalityWeighted: true}, hostAndLocality())
		checkLen(t, from, tab, 9216)
		checkEntries(t, from, tab, 1024, 4096)
		if got := sweep(tab, 9000, 4); fmt.Sprint(got) != "[924 2009 2053 4014]" {
			t.Errorf("%s: picks of 9000 hashes %v, want [924 2009 2053 4014]", from, got)
		}
	})
	t.Run("SmallFractionalScale", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, SmallFractionalScale)"
		tab := mustBuild(t, EnvoyRingHash, Config{MinRingSize: 2, MaxRingSize: 2}, ports(90, 91, 92, 93))
		checkLen(t, from, tab, 2)
		checkEntries(t, from, tab, 0, 1)
		zeroes, sum := 0, 0
		for _, c := range sweep(tab, 1024, 4) {
			if c == 0 {
				zeroes++
			}
			sum += c
		}
		if zeroes != 2 || sum != 1024 {
			t.Errorf("%s: %d hosts without a pick, %d picks", from, zeroes, sum)
		}
	})
	t.Run("LargeFractionalScale", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, LargeFractionalScale)"
		tab := mustBuild(t, EnvoyRingHash, Config{MinRingSize: 1023, MaxRingSize: 1023}, ports(90, 91))
		checkLen(t, from, tab, 1023)
		checkEntries(t, from, tab, 511, 512)
		if got := sweep(tab, 1023, 2); fmt.Sprint(got) != "[526 497]" {
			t.Errorf("%s: picks of 1023 hashes %v, want [526 497]", from, got)
		}
	})
	t.Run("LopsidedWeightSmallScale", func(t *testing.T) {
		t.Parallel()
		from := envoyRingTest + " TEST_P(RingHashLoadBalancerTest, LopsidedWeightSmallScale)"
		tab := mustBuild(t, EnvoyRingHash, Config{MinRingSize: 1024, MaxRingSize: 1024, LocalityWeighted: true}, lopsided())
		checkLen(t, from, tab, 1024)
		checkEntries(t, from, tab, 0, 1016)
		checkPicks(t, from, tab, map[uint64]int{
			11664790346325243808: 1, 15894554872961148518: 128, 13958138884277627155: 256,
			15803774069438192949: 384, 3829253010855396576: 512, 17918147347826565154: 640,
			6442769608292299103: 768, 5881074926069334434: 896,
		})
	})
}

// lopsided is the LopsidedWeight tests' hosts: :0 alone in zone A (weight
// 127), :1 to :1023 in zone B (weight 1).
func lopsided() []Endpoint {
	ps := make([]int, 1024)
	zones := make([]byte, 1024)
	for i := range ps {
		ps[i] = i
		zones[i] = 'B'
	}
	zones[0] = 'A'
	return zoned(ports(ps...), string(zones), map[byte]uint32{'A': 127, 'B': 1})
}

func checkSlots(t *testing.T, from string, tab *Table, want []int) {
	t.Helper()
	if tab.Len() != len(want) {
		t.Fatalf("%s: table of %d slots, want %d", from, tab.Len(), len(want))
	}
	// The tests pick hashes 0 to 3 × size - 1.
	for i := 0; i < 3*len(want); i++ {
		if got, ok := tab.Pick(uint64(i)); !ok || got != want[i%len(want)] {
			t.Errorf("%s: Pick(%d) = %d, want %d", from, i, got, want[i%len(want)])
		}
	}
}

func TestEnvoyMaglevVectors(t *testing.T) {
	t.Parallel()
	t7 := Config{TableSize: 7}
	name := func(n string) string { return envoyMaglevTest + " TEST_F(MaglevLoadBalancerTest, " + n + ")" }
	t.Run("SingleHost", func(t *testing.T) {
		t.Parallel()
		checkSlots(t, name("SingleHost"), mustBuild(t, EnvoyMaglev, t7, ports(90)), []int{0, 0, 0, 0, 0, 0, 0})
	})
	t.Run("Basic", func(t *testing.T) {
		t.Parallel()
		tab := mustBuild(t, EnvoyMaglev, t7, ports(90, 91, 92, 93, 94, 95))
		checkSlots(t, name("Basic"), tab, []int{2, 4, 0, 1, 5, 0, 3})
		checkEntries(t, name("Basic"), tab, 1, 2)
	})
	for _, tc := range []struct {
		name string
		key  bool
	}{{"BasicWithHostName", false}, {"BasicWithMetadataHashKey", true}, {"BasicWithBoundedLoad", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// BasicWithBoundedLoad's picks are the table's: no host is loaded.
			tab := mustBuild(t, EnvoyMaglev, Config{TableSize: 7, UseHostname: true}, named(tc.key, 90, 91, 92, 93, 94, 95))
			checkSlots(t, name(tc.name), tab, []int{2, 5, 0, 3, 4, 1, 0})
			checkEntries(t, name(tc.name), tab, 1, 2)
		})
	}
	t.Run("BasicWithRetryHostPredicate", func(t *testing.T) {
		t.Parallel()
		tab := mustBuild(t, EnvoyMaglev, t7, ports(90, 91, 92, 93, 94, 95))
		for _, tc := range []struct {
			attempt uint32
			want    int
		}{{0, 1}, {1, 0}, {2, 5}} {
			if got, ok, err := tab.PickAttempt(10, tc.attempt); err != nil || !ok || got != tc.want {
				t.Errorf("%s: PickAttempt(10, %d) = %d, %v, %v, want %d", name("BasicWithRetryHostPredicate"), tc.attempt, got, ok, err, tc.want)
			}
		}
	})
	t.Run("BasicStability", func(t *testing.T) {
		t.Parallel()
		// The same hosts in another order fill the same table.
		eps := ports(93, 90, 95, 91, 94, 92)
		tab := mustBuild(t, EnvoyMaglev, t7, eps)
		idx := []int{1, 3, 5, 0, 4, 2} // input index of :90 ... :95
		want := []int{2, 4, 0, 1, 5, 0, 3}
		for i := range want {
			want[i] = idx[want[i]]
		}
		checkSlots(t, name("BasicStability"), tab, want)
	})
	t.Run("Weighted", func(t *testing.T) {
		t.Parallel()
		tab := mustBuild(t, EnvoyMaglev, Config{TableSize: 17}, weighted(ports(90, 91), 1, 2))
		checkSlots(t, name("Weighted"), tab, []int{1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1})
		checkEntries(t, name("Weighted"), tab, 6, 11)
	})
	t.Run("WeightedSingleHost", func(t *testing.T) {
		t.Parallel()
		tab := mustBuild(t, EnvoyMaglev, Config{TableSize: 17}, weighted(ports(90), 7))
		checkSlots(t, name("WeightedSingleHost"), tab, make([]int, 17))
	})
	same := []int{1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 0, 1}
	t.Run("LocalityWeightedSameLocalityWeights", func(t *testing.T) {
		t.Parallel()
		eps := zoned(weighted(ports(90, 91), 1, 2), "AB", map[byte]uint32{'A': 1, 'B': 1})
		tab := mustBuild(t, EnvoyMaglev, Config{TableSize: 17, LocalityWeighted: true}, eps)
		checkSlots(t, name("LocalityWeightedSameLocalityWeights"), tab, same)
		checkEntries(t, name("LocalityWeightedSameLocalityWeights"), tab, 8, 9)
	})
	t.Run("LocalityWeightedDifferentLocalityWeights", func(t *testing.T) {
		t.Parallel()
		eps := zoned(weighted(ports(90, 91, 92), 1, 2, 3), "ACB", map[byte]uint32{'A': 8, 'B': 0, 'C': 2})
		tab := mustBuild(t, EnvoyMaglev, Config{TableSize: 17, LocalityWeighted: true}, eps)
		checkSlots(t, name("LocalityWeightedDifferentLocalityWeights"), tab, []int{1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0})
		if s := tab.Shares(); s[0].Entries != 13 || s[1].Entries != 4 || s[2].Entries != 0 {
			t.Errorf("%s: entries %v", name("LocalityWeightedDifferentLocalityWeights"), s)
		}
	})
	t.Run("LocalityWeightedAllZeroLocalityWeights", func(t *testing.T) {
		t.Parallel()
		eps := zoned(ports(90), "A", map[byte]uint32{'A': 0})
		tab := mustBuild(t, EnvoyMaglev, Config{TableSize: 17, LocalityWeighted: true}, eps)
		if _, ok := tab.Pick(0); ok {
			t.Errorf("%s: a host was picked", name("LocalityWeightedAllZeroLocalityWeights"))
		}
	})
	t.Run("LocalityWeightedGlobalPanic", func(t *testing.T) {
		t.Parallel()
		eps := zoned(weighted(ports(90, 91), 1, 2), "AB", map[byte]uint32{'A': 1, 'B': 1})
		eps[0].Healthy, eps[1].Healthy = false, false
		tab := mustBuild(t, EnvoyMaglev, Config{TableSize: 17, LocalityWeighted: true, Panic: true}, eps)
		checkSlots(t, name("LocalityWeightedGlobalPanic"), tab, same)
		checkEntries(t, name("LocalityWeightedGlobalPanic"), tab, 8, 9)
	})
	t.Run("LocalityWeightedLopsided", func(t *testing.T) {
		t.Parallel()
		tab := mustBuild(t, EnvoyMaglev, Config{LocalityWeighted: true}, lopsided())
		counts := make([]int, 1024)
		for i := uint64(0); i < DefaultTableSize; i++ {
			e, _ := tab.Pick(i)
			counts[e]++
		}
		for i := 1; i < 1024; i++ {
			if counts[i] != 1 {
				t.Fatalf("%s: :%d has %d slots, want 1", name("LocalityWeightedLopsided"), i, counts[i])
			}
		}
		if counts[0] != DefaultTableSize-1023 {
			t.Errorf("%s: :0 has %d slots, want %d", name("LocalityWeightedLopsided"), counts[0], DefaultTableSize-1023)
		}
		checkEntries(t, name("LocalityWeightedLopsided"), tab, 1, DefaultTableSize-1023)
	})
	t.Run("NoPrimeNumber", func(t *testing.T) {
		t.Parallel()
		if _, err := Build(EnvoyMaglev, Config{TableSize: 8}, ports(90)); err == nil {
			t.Errorf("%s: table size 8 was taken", name("NoPrimeNumber"))
		}
	})
}
