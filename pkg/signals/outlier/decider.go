package outlier

import (
	"fmt"
	"log/slog"
	"math/bits"
	"slices"
	"strconv"
	"time"

	"poise.dev/poise/pkg/topology"
)

// Endpoint is one endpoint of an upstream as the decider sees it, in the
// upstream's canonical order, with its configured weight.
type Endpoint struct {
	Address string
	Port    uint32
	Weight  uint64
	// Generation names the backend at the address (topology
	// Endpoint.Generation): a new one starts with no ejection and no
	// count, and evidence summarized for another generation is not its.
	Generation string
}

// Verdict is a change of one endpoint's outlier signal: ejected, with the
// evidence in Origin, or returned (Ejected false, Origin empty).
type Verdict struct {
	Address string
	Port    uint32
	Ejected bool
	Origin  string
	// Generation is the endpoint generation the verdict is about.
	Generation string
}

// Log records the decision: every decider (files mode's, the Kubernetes
// leader's) logs the same lines.
func (v Verdict) Log(log *slog.Logger, upstream string) {
	if v.Ejected {
		log.Info("outlier ejected", "upstream", upstream, "address", v.Address, "port", v.Port, "origin", v.Origin)
		return
	}
	log.Info("outlier returned", "upstream", upstream, "address", v.Address, "port", v.Port)
}

// Ejection is an endpoint ejected now.
type Ejection struct {
	Address string    `json:"address"`
	Port    uint32    `json:"port"`
	Until   time.Time `json:"until"`
	// Count is the consecutive ejections, this one included.
	Count  uint32 `json:"count"`
	Origin string `json:"origin"`
	// Generation is the endpoint generation ejected.
	Generation string `json:"generation,omitempty"`
}

// Decider turns an upstream's merged aggregate into ejections
// (docs/health.md, "The evidence and the rules"). It keeps, per endpoint
// that was ever ejected, the consecutive ejection count, the time the
// current ejection ends and when the last one began; an endpoint's state is
// freed once its count has decayed to zero, so the state is bounded by the
// endpoints the upstreams have. It is not safe for concurrent use.
type Decider struct {
	window time.Duration
	ups    map[topology.Key]map[Endpoint]*state // Endpoint with Weight 0 and no Generation as the key
}

type state struct {
	count        uint32
	until        time.Time // the current ejection ends; zero when not ejected
	start        time.Time // the last ejection began
	healthySince time.Time // the decay clock: the count drops by one each window from here
	origin       string
	gen          string // the endpoint generation the state is about
}

// NewDecider is a decider for aggregates over windows of the given length.
func NewDecider(window time.Duration) *Decider {
	return &Decider{window: window, ups: map[topology.Key]map[Endpoint]*state{}}
}

func key(address string, port uint32) Endpoint { return Endpoint{Address: address, Port: port} }

// Decide evaluates upstream u at now: cfg is its detection, agg the merged
// aggregate of the window ending now, eps its endpoints in canonical order
// (the first of duplicates counts). It returns the verdicts that changed, in
// canonical order:
//   - an ejection ends when its time is up, and the endpoint returns;
//   - an endpoint is an outlier when its trusted error ratio is at least
//     ErrorPercent, with at least MinRequestVolume requests and at least
//     MinReporters trusted reporters each at or over the threshold, counted
//     as distinct workload instances (FailingInstances): one instance
//     reporting to several replicas is one;
//   - an outlier not ejected is a candidate unless its last ejection began
//     less than a window ago (the window may still hold the evidence of that
//     one: only new evidence ejects again) or ended at this evaluation;
//   - candidates by error ratio, highest first, then canonical order, are
//     ejected while the ejected weight stays within MaxEjectionPercent of
//     the upstream's configured weight; with two or more endpoints, one
//     may be ejected when none is;
//   - an ejection lasts BaseEjectionTime × its consecutive count, at most
//     MaxEjectionTime; the count drops by one for each window the endpoint
//     spends neither ejected nor an outlier.
//
// The result depends only on the arguments and the decider's state, never
// on the order of agg's entries.
func (d *Decider) Decide(u topology.Key, cfg topology.OutlierDetection, agg Aggregate, eps []Endpoint, now time.Time) []Verdict {
	st := d.ups[u]
	if st == nil {
		st = map[Endpoint]*state{}
		d.ups[u] = st
	}
	type member struct {
		index  int
		weight uint64
		gen    string
	}
	members := make(map[Endpoint]member, len(eps))
	var total uint64
	for i, e := range eps {
		k := key(e.Address, e.Port)
		if _, dup := members[k]; dup {
			continue
		}
		members[k] = member{i, e.Weight, e.Generation}
		total = sat(total, e.Weight)
	}
	var out []Verdict
	// endpoints that left, and addresses that hold a new generation: the
	// state goes, an ejection is withdrawn; a new generation starts empty
	for k, s := range st {
		if m, ok := members[k]; !ok || m.gen != s.gen {
			if !s.until.IsZero() {
				out = append(out, Verdict{Address: k.Address, Port: k.Port, Generation: s.gen})
			}
			delete(st, k)
		}
	}
	// ejections that ended: such an endpoint is judged again at the next
	// evaluation, not on the evidence that saw it return
	returned := map[Endpoint]bool{}
	var ejected uint64
	ejectedN := 0
	for k, s := range st {
		switch {
		case s.until.IsZero():
		case !now.Before(s.until):
			s.until, s.origin, s.healthySince = time.Time{}, "", now
			returned[k] = true
			out = append(out, Verdict{Address: k.Address, Port: k.Port, Generation: s.gen})
		default:
			ejected = sat(ejected, members[k].weight)
			ejectedN++
		}
	}
	// the evidence
	type candidate struct {
		k      Endpoint
		index  int
		weight uint64
		sum    EndpointSummary
	}
	var cands []candidate
	outliers := map[Endpoint]bool{}
	for _, e := range Merge(agg).Endpoints {
		k := key(e.Address, e.Port)
		m, ok := members[k]
		// evidence on another generation of the address is not this one's
		if !ok || e.Generation != m.gen || e.Requests < cfg.MinRequestVolume || e.FailingInstances() < uint64(cfg.MinReporters) || !atLeast(e.Errors, e.Requests, cfg.ErrorPercent) {
			continue
		}
		outliers[k] = true
		s := st[k]
		if s != nil && (!s.until.IsZero() || returned[k] || now.Before(s.start.Add(d.window))) {
			continue
		}
		cands = append(cands, candidate{k, m.index, m.weight, e})
	}
	// the decay of counts
	for k, s := range st {
		if !s.until.IsZero() {
			continue
		}
		if outliers[k] {
			s.healthySince = now
			continue
		}
		for s.count > 0 && now.Sub(s.healthySince) >= d.window && d.window > 0 {
			s.count--
			s.healthySince = s.healthySince.Add(d.window)
		}
		if s.count == 0 && !now.Before(s.start.Add(d.window)) {
			delete(st, k)
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		// a's ratio above b's first: errors_a × requests_b vs errors_b × requests_a
		if c := cmp128(mul64(b.sum.Errors, a.sum.Requests), mul64(a.sum.Errors, b.sum.Requests)); c != 0 {
			return c
		}
		return a.index - b.index
	})
	for _, c := range cands {
		within := cmp128(mul64(sat(ejected, c.weight), 100), mul64(total, uint64(cfg.MaxEjectionPercent))) <= 0
		if !within && (ejectedN > 0 || len(members) < 2) {
			continue
		}
		s := st[c.k]
		if s == nil {
			s = &state{gen: members[c.k].gen}
			st[c.k] = s
		}
		s.count = min(s.count+1, maxCount(cfg))
		s.start = now
		s.until = now.Add(min(cfg.BaseEjectionTime*time.Duration(s.count), cfg.MaxEjectionTime))
		s.origin = Origin(c.sum, d.window)
		ejected = sat(ejected, c.weight)
		ejectedN++
		out = append(out, Verdict{Address: c.k.Address, Port: c.k.Port, Ejected: true, Origin: s.origin, Generation: s.gen})
	}
	if len(st) == 0 {
		delete(d.ups, u)
	}
	slices.SortFunc(out, func(a, b Verdict) int {
		ia, oka := members[key(a.Address, a.Port)]
		ib, okb := members[key(b.Address, b.Port)]
		switch {
		case oka && okb:
			if ia.index == ib.index && a.Ejected != b.Ejected {
				// an old generation's withdrawal before the new one's ejection
				if b.Ejected {
					return -1
				}
				return 1
			}
			return ia.index - ib.index
		case oka != okb: // endpoints that left last
			if oka {
				return -1
			}
			return 1
		}
		return compareSummary(EndpointSummary{Address: a.Address, Port: a.Port}, EndpointSummary{Address: b.Address, Port: b.Port})
	})
	return out
}

// maxCount is the consecutive count past which an ejection cannot grow:
// BaseEjectionTime × it reaches MaxEjectionTime.
func maxCount(cfg topology.OutlierDetection) uint32 {
	if cfg.BaseEjectionTime <= 0 {
		return 1
	}
	return uint32(min(cfg.MaxEjectionTime/cfg.BaseEjectionTime+1, 1<<20))
}

// Forget drops upstream u (its detection was removed, or the upstream) and
// returns the withdrawals of its current ejections, sorted.
func (d *Decider) Forget(u topology.Key) []Verdict {
	var out []Verdict
	for k, s := range d.ups[u] {
		if !s.until.IsZero() {
			out = append(out, Verdict{Address: k.Address, Port: k.Port, Generation: s.gen})
		}
	}
	delete(d.ups, u)
	slices.SortFunc(out, func(a, b Verdict) int {
		return compareSummary(EndpointSummary{Address: a.Address, Port: a.Port}, EndpointSummary{Address: b.Address, Port: b.Port})
	})
	return out
}

// Upstreams is the upstreams the decider holds state for.
func (d *Decider) Upstreams() []topology.Key {
	out := make([]topology.Key, 0, len(d.ups))
	for k := range d.ups {
		out = append(out, k)
	}
	slices.SortFunc(out, topology.Key.Compare)
	return out
}

// Ejections is upstream u's current ejections, sorted by address and port.
func (d *Decider) Ejections(u topology.Key) []Ejection {
	var out []Ejection
	for k, s := range d.ups[u] {
		if !s.until.IsZero() {
			out = append(out, Ejection{Address: k.Address, Port: k.Port, Until: s.until, Count: s.count, Origin: s.origin, Generation: s.gen})
		}
	}
	slices.SortFunc(out, func(a, b Ejection) int {
		return compareSummary(EndpointSummary{Address: a.Address, Port: a.Port}, EndpointSummary{Address: b.Address, Port: b.Port})
	})
	return out
}

// Origin is the outlier signal's origin for an endpoint's evidence, e.g.
// "load reports: 7 clients, at least 3 failing, 1,240 requests, 48 %
// errors, window 30 s": the trusted reporters as the replicas counted them,
// added up (an instance reporting to two replicas counts on each); the
// failing ones as distinct workload instances (FailingInstances, what
// minReporters is held against: a lower bound, as the leader knows only
// each replica's minReporters smallest); the percent rounded down.
func Origin(e EndpointSummary, window time.Duration) string {
	pct := uint64(0)
	if e.Requests > 0 {
		// errors ≤ requests, so the high word is below requests and the
		// quotient fits
		p := mul64(min(e.Errors, e.Requests), 100)
		pct, _ = bits.Div64(p.hi, p.lo, e.Requests)
	}
	return fmt.Sprintf("load reports: %s clients, at least %s failing, %s requests, %d %% errors, window %s",
		thousands(e.Reporters), thousands(e.FailingInstances()), thousands(e.Requests), min(pct, 100), windowText(window))
}

func windowText(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + " s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
}

// thousands writes n with a comma every three digits.
func thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// Status is what an upstream's last evaluation found, for the debug
// endpoints: when, how many reporters were trusted and left out, and the
// ejections in force.
type Status struct {
	EvaluatedAt time.Time  `json:"evaluatedAt"`
	Reporters   uint64     `json:"reporters"`
	Untrusted   uint64     `json:"untrusted"`
	Ejections   []Ejection `json:"ejections"`
}
