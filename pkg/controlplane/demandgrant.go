package controlplane

import (
	"fmt"
	"strconv"
	"strings"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/identity"
)

// parseDemandGrant reads one --xds-demand-grant value, NS/SA=N.
func parseDemandGrant(v string) (principal string, weight uint64, err error) {
	principal, n, ok := strings.Cut(v, "=")
	ns, sa, slash := strings.Cut(principal, "/")
	if !ok || !slash || ns == "" || sa == "" || strings.Contains(sa, "/") {
		return "", 0, fmt.Errorf("--xds-demand-grant %q: want NAMESPACE/SERVICE-ACCOUNT=N", v)
	}
	weight, err = strconv.ParseUint(n, 10, 64)
	if err != nil || weight < 1 || weight > affinity.MaxDemandWeight {
		return "", 0, fmt.Errorf("--xds-demand-grant %q: want a weight 1 to %d", v, affinity.MaxDemandWeight)
	}
	return principal, weight, nil
}

// validateDemandGrants is Validate's part for XDSDemandGrant: each value
// well formed, and each principal granted once.
func (c Config) validateDemandGrants() []error {
	var errs []error
	seen := map[string]bool{}
	for _, v := range c.XDSDemandGrant {
		p, _, err := parseDemandGrant(v)
		switch {
		case err != nil:
			errs = append(errs, err)
		case seen[p]:
			errs = append(errs, fmt.Errorf("--xds-demand-grant %q: %s is granted twice", v, p))
		}
		seen[p] = true
	}
	return errs
}

// demandGrant is the server's DemandGrant for XDSDemandGrant: the weight
// granted to an identity's principal, 0 (read as 1) for one not listed;
// nil when nothing is granted.
func (c Config) demandGrant() func(identity.Identity) uint64 {
	if len(c.XDSDemandGrant) == 0 {
		return nil
	}
	grants := make(map[string]uint64, len(c.XDSDemandGrant))
	for _, v := range c.XDSDemandGrant {
		if p, w, err := parseDemandGrant(v); err == nil {
			grants[p] = w
		}
	}
	return func(id identity.Identity) uint64 { return grants[id.Principal()] }
}
