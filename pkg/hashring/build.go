package hashring

import (
	"cmp"
	"math"
	"math/big"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// placed is one endpoint on a client's structure: its index in the input,
// the key the client hashes it by, and its normalised weight, in the order
// the client walks them.
type placed struct {
	ep  int32
	key string
	w   float64
}

// Table is one client's consistent-hash structure over one priority's
// endpoints: a sorted ring of (hash, endpoint) entries, or a Maglev table of
// slots. It is immutable; every method is safe for concurrent use.
type Table struct {
	client    Client
	endpoints int
	hashes    []uint64 // ring entries' hashes, sorted (ring clients)
	owners    []int32  // ring entries' or Maglev slots' endpoints
	entries   []uint64 // per endpoint: ring entries or slots naming it
}

// Build reproduces client c's structure for the endpoints of one priority,
// listed in the ClusterLoadAssignment's order (each locality's endpoints
// together). It refuses, with a *FieldError naming the field, what the
// client would refuse, what is over a bound, and a tie the client would
// break unpredictably. No endpoint placed gives an empty table: the client
// has no host to pick.
func Build(c Client, cfg Config, eps []Endpoint) (*Table, error) {
	if !c.valid() {
		return nil, refuse(c, "Client", ErrInvalid, "no such client")
	}
	if len(eps) > MaxEndpoints {
		return nil, refuse(c, "Endpoints", ErrBound, "%d endpoints, at most %d", len(eps), MaxEndpoints)
	}
	if err := checkEndpoints(c, eps); err != nil {
		return nil, err
	}
	t := &Table{client: c, endpoints: len(eps), entries: make([]uint64, len(eps))}
	switch c {
	case EnvoyRingHash:
		minRing, maxRing, err := envoyRingSizes(cfg)
		if err != nil {
			return nil, err
		}
		if cfg.HashFunction != XXHash && cfg.HashFunction != MurmurHash2 {
			return nil, refuse(c, "Config.HashFunction", ErrInvalid, "unknown hash function %d", cfg.HashFunction)
		}
		ps, minW, _, err := envoyWeights(c, cfg, eps)
		if err != nil {
			return nil, err
		}
		if err := uniqueKeys(c, ps); err != nil {
			return nil, err
		}
		hash := func(b []byte) uint64 { return xxhash.Sum64(b) }
		if cfg.HashFunction == MurmurHash2 {
			hash = func(b []byte) uint64 { return murmurHash2(b, stdHashSeed) }
		}
		return t, t.ring(ps, minW, minRing, maxRing, hash, cfg.FusedMultiplyAdd, false)
	case EnvoyMaglev:
		size := cfg.TableSize
		if size == 0 {
			size = DefaultTableSize
		}
		if size > MaxTableSize {
			return nil, refuse(c, "Config.TableSize", ErrBound, "%d, at most %d", size, MaxTableSize)
		}
		if !big.NewInt(0).SetUint64(size).ProbablyPrime(20) {
			return nil, refuse(c, "Config.TableSize", ErrInvalid, "%d is not prime", size)
		}
		ps, _, maxW, err := envoyWeights(c, cfg, eps)
		if err != nil {
			return nil, err
		}
		// Envoy fills in the order of its hosts sorted by key; the key
		// order of two hosts with one key falls to their pointers.
		slices.SortFunc(ps, func(a, b placed) int { return cmp.Compare(a.key, b.key) })
		if err := uniqueKeys(c, ps); err != nil {
			return nil, err
		}
		t.maglev(ps, maxW, size)
		return t, nil
	case GRPCGo:
		minRing, maxRing, err := grpcRingSizes(c, cfg)
		if err != nil {
			return nil, err
		}
		ps, minW, err := grpcGoWeights(cfg, eps)
		if err != nil {
			return nil, err
		}
		if err := uniqueKeys(c, ps); err != nil {
			return nil, err
		}
		return t, t.ring(ps, minW, minRing, maxRing, func(b []byte) uint64 { return xxhash.Sum64(b) }, cfg.FusedMultiplyAdd, false)
	default: // GRPCJS
		minRing, maxRing, err := grpcRingSizes(c, cfg)
		if err != nil {
			return nil, err
		}
		ps, minW := grpcJSWeights(eps)
		// V8 rounds every operation: grpc-js never fuses.
		return t, t.ring(ps, minW, minRing, maxRing, func(b []byte) uint64 { return xxhash.Sum64(b) }, false, true)
	}
}

// checkEndpoints refuses what no client takes: a zero weight, an empty or
// overlong key, an address twice, one locality with two weights.
func checkEndpoints(c Client, eps []Endpoint) error {
	addrs := make(map[string]int, len(eps))
	lw := make(map[Locality]uint32)
	for i, e := range eps {
		field := "Endpoints[" + strconv.Itoa(i) + "]"
		if e.Weight == 0 {
			return refuse(c, field+".Weight", ErrInvalid, "0: load_balancing_weight is at least 1")
		}
		if e.Address == "" {
			return refuse(c, field+".Address", ErrInvalid, "empty")
		}
		for _, f := range [...]struct{ name, v string }{{"Address", e.Address}, {"Hostname", e.Hostname}, {"HashKey", e.HashKey}} {
			if len(f.v) > MaxKeyLen {
				return refuse(c, field+"."+f.name, ErrBound, "%d bytes, at most %d", len(f.v), MaxKeyLen)
			}
		}
		if j, dup := addrs[e.Address]; dup {
			return refuse(c, field+".Address", ErrInvalid, "%q is also Endpoints[%d]'s (grpc-go refuses the assignment, Envoy keeps the first, grpc-js merges them)", e.Address, j)
		}
		addrs[e.Address] = i
		if w, seen := lw[e.Locality]; seen && w != e.LocalityWeight {
			return refuse(c, field+".LocalityWeight", ErrInvalid, "%d, but another endpoint of its locality has %d", e.LocalityWeight, w)
		}
		lw[e.Locality] = e.LocalityWeight
	}
	return nil
}

// uniqueKeys refuses two placed endpoints with one key: Envoy and grpc-go
// sort with an unstable sort, so which comes first is not theirs to say.
func uniqueKeys(c Client, ps []placed) error {
	seen := make(map[string]int32, len(ps))
	for _, p := range ps {
		if j, dup := seen[p.key]; dup {
			return refuse(c, "Endpoints["+strconv.Itoa(int(p.ep))+"]", ErrTie, "its key %q is also Endpoints[%d]'s", p.key, j)
		}
		seen[p.key] = p.ep
	}
	return nil
}

// envoyKey is HashingLoadBalancer::hashKey: the hash_key metadata, else the
// hostname or the address.
func envoyKey(cfg Config, e *Endpoint) string {
	switch {
	case e.HashKey != "":
		return e.HashKey
	case cfg.UseHostname:
		return e.Hostname
	}
	return e.Address
}

// ringSizes is a ring client's sizes with the defaults applied, refused
// over the 8M every client allows and, where the client checks it, when the
// minimum is over the maximum.
func ringSizes(c Client, cfg Config, checkOrder bool) (minRing, maxRing uint64, err error) {
	minRing, maxRing = cfg.MinRingSize, cfg.MaxRingSize
	if minRing == 0 {
		minRing = DefaultMinRingSize
	}
	if maxRing == 0 {
		maxRing = DefaultMaxRingSize
	}
	if minRing > MaxRingSize {
		return 0, 0, refuse(c, "Config.MinRingSize", ErrBound, "%d, at most %d", minRing, MaxRingSize)
	}
	if maxRing > MaxRingSize {
		return 0, 0, refuse(c, "Config.MaxRingSize", ErrBound, "%d, at most %d", maxRing, MaxRingSize)
	}
	if checkOrder && minRing > maxRing {
		return 0, 0, refuse(c, "Config.MinRingSize", ErrInvalid, "%d > MaxRingSize %d", minRing, maxRing)
	}
	return minRing, maxRing, nil
}

// envoyRingSizes: Envoy's ring hash refuses min > max in its constructor.
func envoyRingSizes(cfg Config) (minRing, maxRing uint64, err error) {
	return ringSizes(EnvoyRingHash, cfg, true)
}

// grpcRingSizes applies the gRPC clients' defaults, checks and cap: grpc-go
// refuses min > max before capping, grpc-js does not check it.
func grpcRingSizes(c Client, cfg Config) (minRing, maxRing uint64, err error) {
	if cfg.HashFunction != XXHash {
		return 0, 0, refuse(c, "Config.HashFunction", ErrUnsupported, "the gRPC clients refuse any hash function but XX_HASH")
	}
	if minRing, maxRing, err = ringSizes(c, cfg, c == GRPCGo); err != nil {
		return 0, 0, err
	}
	limit := cfg.RingSizeCap
	if limit == 0 {
		limit = DefaultRingSizeCap
	}
	if limit > MaxRingSize {
		return 0, 0, refuse(c, "Config.RingSizeCap", ErrBound, "%d, at most %d", limit, MaxRingSize)
	}
	return min(minRing, limit), min(maxRing, limit), nil
}

// envoyWeights is Envoy's normalizeWeights (thread_aware_lb_impl.cc): the
// healthy hosts (every host in panic), each weight divided by the sum, in
// host order; with locality weighting, per locality in Envoy's locality
// order, times the locality's share. Envoy computes in doubles, and so does
// this, operation for operation: w × (locality share) / sum.
func envoyWeights(c Client, cfg Config, eps []Endpoint) (ps []placed, minW, maxW float64, err error) {
	minW, maxW = 1.0, 0.0
	in := func(e *Endpoint) bool { return cfg.Panic || e.Healthy }
	add := func(hosts []int32, nlw float64) error {
		var sum uint64
		for _, i := range hosts {
			if sum += uint64(eps[i].Weight); sum > math.MaxUint32 {
				return refuse(c, "Endpoints["+strconv.Itoa(int(i))+"].Weight", ErrWeightOverflow, "the weights placed sum past 2^32-1")
			}
		}
		for _, i := range hosts {
			e := &eps[i]
			key := envoyKey(cfg, e)
			if key == "" {
				return refuse(c, "Endpoints["+strconv.Itoa(int(i))+"].Hostname", ErrInvalid, "empty, and Envoy hashes by hostname")
			}
			w := float64(e.Weight) * nlw / float64(sum)
			ps = append(ps, placed{ep: i, key: key, w: w})
			minW, maxW = min(minW, w), max(maxW, w)
		}
		return nil
	}
	if !cfg.LocalityWeighted {
		hosts := make([]int32, 0, len(eps))
		for i := range eps {
			if in(&eps[i]) {
				hosts = append(hosts, int32(i))
			}
		}
		return ps, minW, maxW, add(hosts, 1.0)
	}
	// Envoy's hosts per locality: every host's locality, the node's own
	// first, then in (region, zone, sub_zone) order; the healthy ones of
	// each in host order.
	byLoc := make(map[Locality][]int32)
	var order []Locality
	for i := range eps {
		l := eps[i].Locality
		if _, ok := byLoc[l]; !ok {
			order = append(order, l)
			byLoc[l] = nil
		}
		if in(&eps[i]) {
			byLoc[l] = append(byLoc[l], int32(i))
		}
	}
	slices.SortFunc(order, func(a, b Locality) int {
		switch {
		case cfg.LocalLocality != nil && a == *cfg.LocalLocality:
			return -1
		case cfg.LocalLocality != nil && b == *cfg.LocalLocality:
			return 1
		case a.less(b):
			return -1
		case b.less(a):
			return 1
		}
		return 0
	})
	lw := make(map[Locality]uint32, len(order))
	for i := range eps {
		lw[eps[i].Locality] = eps[i].LocalityWeight
	}
	var sum uint64
	for _, l := range order {
		if sum += uint64(lw[l]); sum > math.MaxUint32 {
			return nil, 0, 0, refuse(c, "Endpoints[].LocalityWeight", ErrWeightOverflow, "the locality weights sum past 2^32-1")
		}
	}
	if sum == 0 {
		return nil, minW, maxW, nil
	}
	for _, l := range order {
		if lw[l] == 0 {
			continue
		}
		if err := add(byLoc[l], float64(lw[l])/float64(sum)); err != nil {
			return nil, 0, 0, err
		}
	}
	return ps, minW, maxW, nil
}

// grpcGoWeights is the weight grpc-go's xDS cluster resolver gives each
// endpoint (cdsbalancer configbuilder.go priorityLocalitiesToEndpoints) and
// the ring's normalisation of it (ringhash ring.go normalizeWeights):
// localities of weight 0 are dropped, the endpoint weight is normalised in
// its locality over every endpoint, healthy or not, the locality weight
// over the priority, both in UQ1.31 fixed point and multiplied (0 becomes
// 1); only HEALTHY and UNKNOWN endpoints are placed; then each weight over
// their uint32 sum as a double, sorted by key.
func grpcGoWeights(cfg Config, eps []Endpoint) ([]placed, float64, error) {
	ws, sum, err := grpcGoAttrWeights(cfg, eps)
	if err != nil {
		return nil, 0, err
	}
	ps := make([]placed, len(ws))
	minW := 1.0
	for i, x := range ws {
		nw := float64(x.w) / float64(sum)
		ps[i] = placed{ep: x.ep, key: x.key, w: nw}
		minW = math.Min(minW, nw)
	}
	slices.SortFunc(ps, func(a, b placed) int { return cmp.Compare(a.key, b.key) })
	return ps, minW, nil
}

// grpcGoWeighted is one placed endpoint with the weight attribute grpc-go's
// cluster resolver gives it.
type grpcGoWeighted struct {
	ep  int32
	key string
	w   uint32
}

// grpcGoAttrWeights is the cluster resolver's half of grpcGoWeights: the
// placed endpoints with their weight attributes, and the attributes' uint32
// sum.
func grpcGoAttrWeights(cfg Config, eps []Endpoint) ([]grpcGoWeighted, uint32, error) {
	const frac = 31
	var lwSum uint64
	ewSum := make(map[Locality]uint64)
	for i := range eps {
		e := &eps[i]
		if e.LocalityWeight == 0 {
			continue
		}
		s, seen := ewSum[e.Locality]
		if !seen {
			if lwSum += uint64(e.LocalityWeight); lwSum > math.MaxUint32 {
				return nil, 0, refuse(GRPCGo, "Endpoints["+strconv.Itoa(i)+"].LocalityWeight", ErrWeightOverflow, "the locality weights sum past 2^32-1 (grpc-go refuses the assignment)")
			}
		}
		if s += uint64(e.Weight); s > math.MaxUint32 {
			return nil, 0, refuse(GRPCGo, "Endpoints["+strconv.Itoa(i)+"].Weight", ErrWeightOverflow, "its locality's weights sum past 2^32-1 (grpc-go refuses the assignment)")
		}
		ewSum[e.Locality] = s
	}
	var ws []grpcGoWeighted
	var sum uint32
	for i := range eps {
		e := &eps[i]
		if e.LocalityWeight == 0 || !e.Healthy {
			continue
		}
		var w uint32
		if cfg.GRPCGoLegacyWeights {
			p := uint64(e.LocalityWeight) * uint64(e.Weight)
			if p > math.MaxUint32 {
				return nil, 0, refuse(GRPCGo, "Endpoints["+strconv.Itoa(i)+"].Weight", ErrWeightOverflow, "locality weight × weight overflows grpc-go's uint32")
			}
			w = uint32(p)
		} else {
			nl := uint32(uint64(e.LocalityWeight) << frac / lwSum)
			ne := uint32(uint64(e.Weight) << frac / ewSum[e.Locality])
			if w = uint32(uint64(ne) * uint64(nl) >> frac); w == 0 {
				w = 1
			}
		}
		if sum+w < sum {
			return nil, 0, refuse(GRPCGo, "Endpoints["+strconv.Itoa(i)+"].Weight", ErrWeightOverflow, "the weights placed sum past grpc-go's uint32")
		}
		sum += w
		key := e.HashKey
		if key == "" {
			key = e.Address
		}
		ws = append(ws, grpcGoWeighted{int32(i), key, w})
	}
	return ws, sum, nil
}

// grpcJSWeights is grpc-js's: HEALTHY and UNKNOWN endpoints of localities
// with a weight, in the assignment's order, each weighted locality weight ×
// endpoint weight and divided by the sum, all in doubles (JS numbers).
func grpcJSWeights(eps []Endpoint) ([]placed, float64) {
	var ps []placed
	var sum float64
	for i := range eps {
		e := &eps[i]
		if e.LocalityWeight == 0 || !e.Healthy {
			continue
		}
		w := float64(e.LocalityWeight) * float64(e.Weight)
		sum += w
		ps = append(ps, placed{ep: int32(i), key: e.Address, w: w})
	}
	minW := 1.0
	for i := range ps {
		ps[i].w /= sum
		minW = math.Min(ps[i].w, minW)
	}
	return ps, minW
}

// ring is the ring builder the three ring clients share (Envoy's Ring, grpc-go's
// newRing, grpc-js's constructRing): scale so the lightest endpoint gets
// whole entries, bounded by the maximum; walk the endpoints keeping a
// running target of scale × weight and a running count, adding entries
// "key_i" while the count is below the target; sort by hash. Every step is
// the clients' own double arithmetic in their order: the entry counts
// depend on the last bit of the running target.
func (t *Table) ring(ps []placed, minW float64, minRing, maxRing uint64, hash func([]byte) uint64, fma, stable bool) error {
	if len(ps) == 0 {
		return nil
	}
	scale := math.Min(math.Ceil(minW*float64(minRing))/minW, float64(maxRing))
	type entry struct {
		h uint64
		o int32
	}
	es := make([]entry, 0, int(math.Ceil(scale)))
	var current, target float64
	buf := make([]byte, 0, 64)
	for _, p := range ps {
		if fma {
			target = math.FMA(scale, p.w, target)
		} else {
			// The conversion rounds the product on its own, so the Go
			// compiler may not fuse it into the sum.
			target += float64(scale * p.w)
		}
		for i := uint64(0); current < target; i++ {
			buf = strconv.AppendUint(append(append(buf[:0], p.key...), '_'), i, 10)
			es = append(es, entry{hash(buf), p.ep})
			t.entries[p.ep]++
			current++
		}
	}
	byHash := func(a, b entry) int { return cmp.Compare(a.h, b.h) }
	if stable {
		slices.SortStableFunc(es, byHash) // Array.prototype.sort is stable
	} else {
		slices.SortFunc(es, byHash)
		for i := 1; i < len(es); i++ {
			if es[i].h == es[i-1].h && es[i].o != es[i-1].o {
				return refuse(t.client, "Endpoints["+strconv.Itoa(int(es[i].o))+"]", ErrTie, "one of its ring entries has the hash of one of Endpoints[%d]'s", es[i-1].o)
			}
		}
	}
	t.hashes = make([]uint64, len(es))
	t.owners = make([]int32, len(es))
	for i, e := range es {
		t.hashes[i], t.owners[i] = e.h, e.o
	}
	return nil
}

// maglev is Envoy's Maglev fill (maglev_lb.cc): hosts sorted by key, each
// with offset xxHash64(key) mod size and skip xxHash64(key, seed 1) mod
// (size-1) + 1; in rounds, a host takes its next free slot of its
// permutation when round × its weight reaches its running target, which
// then grows by the largest weight.
func (t *Table) maglev(ps []placed, maxW float64, size uint64) {
	if len(ps) == 0 {
		return
	}
	type build struct {
		offset, skip, next uint64
		w, target          float64
		ep                 int32
	}
	bs := make([]build, len(ps))
	for i, p := range ps {
		bs[i] = build{offset: xxHash64(p.key, 0) % size, skip: xxHash64(p.key, 1)%(size-1) + 1, w: p.w, ep: p.ep}
	}
	t.owners = make([]int32, size)
	for i := range t.owners {
		t.owners[i] = -1
	}
	filled := uint64(0)
	for round := uint32(1); filled < size; round++ {
		for i := 0; i < len(bs) && filled < size; i++ {
			b := &bs[i]
			if float64(round)*b.w < b.target {
				continue
			}
			b.target += maxW
			c := (b.offset + b.skip*b.next) % size
			for t.owners[c] >= 0 {
				b.next++
				c = (b.offset + b.skip*b.next) % size
			}
			t.owners[c] = b.ep
			b.next++
			t.entries[b.ep]++
			filled++
		}
	}
}
