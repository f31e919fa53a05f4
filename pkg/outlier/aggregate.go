package outlier

import (
	"cmp"
	"slices"

	"poise.dev/poise/pkg/loadreport"
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
// add up with Merge. Its JSON shape is
//
//	{"reporters":7,"untrusted":1,"endpoints":[{"address":"10.0.0.1","port":8080,
//	 "requests":1240,"errors":595,"reporters":7,"failing":5}]}
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
	// Requests is finished requests (successes and errors); Errors the
	// failed ones among them.
	Requests uint64 `json:"requests"`
	Errors   uint64 `json:"errors"`
	// Reporters is the trusted reporters with requests on the endpoint;
	// Failing those among them whose own error ratio on it is at least
	// errorPercent.
	Reporters uint64 `json:"reporters"`
	Failing   uint64 `json:"failing"`
}

func compareSummary(a, b EndpointSummary) int {
	if c := cmp.Compare(a.Address, b.Address); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
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
// left out. The result depends only on the reports, not their order.
func Summarize(r loadreport.ClusterReports, errorPercent uint32) Aggregate {
	sums := make([]EndpointSummary, len(r.Endpoints))
	var agg Aggregate
	for _, rep := range r.Reporters {
		loads := rep.Loads[:min(len(rep.Loads), len(r.Endpoints))]
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
			}
		}
	}
	for i, e := range sums {
		if e.Requests == 0 {
			continue
		}
		e.Address, e.Port = r.Endpoints[i].Address, r.Endpoints[i].Port
		agg.Endpoints = append(agg.Endpoints, e)
	}
	slices.SortFunc(agg.Endpoints, compareSummary)
	// A catalog names each endpoint once; should two entries name one
	// endpoint, they are one.
	agg.Endpoints = mergeSorted(agg.Endpoints)
	return agg
}

// requests is a load's finished requests, saturating.
func requests(l loadreport.Load) uint64 { return sat(l.Successes, l.Errors) }

// Merge sums aggregates of the same upstream and window (one per replica):
// counts add, saturating, per endpoint. The result does not depend on the
// order of aggs, and holds at most MaxEndpoints endpoints.
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

// mergeSorted adds up neighbours naming the same endpoint, in place.
func mergeSorted(es []EndpointSummary) []EndpointSummary {
	out := es[:0]
	for _, e := range es {
		if k := len(out) - 1; k >= 0 && compareSummary(out[k], e) == 0 {
			o := &out[k]
			o.Requests = sat(o.Requests, e.Requests)
			o.Errors = sat(o.Errors, e.Errors)
			o.Reporters = sat(o.Reporters, e.Reporters)
			o.Failing = sat(o.Failing, e.Failing)
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
