package kube

import (
	"net/netip"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// checkVerdicts reads the leader's active-check verdicts from an Upstream's
// status: each endpoint listed Unhealthy, with its origin. Without
// spec.healthCheck there are none, whatever status still says; entries that
// cannot be an endpoint (a bad address or port) are skipped, and at most
// MaxCheckedEndpointsPerUpstream are read, as the schema allows.
func checkVerdicts(u *v1alpha1.Upstream) []topology.CheckVerdict {
	ac := u.Status.ActiveChecks
	if u.Spec.HealthCheck == nil || ac == nil {
		return nil
	}
	list := ac.Unhealthy[:min(len(ac.Unhealthy), v1alpha1.MaxCheckedEndpointsPerUpstream)]
	out := make([]topology.CheckVerdict, 0, len(list))
	for _, e := range list {
		a, err := netip.ParseAddr(e.Address)
		if err != nil || e.Port < 1 || e.Port > 65535 {
			continue
		}
		origin := e.Origin
		if origin == "" {
			origin = "active check" // an empty origin would read as a withdrawal
		}
		out = append(out, topology.CheckVerdict{Address: a.String(), Port: uint32(e.Port), Probe: weights.ProbeUnhealthy, Origin: clip(origin, 256)})
	}
	return out
}

// outlierVerdicts reads the leader's fleet outlier decision from an
// Upstream's status: each endpoint listed is ejected, with its evidence.
// Without spec.outlierDetection there are none, whatever status still says;
// entries that cannot be an endpoint are skipped. An ejection stays until
// the leader removes it: a replica does not end it on its own at its until,
// so every replica changes at the same status revision.
func outlierVerdicts(u *v1alpha1.Upstream) []topology.OutlierVerdict {
	oe := u.Status.OutlierEjections
	if u.Spec.OutlierDetection == nil || oe == nil {
		return nil
	}
	list := oe.Ejected[:min(len(oe.Ejected), v1alpha1.MaxCheckedEndpointsPerUpstream)]
	out := make([]topology.OutlierVerdict, 0, len(list))
	for _, e := range list {
		a, err := netip.ParseAddr(e.Address)
		if err != nil || e.Port < 1 || e.Port > 65535 {
			continue
		}
		origin := e.Origin
		if origin == "" {
			origin = "load reports"
		}
		out = append(out, topology.OutlierVerdict{Address: a.String(), Port: uint32(e.Port), Ejected: true, Origin: clip(origin, 256)})
	}
	return out
}
