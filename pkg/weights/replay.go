package weights

import "math/rand/v2"

// Pick is one seeded draw: indexes into a Result's Priorities, Localities
// and Endpoints, or Dropped when the draw fell on dropped traffic (or the
// upstream is not Routable).
type Pick struct {
	Priority, Locality, Endpoint int
	Dropped                      bool
}

// Picker replays a Result: priority first, then locality, then endpoint,
// each drawn from the Result's integer figures with a fixed PRNG (PCG), so
// the same seed and the same Result give the same picks.
type Picker struct {
	r   *Result
	eps []Endpoint
	rng *rand.Rand
}

// Seeded returns a Picker over r, whose endpoints came from eps.
func Seeded(r *Result, eps []Endpoint, seed uint64) *Picker {
	return &Picker{r: r, eps: eps, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Pick draws one endpoint.
func (p *Picker) Pick() Pick {
	r := p.r
	if r.Outcome != Routable {
		return Pick{Priority: -1, Locality: -1, Endpoint: -1, Dropped: true}
	}
	// Stage 1: priority by load; the dropped part of a load drops the request.
	x := p.rng.Uint64N(Million)
	pi := 0
	for ; pi < len(r.Priorities)-1; pi++ {
		if x < r.Priorities[pi].Load {
			break
		}
		x -= r.Priorities[pi].Load
	}
	pr := &r.Priorities[pi]
	if x < pr.Dropped || pr.Load == pr.Dropped {
		return Pick{Priority: pi, Locality: -1, Endpoint: -1, Dropped: true}
	}
	// Stage 2: locality by its traffic inside the priority's flowing load.
	x = p.rng.Uint64N(pr.Load - pr.Dropped)
	li := pr.FirstLocality
	for ; li < pr.FirstLocality+pr.LocalityCount-1; li++ {
		if x < r.Localities[li].Traffic {
			break
		}
		x -= r.Localities[li].Traffic
	}
	l := &r.Localities[li]
	// Stage 3: endpoint by weight among the selectable, as the proxy does.
	x = p.rng.Uint64N(l.SelectableWeight)
	ei := l.FirstEndpoint
	last := l.FirstEndpoint
	for ; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
		er := &r.Endpoints[ei]
		if !er.Selectable {
			continue
		}
		last = ei
		w := p.eps[er.Index].Weight
		if x < w {
			break
		}
		x -= w
	}
	if ei == l.FirstEndpoint+l.EndpointCount {
		ei = last
	}
	return Pick{Priority: pi, Locality: li, Endpoint: ei}
}
