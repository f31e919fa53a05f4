package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// Pattern says what a fleet looks like: how many clients of each kind and
// protocol, how many clusters each subscribes to and which, where they are.
type Pattern struct {
	Envoy, GRPC int
	// DeltaPercent of each kind's clients speak Delta xDS, the others SotW.
	DeltaPercent int
	// Clusters per client, drawn uniformly from [Min, Max] for each kind.
	EnvoyMin, EnvoyMax int
	GRPCMin, GRPCMax   int
	// Hot clusters (the first Hot of the list) every client subscribes to;
	// the others are drawn by popularity: the cluster of rank r (its place
	// in the list after the hot ones) weighs 1/(r+1)^Skew, so Skew 0 is
	// uniform and 1 a Zipf long tail.
	Hot  int
	Skew float64
	// Localities spreads the clients' zones over this many (region, zone)
	// pairs, round-robin; Regions are the regions they cycle through.
	Localities int
	Regions    []string
	// StreamsPerConn gRPC clients share one connection (a pod with that
	// many channels); Envoy clients have one each.
	StreamsPerConn int
	// Metadata goes into every node; IDPrefix starts every node ID.
	Metadata map[string]string
	IDPrefix string
	// Sample, when set, gives the clients' shapes instead: client i copies
	// sample i mod len(Sample) (kind, protocol, zone, features, user agent,
	// cluster and its number of EDS names); Envoy and GRPC only count.
	Sample []SampleClient
	Seed   uint64
}

// DefaultRegions are the regions of the generated tree.
var DefaultRegions = []string{"eu-west", "eu-central", "us-east"}

// Size is how many clients the pattern makes.
func (p Pattern) Size() int { return p.Envoy + p.GRPC }

// Specs is client i's spec for each i with keep(conn) true, where conn is
// its connection's number: a process that runs a share of the fleet keeps
// whole connections. Each client's subscription comes from its own random
// source seeded with (Seed, i), so every process draws the same fleet.
func (p Pattern) Specs(clusters []string, keep func(conn int) bool) ([]Spec, error) {
	n := len(clusters)
	if n == 0 {
		return nil, fmt.Errorf("no clusters to subscribe to")
	}
	if p.Hot > n {
		return nil, fmt.Errorf("%d hot clusters, but %d clusters", p.Hot, n)
	}
	regions := p.Regions
	if len(regions) == 0 {
		regions = DefaultRegions
	}
	localities := max(p.Localities, 1)
	streams := max(p.StreamsPerConn, 1)
	cdf := popularity(n-p.Hot, p.Skew)
	var out []Spec
	conn := 0
	for i := range p.Size() {
		kind, lo, hi := Envoy, p.EnvoyMin, p.EnvoyMax
		if i >= p.Envoy {
			kind, lo, hi = GRPC, p.GRPCMin, p.GRPCMax
			if j := i - p.Envoy; j > 0 && j%streams != 0 {
				conn-- // shares the connection of the gRPC client before it
			}
		}
		c := conn
		conn++
		if keep != nil && !keep(c) {
			continue
		}
		rng := rand.New(rand.NewPCG(p.Seed, uint64(i)))
		loc := i % localities
		region := regions[loc%len(regions)]
		s := Spec{Conn: c, Delta: deltaOf(i, p.DeltaPercent), Node: NodeShape{Kind: kind,
			Region: region, Zone: fmt.Sprintf("%s-%c", region, 'a'+loc/len(regions)%26), Metadata: p.Metadata}}
		count := lo
		if hi > lo {
			count += rng.IntN(hi - lo + 1)
		}
		if len(p.Sample) > 0 {
			sm := p.Sample[i%len(p.Sample)]
			s.Node.Kind, s.Delta, s.Node.Features, s.Node.UserAgent = sm.kind(), sm.Protocol == "delta", sm.Features, sm.UserAgent
			s.Node.Region, s.Node.Zone, _ = strings.Cut(sm.Zone, "/")
			count = sm.EDSNames()
		}
		s.Node.ID = fmt.Sprintf("%s%s-%05d", p.IDPrefix, s.Node.Kind, i)
		s.Node.Cluster = fmt.Sprintf("%sapp-%03d", p.IDPrefix, i%97)
		if len(p.Sample) > 0 && p.Sample[i%len(p.Sample)].Cluster != "" {
			s.Node.Cluster = p.Sample[i%len(p.Sample)].Cluster
		}
		s.Subscribe = subscription(rng, min(max(count, 1), n), p.Hot, cdf)
		out = append(out, s)
	}
	return out, nil
}

// deltaOf spreads pct % of the clients evenly over the indices: client i
// speaks Delta when the running share crosses a whole client at i.
func deltaOf(i, pct int) bool { return (i+1)*pct/100 > i*pct/100 }

// popularity is the cumulative weight of the clusters of rank 0..n-1
// (weight 1/(r+1)^skew), ending at 1.
func popularity(n int, skew float64) []float64 {
	cdf := make([]float64, n)
	var sum float64
	for r := range n {
		sum += math.Pow(float64(r+1), -skew)
		cdf[r] = sum
	}
	for r := range cdf {
		cdf[r] /= sum
	}
	return cdf
}

// subscription draws count distinct clusters: the hot ones, then by the
// popularity cdf (over the clusters after them); when draws keep landing
// on clusters it has, it takes the most popular it lacks. Ascending.
func subscription(rng *rand.Rand, count, hot int, cdf []float64) []int32 {
	have := make(map[int32]bool, count)
	for u := range min(hot, count) {
		have[int32(u)] = true
	}
	for tries := 0; len(have) < count && tries < 20*count+100; tries++ {
		r, _ := slices.BinarySearch(cdf, rng.Float64())
		have[int32(hot+min(r, len(cdf)-1))] = true
	}
	for u := hot; len(have) < count; u++ {
		have[int32(u)] = true
	}
	out := make([]int32, 0, count)
	for u := range have {
		out = append(out, u)
	}
	slices.Sort(out)
	return out
}

// SampleClient is what /debug/clients says of one client that a simulated
// one copies.
type SampleClient struct {
	NodeID    string   `json:"nodeId"`
	Cluster   string   `json:"cluster"`
	UserAgent string   `json:"userAgent"`
	Kind      string   `json:"kind"`
	Protocol  string   `json:"protocol"`
	Zone      string   `json:"zone"`
	Features  []string `json:"features"`
	Types     map[string]struct {
		LastSentResources int `json:"lastSentResources"`
	} `json:"types"`
}

func (s SampleClient) kind() Kind {
	if s.Kind == "grpc" {
		return GRPC
	}
	return Envoy
}

// EDSNames is how many ClusterLoadAssignments the client's last EDS
// response carried, at least 1: its subscription when the plane sent it
// whole, else the part that changed last (a Delta client's, or a SotW
// client's when a response carried a subset, as EDS may).
func (s SampleClient) EDSNames() int {
	for t, st := range s.Types {
		if t == TypeEDS || t == "EDS" {
			return max(st.LastSentResources, 1)
		}
	}
	return 1
}

// MaxSampleBytes bounds what is read of a /debug/clients answer.
const MaxSampleBytes = 256 << 20

// ParseSample reads a /debug/clients answer ({"clients": [...]}), at most
// MaxSampleBytes.
func ParseSample(r io.Reader) ([]SampleClient, error) {
	var doc struct {
		Clients []SampleClient `json:"clients"`
	}
	lr := &io.LimitedReader{R: r, N: MaxSampleBytes + 1}
	if err := json.NewDecoder(lr).Decode(&doc); err != nil {
		return nil, fmt.Errorf("/debug/clients: %w", err)
	}
	if lr.N <= 0 {
		return nil, fmt.Errorf("/debug/clients: longer than %d bytes", MaxSampleBytes)
	}
	if len(doc.Clients) == 0 {
		return nil, fmt.Errorf("/debug/clients: no clients to copy")
	}
	return doc.Clients, nil
}
