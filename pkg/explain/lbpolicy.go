package explain

import (
	"fmt"
	"math"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"poise.dev/poise/pkg/hashring"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/pkg/xds/translate"
)

// LoadBalancing is the upstream's loadBalancing policy and, per client kind,
// how it is published and whether the computed split holds exactly.
type LoadBalancing struct {
	Policy  string        `json:"policy"`
	Clients []ClientSplit `json:"clients"`
	// KeyedBy is spec.requestAffinity's key sources, in order, and what
	// each client does with them (explain --key places a request).
	KeyedBy []string `json:"keyedBy,omitempty"`
}

// Split values of ClientSplit.
const (
	// SplitExact: the client carries out the computed shares exactly.
	SplitExact = "Exact"
	// SplitApproximate: each endpoint's share is within BoundMillionths of
	// the computed one.
	SplitApproximate = "Approximate"
	// SplitLoadDependent: locality shares are exact; inside a locality the
	// client moves traffic toward endpoints with fewer outstanding requests,
	// by design, so endpoint shares hold only while those are equal.
	SplitLoadDependent = "LoadDependent"
	// SplitProxy: healthAdjustment Proxy; the client's own math decides.
	SplitProxy = "Proxy"
)

// ClientSplit is how one client kind is sent the upstream.
type ClientSplit struct {
	// Client is "Envoy" or "gRPC" (nodes announcing
	// envoy.lb.does_not_support_overprovisioning).
	Client string `json:"client"`
	// Rendering is the ClusterLoadAssignment layout: "weighted" or
	// "per-endpoint" (one locality per endpoint, weighted by its share).
	Rendering string `json:"rendering"`
	// LbPolicy is the cluster's lb_policy as published.
	LbPolicy string `json:"lbPolicy"`
	// RingSize and TableSize are the published ring hash ring and Maglev
	// table, when the policy has one.
	RingSize  uint64 `json:"ringSize,omitempty"`
	TableSize uint64 `json:"tableSize,omitempty"`
	Split     string `json:"split"`
	// BoundMillionths is, for an Approximate split, the most any endpoint's
	// share can differ from its computed share, in millionths of all traffic.
	BoundMillionths uint64 `json:"boundMillionths,omitempty"`
	// Note says why, in a sentence.
	Note string `json:"note"`
	// Refusal, when the upstream routes nothing (outcome NoCapacity or
	// PanicRejected), is what every request of this client kind fails
	// with, and whether the client counts it as a drop by policy
	// (docs/connect.md, "When nothing is routed").
	Refusal string `json:"refusal,omitempty"`
}

// RingHashSigmas is how many standard deviations of the ring's hash
// placement the RingHash bound allows: a share outside it has a
// probability below 10⁻⁴ per endpoint.
const RingHashSigmas = 4

// loadBalancing explains the upstream's policy for each client kind.
func loadBalancing(u *topology.UpstreamState) LoadBalancing {
	up := u.Upstream
	lb := LoadBalancing{Policy: up.LoadBalancing, Clients: []ClientSplit{}}
	if lb.Policy == "" {
		lb.Policy = "RoundRobin"
	}
	for _, c := range []struct {
		name string
		r    translate.Rendering
	}{{"Envoy", translate.Weighted}, {"gRPC", translate.PerEndpoint}} {
		p := translate.LbPolicyOf(up, c.r)
		cs := ClientSplit{Client: c.name, Rendering: p.Layout.String(), LbPolicy: p.Policy.String(),
			RingSize: p.RingSize, TableSize: p.TableSize}
		cs.Split, cs.BoundMillionths, cs.Note = split(u, c.r, p)
		cs.Refusal = refusal(u, c.r)
		lb.Clients = append(lb.Clients, cs)
	}
	if ra := up.RequestAffinity; ra != nil {
		for _, k := range ra.Keys {
			lb.KeyedBy = append(lb.KeyedBy, DescribeKeySource(k))
		}
		lb.KeyedBy = append(lb.KeyedBy, "note: no client folds case or normalises a key beyond the rewrites: canonicalise keys where they are made (docs/affinity-keys.md)")
	}
	return lb
}

// split derives whether the published policy carries out the computed
// shares, and if not by how much (docs/connect.md, "Load-balancing
// policies", has the derivations).
func split(u *topology.UpstreamState, r translate.Rendering, p translate.LbPolicy) (string, uint64, string) {
	if u.Upstream.HealthAdjustment == topology.Proxy {
		if r == translate.PerEndpoint {
			return SplitProxy, 0, "healthAdjustment Proxy: grpc-go's own math (locality weights, round robin inside a locality, priorities by connectivity)"
		}
		return SplitProxy, 0, "healthAdjustment Proxy: Envoy's own math on the source topology"
	}
	if r == translate.PerEndpoint && p.Policy == cluster.Cluster_RING_HASH {
		// requestAffinity: the client's own ring, capped at its own limit
		b := ringHashBound(routedShares(u), hashring.DefaultRingSizeCap)
		if b == 0 {
			return SplitExact, 0, "a single endpoint takes every hash"
		}
		return SplitApproximate, b, fmt.Sprintf("ring_hash keyed by the route's header sources; for uniform keys: %d standard deviations of where the ring's points land, plus one point, on the %d-entry ring the gRPC clients cap it at by default (GRPC_RING_HASH_CAP); explain --keys gives each endpoint's exact part of each client's ring", RingHashSigmas, hashring.DefaultRingSizeCap)
	}
	if r == translate.PerEndpoint {
		note := "each endpoint is a locality weighted by its share"
		if u.Upstream.LoadBalancing != "" && u.Upstream.LoadBalancing != "RoundRobin" {
			note = "sent as ROUND_ROBIN, the only policy under which grpc-go weighs localities; Poise's gRPC route has no hash policy to keep; " + note
		}
		return SplitExact, 0, note
	}
	shares := routedShares(u)
	switch p.Policy {
	case cluster.Cluster_RANDOM:
		return SplitExact, 0, "each endpoint is a locality weighted by its share, since RANDOM ignores endpoint weights inside a locality"
	case cluster.Cluster_LEAST_REQUEST:
		if multiEndpointLocality(u) {
			return SplitLoadDependent, 0, "locality shares are exact; inside a locality Envoy divides each endpoint's weight by its outstanding requests + 1, so endpoint shares hold only while those are equal"
		}
		return SplitExact, 0, "one endpoint per locality: the locality weights carry the split"
	case cluster.Cluster_RING_HASH:
		b := ringHashBound(shares, p.RingSize)
		if b == 0 {
			return SplitExact, 0, "a single endpoint takes every hash"
		}
		return SplitApproximate, b, fmt.Sprintf("for uniform request hashes, as Envoy draws when a request has none: %d standard deviations, √(p(1−p)/%d), of where the ring's points land, plus one point", RingHashSigmas, p.RingSize)
	case cluster.Cluster_MAGLEV:
		b := maglevBound(shares, p.TableSize)
		if b == 0 {
			return SplitExact, 0, "a single endpoint fills the table"
		}
		return SplitApproximate, b, fmt.Sprintf("for uniform request hashes, as Envoy draws when a request has none: an endpoint's entries are off its share of the %d by under 2 + p·H, H endpoints", p.TableSize)
	}
	return SplitExact, 0, "weighted round robin over locality and endpoint weights"
}

// refusal is what every request of client kind r fails with when u routes
// nothing, "" when it routes (or the proxy does its own math). NoCapacity
// publishes an empty assignment; PanicRejected a drop of every request,
// category "panic", with the endpoints still eligible for gRPC clients
// alone (translate's rejected: grpc-go drops only once it is READY).
func refusal(u *topology.UpstreamState, r translate.Rendering) string {
	if u.Upstream.HealthAdjustment == topology.Proxy {
		return ""
	}
	switch u.Result.Outcome {
	case weights.NoCapacity:
		if r == translate.PerEndpoint {
			return "UNAVAILABLE with the client's error for a cluster with no endpoints (grpc-go: " + grpcGoNoEndpoints + "), not a drop"
		}
		return `503 "no healthy upstream" (response flag UH), not a drop: the assignment has no endpoints`
	case weights.PanicRejected:
		if r == translate.PerEndpoint {
			n := eligibleEndpoints(u)
			if n == 0 {
				return `dropped by policy where the client can tell: gRPC C-core UNAVAILABLE "EDS-configured drop: panic"; grpc-go and grpc-js, with no endpoint still eligible to be sent, fail as for a cluster with no endpoints (grpc-go: ` + grpcGoNoEndpoints + ")"
			}
			return fmt.Sprintf(`dropped by policy: UNAVAILABLE, counted as a drop of category "panic" in the client's load reports; grpc-go "RPC is dropped" once connected to one of the %d endpoints still eligible (sent for that alone: no RPC reaches them), grpc-js "Call dropped by load balancing policy. Category: panic", gRPC C-core "EDS-configured drop: panic"`, n)
		}
		return `dropped by policy: 503 "drop overload" with x-envoy-drop-overload: true (response flag UDO; DO in older Envoys), counted as dropped requests of category "panic" in its load reports; an Envoy that does not apply drop_overloads answers 503 "no healthy upstream" (it is sent no endpoint)`
	}
	return ""
}

// grpcGoNoEndpoints is grpc-go's error for an EDS cluster with no
// endpoints: the priority it builds for the empty assignment has no
// locality to pick from.
const grpcGoNoEndpoints = `"weighted-target: no targets to pick from"`

// eligibleEndpoints counts u's endpoints that pass every check.
func eligibleEndpoints(u *topology.UpstreamState) int {
	n := 0
	for i := range u.Result.Endpoints {
		if u.Result.Endpoints[i].Eligible {
			n++
		}
	}
	return n
}

// routedShares is the share of every endpoint with traffic, as a fraction of
// all traffic: what priority 0 of the published assignment carries, and
// what a hash policy divides among its endpoints.
func routedShares(u *topology.UpstreamState) (shares []float64) {
	res := u.Result
	if res.Outcome != weights.Routable {
		return nil
	}
	for i := range res.Endpoints {
		if s := res.Endpoints[i].Share; s > 0 {
			shares = append(shares, float64(s)/weights.Million)
		}
	}
	return shares
}

func sum(xs []float64) float64 {
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t
}

// ringHashBound: endpoint i owns p_i·N of the N ring points (within one),
// at positions spread by hashing, so the hash space it covers has mean p_i
// and standard deviation √(p_i(1−p_i)/(N+1)). The bound is RingHashSigmas
// of those plus one point, in millionths of all traffic (routed part R).
func ringHashBound(shares []float64, n uint64) uint64 {
	if len(shares) <= 1 {
		return 0
	}
	routed := sum(shares)
	worst := 0.0
	for _, s := range shares {
		p := s / routed
		worst = max(worst, RingHashSigmas*math.Sqrt(p*(1-p)/float64(n))+1/float64(n))
	}
	return uint64(math.Ceil(routed * worst * weights.Million))
}

// maglevBound: Envoy fills the M-entry table in rounds, endpoint i taking
// an entry in a round when its weight allows, so after the table fills its
// count n_i is p_i·M + δ_i − p_i·Σδ with each |δ| ≤ 1: |n_i/M − p_i| <
// (1 + p_i·H)/M, plus one entry for floating-point ties. A uniformly spread
// hash picks each entry alike.
func maglevBound(shares []float64, m uint64) uint64 {
	if len(shares) <= 1 {
		return 0
	}
	routed := sum(shares)
	h := float64(len(shares))
	worst := 0.0
	for _, s := range shares {
		worst = max(worst, (2+s/routed*h)/float64(m))
	}
	return uint64(math.Ceil(routed * worst * weights.Million))
}

// multiEndpointLocality reports whether a locality with traffic has more
// than one selectable endpoint.
func multiEndpointLocality(u *topology.UpstreamState) bool {
	res := u.Result
	if res.Outcome != weights.Routable {
		return false
	}
	for li := range res.Localities {
		l := &res.Localities[li]
		if l.Traffic == 0 {
			continue
		}
		n := 0
		for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
			if er, _, _ := u.EndpointResult(ei); er.Selectable {
				n++
			}
		}
		if n > 1 {
			return true
		}
	}
	return false
}
