package server_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/test/testkit"
)

// held is what one client holds: type URL → name → marshalled resource.
type held struct {
	mu   sync.Mutex
	view int
	res  map[string]map[string][]byte
	err  error
}

func decodeName(a *anypb.Any) (string, error) {
	m, err := a.UnmarshalNew()
	if err != nil {
		return "", err
	}
	switch r := m.(type) {
	case *endpointv3.ClusterLoadAssignment:
		return r.GetClusterName(), nil
	case interface{ GetName() string }:
		return r.GetName(), nil
	}
	return "", fmt.Errorf("unnamed %T", m)
}

// matches reports whether the client holds exactly what its view publishes.
func (s *held) matches(want map[string]map[string][]byte) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false, s.err
	}
	for typeURL, w := range want {
		if !maps.EqualFunc(s.res[typeURL], w, bytes.Equal) {
			return false, nil
		}
	}
	return true, nil
}

// runSotW receives, records and ACKs every response until the stream ends.
func runSotW(c *sotwClient, s *held) {
	for r := range c.in {
		s.mu.Lock()
		m := s.res[r.GetTypeUrl()]
		if m == nil || r.GetTypeUrl() == CDS { // CDS is state of the world
			m = map[string][]byte{}
			s.res[r.GetTypeUrl()] = m
		}
		for _, a := range r.GetResources() {
			n, err := decodeName(a)
			if err != nil {
				s.err = err
			}
			m[n] = a.GetValue()
		}
		s.mu.Unlock()
		if err := c.request(r.GetTypeUrl(), c.subs[r.GetTypeUrl()], r.GetVersionInfo(), r.GetNonce(), ""); err != nil {
			return // the stream is closing
		}
	}
}

func runDelta(c *deltaClient, s *held) {
	for r := range c.in {
		s.mu.Lock()
		m := s.res[r.GetTypeUrl()]
		if m == nil {
			m = map[string][]byte{}
			s.res[r.GetTypeUrl()] = m
		}
		for _, res := range r.GetResources() {
			m[res.GetName()] = res.GetResource().GetValue()
		}
		for _, n := range r.GetRemovedResources() {
			delete(m, n)
		}
		s.mu.Unlock()
		if err := c.s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}); err != nil {
			return
		}
	}
}

// TestConcurrentAppliesConverge publishes from several goroutines while
// SotW and Delta clients ACK continuously; every client must end up holding
// exactly the final resources of its view. Run it with -race.
func TestConcurrentAppliesConverge(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const nClusters, appliers, appliesEach = 8, 4, 40
	var clusterNames []string
	var initial []xdscache.Change
	for i := range nClusters {
		n := fmt.Sprintf("c%d", i)
		clusterNames = append(clusterNames, n)
		initial = append(initial, both(CDS, entry(t, "init", cluster(n, 1)))...)
		initial = append(initial, put(0, EDS, entry(t, "init", cla(n, 1000)))...)
		initial = append(initial, put(1, EDS, entry(t, "init", cla(n, 2000)))...)
	}
	h.apply("init", initial)

	var (
		states  []*held
		closers []func()
		wg      sync.WaitGroup
	)
	newHeld := func(view int) *held {
		s := &held{view: view, res: map[string]map[string][]byte{}}
		states = append(states, s)
		return s
	}
	for i := range 2 {
		c := h.sotw(envoyNode(fmt.Sprintf("envoy-sotw-%d", i)))
		c.subscribe(CDS)
		c.subscribe(EDS, clusterNames...)
		s := newHeld(0)
		closers = append(closers, c.close)
		wg.Go(func() { runSotW(c, s) })
	}
	for i := range 2 {
		c := h.sotw(grpcNode(fmt.Sprintf("grpc-%d", i)))
		c.subscribe(CDS, clusterNames...)
		c.subscribe(EDS, clusterNames...)
		s := newHeld(1)
		closers = append(closers, c.close)
		wg.Go(func() { runSotW(c, s) })
	}
	for i := range 2 {
		c := h.delta(envoyNode(fmt.Sprintf("envoy-delta-%d", i)))
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: CDS})
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EDS, ResourceNamesSubscribe: clusterNames})
		s := newHeld(0)
		closers = append(closers, c.close)
		wg.Go(func() { runDelta(c, s) })
	}

	var pub sync.WaitGroup
	for g := range appliers {
		pub.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range appliesEach {
				v := fmt.Sprintf("g%d-%d", g, i)
				var changes []xdscache.Change
				for range 1 + r.IntN(3) {
					n := clusterNames[r.IntN(nClusters)]
					switch r.IntN(3) {
					case 0: // a cluster and its endpoints
						e, _ := xdscache.NewEntry(n, v, cluster(n, int64(1+r.IntN(100))))
						changes = append(changes, both(CDS, e)...)
						fallthrough
					case 1: // endpoints in both views
						for view := range 2 {
							e, _ := xdscache.NewEntry(n, v, cla(n, uint32(1+r.IntN(60000))))
							changes = append(changes, put(view, EDS, e)...)
						}
					case 2: // endpoints in one view
						e, _ := xdscache.NewEntry(n, v, cla(n, uint32(1+r.IntN(60000))))
						changes = append(changes, put(r.IntN(2), EDS, e)...)
					}
				}
				h.cache.Apply(xdscache.Update{Version: v, Changes: changes})
				if r.IntN(4) == 0 {
					// Now and then the clients read and answer between publications, not only after bursts.
					// sleep: the pause is what lets them
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	pub.Wait()

	want := func(view int) map[string]map[string][]byte {
		out := map[string]map[string][]byte{}
		for typeURL, es := range h.cache.Resources(view) {
			if typeURL != CDS && typeURL != EDS {
				continue
			}
			m := map[string][]byte{}
			for _, e := range es {
				m[e.Name] = e.Any.GetValue()
			}
			out[typeURL] = m
		}
		return out
	}
	final := []map[string]map[string][]byte{want(0), want(1)}
	testkit.Eventually(t, 20*time.Second, "every client holds the final resources of its view", func() (bool, string) {
		for i, s := range states {
			ok, err := s.matches(final[s.view])
			if err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
			if !ok {
				s.mu.Lock()
				defer s.mu.Unlock()
				return false, fmt.Sprintf("client %d (view %d) holds %d clusters, %d CLAs", i, s.view, len(s.res[CDS]), len(s.res[EDS]))
			}
		}
		return true, ""
	})
	for _, c := range h.clients.List() {
		for typ, ts := range c.Types {
			if ts.NACKs != 0 {
				t.Errorf("%s %s: %d NACKs", c.NodeID, typ, ts.NACKs)
			}
		}
	}
	for _, c := range closers {
		c()
	}
	wg.Wait()
}
