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
// been built from u.
func Simulate(x *Upstream, u *topology.UpstreamState, n, seed uint64) {
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
	x.Simulation = sim
	li, ei := 0, 0
	for pi := range x.Priorities {
		for lj := range x.Priorities[pi].Localities {
			xl := &x.Priorities[pi].Localities[lj]
			xl.Observed = &locCounts[li]
			li++
			for ej := range xl.Endpoints {
				xl.Endpoints[ej].Observed = &epCounts[ei]
				ei++
			}
		}
	}
}
