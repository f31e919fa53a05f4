package explain

import (
	"time"

	"poise.dev/poise/pkg/topology"
)

// GenerationSince says when generation gen of the endpoint of an upstream
// at an address began (false: unknown to the caller, or another
// generation is there now).
type GenerationSince func(k topology.Key, address string, port uint32, gen string) (time.Time, bool)

// SetGenerationSince fills GenerationSince for every endpoint of the report
// that has a generation: its own split and a client class's. An offline
// report has no clock; the live plane knows when it published each one.
func (r *Report) SetGenerationSince(since GenerationSince) {
	if since == nil {
		return
	}
	for i := range r.Upstreams {
		u := &r.Upstreams[i]
		k := topology.Key{Namespace: u.Namespace, Name: u.Name}
		u.Split.setGenerationSince(k, since)
		if u.Class != nil && u.Class.Split != nil {
			u.Class.Split.setGenerationSince(k, since)
		}
	}
}

func (s *Split) setGenerationSince(k topology.Key, since GenerationSince) {
	for pi := range s.Priorities {
		for li := range s.Priorities[pi].Localities {
			eps := s.Priorities[pi].Localities[li].Endpoints
			for ei := range eps {
				if eps[ei].Generation == "" {
					continue
				}
				if t, ok := since(k, eps[ei].Address, eps[ei].Port, eps[ei].Generation); ok {
					t = t.UTC()
					eps[ei].GenerationSince = &t
				}
			}
		}
	}
}
