package outlier

import (
	"cmp"
	"slices"

	"poise.dev/poise/pkg/signals/loadreport"
)

// MaxEndpoints bounds an Aggregate: Summarize lists at most the endpoints
// of one cluster of the load-report store, and Merge keeps at most this
// many entries (the first in Aggregate order), counting the rest in
// Truncated. At about 100 bytes of JSON an entry, an aggregate is at most
// some 6.5 MB.
const MaxEndpoints = 1 << 16

// Aggregate is one upstream's load reports over one window, summed per
// endpoint over the trusted reporters: what a replica contributes and what
// the decider reads. Aggregates of the same window from several replicas
// add up with Merge. Its JSON shape, as a replica shares it (DecodeShared
// reads it back), is
//
//	{"reporters":7,"untrusted":1,"endpoints":[{"address":"10.0.0.1","port":8080,
//	 "requests":1240,"errors":595,"reporters":7,"failingInstances":5,
//	 "instances":"BASE64"}]}
//
// with endpoints sorted by address, then port, and only endpoints with
// requests listed.
type Aggregate struct {
	// Reporters is the trusted reporters with requests on the upstream.
	Reporters uint64 `json:"reporters"`
	// Untrusted is the reporters left out: each had an error ratio of at
	// least errorPercent on more than half of the endpoints it reported on.
	Untrusted uint64 `json:"untrusted"`
	// Truncated is the endpoints Merge left out past MaxEndpoints.
	Truncated uint64            `json:"truncated,omitempty"`
	Endpoints []EndpointSummary `json:"endpoints"`
}

// EndpointSummary is one endpoint's trusted load over the window.
type EndpointSummary struct {
	Address string `json:"address"`
	Port    uint32 `json:"port"`
	// Generation is the endpoint generation the load was reported for
	// (loadreport.Endpoint.Generation); summaries of two generations of
	// one address are two entries, never added up.
	Generation string `json:"generation,omitempty"`
	// Requests is finished requests (successes and errors); Errors the
	// failed ones among them.
	Requests uint64 `json:"requests"`
	Errors   uint64 `json:"errors"`
	// Reporters is the trusted reporters with requests on the endpoint;
	// Failing those among them whose own error ratio on it is at least
	// errorPercent. One replica's reporters are distinct instances; Merge
	// adds replicas' counts, so an instance reporting to k replicas is k
	// here: the decider counts FailingInstances instead. Failing's JSON
	// key is not the previous version's "failing", so a leader of that
	// version, which would add it up, reads none (see DecodeShared).
	Reporters uint64 `json:"reporters"`
	Failing   uint64 `json:"failingInstances"`
	// Instances is the failing reporters' InstanceSet: the smallest of
	// their hashes, at most MaxInstances (a share keeps minReporters of
	// them: KeepInstances), the union of the replicas' after Merge.
	Instances InstanceSet `json:"instances,omitempty"`
	// FailingFloor is what is known of the distinct failing instances
	// besides Instances: the most failing reporters any one replica's
	// summary merged here counted (a replica's are distinct). It is not
	// shared: a decoded share's is its Failing.
	FailingFloor uint64 `json:"-"`
}

// FailingInstances is the failing reporters as distinct workload
// instances, as far as the evidence shows: never more than there are, and,
// when no set was cut shorter than minReporters, at least minReporters
// whenever there are that many (see "Counting failing instances over
// replicas").
func (e EndpointSummary) FailingInstances() uint64 {
	return max(uint64(len(e.Instances)), e.FailingFloor)
}

func compareSummary(a, b EndpointSummary) int {
	if c := cmp.Compare(a.Address, b.Address); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Port, b.Port); c != 0 {
		return c
	}
	return cmp.Compare(a.Generation, b.Generation)
}

// atLeast says whether errors/requests ≥ percent/100, exactly.
func atLeast(errors, requests uint64, percent uint32) bool {
	if requests == 0 {
		return false
	}
	// errors ≤ requests < 2^64; both sides in 128 bits
	return cmp128(mul64(errors, 100), mul64(requests, uint64(percent))) >= 0
}

// Summarize sums one window of a cluster's load reports (loadreport
// Store.Reports) at the upstream's errorPercent. A reporter whose own
// error ratio is at least errorPercent on more than half of the endpoints
// it reported on is the failing party (a client whose calls fail locally
// fails on every endpoint): it is counted in Untrusted and its reports are
// left out. Each endpoint's failing reporters are kept as an InstanceSet of
// MaxInstances at most (KeepInstances cuts it for a share). The result
// depends only on the reports, not their order.
func Summarize(r loadreport.ClusterReports, errorPercent uint32) Aggregate {
	size := len(r.Endpoints)
	// A catalog names each endpoint once; should two entries name one
	// endpoint, they are one: a reporter's loads on both add up, at the
	// first entry.
	slot := make([]int, size)
	first := make(map[loadreport.Endpoint]int, size)
	for i, e := range r.Endpoints {
		j, ok := first[e]
		if !ok {
			j = i
			first[e] = i
		}
		slot[i] = j
	}
	var folded []loadreport.Load
	if len(first) < size {
		folded = make([]loadreport.Load, size)
	}
	sums := make([]EndpointSummary, size)
	sets := make([][]uint64, size)
	var agg Aggregate
	for _, rep := range r.Reporters {
		loads := rep.Loads[:min(len(rep.Loads), size)]
		if folded != nil {
			clear(folded)
			for i, l := range loads {
				f := &folded[slot[i]]
				f.Issued, f.Successes, f.Errors = sat(f.Issued, l.Issued), sat(f.Successes, l.Successes), sat(f.Errors, l.Errors)
			}
			loads = folded
		}
		reported, failing := 0, 0
		for _, l := range loads {
			if n := requests(l); n > 0 {
				reported++
				if atLeast(min(l.Errors, n), n, errorPercent) {
					failing++
				}
			}
		}
		switch {
		case reported == 0:
			continue
		case 2*failing > reported:
			agg.Untrusted++
			continue
		}
		agg.Reporters++
		var h uint64
		if failing > 0 {
			h = InstanceHash(rep.ID)
		}
		for i, l := range loads {
			n := requests(l)
			if n == 0 {
				continue
			}
			e := &sums[i]
			e.Requests = sat(e.Requests, n)
			e.Errors = sat(e.Errors, min(l.Errors, n))
			e.Reporters++
			if atLeast(min(l.Errors, n), n, errorPercent) {
				e.Failing++
				sets[i] = append(sets[i], h)
			}
		}
	}
	for i, e := range sums {
		if e.Requests == 0 {
			continue
		}
		e.Address, e.Port, e.Generation = r.Endpoints[i].Address, r.Endpoints[i].Port, r.Endpoints[i].Generation
		e.Instances = bottom(sets[i], MaxInstances)
		e.FailingFloor = e.Failing
		agg.Endpoints = append(agg.Endpoints, e)
	}
	slices.SortFunc(agg.Endpoints, compareSummary)
	return agg
}

// KeepInstances is the aggregate with each endpoint's InstanceSet cut to
// its k smallest: a share needs no more than minReporters of them.
func (a Aggregate) KeepInstances(k uint32) Aggregate {
	a.Endpoints = slices.Clone(a.Endpoints)
	for i := range a.Endpoints {
		e := &a.Endpoints[i]
		if n := min(len(e.Instances), int(min(k, MaxInstances))); n < len(e.Instances) {
			e.Instances = e.Instances[:n:n]
		}
	}
	return a
}

// requests is a load's finished requests, saturating.
func requests(l loadreport.Load) uint64 { return sat(l.Successes, l.Errors) }

// Merge sums aggregates of the same upstream and window (one per replica):
// counts add, saturating, per endpoint, and the InstanceSets unite (their
// MaxInstances smallest), FailingFloor the largest. The result does not
// depend on the order of aggs, and holds at most MaxEndpoints endpoints.
func Merge(aggs ...Aggregate) Aggregate {
	var out Aggregate
	n := 0
	for _, a := range aggs {
		out.Reporters = sat(out.Reporters, a.Reporters)
		out.Untrusted = sat(out.Untrusted, a.Untrusted)
		out.Truncated = sat(out.Truncated, a.Truncated)
		n += len(a.Endpoints)
	}
	all := make([]EndpointSummary, 0, n)
	for _, a := range aggs {
		all = append(all, a.Endpoints...)
	}
	slices.SortStableFunc(all, compareSummary)
	out.Endpoints = mergeSorted(all)
	if len(out.Endpoints) > MaxEndpoints {
		out.Truncated = sat(out.Truncated, uint64(len(out.Endpoints)-MaxEndpoints))
		out.Endpoints = out.Endpoints[:MaxEndpoints:MaxEndpoints]
	}
	return out
}

// mergeSorted adds up neighbours naming the same endpoint, in place; the
// entries' InstanceSets are not written to.
func mergeSorted(es []EndpointSummary) []EndpointSummary {
	out := es[:0]
	for _, e := range es {
		if k := len(out) - 1; k >= 0 && compareSummary(out[k], e) == 0 {
			o := &out[k]
			o.Requests = sat(o.Requests, e.Requests)
			o.Errors = sat(o.Errors, e.Errors)
			o.Reporters = sat(o.Reporters, e.Reporters)
			o.Failing = sat(o.Failing, e.Failing)
			o.Instances = union(o.Instances, e.Instances, MaxInstances)
			o.FailingFloor = max(o.FailingFloor, e.FailingFloor)
			continue
		}
		out = append(out, e)
	}
	return out
}

func sat(a, b uint64) uint64 {
	if a+b < a {
		return 1<<64 - 1
	}
	return a + b
}
