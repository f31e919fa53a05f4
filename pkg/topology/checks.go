package topology

import (
	"maps"

	"poise.dev/poise/pkg/weights"
)

// CheckVerdict is an active health check's verdict on one endpoint of an
// upstream (spec.healthCheck, docs/health.md). Verdicts are kept apart from
// the EndpointSets so that replacing a set keeps them, and merged into the
// endpoint's own probe signal when the upstream is resolved.
type CheckVerdict struct {
	Address string
	Port    uint32
	Probe   weights.ProbeHealth
	// Origin says who checked and on what evidence. A verdict Unknown with
	// an empty origin withdraws the endpoint's verdict.
	Origin string
}

func (v CheckVerdict) withdrawn() bool { return v.Probe == weights.ProbeUnknown && v.Origin == "" }

// checkAddr is an endpoint's identity within an upstream's verdicts.
type checkAddr struct {
	address string
	port    uint32
}

// PutCheckVerdicts records verdicts on endpoints of upstream u; later ones
// for the same endpoint replace earlier ones. The Directory holds what the
// checker published and nothing else: verdicts on an upstream that does not
// exist (yet, or any more) are kept, without effect, until withdrawn, so a
// checker that did not see an upstream go and come back still agrees with the
// Directory. A verdict on an address no EndpointSet of u has is kept too and
// has no effect until one does, so the checker and the sets need not change
// in step.
func (b *Batch) PutCheckVerdicts(u Key, vs []CheckVerdict) {
	if len(vs) == 0 {
		return
	}
	if b.checks == nil {
		b.checks = map[Key]map[checkAddr]CheckVerdict{}
	}
	m := b.checks[u]
	if m == nil {
		m = make(map[checkAddr]CheckVerdict, len(vs))
		b.checks[u] = m
	}
	for _, v := range vs {
		m[checkAddr{v.Address, v.Port}] = v
	}
}

// ReplaceCheckVerdicts makes vs the whole of upstream u's verdicts: u's
// verdicts on endpoints vs does not name are withdrawn, and an empty vs
// withdraws them all. It is for a source that holds every verdict of an
// upstream (a Kubernetes replica reading them from the Upstream's status).
func (b *Batch) ReplaceCheckVerdicts(u Key, vs []CheckVerdict) {
	if b.replaceChecks == nil {
		b.replaceChecks = map[Key]struct{}{}
	}
	b.replaceChecks[u] = struct{}{}
	if b.checks != nil {
		delete(b.checks, u)
	}
	b.PutCheckVerdicts(u, vs)
}

// stageChecks keeps the batch's verdicts that change something, and marks
// their upstreams affected: a verdict change re-resolves only its upstream.
func (st *staged) stageChecks(b Batch) {
	checks := b.checks
	if len(b.replaceChecks) > 0 {
		// the batch's own maps stay as they are: withdrawals go to copies
		checks = maps.Clone(b.checks)
		if checks == nil {
			checks = map[Key]map[checkAddr]CheckVerdict{}
		}
		for u := range b.replaceChecks {
			vs := maps.Clone(checks[u])
			if vs == nil {
				vs = map[checkAddr]CheckVerdict{}
			}
			for a := range st.d.checks[u] {
				if _, ok := vs[a]; !ok {
					vs[a] = CheckVerdict{Address: a.address, Port: a.port}
				}
			}
			checks[u] = vs
		}
	}
	for u, vs := range checks {
		cur := st.d.checks[u]
		var changed map[checkAddr]CheckVerdict
		for a, v := range vs {
			old, had := cur[a]
			if (v.withdrawn() && !had) || (had && old == v) {
				continue
			}
			if changed == nil {
				changed = map[checkAddr]CheckVerdict{}
			}
			changed[a] = v
		}
		if changed == nil {
			continue
		}
		if st.checks == nil {
			st.checks = map[Key]map[checkAddr]CheckVerdict{}
		}
		st.checks[u] = changed
		if _, ok := st.upstream(u); ok {
			st.affected[u] = struct{}{}
		}
	}
}

// checkOf is the verdict on an endpoint of upstream u after the batch.
func (st *staged) checkOf(u Key, a checkAddr) (CheckVerdict, bool) {
	if v, ok := st.checks[u][a]; ok {
		return v, !v.withdrawn()
	}
	v, ok := st.d.checks[u][a]
	return v, ok
}

// hasChecks reports whether upstream u may have verdicts after the batch, so
// an upstream without checks resolves as before, with no lookups.
func (st *staged) hasChecks(u Key) bool {
	return len(st.d.checks[u]) > 0 || len(st.checks[u]) > 0
}

func (d *Directory) commitChecks(st *staged) {
	for u, vs := range st.checks {
		m := d.checks[u]
		if m == nil {
			m = make(map[checkAddr]CheckVerdict, len(vs))
			d.checks[u] = m
		}
		for a, v := range vs {
			if v.withdrawn() {
				delete(m, a)
			} else {
				m[a] = v
			}
		}
		if len(m) == 0 {
			delete(d.checks, u)
		}
	}
}

// mergeProbe is the worse of an endpoint's own probe signal and the check's
// verdict (docs/health.md): Unhealthy if either says so, else Healthy if
// either does, else Unknown. The origin is the deciding signal's; when both
// say the same, both, the EndpointSet's first, so neither source of an
// ejection is hidden.
func mergeProbe(h Health, v CheckVerdict) Health {
	switch {
	case v.Probe > h.Probe:
		h.Probe, h.ProbeOrigin = v.Probe, v.Origin
	case v.Probe == h.Probe && v.Probe != weights.ProbeUnknown:
		switch {
		case h.ProbeOrigin == "":
			h.ProbeOrigin = v.Origin
		case v.Origin != "":
			h.ProbeOrigin += "; " + v.Origin
		}
	}
	return h
}
