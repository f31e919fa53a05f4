package healthcheck

import (
	"cmp"
	"container/heap"
	"context"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// Defaults of Config.
const (
	DefaultConcurrency          = 64
	DefaultMaxEndpoints         = 10000
	DefaultMaxEndpointsUpstream = 5000
)

// Config configures a Checker.
type Config struct {
	// Name says who checks, in every origin: the replica's name.
	Name string
	// Concurrency is how many checks may be in flight at once (default 64).
	// A check that is due while all are taken waits; it is never skipped.
	Concurrency int
	// MaxEndpoints is how many endpoints are checked at most over all
	// upstreams (default 10,000); MaxEndpointsPerUpstream for one upstream
	// (default 5,000). Endpoints past either are not checked (their signal
	// stays Unknown) and counted by Unchecked.
	MaxEndpoints            int
	MaxEndpointsPerUpstream int
	// Probe runs one check; nil is Probe. Tests may count or fake checks.
	Probe ProbeFunc
	// Observe, when set, is told of each check's result (passed or not) and
	// how late after its due time it started: a lag that grows says the
	// checks need more Concurrency than they have.
	Observe func(passed bool, late time.Duration)
}

// Verdict is a change of one endpoint's active-check probe signal. Probe
// Unknown with an empty Origin means the endpoint has no active-check signal
// (any more): it left the set, its upstream stopped checking, or its check
// changed and it is judged afresh.
type Verdict struct {
	Upstream topology.Key
	Target   Target
	Probe    weights.ProbeHealth
	Origin   string
}

type targetKey struct {
	upstream topology.Key
	target   Target
}

// compare orders by upstream, address and port; two generations of one
// address compare equal, so a stable sort keeps them in the order their
// changes came (an old generation's withdrawal before the new one's verdict).
func (k targetKey) compare(o targetKey) int {
	if c := k.upstream.Compare(o.upstream); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(k.target.Address, o.target.Address), cmp.Compare(k.target.Port, o.target.Port))
}

// entry is one checked endpoint.
type entry struct {
	key      targetKey
	hc       *topology.HealthCheck
	st       state
	rng      *rand.Rand
	next     time.Time
	index    int // in the due heap; -1 while in flight
	inFlight bool
}

type result struct {
	e       *entry
	failure string
	late    time.Duration
}

// Checker checks the endpoints it is given (Set) and publishes each change of
// verdict (Run). Set may be called from any goroutine.
type Checker struct {
	cfg     Config
	mu      sync.Mutex
	entries map[targetKey]*entry
	perUp   map[topology.Key]int
	due     dueHeap
	changes []Verdict // verdicts to publish
	skipped map[topology.Key]int
	// prior holds the endpoints a previous checker found Unhealthy, until
	// they are given (Seed)
	prior   map[targetKey]struct{}
	wake    chan struct{}
	results chan result
	now     func() time.Time
}

// New returns a Checker; it checks nothing until Run.
func New(cfg Config) *Checker {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.MaxEndpoints <= 0 {
		cfg.MaxEndpoints = DefaultMaxEndpoints
	}
	if cfg.MaxEndpointsPerUpstream <= 0 {
		cfg.MaxEndpointsPerUpstream = DefaultMaxEndpointsUpstream
	}
	if cfg.Probe == nil {
		cfg.Probe = Probe
	}
	return &Checker{
		cfg:     cfg,
		entries: map[targetKey]*entry{},
		perUp:   map[topology.Key]int{},
		skipped: map[topology.Key]int{},
		wake:    make(chan struct{}, 1),
		results: make(chan result, cfg.Concurrency), // never blocks: at most Concurrency in flight
		now:     time.Now,
	}
}

// Set makes targets, and only them, the endpoints of upstream u to check
// under hc; hc nil (or no targets) stops checking u. Endpoints that stay and
// whose check is unchanged keep their verdict; the others are judged afresh,
// and a verdict they lose is published as Unknown.
func (c *Checker) Set(u topology.Key, hc *topology.HealthCheck, targets []Target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := map[Target]bool{}
	if hc != nil {
		targets = slices.Clone(targets)
		slices.SortFunc(targets, func(a, b Target) int {
			return targetKey{target: a}.compare(targetKey{target: b})
		})
		targets = slices.Compact(targets)
		for _, t := range targets {
			keep[t] = true
		}
	}
	// drop what left, and what is checked differently now
	var gone []targetKey
	for k, e := range c.entries {
		if k.upstream == u && (!keep[k.target] || !e.hc.Equal(hc)) {
			gone = append(gone, k)
		}
	}
	slices.SortFunc(gone, targetKey.compare)
	for _, k := range gone {
		c.remove(k)
	}
	delete(c.skipped, u)
	for _, t := range targets {
		k := targetKey{u, t}
		if c.entries[k] != nil {
			continue
		}
		if c.perUp[u] >= c.cfg.MaxEndpointsPerUpstream || len(c.entries) >= c.cfg.MaxEndpoints {
			c.skipped[u]++
			continue
		}
		c.add(k, hc)
	}
	c.poke()
}

// Seed says which endpoints of u a previous checker (the leader before this
// one) found Unhealthy: each starts Unhealthy when Set gives it, so it needs
// healthyThreshold passes to be Healthy again, as it would have under that
// checker, instead of one. Seeds beyond MaxEndpoints are ignored (those
// endpoints start Unknown).
func (c *Checker) Seed(u topology.Key, unhealthy []Target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.prior == nil {
		c.prior = map[targetKey]struct{}{}
	}
	for _, t := range unhealthy {
		if len(c.prior) >= c.cfg.MaxEndpoints {
			return
		}
		c.prior[targetKey{u, t}] = struct{}{}
	}
}

// Checked is how many endpoints of each upstream are checked.
func (c *Checker) Checked() map[topology.Key]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.perUp)
}

// States counts the endpoints the Checker holds by verdict ("healthy",
// "unhealthy", "unknown") and those past its bounds ("unchecked"), for the
// poise_active_check_endpoints gauge.
func (c *Checker) States() map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]float64{"healthy": 0, "unhealthy": 0, "unknown": 0, "unchecked": 0}
	for _, e := range c.entries {
		switch e.st.verdict {
		case weights.ProbeHealthy:
			out["healthy"]++
		case weights.ProbeUnhealthy:
			out["unhealthy"]++
		default:
			out["unknown"]++
		}
	}
	for _, n := range c.skipped {
		out["unchecked"] += float64(n)
	}
	return out
}

// Unchecked is how many endpoints of each upstream are past the bounds and
// not checked.
func (c *Checker) Unchecked() map[topology.Key]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.skipped)
}

func (c *Checker) add(k targetKey, hc *topology.HealthCheck) {
	h := fnv.New64a()
	h.Write([]byte(k.upstream.String() + "\x00" + k.target.Address + "\x00" + strconv.FormatUint(uint64(k.target.Port), 10)))
	seed := h.Sum64()
	e := &entry{key: k, hc: hc, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	if _, ok := c.prior[k]; ok {
		// already published as Unhealthy by the previous checker: no change
		// to publish until its verdict moves
		e.st.verdict = weights.ProbeUnhealthy
		delete(c.prior, k)
	}
	// the first check at a hashed offset in [0, interval): checks spread out
	e.next = c.now().Add(time.Duration(e.rng.Int64N(int64(hc.Interval))))
	c.entries[k] = e
	c.perUp[k.upstream]++
	heap.Push(&c.due, e)
}

func (c *Checker) remove(k targetKey) {
	e := c.entries[k]
	delete(c.entries, k)
	if c.perUp[k.upstream]--; c.perUp[k.upstream] == 0 {
		delete(c.perUp, k.upstream)
	}
	if !e.inFlight {
		heap.Remove(&c.due, e.index)
	}
	if e.st.verdict != weights.ProbeUnknown {
		c.changes = append(c.changes, Verdict{Upstream: k.upstream, Target: k.target, Probe: weights.ProbeUnknown})
	}
}

func (c *Checker) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run checks until ctx ends, then waits for the checks in flight (each bound
// by its timeout, and cancelled with ctx) and returns. It calls publish from
// its own goroutine with each batch of verdict changes, in (upstream,
// address, port) order; publish may call Set.
func (c *Checker) Run(ctx context.Context, publish func([]Verdict)) {
	var wg sync.WaitGroup
	defer wg.Wait()
	inFlight := 0
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.mu.Lock()
		now := c.now()
		for inFlight < c.cfg.Concurrency && len(c.due) > 0 && !c.due[0].next.After(now) {
			e := heap.Pop(&c.due).(*entry)
			late := now.Sub(e.next)
			e.inFlight = true
			inFlight++
			wg.Add(1)
			go func(e *entry, hc *topology.HealthCheck) {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, hc.Timeout)
				err := c.cfg.Probe(cctx, hc, e.key.target)
				cancel()
				c.results <- result{e, Describe(err), late}
			}(e, e.hc)
		}
		wait := time.Hour
		if len(c.due) > 0 && inFlight < c.cfg.Concurrency {
			wait = max(c.due[0].next.Sub(now), 0)
		}
		batch := c.takeChanges()
		c.mu.Unlock()
		if len(batch) > 0 {
			publish(batch)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-timer.C:
		case r := <-c.results:
			inFlight--
			c.mu.Lock()
			c.record(r)
			// take every result that is already here: one batch for them
			for more := true; more; {
				select {
				case r := <-c.results:
					inFlight--
					c.record(r)
				default:
					more = false
				}
			}
			c.mu.Unlock()
		}
	}
}

// record applies one result to its entry, if the entry is still checked.
func (c *Checker) record(r result) {
	e := r.e
	e.inFlight = false
	if c.cfg.Observe != nil {
		c.cfg.Observe(r.failure == "", r.late)
	}
	if c.entries[e.key] != e {
		return // removed or replaced while in flight
	}
	hc := e.hc
	if e.st.observe(r.failure, hc.HealthyThreshold, hc.UnhealthyThreshold) {
		c.changes = append(c.changes, Verdict{Upstream: e.key.upstream, Target: e.key.target, Probe: e.st.verdict, Origin: e.st.origin(c.cfg.Name)})
	}
	e.next = c.now().Add(c.nextWait(e))
	heap.Push(&c.due, e)
}

// nextWait is interval ± up to jitterPercent of it, from the entry's own
// deterministic sequence.
func (c *Checker) nextWait(e *entry) time.Duration {
	iv := e.hc.Interval
	j := int64(iv) * int64(e.hc.JitterPercent) / 100
	if j == 0 {
		return iv
	}
	return iv + time.Duration(e.rng.Int64N(2*j+1)-j)
}

func (c *Checker) takeChanges() []Verdict {
	if len(c.changes) == 0 {
		return nil
	}
	out := c.changes
	c.changes = nil
	// the last change of each endpoint, in canonical order
	slices.SortStableFunc(out, func(a, b Verdict) int {
		return targetKey{a.Upstream, a.Target}.compare(targetKey{b.Upstream, b.Target})
	})
	w := 0
	for i := range out {
		if i+1 < len(out) && out[i].Upstream == out[i+1].Upstream && out[i].Target == out[i+1].Target {
			continue
		}
		out[w] = out[i]
		w++
	}
	return out[:w]
}

// dueHeap orders entries by their next check, then canonically.
type dueHeap []*entry

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if !h[i].next.Equal(h[j].next) {
		return h[i].next.Before(h[j].next)
	}
	return h[i].key.compare(h[j].key) < 0
}
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *dueHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
