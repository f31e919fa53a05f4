package outlier

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"poise.dev/poise/pkg/topology"
)

// MaxSharedEndpoints bounds the endpoints one replica shares with the
// leader, over all upstreams (Compact's default).
const MaxSharedEndpoints = 40000

// Shared is what one replica shares with the leader in Kubernetes mode: its
// aggregate of each upstream with a detection ("namespace/name"), over its
// own clients' reports. The leader merges the replicas' aggregates of an
// upstream and decides on the sum.
type Shared struct {
	Upstreams map[string]Aggregate `json:"upstreams"`
}

// Compact is the replica's aggregates as it shares them, at most max
// endpoints over all upstreams. Within the bound nothing is left out: an
// endpoint without errors here still counts its requests and reporters in
// the fleet's sums, so leaving it out would raise the fleet's error ratio.
// Past it, the endpoints with the most errors, then the most requests, are
// kept (the evidence of an outlier first), the rest counted in Truncated.
func Compact(aggs map[string]Aggregate, max int) Shared {
	out := Shared{Upstreams: make(map[string]Aggregate, len(aggs))}
	total := 0
	for _, a := range aggs {
		total += len(a.Endpoints)
	}
	if total <= max {
		for up, a := range aggs {
			a.Endpoints = slices.Clone(a.Endpoints)
			out.Upstreams[up] = a
		}
		return out
	}
	type ref struct {
		up string
		e  EndpointSummary
	}
	all := make([]ref, 0, total)
	for up, a := range aggs {
		out.Upstreams[up] = Aggregate{Reporters: a.Reporters, Untrusted: a.Untrusted, Truncated: a.Truncated, Endpoints: []EndpointSummary{}}
		for _, e := range a.Endpoints {
			all = append(all, ref{up, e})
		}
	}
	slices.SortFunc(all, func(a, b ref) int {
		return cmp.Or(cmp.Compare(b.e.Errors, a.e.Errors), cmp.Compare(b.e.Requests, a.e.Requests), cmp.Compare(a.up, b.up), compareSummary(a.e, b.e))
	})
	for i, r := range all {
		a := out.Upstreams[r.up]
		if i >= max {
			a.Truncated = sat(a.Truncated, 1)
		} else {
			a.Endpoints = append(a.Endpoints, r.e)
		}
		out.Upstreams[r.up] = a
	}
	for up, a := range out.Upstreams {
		slices.SortFunc(a.Endpoints, compareSummary)
		out.Upstreams[up] = a
	}
	return out
}

// EndpointsOf is an upstream's endpoints as the decider sees them: in
// canonical order, with their configured weights.
func EndpointsOf(u *topology.UpstreamState) []Endpoint {
	eps := make([]Endpoint, len(u.Endpoints))
	for i, e := range u.Endpoints {
		eps[i] = Endpoint{Address: e.Address, Port: e.Port, Weight: e.Weight}
	}
	return eps
}

// Restore gives upstream u the ejections a previous decider (the leader
// before this one) left in force: each holds until its end, keeps its
// consecutive count, and is renewed only on new evidence a window from now.
// It replaces whatever state u had.
func (d *Decider) Restore(u topology.Key, es []Ejection, now time.Time) {
	st := map[Endpoint]*state{}
	for _, e := range es {
		if e.Count == 0 || !now.Before(e.Until) {
			continue
		}
		st[key(e.Address, e.Port)] = &state{count: e.Count, until: e.Until, start: now, origin: e.Origin}
	}
	if len(st) == 0 {
		delete(d.ups, u)
		return
	}
	d.ups[u] = st
}

// maxSharedJSON bounds a share's JSON when it is read back: well above what
// MaxSharedEndpoints endpoints take, so a share a replica wrote is never
// refused, and a hostile one cannot make the leader decode without bound.
const maxSharedJSON = 16 << 20

// Encode is the share as a replica writes it: JSON, gzipped (addresses and
// field names repeat, so it compresses several times over).
func (s Shared) Encode() ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(s); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeShared reads a share Encode wrote, refusing one whose JSON is over
// 16 MiB or whose aggregates are not sorted and bounded as Compact makes
// them.
func DecodeShared(b []byte) (Shared, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return Shared{}, fmt.Errorf("shared aggregate: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxSharedJSON+1))
	if err != nil {
		return Shared{}, fmt.Errorf("shared aggregate: %w", err)
	}
	if len(raw) > maxSharedJSON {
		return Shared{}, fmt.Errorf("shared aggregate: over %d bytes of JSON", maxSharedJSON)
	}
	var s Shared
	if err := json.Unmarshal(raw, &s); err != nil {
		return Shared{}, fmt.Errorf("shared aggregate: %w", err)
	}
	n := 0
	for up, a := range s.Upstreams {
		n += len(a.Endpoints)
		if n > MaxSharedEndpoints {
			return Shared{}, fmt.Errorf("shared aggregate: over %d endpoints", MaxSharedEndpoints)
		}
		for i := 1; i < len(a.Endpoints); i++ {
			if compareSummary(a.Endpoints[i-1], a.Endpoints[i]) >= 0 {
				return Shared{}, fmt.Errorf("shared aggregate of %s: endpoints not sorted and distinct", up)
			}
		}
	}
	return s, nil
}
