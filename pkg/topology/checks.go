package topology

import "poise.dev/poise/pkg/weights"

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
	// Generation is the endpoint generation the verdict was reached on
	// (Endpoint.Generation): it applies to that generation only, so a new
	// backend at the address starts without it.
	Generation string
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
	put(&b.checks, u, vs, func(v CheckVerdict) checkAddr { return checkAddr{v.Address, v.Port} })
}

// OutlierVerdict is fleet outlier detection's decision on one endpoint of an
// upstream (spec.outlierDetection, docs/health.md): an overlay like the
// check verdicts, merged into the endpoint's own outlier signal.
type OutlierVerdict struct {
	Address string
	Port    uint32
	// Ejected with the evidence in Origin; a verdict not Ejected withdraws
	// the endpoint's ejection.
	Ejected bool
	Origin  string
	// Generation is the endpoint generation the decider ejected: the
	// ejection applies to that generation only, so a new backend at the
	// address is eligible at once.
	Generation string
}

func (v OutlierVerdict) withdrawn() bool { return !v.Ejected }

// PutOutlierVerdicts records outlier verdicts on endpoints of upstream u,
// kept and bounded as PutCheckVerdicts's: the Directory holds the ejections
// the decider published until it withdraws them.
func (b *Batch) PutOutlierVerdicts(u Key, vs []OutlierVerdict) {
	put(&b.outliers, u, vs, func(v OutlierVerdict) checkAddr { return checkAddr{v.Address, v.Port} })
}

// ReplaceCheckVerdicts makes vs the whole of upstream u's check verdicts:
// u's verdicts on endpoints vs does not name are withdrawn, and an empty vs
// withdraws them all. It is for a source that holds every verdict of an
// upstream (a Kubernetes replica reading them from the Upstream's status).
func (b *Batch) ReplaceCheckVerdicts(u Key, vs []CheckVerdict) {
	markReplaced(&b.replaceChecks, u)
	delete(b.checks, u)
	b.PutCheckVerdicts(u, vs)
}

// ReplaceOutlierVerdicts makes vs the whole of upstream u's outlier
// verdicts, as ReplaceCheckVerdicts does for check verdicts.
func (b *Batch) ReplaceOutlierVerdicts(u Key, vs []OutlierVerdict) {
	markReplaced(&b.replaceOutliers, u)
	delete(b.outliers, u)
	b.PutOutlierVerdicts(u, vs)
}

func markReplaced(m *map[Key]struct{}, u Key) {
	if *m == nil {
		*m = map[Key]struct{}{}
	}
	(*m)[u] = struct{}{}
}

// verdict is an overlay's entry: a check verdict or an outlier verdict.
type verdict interface {
	comparable
	withdrawn() bool
}

// overlay is the verdicts of one kind, by upstream, then endpoint.
type overlay[V verdict] map[Key]map[checkAddr]V

// put records verdicts on endpoints of upstream u; later ones replace earlier ones.
func put[V verdict](o *overlay[V], u Key, vs []V, addr func(V) checkAddr) {
	if len(vs) == 0 {
		return
	}
	if *o == nil {
		*o = overlay[V]{}
	}
	m := (*o)[u]
	if m == nil {
		m = make(map[checkAddr]V, len(vs))
		(*o)[u] = m
	}
	for _, v := range vs {
		m[addr(v)] = v
	}
}

// stage keeps the batch's verdicts that change something against cur, and
// marks their upstreams affected: a verdict change re-resolves only its
// upstream. For an upstream in replace, cur's verdicts the batch does not
// name are withdrawn (withdrawal makes the withdrawing verdict).
func stage[V verdict](st *staged, cur, batch overlay[V], replace map[Key]struct{}, withdrawal func(checkAddr) V) overlay[V] {
	var out overlay[V]
	consider := func(u Key, a checkAddr, v V) {
		old, had := cur[u][a]
		if (v.withdrawn() && !had) || (had && old == v) {
			return
		}
		if out == nil {
			out = overlay[V]{}
		}
		if out[u] == nil {
			out[u] = map[checkAddr]V{}
		}
		out[u][a] = v
		if _, ok := st.upstream(u); ok {
			st.affected[u] = struct{}{}
		}
	}
	for u, vs := range batch {
		for a, v := range vs {
			consider(u, a, v)
		}
	}
	for u := range replace {
		for a := range cur[u] {
			if _, named := batch[u][a]; !named {
				consider(u, a, withdrawal(a))
			}
		}
	}
	return out
}

// verdictOf is the verdict on an endpoint of upstream u after the batch.
func verdictOf[V verdict](staged, cur overlay[V], u Key, a checkAddr) (V, bool) {
	if v, ok := staged[u][a]; ok {
		return v, !v.withdrawn()
	}
	v, ok := cur[u][a]
	return v, ok
}

// commit writes the staged verdicts into cur; a withdrawal deletes.
func commit[V verdict](cur, staged overlay[V]) {
	for u, vs := range staged {
		m := cur[u]
		if m == nil {
			m = make(map[checkAddr]V, len(vs))
			cur[u] = m
		}
		for a, v := range vs {
			if v.withdrawn() {
				delete(m, a)
			} else {
				m[a] = v
			}
		}
		if len(m) == 0 {
			delete(cur, u)
		}
	}
}

func (st *staged) stageChecks(b Batch) {
	st.checks = stage(st, st.d.checks, b.checks, b.replaceChecks, func(a checkAddr) CheckVerdict {
		return CheckVerdict{Address: a.address, Port: a.port}
	})
	st.outliers = stage(st, st.d.outliers, b.outliers, b.replaceOutliers, func(a checkAddr) OutlierVerdict {
		return OutlierVerdict{Address: a.address, Port: a.port}
	})
}

// checkOf is the check verdict on an endpoint of upstream u after the batch.
func (st *staged) checkOf(u Key, a checkAddr) (CheckVerdict, bool) {
	return verdictOf(st.checks, st.d.checks, u, a)
}

// outlierOf is the outlier verdict on an endpoint of upstream u after the batch.
func (st *staged) outlierOf(u Key, a checkAddr) (OutlierVerdict, bool) {
	return verdictOf(st.outliers, st.d.outliers, u, a)
}

// hasChecks reports whether upstream u may have verdicts of either kind
// after the batch, so an upstream without them resolves as before, with no
// lookups.
func (st *staged) hasChecks(u Key) bool {
	return len(st.d.checks[u]) > 0 || len(st.checks[u]) > 0 || len(st.d.outliers[u]) > 0 || len(st.outliers[u]) > 0
}

func (d *Directory) commitChecks(st *staged) {
	commit(d.checks, st.checks)
	commit(d.outliers, st.outliers)
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

// mergeOutlier is the worse of an endpoint's own outlier signal and the
// decider's verdict: ejected if either says so; when both do, both origins,
// the EndpointSet's first.
func mergeOutlier(h Health, v OutlierVerdict) Health {
	switch {
	case !v.Ejected:
	case !h.Ejected:
		h.Ejected, h.OutlierOrigin = true, v.Origin
	case h.OutlierOrigin == "":
		h.OutlierOrigin = v.Origin
	case v.Origin != "":
		h.OutlierOrigin += "; " + v.Origin
	}
	return h
}
