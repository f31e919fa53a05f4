package source

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// Node labels that place an imported endpoint.
const (
	LabelRegion = "topology.kubernetes.io/region"
	LabelZone   = "topology.kubernetes.io/zone"
)

// upstreamGone deletes an Upstream and everything it imported.
func (s *Source) upstreamGone(k topology.Key) []op {
	ops := []op{{ref: topology.ObjectRef{Kind: topology.KindUpstream, Key: k}, upstream: k, apply: func(b *topology.Batch) {
		b.DeleteUpstream(k)
		b.ReplaceCheckVerdicts(k, nil)
		b.ReplaceOutlierVerdicts(k, nil)
	}}}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, set := range s.imported[k] {
		ops = append(ops, op{ref: topology.ObjectRef{Kind: KindService, Key: set}, upstream: k, apply: func(b *topology.Batch) { b.DeleteEndpointSet(set) }})
	}
	delete(s.imported, k)
	delete(s.refs, k)
	delete(s.clusterConds, k)
	s.forgetImporter(k)
	return ops
}

// forgetImporter drops an Upstream from the Service and Node indexes.
func (s *Source) forgetImporter(up topology.Key) {
	if svc, ok := s.serviceOf[up]; ok {
		delete(s.serviceOf, up)
		delete(s.importers[svc], up)
		if len(s.importers[svc]) == 0 {
			delete(s.importers, svc)
		}
	}
	for _, n := range s.nodesOf[up] {
		delete(s.nodeUsers[n], up)
		if len(s.nodeUsers[n]) == 0 {
			delete(s.nodeUsers, n)
		}
	}
	delete(s.nodesOf, up)
}

// importFor turns the Service an Upstream imports into endpoint sets, one
// per (region, zone), and deletes the sets it imported before that are gone.
// A missing Service or port imports nothing; the status writer says why.
// An Upstream without spec.localityAffinity takes its affinity from the
// Service's trafficDistribution (ServiceAffinity): u.Affinity is set here,
// before the Upstream is put, so a change of the field changes the Upstream
// and re-renders it.
func (s *Source) importFor(ctx context.Context, u *topology.Upstream) ([]op, error) {
	var sets []topology.EndpointSet
	var nodes []string
	ref := ""
	var cond *metav1.Condition
	if u.Service != nil {
		reads, c := s.clusterReads(u)
		cond = c
		seen := map[string]string{} // address:port → the cluster that has it
		var dups, truncated []string
		for _, in := range reads {
			imp, err := s.serviceSets(ctx, *u, in)
			if err != nil {
				return nil, err
			}
			// the reference resolves as well as in the cluster where it resolves best
			if refRank(imp.ref) > refRank(ref) {
				ref = imp.ref
			}
			if imp.truncated > 0 {
				truncated = append(truncated, fmt.Sprintf("cluster %s has %d more endpoints than the %d one cluster may give a Service; the first by address are imported", in.name, imp.truncated, MaxEndpointsPerCluster))
			}
			if !in.remote && u.Affinity == nil && imp.svc != nil {
				u.Affinity = ServiceAffinity(imp.svc)
			}
			// a flat network: one address:port is one endpoint, so the same
			// one in two clusters is a conflict the first cluster wins
			for i := range imp.sets {
				set := &imp.sets[i]
				set.Endpoints = slices.DeleteFunc(set.Endpoints, func(e topology.Endpoint) bool {
					id := net.JoinHostPort(e.Address, strconv.Itoa(int(e.Port)))
					if first, ok := seen[id]; ok && first != in.name {
						dups = append(dups, fmt.Sprintf("%s in cluster %s is also in cluster %s, which wins", id, in.name, first))
						return true
					}
					seen[id] = in.name
					return false
				})
			}
			for _, set := range imp.sets {
				if len(set.Endpoints) > 0 {
					sets = append(sets, set)
				}
			}
			for _, n := range imp.nodes {
				nodes = append(nodes, nodeKey(in, n))
			}
		}
		if len(truncated) > 0 {
			if cond == nil {
				cond = &metav1.Condition{Type: conditions.ConditionRemoteClustersSynced, Status: metav1.ConditionTrue, Reason: conditions.ReasonClustersSynced}
			}
			cond.Message = strings.TrimPrefix(cond.Message+"; ", "; ") + conditions.List(truncated)
		}
		if len(dups) > 0 {
			if cond == nil {
				cond = &metav1.Condition{Type: conditions.ConditionRemoteClustersSynced, Status: metav1.ConditionTrue, Reason: conditions.ReasonClustersSynced}
			}
			if cond.Status == metav1.ConditionTrue {
				cond.Reason = conditions.ReasonDuplicateAcrossClusters
			}
			cond.Message = strings.TrimPrefix(cond.Message+"; ", "; ") + "duplicate endpoints refused (the cluster first by name wins): " + conditions.List(dups)
		}
	}
	s.mu.Lock()
	if !condEqual(s.clusterConds[u.Key], cond) {
		if cond == nil {
			delete(s.clusterConds, u.Key)
		} else {
			s.clusterConds[u.Key] = *cond
		}
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetImporter(u.Key)
	// the status writer's ResolvedRefs condition follows the reference even
	// when the topology does not change (a Service with no endpoints yet)
	if s.refs[u.Key] != ref {
		if ref == "" {
			delete(s.refs, u.Key)
		} else {
			s.refs[u.Key] = ref
		}
		close(s.changed)
		s.changed = make(chan struct{})
	}
	if u.Service != nil {
		svc := topology.Key{Namespace: u.Key.Namespace, Name: u.Service.Name}
		if s.importers[svc] == nil {
			s.importers[svc] = map[topology.Key]struct{}{}
		}
		s.importers[svc][u.Key] = struct{}{}
		s.serviceOf[u.Key] = svc
		for _, n := range nodes {
			if s.nodeUsers[n] == nil {
				s.nodeUsers[n] = map[topology.Key]struct{}{}
			}
			s.nodeUsers[n][u.Key] = struct{}{}
		}
		if len(nodes) > 0 {
			s.nodesOf[u.Key] = nodes
		}
	}
	var ops []op
	now := map[topology.Key]bool{}
	for _, set := range sets {
		now[set.Key] = true
		ops = append(ops, op{ref: topology.ObjectRef{Kind: KindService, Key: set.Key}, upstream: u.Key, apply: func(b *topology.Batch) { b.PutEndpointSet(set) }})
	}
	for _, old := range s.imported[u.Key] {
		if !now[old] {
			ops = append(ops, op{ref: topology.ObjectRef{Kind: KindService, Key: old}, upstream: u.Key, apply: func(b *topology.Batch) { b.DeleteEndpointSet(old) }})
		}
	}
	keys := make([]topology.Key, 0, len(now))
	for k := range now {
		keys = append(keys, k)
	}
	s.imported[u.Key] = keys
	return ops, nil
}

// clusterRead is one cluster an import reads.
type clusterRead struct {
	name       string
	remote     bool
	reader     client.Reader
	staleSince time.Time               // set while past the staleness bound
	choice     *topology.ClusterImport // from spec.endpointsFrom.clusters
}

// nodeKey names a Node in the node index: a remote one with its cluster.
func nodeKey(in clusterRead, node string) string {
	if !in.remote {
		return node
	}
	return in.name + "\x00" + node
}

// clusterReads lists the clusters an importing Upstream reads, in name
// order, and its RemoteClustersSynced condition (nil when it reads the home
// cluster alone and names no cluster).
func (s *Source) clusterReads(u *topology.Upstream) ([]clusterRead, *metav1.Condition) {
	home := s.ClusterName
	if home == "" {
		home = DefaultClusterName
	}
	views := s.Remotes.views()
	states := map[string]ClusterStatus{}
	for _, st := range s.Remotes.Status() {
		if _, ok := states[st.Name]; !ok || st.State != ClusterError {
			states[st.Name] = st
		}
	}
	var reads []clusterRead
	var bad, unreachable, ok []string
	want := func(name string) (*topology.ClusterImport, bool) {
		if u.Service.Clusters == nil {
			return nil, true
		}
		for i := range u.Service.Clusters {
			if u.Service.Clusters[i].Name == name {
				return &u.Service.Clusters[i], true
			}
		}
		return nil, false
	}
	if c, yes := want(home); yes {
		reads = append(reads, clusterRead{name: home, reader: s.Reader, choice: c})
	}
	for _, v := range views {
		c, yes := want(v.name)
		if !yes {
			continue
		}
		reads = append(reads, clusterRead{name: v.name, remote: true, reader: v.reader, staleSince: v.staleSince, choice: c})
	}
	slices.SortFunc(reads, func(a, b clusterRead) int { return strings.Compare(a.name, b.name) })
	names := slices.Sorted(maps.Keys(states))
	if u.Service.Clusters != nil {
		names = names[:0]
		for _, c := range u.Service.Clusters {
			if c.Name != home {
				names = append(names, c.Name)
			}
		}
	}
	for _, n := range names {
		st, found := states[n]
		switch {
		case !found:
			bad = append(bad, fmt.Sprintf("cluster %s is not registered (no Secret labelled %s=%s)", n, LabelRemoteCluster, n))
		case st.State == ClusterSynced:
			ok = append(ok, n)
		case st.State == ClusterUnreachable:
			unreachable = append(unreachable, fmt.Sprintf("cluster %s unreachable since %s (its last-known endpoints serve)", n, st.Since.UTC().Format(time.TimeOnly)))
		case st.State == ClusterStale:
			unreachable = append(unreachable, fmt.Sprintf("cluster %s unreachable since %s (its endpoints are Unavailable)", n, st.Since.UTC().Format(time.TimeOnly)))
		case st.State == ClusterPending:
			bad = append(bad, fmt.Sprintf("cluster %s has not synced yet", n))
		default:
			bad = append(bad, fmt.Sprintf("cluster %s: %s", n, conditions.Clip(st.Error, 200)))
		}
	}
	if len(names) == 0 {
		return reads, nil
	}
	c := &metav1.Condition{Type: conditions.ConditionRemoteClustersSynced, Status: metav1.ConditionTrue, Reason: conditions.ReasonClustersSynced,
		Message: "remote clusters synced: " + strings.Join(ok, ", ")}
	switch {
	case len(bad) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, conditions.ReasonRemoteClusterError, conditions.List(append(bad, unreachable...))
	case len(unreachable) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, conditions.ReasonRemoteClusterUnreachable, conditions.List(unreachable)
	}
	return reads, c
}

func condEqual(a metav1.Condition, b *metav1.Condition) bool {
	if b == nil {
		return a.Type == ""
	}
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}

// ServicePort finds the Service port an Upstream names (by name or number).
func ServicePort(svc *corev1.Service, port string) (corev1.ServicePort, bool) {
	n, numeric := strconv.Atoi(port)
	for _, p := range svc.Spec.Ports {
		if (numeric == nil && int(p.Port) == n) || (numeric != nil && p.Name == port) {
			return p, true
		}
	}
	return corev1.ServicePort{}, false
}

// AdminState maps EndpointSlice conditions: ready → Ready, serving and
// terminating → Draining, anything else → Unavailable. Unset ready and
// serving mean ready, as the EndpointSlice API asks consumers to read them.
func AdminState(c discoveryv1.EndpointConditions) weights.AdminState {
	ready := c.Ready == nil || *c.Ready
	serving := c.Serving == nil || *c.Serving
	terminating := c.Terminating != nil && *c.Terminating
	switch {
	case ready && !terminating:
		return weights.Ready
	case serving && terminating:
		return weights.Draining
	}
	return weights.Unavailable
}

// ServiceAffinity is the affinity an importing Upstream without
// spec.localityAffinity takes from its Service's spec.trafficDistribution
// (nil when the Service states no preference): PreferClose (the older name
// of PreferSameZone) and PreferSameZone are PreferSameZone. PreferSameNode
// is PreferSameZone too: Poise places endpoints by region and zone only, so
// it cannot tell a client's own node from the rest of its zone, and the
// zone is the closest level it can prefer. Any other value, one a newer
// Kubernetes may add, is None; the origin still names it so that explain
// shows what was not followed.
func ServiceAffinity(svc *corev1.Service) *topology.Affinity {
	td := svc.Spec.TrafficDistribution
	if td == nil || *td == "" {
		return nil
	}
	mode := affinity.None
	switch *td {
	case corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone,
		corev1.ServiceTrafficDistributionPreferSameNode:
		mode = affinity.PreferSameZone
	}
	return &topology.Affinity{Mode: mode, Origin: fmt.Sprintf("Service %s/%s trafficDistribution %s", svc.Namespace, svc.Name, *td)}
}

// serviceImport is what one read of an Upstream's Service found.
type serviceImport struct {
	sets  []topology.EndpointSet
	nodes []string // the Nodes that place the sets
	// ref is how the Service reference resolved: conditions.ReasonServiceNotFound,
	// conditions.ReasonPortNotFound or conditions.ReasonResolved
	ref string
	svc *corev1.Service // nil when it does not exist
	// truncated is how many endpoints past MaxEndpointsPerCluster a
	// remote cluster's Service had (they are not imported)
	truncated int
}

// MaxEndpointsPerCluster bounds the endpoints one remote cluster's Service
// gives an Upstream; past it, the first by address are imported.
const MaxEndpointsPerCluster = 10_000

// refRank orders how a Service reference resolves, best last.
func refRank(ref string) int {
	switch ref {
	case conditions.ReasonServiceNotFound:
		return 1
	case conditions.ReasonPortNotFound:
		return 2
	case conditions.ReasonResolved:
		return 3
	}
	return 0
}

// serviceSets reads the endpoint sets an Upstream imports, the Nodes that
// place them, the Service itself, and how the reference resolved.
func (s *Source) serviceSets(ctx context.Context, u topology.Upstream, in clusterRead) (serviceImport, error) {
	var svc corev1.Service
	err := in.reader.Get(ctx, types.NamespacedName{Namespace: u.Key.Namespace, Name: u.Service.Name}, &svc)
	if apierrors.IsNotFound(err) {
		return serviceImport{ref: conditions.ReasonServiceNotFound}, nil
	}
	if err != nil {
		return serviceImport{}, fmt.Errorf("service %s/%s in cluster %s: %w", u.Key.Namespace, u.Service.Name, in.name, err)
	}
	sp, ok := ServicePort(&svc, u.Service.Port)
	if !ok {
		return serviceImport{ref: conditions.ReasonPortNotFound, svc: &svc}, nil
	}
	// the index reads this Service's slices only, not every slice of the namespace
	var slices_ discoveryv1.EndpointSliceList
	if err := in.reader.List(ctx, &slices_, client.InNamespace(u.Key.Namespace),
		client.MatchingFields{sliceServiceIndex: u.Service.Name}); err != nil {
		return serviceImport{}, fmt.Errorf("endpointslices of %s/%s in cluster %s: %w", u.Key.Namespace, u.Service.Name, in.name, err)
	}
	type locKey struct{ region, zone string }
	byLoc := map[locKey]map[string]topology.Endpoint{}
	nodes := map[string]*corev1.Node{}
	for _, sl := range slices_.Items {
		if sl.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		var port *int32
		for _, p := range sl.Ports {
			if p.Name != nil && *p.Name == sp.Name && p.Port != nil {
				port = p.Port
			}
		}
		if port == nil {
			continue
		}
		for _, ep := range sl.Endpoints {
			var region, zone string
			if ep.NodeName != nil {
				n, err := node(ctx, in.reader, nodes, *ep.NodeName)
				if err != nil {
					return serviceImport{}, err
				}
				if n != nil {
					region, zone = n.Labels[LabelRegion], n.Labels[LabelZone]
				}
			}
			if ep.Zone != nil && *ep.Zone != "" {
				zone = *ep.Zone
			}
			lk := locKey{region, zone}
			if byLoc[lk] == nil {
				byLoc[lk] = map[string]topology.Endpoint{}
			}
			admin := AdminState(ep.Conditions)
			origin := fmt.Sprintf("EndpointSlice %s/%s in cluster %s", sl.Namespace, sl.Name, in.name)
			if !in.staleSince.IsZero() {
				admin = weights.Unavailable
				origin = fmt.Sprintf("cluster %s unreachable since %s; last seen in EndpointSlice %s/%s", in.name, in.staleSince.UTC().Format(time.TimeOnly), sl.Namespace, sl.Name)
			}
			for _, a := range ep.Addresses {
				if _, err := netip.ParseAddr(a); err != nil {
					continue
				}
				id := a + ":" + strconv.Itoa(int(*port))
				// an address may sit in two slices while they are rewritten: keep the readier
				if old, ok := byLoc[lk][id]; ok && old.Admin <= admin {
					continue
				}
				e := topology.Endpoint{Address: a, Port: uint32(*port), Weight: 1, Admin: admin, Health: topology.Health{AdminOrigin: origin}}
				e.HashKey, e.Generation = endpointIdentity(ep.TargetRef, u.Service.HashKeyFromPodName)
				byLoc[lk][id] = e
			}
		}
	}
	var out []topology.EndpointSet
	for lk, eps := range byLoc {
		set := topology.EndpointSet{
			Key:      topology.Key{Namespace: u.Key.Namespace, Name: ImportedSetName(u.Key.Name, u.Service.Name, lk.region, lk.zone)},
			Kind:     KindService,
			Upstream: u.Key.Name,
			Locality: weights.Locality{Region: lk.region, Zone: lk.zone},
		}
		if in.remote {
			// a remote cluster's endpoints are a locality of their own
			set.Key.Name += ":" + in.name
			set.Locality.SubZone = in.name
		}
		if in.choice != nil {
			p, w := in.choice.Priority, in.choice.Weight
			set.Priority, set.LocalityWeight = &p, &w
		}
		for _, e := range eps {
			set.Endpoints = append(set.Endpoints, e)
		}
		slices.SortFunc(set.Endpoints, func(a, b topology.Endpoint) int {
			if c := strings.Compare(a.Address, b.Address); c != 0 {
				return c
			}
			return int(a.Port) - int(b.Port)
		})
		out = append(out, set)
	}
	truncated := 0
	if in.remote {
		n := 0
		for _, set := range out {
			n += len(set.Endpoints)
		}
		if n > MaxEndpointsPerCluster {
			truncated = n - MaxEndpointsPerCluster
			out = firstEndpoints(out, MaxEndpointsPerCluster)
		}
	}
	// every node named, found or not: one appearing places its endpoints
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	return serviceImport{sets: out, nodes: names, ref: conditions.ReasonResolved, svc: &svc, truncated: truncated}, nil
}

// firstEndpoints keeps the first n endpoints by address and port over all
// sets (each set's endpoints are sorted), dropping sets left empty.
func firstEndpoints(sets []topology.EndpointSet, n int) []topology.EndpointSet {
	type at struct{ set, i int }
	var all []at
	for si, set := range sets {
		for i := range set.Endpoints {
			all = append(all, at{si, i})
		}
	}
	slices.SortFunc(all, func(a, b at) int {
		x, y := sets[a.set].Endpoints[a.i], sets[b.set].Endpoints[b.i]
		if c := strings.Compare(x.Address, y.Address); c != 0 {
			return c
		}
		return int(x.Port) - int(y.Port)
	})
	keep := make([]map[int]bool, len(sets))
	for _, a := range all[:n] {
		if keep[a.set] == nil {
			keep[a.set] = map[int]bool{}
		}
		keep[a.set][a.i] = true
	}
	var out []topology.EndpointSet
	for si, set := range sets {
		var eps []topology.Endpoint
		for i, e := range set.Endpoints {
			if keep[si][i] {
				eps = append(eps, e)
			}
		}
		if len(eps) > 0 {
			set.Endpoints = eps
			out = append(out, set)
		}
	}
	return out
}

// ImportedSetName names the endpoints of one (region, zone) that an Upstream
// imports from a Service. The colons keep it apart from any object name.
func ImportedSetName(upstream, service, region, zone string) string {
	return upstream + ":" + service + ":" + region + ":" + zone
}

func node(ctx context.Context, r client.Reader, seen map[string]*corev1.Node, name string) (*corev1.Node, error) {
	if n, ok := seen[name]; ok {
		return n, nil
	}
	var n corev1.Node
	err := r.Get(ctx, types.NamespacedName{Name: name}, &n)
	if apierrors.IsNotFound(err) {
		seen[name] = nil
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	seen[name] = &n
	return &n, nil
}

// endpointIdentity is an imported endpoint's hash key and generation from
// its targetRef: the generation is the referenced object's uid (a new Pod
// at a reused IP is a new generation), and the hash key, when the Upstream
// asks for it (hashKeyFrom: PodName), the Pod's name. Values longer than
// the EndpointSet fields allow are cut to their bound (uids and Pod names
// never are that long).
func endpointIdentity(ref *corev1.ObjectReference, podName bool) (hashKey, generation string) {
	if ref == nil {
		return "", ""
	}
	generation = clipTo(string(ref.UID), v1alpha1.MaxGenerationLength)
	if podName && ref.Kind == "Pod" {
		hashKey = clipTo(ref.Name, v1alpha1.MaxHashKeyLength)
	}
	return hashKey, generation
}

func clipTo(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
