package explain

import (
	"fmt"
	"net/netip"
	"strings"

	"poise.dev/poise/pkg/topology"
)

// Bounds of a key question, from the CLI or the admin port.
const (
	// MaxKeyLen is the longest key, header, cookie or parameter value.
	MaxKeyLen = 8192
	// MaxKeyQuestions is the most keys, headers, cookies and parameters one
	// question names.
	MaxKeyQuestions = 1000
)

// KeyQuery is a question about where requests go: one request per Keys
// item (the value of the upstream's first key source), and one request of
// all Headers, Cookies and Query items (NAME=VALUE) and SourceIP together.
// RingCap is the gRPC clients' cap on their ring, 0 for their default.
type KeyQuery struct {
	Keys                    []string
	Headers, Cookies, Query []string
	SourceIP                string
	RingCap                 uint64
}

// ExplainKeys answers q for upstream k of snap: each client's table and
// each request's pick in it. A *KeyError is a question the upstream cannot
// answer (no requestAffinity, a malformed item); other errors are the
// published endpoints' (a client would refuse them).
func ExplainKeys(snap *topology.Snapshot, k topology.Key, q KeyQuery) (KeyReport, []*KeyClient, error) {
	u := snap.Upstream(k)
	if u == nil {
		return KeyReport{}, nil, &KeyError{Msg: fmt.Sprintf("no upstream %s in revision %d", k, snap.Revision)}
	}
	var first *topology.RequestKey
	if ra := u.Upstream.RequestAffinity; ra != nil && len(ra.Keys) > 0 {
		first = &ra.Keys[0]
	}
	reqs, names, err := q.requests(first)
	if err != nil {
		return KeyReport{}, nil, err
	}
	clients, err := KeyTables(u, q.RingCap)
	if err != nil {
		return KeyReport{}, nil, fmt.Errorf("upstream %s: %w", k, err)
	}
	rep := NewKeyReport(snap.Revision, u, clients)
	for i, r := range reqs {
		a := KeyAnswer{Request: names[i]}
		for _, c := range clients {
			a.Picks = append(a.Picks, c.Pick(r))
		}
		rep.Requests = append(rep.Requests, a)
	}
	return rep, clients, nil
}

// requests are the requests q describes, and how each is named.
func (q KeyQuery) requests(first *topology.RequestKey) ([]KeyRequest, []string, error) {
	if n := len(q.Keys) + len(q.Headers) + len(q.Cookies) + len(q.Query); n > MaxKeyQuestions {
		return nil, nil, &KeyError{Msg: fmt.Sprintf("%d keys, headers, cookies and parameters: at most %d (explain --keys takes a file)", n, MaxKeyQuestions)}
	}
	var reqs []KeyRequest
	var names []string
	for _, v := range q.Keys {
		r, err := FirstSourceRequest(first, v)
		if err != nil {
			return nil, nil, &KeyError{Msg: fmt.Sprintf("key %q: %v", v, err)}
		}
		reqs, names = append(reqs, r), append(names, fmt.Sprintf("%q", v))
	}
	if len(q.Headers)+len(q.Cookies)+len(q.Query) == 0 && q.SourceIP == "" {
		return reqs, names, nil
	}
	r := KeyRequest{Headers: map[string]string{}, Cookies: map[string]string{}, Query: map[string]string{}}
	var parts []string
	for _, f := range []struct {
		what  string
		items []string
		into  map[string]string
		lower bool
	}{{"header", q.Headers, r.Headers, true}, {"cookie", q.Cookies, r.Cookies, false}, {"query", q.Query, r.Query, false}} {
		for _, it := range f.items {
			name, value, ok := strings.Cut(it, "=")
			if !ok || name == "" || len(value) > MaxKeyLen {
				return nil, nil, &KeyError{Msg: fmt.Sprintf("%s %q: want NAME=VALUE, the value at most %d bytes", f.what, it, MaxKeyLen)}
			}
			if f.lower {
				name = strings.ToLower(name)
			}
			f.into[name] = value
			parts = append(parts, fmt.Sprintf("%s %s=%q", f.what, name, value))
		}
	}
	if q.SourceIP != "" {
		a, err := netip.ParseAddr(q.SourceIP)
		if err != nil {
			return nil, nil, &KeyError{Msg: fmt.Sprintf("source-ip %q: %v", q.SourceIP, err)}
		}
		r.SourceIP = a.Unmap().String()
		parts = append(parts, "source "+r.SourceIP)
	}
	return append(reqs, r), append(names, strings.Join(parts, ", ")), nil
}

// CheckFirstSource is FirstSourceRequest's check alone, with no request
// made: for a file of keys, one line after another.
func CheckFirstSource(first *topology.RequestKey, value string) error {
	switch {
	case len(value) > MaxKeyLen:
		return fmt.Errorf("longer than %d bytes", MaxKeyLen)
	case first == nil:
		return fmt.Errorf("the upstream has no requestAffinity: no key source to carry it")
	case first.Source == topology.KeySourceIP:
		if _, err := netip.ParseAddr(value); err != nil {
			return fmt.Errorf("the first key source is sourceIP: %w", err)
		}
	}
	return nil
}

// FirstSourceRequest is a request that carries value for the upstream's
// first key source (nil: the upstream has none).
func FirstSourceRequest(first *topology.RequestKey, value string) (KeyRequest, error) {
	var r KeyRequest
	if len(value) > MaxKeyLen {
		return r, fmt.Errorf("longer than %d bytes", MaxKeyLen)
	}
	if first == nil {
		return r, fmt.Errorf("the upstream has no requestAffinity: no key source to carry it")
	}
	switch first.Source {
	case topology.KeyHeader:
		r.Headers = map[string]string{first.Name: value}
	case topology.KeyCookie:
		r.Cookies = map[string]string{first.Name: value}
	case topology.KeyQueryParameter:
		r.Query = map[string]string{first.Name: value}
	case topology.KeySourceIP:
		a, err := netip.ParseAddr(value)
		if err != nil {
			return r, fmt.Errorf("the first key source is sourceIP: %w", err)
		}
		r.SourceIP = a.Unmap().String()
	}
	return r, nil
}
