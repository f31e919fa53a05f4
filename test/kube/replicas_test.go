package kube_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdsname"
	"poise.dev/poise/test/testkit"
)

// ---- the topology ----

// replicaZones are the localities of every replica-test upstream: two at
// priority 0 whose weights vary by upstream, and a standby one at priority 1
// for the even upstreams. Endpoint weights differ inside each.
var replicaZones = []struct {
	suffix, region, zone string
	priority             int32
	weights              []int64
}{
	{"a", "eu", "eu-a", 0, []int64{1, 2, 3}},
	{"b", "eu", "eu-b", 0, []int64{2, 1}},
	{"c", "us", "us-c", 1, []int64{1, 1}},
}

func replicaUpstream(i int) string { return "svc-" + strconv.Itoa(i) }

// replicaEndpoint is endpoint j of zone z of upstream i.
func replicaEndpoint(i, z, j int) v1alpha1.EndpointHealth {
	return v1alpha1.EndpointHealth{Address: fmt.Sprintf("10.%d.%d.%d", i, z, j+1), Port: 8080}
}

// replicaObjects are Upstream svc-i with its Localities and EndpointSets
// (named svc-i-a, svc-i-b, svc-i-c; from svc-7 on, locality a has a
// second set, svc-i-a-extra). svc-4 fails closed in panic; every fourth
// upstream has no overprovisioning headroom.
func replicaObjects(ns string, i int) []client.Object {
	name := replicaUpstream(i)
	u := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if i%4 == 3 {
		u.Spec.OverprovisioningFactor = new(int32(100))
	}
	if i == 4 {
		u.Spec.PanicMode = v1alpha1.PanicModeFailClosed
	}
	objs := []client.Object{u}
	for z, zone := range replicaZones {
		if zone.priority > 0 && i%2 == 1 {
			continue
		}
		set := name + "-" + zone.suffix
		id := v1alpha1.LocalityID{Region: zone.region, Zone: zone.zone}
		objs = append(objs, &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: set, Namespace: ns}, Spec: v1alpha1.LocalitySpec{
			Upstream: name, Priority: new(zone.priority), Weight: new(int64(1 + (i+z)%3)), LocalityID: id,
		}})
		es := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: set, Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: name, Locality: id}}
		for j, w := range zone.weights {
			ep := replicaEndpoint(i, z, j)
			es.Spec.Endpoints = append(es.Spec.Endpoints, v1alpha1.Endpoint{Address: ep.Address, Port: ep.Port, Weight: new(w)})
		}
		if z == 0 && i >= 7 {
			// a second EndpointSet in the locality, created first though its
			// name sorts last: the order of the published endpoints must not
			// follow the order of events
			extra := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: set + "-extra", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: name, Locality: id}}
			for j, w := range []int64{4, 1} {
				ep := replicaEndpoint(i, z, 10+j)
				extra.Spec.Endpoints = append(extra.Spec.Endpoints, v1alpha1.Endpoint{Address: ep.Address, Port: ep.Port, Weight: new(w)})
			}
			objs = append(objs, extra)
		}
		objs = append(objs, es)
	}
	return objs
}

// replicaHealth is what the test's prober has written: the unhealthy
// endpoints per EndpointSet, and therefore what explain must show.
type replicaHealth map[string][]v1alpha1.EndpointHealth

// set writes the unhealthy endpoints (indexes into zone z of upstream i)
// into the EndpointSet's status, replacing what it said before.
func (h replicaHealth) set(t *testing.T, ns string, i, z int, unhealthyEndpoints ...int) {
	t.Helper()
	set := replicaUpstream(i) + "-" + replicaZones[z].suffix
	var list []v1alpha1.EndpointHealth
	for _, j := range unhealthyEndpoints {
		ep := replicaEndpoint(i, z, j)
		ep.Probe = v1alpha1.ProbeUnhealthy
		list = append(list, ep)
	}
	setHealth(t, ns, set, list...)
	h[set] = list
}

// shows reports whether an explain report shows exactly these upstreams and
// exactly these unhealthy endpoints.
func (h replicaHealth) shows(upstreams []string) func(explain.Report) (bool, string) {
	unhealthy := map[string]bool{}
	for _, list := range h {
		for _, ep := range list {
			unhealthy[net.JoinHostPort(ep.Address, strconv.Itoa(int(ep.Port)))] = true
		}
	}
	return func(rep explain.Report) (bool, string) {
		var names []string
		var wrong []string
		for _, u := range rep.Upstreams {
			names = append(names, u.Name)
			for _, p := range u.Priorities {
				for _, l := range p.Localities {
					for _, ep := range l.Endpoints {
						addr := net.JoinHostPort(ep.Address, strconv.Itoa(int(ep.Port)))
						if (ep.Probe == string(v1alpha1.ProbeUnhealthy)) != unhealthy[addr] {
							wrong = append(wrong, fmt.Sprintf("%s %s probe %q", u.Name, addr, ep.Probe))
						}
					}
				}
			}
		}
		if !slices.Equal(names, upstreams) {
			return false, fmt.Sprintf("upstreams %v, want %v", names, upstreams)
		}
		return len(wrong) == 0, strings.Join(wrong, "; ")
	}
}

// ---- figures: what a ClusterLoadAssignment carries, compared as text ----

// explainedCLA is the ClusterLoadAssignment that docs/design/xds-publishing.md
// (ControlPlane mode, Envoy's rendering) derives from an explained
// upstream, as sorted figure lines: priority 0 holds every locality with
// traffic, weighted by it, with its selectable endpoints; the standby
// localities follow as priorities 1..N with their configured weights and
// eligible endpoints.
func explainedCLA(u explain.Upstream) string {
	lines := []string{fmt.Sprintf("overprovisioning %d", max(u.Policy.OverprovisioningFactor, 100))}
	if u.SplitBy != "ControlPlane" {
		lines = append(lines, "split by "+u.SplitBy+": not derived here")
	}
	if u.Outcome != weights.Routable.String() {
		return strings.Join(lines, "\n")
	}
	if u.DroppedMillionths > 0 {
		lines = append(lines, fmt.Sprintf("drop panic %d/MILLION", u.DroppedMillionths))
	}
	var taken []string
	for _, p := range u.Priorities {
		for _, l := range p.Localities {
			if l.Traffic == 0 {
				continue
			}
			sub := l.SubZone
			for slices.Contains(taken, l.Region+"/"+l.Zone+"/"+sub) {
				sub += translate.PrioritySuffix + strconv.FormatUint(uint64(p.Priority), 10)
			}
			taken = append(taken, l.Region+"/"+l.Zone+"/"+sub)
			loc := fmt.Sprintf("p0 %s/%s/%s", l.Region, l.Zone, sub)
			lines = append(lines, fmt.Sprintf("%s weight %d", loc, l.Traffic))
			for _, ep := range l.Endpoints {
				if ep.Selectable {
					lines = append(lines, endpointFigure(loc, ep.Address, ep.Port, uint32(ep.Weight), core.HealthStatus_HEALTHY))
				}
			}
		}
	}
	next := 1
	for _, p := range u.Priorities {
		added := false
		for _, l := range p.Localities {
			if l.Traffic > 0 {
				continue
			}
			loc := fmt.Sprintf("p%d %s/%s/%s", next, l.Region, l.Zone, l.SubZone)
			var eps []string
			for _, ep := range l.Endpoints {
				if ep.Eligible {
					eps = append(eps, endpointFigure(loc, ep.Address, ep.Port, uint32(ep.Weight), core.HealthStatus_HEALTHY))
				}
			}
			if len(eps) > 0 {
				lines = append(append(lines, fmt.Sprintf("%s weight %d", loc, l.LocalityWeight)), eps...)
				added = true
			}
		}
		if added {
			next++
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func endpointFigure(loc, addr string, port, weight uint32, health core.HealthStatus) string {
	return fmt.Sprintf("%s %s weight %d %s", loc, net.JoinHostPort(addr, strconv.Itoa(int(port))), weight, health)
}

// claFigures reads the figures of a published ClusterLoadAssignment.
func claFigures(b []byte) (cluster, figures string, err error) {
	var cla endpointv3.ClusterLoadAssignment
	if err := proto.Unmarshal(b, &cla); err != nil {
		return "", "", err
	}
	lines := []string{fmt.Sprintf("overprovisioning %d", cla.GetPolicy().GetOverprovisioningFactor().GetValue())}
	for _, d := range cla.GetPolicy().GetDropOverloads() {
		lines = append(lines, fmt.Sprintf("drop %s %d/%s", d.GetCategory(), d.GetDropPercentage().GetNumerator(), d.GetDropPercentage().GetDenominator()))
	}
	for _, lle := range cla.GetEndpoints() {
		l := lle.GetLocality()
		loc := fmt.Sprintf("p%d %s/%s/%s", lle.GetPriority(), l.GetRegion(), l.GetZone(), l.GetSubZone())
		lines = append(lines, fmt.Sprintf("%s weight %d", loc, lle.GetLoadBalancingWeight().GetValue()))
		for _, ep := range lle.GetLbEndpoints() {
			sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
			lines = append(lines, endpointFigure(loc, sa.GetAddress(), sa.GetPortValue(), ep.GetLoadBalancingWeight().GetValue(), ep.GetHealthStatus()))
		}
	}
	slices.Sort(lines)
	return cla.GetClusterName(), strings.Join(lines, "\n"), nil
}

// explainedState is what every replica explains, as the figures of each
// cluster's ClusterLoadAssignment.
type explainedState struct {
	figures   map[string]string // cluster → explainedCLA
	report    explain.Report    // of the first replica
	revisions []uint64          // per replica
}

// waitExplained waits until every replica's explain passes ready and all of
// them derive the same figures, and returns them.
func waitExplained(t *testing.T, planes []*plane, what string, ready func(explain.Report) (bool, string)) explainedState {
	t.Helper()
	var st explainedState
	testkit.Eventually(t, 30*time.Second, what, func() (bool, string) {
		st = explainedState{}
		for _, p := range planes {
			var rep explain.Report
			if err := testkit.GetJSON(p.adminURL+"/debug/explain", &rep); err != nil {
				return false, err.Error()
			}
			if ok, why := ready(rep); !ok {
				return false, fmt.Sprintf("plane %s revision %d: %s", p.name, rep.Revision, why)
			}
			figs := map[string]string{}
			for _, u := range rep.Upstreams {
				figs[xdsname.Cluster(topology.Key{Namespace: u.Namespace, Name: u.Name})] = explainedCLA(u)
			}
			if st.figures == nil {
				st.figures, st.report = figs, rep
			} else if !maps.Equal(figs, st.figures) {
				return false, fmt.Sprintf("plane %s derives other figures than plane %s", p.name, planes[0].name)
			}
			st.revisions = append(st.revisions, rep.Revision)
		}
		return true, ""
	})
	return st
}

// ---- raw ADS clients ----

// String names the plane; a nil plane is "none".
func (p *plane) String() string {
	if p == nil {
		return "none"
	}
	return p.name
}

const (
	cdsIdx = 0 // index of CDS in an adsClient's per-type state
	edsIdx = 1
)

// adsClient is one Envoy-like ADS client speaking SotW or Delta over its own
// connection: it subscribes to every cluster (wildcard CDS), then to the
// EDS of the clusters it holds, ACKs every response, and keeps what it
// holds across reconnections, saying so when it reconnects as Envoy does.
type adsClient struct {
	node  *core.Node
	delta bool

	mu       sync.Mutex
	on       *plane            // the replica it is connected to; nil while away
	clusters []string          // the clusters CDS gave it, sorted
	cla      map[string][]byte // the ClusterLoadAssignment it holds per cluster, as received
	// versions: SotW, the version_info it last ACKed; Delta, the
	// system_version_info of the last response it ACKed. Per type.
	versions [2]string
	// resources: Delta, the version of each resource it holds, per type.
	resources [2]map[string]string
	changed   time.Time // when what it holds last changed
	responses int
	firstType string // of the first response on the current stream
	problems  []string
	// observe, when set, is told of every response (a DiscoveryResponse
	// or a DeltaDiscoveryResponse) as it arrives, c.mu held.
	observe func(proto.Message)
	// oldNonce: a new stream's first request of each type carries the
	// nonce of the last response the client accepted on its last stream,
	// which a nonce per stream makes meaningless there (Envoy sends none).
	oldNonce bool
	nonces   [2]string // of the last response ACKed, per type

	cancel context.CancelFunc
	done   chan struct{}
}

func newADSClient(id string, delta bool) *adsClient {
	return &adsClient{
		node:  &core.Node{Id: id, Cluster: "replicas", UserAgentName: "envoy"},
		delta: delta, cla: map[string][]byte{}, resources: [2]map[string]string{{}, {}},
	}
}

func (c *adsClient) protocol() string {
	if c.delta {
		return "delta"
	}
	return "sotw"
}

// connect opens a new connection and stream to p.
func (c *adsClient) connect(p *plane) {
	ctx, cancel := context.WithCancel(context.Background())
	c.mu.Lock()
	c.on, c.cancel, c.done = p, cancel, make(chan struct{})
	c.mu.Unlock()
	go c.run(ctx, p)
}

// disconnect closes the stream and the connection; the client keeps what it holds.
func (c *adsClient) disconnect() {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	c.mu.Lock()
	c.on, c.cancel = nil, nil
	c.mu.Unlock()
}

// responded counts a response; c.mu is held.
func (c *adsClient) responded(typeURL string) {
	c.responses++
	if c.firstType == "" {
		c.firstType = typeURL
	}
}

// startedWithCDS checks that the first response of the current stream was
// CDS: ADS answers clusters before their endpoints.
func (c *adsClient) startedWithCDS(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firstType != resource.ClusterType {
		t.Errorf("client %s (%s) on plane %s was first answered %s, not CDS", c.node.GetId(), c.protocol(), c.on.String(), c.firstType)
	}
}

// staleNonce is what a new stream's first request of type i carries as
// its response_nonce: nothing, or with oldNonce the last one ACKed on the
// last stream; c.mu is held.
func (c *adsClient) staleNonce(i int) string {
	if !c.oldNonce {
		return ""
	}
	return c.nonces[i]
}

func (c *adsClient) problem(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func (c *adsClient) run(ctx context.Context, p *plane) {
	defer close(c.done)
	c.mu.Lock()
	c.firstType = ""
	c.mu.Unlock()
	conn, err := grpc.NewClient(p.addrs.XDS, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err == nil {
		defer conn.Close()
		ads := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)
		if c.delta {
			err = c.runDelta(ctx, ads)
		} else {
			err = c.runSotw(ctx, ads)
		}
	}
	if err != nil && ctx.Err() == nil {
		c.mu.Lock()
		c.problem("stream to plane %s: %v", p.name, err)
		c.mu.Unlock()
	}
}

// setClusters replaces the clusters held and forgets the endpoints of
// those that are gone; c.mu is held.
func (c *adsClient) setClusters(names []string) (added, removed []string) {
	slices.Sort(names)
	for _, n := range names {
		if _, ok := slices.BinarySearch(c.clusters, n); !ok {
			added = append(added, n)
		}
	}
	for _, n := range c.clusters {
		if _, ok := slices.BinarySearch(names, n); !ok {
			removed = append(removed, n)
			delete(c.cla, n)
			delete(c.resources[edsIdx], n)
		}
	}
	if len(added)+len(removed) > 0 {
		c.changed = time.Now()
	}
	c.clusters = names
	return added, removed
}

// putCLA stores one ClusterLoadAssignment; c.mu is held. want is the name
// the response gave it (Delta), or "" (SotW).
func (c *adsClient) putCLA(a *anypb.Any, want string) (string, error) {
	if a.GetTypeUrl() != resource.EndpointType {
		return "", fmt.Errorf("EDS resource of type %s", a.GetTypeUrl())
	}
	name, _, err := claFigures(a.GetValue())
	if err != nil {
		return "", err
	}
	if want != "" && name != want {
		return "", fmt.Errorf("resource %s holds the ClusterLoadAssignment of %s", want, name)
	}
	if _, ok := slices.BinarySearch(c.clusters, name); !ok {
		return name, nil // no longer subscribed: a response that crossed the unsubscription
	}
	if !bytes.Equal(c.cla[name], a.GetValue()) {
		c.cla[name] = a.GetValue()
		c.changed = time.Now()
	}
	return name, nil
}

func clusterName(a *anypb.Any) (string, error) {
	var cl clusterv3.Cluster
	if err := a.UnmarshalTo(&cl); err != nil {
		return "", err
	}
	return cl.GetName(), nil
}

func nack(err error) *statuspb.Status {
	return &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
}

// runSotw speaks SotW ADS. On a new stream it asks for CDS and, when it
// holds clusters, for their EDS, each with the version_info it holds.
func (c *adsClient) runSotw(ctx context.Context, ads discoverygrpc.AggregatedDiscoveryServiceClient) error {
	stream, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	out := []*discoverygrpc.DiscoveryRequest{{Node: c.node, TypeUrl: resource.ClusterType, VersionInfo: c.versions[cdsIdx], ResponseNonce: c.staleNonce(cdsIdx)}}
	edsAsked := len(c.clusters) > 0
	if edsAsked {
		out = append(out, &discoverygrpc.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: c.versions[edsIdx], ResourceNames: slices.Clone(c.clusters),
			ResponseNonce: c.staleNonce(edsIdx)})
	}
	c.mu.Unlock()
	edsNonce := ""
	for {
		for _, req := range out {
			if err := stream.Send(req); err != nil {
				return err
			}
		}
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		out = out[:0]
		c.mu.Lock()
		c.responded(resp.GetTypeUrl())
		if c.observe != nil {
			c.observe(resp)
		}
		switch resp.GetTypeUrl() {
		case resource.ClusterType:
			var names []string
			for _, a := range resp.GetResources() {
				var n string
				if n, err = clusterName(a); err != nil {
					break
				}
				names = append(names, n)
			}
			if err != nil {
				c.problem("NACK of CDS %s: %v", resp.GetVersionInfo(), err)
				out = append(out, &discoverygrpc.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: c.versions[cdsIdx], ResponseNonce: resp.GetNonce(), ErrorDetail: nack(err)})
				break
			}
			added, removed := c.setClusters(names)
			c.versions[cdsIdx], c.nonces[cdsIdx] = resp.GetVersionInfo(), resp.GetNonce()
			out = append(out, &discoverygrpc.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
			if !edsAsked || len(added)+len(removed) > 0 {
				out = append(out, &discoverygrpc.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: c.versions[edsIdx], ResponseNonce: edsNonce,
					ResourceNames: slices.Clone(c.clusters)})
				edsAsked = true
			}
		case resource.EndpointType:
			for _, a := range resp.GetResources() {
				if _, err = c.putCLA(a, ""); err != nil {
					break
				}
			}
			edsNonce = resp.GetNonce()
			if err != nil {
				c.problem("NACK of EDS %s: %v", resp.GetVersionInfo(), err)
				out = append(out, &discoverygrpc.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: c.versions[edsIdx], ResponseNonce: resp.GetNonce(),
					ResourceNames: slices.Clone(c.clusters), ErrorDetail: nack(err)})
				break
			}
			c.versions[edsIdx], c.nonces[edsIdx] = resp.GetVersionInfo(), resp.GetNonce()
			out = append(out, &discoverygrpc.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(),
				ResourceNames: slices.Clone(c.clusters)})
		default:
			c.problem("a SotW response of type %s, never asked for", resp.GetTypeUrl())
		}
		c.mu.Unlock()
	}
}

// runDelta speaks Delta ADS. On a new stream it subscribes to every
// cluster and, when it holds clusters, to their EDS, each with
// initial_resource_versions saying what it holds.
func (c *adsClient) runDelta(ctx context.Context, ads discoverygrpc.AggregatedDiscoveryServiceClient) error {
	stream, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	out := []*discoverygrpc.DeltaDiscoveryRequest{{Node: c.node, TypeUrl: resource.ClusterType, InitialResourceVersions: maps.Clone(c.resources[cdsIdx]),
		ResponseNonce: c.staleNonce(cdsIdx)}}
	edsAsked := len(c.clusters) > 0
	if edsAsked {
		out = append(out, &discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: slices.Clone(c.clusters),
			InitialResourceVersions: maps.Clone(c.resources[edsIdx]), ResponseNonce: c.staleNonce(edsIdx)})
	}
	c.mu.Unlock()
	for {
		for _, req := range out {
			if err := stream.Send(req); err != nil {
				return err
			}
		}
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		out = out[:0]
		c.mu.Lock()
		c.responded(resp.GetTypeUrl())
		if c.observe != nil {
			c.observe(resp)
		}
		ack := &discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
		switch resp.GetTypeUrl() {
		case resource.ClusterType:
			held := maps.Clone(c.resources[cdsIdx])
			for _, r := range resp.GetResources() {
				var n string
				if n, err = clusterName(r.GetResource()); err != nil || n != r.GetName() {
					err = fmt.Errorf("resource %s: cluster %q: %v", r.GetName(), n, err)
					break
				}
				held[n] = r.GetVersion()
			}
			if err != nil {
				c.problem("NACK of CDS %s: %v", resp.GetSystemVersionInfo(), err)
				ack.ErrorDetail = nack(err)
				out = append(out, ack)
				break
			}
			for _, n := range resp.GetRemovedResources() {
				delete(held, n)
			}
			c.resources[cdsIdx] = held
			c.versions[cdsIdx], c.nonces[cdsIdx] = resp.GetSystemVersionInfo(), resp.GetNonce()
			added, removed := c.setClusters(slices.Collect(maps.Keys(held)))
			out = append(out, ack)
			if !edsAsked {
				added, edsAsked = slices.Clone(c.clusters), true
			}
			if len(added)+len(removed) > 0 {
				out = append(out, &discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: added, ResourceNamesUnsubscribe: removed})
			}
		case resource.EndpointType:
			for _, r := range resp.GetResources() {
				var n string
				if n, err = c.putCLA(r.GetResource(), r.GetName()); err != nil {
					break
				}
				if _, ok := slices.BinarySearch(c.clusters, n); ok {
					c.resources[edsIdx][n] = r.GetVersion()
				}
			}
			if err != nil {
				c.problem("NACK of EDS %s: %v", resp.GetSystemVersionInfo(), err)
				ack.ErrorDetail = nack(err)
				out = append(out, ack)
				break
			}
			for _, n := range resp.GetRemovedResources() {
				if _, ok := c.cla[n]; ok {
					delete(c.cla, n)
					c.changed = time.Now()
				}
				delete(c.resources[edsIdx], n)
			}
			c.versions[edsIdx], c.nonces[edsIdx] = resp.GetSystemVersionInfo(), resp.GetNonce()
			out = append(out, ack)
		default:
			c.problem("a Delta response of type %s, never asked for", resp.GetTypeUrl())
		}
		c.mu.Unlock()
	}
}

// ---- the fleet ----

// fleet is the test's clients and what it knows of the figures they hold.
type fleet struct {
	clients []*adsClient
	memo    map[string]string // CLA bytes → figures (the test goroutine only)
}

func (f *fleet) figures(b []byte) string {
	if s, ok := f.memo[string(b)]; ok {
		return s
	}
	_, s, err := claFigures(b)
	if err != nil {
		s = "undecodable: " + err.Error()
	}
	f.memo[string(b)] = s
	return s
}

// diverges says how the client differs from the explained state; "" when
// it holds exactly that: every cluster, each with its figures.
func (f *fleet) diverges(c *adsClient, want map[string]string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	who := fmt.Sprintf("client %s (%s)", c.node.GetId(), c.protocol())
	if c.on != nil {
		who += " on plane " + c.on.name
	}
	if len(c.problems) > 0 {
		return fmt.Sprintf("%s: %s", who, strings.Join(c.problems, "; "))
	}
	if names := slices.Sorted(maps.Keys(want)); !slices.Equal(c.clusters, names) {
		return fmt.Sprintf("%s holds clusters %v, want %v", who, c.clusters, names)
	}
	for _, name := range c.clusters {
		b, ok := c.cla[name]
		if !ok {
			return fmt.Sprintf("%s has no EDS for cluster %s", who, name)
		}
		if got := f.figures(b); got != want[name] {
			return fmt.Sprintf("%s holds for cluster %s:\n%s\nexplain derives:\n%s", who, name, got, want[name])
		}
	}
	return ""
}

// waitConverged waits until every client of cs holds the explained
// figures, and returns when the last of them last changed what it held.
func (f *fleet) waitConverged(t *testing.T, what string, cs []*adsClient, want map[string]string) time.Time {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, what, func() (bool, string) {
		var bad []string
		for _, c := range cs {
			if d := f.diverges(c, want); d != "" {
				bad = append(bad, d)
			}
		}
		if len(bad) == 0 {
			return true, ""
		}
		return false, fmt.Sprintf("%d of %d clients diverge; first: %s", len(bad), len(cs), bad[0])
	})
	var last time.Time
	for _, c := range cs {
		c.mu.Lock()
		if c.changed.After(last) {
			last = c.changed
		}
		c.mu.Unlock()
	}
	return last
}

// spread is the time from t0 to when each client last changed what it
// held: median, 99th percentile and maximum.
func spread(cs []*adsClient, t0 time.Time) string {
	var d []time.Duration
	for _, c := range cs {
		c.mu.Lock()
		d = append(d, c.changed.Sub(t0))
		c.mu.Unlock()
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[int(q*float64(len(d)-1))].Round(time.Millisecond) }
	return fmt.Sprintf("median %v, p99 %v, last %v", at(0.5), at(0.99), at(1))
}

// except is the fleet without the clients given.
func (f *fleet) except(away ...*adsClient) []*adsClient {
	return slices.DeleteFunc(slices.Clone(f.clients), func(c *adsClient) bool { return slices.Contains(away, c) })
}

// checkAcked checks with every replica's /debug/clients that each client is
// connected once, to the replica it thinks, and that the replica recorded
// the ACK of the versions the client holds, with no NACK.
func (f *fleet) checkAcked(t *testing.T, planes []*plane) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, "every replica recorded the ACK of what its clients hold", func() (bool, string) {
		seen := map[string]int{}
		var bad []string
		for _, p := range planes {
			list, err := p.clients()
			if err != nil {
				return false, err.Error()
			}
			for _, sc := range list {
				seen[sc.NodeID]++
				for typ, ts := range sc.Types {
					if ts.NACKs > 0 {
						bad = append(bad, fmt.Sprintf("plane %s: %s NACKed %s: %+v", p.name, sc.NodeID, typ, ts.LastNACK))
					}
				}
				i := slices.IndexFunc(f.clients, func(c *adsClient) bool { return c.node.GetId() == sc.NodeID })
				if i < 0 {
					continue // not one of the fleet (fetchADS readers)
				}
				c := f.clients[i]
				c.mu.Lock()
				on, versions, proto := c.on, c.versions, c.protocol()
				c.mu.Unlock()
				if on != p || sc.Protocol != proto {
					bad = append(bad, fmt.Sprintf("plane %s lists %s (%s), which is %s on plane %s", p.name, sc.NodeID, sc.Protocol, proto, on.String()))
					continue
				}
				for k, typ := range []string{"CDS", "EDS"} {
					if ts := sc.Types[typ]; ts == nil || ts.LastAckedVersion != versions[k] {
						bad = append(bad, fmt.Sprintf("plane %s: %s holds %s %q, the plane recorded %+v", p.name, sc.NodeID, typ, versions[k], ts))
					}
				}
			}
		}
		for _, c := range f.clients {
			if n := seen[c.node.GetId()]; n != 1 {
				bad = append(bad, fmt.Sprintf("%s is connected %d times", c.node.GetId(), n))
			}
		}
		if len(bad) == 0 {
			return true, ""
		}
		return false, fmt.Sprintf("%d problems; first: %s", len(bad), bad[0])
	})
}

// checkIdentical checks that every replica publishes byte-identical
// clusters and ClusterLoadAssignments, and that every client holds exactly
// those bytes.
func (f *fleet) checkIdentical(t *testing.T, planes []*plane, want map[string]string) {
	t.Helper()
	names := slices.Sorted(maps.Keys(want))
	reader := &core.Node{Id: "replicas-reader", UserAgentName: "envoy"}
	for _, typ := range []string{resource.ClusterType, resource.EndpointType} {
		var first map[string][]byte
		for _, p := range planes {
			got := map[string][]byte{}
			for _, a := range fetchADS(t, p.addrs.XDS, reader, typ, names...) {
				name, err := clusterName(a)
				if typ == resource.EndpointType {
					name, _, err = claFigures(a.GetValue())
				}
				if err != nil {
					t.Fatalf("plane %s: %v", p.name, err)
				}
				got[name] = a.GetValue()
			}
			if !slices.Equal(slices.Sorted(maps.Keys(got)), names) {
				t.Fatalf("plane %s publishes %s for %v, want %v", p.name, typ, slices.Sorted(maps.Keys(got)), names)
			}
			if first == nil {
				first = got
				continue
			}
			for _, n := range names {
				if !bytes.Equal(got[n], first[n]) {
					t.Errorf("%s of %s: plane %s publishes %d bytes (sha256 %x), plane %s %d bytes (sha256 %x)", typ, n,
						p.name, len(got[n]), sha256.Sum256(got[n]), planes[0].name, len(first[n]), sha256.Sum256(first[n]))
				}
			}
		}
		if typ != resource.EndpointType {
			continue
		}
		for _, c := range f.clients {
			c.mu.Lock()
			for _, n := range names {
				if !bytes.Equal(c.cla[n], first[n]) {
					t.Errorf("client %s on plane %s holds another encoding of cluster %s than the replicas publish", c.node.GetId(), c.on.String(), n)
				}
			}
			c.mu.Unlock()
		}
	}
}

// TestReplicas runs three replicas on one namespace and 300 raw ADS clients
// (a third of them Delta), 100 per replica. Every client ends up holding
// the same ClusterLoadAssignments, byte for byte, and they carry the
// figures every replica's explain derives — at the start and after health
// changes. A client that moves to another replica, saying what it held,
// gets a coherent, current state whose versions the new replica accepts,
// also when it moves while a change is propagating.
func TestReplicas(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	const upstreams, perReplica = 8, 100
	var names []string
	for i := range upstreams {
		for _, o := range replicaObjects(ns, i) {
			if err := k8s.Create(t.Context(), o); err != nil {
				t.Fatalf("create %T %s: %v", o, o.GetName(), err)
			}
		}
		names = append(names, replicaUpstream(i))
	}
	started := time.Now()
	planes := []*plane{startPlane(t, ns, "r0"), startPlane(t, ns, "r1"), startPlane(t, ns, "r2")}
	t.Logf("three replicas ready %v after start", time.Since(started).Round(time.Millisecond))
	health := replicaHealth{}

	// 1. 300 clients, 100 per replica, one in three Delta
	f := &fleet{memo: map[string]string{}}
	for i := range perReplica * len(planes) {
		f.clients = append(f.clients, newADSClient(fmt.Sprintf("replicas-client-%03d", i), (i/len(planes))%3 == 0))
	}
	t.Cleanup(func() {
		for _, c := range f.clients {
			c.disconnect()
		}
	})
	s1 := waitExplained(t, planes, "every replica explains the topology", health.shows(names))
	connected := time.Now()
	for i, c := range f.clients {
		c.connect(planes[i%len(planes)])
	}
	f.waitConverged(t, "300 clients hold what the replicas explain", f.clients, s1.figures)
	t.Logf("1 start: %d clients (%d per replica, %d Delta) hold the explained figures of %d clusters; from connecting: %s (revisions %v)",
		len(f.clients), perReplica, perReplica*len(planes)/3, len(s1.figures), spread(f.clients, connected), s1.revisions)
	// the split is not trivial: weighted localities, and svc-2 has a standby locality
	if fig := s1.figures[ns+"/svc-2"]; !strings.Contains(fig, "p1 us/us-c/") || !strings.Contains(fig, "p0 eu/eu-b/") {
		t.Fatalf("svc-2 has no standby priority or a single locality:\n%s", fig)
	}
	f.checkIdentical(t, planes, s1.figures)
	f.checkAcked(t, planes)

	// 2. the prober marks endpoints unhealthy: svc-0 and svc-5 shift between
	// localities, svc-2 spills into its standby priority, svc-4 loses
	// capacity in both priorities and, failing closed, drops the share of
	// priority 0 (in panic), svc-6 loses a standby endpoint
	written := time.Now()
	health.set(t, ns, 0, 0, 1)
	health.set(t, ns, 2, 0, 2)
	health.set(t, ns, 4, 0, 0, 1, 2)
	health.set(t, ns, 4, 1, 0)
	health.set(t, ns, 4, 2, 0)
	health.set(t, ns, 5, 1, 0)
	health.set(t, ns, 6, 2, 0)
	lastWrite := time.Now()
	s2 := waitExplained(t, planes, "every replica explains the health changes", health.shows(names))
	explained := time.Since(lastWrite)
	last := f.waitConverged(t, "300 clients follow the health changes", f.clients, s2.figures)
	t.Logf("2 health: all %d clients converged %v after the first of 7 status writes (%v after the last, which every replica explained within %v); %s",
		len(f.clients), last.Sub(written).Round(time.Millisecond), last.Sub(lastWrite).Round(time.Millisecond), explained.Round(time.Millisecond), spread(f.clients, written))
	if fig := s2.figures[ns+"/svc-2"]; !strings.Contains(fig, "p0 us/us-c/") {
		t.Errorf("svc-2 does not spill into us-c after the health change:\n%s", fig)
	}
	if fig := s2.figures[ns+"/svc-4"]; !strings.Contains(fig, "drop panic") || !strings.Contains(fig, "p0 us/us-c/") {
		t.Errorf("svc-4 does not drop its priority 0 in panic and send the rest to us-c:\n%s", fig)
	}
	for _, n := range []string{"svc-0", "svc-2", "svc-4", "svc-5", "svc-6"} {
		if s1.figures[ns+"/"+n] == s2.figures[ns+"/"+n] {
			t.Errorf("the health change did not change the figures of %s", n)
		}
	}
	f.checkIdentical(t, planes, s2.figures)

	// 3. two clients go away — a SotW one from r0 and a Delta one from r1 —
	// and while they are away an upstream is added and a health changes;
	// they come back to the next replica saying what they hold
	moved := []*adsClient{f.clients[3], f.clients[1]}
	for _, c := range moved {
		c.disconnect()
	}
	written = time.Now()
	for _, o := range replicaObjects(ns, upstreams) {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	health.set(t, ns, 1, 1, 0)
	names = append(names, replicaUpstream(upstreams))
	s3 := waitExplained(t, planes, "every replica explains the new upstream and the health change", health.shows(names))
	last = f.waitConverged(t, "the clients that stayed follow", f.except(moved...), s3.figures)
	t.Logf("3 away: the %d clients that stayed converged %v after the first write", len(f.clients)-len(moved), last.Sub(written).Round(time.Millisecond))
	for _, c := range moved {
		if d := f.diverges(c, s3.figures); d == "" {
			t.Fatalf("client %s already holds the new state while away", c.node.GetId())
		}
		if d := f.diverges(c, s2.figures); d != "" {
			t.Fatalf("client %s no longer holds what it left with: %s", c.node.GetId(), d)
		}
	}
	for k, c := range moved {
		c.mu.Lock()
		held := c.versions
		c.mu.Unlock()
		to := planes[(k+1)%len(planes)]
		back := time.Now()
		c.connect(to)
		last = f.waitConverged(t, fmt.Sprintf("client %s moved to plane %s gets the current state", c.node.GetId(), to.name), []*adsClient{c}, s3.figures)
		c.mu.Lock()
		now := c.versions
		c.mu.Unlock()
		c.startedWithCDS(t)
		t.Logf("3 moved: %s client %s came back to plane %s holding CDS %q EDS %q, and held the current state (CDS %q EDS %q) %v later",
			c.protocol(), c.node.GetId(), to.name, held[cdsIdx], held[edsIdx], now[cdsIdx], now[edsIdx], last.Sub(back).Round(time.Millisecond))
	}
	f.checkAcked(t, planes)
	// the versions it holds now are accepted further: the next change reaches it
	written = time.Now()
	health.set(t, ns, 1, 1)
	s4 := waitExplained(t, planes, "every replica explains svc-1 healthy again", health.shows(names))
	last = f.waitConverged(t, "all clients, the moved ones too, follow the next change", f.clients, s4.figures)
	t.Logf("3 after the move: all %d clients converged %v after the next write", len(f.clients), last.Sub(written).Round(time.Millisecond))
	f.checkIdentical(t, planes, s4.figures)

	// 4. six clients move while a change propagates: an upstream is deleted
	// and another heals
	written = time.Now()
	if err := k8s.Delete(t.Context(), &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: replicaUpstream(3), Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	movers := f.clients[27:33]
	reconnected := make([]time.Duration, len(movers))
	var wg sync.WaitGroup
	for k, c := range movers {
		wg.Go(func() {
			c.mu.Lock()
			from := c.on
			c.mu.Unlock()
			c.disconnect()
			c.connect(planes[(slices.Index(planes, from)+1)%len(planes)])
			reconnected[k] = time.Since(written).Round(time.Millisecond)
		})
	}
	health.set(t, ns, 0, 0)
	lastWrite = time.Now()
	wg.Wait()
	t.Logf("4 moving: six clients reconnected %v after the first write (the last write %v after it)", reconnected, lastWrite.Sub(written).Round(time.Millisecond))
	names = slices.DeleteFunc(names, func(n string) bool { return n == replicaUpstream(3) })
	s5 := waitExplained(t, planes, "every replica explains svc-3 gone and svc-0 healthy", health.shows(names))
	last = f.waitConverged(t, "all clients converge, the six that moved too", f.clients, s5.figures)
	t.Logf("4 moving: all %d clients converged %v after the first write; %s", len(f.clients), last.Sub(written).Round(time.Millisecond), spread(f.clients, written))
	for _, c := range movers {
		c.startedWithCDS(t)
	}
	f.checkIdentical(t, planes, s5.figures)
	f.checkAcked(t, planes)

	perPlane := map[string]int{}
	responses := 0
	for _, c := range f.clients {
		c.mu.Lock()
		perPlane[c.on.String()]++
		responses += c.responses
		c.mu.Unlock()
	}
	t.Logf("end: clients per replica %v, %d responses received in all, wall time %v", perPlane, responses, time.Since(started).Round(time.Millisecond))
}
