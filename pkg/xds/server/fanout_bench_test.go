package server

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	gcp "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdsname"
)

// fixture is F100k as clients see it: the 5,000 ClusterLoadAssignments of
// topologytest.Batch(5000) (20 endpoints over 3 localities each), as Envoy's
// rendering publishes them, and the two states of one CLA that an endpoint
// flip moves between.
type fixture struct {
	names []string
	clas  []*endpointv3.ClusterLoadAssignment
	flip  [2]*endpointv3.ClusterLoadAssignment
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	d := topology.NewDirectory()
	c := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	p := publish.New(c, "bench", nil)
	publishBatch := func(b topology.Batch) {
		snap, err := d.Apply(b)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := p.Publish(snap); err != nil {
			tb.Fatal(err)
		}
	}
	publishBatch(topologytest.Batch(5000))
	f := &fixture{}
	for _, e := range c.Resources(int(translate.Weighted))[resource.EndpointType] {
		f.names = append(f.names, e.Name)
		f.clas = append(f.clas, decodeCLA(tb, e))
	}
	flipped := xdsname.Cluster(topology.Key{Namespace: "bench", Name: topologytest.UpstreamName(2500)})
	for i := range 2 {
		publishBatch(topologytest.Flip(2500, 1-i))
		for _, e := range c.Resources(int(translate.Weighted))[resource.EndpointType] {
			if e.Name == flipped {
				f.flip[i] = decodeCLA(tb, e)
			}
		}
	}
	if len(f.names) != 5000 || f.flip[0] == nil || proto.Equal(f.flip[0], f.flip[1]) {
		tb.Fatalf("fixture: %d CLAs, flip %v", len(f.names), f.flip[0] != nil)
	}
	return f
}

func decodeCLA(tb testing.TB, e *xdscache.Entry) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := e.Decode(cla); err != nil {
		tb.Fatal(err)
	}
	return cla
}

// ackBytes is a SotW ACK as it arrives on the wire: every subscribed name again.
func ackBytes(names []string, version, nonce string) []byte {
	var b []byte
	b = protowire.AppendTag(b, fieldVersionInfo, protowire.BytesType)
	b = protowire.AppendString(b, version)
	for _, n := range names {
		b = protowire.AppendTag(b, fieldResourceNames, protowire.BytesType)
		b = protowire.AppendString(b, n)
	}
	b = protowire.AppendTag(b, fieldTypeURL, protowire.BytesType)
	b = protowire.AppendString(b, resource.EndpointType)
	b = protowire.AppendTag(b, fieldResponseNonce, protowire.BytesType)
	return protowire.AppendString(b, nonce)
}

// BenchmarkFanOut measures one endpoint flip reaching E clients, each
// subscribed to all 5,000 CLAs, from the new CLA to every response
// marshalled and every client's ACK processed (the server's CPU work,
// without the gRPC transport), for Poise and, on the same fixture in the
// same run, for go-control-plane's LinearCache driven as its own server
// drives it (the anchor).
func BenchmarkFanOut(b *testing.B) {
	f := newFixture(b)
	for _, clients := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("poise-sotw/clients=%d", clients), func(b *testing.B) { benchPoiseSotw(b, f, clients) })
		b.Run(fmt.Sprintf("linearcache-sotw/clients=%d", clients), func(b *testing.B) { benchLinearSotw(b, f, clients) })
		b.Run(fmt.Sprintf("poise-delta/clients=%d", clients), func(b *testing.B) { benchPoiseDelta(b, f, clients) })
		b.Run(fmt.Sprintf("linearcache-delta/clients=%d", clients), func(b *testing.B) { benchLinearDelta(b, f, clients) })
	}
	// the same flip when every CLA has a variant per client class and the
	// clients are spread over 8 and 64 classes: each class's variant is one
	// more entry, marshalled once and shared by the class's clients
	for _, classes := range []int{8, 64} {
		b.Run(fmt.Sprintf("poise-sotw-classes=%d/clients=1000", classes), func(b *testing.B) { benchPoiseSotwClasses(b, f, 1000, classes) })
	}
	// the same flip when each of 10 namespaces has an upstream only it may
	// read and the 1,000 clients are of one namespace or spread over ten:
	// the cache keeps each audience's watches apart, and a flip of what all
	// may read visits each audience's group
	for _, audiences := range []int{1, 10} {
		b.Run(fmt.Sprintf("poise-sotw-audiences=%d/clients=1000", audiences), func(b *testing.B) { benchPoiseSotwAudiences(b, f, 1000, 0, audiences) })
	}
}

// restrictedNamespaces is how many namespaces have an upstream of their
// own in the audience benchmarks.
const restrictedNamespaces = 10

func audienceOf(i int) xdscache.Audience {
	return xdscache.Audience{Namespace: fmt.Sprintf("ns-%d", i)}
}

// restricted is the CLA of namespace i's own upstream, which only that
// namespace may read.
func restricted(b *testing.B, f *fixture, i int) *xdscache.Entry {
	cla := proto.Clone(f.clas[i]).(*endpointv3.ClusterLoadAssignment)
	cla.ClusterName = fmt.Sprintf("ns-%d/own", i)
	e, err := xdscache.NewEntry(cla.ClusterName, "v0", cla)
	if err != nil {
		b.Fatal(err)
	}
	return e.WithVisibility(xdscache.VisibleToNamespaces(audienceOf(i).Namespace))
}

// withRestricted adds each namespace's own upstream to c; it returns their names.
func withRestricted(b *testing.B, f *fixture, c *xdscache.Cache) []string {
	u := xdscache.Update{Version: "v0"}
	var names []string
	for i := range restrictedNamespaces {
		e := restricted(b, f, i)
		names = append(names, e.Name)
		u.Changes = append(u.Changes, xdscache.Change{TypeURL: resource.EndpointType, Name: e.Name, Entry: e})
	}
	c.Apply(u)
	return names
}

// flips runs the measured loop: each iteration moves the flipped CLA to
// its other state at a new version.
func flips(b *testing.B, f *fixture, flip func(version string, cla *endpointv3.ClusterLoadAssignment)) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		flip("v"+strconv.Itoa(i), f.flip[(i+1)%2])
	}
}

// fanOut opens n clients, each of which has taken its whole first state,
// then measures flips: update publishes the flipped CLA, step takes one
// client's response and answers it as the client would.
func fanOut[C any](b *testing.B, f *fixture, n int, open func(i int) C, step func(C), update func(version string, cla *endpointv3.ClusterLoadAssignment)) {
	clients := make([]C, n)
	for i := range clients {
		clients[i] = open(i)
	}
	flips(b, f, func(version string, cla *endpointv3.ClusterLoadAssignment) {
		update(version, cla)
		for _, cl := range clients {
			step(cl)
		}
	})
}

func poiseUpdate(b *testing.B, c *xdscache.Cache) func(string, *endpointv3.ClusterLoadAssignment) {
	return func(version string, cla *endpointv3.ClusterLoadAssignment) {
		e, err := xdscache.NewEntry(cla.GetClusterName(), version, cla)
		if err != nil {
			b.Fatal(err)
		}
		c.Apply(xdscache.Update{Version: version, Changes: []xdscache.Change{{TypeURL: resource.EndpointType, Name: e.Name, Entry: e}}})
	}
}

func linearUpdate(b *testing.B, lc *gcp.LinearCache) func(string, *endpointv3.ClusterLoadAssignment) {
	return func(_ string, cla *endpointv3.ClusterLoadAssignment) {
		if err := lc.UpdateResource(cla.GetClusterName(), cla); err != nil {
			b.Fatal(err)
		}
	}
}

func poiseCache(b *testing.B, f *fixture) *xdscache.Cache {
	c := xdscache.New(1, func(*core.Node) int { return 0 })
	u := xdscache.Update{Version: "v0"}
	for i, name := range f.names {
		e, err := xdscache.NewEntry(name, "v0", f.clas[i])
		if err != nil {
			b.Fatal(err)
		}
		u.Changes = append(u.Changes, xdscache.Change{TypeURL: resource.EndpointType, Name: name, Entry: e})
	}
	c.Apply(u)
	return c
}

type poiseClient struct {
	st  *xdscache.Stream
	key streamKey
	req *sotwRequest
	out []xdscache.Response
}

func benchPoiseSotw(b *testing.B, f *fixture, n int) { benchPoiseSotwClasses(b, f, n, 0) }

// classKey is the class of client i when clients are spread over k classes.
func classKey(i, k int) (region, zone, key string) {
	region, zone = fmt.Sprintf("r%d", i%k%3), fmt.Sprintf("z%d", i%k)
	return region, zone, region + "/" + zone
}

// classUpdate publishes the flipped CLA as the base and as a variant for
// each of k classes (each its own entry, as the publisher makes them).
func classUpdate(b *testing.B, c *xdscache.Cache, k int) func(string, *endpointv3.ClusterLoadAssignment) {
	return func(version string, cla *endpointv3.ClusterLoadAssignment) {
		u := xdscache.Update{Version: version}
		for i := -1; i < k; i++ {
			e, err := xdscache.NewEntry(cla.GetClusterName(), version, cla)
			if err != nil {
				b.Fatal(err)
			}
			ch := xdscache.Change{TypeURL: resource.EndpointType, Name: e.Name, Entry: e}
			if i >= 0 {
				_, _, ch.Zone = classKey(i, k)
			}
			u.Changes = append(u.Changes, ch)
		}
		c.Apply(u)
	}
}

func benchPoiseSotwClasses(b *testing.B, f *fixture, n, k int) {
	benchPoiseSotwAudiences(b, f, n, k, 0)
}

// benchPoiseSotwAudiences is benchPoiseSotwClasses with, when audiences is
// above 0, each namespace's own upstream published and client i of
// namespace i%audiences, subscribed to every name, its own upstream's and
// the other namespaces' too (which it is never sent).
func benchPoiseSotwAudiences(b *testing.B, f *fixture, n, k, audiences int) {
	c := poiseCache(b, f)
	subscribed, holds := f.names, len(f.names)
	if audiences > 0 {
		subscribed = append(slices.Clone(f.names), withRestricted(b, f, c)...)
		holds++
	}
	x := &xdsServer{cache: c, clients: NewClients(nil, nil), names: newNameBlocks(maxNameBlockBytes), bodies: newBodyCache()}
	first, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: subscribed, Node: &core.Node{Id: "envoy"}})
	// An ACK as it arrives: the version and every name, then the type and
	// nonce. Clients write it (each the same, as they move in step), and the
	// server's transport copies it frame by frame into pooled buffers
	// (transportFrames): only that copy is the server's work.
	block := ackBytes(subscribed, "", "")
	block = block[2 : len(block)-2-len(resource.EndpointType)-2] // the names alone
	var wire []byte
	var frames mem.BufferSlice
	var lastVersion, lastNonce string
	ack := func(version, nonce string) []byte {
		if version == lastVersion && nonce == lastNonce {
			return wire
		}
		lastVersion, lastNonce = version, nonce
		wire = protowire.AppendTag(wire[:0], fieldVersionInfo, protowire.BytesType)
		wire = protowire.AppendString(wire, version)
		wire = append(wire, block...)
		wire = protowire.AppendTag(wire, fieldTypeURL, protowire.BytesType)
		wire = protowire.AppendString(wire, resource.EndpointType)
		wire = protowire.AppendTag(wire, fieldResponseNonce, protowire.BytesType)
		wire = protowire.AppendString(wire, nonce)
		return wire
	}
	answer := func(cl *poiseClient) int {
		cl.out = cl.st.Next(cl.out[:0])
		if len(cl.out) != 1 {
			return -1
		}
		r := cl.out[0]
		published, _ := c.PublishedAt(r.Version)
		x.clients.response(cl.key, r.TypeURL, r.Version, r.Nonce, r.Entries, r.Removed, published)
		_ = x.encodeSotw(r) // what the server hands the transport
		frames = transportFrames(frames, ack(r.Version, r.Nonce))
		err := newCodec().Unmarshal(frames, cl.req)
		frames.Free()
		if err != nil {
			b.Fatal(err)
		}
		if err := x.handleSotw(cl.st, cl.key, "", cl.req); err != nil {
			b.Fatal(err)
		}
		cl.req.release()
		return len(r.Entries)
	}
	update := poiseUpdate(b, c)
	if k > 0 {
		update = classUpdate(b, c, k)
	}
	fanOut(b, f, n, func(i int) *poiseClient {
		st := c.NewStream(false)
		if audiences > 0 {
			st = c.NewStreamFor(false, audienceOf(i%audiences))
		}
		cl := &poiseClient{st: st, key: streamKey{"sotw", int64(i + 1)}, req: &sotwRequest{seed: c.Seed(), blocks: x.names}}
		x.clients.open(cl.key, cl.st)
		req := first
		if k > 0 {
			region, zone, _ := classKey(i, k)
			req, _ = proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: f.names,
				Node: &core.Node{Id: "envoy", Locality: &core.Locality{Region: region, Zone: zone}}})
		}
		decodeInto(b, cl.req, req)
		if err := x.handleSotw(cl.st, cl.key, "", cl.req); err != nil {
			b.Fatal(err)
		}
		takeAll(b, holds, func() int { return answer(cl) })
		return cl
	}, func(cl *poiseClient) { flipOnly(b, answer(cl)) }, update)
}

func benchPoiseDelta(b *testing.B, f *fixture, n int) {
	c := poiseCache(b, f)
	x := &xdsServer{cache: c, clients: NewClients(nil, nil), names: newNameBlocks(maxNameBlockBytes), bodies: newBodyCache()}
	answer := func(cl *poiseClient) int {
		cl.out = cl.st.Next(cl.out[:0])
		if len(cl.out) != 1 {
			return -1
		}
		r := cl.out[0]
		published, _ := c.PublishedAt(r.Version)
		x.clients.response(cl.key, r.TypeURL, r.Version, r.Nonce, r.Entries, r.Removed, published)
		_ = x.encodeDelta(r) // what the server hands the transport
		ackMsg, _ := proto.Marshal(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResponseNonce: r.Nonce})
		req := &discovery.DeltaDiscoveryRequest{}
		if err := proto.Unmarshal(ackMsg, req); err != nil {
			b.Fatal(err)
		}
		if err := x.handleDelta(cl.st, cl.key, "", req); err != nil {
			b.Fatal(err)
		}
		return len(r.Entries)
	}
	fanOut(b, f, n, func(i int) *poiseClient {
		cl := &poiseClient{st: c.NewStream(true), key: streamKey{"delta", int64(i + 1)}}
		x.clients.open(cl.key, cl.st)
		if err := x.handleDelta(cl.st, cl.key, "", &discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType,
			ResourceNamesSubscribe: f.names, Node: &core.Node{Id: "envoy"}}); err != nil {
			b.Fatal(err)
		}
		takeAll(b, len(f.names), func() int { return answer(cl) })
		return cl
	}, func(cl *poiseClient) { flipOnly(b, answer(cl)) }, poiseUpdate(b, c))
}

// takeAll answers a starting client's responses (answer returns how many
// resources one held, -1 for none ready) until it holds all n.
func takeAll(b *testing.B, n int, answer func() int) {
	for got := 0; got < n; {
		k := answer()
		if k < 0 {
			b.Fatalf("a starting client stopped after %d of %d CLAs", got, n)
		}
		got += k
	}
}

// flipOnly holds a measured response to the flipped CLA alone.
func flipOnly(b *testing.B, sent int) {
	if sent != 1 {
		b.Fatalf("a flip sent %d CLAs, want the flipped one alone", sent)
	}
}

func linearCache(f *fixture) *gcp.LinearCache {
	initial := make(map[string]types.Resource, len(f.names))
	for i, name := range f.names {
		initial[name] = f.clas[i]
	}
	return gcp.NewLinearCache(resource.EndpointType, gcp.WithInitialResources(initial), gcp.WithVersionPrefix("bench-"))
}

// benchLinearSotw drives LinearCache as go-control-plane's SotW server does
// for each response and ACK: take the response, record what it returned,
// decode the ACK, reset the subscription from its names, open a new watch.
func benchLinearSotw(b *testing.B, f *fixture, n int) {
	lc := linearCache(f)
	type client struct {
		sub stream.Subscription
		out chan gcp.Response
	}
	node := &core.Node{Id: "envoy"}
	step := func(cl *client) {
		r := <-cl.out
		d, err := r.GetDiscoveryResponse()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := proto.Marshal(d); err != nil {
			b.Fatal(err)
		}
		cl.sub.SetReturnedResources(r.GetReturnedResources())
		req := &discovery.DiscoveryRequest{}
		if err := proto.Unmarshal(ackBytes(f.names, d.GetVersionInfo(), "1"), req); err != nil {
			b.Fatal(err)
		}
		req.Node = node
		cl.sub.SetResourceSubscription(req.GetResourceNames())
		if _, err := lc.CreateWatch(req, &cl.sub, cl.out); err != nil {
			b.Fatal(err)
		}
	}
	fanOut(b, f, n, func(int) *client {
		cl := &client{sub: stream.NewSotwSubscription(f.names, false), out: make(chan gcp.Response, 1)}
		if _, err := lc.CreateWatch(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: f.names}, &cl.sub, cl.out); err != nil {
			b.Fatal(err)
		}
		step(cl) // its first response: everything
		return cl
	}, step, linearUpdate(b, lc))
}

func benchLinearDelta(b *testing.B, f *fixture, n int) {
	lc := linearCache(f)
	type client struct {
		sub stream.Subscription
		out chan gcp.DeltaResponse
	}
	node := &core.Node{Id: "envoy"}
	step := func(cl *client) {
		r := <-cl.out
		d, err := r.GetDeltaDiscoveryResponse()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := proto.Marshal(d); err != nil {
			b.Fatal(err)
		}
		cl.sub.SetReturnedResources(r.GetNextVersionMap())
		ackMsg, _ := proto.Marshal(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResponseNonce: "1"})
		req := &discovery.DeltaDiscoveryRequest{}
		if err := proto.Unmarshal(ackMsg, req); err != nil {
			b.Fatal(err)
		}
		req.Node = node
		if _, err := lc.CreateDeltaWatch(req, &cl.sub, cl.out); err != nil {
			b.Fatal(err)
		}
	}
	fanOut(b, f, n, func(int) *client {
		cl := &client{sub: stream.NewDeltaSubscription(f.names, nil, nil, false), out: make(chan gcp.DeltaResponse, 1)}
		if _, err := lc.CreateDeltaWatch(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNamesSubscribe: f.names}, &cl.sub, cl.out); err != nil {
			b.Fatal(err)
		}
		step(cl) // its first response: everything
		return cl
	}, step, linearUpdate(b, lc))
}

// BenchmarkACK is one SotW ACK of a 5,000-name subscription as the server
// handles it once received: read its bytes, recognise the names, re-arm.
func BenchmarkACK(b *testing.B) {
	c := xdscache.New(1, func(*core.Node) int { return 0 })
	x := &xdsServer{cache: c, clients: NewClients(nil, nil), names: newNameBlocks(maxNameBlockBytes), bodies: newBodyCache()}
	key := streamKey{"sotw", 1}
	st := c.NewStream(false)
	x.clients.open(key, st)
	list := names(5000, "bench/svc")
	req := &sotwRequest{seed: c.Seed(), blocks: x.names}
	first, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: list, Node: &core.Node{Id: "n"}})
	decodeInto(b, req, first)
	if err := x.handleSotw(st, key, "", req); err != nil {
		b.Fatal(err)
	}
	ack := ackBytes(list, "v1", "1")
	b.SetBytes(int64(len(ack)))
	b.ReportAllocs()
	var frames mem.BufferSlice
	for b.Loop() {
		frames = transportFrames(frames, ack)
		err := newCodec().Unmarshal(frames, req)
		frames.Free()
		if err != nil {
			b.Fatal(err)
		}
		if err := x.handleSotw(st, key, "", req); err != nil {
			b.Fatal(err)
		}
		req.release()
	}
}

// BenchmarkAudienceMemory measures what an audience costs the cache: 1,000
// Delta clients, each subscribed to every CLA (wildcard) and to the spatial
// route, holding them, spread over one audience and then over A, with each
// of 10 namespaces' own upstream published, and a SpatialDomain exported to
// every namespace beside one of each audience's namespace exported to it
// alone (so each audience is an audience class of the spatial route); the
// difference of live heap, per audience added, is B/audience: a group of
// watches per (type, audience), for a type with restricted resources the
// audience's list of what it may read, and its class's spatial route
// (B/route: the bytes of one, which holds the shared domain's virtual host
// too).
func BenchmarkAudienceMemory(b *testing.B) {
	f := newFixture(b)
	spatialRoutes(b, 1) // what the first publication of a route initializes once is no audience's
	for _, audiences := range []int{10, 100} {
		b.Run(fmt.Sprintf("audiences=%d/clients=1000", audiences), func(b *testing.B) {
			var perAudience float64
			var route int
			for b.Loop() {
				one, _ := heapWith(b, f, 1000, 1)
				many, r := heapWith(b, f, 1000, audiences)
				perAudience, route = float64(int64(many)-int64(one))/float64(audiences-1), r
			}
			b.ReportMetric(perAudience, "B/audience")
			b.ReportMetric(float64(route), "B/route")
		})
	}
}

// spatialRoutes is the spatial route the publisher renders for a
// SpatialDomain exported to every namespace beside one domain of each of
// the first audiences namespaces, exported to its own: the base and one
// audience variant per namespace, as one change of view 0; and the size of
// a variant.
func spatialRoutes(b *testing.B, audiences int) (xdscache.Change, int) {
	d := topology.NewDirectory()
	c := xdscache.New(int(translate.NumRenderings), func(n *core.Node) int { return int(translate.RenderingFor(n)) })
	var batch topology.Batch
	topologytest.SpatialDomain(&batch, topology.Key{Namespace: "shared", Name: "atlas"}, []string{"*"})
	for i := range audiences {
		ns := audienceOf(i).Namespace
		topologytest.SpatialDomain(&batch, topology.Key{Namespace: ns, Name: "maps-" + ns}, []string{"."})
	}
	snap, err := d.Apply(batch)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := publish.New(c, "bench", nil).Publish(snap); err != nil {
		b.Fatal(err)
	}
	ch := xdscache.Change{TypeURL: resource.RouteType, Name: translate.SpatialRouteName,
		Audiences: c.AudienceVariants(int(translate.Weighted), resource.RouteType, translate.SpatialRouteName)}
	for _, e := range c.Resources(int(translate.Weighted))[resource.RouteType] {
		if e.Name == translate.SpatialRouteName {
			ch.Entry = e
		}
	}
	if ch.Entry == nil || len(ch.Audiences) != audiences {
		b.Fatalf("the spatial route has %d audience variants, want %d", len(ch.Audiences), audiences)
	}
	return ch, len(ch.Audiences[0].Any.GetValue())
}

// settledGC collects twice: what a sync.Pool held at the first (the
// publisher's scratch) is freed only by the second.
func settledGC() {
	runtime.GC()
	runtime.GC()
}

// heapWith is the live heap while n Delta clients of the given audiences
// hold every CLA and the spatial route of a cache with each namespace's own
// upstream and SpatialDomain; and the size of one spatial route variant.
func heapWith(b *testing.B, f *fixture, n, audiences int) (heap uint64, route int) {
	var ms runtime.MemStats
	settledGC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	c := poiseCache(b, f)
	withRestricted(b, f, c)
	routes, route := spatialRoutes(b, audiences)
	c.Apply(xdscache.Update{Version: "v0", Changes: []xdscache.Change{routes}})
	streams := make([]*xdscache.Stream, n)
	var out []xdscache.Response
	for i := range streams {
		st := c.NewStreamFor(true, audienceOf(i%audiences))
		for _, req := range []xdscache.DeltaRequest{{TypeURL: resource.EndpointType},
			{TypeURL: resource.RouteType, Subscribe: []string{translate.SpatialRouteName}}} {
			if err := st.Delta(req); err != nil {
				b.Fatal(err)
			}
		}
		routes := 0
		for {
			out = st.Next(out[:0])
			if len(out) == 0 {
				break
			}
			for _, r := range out {
				if r.TypeURL == resource.RouteType {
					routes += len(r.Entries)
				}
				if err := st.Delta(xdscache.DeltaRequest{TypeURL: r.TypeURL, Nonce: r.Nonce}); err != nil {
					b.Fatal(err)
				}
			}
		}
		if routes != 1 {
			b.Fatalf("a client took %d spatial routes, want 1", routes)
		}
		streams[i] = st
	}
	settledGC()
	runtime.ReadMemStats(&ms)
	runtime.KeepAlive(streams)
	runtime.KeepAlive(c)
	return ms.HeapAlloc - before, route
}
