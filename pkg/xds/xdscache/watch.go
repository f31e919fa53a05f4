package xdscache

import (
	"cmp"
	"context"
	"slices"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	gcp "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// A watch answers at most once; the server opens a new one with the
// client's next request. What the client holds is the subscription's
// returned-resources map, which the server keeps per stream and type: a
// response updates it when it is actually sent, so a response the server
// drops never counts as delivered.

type sotwWatch struct {
	req *gcp.Request
	sub gcp.Subscription
	out chan gcp.Response
}

// respond sends what the client lacks, if anything, and reports whether it did.
// A NACK leaves the rejected versions in the returned map, so the same
// content is not sent again until it changes.
func (w *sotwWatch) respond(ts *typeState) bool {
	if ts.version == "" {
		return false // nothing published yet
	}
	returned := w.sub.ReturnedResources()
	var scope, changed []*Entry
	consider := func(e *Entry) {
		scope = append(scope, e)
		if returned[e.Name] != e.Version {
			changed = append(changed, e)
		}
	}
	if w.sub.IsWildcard() {
		for _, e := range ts.resources {
			consider(e)
		}
	} else {
		for name := range w.sub.SubscribedResources() {
			if e := ts.resources[name]; e != nil {
				consider(e)
			}
		}
	}
	send := changed
	if fullState(ts.typeURL) {
		send = scope
		gone := false
		for name := range returned {
			if ts.resources[name] == nil {
				gone = true
				break
			}
		}
		// A client that holds nothing and for which nothing exists still
		// needs an (empty) answer to finish starting; a NACK never gets one.
		first := len(scope) == 0 && len(returned) == 0 && w.req.GetErrorDetail() == nil && w.req.GetVersionInfo() != ts.version
		if len(changed) == 0 && !gone && !first {
			return false
		}
	} else if len(changed) == 0 {
		return false
	}
	sortEntries(send)
	w.out <- &sotwResponse{req: w.req, version: ts.version, entries: send, typeURL: ts.typeURL, full: fullState(ts.typeURL), returned: returned}
	return true
}

func sortEntries(es []*Entry) {
	slices.SortFunc(es, func(a, b *Entry) int { return cmp.Compare(a.Name, b.Name) })
}

type sotwResponse struct {
	req      *gcp.Request
	version  string
	typeURL  string
	entries  []*Entry
	full     bool
	returned map[string]string
}

// GetDiscoveryResponse builds the envelope; the resources inside are the
// shared, already marshalled Anys.
func (r *sotwResponse) GetDiscoveryResponse() (*discovery.DiscoveryResponse, error) {
	out := &discovery.DiscoveryResponse{VersionInfo: r.version, TypeUrl: r.typeURL}
	out.Resources = make([]*anypb.Any, len(r.entries))
	for i, e := range r.entries {
		out.Resources[i] = e.Any
	}
	return out, nil
}

func (r *sotwResponse) GetRequest() *discovery.DiscoveryRequest { return r.req }
func (r *sotwResponse) GetVersion() (string, error)             { return r.version, nil }
func (r *sotwResponse) GetResponseVersion() string              { return r.version }
func (r *sotwResponse) GetContext() context.Context             { return context.Background() }

// GetReturnedResources is called by the server when it sends the response.
func (r *sotwResponse) GetReturnedResources() map[string]string {
	if r.full || r.returned == nil {
		m := make(map[string]string, len(r.entries))
		for _, e := range r.entries {
			m[e.Name] = e.Version
		}
		return m
	}
	for _, e := range r.entries {
		r.returned[e.Name] = e.Version
	}
	return r.returned
}

type deltaWatch struct {
	req *gcp.DeltaRequest
	sub gcp.Subscription
	out chan gcp.DeltaResponse
}

func (w *deltaWatch) respond(ts *typeState) bool {
	if ts.version == "" {
		return false
	}
	returned := w.sub.ReturnedResources()
	var updates []*Entry
	var removed []string
	if w.sub.IsWildcard() {
		for _, e := range ts.resources {
			if returned[e.Name] != e.Version {
				updates = append(updates, e)
			}
		}
		for name := range returned {
			if ts.resources[name] == nil {
				removed = append(removed, name)
			}
		}
	} else {
		for name := range w.sub.SubscribedResources() {
			e := ts.resources[name]
			switch {
			case e != nil && returned[e.Name] != e.Version:
				updates = append(updates, e)
			case e == nil && returned[name] != "":
				removed = append(removed, name)
			}
		}
	}
	first := w.req.GetResponseNonce() == "" && len(returned) == 0
	if len(updates) == 0 && len(removed) == 0 && !first {
		return false
	}
	sortEntries(updates)
	slices.Sort(removed)
	w.out <- &deltaResponse{req: w.req, version: ts.version, typeURL: ts.typeURL, updates: updates, removed: removed, returned: returned}
	return true
}

type deltaResponse struct {
	req      *gcp.DeltaRequest
	version  string
	typeURL  string
	updates  []*Entry
	removed  []string
	returned map[string]string
}

func (r *deltaResponse) GetDeltaDiscoveryResponse() (*discovery.DeltaDiscoveryResponse, error) {
	out := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: r.version, TypeUrl: r.typeURL, RemovedResources: r.removed}
	out.Resources = make([]*discovery.Resource, len(r.updates))
	for i, e := range r.updates {
		out.Resources[i] = &discovery.Resource{Name: e.Name, Version: e.Version, Resource: e.Any}
	}
	return out, nil
}

func (r *deltaResponse) GetDeltaRequest() *discovery.DeltaDiscoveryRequest { return r.req }
func (r *deltaResponse) GetSystemVersion() (string, error)                 { return r.version, nil }
func (r *deltaResponse) GetResponseVersion() string                        { return r.version }
func (r *deltaResponse) GetContext() context.Context                       { return context.Background() }
func (r *deltaResponse) GetNextVersionMap() map[string]string              { return r.GetReturnedResources() }

// GetReturnedResources is called by the server when it sends the response.
func (r *deltaResponse) GetReturnedResources() map[string]string {
	m := r.returned
	if m == nil {
		m = map[string]string{}
	}
	for _, e := range r.updates {
		m[e.Name] = e.Version
	}
	for _, name := range r.removed {
		delete(m, name)
	}
	return m
}
