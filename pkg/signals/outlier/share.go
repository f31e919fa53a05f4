package outlier

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"poise.dev/poise/pkg/topology"
)

// Bounds of one replica's share (Compact's, at first: EncodeShare halves
// both until the share fits its bytes).
const (
	// MaxSharedEndpoints bounds the endpoints one replica shares with the
	// leader, over all upstreams.
	MaxSharedEndpoints = 40000
	// MaxSharedInstances bounds the instance hashes it shares, over all
	// endpoints: 256 KiB of them, which gzip cannot shrink.
	MaxSharedInstances = 1 << 15
)

// Shared is what one replica shares with the leader in Kubernetes mode: its
// aggregate of each upstream with a detection ("namespace/name"), over its
// own clients' reports, each endpoint's InstanceSet cut to the upstream's
// minReporters (Aggregate.KeepInstances). The leader merges the replicas'
// aggregates of an upstream and decides on the sum, counting failing
// instances by the union of their sets.
type Shared struct {
	Upstreams map[string]Aggregate `json:"upstreams"`
}

// Compact is the replica's aggregates as it shares them, at most
// maxEndpoints endpoints and maxInstances instance hashes over all
// upstreams. Within the bounds nothing is left out: an endpoint without
// errors here still counts its requests and reporters in the fleet's sums,
// so leaving it out would raise the fleet's error ratio. Past maxEndpoints,
// the endpoints with the most errors, then the most requests, are kept
// (the evidence of an outlier first), the rest counted in Truncated. Past
// maxInstances, every InstanceSet is cut to the same length, the largest
// that fits, and what is left of the budget goes one hash each to the
// longer sets in the same order: a cut set still holds only real failing
// reporters, so the leader's count can only fall short (see "Counting
// failing instances over replicas"), and each replica's own count of
// failing instances (Failing) is kept whole.
func Compact(aggs map[string]Aggregate, maxEndpoints, maxInstances int) Shared {
	out := Shared{Upstreams: make(map[string]Aggregate, len(aggs))}
	endpoints, instances := 0, 0
	for _, a := range aggs {
		endpoints += len(a.Endpoints)
		for _, e := range a.Endpoints {
			instances += len(e.Instances)
		}
	}
	if endpoints <= maxEndpoints && instances <= maxInstances {
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
	all := make([]ref, 0, endpoints)
	for up, a := range aggs {
		out.Upstreams[up] = Aggregate{Reporters: a.Reporters, Untrusted: a.Untrusted, Truncated: a.Truncated, Endpoints: []EndpointSummary{}}
		for _, e := range a.Endpoints {
			all = append(all, ref{up, e})
		}
	}
	// the most telling first
	slices.SortFunc(all, func(a, b ref) int {
		return cmp.Or(cmp.Compare(b.e.Errors, a.e.Errors), cmp.Compare(b.e.Requests, a.e.Requests), cmp.Compare(a.up, b.up), compareSummary(a.e, b.e))
	})
	for _, r := range all[min(len(all), max(maxEndpoints, 0)):] {
		a := out.Upstreams[r.up]
		a.Truncated = sat(a.Truncated, 1)
		out.Upstreams[r.up] = a
	}
	all = all[:min(len(all), max(maxEndpoints, 0))]
	lens := make([]int, len(all))
	for i, r := range all {
		lens[i] = len(r.e.Instances)
	}
	keep := instanceBudget(lens, max(maxInstances, 0))
	for i, r := range all {
		if keep[i] < len(r.e.Instances) {
			r.e.Instances = r.e.Instances[:keep[i]:keep[i]]
		}
		a := out.Upstreams[r.up]
		a.Endpoints = append(a.Endpoints, r.e)
		out.Upstreams[r.up] = a
	}
	for up, a := range out.Upstreams {
		slices.SortFunc(a.Endpoints, compareSummary)
		out.Upstreams[up] = a
	}
	return out
}

// instanceBudget is how many hashes each of sets of the given lengths
// keeps within budget in all: all of them when they fit; else the same
// cap c for all, the largest whose total fits, and one more to each of
// the first sets longer than c while the budget lasts.
func instanceBudget(lens []int, budget int) []int {
	keep := slices.Clone(lens)
	total := 0
	for _, l := range lens {
		total += l
	}
	if total <= budget {
		return keep
	}
	sorted := slices.Clone(lens)
	slices.Sort(sorted)
	// the level c: sets up to c keep all, the others c
	c, left := 0, budget
	for i, l := range sorted {
		rest := len(sorted) - i
		if (l-c)*rest > left {
			c += left / rest
			left -= (left / rest) * rest
			break
		}
		left -= (l - c) * rest
		c = l
	}
	for i, l := range lens {
		keep[i] = min(l, c)
		if l > c && left > 0 {
			keep[i]++
			left--
		}
	}
	return keep
}

// EncodeShare is the replica's aggregates compacted and encoded within
// maxBytes: Compact at MaxSharedEndpoints and MaxSharedInstances, both
// halved until the encoding fits (the most telling kept first). Should not
// even one endpoint fit, it is the last encoding tried, over maxBytes.
func EncodeShare(aggs map[string]Aggregate, maxBytes int) ([]byte, error) {
	for eps, ins := MaxSharedEndpoints, MaxSharedInstances; ; eps, ins = eps/2, ins/2 {
		b, err := Compact(aggs, eps, ins).Encode()
		if err != nil || len(b) <= maxBytes || eps <= 1 {
			return b, err
		}
	}
}

// EndpointsOf is an upstream's endpoints as the decider sees them: in
// canonical order, with their configured weights.
func EndpointsOf(u *topology.UpstreamState) []Endpoint {
	eps := make([]Endpoint, len(u.Endpoints))
	for i, e := range u.Endpoints {
		eps[i] = Endpoint{Address: e.Address, Port: e.Port, Weight: e.Weight, Generation: u.Origins[i].Generation}
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
		st[key(e.Address, e.Port)] = &state{count: e.Count, until: e.Until, start: now, origin: e.Origin, gen: e.Generation}
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
// 16 MiB, whose aggregates are not sorted and bounded as Compact makes
// them, or whose InstanceSets are not whole hashes, ascending, distinct,
// at most MaxInstances and at most their endpoint's failing reporters. A
// share is one replica's: each endpoint's FailingFloor is its Failing,
// that replica's distinct failing instances. A share of the previous
// version has "failing" and no InstanceSets: it counts as many failing
// instances as its one replica saw, never more (an instance it shares with
// another replica is not recognised, and may be missed).
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
	return decodeSharedJSON(raw)
}

// sharedJSON is a share as DecodeShared reads it: Shared's JSON, with the
// instance sets as their bytes, and the previous version's "failing",
// which this version does not write.
type sharedJSON struct {
	Upstreams map[string]struct {
		Aggregate
		Endpoints []struct {
			EndpointSummary
			Previous  uint64 `json:"failing"`
			Instances []byte `json:"instances"` // EndpointSummary's, undecoded
		} `json:"endpoints"`
	} `json:"upstreams"`
}

// decodeSharedJSON is DecodeShared after the gzip.
func decodeSharedJSON(raw []byte) (Shared, error) {
	var w sharedJSON
	if err := json.Unmarshal(raw, &w); err != nil {
		return Shared{}, fmt.Errorf("shared aggregate: %w", err)
	}
	s := Shared{Upstreams: make(map[string]Aggregate, len(w.Upstreams))}
	n := 0
	for _, up := range slices.Sorted(maps.Keys(w.Upstreams)) {
		wa := w.Upstreams[up]
		n += len(wa.Endpoints)
		if n > MaxSharedEndpoints {
			return Shared{}, fmt.Errorf("shared aggregate: over %d endpoints", MaxSharedEndpoints)
		}
		a := wa.Aggregate
		if wa.Endpoints != nil {
			a.Endpoints = make([]EndpointSummary, len(wa.Endpoints))
		}
		for i, we := range wa.Endpoints {
			e := we.EndpointSummary
			e.Failing = max(e.Failing, we.Previous)
			if i > 0 && compareSummary(a.Endpoints[i-1], e) >= 0 {
				return Shared{}, fmt.Errorf("shared aggregate of %s: endpoints not sorted and distinct", up)
			}
			var err error
			if e.Instances, err = parseInstances(we.Instances); err != nil {
				return Shared{}, fmt.Errorf("shared aggregate of %s: endpoint %s:%d: instances: %w", up, e.Address, e.Port, err)
			}
			if uint64(len(e.Instances)) > e.Failing {
				return Shared{}, fmt.Errorf("shared aggregate of %s: endpoint %s:%d: %d instances, more than its %d failing reporters", up, e.Address, e.Port, len(e.Instances), e.Failing)
			}
			e.FailingFloor = e.Failing
			a.Endpoints[i] = e
		}
		s.Upstreams[up] = a
	}
	return s, nil
}
