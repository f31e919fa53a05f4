package loadgen

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestPatternSpecs: a pattern draws the same fleet every time, a process's
// share keeps whole connections and the shares make the fleet, counts stay
// in their range with the hot clusters in every subscription, Delta is
// spread as asked, zones cycle over the localities.
func TestPatternSpecs(t *testing.T) {
	clusters := FileChurn{Tree: &Tree{N: 200}}.Clusters()
	p := Pattern{Envoy: 40, GRPC: 61, DeltaPercent: 30, EnvoyMin: 20, EnvoyMax: 50, GRPCMin: 1, GRPCMax: 5,
		Hot: 3, Skew: 1.1, Localities: 5, StreamsPerConn: 2, Seed: 9}
	all, err := p.Specs(clusters, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := p.Specs(clusters, nil)
	if !reflect.DeepEqual(all, again) {
		t.Error("the same pattern drew two fleets")
	}
	var shares []Spec
	for i := range 3 {
		s, err := p.Specs(clusters, func(conn int) bool { return conn%3 == i })
		if err != nil {
			t.Fatal(err)
		}
		shares = append(shares, s...)
	}
	slices.SortFunc(shares, func(a, b Spec) int { return strings.Compare(a.Node.ID, b.Node.ID) })
	if !reflect.DeepEqual(all, shares) {
		t.Error("three shares are not the fleet")
	}
	conns, delta := map[int]int{}, 0
	zones := map[string]bool{}
	popular := 0
	for _, s := range all {
		conns[s.Conn]++
		lo, hi := p.EnvoyMin, p.EnvoyMax
		if s.Node.Kind == GRPC {
			lo, hi = p.GRPCMin, p.GRPCMax
		}
		n := len(s.Subscribe)
		if n < max(lo, 1) || n > hi || !slices.IsSorted(s.Subscribe) || len(slices.Compact(slices.Clone(s.Subscribe))) != n {
			t.Errorf("%s subscribes to %d clusters %v; want %d to %d, ascending", s.Node.ID, n, s.Subscribe, lo, hi)
		}
		for u := range min(p.Hot, n) {
			if s.Subscribe[u] != int32(u) {
				t.Errorf("%s lacks hot cluster %d: %v", s.Node.ID, u, s.Subscribe)
			}
		}
		if slices.Contains(s.Subscribe, int32(p.Hot)) {
			popular++
		}
		if s.Delta {
			delta++
		}
		zones[s.Node.Region+"/"+s.Node.Zone] = true
	}
	if len(all) != 101 || len(conns) != 40+31 || delta != 101*30/100 || len(zones) != 5 {
		t.Errorf("%d clients on %d connections, %d Delta, zones %v", len(all), len(conns), delta, zones)
	}
	// the most popular of the others is in most Envoy subscriptions
	if popular < 30 {
		t.Errorf("cluster %d, the most popular after the hot ones, is in %d subscriptions", p.Hot, popular)
	}
}
