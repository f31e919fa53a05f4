package server_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/xds/xdscache"
)

// slowClient opens an ADS stream over a raw HTTP/2 connection, asks for
// every cluster and the assignment of hot, and then reads its socket at
// the pace read sets: never, or a byte at a time. It never answers, and
// never gives the server more than 4 KB of flow-control window.
func slowClient(t *testing.T, addr, hot string, read func(net.Conn)) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", addr},
		{":path", "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	var msgs []byte
	for i, req := range []*discovery.DiscoveryRequest{
		{Node: envoyNode("slow"), TypeUrl: resource.ClusterType},
		{TypeUrl: resource.EndpointType, ResourceNames: []string{hot}},
	} {
		if i > 0 {
			req.Node = nil
		}
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, 0)
		msgs = binary.BigEndian.AppendUint32(msgs, uint32(len(b)))
		msgs = append(msgs, b...)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	// a small window, never updated: the server may send a few KB and then
	// must wait, as for a client too slow to take more
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 4096}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hdr.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, false, msgs); err != nil {
		t.Fatal(err)
	}
	go read(conn)
}

// TestSlowClientDelaysNobody: clients that read nothing, or a byte a
// second, of a large answer (every cluster, 250 KB) and never ACK hold up
// no other client: 20 flips of the cluster they all watch reach the 20
// others within a second each, and the server's heap does not grow with
// the flips the slow ones cannot take (at most one response awaits each
// one's ACK, and what the transport holds for it is bounded by flow
// control).
func TestSlowClientDelaysNobody(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var clusters []*xdscache.Entry
	for i := range 3000 {
		clusters = append(clusters, entry(t, "v1", cluster(fmt.Sprintf("svc-%04d-with-a-long-name-to-make-the-answer-large", i), int64(i%50+1))))
	}
	hot := "svc-0000-with-a-long-name-to-make-the-answer-large"
	h.apply("v1", both(resource.ClusterType, clusters...), both(resource.EndpointType, entry(t, "v1", cla(hot, 1000))))

	var fast []*sotwClient
	for i := range 20 {
		c := h.sotw(envoyNode(fmt.Sprintf("fast-%d", i)))
		c.subscribe(resource.ClusterType)
		if r := c.recv(); r.GetTypeUrl() != resource.ClusterType || len(r.GetResources()) != len(clusters) {
			t.Fatalf("%s: first response %s with %d resources, want every cluster", c.node.GetId(), r.GetTypeUrl(), len(r.GetResources()))
		} else {
			c.ack(r)
		}
		c.subscribe(resource.EndpointType, hot)
		c.ack(c.expect(resource.EndpointType, "v1", hot))
		fast = append(fast, c)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 4 {
		slowClient(t, h.addr, hot, func(conn net.Conn) {}) // reads nothing
		slowClient(t, h.addr, hot, func(conn net.Conn) {   // a byte a second
			b := make([]byte, 1)
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for range tick.C {
				if _, err := conn.Read(b); err != nil {
					return
				}
			}
		})
	}
	eventually(t, "the slow clients connected", func() bool { return h.connected("unknown")+h.connected("envoy") >= 28 })

	var slowest time.Duration
	for n := 2; n <= 21; n++ {
		v := fmt.Sprintf("v%d", n)
		began := time.Now()
		h.apply(v, both(resource.EndpointType, entry(t, v, cla(hot, uint32(1000+n)))))
		for _, c := range fast {
			c.ack(c.expect(resource.EndpointType, v, hot))
		}
		took := time.Since(began)
		slowest = max(slowest, took)
		if took > time.Second {
			t.Errorf("flip %s reached the 20 clients in %v beside 8 slow ones", v, took)
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("20 flips each reached 20 clients within %v beside 8 slow clients; the heap grew %d KiB over them", slowest.Round(time.Microsecond), grew>>10)
	if grew > 32<<20 {
		t.Errorf("the heap grew %d MiB while 8 slow clients could take nothing of 20 flips", grew>>20)
	}
}
