package publish

import (
	"fmt"
	"slices"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xdsname"
)

// spatialView is the view Envoys read: spatial routing is for Envoy only.
const spatialView = int(translate.Weighted)

// spatialPublished is what was last published for one serving domain.
type spatialPublished struct {
	state     *topology.SpatialState
	upstreams []*topology.UpstreamState // by replica, as rendered
	clusters  map[string]*xdscache.Entry
	endpoints map[string]*xdscache.Entry
	vhost     *route.VirtualHost
}

// spatialSet is the spatial part of the publication.
type spatialSet struct {
	domains  map[topology.Key]*spatialPublished
	listener *xdscache.Entry
	route    *xdscache.Entry
}

// spatialUpdate renders the domains whose state or replica upstreams changed since the
// last publication and returns the changes with the next spatial set. An endpoint change
// inside a replica re-sends that domain's CLAs only; RDS is rebuilt only when a domain's
// state (map, health, problems) changed, and re-sent only when its bytes did.
func (p *Publisher) spatialUpdate(s *topology.Snapshot, version string, put func(int, string, *xdscache.Entry, *xdscache.Entry),
	del func(int, string, *xdscache.Entry)) (spatialSet, error) {
	prev := p.spatial
	if len(prev.domains) == 0 && prev.listener == nil && prev.route == nil && len(s.Spatial()) == 0 {
		return prev, nil // no spatial routing before or now
	}
	next := spatialSet{domains: map[topology.Key]*spatialPublished{}, listener: prev.listener, route: prev.route}
	routesChanged := false
	for _, st := range s.Spatial() {
		if !st.Serving() {
			continue
		}
		k := st.Domain.Key
		old := prev.domains[k]
		ups := make([]*topology.UpstreamState, len(st.Replicas))
		for i, r := range st.Replicas {
			ups[i] = s.Upstream(r.Upstream)
		}
		if old != nil && old.state == st && slices.Equal(old.upstreams, ups) {
			next.domains[k] = old
			continue
		}
		pub, vhostChanged, err := renderDomain(s, st, old, ups, version)
		if err != nil {
			return spatialSet{}, err
		}
		pub.stamp(visibility(domainExport(st.Domain, p.export), k.Namespace))
		routesChanged = routesChanged || vhostChanged
		var was spatialPublished
		if old != nil {
			was = *old
		}
		next.domains[k] = pub
		for name, e := range pub.clusters {
			put(spatialView, resource.ClusterType, was.clusters[name], e)
		}
		for name, e := range pub.endpoints {
			put(spatialView, resource.EndpointType, was.endpoints[name], e)
		}
		for name, e := range was.clusters {
			if pub.clusters[name] == nil {
				del(spatialView, resource.ClusterType, e)
				del(spatialView, resource.EndpointType, was.endpoints[name])
			}
		}
	}
	for k, old := range prev.domains {
		if next.domains[k] != nil {
			continue
		}
		routesChanged = true
		for name, e := range old.clusters {
			del(spatialView, resource.ClusterType, e)
			del(spatialView, resource.EndpointType, old.endpoints[name])
		}
	}
	if len(next.domains) == 0 {
		del(spatialView, resource.ListenerType, prev.listener)
		del(spatialView, resource.RouteType, prev.route)
		next.listener, next.route = nil, nil
		return next, nil
	}
	if prev.listener == nil {
		l, err := translate.SpatialListener(p.spatialOptions)
		if err != nil {
			return spatialSet{}, err
		}
		if next.listener, err = reuse(nil, l, version, false); err != nil {
			return spatialSet{}, err
		}
		put(spatialView, resource.ListenerType, nil, next.listener)
	}
	if routesChanged || prev.route == nil {
		keys := make([]topology.Key, 0, len(next.domains))
		for k := range next.domains {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, topology.Key.Compare)
		hosts := make([]*route.VirtualHost, len(keys))
		for i, k := range keys {
			hosts[i] = next.domains[k].vhost
		}
		rc, err := translate.SpatialRoutes(hosts)
		if err != nil {
			return spatialSet{}, err
		}
		if next.route, err = reuse(prev.route, rc, version, false); err != nil {
			return spatialSet{}, err
		}
		put(spatialView, resource.RouteType, prev.route, next.route)
	}
	return next, nil
}

// domainExport is the rule in force for a domain: its own, else def, else
// every namespace.
func domainExport(d topology.SpatialDomain, def topology.Export) topology.Export {
	switch {
	case d.ExportTo.Set:
		return d.ExportTo
	case def.Set:
		return def
	}
	return topology.ExportAll
}

// stamp makes the domain's clusters and endpoints say that vis is who may
// read them. The spatial listener and route are every domain's, and stay
// visible to every client.
func (pub *spatialPublished) stamp(vis xdscache.Visibility) {
	for name, e := range pub.clusters {
		pub.clusters[name] = e.WithVisibility(vis)
	}
	for name, e := range pub.endpoints {
		pub.endpoints[name] = e.WithVisibility(vis)
	}
}

// renderDomain renders one serving domain whose state or replica upstreams changed,
// keeping the entries of replicas whose Upstream is the one rendered last time and the
// VirtualHost when the domain's state is the same.
func renderDomain(s *topology.Snapshot, st *topology.SpatialState, old *spatialPublished,
	ups []*topology.UpstreamState, version string) (pub *spatialPublished, vhostChanged bool, err error) {
	k := st.Domain.Key
	var was spatialPublished
	if old != nil {
		was = *old
	}
	// a replica cluster carries the domain's load reporting: a change of it renders
	// every replica cluster again
	sameLrs := old != nil && old.state.Domain.LoadReportInterval == st.Domain.LoadReportInterval
	unchanged := func(i int) bool {
		return sameLrs && i < len(was.upstreams) && was.upstreams[i] == ups[i] &&
			was.clusters[xdsname.ReplicaCluster(k, st.Replicas[i].Name)] != nil
	}
	res, err := translate.SpatialDomain(st, s.Upstream, unchanged)
	if err != nil {
		return nil, false, err
	}
	pub = &spatialPublished{state: st, upstreams: ups, clusters: map[string]*xdscache.Entry{}, endpoints: map[string]*xdscache.Entry{}}
	for i, r := range st.Replicas {
		if unchanged(i) {
			name := xdsname.ReplicaCluster(k, r.Name)
			pub.clusters[name], pub.endpoints[name] = was.clusters[name], was.endpoints[name]
		}
	}
	for _, c := range res.Clusters {
		if pub.clusters[c.Name], err = reuse(was.clusters[c.Name], c, version, false); err != nil {
			return nil, false, err
		}
	}
	for _, cla := range res.Endpoints {
		// a changed cluster makes Envoy re-fetch its endpoints: always send them then
		force := was.clusters[cla.ClusterName] != pub.clusters[cla.ClusterName]
		if pub.endpoints[cla.ClusterName], err = reuse(was.endpoints[cla.ClusterName], cla, version, force); err != nil {
			return nil, false, err
		}
	}
	if err := luaClustersPublished(res.DataClusters, pub.clusters); err != nil {
		return nil, false, &translate.SpatialError{Domain: k, Err: err}
	}
	if old != nil && old.state == st {
		pub.vhost = old.vhost
		return pub, false, nil
	}
	src, err := translate.SpatialLua(st, res.LuaClusters)
	if err != nil {
		return nil, false, err
	}
	if pub.vhost, err = translate.SpatialDomainVirtualHost(st, src); err != nil {
		return nil, false, &translate.SpatialError{Domain: k, Err: err}
	}
	return pub, true, nil
}

// luaClustersPublished checks that every cluster the Lua names is in the same CDS:
// the route selects it by header, which neither Envoy's validate_clusters nor
// go-control-plane's consistency check can see.
func luaClustersPublished(names []string, clusters map[string]*xdscache.Entry) error {
	for _, name := range names {
		if clusters[name] == nil {
			return fmt.Errorf("the Lua names cluster %q, which is not in CDS", name)
		}
	}
	return nil
}
