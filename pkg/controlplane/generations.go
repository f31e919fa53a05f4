package controlplane

import (
	"sync"
	"time"

	"poise.dev/poise/pkg/topology"
)

// generationClock remembers, for each upstream's endpoints that carry a
// generation, when this replica first published that generation at that
// address: the "since" /debug/explain shows beside a generation. It holds
// one entry per published endpoint with a generation and drops an
// upstream's entries with the upstream.
type generationClock struct {
	now func() time.Time

	mu  sync.Mutex
	ups map[topology.Key]map[generationAt]time.Time
}

type generationAt struct {
	address    string
	port       uint32
	generation string
}

func newGenerationClock(now func() time.Time) *generationClock {
	return &generationClock{now: now, ups: map[topology.Key]map[generationAt]time.Time{}}
}

// Published follows one upstream's change (cur nil: removed). A
// generation still at its address keeps its time; a new one starts now.
func (c *generationClock) Published(old, cur *topology.UpstreamState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur == nil {
		if old != nil {
			delete(c.ups, old.Upstream.Key)
		}
		return
	}
	k := cur.Upstream.Key
	prev := c.ups[k]
	var next map[generationAt]time.Time
	var now time.Time
	for i, o := range cur.Origins {
		if o.Generation == "" {
			continue
		}
		at := generationAt{address: cur.Endpoints[i].Address, port: cur.Endpoints[i].Port, generation: o.Generation}
		since, ok := prev[at]
		if !ok {
			if now.IsZero() {
				now = c.now()
			}
			since = now
		}
		if next == nil {
			next = make(map[generationAt]time.Time, len(cur.Origins)-i)
		}
		next[at] = since
	}
	if next == nil {
		delete(c.ups, k)
		return
	}
	c.ups[k] = next
}

// Since is explain.GenerationSince over what was published.
func (c *generationClock) Since(k topology.Key, address string, port uint32, gen string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.ups[k][generationAt{address: address, port: port, generation: gen}]
	return t, ok
}
