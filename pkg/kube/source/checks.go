package source

import (
	"net/netip"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// listedEndpoints turns the endpoints the leader listed in a status field
// into verdicts: at most MaxCheckedEndpointsPerUpstream, as the schema
// allows; an entry that cannot be an endpoint (a bad address or port) is
// skipped; an empty origin (which would read as a withdrawal) becomes
// fallback.
func listedEndpoints[E any, V any](list []E, of func(E) (address string, port int32, origin, generation string), fallback string, verdict func(address string, port uint32, origin, generation string) V) []V {
	list = list[:min(len(list), v1alpha1.MaxCheckedEndpointsPerUpstream)]
	out := make([]V, 0, len(list))
	for _, e := range list {
		address, port, origin, gen := of(e)
		a, err := netip.ParseAddr(address)
		if err != nil || port < 1 || port > 65535 {
			continue
		}
		if origin == "" {
			origin = fallback
		}
		out = append(out, verdict(a.String(), uint32(port), conditions.Clip(origin, 256), conditions.Clip(gen, v1alpha1.MaxGenerationLength)))
	}
	return out
}

// CheckVerdicts reads the leader's active-check verdicts from an Upstream's
// status: each endpoint listed Unhealthy, with its origin. Without
// spec.healthCheck there are none, whatever status still says.
func CheckVerdicts(u *v1alpha1.Upstream) []topology.CheckVerdict {
	ac := u.Status.ActiveChecks
	if u.Spec.HealthCheck == nil || ac == nil {
		return nil
	}
	return listedEndpoints(ac.Unhealthy, func(e v1alpha1.CheckedEndpoint) (string, int32, string, string) {
		return e.Address, e.Port, e.Origin, e.Generation
	},
		"active check", func(a string, p uint32, o, g string) topology.CheckVerdict {
			return topology.CheckVerdict{Address: a, Port: p, Probe: weights.ProbeUnhealthy, Origin: o, Generation: g}
		})
}

// outlierVerdicts reads the leader's fleet outlier decision from an
// Upstream's status: each endpoint listed is ejected, with its evidence.
// Without spec.outlierDetection there are none, whatever status still says.
// An ejection stays until the leader removes it: a replica does not end it
// on its own at its until, so every replica changes at the same status
// revision.
func outlierVerdicts(u *v1alpha1.Upstream) []topology.OutlierVerdict {
	oe := u.Status.OutlierEjections
	if u.Spec.OutlierDetection == nil || oe == nil {
		return nil
	}
	return listedEndpoints(oe.Ejected, func(e v1alpha1.EjectedEndpoint) (string, int32, string, string) {
		return e.Address, e.Port, e.Origin, e.Generation
	},
		"load reports", func(a string, p uint32, o, g string) topology.OutlierVerdict {
			return topology.OutlierVerdict{Address: a, Port: p, Ejected: true, Origin: o, Generation: g}
		})
}
