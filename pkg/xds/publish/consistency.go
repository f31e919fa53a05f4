package publish

import (
	"fmt"
	"sort"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/xds/xdscache"
)

// InconsistencyError lists references that point at nothing.
type InconsistencyError struct {
	Missing []string
}

func (e *InconsistencyError) Error() string {
	return fmt.Sprintf("inconsistent publication: %d dangling reference(s): %v", len(e.Missing), e.Missing)
}

// Consistent checks one view of a publication: every EDS name a cluster
// uses, every RDS name a listener uses — also inside API listeners, which
// go-control-plane's own check does not open — and every cluster a route
// sends to, exists in the same view.
func Consistent(res map[string][]*xdscache.Entry) error {
	has := map[string]map[string]bool{}
	for t, entries := range res {
		has[t] = map[string]bool{}
		for _, e := range entries {
			has[t][e.Name] = true
		}
	}
	var missing []string
	need := func(typeURL, name, from string) {
		if !has[typeURL][name] {
			missing = append(missing, fmt.Sprintf("%s needs %s %q", from, xdscache.ShortType(typeURL), name))
		}
	}
	for _, e := range res[resource.ClusterType] {
		c, ok := e.Resource.(*cluster.Cluster)
		if !ok {
			continue
		}
		if c.GetType() == cluster.Cluster_EDS {
			name := c.GetEdsClusterConfig().GetServiceName()
			if name == "" {
				name = c.GetName()
			}
			need(resource.EndpointType, name, "cluster "+c.GetName())
		}
	}
	for _, e := range res[resource.ListenerType] {
		l, ok := e.Resource.(*listener.Listener)
		if !ok {
			continue
		}
		for _, rds := range listenerRoutes(l) {
			need(resource.RouteType, rds, "listener "+l.GetName())
		}
	}
	for _, e := range res[resource.RouteType] {
		rc, ok := e.Resource.(*route.RouteConfiguration)
		if !ok {
			continue
		}
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if c := r.GetRoute().GetCluster(); c != "" {
					need(resource.ClusterType, c, "route "+rc.GetName())
				}
				for _, wc := range r.GetRoute().GetWeightedClusters().GetClusters() {
					need(resource.ClusterType, wc.GetName(), "route "+rc.GetName())
				}
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return &InconsistencyError{Missing: missing}
	}
	return nil
}

// listenerRoutes returns the RDS names an API listener's or a filter
// chain's HttpConnectionManager refers to.
func listenerRoutes(l *listener.Listener) []string {
	var out []string
	add := func(m *hcm.HttpConnectionManager) {
		if name := m.GetRds().GetRouteConfigName(); name != "" {
			out = append(out, name)
		}
	}
	if a := l.GetApiListener().GetApiListener(); a != nil {
		var m hcm.HttpConnectionManager
		if a.UnmarshalTo(&m) == nil {
			add(&m)
		}
	}
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			var m hcm.HttpConnectionManager
			if tc := f.GetTypedConfig(); tc != nil && tc.UnmarshalTo(&m) == nil {
				add(&m)
			}
		}
	}
	return out
}
