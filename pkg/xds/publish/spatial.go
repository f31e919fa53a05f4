package publish

import (
	"fmt"
	"slices"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdsname"
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
	vis       xdscache.Visibility // who may read the domain
}

// spatialSet is the spatial part of the publication.
type spatialSet struct {
	domains  map[topology.Key]*spatialPublished
	listener *xdscache.Entry
	// route is the spatial RouteConfiguration every client reads that no
	// variant names: the virtual hosts of the domains exported to every
	// namespace. variants are the routes of the audience classes, each
	// visible to the namespaces of its class (see spatialClasses).
	route    *xdscache.Entry
	variants []*xdscache.Entry
	// routes are the renderings of this publication's classes, by the
	// restricted domains each holds ("" for the base).
	routes map[string]*spatialRoute
}

// spatialRoute is one rendering of the spatial RouteConfiguration.
type spatialRoute struct {
	hosts   []*route.VirtualHost // its domains' virtual hosts, in key order, as rendered
	entry   *xdscache.Entry      // as rendered, visible to every client
	stamped *xdscache.Entry      // as published, visible to its class
}

// spatialUpdate renders the domains whose state or replica upstreams changed since the
// last publication and returns the changes with the next spatial set. An endpoint change
// inside a replica re-sends that domain's CLAs only; RDS is rebuilt only when a domain's
// state (map, health, problems) or who may read it changed, then only for the audience
// classes that hold the domain, and re-sent only to clients whose bytes changed.
func (p *Publisher) spatialUpdate(s *topology.Snapshot, put func(int, string, *xdscache.Entry, *xdscache.Entry),
	del func(int, string, *xdscache.Entry), emit func(xdscache.Change)) (spatialSet, error) {
	prev := p.spatial
	if len(prev.domains) == 0 && prev.listener == nil && prev.route == nil && len(s.Spatial()) == 0 {
		return prev, nil // no spatial routing before or now
	}
	next := spatialSet{domains: map[topology.Key]*spatialPublished{}, listener: prev.listener, route: prev.route,
		variants: prev.variants, routes: prev.routes}
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
		pub, vhostChanged, err := renderDomain(s, st, old, ups)
		if err != nil {
			return spatialSet{}, err
		}
		pub.stamp(visibility(domainExport(st.Domain, p.export), k.Namespace))
		routesChanged = routesChanged || vhostChanged || old == nil || old.vis != pub.vis
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
		next.listener, next.route, next.variants, next.routes = nil, nil, nil, nil
		return next, nil
	}
	if !routesChanged && prev.route != nil {
		return next, nil
	}
	classes := spatialClasses(s, next.domains)
	if prev.listener == nil {
		l, err := translate.SpatialListener(p.spatialOptions)
		if err != nil {
			return spatialSet{}, err
		}
		if next.listener, err = reuse(nil, l, false); err != nil {
			return spatialSet{}, err
		}
	}
	// The listener names no domain, cluster or partition (its Lua is a no-op; each
	// virtual host carries its domain's), yet only a client that may read some domain
	// is sent it: every client when a domain is exported to every namespace.
	next.listener = next.listener.WithVisibility(classes.listener)
	put(spatialView, resource.ListenerType, prev.listener, next.listener)

	next.routes = make(map[string]*spatialRoute, len(classes.classes))
	next.variants = nil
	for i, cl := range classes.classes {
		r, err := renderRoutes(prev.routes[cl.key], cl, next.domains)
		if err != nil {
			return spatialSet{}, err
		}
		next.routes[cl.key] = r
		if i == 0 {
			next.route = r.stamped
		} else {
			next.variants = append(next.variants, r.stamped)
		}
	}
	if next.route != prev.route || !slices.Equal(next.variants, prev.variants) {
		emit(xdscache.Change{View: spatialView, TypeURL: resource.RouteType, Name: translate.SpatialRouteName,
			Entry: next.route, Audiences: next.variants})
	}
	return next, nil
}

// spatialClass is an audience class of the spatial route: the namespaces whose
// clients may read the same serving domains, which its rendering holds.
type spatialClass struct {
	key     string         // the restricted domains it holds, as "ns/name" lines; "" for none
	domains []topology.Key // every domain it holds, in key order
	vis     xdscache.Visibility
}

// spatialAudiences are the audience classes of one publication's spatial route, and
// who may read its listener.
type spatialAudiences struct {
	// classes[0] is the base, read by every client no other class names (anonymous
	// ones too): the domains exported to every namespace. Each other class is the
	// namespaces that may read the same restricted domains besides those, in the
	// order of their first namespace; their visibilities are disjoint.
	classes  []spatialClass
	listener xdscache.Visibility
}

// spatialClasses groups the namespaces the serving domains' exportTo rules name by
// the domains they may read. A namespace no rule names reads the domains exported
// to every namespace, as an anonymous client does: the base. So there are at most as
// many classes as namespaces named in the rules (each rule names 64 at most), plus
// one, however many namespaces the clients come from.
func spatialClasses(s *topology.Snapshot, domains map[topology.Key]*spatialPublished) spatialAudiences {
	var open []topology.Key
	readers := map[string][]topology.Key{} // namespace → the restricted domains it may read, in key order
	var named []string
	for _, st := range s.Spatial() {
		pub := domains[st.Domain.Key]
		if pub == nil {
			continue
		}
		if !pub.vis.Restricted() {
			open = append(open, st.Domain.Key)
			continue
		}
		for _, ns := range pub.vis.Namespaces() {
			if readers[ns] == nil {
				named = append(named, ns)
			}
			readers[ns] = append(readers[ns], st.Domain.Key)
		}
	}
	slices.Sort(named)
	base := spatialClass{domains: open, vis: xdscache.Visibility{}}
	out := spatialAudiences{listener: xdscache.Visibility{}}
	if len(open) == 0 {
		// no domain for every namespace: only the named ones read the listener
		// and a route, and the base is no client's
		base.vis = xdscache.VisibleToNamespaces()
		out.listener = xdscache.VisibleToNamespaces(named...)
	}
	out.classes = []spatialClass{base}
	members := map[string][]string{} // class key → its namespaces
	for _, ns := range named {
		own := readers[ns]
		var b strings.Builder
		for _, k := range own {
			b.WriteString(k.String())
			b.WriteByte('\n')
		}
		key := b.String()
		if members[key] == nil {
			all := append(slices.Clone(open), own...)
			slices.SortFunc(all, topology.Key.Compare)
			out.classes = append(out.classes, spatialClass{key: key, domains: all})
		}
		members[key] = append(members[key], ns)
	}
	for i := 1; i < len(out.classes); i++ {
		out.classes[i].vis = xdscache.VisibleToNamespaces(members[out.classes[i].key]...)
	}
	return out
}

// renderRoutes is the rendering of one class: prev's when it holds the same virtual
// hosts, else a new one (which keeps prev's entry, and its version, when the bytes are
// the same), stamped with the class's visibility.
func renderRoutes(prev *spatialRoute, cl spatialClass, domains map[topology.Key]*spatialPublished) (*spatialRoute, error) {
	hosts := make([]*route.VirtualHost, len(cl.domains))
	for i, k := range cl.domains {
		hosts[i] = domains[k].vhost
	}
	r := &spatialRoute{hosts: hosts}
	if prev != nil && slices.Equal(prev.hosts, hosts) {
		r.entry = prev.entry
	} else {
		rc, err := translate.SpatialRoutes(hosts)
		if err != nil {
			return nil, err
		}
		var old *xdscache.Entry
		if prev != nil {
			old = prev.entry
		}
		if r.entry, err = reuse(old, rc, false); err != nil {
			return nil, err
		}
	}
	r.stamped = r.entry.WithVisibility(cl.vis)
	if prev != nil && prev.stamped.Any == r.stamped.Any && prev.stamped.Visible == cl.vis {
		r.stamped = prev.stamped
	}
	return r, nil
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
// read them. Its virtual host goes into the spatial routes of the audience
// classes that may read it (spatialClasses).
func (pub *spatialPublished) stamp(vis xdscache.Visibility) {
	pub.vis = vis
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
	ups []*topology.UpstreamState) (pub *spatialPublished, vhostChanged bool, err error) {
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
		if pub.clusters[c.Name], err = reuse(was.clusters[c.Name], c, false); err != nil {
			return nil, false, err
		}
	}
	for _, cla := range res.Endpoints {
		// a changed cluster makes Envoy re-fetch its endpoints: always send them then
		force := was.clusters[cla.ClusterName] != pub.clusters[cla.ClusterName]
		if pub.endpoints[cla.ClusterName], err = reuse(was.endpoints[cla.ClusterName], cla, force); err != nil {
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
