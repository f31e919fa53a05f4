package server

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdstype"
)

// Client kinds.
const (
	KindEnvoy   = "envoy"
	KindGRPC    = "grpc"
	KindUnknown = "unknown"
)

// ClientKind tells an Envoy from a proxyless gRPC client by what the node says.
func ClientKind(n *core.Node) string {
	ua := strings.ToLower(n.GetUserAgentName())
	switch {
	case ua == "envoy":
		return KindEnvoy
	case strings.HasPrefix(ua, "grpc"):
		return KindGRPC
	case slices.Contains(n.GetClientFeatures(), translate.FeatureNoOverprovisioning):
		return KindGRPC
	}
	return KindUnknown
}

// Client is one connected xDS stream as /debug/clients shows it.
type Client struct {
	Stream    int64  `json:"stream"`
	Protocol  string `json:"protocol"` // sotw or delta
	NodeID    string `json:"nodeId"`
	Cluster   string `json:"cluster"`
	UserAgent string `json:"userAgent"`
	Kind      string `json:"kind"`
	Rendering string `json:"rendering"`
	// Zone is the locality class the client is placed in: "region/zone", or
	// the region alone when there is no zone (xdscache.ClassKey). ZoneFrom
	// says what decided it: "identity" (its proven identity names its
	// locality: a pod-bound token's pod's node) or "node" (its node's
	// claim, where the identity names none). ClaimedZone is the node's
	// claim when the identity placed the client elsewhere.
	Zone        string    `json:"zone,omitempty"`
	ZoneFrom    string    `json:"zoneFrom,omitempty"`
	ClaimedZone string    `json:"claimedZone,omitempty"`
	placement   placement // where its identity places it
	proof       *proven   // its identity as last proven (nil: anonymous)
	// Class is the class whose variants the cache sends it: Zone, or its
	// region when zone classes are over their bound (ClassNote says so), or
	// none when region classes are over theirs too.
	Class     string `json:"class,omitempty"`
	ClassNote string `json:"classNote,omitempty"`
	// DemandWeight is what the client counts for in a Balanced upstream's
	// demand (node metadata poise.dev/demand-weight, else 1), within what
	// its identity is granted.
	DemandWeight uint64 `json:"demandWeight,omitempty"`
	DemandNote   string `json:"demandNote,omitempty"`
	demandCap    uint64 // what its identity is granted (0: anonymous, not capped)
	// Identity is who the client proved to be; nil when anonymous.
	Identity *ClientIdentity `json:"identity,omitempty"`
	// Audience is what the client may read: the namespace its identity
	// proves, or "anonymous" (only what is exported to every namespace).
	Audience   string `json:"audience"`
	classified bool
	stream     *xdscache.Stream      // what the cache serves it, for /debug/config
	Features   []string              `json:"features"`
	Connected  time.Time             `json:"connected"`
	Types      map[string]*TypeState `json:"types"`
	// Withheld is what it asks for and is not sent, and why (hidden.go).
	Withheld *Withheld `json:"withheld,omitempty"`
	// requested is when the stream last asked for each type (by
	// xdstype index): a response to a new subscription converges from
	// the request, not from the publication of a version it predates.
	requested [xdstype.Count]time.Time
}

// TypeState is what one client was sent and answered for one xDS type.
type TypeState struct {
	LastSentVersion  string `json:"lastSentVersion"`
	LastSentNonce    string `json:"lastSentNonce"`
	LastSentCount    int    `json:"lastSentResources"`
	LastAckedVersion string `json:"lastAckedVersion"`
	Pushes           uint64 `json:"pushes"`
	NACKs            uint64 `json:"nacks"`
	LastNACK         *NACK  `json:"lastNack,omitempty"`
	// State is how the client stands on the type now (Synced, Stale,
	// NACKed or NotSent) and CurrentVersion the version of the type its
	// view is at: List fills them in, from the registry and the cache.
	State          string `json:"state"`
	CurrentVersion string `json:"currentVersion"`
	// answered: the client ACKed or NACKed the last response.
	answered bool
	// The NACKs of this type on this stream are logged at most once per
	// nackLogEvery; unlogged counts the others since the last line.
	lastNACKLog time.Time
	unlogged    int
	// pending holds, for each version sent since the last ACK, when its
	// convergence began (see response): the next ACK ends them all, since
	// accepting a version accepts the changes of those it supersedes.
	pending []time.Time
	// sent and removed are the last response's resources (shared with the
	// cache: never modified); rejecting are the resources whose last
	// response to this stream was NACKed, with the client's reason.
	sent      []*xdscache.Entry
	removed   []string
	rejecting map[string]string
}

// maxPending bounds TypeState.pending: a client that never ACKs while
// versions keep coming holds at most this many. When it is full the newest
// replaces the last, so the oldest (the slowest to converge) are kept.
const maxPending = 16

// A client's NACK text is its own: it is kept and logged only up to
// maxNACKDetail bytes, and a stream's NACKs of one type are logged at most
// once per nackLogEvery (each is still counted and the last one kept), so
// no client can fill the log.
const (
	maxNACKDetail = 1024
	nackLogEvery  = 10 * time.Second
)

// maxNodeField bounds what /debug/clients and the log keep of a node's
// id, cluster and user agent.
const maxNodeField = 256

// maxNodeFeatures bounds the client features it keeps.
const maxNodeFeatures = 32

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d bytes more)", len(s)-cut)
}

// NACK is a rejected response and the client's reason.
type NACK struct {
	Version string    `json:"version"` // the version the client rejected
	Nonce   string    `json:"nonce"`
	Error   string    `json:"error"`
	At      time.Time `json:"at"`
}

// How a client stands on one type it asked for (TypeState.State), as
// `controlplane status` shows it.
const (
	// Synced: it ACKed the last response it was sent, and no change in
	// its scope waits to be sent.
	Synced = "SYNCED"
	// Stale: the last response waits for its answer, or a change in its
	// scope waits to be sent.
	Stale = "STALE"
	// NACKed: it rejected the last response it was sent and keeps what it
	// accepted before.
	NACKed = "NACKED"
	// NotSent: it asked for the type and has been sent nothing of it yet.
	NotSent = "NOT SENT"
)

// state is how a client stands on a type: ts is what the registry holds
// of it (nil: nothing sent), behind what the cache says.
func state(ts *TypeState, behind bool) string {
	switch {
	case ts == nil || ts.LastSentNonce == "":
		return NotSent
	case ts.answered && ts.LastNACK != nil && ts.LastNACK.Nonce == ts.LastSentNonce:
		return NACKed
	case !ts.answered || behind:
		return Stale
	}
	return Synced
}

// Clients is the registry of connected clients, fed by the xDS server.
type Clients struct {
	mu sync.Mutex
	// byType are the metrics of each type (by xdstype index), looked
	// up once: a label lookup per response would hash the label each time.
	byType [xdstype.Count]typeMetrics
	// SotW and Delta streams are numbered independently, each from 1, so a
	// stream is known by its protocol and id.
	streams map[streamKey]*Client
	metrics *metrics.XDS
	log     *slog.Logger
	now     func() time.Time
	// rejected indexes the streams whose last response with a resource
	// they were sent was NACKed, by resource name, with the reason;
	// rejectedChanged is closed when it changes.
	rejected        map[string]map[streamKey]string
	rejectedChanged chan struct{}
	// refusals bound the log of identity refusals, by reason; principals
	// count the open streams of each principal with a series of its own.
	refusals   map[identity.Reason]*refusalLog
	principals map[string]int
	// clientLog bounds the log of connects and disconnects.
	clientLog clientLog
}

type streamKey struct {
	protocol string
	id       int64
}

type typeMetrics struct {
	pushes, nacks                   prometheus.Counter
	convergence, pushTime, sendTime prometheus.Observer
}

// NewClients returns an empty registry recording into m (which may be nil).
func NewClients(m *metrics.XDS, log *slog.Logger) *Clients {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Clients{streams: map[streamKey]*Client{}, metrics: m, log: log, now: time.Now,
		rejected: map[string]map[streamKey]string{}, rejectedChanged: make(chan struct{}),
		refusals: map[identity.Reason]*refusalLog{}, principals: map[string]int{}, clientLog: clientLog{every: clientLogEvery}}
	if m != nil {
		for t, typ := range xdstype.All() {
			short := typ.Short
			c.byType[t] = typeMetrics{pushes: m.Pushes.WithLabelValues(short), nacks: m.NACKs.WithLabelValues(short),
				convergence: m.Convergence.WithLabelValues(short), pushTime: m.PushDuration.WithLabelValues(short),
				sendTime: m.SendDuration.WithLabelValues(short)}
		}
	}
	return c
}

// sent records the time a response took: push from the stream's wake-up
// to the response handed to gRPC, send the handing alone.
func (c *Clients) sent(typeURL string, push, send time.Duration) {
	if t := xdstype.Index(typeURL); c.metrics != nil && t >= 0 {
		c.byType[t].pushTime.Observe(push.Seconds())
		c.byType[t].sendTime.Observe(send.Seconds())
	}
}

// List returns a copy of every connected client, by stream id.
func (c *Clients) List() []Client {
	c.mu.Lock()
	out := make([]Client, 0, len(c.streams))
	for _, cl := range c.streams {
		cp := *cl
		cp.Types = map[string]*TypeState{}
		for t, ts := range cl.Types {
			s := *ts
			if ts.LastNACK != nil {
				n := *ts.LastNACK
				s.LastNACK = &n
			}
			s.pending = nil // the registry's own
			cp.Types[t] = &s
		}
		cp.Features = slices.Clone(cl.Features)
		if cl.Identity != nil {
			id := *cl.Identity
			if cl.proof != nil {
				id.Expires = cl.proof.identity().Expires
			}
			cp.Identity = &id
		}
		out = append(out, cp)
	}
	c.mu.Unlock()
	// the class is the cache's, asked outside the registry's lock as the
	// server does: a listing costs the request path nothing
	for i := range out {
		if st := out[i].stream; st != nil {
			class, how, demand := st.Class()
			out[i].Class, out[i].DemandWeight = class, demand
			if how != xdscache.Admitted {
				out[i].ClassNote = how.String()
			}
			out[i].Withheld = withheldOf(st)
			sync, watched := st.Sync()
			for t, typ := range xdstype.All() {
				if !watched[t] {
					continue
				}
				ts := out[i].Types[typ.Short]
				if ts == nil {
					ts = &TypeState{}
					out[i].Types[typ.Short] = ts
				}
				ts.State, ts.CurrentVersion = state(ts, sync[t].Behind), sync[t].Current
			}
		}
	}
	slices.SortFunc(out, func(a, b Client) int {
		if a.Protocol != b.Protocol {
			return strings.Compare(a.Protocol, b.Protocol)
		}
		return cmp.Compare(a.Stream, b.Stream)
	})
	return out
}

// NACKCount is the number of NACKs received for a type across all streams
// since they connected.
func (c *Clients) NACKCount(typeURL string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n uint64
	for _, cl := range c.streams {
		if ts := cl.Types[xdstype.Short(typeURL)]; ts != nil {
			n += ts.NACKs
		}
	}
	return n
}

// open registers stream k, whose cache side is st (nil in tests that
// never ask for its class or what it is served).
func (c *Clients) open(k streamKey, st *xdscache.Stream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := &Client{Stream: k.id, Protocol: k.protocol, Kind: KindUnknown, Connected: c.now(), Types: map[string]*TypeState{}, stream: st}
	if st != nil {
		cl.Audience = st.Audience().String()
	}
	c.streams[k] = cl
	c.gauge(KindUnknown, 1)
}

func (c *Clients) closed(k streamKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.streams[k]; ok {
		c.gauge(cl.Kind, -1)
		c.logDisconnected(cl)
		delete(c.streams, k)
		changed := false
		for _, ts := range cl.Types {
			for name := range ts.rejecting {
				changed = c.unreject(name, k) || changed
			}
		}
		if changed {
			c.signalRejected()
		}
	}
}

// Rejection is how this replica's clients answer the current version of a
// resource: how many streams rejected the last response that carried it,
// and the reason of the lowest-numbered of them.
type Rejection struct {
	Streams int
	Reason  string
}

// Rejected says how many connected streams reject a resource now: their
// last response carrying it was NACKed and no later one carrying it was
// ACKed. The zero Rejection means none.
func (c *Clients) Rejected(name string) Rejection {
	c.mu.Lock()
	defer c.mu.Unlock()
	by := c.rejected[name]
	if len(by) == 0 {
		return Rejection{}
	}
	first := streamKey{}
	for k := range by {
		if first.protocol == "" || k.protocol < first.protocol || (k.protocol == first.protocol && k.id < first.id) {
			first = k
		}
	}
	return Rejection{Streams: len(by), Reason: by[first]}
}

// RejectedChanged is closed the next time what Rejected says of any
// resource changes.
func (c *Clients) RejectedChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rejectedChanged
}

// signalRejected wakes RejectedChanged's waiters; c.mu is held.
func (c *Clients) signalRejected() {
	close(c.rejectedChanged)
	c.rejectedChanged = make(chan struct{})
}

// unreject forgets that stream k rejects name; c.mu is held.
func (c *Clients) unreject(name string, k streamKey) bool {
	by, ok := c.rejected[name]
	if !ok {
		return false
	}
	if _, ok := by[k]; !ok {
		return false
	}
	delete(by, k)
	if len(by) == 0 {
		delete(c.rejected, name)
	}
	return true
}

func (c *Clients) gauge(kind string, delta float64) {
	if c.metrics != nil {
		c.metrics.ConnectedClients.WithLabelValues(kind).Add(delta)
	}
}

// identify records the node on a stream's first request that carries it.
func (c *Clients) identify(cl *Client, n *core.Node) {
	if n == nil || cl.NodeID != "" || n.GetId() == "" {
		return
	}
	kind := ClientKind(n)
	if kind != cl.Kind {
		c.gauge(cl.Kind, -1)
		c.gauge(kind, 1)
	}
	cl.NodeID, cl.Cluster, cl.UserAgent, cl.Kind = truncate(n.GetId(), maxNodeField), truncate(n.GetCluster(), maxNodeField),
		truncate(n.GetUserAgentName(), maxNodeField), kind
	cl.placeZone(n)
	features := n.GetClientFeatures()
	cl.Features = make([]string, 0, min(len(features), maxNodeFeatures))
	for _, f := range features[:min(len(features), maxNodeFeatures)] {
		cl.Features = append(cl.Features, truncate(f, maxNodeField))
	}
	cl.Rendering = translate.RenderingFor(n).String()
	if cl.Identity != nil {
		if ns := claimedNamespace(n); ns != "" && ns != cl.Identity.namespace {
			cl.Identity.ClaimedNamespace = truncate(ns, maxNodeField)
		}
	}
	if w, valid := DemandWeight(n); !valid {
		cl.DemandNote = fmt.Sprintf("metadata %s is not an integer 1..%d; counted as 1", DemandWeightKey, affinity.MaxDemandWeight)
	} else if cl.demandCap > 0 && w > cl.demandCap {
		cl.DemandNote = fmt.Sprintf("metadata %s claims %d; capped at %d, the demand its identity is granted", DemandWeightKey, w, cl.demandCap)
	}
	c.logConnected(cl)
}

// Where a client's zone comes from (Client.ZoneFrom).
const (
	ZoneFromIdentity = "identity"
	ZoneFromNode     = "node"
)

// placeZone records the client's zone, where it comes from, and the node's
// claim when the identity placed it elsewhere.
func (cl *Client) placeZone(n *core.Node) {
	claimed := truncate(xdscache.ZoneKey(n), maxNodeField)
	switch {
	case cl.placement.proven:
		cl.Zone, cl.ZoneFrom = truncate(cl.placement.class(n), maxNodeField), ZoneFromIdentity
		if claimed != cl.Zone {
			cl.ClaimedZone = claimed
		}
	case claimed != "":
		cl.Zone, cl.ZoneFrom = claimed, ZoneFromNode
	}
}

// capDemand records the demand weight the client of stream k is granted
// (0: not capped), for DemandNote.
func (c *Clients) capDemand(k streamKey, max uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.streams[k]; cl != nil {
		cl.demandCap = max
	}
}

func (cl *Client) typeState(typeURL string) *TypeState {
	t := xdstype.Short(typeURL)
	ts := cl.Types[t]
	if ts == nil {
		ts = &TypeState{}
		cl.Types[t] = ts
	}
	return ts
}

// sotwRequest records a SotW request and returns its version_info as a
// string: the version last sent for the type when it is that one (an ACK),
// so an ACK allocates nothing for it.
func (c *Clients) sotwRequest(k streamKey, n *core.Node, typeURL string, version []byte, nonce, errDetail string, isNACK bool) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.streams[k]
	if cl == nil {
		return string(version)
	}
	var v string
	if ts := cl.Types[xdstype.Short(typeURL)]; ts != nil && string(version) == ts.LastSentVersion {
		v = ts.LastSentVersion
	} else {
		v = string(version)
	}
	c.record(cl, n, typeURL, nonce, errDetail, isNACK)
	return v
}

// deltaRequest records a Delta request. It names no version: an ACK
// accepts the one sent with its nonce; a NACK keeps the last accepted one.
func (c *Clients) deltaRequest(k streamKey, n *core.Node, typeURL, nonce, errDetail string, isNACK bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.streams[k]; cl != nil {
		c.record(cl, n, typeURL, nonce, errDetail, isNACK)
	}
}

// record records an ACK or a NACK; c.mu is held. A NACK of the last
// response sent is counted and logged (within bounds) with the client's
// error detail, and its resources count as rejected by the stream until a
// later response carrying them is ACKed (Rejected); the cache does not
// re-send the rejected version. A NACK
// whose nonce is not the last one sent answers a response the client has
// since been sent a newer one for, or none at all: like the cache, the
// registry ignores it, so a client cannot make it count or log responses
// the server never sent.
func (c *Clients) record(cl *Client, n *core.Node, typeURL, nonce, errDetail string, isNACK bool) {
	c.identify(cl, n)
	t := xdstype.Index(typeURL)
	if t >= 0 {
		cl.requested[t] = c.now()
	}
	if nonce == "" {
		return // a first request: neither ACK nor NACK
	}
	short := xdstype.Short(typeURL)
	ts := cl.Types[short]
	if ts == nil || nonce != ts.LastSentNonce {
		return
	}
	ts.answered = true
	if isNACK {
		now := c.now()
		detail := truncate(errDetail, maxNACKDetail)
		ts.NACKs++
		ts.LastNACK = &NACK{Version: ts.LastSentVersion, Nonce: nonce, Error: detail, At: now}
		c.rejectSent(cl, ts, detail)
		if c.metrics != nil && t >= 0 {
			c.byType[t].nacks.Inc()
		}
		if !ts.lastNACKLog.IsZero() && now.Sub(ts.lastNACKLog) < nackLogEvery {
			ts.unlogged++
			return
		}
		c.log.Warn("xDS client rejected a response (NACK); it keeps its last accepted config",
			"node", cl.NodeID, "kind", cl.Kind, "type", short, "rejectedVersion", ts.LastSentVersion,
			"acceptedVersion", ts.LastAckedVersion, "error", detail, "nacksNotLoggedSinceLastLine", ts.unlogged)
		ts.lastNACKLog, ts.unlogged = now, 0
		return
	}
	ts.LastAckedVersion = ts.LastSentVersion
	if len(ts.pending) > 0 && t >= 0 {
		acked := c.now()
		for _, began := range ts.pending {
			c.byType[t].convergence.Observe(acked.Sub(began).Seconds())
		}
		ts.pending = ts.pending[:0]
	}
	if len(ts.rejecting) > 0 {
		c.acceptSent(cl, ts)
	}
}

// rejectSent records that stream cl rejects every resource of its last
// response; c.mu is held.
func (c *Clients) rejectSent(cl *Client, ts *TypeState, detail string) {
	if len(ts.sent) == 0 {
		return
	}
	if ts.rejecting == nil {
		ts.rejecting = map[string]string{}
	}
	k := streamKey{cl.Protocol, cl.Stream}
	for _, e := range ts.sent {
		ts.rejecting[e.Name] = detail
		by := c.rejected[e.Name]
		if by == nil {
			by = map[streamKey]string{}
			c.rejected[e.Name] = by
		}
		by[k] = detail
	}
	c.signalRejected()
}

// acceptSent records that stream cl accepts the resources of its last
// response, and no longer has those it removed; c.mu is held.
func (c *Clients) acceptSent(cl *Client, ts *TypeState) {
	k := streamKey{cl.Protocol, cl.Stream}
	changed := false
	for _, e := range ts.sent {
		if _, ok := ts.rejecting[e.Name]; ok {
			delete(ts.rejecting, e.Name)
			changed = c.unreject(e.Name, k) || changed
		}
	}
	for _, name := range ts.removed {
		if _, ok := ts.rejecting[name]; ok {
			delete(ts.rejecting, name)
			changed = c.unreject(name, k) || changed
		}
	}
	if changed {
		c.signalRejected()
	}
}

// response records a response about to be sent: its version, nonce and
// resources (entries, and the names a delta response removes). published
// is when its version was applied to the cache (zero when unknown); a
// version the stream has not been sent before begins to converge then, or
// at the stream's last request of the type when that is later (a new
// subscription is answered with whatever version is current, however old).
func (c *Clients) response(k streamKey, typeURL, version, nonce string, entries []*xdscache.Entry, removed []string, published time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.streams[k]
	if cl == nil {
		return
	}
	ts := cl.typeState(typeURL)
	t := xdstype.Index(typeURL)
	if c.metrics != nil && t >= 0 && !published.IsZero() && version != ts.LastSentVersion && version != ts.LastAckedVersion {
		began := published
		if r := cl.requested[t]; r.After(began) {
			began = r
		}
		if len(ts.pending) < maxPending {
			ts.pending = append(ts.pending, began)
		} else {
			ts.pending[maxPending-1] = began
		}
	}
	ts.LastSentVersion, ts.LastSentNonce, ts.LastSentCount = version, nonce, len(entries)+len(removed)
	ts.sent, ts.removed, ts.answered = entries, removed, false
	ts.Pushes++
	if c.metrics != nil && t >= 0 {
		c.byType[t].pushes.Inc()
	}
}

// ClientServing is what one stream of a node is served now, by short type
// (CDS, EDS, LDS, RDS): `controlplane proxy-config` shows it.
type ClientServing struct {
	Stream    int64                  `json:"stream"`
	Protocol  string                 `json:"protocol"`
	NodeID    string                 `json:"nodeId"`
	Kind      string                 `json:"kind"`
	Rendering string                 `json:"rendering"`
	Class     string                 `json:"class,omitempty"`
	ClassNote string                 `json:"classNote,omitempty"`
	Types     map[string]ServingType `json:"-"`
}

// ServingType is what a stream is served of one type, and how far the
// client has taken it.
type ServingType struct {
	xdscache.ServingType
	// AckedVersion is the version the client last ACKed, State how it
	// stands on the type (as TypeState.State).
	AckedVersion string
	State        string
	// NotAcked names the listed resources the client has not ACKed in
	// their current content: not sent yet, or sent and awaiting its
	// answer. Rejected names those whose last response it NACKed, with its
	// error: it keeps what it accepted before.
	NotAcked map[string]bool
	Rejected map[string]string
}

// Serving lists what every stream of node is served now, at most limit
// resources of each type, only those match accepts when it is set; streams
// in (protocol, id) order.
func (c *Clients) Serving(node string, limit int, match func(name string) bool) []ClientServing {
	c.mu.Lock()
	var out []ClientServing
	var streams []*xdscache.Stream
	for _, cl := range c.streams {
		if cl.NodeID != node || cl.stream == nil {
			continue
		}
		out = append(out, ClientServing{Stream: cl.Stream, Protocol: cl.Protocol, NodeID: cl.NodeID, Kind: cl.Kind,
			Rendering: cl.Rendering})
		streams = append(streams, cl.stream)
	}
	c.mu.Unlock()
	// the cache is asked outside the registry's lock, as the server does
	for i, st := range streams {
		class, how, _ := st.Class()
		out[i].Class = class
		if how != xdscache.Admitted {
			out[i].ClassNote = how.String()
		}
		out[i].Types = map[string]ServingType{}
		for url, t := range st.Serving(limit, match) {
			out[i].Types[xdstype.Short(url)] = ServingType{ServingType: t}
		}
	}
	// then what the client answered, for the resources listed
	c.mu.Lock()
	for i := range out {
		cl := c.streams[streamKey{out[i].Protocol, out[i].Stream}]
		for short, t := range out[i].Types {
			var ts *TypeState
			if cl != nil {
				ts = cl.Types[short]
			}
			out[i].Types[short] = annotate(t, ts)
		}
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b ClientServing) int {
		return cmp.Or(strings.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Stream, b.Stream))
	})
	return out
}

// annotate marks what of t the client has not ACKed or has rejected, from
// ts, what the registry holds of the type (nil: nothing sent); c.mu is held.
func annotate(t ServingType, ts *TypeState) ServingType {
	t.State = state(ts, t.Behind)
	t.NotAcked, t.Rejected = map[string]bool{}, map[string]string{}
	for _, n := range t.Unsent {
		t.NotAcked[n] = true
	}
	if ts == nil {
		for _, e := range t.Entries {
			t.NotAcked[e.Name] = true
		}
		return t
	}
	t.AckedVersion = ts.LastAckedVersion
	var inFlight map[string]bool
	if !ts.answered {
		inFlight = make(map[string]bool, len(ts.sent))
		for _, e := range ts.sent {
			inFlight[e.Name] = true
		}
	}
	for _, e := range t.Entries {
		if why, ok := ts.rejecting[e.Name]; ok {
			t.Rejected[e.Name] = why
		}
		if inFlight[e.Name] {
			t.NotAcked[e.Name] = true
		}
	}
	return t
}
