package server_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A client that asks for types Poise does not publish, on thousands of
// streams, SotW and Delta, is refused with InvalidArgument each time and
// leaves nothing behind: a well-behaved client's next update still arrives
// at once, and the heap is what it was.
func TestUnknownTypesLeaveNoState(t *testing.T) {
	const streams = 6000
	h := newHarness(t)
	publishV1(t, h)
	env := startEnvoy(t, h, "good")
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	ads := discovery.NewAggregatedDiscoveryServiceClient(h.conn)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wrong []error
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < streams; i += 8 {
				typeURL := fmt.Sprintf("type.googleapis.com/bogus.v%d.Thing", i)
				var err error
				if i%2 == 0 {
					s, serr := ads.StreamAggregatedResources(ctx)
					if serr != nil {
						err = serr
					} else if err = s.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, Node: envoyNode("bad")}); err == nil {
						_, err = s.Recv()
					}
				} else {
					s, serr := ads.DeltaAggregatedResources(ctx)
					if serr != nil {
						err = serr
					} else if err = s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, Node: envoyNode("bad"), ResourceNamesSubscribe: []string{"x"}}); err == nil {
						_, err = s.Recv()
					}
				}
				if status.Code(err) != codes.InvalidArgument {
					mu.Lock()
					wrong = append(wrong, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(wrong) > 0 {
		t.Fatalf("%d of %d streams asking for unknown types were not refused with InvalidArgument, e.g. %v", len(wrong), streams, wrong[0])
	}
	eventually(t, "the refused streams gone from the registry", func() bool { return len(h.clients.List()) == 1 })

	// the good client's next update arrives at once
	start := time.Now()
	h.apply("v2", put(0, EDS, entry(t, "v2", cla("c1", 9001))))
	env.expect(EDS, "v2", "c1")
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("an update reached the good client %v after %d refused streams, want within 100 ms", took, streams)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 8<<20 {
		t.Errorf("the heap grew by %d KiB over %d refused streams", grown>>10, streams)
	}
}

// The refusal names the types that are served, as clients have seen it.
func TestUnknownTypeNamesTheServedTypes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s, err := discovery.NewAggregatedDiscoveryServiceClient(h.conn).StreamAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/bogus.Thing", Node: envoyNode("bad")}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Recv()
	const want = `type "type.googleapis.com/bogus.Thing" is not served (served: CDS, EDS, LDS, RDS)`
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != want {
		t.Fatalf("got %v, want InvalidArgument %q", err, want)
	}
}
