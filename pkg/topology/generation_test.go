package topology

import (
	"testing"

	"poise.dev/poise/pkg/weights"
)

// withGeneration is set(name, up, "r1", n, 0) with endpoint i's generation
// and hash key set.
func withGeneration(name, up string, n, i int, gen, hashKey string) EndpointSet {
	s := set(name, up, "r1", n, 0)
	s.Endpoints[i].Generation, s.Endpoints[i].HashKey = gen, hashKey
	return s
}

// A verdict holds for the generation it was reached on: when a new backend
// takes the address (a new generation in the set), the old one's ejection
// and check verdict no longer apply, at once, without waiting for the
// deciders to withdraw them; the endpoint carries its generation and hash
// key to the translator and explain.
func TestVerdictsHoldForTheirGeneration(t *testing.T) {
	t.Parallel()
	d := NewDirectory()
	up := Key{"default", "a"}
	var b Batch
	b.PutUpstream(upstream("a"))
	b.PutEndpointSet(withGeneration("a", "a", 3, 1, "old", "db-1"))
	mustApply(t, d, b)
	a1 := testAddress("a", 1)
	var v Batch
	v.PutOutlierVerdicts(up, []OutlierVerdict{{Address: a1, Port: 80, Ejected: true, Origin: "load reports", Generation: "old"}})
	v.PutCheckVerdicts(up, []CheckVerdict{{Address: a1, Port: 80, Probe: weights.ProbeUnhealthy, Origin: "check", Generation: "old"}})
	s1 := mustApply(t, d, v)
	e, o := endpointAt(t, s1.Upstream(up), a1)
	if !e.Ejected || e.Probe != weights.ProbeUnhealthy || o.Generation != "old" || o.HashKey != "db-1" {
		t.Fatalf("generation old: ejected %v probe %v origin %+v, want both verdicts applied", e.Ejected, e.Probe, o)
	}

	var r Batch
	r.PutEndpointSet(withGeneration("a", "a", 3, 1, "new", "db-1"))
	s2 := mustApply(t, d, r)
	e, o = endpointAt(t, s2.Upstream(up), a1)
	if e.Ejected || e.Probe != weights.ProbeUnknown || o.Generation != "new" || o.Health.OutlierOrigin != "" {
		t.Fatalf("generation new: ejected %v probe %v origin %+v, want neither verdict", e.Ejected, e.Probe, o)
	}
	for i := range s2.Upstream(up).Result.Endpoints {
		if er, e, _ := s2.Upstream(up).EndpointResult(i); e.Address == a1 && !er.Eligible {
			t.Errorf("the new generation is not eligible: %+v", er)
		}
	}

	// a verdict on the new generation applies to it
	var nv Batch
	nv.PutOutlierVerdicts(up, []OutlierVerdict{{Address: a1, Port: 80, Ejected: true, Origin: "its own", Generation: "new"}})
	s3 := mustApply(t, d, nv)
	if e, o := endpointAt(t, s3.Upstream(up), a1); !e.Ejected || o.Health.OutlierOrigin != "its own" {
		t.Errorf("the new generation's own ejection: %v %q", e.Ejected, o.Health.OutlierOrigin)
	}
}

func endpointAt(t *testing.T, u *UpstreamState, addr string) (weights.Endpoint, Origin) {
	t.Helper()
	for i, e := range u.Endpoints {
		if e.Address == addr {
			return e, u.Origins[i]
		}
	}
	t.Fatalf("%s not in %s", addr, u.Upstream.Key)
	return weights.Endpoint{}, Origin{}
}
