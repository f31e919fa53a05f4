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
	"poise.dev/poise/pkg/xds/xdstype"
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
	var clusters []*cluster.Cluster
	var listeners []*listener.Listener
	var routes []*route.RouteConfiguration
	for _, e := range res[resource.ClusterType] {
		var c cluster.Cluster
		if e.Decode(&c) == nil {
			clusters = append(clusters, &c)
		}
	}
	for _, e := range res[resource.ListenerType] {
		var l listener.Listener
		if e.Decode(&l) == nil {
			listeners = append(listeners, &l)
		}
	}
	for _, e := range res[resource.RouteType] {
		var rc route.RouteConfiguration
		if e.Decode(&rc) == nil {
			routes = append(routes, &rc)
		}
	}
	return consistent(func(typeURL, name string) bool {
		for _, e := range res[typeURL] {
			if e.Name == name {
				return true
			}
		}
		return false
	}, clusters, listeners, routes)
}

// consistent checks the references of the given resources against has.
func consistent(has func(typeURL, name string) bool, clusters []*cluster.Cluster, listeners []*listener.Listener, routes []*route.RouteConfiguration) error {
	var missing []string
	need := func(typeURL, name, from string) {
		if !has(typeURL, name) {
			missing = append(missing, fmt.Sprintf("%s needs %s %q", from, xdstype.Short(typeURL), name))
		}
	}
	for _, c := range clusters {
		if c.GetType() == cluster.Cluster_EDS {
			name := c.GetEdsClusterConfig().GetServiceName()
			if name == "" {
				name = c.GetName()
			}
			need(resource.EndpointType, name, "cluster "+c.GetName())
		}
	}
	for _, l := range listeners {
		for _, rds := range listenerRoutes(l) {
			need(resource.RouteType, rds, "listener "+l.GetName())
		}
	}
	for _, rc := range routes {
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
