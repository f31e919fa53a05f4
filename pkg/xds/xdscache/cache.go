package xdscache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	gcp "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Publisher is what the control plane writes published resources to; the
// xDS server reads them through gcp.Cache. It is an interface of ours so the
// store behind it can be replaced.
type Publisher interface {
	gcp.Cache
	// Apply publishes a set of changes atomically at a new version.
	Apply(Update)
	// Resources lists what one view publishes now, by type URL, sorted by name.
	Resources(view int) map[string][]*Entry
}

// TypeOrder is the order in which changes reach a client: clusters before
// their endpoints, listeners before their routes (make before break).
var TypeOrder = []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType}

// fullState types are sent whole in SotW: a resource missing from a
// response is deleted on the client.
func fullState(typeURL string) bool {
	return typeURL == resource.ClusterType || typeURL == resource.ListenerType
}

// Entry is one resource at one version, marshalled once and shared by every
// view and every client it is sent to.
type Entry struct {
	Name     string
	Version  string
	Any      *anypb.Any
	Resource proto.Message
}

// NewEntry marshals a resource deterministically.
func NewEntry(name, version string, m proto.Message) (*Entry, error) {
	a, err := anypb.New(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", name, err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", name, err)
	}
	a.Value = b
	return &Entry{Name: name, Version: version, Any: a, Resource: m}, nil
}

// Change puts (Entry != nil) or deletes one named resource of a type in a view.
type Change struct {
	View    int
	TypeURL string
	Name    string
	Entry   *Entry
}

// Update is a set of changes published together at Version.
type Update struct {
	Version string
	Changes []Change
}

// Cache is the in-memory Publisher.
type Cache struct {
	mu      sync.Mutex
	views   []map[string]*typeState
	viewFor func(*core.Node) int
}

type typeState struct {
	typeURL   string
	version   string // the version at which any resource of this type last changed
	resources map[string]*Entry
	sotw      map[*sotwWatch]struct{}
	delta     map[*deltaWatch]struct{}
}

// New returns a cache with n views; viewFor maps a client to its view.
func New(n int, viewFor func(*core.Node) int) *Cache {
	c := &Cache{viewFor: viewFor}
	for range n {
		c.views = append(c.views, map[string]*typeState{})
	}
	return c
}

var _ Publisher = (*Cache)(nil)

func (c *Cache) typeState(view int, typeURL string) *typeState {
	ts := c.views[view][typeURL]
	if ts == nil {
		ts = &typeState{typeURL: typeURL, resources: map[string]*Entry{}, sotw: map[*sotwWatch]struct{}{}, delta: map[*deltaWatch]struct{}{}}
		c.views[view][typeURL] = ts
	}
	return ts
}

func (c *Cache) view(n *core.Node) int {
	v := c.viewFor(n)
	if v < 0 || v >= len(c.views) {
		return 0
	}
	return v
}

// Apply publishes the changes, then answers every open watch that now has
// something to send, type by type in TypeOrder.
func (c *Cache) Apply(u Update) {
	c.mu.Lock()
	defer c.mu.Unlock()
	type key struct {
		view    int
		typeURL string
	}
	touched := map[key]bool{}
	for _, ch := range u.Changes {
		ts := c.typeState(ch.View, ch.TypeURL)
		if ch.Entry == nil {
			if _, ok := ts.resources[ch.Name]; !ok {
				continue
			}
			delete(ts.resources, ch.Name)
		} else {
			ts.resources[ch.Name] = ch.Entry
		}
		touched[key{ch.View, ch.TypeURL}] = true
	}
	// The first publication publishes every type in every view, if only as
	// empty: a client waiting for its first answer (Envoy holds its start for
	// CDS and LDS) gets one even when its view has nothing of that type.
	for view := range c.views {
		for _, typeURL := range TypeOrder {
			if c.typeState(view, typeURL).version == "" {
				touched[key{view, typeURL}] = true
			}
		}
	}
	for view := range c.views {
		for _, typeURL := range c.typeOrder(view) {
			if !touched[key{view, typeURL}] {
				continue
			}
			ts := c.views[view][typeURL]
			ts.version = u.Version
			for w := range ts.sotw {
				if w.respond(ts) {
					delete(ts.sotw, w)
				}
			}
			for w := range ts.delta {
				if w.respond(ts) {
					delete(ts.delta, w)
				}
			}
		}
	}
}

// typeOrder is TypeOrder followed by any other type the view holds.
func (c *Cache) typeOrder(view int) []string {
	out := slices.Clone(TypeOrder)
	for t := range c.views[view] {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// Resources lists what one view publishes now.
func (c *Cache) Resources(view int) map[string][]*Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]*Entry{}
	for t, ts := range c.views[view] {
		list := make([]*Entry, 0, len(ts.resources))
		for _, e := range ts.resources {
			list = append(list, e)
		}
		slices.SortFunc(list, func(a, b *Entry) int { return cmp.Compare(a.Name, b.Name) })
		out[t] = list
	}
	return out
}

// CreateWatch opens a SotW watch. It answers at once when the client lacks
// something, otherwise when a later Apply gives it something.
func (c *Cache) CreateWatch(req *gcp.Request, sub gcp.Subscription, out chan gcp.Response) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.typeState(c.view(req.GetNode()), req.GetTypeUrl())
	w := &sotwWatch{req: req, sub: sub, out: out}
	if w.respond(ts) {
		return func() {}, nil
	}
	ts.sotw[w] = struct{}{}
	return func() {
		c.mu.Lock()
		delete(ts.sotw, w)
		c.mu.Unlock()
	}, nil
}

// CreateDeltaWatch opens a Delta watch, answered like CreateWatch.
func (c *Cache) CreateDeltaWatch(req *gcp.DeltaRequest, sub gcp.Subscription, out chan gcp.DeltaResponse) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.typeState(c.view(req.GetNode()), req.GetTypeUrl())
	w := &deltaWatch{req: req, sub: sub, out: out}
	if w.respond(ts) {
		return func() {}, nil
	}
	ts.delta[w] = struct{}{}
	return func() {
		c.mu.Lock()
		delete(ts.delta, w)
		c.mu.Unlock()
	}, nil
}

// Fetch answers a REST request with the current resources.
func (c *Cache) Fetch(_ context.Context, req *gcp.Request) (gcp.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.typeState(c.view(req.GetNode()), req.GetTypeUrl())
	if ts.version == "" {
		return nil, errors.New("nothing published yet")
	}
	if req.GetVersionInfo() == ts.version {
		return nil, &types.SkipFetchError{}
	}
	names := req.GetResourceNames()
	var entries []*Entry
	for _, e := range ts.resources {
		if len(names) == 0 || slices.Contains(names, e.Name) {
			entries = append(entries, e)
		}
	}
	slices.SortFunc(entries, func(a, b *Entry) int { return cmp.Compare(a.Name, b.Name) })
	return &sotwResponse{req: req, version: ts.version, entries: entries, typeURL: ts.typeURL, full: true}, nil
}

// ShortType names a type URL for people and metric labels: CDS, EDS, LDS, RDS.
func ShortType(typeURL string) string {
	switch typeURL {
	case resource.ClusterType:
		return "CDS"
	case resource.EndpointType:
		return "EDS"
	case resource.ListenerType:
		return "LDS"
	case resource.RouteType:
		return "RDS"
	}
	return typeURL
}
