package server_test

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/xdscache"
)

// The protocol model: random publications (clusters and their endpoints
// put, changed, deleted, in one view or both; zone variants of them put
// and deleted; publications that change nothing), subscriptions (SotW:
// the whole name list; Delta: subscribe and unsubscribe; clusters by
// name, legacy wildcard or "*", which a client may take and leave), ACKs,
// NACKs, responses held unanswered while changes pile up, and
// reconnections (SotW with the versions it holds, Delta with
// initial_resource_versions) of one to four SotW or Delta clients against
// the real server over gRPC on loopback. Each client reads one of two
// views (its node's user agent chooses), is in a locality class (its
// node's region and zone, admitted within the cache's bound on zones:
// none, a region alone, a zone, or its region when the zones are over the
// bound) and of an audience (its namespace). modelserver_test.go's
// modelWatch is the server's side of a stream as the protocol and the
// cache promise it, in plain maps; modelClient is what a client sends and
// holds.
//
// A step is one action followed by a settle: the model says which
// responses the server owes each client now, the test waits (modelWait at
// most) for exactly those, answers them as the client's mode says, then
// checks that what each client holds is what it must. A response the model
// does not expect fails the test when it arrives, and each check ends with
// a barrier (every client swaps its endpoints ping, see modelPings) so
// nothing sent late goes unseen.
//
// What is held, besides the exact responses:
//   - each client converges: SotW holds the whole subscribed CDS and the
//     requested EDS names at their latest content; Delta holds exactly the
//     subscribed resources that exist and is told of those deleted; after a
//     NACK it may keep what it had until the resource changes again;
//   - versions never go backwards; a resource a response carries is the
//     one published at the response's version (so a version is never
//     reused for other content); a SotW CDS response is the whole
//     subscribed state of its version;
//   - a NACKed version (SotW) or content (Delta) is not sent again on the
//     stream unless the client subscribes to it again;
//   - Delta never re-sends what the client holds at that version, except
//     when it subscribes to "*" (the server then sends its whole scope);
//   - nothing is sent, resource or removal, for a name the client does not
//     subscribe to (or no longer does), except to a wildcard subscription;
//   - nothing is sent that the client's audience may not read, and of a
//     name with audience variants each client is sent its audience's
//     variant or the base, and only when that content changes;
//   - the view decides the resources: a client is sent only what its view
//     publishes, at its view's versions (a publication to the other view
//     sends it nothing);
//   - a client is sent its class's zone variant of a resource where one
//     exists (and its audience has no variant of it), else the base; a
//     variant's put or removal is sent to the clients of its class only,
//     and its removal falls back to the base (a change they must be sent);
//     a variant of a name without a base is no variant, and deleting the
//     base deletes its variants.

// modelStepsPerCheck is how many actions one rapid check runs.
const modelStepsPerCheck = 75

// modelWait bounds how long a response the model expects may take.
const modelWait = 5 * time.Second

// modelTimeEnv, when set to a duration, runs the model test again and
// again with new seeds for that long (make fuzz).
const modelTimeEnv = "POISE_MODEL_TIME"

// TestProtocolModel runs the model for SotW and for Delta clients, one
// after the other and not beside the package's parallel tests: the model
// is busy, not waiting, and on two cores it takes longer side by side
// (measured: the package's wall time is shorter so).
func TestProtocolModel(t *testing.T) {
	var budget time.Duration
	if v := os.Getenv(modelTimeEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", modelTimeEnv, v, err)
		}
		budget = d
	}
	start := time.Now()
	var total [2]modelStats
	for {
		for i, protocol := range []string{"SotW", "Delta"} {
			t.Run(protocol, func(t *testing.T) {
				rapid.Check(t, func(rt *rapid.T) {
					total[i].add(runModel(rt, i == 1))
				})
			})
		}
		if t.Failed() || time.Since(start) >= budget {
			break
		}
	}
	t.Logf("protocol model: %d steps in %d checks in %v", total[0].steps+total[1].steps, total[0].checks+total[1].checks,
		time.Since(start).Round(time.Millisecond))
	for i, protocol := range []string{"SotW", "Delta"} {
		t.Logf("%s: %v", protocol, total[i])
	}
}

// modelStats counts what the checks did.
type modelStats struct {
	checks, steps, publications, changes, responses, resources, removals int
	variants                                                             int // resources sent that are audience variants
	zoneChanges, zoneVariants                                            int // zone variants put or deleted; sent
	zoneNews, zoneFallbacks                                              int // a client's content changed by a zone variant's put or deletion; by a deletion
	acks, nacks, heldBack, reconnects                                    int
	// clients by view 1, and by class: a zone, a region (fallback: for a
	// zone over the bound), none (overflow: over the bound)
	clients, view1, zoned, regional, fallback, classless, overflow int
}

func (s *modelStats) add(o modelStats) {
	s.checks++
	s.steps += o.steps
	s.publications += o.publications
	s.changes += o.changes
	s.responses += o.responses
	s.resources += o.resources
	s.removals += o.removals
	s.variants += o.variants
	s.zoneChanges += o.zoneChanges
	s.zoneVariants += o.zoneVariants
	s.zoneNews += o.zoneNews
	s.zoneFallbacks += o.zoneFallbacks
	s.acks += o.acks
	s.nacks += o.nacks
	s.heldBack += o.heldBack
	s.reconnects += o.reconnects
	s.clients += o.clients
	s.view1 += o.view1
	s.zoned += o.zoned
	s.regional += o.regional
	s.fallback += o.fallback
	s.classless += o.classless
	s.overflow += o.overflow
}

func (s modelStats) String() string {
	return fmt.Sprintf("%d steps in %d checks: %d publications of %d changes (%d of zone variants, news to a client %d times, %d of them a deletion falling back to the base); "+
		"%d responses of %d resources (%d audience variants, %d zone variants) and %d removals; "+
		"%d ACKs, %d NACKs, %d responses held before their answer, %d reconnections; "+
		"%d clients: %d of view 1; %d in a zone class, %d in a region class (%d over the bound), %d in none (%d over the bound)",
		s.steps, s.checks, s.publications, s.changes, s.zoneChanges, s.zoneNews, s.zoneFallbacks, s.responses, s.resources, s.variants, s.zoneVariants, s.removals,
		s.acks, s.nacks, s.heldBack, s.reconnects,
		s.clients, s.view1, s.zoned, s.regional, s.fallback, s.classless, s.overflow)
}

// runModel runs one check and returns what it did.
func runModel(t *rapid.T, delta bool) modelStats {
	w := newModelWorld(t)
	defer w.stop()
	w.publishInitial()
	n := rapid.IntRange(1, 4).Draw(t, "clients")
	for i := range n {
		w.clients = append(w.clients, w.newClient(t, i, delta))
		// its first response says the server has its class before the
		// next client claims one
		w.settle()
	}
	for range modelStepsPerCheck {
		w.step(t)
		w.stats.steps++
		w.settle()
	}
	w.barrier()
	return w.stats
}

// The model's two types: clusters (SotW full state) and their endpoints.
const (
	mCDS = 0
	mEDS = 1
)

var modelTypeURLs = [2]string{CDS, EDS}

// modelNames are the clusters (and assignments) that come and go;
// modelPings always exist and never change: a client subscribes to one of
// each type and swaps it with every change of its subscription, so the
// server always answers the change and the test knows it was processed
// before the next action.
var (
	modelNames = []string{"a", "b", "c", "d", "e"}
	modelPings = [2]string{"ping-0", "ping-1"}
)

// Each client is of an audience (anonymous, or namespace ns1 or ns2, as
// the server's Audience hook says from its call), and two of the names
// are visible to one namespace only: to a client of another audience they
// do not exist. The base of modelVariantName is every client's, and each
// of its puts may carry an audience variant for ns1, for ns2, or both:
// their clients read that instead.
var (
	modelAudiences  = []string{"", "ns1", "ns2"}
	modelVisibility = map[string]xdscache.Visibility{"c": xdscache.VisibleToNamespaces("ns1"), "d": xdscache.VisibleToNamespaces("ns2")}
)

const modelVariantName = "e"

// The cache has modelViews views; a client's node chooses its view by its
// user agent (modelViewFor), as the control plane's chooses a rendering by
// the node's client features.
const modelViews = 2

var modelUserAgents = [modelViews]string{"model-envoy", "model-grpc"}

func modelViewFor(n *core.Node) int {
	if i := slices.Index(modelUserAgents[:], n.GetUserAgentName()); i >= 0 {
		return i
	}
	return 0
}

// modelLocalities are the localities a client's node may claim, with the
// class each claims: a sub-zone is no class of its own, and a node that
// names no region claims none.
var modelLocalities = []struct {
	loc   *core.Locality
	claim string
}{
	{nil, ""},
	{&core.Locality{Zone: "z1"}, ""},
	{&core.Locality{Region: "r1"}, "r1"},
	{&core.Locality{Region: "r1", Zone: "z1"}, "r1/z1"},
	{&core.Locality{Region: "r1", Zone: "z1", SubZone: "s1"}, "r1/z1"},
	{&core.Locality{Region: "r1", Zone: "z2"}, "r1/z2"},
	{&core.Locality{Region: "r2", Zone: "z1"}, "r2/z1"},
}

// modelZones are the classes publications put zone variants for, besides
// the classes of the clients of the check: "r2" is only ever the class of
// a client of r2/z1 over the bound on zones.
var modelZones = []string{"r1", "r1/z1", "r1/z2", "r2", "r2/z1"}

// modelCensus admits a stream's claimed class as the cache promises
// (xdscache.WithMaxZones): its zone while fewer than max zone classes
// have streams (or its zone has), else its region's class while fewer
// than max region classes have streams (or its region has), else none. A
// client keeps its class over reconnections: the classes of the others do
// not change meanwhile, and its own stream's leaving cannot make room for
// a class it did not get.
type modelCensus struct {
	max            int
	streams        map[string]int
	zones, regions int
}

func (z *modelCensus) admit(claim string) string {
	if claim == "" {
		return ""
	}
	fits := func(class string) bool {
		if z.streams[class] > 0 {
			return true
		}
		if strings.Contains(class, "/") {
			return z.zones < z.max
		}
		return z.regions < z.max
	}
	region, _, _ := strings.Cut(claim, "/")
	class := ""
	switch {
	case fits(claim):
		class = claim
	case fits(region):
		class = region
	default:
		return ""
	}
	if z.streams[class]++; z.streams[class] == 1 {
		if strings.Contains(class, "/") {
			z.zones++
		} else {
			z.regions++
		}
	}
	return class
}

// modelVariant is a variant as published (src) and as the cache sends it
// (sent: the same bytes under a version of its own).
type modelVariant struct{ src, sent *xdscache.Entry }

// modelState is what one type publishes in one view: the base resources,
// the audience variants of a name, by namespace, and its zone variants, by
// class. A variant map is replaced, never changed in place, so a clone
// shares them.
type modelState struct {
	base     map[string]*xdscache.Entry
	variants map[string]map[string]modelVariant
	zones    map[string]map[string]modelVariant
}

func newModelState() modelState {
	return modelState{base: map[string]*xdscache.Entry{}, variants: map[string]map[string]modelVariant{},
		zones: map[string]map[string]modelVariant{}}
}

func (s modelState) clone() modelState {
	return modelState{base: maps.Clone(s.base), variants: maps.Clone(s.variants), zones: maps.Clone(s.zones)}
}

// get is what a client of class and aud is sent for name: its audience's
// variant, else, if it may read the base, its class's zone variant or the
// base; nil for nothing.
func (s modelState) get(name, class string, aud xdscache.Audience) *xdscache.Entry {
	if v, ok := s.variants[name][aud.Namespace]; ok && !aud.IsAnonymous() {
		return v.sent
	}
	e := s.base[name]
	if e == nil || !e.VisibleTo(aud) {
		return nil
	}
	if v, ok := s.zones[name][class]; ok && class != "" {
		return v.sent
	}
	return e
}

// read is everything a client of class and aud is sent, by name.
func (s modelState) read(class string, aud xdscache.Audience) map[string]*xdscache.Entry {
	out := make(map[string]*xdscache.Entry, len(s.base))
	for n := range s.base {
		if e := s.get(n, class, aud); e != nil {
			out[n] = e
		}
	}
	return out
}

// apply applies a change as the cache promises (xdscache.Change) and
// reports whether it changed anything: a zone variant exists only beside
// its base, a put of what is there changes nothing, and a base's put
// replaces its audience variants and keeps its zone variants, its
// deletion deletes both.
func (s modelState) apply(ch modelChange) bool {
	if ch.zone != "" {
		zs := s.zones[ch.name]
		old, had := zs[ch.zone]
		switch {
		case ch.e == nil && !had, ch.e != nil && (s.base[ch.name] == nil || had && old == ch.zoneVariant):
			return false
		}
		zs = maps.Clone(zs)
		if zs == nil {
			zs = map[string]modelVariant{}
		}
		if ch.e == nil {
			delete(zs, ch.zone)
		} else {
			zs[ch.zone] = ch.zoneVariant
		}
		if len(zs) == 0 {
			delete(s.zones, ch.name)
		} else {
			s.zones[ch.name] = zs
		}
		return true
	}
	old, had := s.base[ch.name]
	switch {
	case ch.e == nil && !had, ch.e != nil && old == ch.e && maps.Equal(s.variants[ch.name], ch.variants):
		return false
	}
	delete(s.variants, ch.name)
	if ch.e == nil {
		delete(s.base, ch.name)
		delete(s.zones, ch.name)
		return true
	}
	s.base[ch.name] = ch.e
	if len(ch.variants) > 0 {
		s.variants[ch.name] = ch.variants
	}
	return true
}

// modelWorld is the server under test and the model of what it publishes.
type modelWorld struct {
	t       *rapid.T
	cache   *xdscache.Cache
	conn    *grpc.ClientConn
	stopped func()

	seq     int
	ids     int
	cur     [modelViews][2]modelState
	version [modelViews][2]string
	// at holds each type's resources in each view as they were at each
	// version of it.
	at      [modelViews][2]map[string]modelState
	byBytes map[string]*xdscache.Entry
	// zoneSent are the zone variants as sent.
	zoneSent map[*xdscache.Entry]bool
	census   modelCensus
	// zoneChoices are the classes publications put zone variants for:
	// modelZones and the clients' classes, so these come up more often.
	zoneChoices []string
	clients     []*modelClient
	stats       modelStats
}

func newModelWorld(t *rapid.T) *modelWorld {
	w := &modelWorld{t: t, byBytes: map[string]*xdscache.Entry{}, zoneSent: map[*xdscache.Entry]bool{}, zoneChoices: slices.Clone(modelZones)}
	for view := range modelViews {
		for typ := range 2 {
			w.cur[view][typ] = newModelState()
			w.at[view][typ] = map[string]modelState{}
		}
	}
	w.census = modelCensus{max: rapid.IntRange(1, 3).Draw(t, "max zones"), streams: map[string]int{}}
	w.cache = xdscache.New(modelViews, modelViewFor, xdscache.WithMaxZones(w.census.max))
	g, err := server.New(w.cache, server.NewClients(nil, nil), server.Config{Audience: testAudience})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- server.Serve(ctx, g, lis) }()
	w.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w.stopped = func() {
		_ = w.conn.Close()
		cancel()
		select {
		case err := <-served:
			if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(modelWait):
			t.Error("server did not stop")
		}
	}
	return w
}

func (w *modelWorld) stop() {
	for _, c := range w.clients {
		c.close()
	}
	w.stopped()
}

// newEntry makes a new content of a resource, never published before.
func (w *modelWorld) newEntry(typ int, name, version string) *xdscache.Entry {
	w.ids++
	var m proto.Message
	if typ == mCDS {
		m = cluster(name, int64(w.ids))
	} else {
		m = cla(name, uint32(w.ids))
	}
	e, err := xdscache.NewEntry(name, version, m)
	if err != nil {
		w.t.Fatal(err)
	}
	e = e.WithVisibility(modelVisibility[name])
	w.byBytes[bytesKey(typ, e.Any.GetValue())] = e
	return e
}

func bytesKey(typ int, b []byte) string { return strconv.Itoa(typ) + "/" + string(b) }

// newVariant makes a new content of modelVariantName for namespace ns.
func (w *modelWorld) newVariant(typ int, ns, version string) modelVariant {
	src := w.newEntry(typ, modelVariantName, version).WithVisibility(xdscache.VisibleToNamespaces(ns))
	digest := maphash.Bytes(w.cache.Seed(), src.Any.GetValue())
	sent := &xdscache.Entry{Name: src.Name, Version: version + "@" + strconv.FormatUint(digest, 16), Any: src.Any, Visible: src.Visible}
	w.byBytes[bytesKey(typ, src.Any.GetValue())] = sent
	return modelVariant{src, sent}
}

// newZoneVariant makes a new content of name for the clients of class: the
// cache sends it under the version it is put at, "@" and the class, to
// whoever may read the base.
func (w *modelWorld) newZoneVariant(typ int, name, class, version string) modelVariant {
	src := w.newEntry(typ, name, version)
	sent := &xdscache.Entry{Name: name, Version: version + "@" + class, Any: src.Any}
	w.byBytes[bytesKey(typ, src.Any.GetValue())] = sent
	w.zoneSent[sent] = true
	return modelVariant{src, sent}
}

// modelChange is one change of a publication in one view: a new content,
// or a deletion (e nil), of a base or (zone set) of a class's zone
// variant; variants are a base's audience variants, by namespace, and
// zoneVariant the zone variant put (its src is e).
type modelChange struct {
	view        int
	typ         int
	name        string
	zone        string
	e           *xdscache.Entry
	variants    map[string]modelVariant
	zoneVariant modelVariant
}

// audiences are a change's variants as the cache takes them, in namespace order.
func (ch modelChange) audiences() []*xdscache.Entry {
	var out []*xdscache.Entry
	for _, ns := range slices.Sorted(maps.Keys(ch.variants)) {
		out = append(out, ch.variants[ns].src)
	}
	return out
}

// publish applies changes to the cache at a new version and to the model.
// A change marks its name on each client whose content of it differs
// after it (its view's, its class's and its audience's), as the cache
// does: a base's change is news to no client of a class with a variant of
// it, a variant's to no client of another class.
func (w *modelWorld) publish(changes []modelChange) {
	w.seq++
	v := fmt.Sprintf("v%d", w.seq)
	u := xdscache.Update{Version: v}
	var changed [modelViews][2]bool
	marks := make([][2][]string, len(w.clients))
	for _, ch := range changes {
		u.Changes = append(u.Changes, xdscache.Change{View: ch.view, TypeURL: modelTypeURLs[ch.typ], Name: ch.name, Zone: ch.zone,
			Entry: ch.e, Audiences: ch.audiences()})
	}
	// of several changes of one resource the cache publishes the last, in
	// the order of the changes
	before := make([]*xdscache.Entry, len(w.clients))
	for _, ch := range lastChanges(changes) {
		st := w.cur[ch.view][ch.typ]
		for i, c := range w.clients {
			before[i] = st.get(ch.name, c.class, c.aud)
		}
		if !st.apply(ch) {
			continue
		}
		changed[ch.view][ch.typ] = true
		w.stats.changes++
		if ch.zone != "" {
			w.stats.zoneChanges++
		}
		for i, c := range w.clients {
			if c.view == ch.view && st.get(ch.name, c.class, c.aud) != before[i] {
				marks[i][ch.typ] = append(marks[i][ch.typ], ch.name)
				if ch.zone != "" {
					w.stats.zoneNews++
					if ch.e == nil {
						w.stats.zoneFallbacks++
					}
				}
			}
		}
	}
	// The first publication publishes every type in every view.
	for view := range modelViews {
		for typ := range 2 {
			if changed[view][typ] || w.version[view][typ] == "" {
				w.version[view][typ] = v
				w.at[view][typ][v] = w.cur[view][typ].clone()
			}
		}
	}
	w.cache.Apply(u)
	w.stats.publications++
	for i, c := range w.clients {
		c.published(marks[i])
	}
}

// lastChanges is changes with only the last change of each resource (its
// view, type, name and zone), in their order.
func lastChanges(changes []modelChange) []modelChange {
	type key struct {
		view, typ  int
		name, zone string
	}
	last := map[key]int{}
	for i, ch := range changes {
		last[key{ch.view, ch.typ, ch.name, ch.zone}] = i
	}
	var out []modelChange
	for i, ch := range changes {
		if last[key{ch.view, ch.typ, ch.name, ch.zone}] == i {
			out = append(out, ch)
		}
	}
	return out
}

// modelDraft is what the changes drawn so far for one publication make of
// the published state: a change drawn after another of the same name
// starts from it, as a publisher's would.
type modelDraft [modelViews][2]modelState

func (w *modelWorld) draft() *modelDraft {
	d := &modelDraft{}
	for view := range modelViews {
		for typ := range 2 {
			d[view][typ] = w.cur[view][typ].clone()
		}
	}
	return d
}

// take applies ch to the draft and returns it.
func (d *modelDraft) take(ch modelChange) modelChange {
	d[ch.view][ch.typ].apply(ch)
	return ch
}

// put is a change that puts a new content of name in view, with audience
// variants drawn for modelVariantName: for each namespace none, the one it
// has, or a new one.
func (w *modelWorld) put(t *rapid.T, d *modelDraft, view, typ int, name, version string) modelChange {
	ch := modelChange{view: view, typ: typ, name: name, e: w.newEntry(typ, name, version)}
	if name == modelVariantName {
		ch.variants = w.drawVariants(t, d, view, typ, version)
	}
	return d.take(ch)
}

// putViews is put in each of views: in both, of one content (the views
// render it alike) or each of its own. Audience variants are each view's
// own draw: a variant one view keeps may be one the other deleted, and
// no content comes back to a view once it has gone.
func (w *modelWorld) putViews(t *rapid.T, d *modelDraft, views []int, typ int, name, version string) []modelChange {
	var out []modelChange
	for i, view := range views {
		if i > 0 && rapid.Bool().Draw(t, "rendered alike") {
			ch := out[0]
			ch.view = view
			if name == modelVariantName {
				ch.variants = w.drawVariants(t, d, view, typ, version)
			}
			out = append(out, d.take(ch))
			continue
		}
		out = append(out, w.put(t, d, view, typ, name, version))
	}
	return out
}

func (w *modelWorld) drawVariants(t *rapid.T, d *modelDraft, view, typ int, version string) map[string]modelVariant {
	out := map[string]modelVariant{}
	for _, ns := range modelAudiences[1:] {
		switch rapid.IntRange(0, 2).Draw(t, "variant of "+ns) {
		case 1:
			if v, ok := d[view][typ].variants[modelVariantName][ns]; ok {
				out[ns] = v
			}
		case 2:
			out[ns] = w.newVariant(typ, ns, version)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// putZone is a change that puts a zone variant of name for class in view:
// the one it has or a new one. Of a name without a base it is no variant.
func (w *modelWorld) putZone(t *rapid.T, d *modelDraft, view, typ int, name, class, version string) modelChange {
	ch := modelChange{view: view, typ: typ, name: name, zone: class}
	if v, ok := d[view][typ].zones[name][class]; ok && rapid.IntRange(0, 3).Draw(t, "same zone variant") == 0 {
		ch.zoneVariant = v
	} else {
		ch.zoneVariant = w.newZoneVariant(typ, name, class, version)
	}
	ch.e = ch.zoneVariant.src
	return d.take(ch)
}

// publishInitial publishes the pings in both views, and some of the names
// and zone variants of them.
func (w *modelWorld) publishInitial() {
	v := fmt.Sprintf("v%d", w.seq+1)
	var changes []modelChange
	for typ := range 2 {
		for _, p := range modelPings {
			e := w.newEntry(typ, p, v)
			for view := range modelViews {
				changes = append(changes, modelChange{view: view, typ: typ, name: p, e: e})
			}
		}
	}
	d := w.draft()
	for _, n := range rapid.SliceOfDistinct(rapid.SampledFrom(modelNames), rapid.ID).Draw(w.t, "initial") {
		views := w.drawViews(w.t)
		changes = append(changes, w.putViews(w.t, d, views, mCDS, n, v)...)
		changes = append(changes, w.putViews(w.t, d, views, mEDS, n, v)...)
		for _, class := range rapid.SliceOfDistinct(rapid.SampledFrom(modelZones), rapid.ID).Draw(w.t, "initial zone variants") {
			changes = append(changes, w.putZone(w.t, d, views[0], mEDS, n, class, v))
		}
	}
	w.publish(changes)
}

// drawViews draws the views a change is published in.
func (w *modelWorld) drawViews(t *rapid.T) []int {
	return rapid.SampledFrom([][]int{{0}, {1}, {0, 1}}).Draw(t, "views")
}

// step draws and runs one action.
func (w *modelWorld) step(t *rapid.T) {
	c := w.clients[rapid.IntRange(0, len(w.clients)-1).Draw(t, "client")]
	typ := rapid.IntRange(0, 1).Draw(t, "type")
	switch rapid.IntRange(0, 9).Draw(t, "action") {
	case 0:
		w.publish(w.drawSame(t, typ))
	case 1, 2, 3:
		w.publish(w.drawChanges(t))
	case 4, 5:
		name := rapid.SampledFrom(modelNames).Draw(t, "name")
		switch {
		case typ == mCDS && c.legacy && !c.delta:
			typ = mEDS // naming a cluster would end a SotW legacy wildcard
		case typ == mCDS && !c.legacy && rapid.IntRange(0, 3).Draw(t, "star") == 0:
			name = "*"
		}
		c.toggle(typ, name)
	case 6:
		c.hold[typ] = true
	case 7:
		c.hold[typ] = false
		c.answer(typ, false)
	case 8: // NACK what is held, or else the next response
		c.hold[typ] = false
		if c.unanswered[typ] == nil {
			c.nackNext[typ] = true
		}
		c.answer(typ, true)
	case 9:
		c.reconnect()
	}
}

// drawSame draws a publication that changes nothing, so nothing is sent:
// names put as they are, with their audience variants and zone variants,
// a zone variant deleted that is not there, and one put of a name
// without a base.
func (w *modelWorld) drawSame(t *rapid.T, typ int) []modelChange {
	var changes []modelChange
	for _, n := range rapid.SliceOfN(rapid.SampledFrom(modelNames), 1, 2).Draw(t, "same") {
		for _, view := range w.drawViews(t) {
			st := w.cur[view][typ]
			changes = append(changes, modelChange{view: view, typ: typ, name: n, e: st.base[n], variants: st.variants[n]})
			for _, class := range slices.Sorted(maps.Keys(st.zones[n])) {
				zv := st.zones[n][class]
				changes = append(changes, modelChange{view: view, typ: typ, name: n, zone: class, e: zv.src, zoneVariant: zv})
			}
			class := rapid.SampledFrom(w.zoneChoices).Draw(t, "class")
			if _, ok := st.zones[n][class]; !ok {
				changes = append(changes, modelChange{view: view, typ: typ, name: n, zone: class})
			}
			if st.base[n] == nil {
				zv := w.newZoneVariant(typ, n, class, fmt.Sprintf("v%d", w.seq+1))
				changes = append(changes, modelChange{view: view, typ: typ, name: n, zone: class, e: zv.src, zoneVariant: zv})
			}
		}
	}
	return changes
}

// drawChanges draws a publication in one view or both: clusters with
// their endpoints put, changed or deleted, endpoints or a cluster alone,
// or zone variants (mostly of endpoints) put or deleted.
func (w *modelWorld) drawChanges(t *rapid.T) []modelChange {
	v := fmt.Sprintf("v%d", w.seq+1)
	var out []modelChange
	d := w.draft()
	for range rapid.IntRange(1, 3).Draw(t, "changes") {
		n := rapid.SampledFrom(modelNames).Draw(t, "name")
		views := w.drawViews(t)
		switch rapid.IntRange(0, 5).Draw(t, "op") {
		case 0:
			out = append(out, w.putViews(t, d, views, mCDS, n, v)...)
			out = append(out, w.putViews(t, d, views, mEDS, n, v)...)
		case 1:
			typ := mEDS
			for _, view := range views {
				if e := d[view][typ].base[n]; n == modelVariantName && e != nil && rapid.Bool().Draw(t, "variants alone") {
					// the base kept
					out = append(out, d.take(modelChange{view: view, typ: typ, name: n, e: e, variants: w.drawVariants(t, d, view, typ, v)}))
					continue
				}
				out = append(out, w.put(t, d, view, typ, n, v))
			}
		case 2:
			out = append(out, w.putViews(t, d, views, mCDS, n, v)...)
		case 3:
			for _, view := range views {
				out = append(out, d.take(modelChange{view: view, typ: mCDS, name: n}), d.take(modelChange{view: view, typ: mEDS, name: n}))
			}
		case 4, 5:
			typ := mEDS
			if rapid.IntRange(0, 3).Draw(t, "zone variant of a cluster") == 0 {
				typ = mCDS
			}
			class := rapid.SampledFrom(w.zoneChoices).Draw(t, "class")
			for _, view := range views {
				if rapid.IntRange(0, 2).Draw(t, "zone op") == 0 {
					out = append(out, d.take(modelChange{view: view, typ: typ, name: n, zone: class}))
				} else {
					out = append(out, w.putZone(t, d, view, typ, n, class, v))
				}
			}
		}
	}
	return out
}

// settle waits for every response the model expects, answering each as
// its client's mode says, then checks what each client holds.
func (w *modelWorld) settle() {
	for _, c := range w.clients {
		c.settle()
	}
	for _, c := range w.clients {
		for typ := range 2 {
			if err := c.converged(typ); err != nil {
				w.t.Fatalf("%s %s: %v", c.label, short(modelTypeURLs[typ]), err)
			}
		}
	}
}

// barrier answers everything held and makes every client swap its
// endpoints ping: the response to it comes after anything the server had
// yet to send, which the settle would then find unexpected.
func (w *modelWorld) barrier() {
	for _, c := range w.clients {
		for typ := range 2 {
			c.hold[typ] = false
			c.answer(typ, false)
		}
	}
	w.settle()
	for _, c := range w.clients {
		c.swapPing(mEDS)
	}
	w.settle()
}

// modelResponse is a response, decoded or expected.
type modelResponse struct {
	typ     int
	version string
	nonce   string
	entries []*xdscache.Entry // by name
	removed []string          // sorted
}

func (r *modelResponse) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s [", short(modelTypeURLs[r.typ]), r.version)
	for i, e := range r.entries {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s@%s", e.Name, e.Version)
	}
	b.WriteString("]")
	if len(r.removed) > 0 {
		fmt.Fprintf(&b, " removed %v", r.removed)
	}
	return b.String()
}

func sameResponse(a, b *modelResponse) bool {
	return a.typ == b.typ && a.version == b.version && slices.Equal(a.entries, b.entries) && slices.Equal(a.removed, b.removed)
}

// modelClient is one client: its stream, what it subscribes to, holds and
// answered, and the model of the server's side of its stream.
type modelClient struct {
	w     *modelWorld
	id    int
	label string // for messages: who it is and what it reads
	delta bool
	node  *core.Node
	// What it reads: its view, its class (of its node's locality, as the
	// cache admitted it) and its audience.
	view  int
	class string
	aud   xdscache.Audience

	cancel   context.CancelFunc
	sotw     discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	dstream  discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	in       chan proto.Message
	done     chan struct{}
	nodeSent bool

	// What it subscribes to: CDS may be wildcard, legacy (an empty first
	// request) or "*"; names are explicit, with one ping each.
	wildcard [2]bool
	legacy   bool
	names    [2]map[string]bool
	ping     [2]int

	// held is what it accepted; accepted is the version of the last
	// response it accepted (SotW sends it back).
	held     [2]map[string]*xdscache.Entry
	accepted [2]string
	// hold keeps the next response unanswered until an ACK or NACK action;
	// nackNext NACKs the next response when it comes.
	hold       [2]bool
	nackNext   [2]bool
	nonce      [2]string
	unanswered [2]*modelResponse
	// lastNACKed: the last response answered was NACKed; stale are the
	// names whose NACKed content the server rightly does not re-send;
	// nackedVersion is the version NACKed on this stream, which SotW must
	// not send again until the subscription changes; nacked is the content
	// NACKed on this stream, which Delta must not send again unless it is
	// subscribed to again (a response answered after a subscription change
	// may rightly be followed by one of the same version).
	lastNACKed    [2]bool
	stale         [2]map[string]bool
	nackedVersion [2]string
	nacked        [2]map[string]*xdscache.Entry
	// newest is the highest version received of each type, over streams.
	newest [2]int
	// moved are the names whose content changed for the client since it
	// was last sent them: a Delta server rightly sends such a name again
	// even when its content has come back to what the client holds or
	// NACKed (a zone or audience variant put and removed again while a
	// response awaited its answer).
	moved [2]map[string]bool
	// resubscribed are the names subscribed to again since they were last
	// received: a Delta server rightly sends them again.
	resubscribed [2]map[string]bool

	srv    [2]*modelWatch
	expect [2][]*modelResponse
}

func (w *modelWorld) newClient(t *rapid.T, id int, delta bool) *modelClient {
	c := &modelClient{w: w, id: id, delta: delta}
	c.view = rapid.IntRange(0, modelViews-1).Draw(t, "view")
	loc := rapid.SampledFrom(modelLocalities).Draw(t, "locality")
	c.node = &core.Node{Id: fmt.Sprintf("model-%d", id), Cluster: "test", UserAgentName: modelUserAgents[c.view]}
	if loc.loc != nil {
		c.node.Locality = proto.CloneOf(loc.loc) // each check's own
	}
	c.class = w.census.admit(loc.claim)
	c.aud = xdscache.Audience{Namespace: rapid.SampledFrom(modelAudiences).Draw(t, "audience")}
	c.label = fmt.Sprintf("client %d (view %d, class %q of claim %q, %v)", id, c.view, c.class, loc.claim, c.aud)
	if c.class != "" {
		w.zoneChoices = append(w.zoneChoices, c.class, c.class, c.class)
	}
	w.stats.clients++
	if c.view == 1 {
		w.stats.view1++
	}
	switch {
	case c.class == "" && loc.claim != "":
		w.stats.overflow++
		w.stats.classless++
	case c.class == "":
		w.stats.classless++
	case strings.Contains(c.class, "/"):
		w.stats.zoned++
	case c.class != loc.claim:
		w.stats.fallback++
		w.stats.regional++
	default:
		w.stats.regional++
	}
	for typ := range 2 {
		c.held[typ] = map[string]*xdscache.Entry{}
		c.names[typ] = map[string]bool{}
		c.resubscribed[typ] = map[string]bool{}
		c.moved[typ] = map[string]bool{}
		for _, n := range rapid.SliceOfDistinct(rapid.SampledFrom(modelNames), rapid.ID).Draw(t, "names") {
			c.names[typ][n] = true
		}
		c.ping[typ] = rapid.IntRange(0, 1).Draw(t, "ping")
		c.names[typ][modelPings[c.ping[typ]]] = true
	}
	if rapid.Bool().Draw(t, "wildcard CDS") {
		c.wildcard[mCDS] = true
		if c.legacy = rapid.Bool().Draw(t, "legacy wildcard"); c.legacy {
			clear(c.names[mCDS]) // its first request names nothing
		}
	}
	c.connect()
	return c
}

// cur is what of the published resources of typ the client is sent: its
// view's, of its class and what its audience may read.
func (c *modelClient) cur(typ int) map[string]*xdscache.Entry {
	return c.w.cur[c.view][typ].read(c.class, c.aud)
}

// scope is whether the client subscribes to name of typ.
func (c *modelClient) scope(typ int, name string) bool { return c.wildcard[typ] || c.names[typ][name] }

// connect opens a stream and sends its first requests as a reconnecting
// client does: SotW with the versions it holds, Delta with
// initial_resource_versions.
func (c *modelClient) connect() {
	parent := context.Background()
	if !c.aud.IsAnonymous() {
		parent = as(c.aud.Namespace)
	}
	ctx, cancel := context.WithCancel(parent)
	c.cancel = cancel
	in, done := make(chan proto.Message, 16), make(chan struct{})
	c.in, c.done = in, done
	ads := discovery.NewAggregatedDiscoveryServiceClient(c.w.conn)
	forward := func(recv func() (proto.Message, error)) {
		defer close(done)
		defer close(in)
		for {
			m, err := recv()
			if err != nil {
				return
			}
			select {
			case in <- m:
			case <-ctx.Done():
				return
			}
		}
	}
	var err error
	if c.delta {
		c.dstream, err = ads.DeltaAggregatedResources(ctx)
		if err == nil {
			s := c.dstream
			go forward(func() (proto.Message, error) { return s.Recv() })
		}
	} else {
		c.sotw, err = ads.StreamAggregatedResources(ctx)
		if err == nil {
			s := c.sotw
			go forward(func() (proto.Message, error) { return s.Recv() })
		}
	}
	if err != nil {
		c.w.t.Fatal(err)
	}
	c.nodeSent = false
	for typ := range 2 {
		c.nonce[typ], c.unanswered[typ], c.srv[typ], c.expect[typ] = "", nil, nil, nil
		c.lastNACKed[typ], c.nackedVersion[typ] = false, ""
		c.stale[typ] = map[string]bool{}
		c.nacked[typ] = map[string]*xdscache.Entry{}
	}
	for typ := range 2 {
		if c.delta {
			initial := map[string]string{}
			for n, e := range c.held[typ] {
				initial[n] = e.Version
			}
			sub := c.sortedNames(typ)
			if c.wildcard[typ] && (!c.legacy || len(sub) > 0) {
				sub = append(sub, "*")
			}
			c.sendDelta(&discovery.DeltaDiscoveryRequest{TypeUrl: modelTypeURLs[typ], ResourceNamesSubscribe: sub, InitialResourceVersions: initial})
			c.serverDelta(typ, sub, nil, initial, "")
		} else {
			c.sendSotw(typ, c.accepted[typ], "", "")
		}
	}
}

func (c *modelClient) close() {
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(modelWait):
		c.w.t.Errorf("%s: the stream's reader did not stop", c.label)
	}
}

// reconnect closes the stream and opens another. A Delta client that
// holds everything it subscribes to at the current version is owed
// nothing on its new stream, so it swaps its endpoints ping too: the
// response to that says the server has read its first requests, before a
// publication could race them (a name put and deleted meanwhile would be
// removed or not depending on which came first).
func (c *modelClient) reconnect() {
	c.w.stats.reconnects++
	c.close()
	if c.delta {
		old := modelPings[c.ping[mEDS]]
		c.ping[mEDS] = 1 - c.ping[mEDS]
		delete(c.names[mEDS], old)
		c.drop(mEDS, old)
		c.names[mEDS][modelPings[c.ping[mEDS]]] = true
	}
	c.connect()
}

func (c *modelClient) sortedNames(typ int) []string {
	return slices.Sorted(maps.Keys(c.names[typ]))
}

// sotwNames is the resource_names of a SotW request.
func (c *modelClient) sotwNames(typ int) []string {
	switch {
	case c.wildcard[typ] && c.legacy:
		return nil
	case c.wildcard[typ]:
		return append(c.sortedNames(typ), "*")
	}
	return c.sortedNames(typ)
}

// sendSotw sends a SotW request with the client's names and feeds it to
// the model of the server.
func (c *modelClient) sendSotw(typ int, version, nonce, errMsg string) {
	req := &discovery.DiscoveryRequest{TypeUrl: modelTypeURLs[typ], ResourceNames: c.sotwNames(typ), VersionInfo: version, ResponseNonce: nonce}
	if !c.nodeSent {
		req.Node, c.nodeSent = c.node, true
	}
	if errMsg != "" {
		req.ErrorDetail = &status.Status{Code: 3, Message: errMsg}
	}
	if err := c.sotw.Send(req); err != nil {
		c.w.t.Fatalf("%s: send: %v", c.label, err)
	}
	c.serverSotw(typ, req.GetResourceNames(), version, nonce)
}

func (c *modelClient) sendDelta(req *discovery.DeltaDiscoveryRequest) {
	if !c.nodeSent {
		req.Node, c.nodeSent = c.node, true
	}
	if err := c.dstream.Send(req); err != nil {
		c.w.t.Fatalf("%s: send: %v", c.label, err)
	}
}

// toggle subscribes to name or unsubscribes from it, and swaps the ping.
// The request carries the last nonce, so it also accepts a response left
// unanswered: the server then answers the change at once (the ping), and
// the test knows it was read before the next action. (A Delta change the
// server could not answer yet might race a publication: a name subscribed
// and then deleted is removed, or not, depending on which came first.)
func (c *modelClient) toggle(typ int, name string) {
	nonce := c.acceptUnanswered(typ)
	switch {
	case name == "*" && c.wildcard[typ]:
		c.wildcard[typ] = false
		c.change(typ, nil, []string{name}, nonce)
	case name == "*":
		// The server sends the whole scope again, what the client holds
		// or NACKed too.
		for n := range c.cur(typ) {
			c.resubscribed[typ][n] = true
		}
		c.wildcard[typ] = true
		c.change(typ, []string{name}, nil, nonce)
	case c.names[typ][name]:
		delete(c.names[typ], name)
		c.change(typ, nil, []string{name}, nonce)
	default:
		c.names[typ][name] = true
		c.resubscribed[typ][name] = true
		c.change(typ, []string{name}, nil, nonce)
	}
	if len(c.expect[typ]) == 0 {
		// Nothing to answer (a wildcard client's ping is in its scope
		// already): the endpoints ping, asked for after it, says the server
		// has read the change.
		c.swapPing(mEDS)
	}
}

func (c *modelClient) swapPing(typ int) {
	c.change(typ, nil, nil, c.acceptUnanswered(typ))
}

// acceptUnanswered accepts the response left unanswered, if any, and
// returns the nonce of the last response for a request to carry.
func (c *modelClient) acceptUnanswered(typ int) string {
	r := c.unanswered[typ]
	if r == nil {
		if c.delta {
			return "" // a Delta request repeats no ACK
		}
		return c.nonce[typ]
	}
	c.unanswered[typ] = nil
	c.accept(r)
	return r.nonce
}

// change sends a subscription change: sub and unsub, and the ping swapped;
// the client forgets what it no longer subscribes to.
func (c *modelClient) change(typ int, sub, unsub []string, nonce string) {
	old := modelPings[c.ping[typ]]
	c.ping[typ] = 1 - c.ping[typ]
	ping := modelPings[c.ping[typ]]
	delete(c.names[typ], old)
	c.names[typ][ping] = true
	c.resubscribed[typ][ping] = true
	for n := range c.held[typ] {
		c.drop(typ, n)
	}
	sub, unsub = append(sub, ping), append(unsub, old)
	c.nackedVersion[typ] = ""
	if c.delta {
		c.sendDelta(&discovery.DeltaDiscoveryRequest{TypeUrl: modelTypeURLs[typ], ResponseNonce: nonce,
			ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub})
		c.serverDelta(typ, sub, unsub, nil, nonce)
		return
	}
	c.sendSotw(typ, c.accepted[typ], nonce, "")
}

// drop forgets a resource the client no longer subscribes to.
func (c *modelClient) drop(typ int, name string) {
	if !c.scope(typ, name) {
		delete(c.held[typ], name)
		delete(c.stale[typ], name)
	}
}

// answer ACKs or NACKs the response left unanswered, if any.
func (c *modelClient) answer(typ int, nack bool) {
	r := c.unanswered[typ]
	if r == nil {
		return
	}
	c.unanswered[typ] = nil
	msg := ""
	if nack {
		c.w.stats.nacks++
		msg = "rejected by the model"
		c.lastNACKed[typ], c.nackedVersion[typ] = true, r.version
		for _, e := range r.entries {
			c.stale[typ][e.Name] = true
			c.nacked[typ][e.Name] = e
		}
		for _, n := range r.removed {
			c.stale[typ][n] = true
		}
	} else {
		c.w.stats.acks++
		c.accept(r)
	}
	if c.delta {
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: modelTypeURLs[typ], ResponseNonce: r.nonce}
		if nack {
			req.ErrorDetail = &status.Status{Code: 3, Message: msg}
		}
		c.sendDelta(req)
		c.serverDelta(typ, nil, nil, nil, r.nonce)
		return
	}
	c.sendSotw(typ, c.accepted[typ], r.nonce, msg)
}

// accept applies a response to what the client holds.
func (c *modelClient) accept(r *modelResponse) {
	typ := r.typ
	c.lastNACKed[typ] = false
	c.accepted[typ] = r.version
	if !c.delta && typ == mCDS {
		clear(c.held[typ])
	}
	for _, e := range r.entries {
		if c.scope(typ, e.Name) { // not unsubscribed since it was received
			c.held[typ][e.Name] = e
		}
		delete(c.stale[typ], e.Name)
	}
	for _, n := range r.removed {
		delete(c.held[typ], n)
		delete(c.stale[typ], n)
	}
}

// settle receives the responses the model expects of the client's stream.
func (c *modelClient) settle() {
	deadline := time.NewTimer(modelWait)
	defer deadline.Stop()
	for len(c.expect[mCDS])+len(c.expect[mEDS]) > 0 {
		var m proto.Message
		select {
		case got, ok := <-c.in:
			if !ok {
				c.w.t.Fatalf("%s: the stream ended while expecting %v %v", c.label, c.expect[mCDS], c.expect[mEDS])
			}
			m = got
		case <-deadline.C:
			c.w.t.Fatalf("%s: no response in %v; expected %v %v", c.label, modelWait, c.expect[mCDS], c.expect[mEDS])
		}
		r := c.decode(m)
		if err := c.check(r); err != nil {
			c.w.t.Fatalf("%s: %v: %v", c.label, r, err)
		}
		want := c.expect[r.typ]
		if len(want) == 0 {
			c.w.t.Fatalf("%s: unexpected response %v (the model expects none of this type)", c.label, r)
		}
		if !sameResponse(r, want[0]) {
			c.w.t.Fatalf("%s: got %v, the model expects %v", c.label, r, want[0])
		}
		c.expect[r.typ] = want[1:]
		c.w.stats.responses++
		c.w.stats.resources += len(r.entries)
		for _, e := range r.entries {
			if e.Visible.Restricted() && e.Name == modelVariantName {
				c.w.stats.variants++
			}
			if c.w.zoneSent[e] {
				c.w.stats.zoneVariants++
			}
		}
		c.w.stats.removals += len(r.removed)
		if c.hold[r.typ] {
			c.w.stats.heldBack++ // held: what changes meanwhile is merged into the next
		}
		c.nonce[r.typ] = r.nonce
		c.unanswered[r.typ] = r
		for _, e := range r.entries {
			delete(c.resubscribed[r.typ], e.Name)
			delete(c.moved[r.typ], e.Name)
		}
		for _, name := range r.removed {
			delete(c.moved[r.typ], name)
		}
		if !c.hold[r.typ] {
			c.answer(r.typ, c.nackNext[r.typ])
			c.nackNext[r.typ] = false
		}
	}
}

// decode reads a response into the entries the model published.
func (c *modelClient) decode(m proto.Message) *modelResponse {
	t := c.w.t
	r := &modelResponse{typ: -1}
	typeOf := func(url string) int {
		i := slices.Index(modelTypeURLs[:], url)
		if i < 0 {
			t.Fatalf("%s: a response of type %q", c.label, url)
		}
		return i
	}
	lookup := func(typeURL string, b []byte) *xdscache.Entry {
		if typeURL != modelTypeURLs[r.typ] {
			t.Fatalf("%s: a resource of type %q in a %s response", c.label, typeURL, short(modelTypeURLs[r.typ]))
		}
		e := c.w.byBytes[bytesKey(r.typ, b)]
		if e == nil {
			t.Fatalf("%s: a %s resource that was never published", c.label, short(typeURL))
		}
		return e
	}
	switch m := m.(type) {
	case *discovery.DiscoveryResponse:
		r.typ, r.version, r.nonce = typeOf(m.GetTypeUrl()), m.GetVersionInfo(), m.GetNonce()
		for _, a := range m.GetResources() {
			r.entries = append(r.entries, lookup(a.GetTypeUrl(), a.GetValue()))
		}
	case *discovery.DeltaDiscoveryResponse:
		r.typ, r.version, r.nonce = typeOf(m.GetTypeUrl()), m.GetSystemVersionInfo(), m.GetNonce()
		for _, res := range m.GetResources() {
			e := lookup(res.GetResource().GetTypeUrl(), res.GetResource().GetValue())
			if res.GetName() != e.Name || res.GetVersion() != e.Version {
				t.Fatalf("%s: %s resource %s@%s carries %s@%s", c.label, short(m.GetTypeUrl()), res.GetName(), res.GetVersion(), e.Name, e.Version)
			}
			r.entries = append(r.entries, e)
		}
		r.removed = slices.Sorted(slices.Values(m.GetRemovedResources()))
	}
	slices.SortFunc(r.entries, func(a, b *xdscache.Entry) int { return strings.Compare(a.Name, b.Name) })
	return r
}

func versionNumber(v string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(v, "v"))
	if err != nil || !strings.HasPrefix(v, "v") {
		return -1
	}
	return n
}

// check holds a response to the invariants that need no model of the
// server's stream.
func (c *modelClient) check(r *modelResponse) error {
	typ := r.typ
	all, ok := c.w.at[c.view][typ][r.version]
	if !ok {
		return fmt.Errorf("version %q is not one at which %s changed in view %d", r.version, short(modelTypeURLs[typ]), c.view)
	}
	then := all.read(c.class, c.aud) // what the client is sent of it: nothing else may be
	if n := versionNumber(r.version); n < c.newest[typ] {
		return fmt.Errorf("the version went backwards: v%d was received before", c.newest[typ])
	} else {
		c.newest[typ] = n
	}
	if !c.delta && r.version == c.nackedVersion[typ] {
		return fmt.Errorf("the NACKed version %s was sent again with no change of subscription", r.version)
	}
	for _, e := range r.entries {
		if then[e.Name] != e {
			return fmt.Errorf("%s@%s is not what %s published as %s", e.Name, e.Version, r.version, e.Name)
		}
		if !c.scope(typ, e.Name) {
			return fmt.Errorf("%s was sent though the client does not subscribe to it", e.Name)
		}
		if c.delta && c.held[typ][e.Name] == e && !c.resubscribed[typ][e.Name] && !c.moved[typ][e.Name] {
			return fmt.Errorf("%s@%s was sent again though the client holds it", e.Name, e.Version)
		}
		if c.delta && c.nacked[typ][e.Name] == e && !c.resubscribed[typ][e.Name] && !c.moved[typ][e.Name] {
			return fmt.Errorf("%s@%s was sent again though the client NACKed it", e.Name, e.Version)
		}
	}
	for _, n := range r.removed {
		if !c.scope(typ, n) {
			return fmt.Errorf("the removal of %s was sent though the client does not subscribe to it", n)
		}
		if then[n] != nil {
			return fmt.Errorf("%s was removed though it exists at %s", n, r.version)
		}
	}
	if !c.delta && typ == mCDS {
		var want []string
		for n := range then {
			if c.scope(typ, n) {
				want = append(want, n)
			}
		}
		slices.Sort(want)
		var got []string
		for _, e := range r.entries {
			got = append(got, e.Name)
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("a SotW CDS response must hold the whole subscribed state of its version: %v", want)
		}
	}
	return nil
}

// converged checks that what the client holds of typ is what the model
// says it must, unless the server is waiting for the client's answer.
func (c *modelClient) converged(typ int) error {
	if c.srv[typ] == nil || c.hold[typ] || c.unanswered[typ] != nil {
		return nil
	}
	cur, held := c.cur(typ), c.held[typ]
	for n := range held {
		if !c.scope(typ, n) {
			return fmt.Errorf("holds %s, not subscribed to", n)
		}
	}
	if !c.delta && typ == mCDS {
		if c.lastNACKed[typ] {
			return nil // it keeps what it had until clusters change again
		}
		want := map[string]*xdscache.Entry{}
		for n, e := range cur {
			if c.scope(typ, n) {
				want[n] = e
			}
		}
		if !maps.Equal(held, want) {
			return fmt.Errorf("holds %v, want the whole subscribed state %v", entryNames(held), entryNames(want))
		}
		return nil
	}
	names := maps.Clone(c.names[typ])
	if c.wildcard[typ] {
		for n := range cur {
			names[n] = true
		}
	}
	for n := range held {
		names[n] = true
	}
	for n := range names {
		if c.stale[typ][n] {
			continue // NACKed: kept as it was until it changes
		}
		e, exists := cur[n]
		h, has := held[n]
		switch {
		case exists && h != e:
			return fmt.Errorf("holds %s at %v, want %s", n, entryVersion(h), e.Version)
		case !exists && has && c.delta:
			return fmt.Errorf("holds %s, deleted", n)
		}
	}
	return nil
}

func entryVersion(e *xdscache.Entry) string {
	if e == nil {
		return "nothing"
	}
	return e.Version
}

func entryNames(m map[string]*xdscache.Entry) []string {
	var out []string
	for n, e := range m {
		out = append(out, n+"@"+e.Version)
	}
	slices.Sort(out)
	return out
}
