package translate_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdsname"
)

// tester is what both *testing.T and *rapid.T provide.
type tester interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// published is one LocalityLbEndpoints reduced to what the spec constrains.
type published struct {
	priority  uint32
	locality  weights.Locality
	weight    uint64
	endpoints []publishedEndpoint
	// source is the source priority of a flattened (priority-0) entry;
	// String leaves it out, as the published resource has no such field.
	source uint32
}

type publishedEndpoint struct {
	hostPort string
	weight   uint64
	health   core.HealthStatus
}

func (p published) String() string {
	return fmt.Sprintf("{prio %d %q weight %d %v}", p.priority, p.locality.String(), p.weight, p.endpoints)
}

func hostPort(addr string, port uint32) string {
	if strings.Contains(addr, ":") {
		return "[" + addr + "]:" + strconv.FormatUint(uint64(port), 10)
	}
	return addr + ":" + strconv.FormatUint(uint64(port), 10)
}

func flatten(cla *endpoint.ClusterLoadAssignment) []published {
	var out []published
	for _, lle := range cla.GetEndpoints() {
		l := lle.GetLocality()
		p := published{
			priority: lle.GetPriority(),
			locality: weights.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()},
			weight:   uint64(lle.GetLoadBalancingWeight().GetValue()),
		}
		for _, le := range lle.GetLbEndpoints() {
			sa := le.GetEndpoint().GetAddress().GetSocketAddress()
			p.endpoints = append(p.endpoints, publishedEndpoint{
				hostPort: hostPort(sa.GetAddress(), sa.GetPortValue()),
				weight:   uint64(le.GetLoadBalancingWeight().GetValue()),
				health:   le.GetHealthStatus(),
			})
		}
		out = append(out, p)
	}
	return out
}

// checkStructure asserts what any client needs of any assignment, whatever
// the mode and rendering.
func checkStructure(t tester, what string, cla *endpoint.ClusterLoadAssignment) {
	t.Helper()
	maxPrio := -1
	seenPrio := map[uint32]bool{}
	seenLocality := map[uint32]map[weights.Locality]bool{}
	seenAddr := map[string]bool{}
	prioWeights := map[uint32]uint64{}
	for _, lle := range cla.GetEndpoints() {
		p := lle.GetPriority()
		seenPrio[p] = true
		maxPrio = max(maxPrio, int(p))
		if lle.GetLoadBalancingWeight() == nil || lle.GetLoadBalancingWeight().GetValue() == 0 {
			t.Errorf("%s: locality %v at priority %d has load_balancing_weight 0 or unset", what, lle.GetLocality(), p)
		}
		prioWeights[p] += uint64(lle.GetLoadBalancingWeight().GetValue())
		l := lle.GetLocality()
		key := weights.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
		if seenLocality[p] == nil {
			seenLocality[p] = map[weights.Locality]bool{}
		}
		if seenLocality[p][key] {
			t.Errorf("%s: locality %q appears twice at priority %d (Envoy merges, gRPC rejects)", what, key.String(), p)
		}
		seenLocality[p][key] = true
		if len(lle.GetLbEndpoints()) == 0 {
			t.Errorf("%s: locality %q at priority %d has no endpoints", what, key.String(), p)
		}
		var sum uint64
		for _, le := range lle.GetLbEndpoints() {
			sa := le.GetEndpoint().GetAddress().GetSocketAddress()
			hp := hostPort(sa.GetAddress(), sa.GetPortValue())
			if seenAddr[hp] {
				t.Errorf("%s: endpoint %s appears twice", what, hp)
			}
			seenAddr[hp] = true
			if le.GetLoadBalancingWeight() == nil || le.GetLoadBalancingWeight().GetValue() == 0 {
				t.Errorf("%s: endpoint %s has load_balancing_weight 0 or unset", what, hp)
			}
			sum += uint64(le.GetLoadBalancingWeight().GetValue())
		}
		if sum > math.MaxUint32 {
			t.Errorf("%s: endpoint weights of locality %q sum to %d > 4294967295", what, key.String(), sum)
		}
	}
	for p := 0; p <= maxPrio; p++ {
		if !seenPrio[uint32(p)] {
			t.Errorf("%s: priorities are not contiguous from 0: %d is missing (max %d)", what, p, maxPrio)
		}
	}
	for p, sum := range prioWeights {
		if sum > math.MaxUint32 {
			t.Errorf("%s: locality weights of priority %d sum to %d > 4294967295", what, p, sum)
		}
	}
}

// expectedExact derives the ControlPlane assignment of docs/design/xds-publishing.md
// from the computed result. The sub_zone of a flattened locality is left as
// the source one; checkExact matches the suffix separately.
func expectedExact(u *topology.UpstreamState, client, r translate.Rendering) []published {
	res := u.Result
	var out []published
	next := uint32(1)
	switch res.Outcome {
	case weights.NoCapacity:
		return nil
	case weights.PanicRejected:
		// every request is dropped; only a gRPC client is sent the
		// eligible endpoints, as standby from priority 0, to connect to and
		// drop at (grpc-go drops only once it is READY)
		if client != translate.PerEndpoint {
			return nil
		}
		next = 0
	}
	for li := range res.Localities {
		l := &res.Localities[li]
		if l.Traffic == 0 {
			continue
		}
		entry := published{locality: l.Locality, weight: l.Traffic, source: l.Priority}
		for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
			er, e, _ := u.EndpointResult(ei)
			if !er.Selectable {
				continue
			}
			hp := hostPort(e.Address, e.Port)
			if r == translate.PerEndpoint {
				if er.Share > 0 {
					loc := l.Locality
					loc.SubZone += xdsname.EndpointSuffix + hp
					out = append(out, published{locality: loc, weight: er.Share, source: l.Priority,
						endpoints: []publishedEndpoint{{hp, 1, core.HealthStatus_HEALTHY}}})
				}
				continue
			}
			entry.endpoints = append(entry.endpoints, publishedEndpoint{hp, e.Weight, core.HealthStatus_HEALTHY})
		}
		if r == translate.Weighted {
			out = append(out, entry)
		}
	}
	for pi := range res.Priorities {
		pr := &res.Priorities[pi]
		var standby []published
		var products []uint64
		for li := pr.FirstLocality; li < pr.FirstLocality+pr.LocalityCount; li++ {
			l := &res.Localities[li]
			if l.Traffic > 0 {
				continue
			}
			entry := published{priority: next, locality: l.Locality, weight: l.LocalityWeight}
			for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
				er, e, _ := u.EndpointResult(ei)
				if !er.Eligible {
					continue
				}
				hp := hostPort(e.Address, e.Port)
				if r == translate.PerEndpoint {
					loc := l.Locality
					loc.SubZone += xdsname.EndpointSuffix + hp
					standby = append(standby, published{priority: next, locality: loc,
						endpoints: []publishedEndpoint{{hp, 1, core.HealthStatus_HEALTHY}}})
					products = append(products, l.LocalityWeight*e.Weight)
					continue
				}
				entry.endpoints = append(entry.endpoints, publishedEndpoint{hp, e.Weight, core.HealthStatus_HEALTHY})
			}
			if r == translate.Weighted && len(entry.endpoints) > 0 {
				standby = append(standby, entry)
			}
		}
		for i, w := range weights.Apportion(weights.Million, products) {
			standby[i].weight = max(w, 1)
		}
		if len(standby) > 0 {
			out = append(out, standby...)
			next++
		}
	}
	return out
}

// checkExact holds cla, sent to a client of rendering client in layout r,
// to the ControlPlane rendering.
func checkExact(t tester, u *topology.UpstreamState, client, r translate.Rendering, cla *endpoint.ClusterLoadAssignment) {
	t.Helper()
	res := u.Result
	what := fmt.Sprintf("%s %s", u.Upstream.Key, client)
	want := expectedExact(u, client, r)
	got := flatten(cla)
	if len(got) != len(want) {
		t.Fatalf("%s: %d localities published, want %d\n got %v\nwant %v", what, len(got), len(want), got, want)
	}
	type group struct {
		priority uint32
		locality weights.Locality
	}
	// taken: the localities (less any per-endpoint part) published at
	// priority 0 so far, and the source group that took each.
	taken := map[weights.Locality]group{}
	var p0 uint64
	for i := range want {
		g, w := got[i], want[i]
		if w.priority == 0 {
			gb, grest := splitEndpoint(g.locality, r)
			wb, wrest := splitEndpoint(w.locality, r)
			owner := group{w.source, wb}
			if gb != wb {
				// A flattened locality keeps its sub_zone unless another
				// group already published that name; then it gets
				// "~p<priority>", as often as it takes to be distinct.
				suffix := translate.PrioritySuffix + strconv.FormatUint(uint64(w.source), 10)
				ok := gb.Region == wb.Region && gb.Zone == wb.Zone && strings.HasPrefix(gb.SubZone, wb.SubZone+suffix)
				for n := gb; ok && n != wb; {
					var cut bool
					n.SubZone, cut = strings.CutSuffix(n.SubZone, suffix)
					o, isTaken := taken[n]
					ok = cut && isTaken && o != owner
				}
				if !ok {
					t.Errorf("%s: entry %d locality %q, want %q, or %q with ~p%d suffixes only where the name is taken",
						what, i, g.locality.String(), w.locality.String(), wb.String(), w.source)
				}
			}
			if o, isTaken := taken[gb]; isTaken && o != owner {
				t.Errorf("%s: entry %d locality %q is also published for priority %d", what, i, gb.String(), o.priority)
			}
			if grest != wrest {
				t.Errorf("%s: entry %d sub_zone %q, want the endpoint part %q", what, i, g.locality.SubZone, wrest)
			}
			taken[gb] = owner
			g.locality = w.locality
		}
		if fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("%s: entry %d\n got %v\nwant %v", what, i, g, w)
		}
		if g.priority == 0 {
			p0 += g.weight
		}
	}
	if res.Outcome == weights.Routable {
		if wantP0 := weights.Million - res.DroppedMillionths; p0 != wantP0 {
			t.Errorf("%s: priority-0 weights sum to %d, want 1000000 - dropped %d = %d", what, p0, res.DroppedMillionths, wantP0)
		}
	}
	drops := cla.GetPolicy().GetDropOverloads()
	switch {
	case res.DroppedMillionths > 0: // a priority in panic, or every one (PanicRejected: all of it)
		if len(drops) != 1 || drops[0].GetCategory() != "panic" ||
			drops[0].GetDropPercentage().GetDenominator() != typev3.FractionalPercent_MILLION ||
			uint64(drops[0].GetDropPercentage().GetNumerator()) != res.DroppedMillionths {
			t.Errorf("%s: drop_overloads %v, want [{panic %d/MILLION}]", what, drops, res.DroppedMillionths)
		}
	case len(drops) != 0:
		t.Errorf("%s: unexpected drop_overloads %v", what, drops)
	}
}

// splitEndpoint separates the per-endpoint part "~ep~<address>:<port>"
// from a published locality of the per-endpoint rendering.
func splitEndpoint(l weights.Locality, r translate.Rendering) (weights.Locality, string) {
	if r != translate.PerEndpoint {
		return l, ""
	}
	i := strings.LastIndex(l.SubZone, xdsname.EndpointSuffix)
	if i < 0 {
		return l, ""
	}
	rest := l.SubZone[i:]
	l.SubZone = l.SubZone[:i]
	return l, rest
}

// proxyHealth is the delegated status, from the endpoint's own signals.
func proxyHealth(e weights.Endpoint) (core.HealthStatus, bool) {
	switch {
	case e.Scope == weights.ScopeOut, e.Admin == weights.Unavailable:
		return 0, false
	case e.Admin == weights.Draining:
		return core.HealthStatus_DRAINING, true
	case e.Probe == weights.ProbeUnhealthy, e.Circuit == weights.CircuitOpen, e.Ejected:
		return core.HealthStatus_UNHEALTHY, true
	case e.Probe == weights.ProbeHealthy:
		return core.HealthStatus_HEALTHY, true
	}
	return core.HealthStatus_UNKNOWN, true
}

func checkProxy(t tester, u *topology.UpstreamState, r translate.Rendering, cla *endpoint.ClusterLoadAssignment) {
	t.Helper()
	res := u.Result
	var want []published
	next := uint32(0)
	for pi := range res.Priorities {
		pr := &res.Priorities[pi]
		added := false
		for li := pr.FirstLocality; li < pr.FirstLocality+pr.LocalityCount; li++ {
			l := &res.Localities[li]
			entry := published{priority: next, locality: l.Locality, weight: l.LocalityWeight}
			for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
				_, e, _ := u.EndpointResult(ei)
				if h, ok := proxyHealth(e); ok {
					entry.endpoints = append(entry.endpoints, publishedEndpoint{hostPort(e.Address, e.Port), e.Weight, h})
				}
			}
			if len(entry.endpoints) > 0 {
				want = append(want, entry)
				added = true
			}
		}
		if added {
			next++
		}
	}
	if got := flatten(cla); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s %s (Proxy):\n got %v\nwant %v", u.Upstream.Key, r, got, want)
	}
	if d := cla.GetPolicy().GetDropOverloads(); len(d) != 0 {
		t.Errorf("%s %s (Proxy): unexpected drop_overloads %v", u.Upstream.Key, r, d)
	}
}

var wantLB = map[string]cluster.Cluster_LbPolicy{
	"": cluster.Cluster_ROUND_ROBIN, "RoundRobin": cluster.Cluster_ROUND_ROBIN,
	"LeastRequest": cluster.Cluster_LEAST_REQUEST, "Random": cluster.Cluster_RANDOM,
	"RingHash": cluster.Cluster_RING_HASH, "Maglev": cluster.Cluster_MAGLEV,
}

// layout is the ClusterLoadAssignment layout a view must be sent: Envoy's
// RANDOM ignores endpoint weights inside a locality, so in ControlPlane mode
// its endpoints travel as localities of their own.
func layout(u *topology.UpstreamState, r translate.Rendering) translate.Rendering {
	if r == translate.Weighted && u.Upstream.LoadBalancing == "Random" && u.Upstream.HealthAdjustment != topology.Proxy {
		return translate.PerEndpoint
	}
	return r
}

// checkLbPolicy: gRPC nodes are always sent ROUND_ROBIN (the only policy
// under which grpc-go weighs localities); Envoy gets the configured policy,
// with a ring of 2^18 points for RING_HASH and a prime table of 65,537 for
// MAGLEV, and nothing else in lb_config.
func checkLbPolicy(t tester, u *topology.UpstreamState, r translate.Rendering, c *cluster.Cluster) {
	t.Helper()
	k := u.Upstream.Key
	want := wantLB[u.Upstream.LoadBalancing]
	if r == translate.PerEndpoint {
		// gRPC clients: round robin, or their ring when requests are keyed
		want = cluster.Cluster_ROUND_ROBIN
		if u.Upstream.RequestAffinity != nil {
			want = cluster.Cluster_RING_HASH
		}
	}
	if c.GetLbPolicy() != want {
		t.Errorf("%s %s: lb_policy %v for %q, want %v", k, r, c.GetLbPolicy(), u.Upstream.LoadBalancing, want)
	}
	switch want {
	case cluster.Cluster_RING_HASH:
		rh := c.GetRingHashLbConfig()
		if rh.GetMinimumRingSize().GetValue() != 1<<18 || rh.GetMaximumRingSize().GetValue() != 1<<18 ||
			rh.GetHashFunction() != cluster.Cluster_RingHashLbConfig_XX_HASH {
			t.Errorf("%s %s: ring_hash_lb_config %v, want a ring of exactly 2^18 points, xxHash", k, r, rh)
		}
	case cluster.Cluster_MAGLEV:
		if got := c.GetMaglevLbConfig().GetTableSize().GetValue(); got != 65_537 {
			t.Errorf("%s %s: maglev table_size %d, want 65537", k, r, got)
		}
	default:
		if c.GetLbConfig() != nil {
			t.Errorf("%s %s: lb_config %v with lb_policy %v", k, r, c.GetLbConfig(), want)
		}
	}
}

// checkCluster asserts what the spec requires of one rendering's cluster.
func checkCluster(t tester, u *topology.UpstreamState, r translate.Rendering, c *cluster.Cluster) {
	t.Helper()
	k := u.Upstream.Key
	if c.GetName() != xdsname.Cluster(k) || c.GetType() != cluster.Cluster_EDS ||
		c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil ||
		c.GetEdsClusterConfig().GetServiceName() != xdsname.Cluster(k) {
		t.Errorf("%s %s: cluster is not EDS over ADS named %q: %v", k, r, xdsname.Cluster(k), c)
	}
	checkLbPolicy(t, u, r, c)
	if c.GetCommonLbConfig().GetLocalityWeightedLbConfig() == nil {
		t.Errorf("%s: no locality_weighted_lb_config", k)
	}
	wantPanic := 0.0
	if u.Upstream.HealthAdjustment == topology.Proxy {
		wantPanic = float64(u.Upstream.Policy.PanicThreshold)
	}
	if got := c.GetCommonLbConfig().GetHealthyPanicThreshold(); got == nil || got.GetValue() != wantPanic {
		t.Errorf("%s: healthy_panic_threshold %v, want %v", k, got, wantPanic)
	}
	h2 := u.Upstream.Protocol == "HTTP2" || u.Upstream.Protocol == "GRPC"
	if _, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; ok != h2 {
		t.Errorf("%s: protocol %s: http protocol options present %v, want %v", k, u.Upstream.Protocol, ok, h2)
	}
}

// checkUpstream asserts every property the spec requires of one
// translated upstream.
func checkUpstream(t tester, u *topology.UpstreamState) *translate.Resources {
	t.Helper()
	res, err := translate.Upstream(u)
	if err != nil {
		t.Fatalf("translate %s: %v", u.Upstream.Key, err)
	}
	k := u.Upstream.Key
	for r := range translate.NumRenderings {
		checkWire(t, u, r, res.Endpoints[r])
	}
	checkResourceWire(t, u, res)
	for name, v := range map[string]interface{ ValidateAll() error }{
		"Cluster weighted": res.Clusters[translate.Weighted], "Cluster per-endpoint": res.Clusters[translate.PerEndpoint],
		"CLA weighted":     res.Endpoints[translate.Weighted],
		"CLA per-endpoint": res.Endpoints[translate.PerEndpoint], "Listener": res.Listener, "Route": res.Route,
	} {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s %s: ValidateAll: %v", k, name, err)
		}
	}

	for r := range translate.NumRenderings {
		checkCluster(t, u, r, res.Clusters[r])
	}

	for r := translate.Rendering(0); r < translate.NumRenderings; r++ {
		cla := res.Endpoints[r]
		what := fmt.Sprintf("%s %s", k, r)
		if cla.GetClusterName() != xdsname.Cluster(k) {
			t.Errorf("%s: cluster_name %q", what, cla.GetClusterName())
		}
		// exact mode never publishes a factor below 100: the loads carry it already
		wantOPF := u.Upstream.Policy.OverprovisioningFactor
		if u.Upstream.HealthAdjustment != topology.Proxy {
			wantOPF = max(wantOPF, 100)
		}
		if got := cla.GetPolicy().GetOverprovisioningFactor().GetValue(); got != wantOPF {
			t.Errorf("%s: overprovisioning_factor %d, want %d", what, got, wantOPF)
		}
		checkStructure(t, what, cla)
		if u.Upstream.HealthAdjustment == topology.Proxy {
			checkProxy(t, u, r, cla)
		} else {
			checkExact(t, u, r, layout(u, r), cla)
		}
	}

	if res.Listener.GetName() != translate.ListenerName(k) {
		t.Errorf("%s: listener %q, want %q", k, res.Listener.GetName(), translate.ListenerName(k))
	}
	var m hcm.HttpConnectionManager
	if err := res.Listener.GetApiListener().GetApiListener().UnmarshalTo(&m); err != nil {
		t.Fatalf("%s: API listener: %v", k, err)
	}
	if m.GetRds().GetRouteConfigName() != translate.RouteName(k) || m.GetRds().GetConfigSource().GetAds() == nil {
		t.Errorf("%s: API listener RDS %v, want %q over ADS", k, m.GetRds(), translate.RouteName(k))
	}
	if f := m.GetHttpFilters(); len(f) == 0 || f[len(f)-1].GetName() != "envoy.filters.http.router" {
		t.Errorf("%s: router is not the last HTTP filter: %v", k, f)
	}
	if res.Route.GetName() != translate.RouteName(k) ||
		res.Route.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster() != xdsname.Cluster(k) {
		t.Errorf("%s: route %v does not send everything to %q", k, res.Route, xdsname.Cluster(k))
	}
	// one terminal hash policy per key source, in order; none without
	hp := res.Route.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetHashPolicy()
	want := 0
	if ra := u.Upstream.RequestAffinity; ra != nil {
		want = len(ra.Keys)
	}
	if len(hp) != want {
		t.Errorf("%s: %d hash policies, want %d (one per key source)", k, len(hp), want)
	}
	for i, p := range hp {
		if !p.GetTerminal() {
			t.Errorf("%s: hash policy %d is not terminal: the first source a request carries must decide", k, i)
		}
	}
	return res
}

func TestGoldenCasesProperties(t *testing.T) {
	for _, name := range goldenCases {
		t.Run(name, func(t *testing.T) {
			for _, u := range loadCase(t, name).Upstreams() {
				checkUpstream(t, u)
			}
		})
	}
}

func TestExamplesProperties(t *testing.T) {
	for _, u := range loadSnapshot(t, filepath.Join("..", "..", "..", "examples")).Upstreams() {
		checkUpstream(t, u)
	}
}

// TestWorkedExamples pins the numbers docs/weights.md states for the golden
// inputs that reproduce its worked examples.
func TestWorkedExamples(t *testing.T) {
	up := func(name string) (*topology.UpstreamState, *translate.Resources) {
		snap := loadCase(t, name)
		u := snap.Upstreams()[0]
		return u, checkUpstream(t, u)
	}
	weightsOf := func(cla *endpoint.ClusterLoadAssignment) []uint64 {
		var out []uint64
		for _, p := range flatten(cla) {
			if p.priority == 0 {
				out = append(out, p.weight)
			}
		}
		return out
	}

	_, res := up("seed-example")
	if got := weightsOf(res.Endpoints[translate.Weighted]); fmt.Sprint(got) != "[259259 740741]" {
		t.Errorf("seed example: priority-0 weights %v, want [259259 740741]", got)
	}

	u, res := up("priority-spill")
	if l0, l1 := u.Result.Priorities[0].Load, u.Result.Priorities[1].Load; l0 != 700_000 || l1 != 300_000 {
		t.Errorf("priority spill: loads %d/%d, want 700000/300000", l0, l1)
	}
	if got := weightsOf(res.Endpoints[translate.Weighted]); fmt.Sprint(got) != "[700000 300000]" {
		t.Errorf("priority spill: priority-0 weights %v, want [700000 300000]", got)
	}

	_, res = up("same-locality-two-priorities")
	got := flatten(res.Endpoints[translate.Weighted])
	if got[0].locality.SubZone != "" || got[1].locality.SubZone != "~p1" || got[0].locality.Zone != got[1].locality.Zone {
		t.Errorf("same locality at two priorities: sub_zones %q and %q, want \"\" and \"~p1\"", got[0].locality.SubZone, got[1].locality.SubZone)
	}

	u, _ = up("fail-closed-drop")
	if u.Result.DroppedMillionths != 285_714 {
		t.Errorf("fail-closed drop: dropped %d, want 285714", u.Result.DroppedMillionths)
	}

	_, res = up("standby")
	var prios []string
	for _, p := range flatten(res.Endpoints[translate.Weighted]) {
		prios = append(prios, fmt.Sprintf("%d:%s:%d", p.priority, p.locality.Zone, p.weight))
	}
	if want := "[0:us-east-1a:666667 0:us-east-1b:333333 1:eu-west-1a:3 1:eu-west-1b:1 2:ap-south-1a:1]"; fmt.Sprint(prios) != want {
		t.Errorf("standby: published %v, want %s", prios, want)
	}

	// NoCapacity: nothing to route, nothing dropped: an empty assignment
	// for every client. PanicRejected: every request dropped as "panic";
	// Envoy is sent no endpoint, a gRPC client the 3 still eligible (one
	// locality each) so that it connects and drops.
	for _, tc := range []struct {
		name    string
		outcome weights.Outcome
		drop    uint32
		eps     [translate.NumRenderings]int
	}{
		{"no-capacity", weights.NoCapacity, 0, [translate.NumRenderings]int{0, 0}},
		{"panic-rejected", weights.PanicRejected, weights.Million, [translate.NumRenderings]int{0, 3}},
	} {
		for _, u := range loadCase(t, tc.name).Upstreams() {
			res := checkUpstream(t, u)
			if u.Result.Outcome != tc.outcome {
				t.Errorf("%s %s: outcome %v, want %v", tc.name, u.Upstream.Key, u.Result.Outcome, tc.outcome)
			}
			for r := range translate.NumRenderings {
				cla := res.Endpoints[r]
				if n := len(cla.GetEndpoints()); n != tc.eps[r] {
					t.Errorf("%s %s %s: %d localities, want %d", tc.name, u.Upstream.Key, r, n, tc.eps[r])
				}
				var drop uint32
				if d := cla.GetPolicy().GetDropOverloads(); len(d) == 1 && d[0].GetCategory() == "panic" {
					drop = d[0].GetDropPercentage().GetNumerator()
				}
				if drop != tc.drop {
					t.Errorf("%s %s %s: panic drop %d/MILLION, want %d (%v)", tc.name, u.Upstream.Key, r, drop, tc.drop, cla.GetPolicy())
				}
			}
		}
	}

	u, res = up("panic-use-all")
	if !u.Result.TotalPanic {
		t.Error("panic-use-all: not in total panic")
	}
	n := 0
	for _, p := range flatten(res.Endpoints[translate.Weighted]) {
		n += len(p.endpoints)
	}
	if n != 8 {
		t.Errorf("panic-use-all: %d endpoints published, want the 8 Ready ones", n)
	}

	_, res = up("mixed-endpoint-weights")
	var v6 int
	for _, p := range flatten(res.Endpoints[translate.PerEndpoint]) {
		if strings.Contains(p.locality.SubZone, "~ep~[2001:db8::") {
			v6++
		}
	}
	if v6 != 3 {
		t.Errorf("mixed-endpoint-weights: %d bracketed IPv6 sub_zones, want 3", v6)
	}
}

// TestSuffixCollision: a sub_zone of the source may itself end in "~p1";
// the suffixed form of a later priority must still not collide with it.
func TestSuffixCollision(t *testing.T) {
	var b topology.Batch
	b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "ns", Name: "up"}, Policy: weights.DefaultPolicy(),
		HealthAdjustment: topology.ControlPlane, Protocol: "HTTP2"})
	set := func(n int, prio uint32, sub string, healthy bool) {
		s := topology.EndpointSet{Key: topology.Key{Namespace: "ns", Name: fmt.Sprintf("s%d", n)}, Upstream: "up",
			Priority: &prio, Locality: weights.Locality{Region: "r", Zone: "z", SubZone: sub}}
		for i := range 2 {
			e := topology.Endpoint{Address: fmt.Sprintf("10.0.%d.%d", n, i), Port: 80, Weight: 1}
			if i == 1 && !healthy {
				e.Health.Probe = weights.ProbeUnhealthy
			}
			s.Endpoints = append(s.Endpoints, e)
		}
		b.PutEndpointSet(s)
	}
	// P0 is at 50 % (health 700000), so P1 carries traffic too.
	set(1, 0, "a", false)
	set(2, 0, "a~p1", false)
	set(3, 1, "a", true)
	snap, err := topology.NewDirectory().Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	res := checkUpstream(t, snap.Upstreams()[0])
	var subZones []string
	for _, p := range flatten(res.Endpoints[translate.Weighted]) {
		subZones = append(subZones, p.locality.SubZone)
	}
	if want := "[a a~p1 a~p1~p1]"; fmt.Sprint(subZones) != want {
		t.Errorf("sub_zones %v, want %s", subZones, want)
	}
}

func TestRenderingFor(t *testing.T) {
	for _, tc := range []struct {
		node *core.Node
		want translate.Rendering
	}{
		{nil, translate.Weighted},
		{&core.Node{Id: "envoy"}, translate.Weighted},
		{&core.Node{ClientFeatures: []string{"envoy.lb.does_not_support_overprovisioning_x", "xds.config.resource-in-sotw"}}, translate.Weighted},
		{&core.Node{ClientFeatures: []string{translate.FeatureNoOverprovisioning}}, translate.PerEndpoint},
		{&core.Node{ClientFeatures: []string{"xds.config.resource-in-sotw", "envoy.lb.does_not_support_overprovisioning"}}, translate.PerEndpoint},
	} {
		if got := translate.RenderingFor(tc.node); got != tc.want {
			t.Errorf("RenderingFor(%v) = %v, want %v", tc.node.GetClientFeatures(), got, tc.want)
		}
	}
	if translate.FeatureNoOverprovisioning != "envoy.lb.does_not_support_overprovisioning" {
		t.Errorf("FeatureNoOverprovisioning = %q", translate.FeatureNoOverprovisioning)
	}
}

// localityPool is few enough localities that groups often share one across
// priorities, with sub_zones that look like the translator's suffixed ones.
var localityPool = []weights.Locality{
	{Region: "r1", Zone: "z1"},
	{Region: "r1", Zone: "z1", SubZone: "~p1"},
	{Region: "r1", Zone: "z1", SubZone: "~p2"},
	{Region: "r1", Zone: "z1", SubZone: "~p1~p1"},
	{Region: "r1", Zone: "z2"},
	{Region: "r1", Zone: "z2", SubZone: "s"},
	{Region: "r2"},
}

// genUpstream draws a random valid upstream: priorities, localities (some
// at two priorities, some with sub_zones that look like suffixed ones),
// weights up to an eighth of the uint32 limit, every health signal.
func genUpstream(t *rapid.T) topology.Batch {
	var b topology.Batch
	up := topology.Upstream{
		Key: topology.Key{Namespace: "gen", Name: "up"},
		Policy: weights.Policy{
			OverprovisioningFactor: rapid.SampledFrom([]uint32{1, 50, 100, 140, 200, 1000}).Draw(t, "opf"),
			PanicThreshold:         rapid.SampledFrom([]uint32{0, 30, 50, 100}).Draw(t, "panicThreshold"),
			PanicMode:              rapid.SampledFrom([]weights.PanicMode{weights.UseAll, weights.FailClosed}).Draw(t, "panicMode"),
			DrainingCapacity:       rapid.SampledFrom([]weights.DrainingCapacity{weights.ExcludeDraining, weights.IncludeDraining}).Draw(t, "draining"),
		},
		HealthAdjustment:   rapid.SampledFrom([]topology.HealthAdjustment{topology.ControlPlane, topology.ControlPlane, topology.ControlPlane, topology.Proxy}).Draw(t, "mode"),
		LoadBalancing:      rapid.SampledFrom([]string{"RoundRobin", "LeastRequest", "Random", "RingHash", "Maglev"}).Draw(t, "lb"),
		ConnectTimeout:     time.Duration(rapid.SampledFrom([]int64{0, 5e9, 25e7, 1_500_000_001, 3 * 3600e9}).Draw(t, "timeout")),
		Protocol:           rapid.SampledFrom([]string{"HTTP1", "HTTP2", "GRPC", "TCP"}).Draw(t, "protocol"),
		LoadReportInterval: time.Duration(rapid.SampledFrom([]int64{0, 0, 1e9, 10e9}).Draw(t, "loadReportInterval")),
		Retries: rapid.SampledFrom([]*topology.RetryPolicy{nil, nil,
			{On: topology.RetryUnavailable | topology.RetryReset, NumRetries: 2, BaseInterval: 25e6, MaxInterval: 250e6},
			{On: topology.RetryHTTP5xx, NumRetries: 4, PerTryTimeout: 1_500e6, BaseInterval: 1e6, MaxInterval: 1e6, BudgetPercent: 20, BudgetMinConcurrency: 3},
			{On: 0xff, NumRetries: 1, BaseInterval: 10e9, MaxInterval: 300e9, BudgetPercent: 100},
		}).Draw(t, "retries"),
	}
	b.PutUpstream(up)
	const big = math.MaxUint32 / 8
	type group struct {
		prio uint32
		loc  weights.Locality
	}
	seen := map[group]bool{}
	addr := 0
	for g := range rapid.IntRange(0, 6).Draw(t, "groups") {
		grp := group{
			prio: rapid.SampledFrom([]uint32{0, 1, 2, 5, 127}).Draw(t, "priority"),
			loc:  localityPool[rapid.IntRange(0, len(localityPool)-1).Draw(t, "locality")],
		}
		if seen[grp] {
			continue
		}
		seen[grp] = true
		name := fmt.Sprintf("g%d", g)
		if rapid.Bool().Draw(t, "localityObject") {
			b.PutLocality(topology.Locality{Key: topology.Key{Namespace: "gen", Name: name}, Upstream: "up",
				Priority: grp.prio, Locality: grp.loc,
				Weight: rapid.SampledFrom([]uint64{1, 2, 3, 7, 1000, big}).Draw(t, "localityWeight")})
		}
		prio := grp.prio
		s := topology.EndpointSet{Key: topology.Key{Namespace: "gen", Name: name}, Upstream: "up", Locality: grp.loc, Priority: &prio}
		for range rapid.IntRange(0, 5).Draw(t, "endpoints") {
			addr++
			var a string
			switch rapid.IntRange(0, 3).Draw(t, "family") {
			case 0:
				a = fmt.Sprintf("2001:db8::%x", addr)
			case 1:
				a = fmt.Sprintf("172.16.%d.%d", addr/256, addr%256)
			default:
				a = fmt.Sprintf("10.0.%d.%d", addr/256, addr%256)
			}
			s.Endpoints = append(s.Endpoints, topology.Endpoint{
				Address: a, Port: rapid.SampledFrom([]uint32{80, 443, 8080}).Draw(t, "port"),
				Weight: rapid.SampledFrom([]uint64{1, 1, 2, 5, 100, big}).Draw(t, "weight"),
				Admin:  rapid.SampledFrom([]weights.AdminState{weights.Ready, weights.Ready, weights.Ready, weights.Draining, weights.Unavailable}).Draw(t, "admin"),
				// a hash key is published as metadata: the wire encoder must write it as the message does
				HashKey: rapid.SampledFrom([]string{"", "", "", "db-0", "a-long.key:with/" + strings.Repeat("x", 200)}).Draw(t, "hashKey"),
				Health: topology.Health{
					Probe:   rapid.SampledFrom([]weights.ProbeHealth{weights.ProbeUnknown, weights.ProbeHealthy, weights.ProbeHealthy, weights.ProbeUnhealthy}).Draw(t, "probe"),
					Circuit: rapid.SampledFrom([]weights.CircuitState{weights.CircuitClosed, weights.CircuitClosed, weights.CircuitClosed, weights.CircuitOpen}).Draw(t, "circuit"),
					Ejected: rapid.Float64Range(0, 1).Draw(t, "ejected") < 0.15,
					Scope:   rapid.SampledFrom([]weights.Scope{weights.ScopeIn, weights.ScopeIn, weights.ScopeIn, weights.ScopeIn, weights.ScopeOut}).Draw(t, "scope"),
				},
			})
		}
		b.PutEndpointSet(s)
	}
	return b
}

func TestRandomTopologies(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap, err := topology.NewDirectory().Apply(genUpstream(t))
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
		for _, u := range snap.Upstreams() {
			res := checkUpstream(t, u)
			// The translator is pure.
			again, err := translate.Upstream(u)
			if err != nil {
				t.Fatal(err)
			}
			for r := range translate.NumRenderings {
				if !proto.Equal(res.Endpoints[r], again.Endpoints[r]) {
					t.Fatalf("%s: two translations differ", r)
				}
			}
		}
	})
}

// checkResourceWire holds the Encoder's bytes for the cluster, listener and
// route equal to the deterministic marshalling of the messages.
func checkResourceWire(t tester, u *topology.UpstreamState, res *translate.Resources) {
	t.Helper()
	enc := translate.NewEncoder()
	for _, c := range []struct {
		name   string
		msg    proto.Message
		append func([]byte, *topology.UpstreamState) ([]byte, error)
	}{
		{"Cluster (weighted)", res.Clusters[translate.Weighted], func(b []byte, u *topology.UpstreamState) ([]byte, error) {
			return enc.AppendCluster(b, u, translate.Weighted)
		}},
		{"Cluster (per-endpoint)", res.Clusters[translate.PerEndpoint], func(b []byte, u *topology.UpstreamState) ([]byte, error) {
			return enc.AppendCluster(b, u, translate.PerEndpoint)
		}},
		{"Listener", res.Listener, enc.AppendListener},
		{"RouteConfiguration", res.Route, enc.AppendRoute},
	} {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(c.msg)
		if err != nil {
			t.Fatalf("%s: marshal: %v", c.name, err)
		}
		got, err := c.append([]byte("prefix"), u)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(got[:6]) != "prefix" || !bytes.Equal(got[6:], want) {
			t.Fatalf("%s of %s: the wire encoding differs from the marshalled message:\n got %x\nwant %x", c.name, u.Upstream.Key, got[6:], want)
		}
	}
}

// checkWire holds the wire encoding a publication sends equal, byte for
// byte, to the deterministic marshalling of the message, and valid by the
// message's own generated rules.
func checkWire(t tester, u *topology.UpstreamState, r translate.Rendering, cla *endpoint.ClusterLoadAssignment) {
	t.Helper()
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(cla)
	if err != nil {
		t.Fatalf("%s: marshal: %v", r, err)
	}
	got, err := translate.AppendEndpoints([]byte("prefix"), u, r)
	if err != nil {
		t.Fatalf("%s: %v", r, err)
	}
	if string(got[:6]) != "prefix" || !bytes.Equal(got[6:], want) {
		t.Fatalf("%s: the wire encoding differs from the marshalled message (%d vs %d bytes)", r, len(got)-6, len(want))
	}
	if err := cla.ValidateAll(); err != nil {
		t.Fatalf("%s: %v", r, err)
	}
}

// The wire encoder refuses what the message's validation refuses. The
// Directory lets only IP addresses in (an empty or non-UTF-8 address is
// refused there as AddressNotAllowed), so the upstream here is one it
// resolved from a good endpoint with the endpoint then spoiled: the state a
// caller that builds an UpstreamState itself could hand the encoder.
func TestWireValidation(t *testing.T) {
	t.Parallel()
	var b topology.Batch
	b.PutUpstream(topology.Upstream{Key: topology.Key{Namespace: "ns", Name: "up"}, Policy: weights.DefaultPolicy(), HealthAdjustment: topology.ControlPlane})
	b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "ns", Name: "set"}, Upstream: "up",
		Endpoints: []topology.Endpoint{{Address: "10.0.0.1", Port: 80, Weight: 1}}})
	snap, err := topology.NewDirectory().Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	good := snap.Upstreams()[0]
	for r := range translate.NumRenderings {
		if _, err := translate.AppendEndpoints(nil, good, r); err != nil {
			t.Fatalf("%s: the good endpoint refused by the wire encoder: %v", r, err)
		}
		if _, err := translate.Endpoints(good, r); err != nil {
			t.Fatalf("%s: the good endpoint refused by the message path: %v", r, err)
		}
	}
	for _, tc := range []struct {
		name  string
		spoil func(*weights.Endpoint)
		field string // what the refusal names
	}{
		{"empty address", func(e *weights.Endpoint) { e.Address = "" }, ".address"},
		{"port out of range", func(e *weights.Endpoint) { e.Port = 70000 }, ".port_value"},
		{"not UTF-8", func(e *weights.Endpoint) { e.Address = "10.0.0.\xff" }, ".address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := *good
			u.Endpoints = slices.Clone(good.Endpoints)
			tc.spoil(&u.Endpoints[0])
			for r := range translate.NumRenderings {
				_, werr := translate.AppendEndpoints(nil, &u, r)
				_, perr := translate.Endpoints(&u, r)
				for path, err := range map[string]error{"wire": werr, "message": perr} {
					var verr *translate.ValidationError
					if !errors.As(err, &verr) || !strings.Contains(err.Error(), tc.field) {
						t.Errorf("%s, %s path: %v; want a ValidationError naming %s", r, path, err, tc.field)
					}
				}
			}
		})
	}
}

func clusterMessage(u *topology.UpstreamState) (proto.Message, error) {
	return translate.Cluster(u, translate.Weighted)
}

func appendCluster(enc *translate.Encoder) func([]byte, *topology.UpstreamState) ([]byte, error) {
	return func(b []byte, u *topology.UpstreamState) ([]byte, error) {
		return enc.AppendCluster(b, u, translate.Weighted)
	}
}

// TestEncoderOddNames: names the generated validation might refuse take the
// message path, so they are refused (or written) exactly as there.
func TestEncoderOddNames(t *testing.T) {
	enc := translate.NewEncoder()
	for _, name := range []string{"plain", "new\nline", "bad\xffutf8", "nul\x00"} {
		u := &topology.UpstreamState{Upstream: topology.Upstream{Key: topology.Key{Namespace: "ns", Name: name},
			Policy: weights.DefaultPolicy(), HealthAdjustment: topology.Proxy, Protocol: "GRPC", ConnectTimeout: 1}}
		for _, c := range []struct {
			what   string
			msg    func(*topology.UpstreamState) (proto.Message, error)
			append func([]byte, *topology.UpstreamState) ([]byte, error)
		}{
			{"Cluster", clusterMessage, appendCluster(enc)},
			{"Listener", func(u *topology.UpstreamState) (proto.Message, error) { return translate.Listener(u) }, enc.AppendListener},
			{"Route", func(u *topology.UpstreamState) (proto.Message, error) { return translate.Route(u) }, enc.AppendRoute},
		} {
			got, gotErr := c.append(nil, u)
			var want []byte
			m, wantErr := c.msg(u)
			if wantErr == nil {
				want, wantErr = proto.MarshalOptions{Deterministic: true}.Marshal(m)
			}
			if (gotErr == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
				t.Errorf("%q %s: encoder gave %x, %v; the message path %x, %v", name, c.what, got, gotErr, want, wantErr)
			}
		}
	}
}
