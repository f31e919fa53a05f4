package explain

import (
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// Simulation summarizes seeded picks replayed from the computed shares.
type Simulation struct {
	Picks   uint64 `json:"picks"`
	Seed    uint64 `json:"seed"`
	Dropped uint64 `json:"dropped"`
}

// Simulate draws n picks with the seeded picker of pkg/weights and records
// the observed counts beside the computed figures of x, which must have
// been built from u. A class with a split of its own is drawn from too,
// with the same seed.
func Simulate(x *Upstream, u *topology.UpstreamState, n, seed uint64) {
	x.Simulation = simulate(x.Priorities, u, n, seed)
	if c := x.Class; c != nil && c.Split != nil && c.state != nil {
		c.Split.Simulation = simulate(c.Split.Priorities, c.state, n, seed)
	}
}

// simulate draws n picks from u and records them in prios, which must have
// been built from u.
func simulate(prios []Priority, u *topology.UpstreamState, n, seed uint64) *Simulation {
	r := u.Result
	locCounts := make([]uint64, len(r.Localities))
	epCounts := make([]uint64, len(r.Endpoints))
	sim := &Simulation{Picks: n, Seed: seed}
	p := weights.Seeded(r, u.Endpoints, seed)
	for i := uint64(0); i < n; i++ {
		pick := p.Pick()
		if pick.Dropped {
			sim.Dropped++
			continue
		}
		locCounts[pick.Locality]++
		epCounts[pick.Endpoint]++
	}
	li, ei := 0, 0
	for pi := range prios {
		for lj := range prios[pi].Localities {
			xl := &prios[pi].Localities[lj]
			xl.Observed = &locCounts[li]
			li++
			for ej := range xl.Endpoints {
				xl.Endpoints[ej].Observed = &epCounts[ei]
				ei++
			}
		}
	}
	return sim
}
