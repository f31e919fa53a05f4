package xdscache_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdstype"
)

var (
	envoy = &core.Node{Id: "envoy", UserAgentName: "envoy"}
	grpc  = &core.Node{Id: "grpc", UserAgentName: "gRPC Go", ClientFeatures: []string{translate.FeatureNoOverprovisioning}}
)

func newCache() *xdscache.Cache {
	return xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
}

func mustEntry(t testing.TB, name, version string, m proto.Message) *xdscache.Entry {
	t.Helper()
	e, err := xdscache.NewEntry(name, version, m)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func cluster(name string, sec int64) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ConnectTimeout: durationpb.New(time.Duration(sec) * time.Second)}
}

func cla(name string, port uint32) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
		LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: "10.0.0.1", PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}},
		}}}},
	}}}
}

func change(view int, typeURL string, e *xdscache.Entry) xdscache.Change {
	return xdscache.Change{View: view, TypeURL: typeURL, Name: e.Name, Entry: e}
}

// sotwClient drives one SotW stream of the cache as the server would.
type sotwClient struct {
	t     testing.TB
	c     *xdscache.Cache
	s     *xdscache.Stream
	names map[string][]string
	out   []xdscache.Response
}

func openSotw(t testing.TB, c *xdscache.Cache, node *core.Node) *sotwClient {
	s := c.NewStream(false)
	s.SetNode(node)
	return &sotwClient{t: t, c: c, s: s, names: map[string][]string{}}
}

func (sc *sotwClient) request(typeURL, version, nonce string, nack bool, names ...string) {
	sc.t.Helper()
	sc.names[typeURL] = names
	if err := sc.s.Sotw(xdscache.SotwRequest{TypeURL: typeURL, Version: version, Nonce: nonce, NACK: nack,
		NamesHash: sc.c.HashNames(names), Names: func() []string { return names }}); err != nil {
		sc.t.Fatal(err)
	}
}

// ack acknowledges r, repeating the subscription as a SotW client does.
func (sc *sotwClient) ack(r xdscache.Response) {
	sc.t.Helper()
	sc.request(r.TypeURL, r.Version, r.Nonce, false, sc.names[r.TypeURL]...)
}

// next returns what the stream would send now.
func (sc *sotwClient) next() []xdscache.Response {
	sc.out = sc.s.Next(sc.out[:0])
	return sc.out
}

// expect checks that exactly one response is ready and what it holds.
func (sc *sotwClient) expect(typeURL, version string, names ...string) xdscache.Response {
	sc.t.Helper()
	rs := sc.next()
	if len(rs) != 1 {
		sc.t.Fatalf("%d responses ready, want one %s %s %v", len(rs), xdstype.Short(typeURL), version, names)
	}
	r := rs[0]
	if r.TypeURL != typeURL || r.Version != version || !slices.Equal(entryNames(r.Entries), names) {
		sc.t.Fatalf("got %s %s %v, want %s %s %v", xdstype.Short(r.TypeURL), r.Version, entryNames(r.Entries),
			xdstype.Short(typeURL), version, names)
	}
	return r
}

func (sc *sotwClient) silent() {
	sc.t.Helper()
	if rs := sc.next(); len(rs) != 0 {
		sc.t.Fatalf("unexpected %s %s %v", xdstype.Short(rs[0].TypeURL), rs[0].Version, entryNames(rs[0].Entries))
	}
}

func entryNames(es []*xdscache.Entry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

func TestNewEntryIsDeterministic(t *testing.T) {
	m := cla("c1", 80)
	a, b := mustEntry(t, "c1", "v1", m), mustEntry(t, "c1", "v1", proto.Clone(m))
	if !slices.Equal(a.Any.GetValue(), b.Any.GetValue()) || a.Any.GetTypeUrl() != resource.EndpointType {
		t.Fatalf("entries differ or have type %s", a.Any.GetTypeUrl())
	}
}

// A wildcard client whose view has nothing of a type is still answered once
// something is published, so Envoy does not hold its start for it.
func TestFirstApplyAnswersEmptyViews(t *testing.T) {
	c := newCache()
	env := openSotw(t, c, envoy)
	env.request(resource.ListenerType, "", "", false)
	env.request(resource.ClusterType, "", "", false)
	env.request(resource.EndpointType, "", "", false, "c1")
	env.silent() // nothing published yet
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		change(1, resource.ListenerType, mustEntry(t, "svc", "v1", &listenerv3.Listener{Name: "svc"})),
	}})
	rs := env.next()
	if len(rs) != 2 || rs[0].TypeURL != resource.ClusterType || rs[1].TypeURL != resource.ListenerType {
		t.Fatalf("got %d responses, want CDS then LDS", len(rs))
	}
	for _, r := range rs {
		if r.Version != "v1" || len(r.Entries) != 0 {
			t.Fatalf("got %s with %d resources, want an empty v1", r.Version, len(r.Entries))
		}
	}
	// Once answered (and ACKed), an empty view stays quiet until it changes;
	// a named CLA that does not exist is not answered.
	lds := rs[1]
	env.ack(rs[0])
	env.ack(lds)
	env.silent()
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{
		change(1, resource.ListenerType, mustEntry(t, "svc2", "v2", &listenerv3.Listener{Name: "svc2"})),
	}})
	env.silent()

	// A reconnecting client that already holds the (empty) version is not re-sent it.
	again := openSotw(t, c, envoy)
	again.request(resource.ListenerType, "v1", "", false)
	again.silent()
}

func TestOneAnyForEveryViewAndClient(t *testing.T) {
	c := newCache()
	c1 := mustEntry(t, "c1", "v1", cluster("c1", 1))
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{change(0, resource.ClusterType, c1), change(1, resource.ClusterType, c1)}})
	for _, n := range []*core.Node{envoy, grpc, envoy} {
		sc := openSotw(t, c, n)
		sc.request(resource.ClusterType, "", "", false)
		if r := sc.expect(resource.ClusterType, "v1", "c1"); r.Entries[0] != c1 {
			t.Fatalf("%s was not handed the published entry", n.GetId())
		}
	}
	for view := range 2 {
		if got := c.Resources(view)[resource.ClusterType]; len(got) != 1 || got[0] != c1 {
			t.Fatalf("view %d holds %v", view, got)
		}
	}
}

// A client that NACKed a version is not offered the same content again; a new version is.
func TestNACKedVersionIsNotOfferedAgain(t *testing.T) {
	c := newCache()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		change(0, resource.EndpointType, mustEntry(t, "c1", "v1", cla("c1", 1))),
		change(0, resource.EndpointType, mustEntry(t, "c2", "v1", cla("c2", 1))),
	}})
	env := openSotw(t, c, envoy)
	env.request(resource.EndpointType, "", "", false, "c1", "c2")
	env.ack(env.expect(resource.EndpointType, "v1", "c1", "c2"))
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{change(0, resource.EndpointType, mustEntry(t, "c1", "v2", cla("c1", 0)))}})
	bad := env.expect(resource.EndpointType, "v2", "c1")
	env.request(resource.EndpointType, "v1", bad.Nonce, true, "c1", "c2")
	env.silent()
	c.Apply(xdscache.Update{Version: "v3", Changes: []xdscache.Change{change(0, resource.EndpointType, mustEntry(t, "c1", "v3", cla("c1", 2)))}})
	env.expect(resource.EndpointType, "v3", "c1")
}

// putCLAs applies version v of the named CLAs to c's first view.
func putCLAs(t testing.TB, c *xdscache.Cache, v string, names ...string) {
	t.Helper()
	var chs []xdscache.Change
	for _, n := range names {
		chs = append(chs, change(0, resource.EndpointType, mustEntry(t, n, v, cla(n, 1))))
	}
	c.Apply(xdscache.Update{Version: v, Changes: chs})
}

// At most one response per type awaits its ACK; what changes meanwhile is
// sent together after it, and a stale nonce is ignored.

func TestChangesWaitForTheACKAndMerge(t *testing.T) {
	c := newCache()
	put := func(v string, names ...string) { putCLAs(t, c, v, names...) }
	put("v1", "a", "b", "c")
	env := openSotw(t, c, envoy)
	env.request(resource.EndpointType, "", "", false, "a", "b", "c")
	first := env.expect(resource.EndpointType, "v1", "a", "b", "c")
	put("v2", "b")
	put("v3", "a")
	put("v4", "b")
	env.silent() // v1 is not ACKed yet
	env.request(resource.EndpointType, "", "stale", false, "a", "b", "c")
	env.silent()
	env.ack(first)
	env.expect(resource.EndpointType, "v4", "a", "b")
}

// A SotW client that adds a name is sent that one alone; one that drops a
// name is no longer sent its changes.
func TestSubscriptionChanges(t *testing.T) {
	c := newCache()
	var chs []xdscache.Change
	for _, n := range []string{"a", "b", "c"} {
		chs = append(chs, change(0, resource.EndpointType, mustEntry(t, n, "v1", cla(n, 1))))
	}
	c.Apply(xdscache.Update{Version: "v1", Changes: chs})
	env := openSotw(t, c, envoy)
	env.request(resource.EndpointType, "", "", false, "a", "b")
	r := env.expect(resource.EndpointType, "v1", "a", "b")
	env.request(resource.EndpointType, "v1", r.Nonce, false, "c", "b", "a")
	r = env.expect(resource.EndpointType, "v1", "c")
	env.request(resource.EndpointType, "v1", r.Nonce, false, "c")
	env.silent()
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{change(0, resource.EndpointType, mustEntry(t, "a", "v2", cla("a", 2)))}})
	env.silent()
	c.Apply(xdscache.Update{Version: "v3", Changes: []xdscache.Change{change(0, resource.EndpointType, mustEntry(t, "c", "v3", cla("c", 2)))}})
	env.expect(resource.EndpointType, "v3", "c")
}

func TestVersionsMoveOnlyWithChanges(t *testing.T) {
	c := newCache()
	e1 := mustEntry(t, "c1", "v1", cla("c1", 1))
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{change(0, resource.EndpointType, e1)}})
	// Deleting what does not exist is no change.
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{{View: 0, TypeURL: resource.EndpointType, Name: "nope"}}})
	c.Apply(xdscache.Update{Version: "v3", Changes: []xdscache.Change{change(0, resource.ClusterType, mustEntry(t, "c1", "v3", cluster("c1", 1)))}})
	env := openSotw(t, c, envoy)
	env.request(resource.EndpointType, "", "", false, "c1")
	if r := env.expect(resource.EndpointType, "v1", "c1"); r.Entries[0] != e1 {
		t.Fatalf("EDS sent another entry than the original")
	}
	if got := c.Resources(0)[resource.EndpointType]; got[0] != e1 {
		t.Fatalf("the unchanged entry was replaced")
	}
}

// A control plane that starts with nothing to publish still answers.
func TestEmptyFirstUpdateAnswers(t *testing.T) {
	c := newCache()
	g := openSotw(t, c, grpc)
	g.request(resource.ClusterType, "", "", false)
	c.Apply(xdscache.Update{Version: "v1"})
	g.expect(resource.ClusterType, "v1")
}

func TestUnknownTypeKeepsNoState(t *testing.T) {
	c := newCache()
	s := c.NewStream(false)
	err := s.Sotw(xdscache.SotwRequest{TypeURL: "type.googleapis.com/bogus", Names: func() []string { return nil }})
	if err != xdscache.ErrUnknownType {
		t.Fatalf("got %v, want ErrUnknownType", err)
	}
	if err := c.NewStream(true).Delta(xdscache.DeltaRequest{TypeURL: "x"}); err != xdscache.ErrUnknownType {
		t.Fatalf("delta: got %v, want ErrUnknownType", err)
	}
}

// deltaClient drives one Delta stream of the cache.
type deltaClient struct {
	t   testing.TB
	s   *xdscache.Stream
	out []xdscache.Response
}

func openDelta(t testing.TB, c *xdscache.Cache, node *core.Node) *deltaClient {
	s := c.NewStream(true)
	s.SetNode(node)
	return &deltaClient{t: t, s: s}
}

func (d *deltaClient) send(r xdscache.DeltaRequest) {
	d.t.Helper()
	if err := d.s.Delta(r); err != nil {
		d.t.Fatal(err)
	}
}

func (d *deltaClient) expect(typeURL string, updated, removed []string) xdscache.Response {
	d.t.Helper()
	d.out = d.s.Next(d.out[:0])
	if len(d.out) != 1 {
		d.t.Fatalf("%d responses ready, want one", len(d.out))
	}
	r := d.out[0]
	if r.TypeURL != typeURL || !slices.Equal(entryNames(r.Entries), append([]string{}, updated...)) || !slices.Equal(r.Removed, removed) {
		d.t.Fatalf("got %s %v removed %v, want %v removed %v", xdstype.Short(r.TypeURL), entryNames(r.Entries), r.Removed, updated, removed)
	}
	return r
}

func (d *deltaClient) silent() {
	d.t.Helper()
	if d.out = d.s.Next(d.out[:0]); len(d.out) != 0 {
		d.t.Fatalf("unexpected %s %v removed %v", xdstype.Short(d.out[0].TypeURL), entryNames(d.out[0].Entries), d.out[0].Removed)
	}
}

func TestDeltaRemovalsAndSubscriptions(t *testing.T) {
	c := newCache()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		change(0, resource.EndpointType, mustEntry(t, "a", "v1", cla("a", 1))),
		change(0, resource.EndpointType, mustEntry(t, "b", "v1", cla("b", 1))),
	}})
	d := openDelta(t, c, envoy)
	// A name that does not exist is neither sent nor reported removed.
	d.send(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Subscribe: []string{"a", "x"}})
	r := d.expect(resource.EndpointType, []string{"a"}, nil)
	d.send(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Nonce: r.Nonce})
	d.silent()
	d.send(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Subscribe: []string{"b"}, Unsubscribe: []string{"a"}})
	r = d.expect(resource.EndpointType, []string{"b"}, nil)
	d.send(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Nonce: r.Nonce})
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{
		{View: 0, TypeURL: resource.EndpointType, Name: "a"},
		{View: 0, TypeURL: resource.EndpointType, Name: "b"},
	}})
	r = d.expect(resource.EndpointType, nil, []string{"b"}) // a was unsubscribed
	d.send(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Nonce: r.Nonce})
	c.Apply(xdscache.Update{Version: "v3", Changes: []xdscache.Change{change(0, resource.EndpointType, mustEntry(t, "x", "v3", cla("x", 1)))}})
	d.expect(resource.EndpointType, []string{"x"}, nil)
}

// Clients that subscribe to the same names share one subscription set:
// a change is found through the reverse index, and each interested stream
// is woken once per Apply.
func TestFanOutWakesOnlyInterestedStreams(t *testing.T) {
	c := newCache()
	var chs []xdscache.Change
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("c%03d", i)
		chs = append(chs, change(0, resource.EndpointType, mustEntry(t, names[i], "v1", cla(names[i], 1))))
	}
	c.Apply(xdscache.Update{Version: "v1", Changes: chs})
	var all, some []*sotwClient
	for range 10 {
		sc := openSotw(t, c, envoy)
		sc.request(resource.EndpointType, "", "", false, names...)
		sc.ack(sc.expect(resource.EndpointType, "v1", names...))
		all = append(all, sc)
		sc = openSotw(t, c, envoy)
		sc.request(resource.EndpointType, "", "", false, names[:10]...)
		sc.ack(sc.expect(resource.EndpointType, "v1", names[:10]...))
		some = append(some, sc)
	}
	for _, sc := range append(all, some...) {
		select {
		case <-sc.s.Wake():
		default:
		}
	}
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{change(0, resource.EndpointType, mustEntry(t, "c050", "v2", cla("c050", 2)))}})
	for _, sc := range all {
		select {
		case <-sc.s.Wake():
		default:
			t.Fatal("an interested stream was not woken")
		}
		sc.ack(sc.expect(resource.EndpointType, "v2", "c050"))
	}
	for _, sc := range some {
		select {
		case <-sc.s.Wake():
			t.Fatal("a stream that does not subscribe to c050 was woken")
		default:
		}
		sc.silent()
	}
}

// A stream cannot subscribe to more than MaxSubscribedNames names of a
// type, at once (SotW) or request by request (Delta); the refused request
// changes nothing.
func TestSubscriptionsAreBounded(t *testing.T) {
	c := newCache()
	half := make([]string, xdscache.MaxSubscribedNames/2+1)
	other := make([]string, len(half))
	for i := range half {
		half[i], other[i] = fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
	}
	all := append(slices.Clone(half), other...)
	s := c.NewStream(false)
	if err := s.Sotw(xdscache.SotwRequest{TypeURL: resource.EndpointType, NamesHash: c.HashNames(all), Names: func() []string { return all }}); err != xdscache.ErrTooManyNames {
		t.Fatalf("SotW: got %v, want ErrTooManyNames", err)
	}
	d := c.NewStream(true)
	if err := d.Delta(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Subscribe: half}); err != nil {
		t.Fatal(err)
	}
	if err := d.Delta(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Subscribe: other}); err != xdscache.ErrTooManyNames {
		t.Fatalf("Delta: got %v, want ErrTooManyNames", err)
	}
	// what it had still holds: a change of one of its names reaches it
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{change(0, resource.EndpointType, mustEntry(t, "a7", "v1", cla("a7", 1)))}})
	if rs := d.Next(nil); len(rs) != 1 || len(rs[0].Entries) != 1 || rs[0].Entries[0].Name != "a7" {
		t.Fatalf("after the refused request: %v", rs)
	}
}

// TestLargeStartsComeInChunks: a client subscribing to more endpoints than
// one response may carry receives them in responses of at most
// MaxResponseBytes, one per ACK, every resource exactly once, in SotW and
// Delta; a change to a resource still waiting is sent once, at its new
// version. Clusters (full state in SotW) stay whole.
func TestLargeStartsComeInChunks(t *testing.T) {
	const n = 400
	c := newCache()
	var names []string
	var changes []xdscache.Change
	big := make([]byte, 4<<10) // 4 KiB a resource: 400 of them are three chunks
	for i := range n {
		name := fmt.Sprintf("cla-%03d", i)
		names = append(names, name)
		changes = append(changes, xdscache.Change{TypeURL: resource.EndpointType, Name: name,
			Entry: xdscache.NewEntryBytes(name, "v1", resource.EndpointType, big)})
	}
	c.Apply(xdscache.Update{Version: "v1", Changes: changes})
	for _, delta := range []bool{false, true} {
		t.Run(fmt.Sprint("delta=", delta), func(t *testing.T) {
			s := c.NewStream(delta)
			s.SetNode(&core.Node{Id: "n"})
			var err error
			if delta {
				err = s.Delta(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Subscribe: names})
			} else {
				err = s.Sotw(xdscache.SotwRequest{TypeURL: resource.EndpointType, NamesHash: c.HashNames(names), Names: func() []string { return names }})
			}
			if err != nil {
				t.Fatal(err)
			}
			got, last := map[string]int{}, map[string]string{}
			responses := 0
			for {
				rs := s.Next(nil)
				if len(rs) == 0 {
					break
				}
				if len(rs) != 1 {
					t.Fatalf("%d responses at once", len(rs))
				}
				size := 0
				for _, e := range rs[0].Entries {
					got[e.Name]++
					last[e.Name] = string(e.Any.GetValue())
					size += len(e.Any.GetValue())
				}
				if size > xdscache.MaxResponseBytes {
					t.Fatalf("a response of %d bytes", size)
				}
				if len(s.Next(nil)) != 0 {
					t.Fatal("a second response before the ACK")
				}
				responses++
				if responses == 1 {
					// a resource not yet sent changes: it must come once, at v2
					e := xdscache.NewEntryBytes("cla-399", "v2", resource.EndpointType, []byte("changed"))
					c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{{TypeURL: resource.EndpointType, Name: e.Name, Entry: e}}})
				}
				if delta {
					err = s.Delta(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Nonce: rs[0].Nonce})
				} else {
					err = s.Sotw(xdscache.SotwRequest{TypeURL: resource.EndpointType, Version: rs[0].Version, Nonce: rs[0].Nonce,
						NamesHash: c.HashNames(names), Names: func() []string { return names }})
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if responses < n*len(big)/xdscache.MaxResponseBytes {
				t.Errorf("%d responses for %d bytes", responses, n*len(big))
			}
			for _, name := range names {
				if got[name] != 1 {
					t.Errorf("%s sent %d times", name, got[name])
				}
			}
			if last["cla-399"] != "changed" {
				t.Error("a resource changed before its chunk went out was sent at its old version")
			}
			// restore for the next protocol
			c.Apply(xdscache.Update{Version: "v3", Changes: []xdscache.Change{changes[n-1]}})
		})
	}
}

// The cache keeps when each of the last MaxPublishedVersions versions was
// applied, and only of Applies that moved a version (others are never sent).
func TestPublishedAtKeepsTheLastVersions(t *testing.T) {
	c := xdscache.New(1, func(*core.Node) int { return 0 })
	if _, ok := c.PublishedAt("v1"); ok {
		t.Fatal("a time for a version never applied")
	}
	e := func(v string) *xdscache.Entry {
		return xdscache.NewEntryBytes("c1", v, resource.ClusterType, []byte(v))
	}
	before := time.Now()
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{{TypeURL: resource.ClusterType, Name: "c1", Entry: e("v1")}}})
	if at, ok := c.PublishedAt("v1"); !ok || at.Before(before) || time.Since(at) > time.Minute {
		t.Fatalf("v1 published at %v (%v), want just now", at, ok)
	}
	c.Apply(xdscache.Update{Version: "empty"})
	if _, ok := c.PublishedAt("empty"); ok {
		t.Error("an Apply that changed nothing has a publication time")
	}
	for i := range xdscache.MaxPublishedVersions {
		v := fmt.Sprintf("w%d", i)
		c.Apply(xdscache.Update{Version: v, Changes: []xdscache.Change{{TypeURL: resource.ClusterType, Name: "c1", Entry: e(v)}}})
	}
	if _, ok := c.PublishedAt("v1"); ok {
		t.Error("v1 is still kept after MaxPublishedVersions newer versions")
	}
	if _, ok := c.PublishedAt(fmt.Sprintf("w%d", xdscache.MaxPublishedVersions-1)); !ok {
		t.Error("the last version has no publication time")
	}
}

// TestDeltaResumeBeforeThePublication: a Delta client that resumes on a
// replica with nothing published yet (restarting under its clients) is
// compared, at the first publication, with what it said it held: it is
// sent only what differs and the removal of what is gone, not everything
// at the versions it holds; and a name it subscribes to again later is
// sent whole.
func TestDeltaResumeBeforeThePublication(t *testing.T) {
	c := newCache()
	d := openDelta(t, c, envoy)
	d.send(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Subscribe: []string{"a", "b", "gone"},
		Initial: map[string]string{"a": "same", "b": "old", "gone": "old"}})
	d.silent() // nothing published: nothing to say yet
	c.Apply(xdscache.Update{Version: "v1", Changes: []xdscache.Change{
		change(0, resource.EndpointType, mustEntry(t, "a", "same", cla("a", 1))),
		change(0, resource.EndpointType, mustEntry(t, "b", "new", cla("b", 1))),
	}})
	r := d.expect(resource.EndpointType, []string{"b"}, []string{"gone"})
	d.send(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Nonce: r.Nonce})
	d.silent()
	// unsubscribed and subscribed again: owed whole, whatever it held
	d.send(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Unsubscribe: []string{"a"}})
	d.send(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Subscribe: []string{"a"}})
	d.expect(resource.EndpointType, []string{"a"}, nil)
}
