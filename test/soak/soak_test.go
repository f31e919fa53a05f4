package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/testkit"
)

// binary is the controlplane built once for the package.
var binary string

func TestMain(m *testing.M) { os.Exit(cpbinary.Main(m, &binary)) }

const (
	ns          = "soak"
	goodCount   = 10
	churnCount  = 5
	maxStreams  = 400 // the soak's --xds-max-streams, so the flood reaches it
	editEvery   = 200 * time.Millisecond
	deliverBy   = 10 * time.Second // an edit not at the client by then is lost
	rssLimitMiB = 400              // the chart's memory limit is 512 MiB
	logLimit    = 4 << 20          // bytes the process may log over the whole soak
)

// TestSoak serves a manifest directory with the real binary for
// POISE_SOAK_DURATION (15s unless set; make soak: 5m) while hostile actors
// work against it: manifest writers (an alias bomb, random bytes, a file
// over the size limit, a symlink to /dev/zero, a FIFO, truncate-then-write
// edits, content after "...", forbidden endpoint addresses) and xDS clients
// (unknown type URLs, a stream flood beyond the server's limits, forged NACKs
// with megabyte messages, connect/disconnect churn, oversized requests, a
// client that never reads). Meanwhile a well-behaved client follows the
// legitimate edits of one file. It must see every edit, never a state that
// lacks a cluster the files hold or shows one they do not, and never a
// forbidden address; the process must not exit, its peak RSS must stay under
// rssLimitMiB and its log under logLimit.
func TestSoak(t *testing.T) {
	duration := 15 * time.Second
	if v := os.Getenv("POISE_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("POISE_SOAK_DURATION=%q: want a positive duration such as 5m", v)
		}
		duration = d
	}
	t.Logf("soak for %v (POISE_SOAK_DURATION sets it; make soak runs 5m)", duration)
	dir := t.TempDir()
	staging := t.TempDir()
	s := &soak{t: t, dir: dir, staging: staging}
	for i := range goodCount {
		s.writeFile(fmt.Sprintf("good-%d.yaml", i), upstreamDocs(fmt.Sprintf("good-%d", i), fmt.Sprintf("10.10.%d.1", i), fmt.Sprintf("10.10.%d.2", i)))
	}
	s.writeFile("churn.yaml", churnDocs(0))
	s.writeFile("trailer.yaml", upstreamDocs("trailer", "10.30.0.1")+"...\nanything: [after the end marker\n")
	s.writeFile("flip.yaml", upstreamDocs("flip", flipAddress(0)))
	s.start()

	required := []string{ns + "/flip", ns + "/trailer"}
	for i := range goodCount {
		required = append(required, fmt.Sprintf("%s/good-%d", ns, i))
	}
	for i := range churnCount {
		required = append(required, fmt.Sprintf("%s/churn-%d", ns, i))
	}
	slices.Sort(required)
	good := &goodClient{required: required, names: append(slices.Clone(required), ns+"/bad"), seen: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	goodDone := make(chan error, 1)
	go func() { goodDone <- good.run(ctx, s.xdsAddr) }()
	testkit.Eventually(t, 20*time.Second, "the good client holds every cluster and the first flip address", func() (bool, string) {
		return good.complete() && good.sawAddress(flipAddress(0)), ""
	})

	// the hostile actors, until the end of the soak
	hostile, stopHostile := context.WithTimeout(ctx, duration)
	defer stopHostile()
	var actors sync.WaitGroup
	var counts hostileCounts
	var windows hostileWindows
	actors.Go(func() { hostileFiles(hostile, s, &counts, &windows) })
	for _, a := range []func(context.Context, *soak, *hostileCounts){
		truncatedEdits, unknownTypes, streamFlood, forgedNACKs, connectChurn, oversizedRequests, neverReads,
	} {
		actors.Go(func() { a(hostile, s, &counts) })
	}
	rss := s.sampleRSS(hostile)

	// the legitimate edits and their delivery
	type edit struct {
		address string
		written time.Time
	}
	var edits []edit
	for k := 1; hostile.Err() == nil; k++ {
		// sleep: a pace, not a wait: at least editEvery between two edits,
		// so that each written in the open can be applied before the next
		// supersedes it
		time.Sleep(editEvery)
		addr := flipAddress(k)
		s.writeFile("flip.yaml", upstreamDocs("flip", addr))
		edits = append(edits, edit{addr, time.Now()})
	}
	actors.Wait()
	last := edits[len(edits)-1]
	testkit.Eventually(t, deliverBy, "the good client receives the last edit", func() (bool, string) { return good.sawAddress(last.address), "" })

	// what the well-behaved client saw
	// an edit counts from when it could be applied: when written, or when
	// the hostile window it was written in closed. One written in the open
	// with no window opening within 500 ms must arrive; others may be
	// superseded by the next edit before the files are applied.
	var lat []time.Duration
	expected, lost, held := 0, 0, 0
	for _, e := range edits {
		from := windows.applicable(e.written)
		if !from.Equal(e.written) {
			held++
		}
		must := from.Equal(e.written) && windows.quietAfter(e.written, 500*time.Millisecond)
		if must {
			expected++
		}
		at, ok := good.firstSeen(e.address)
		switch {
		case !ok && must:
			lost++
		case !ok:
		case at.Sub(from) > deliverBy:
			t.Errorf("edit %s reached the good client %v after it could be applied; want within %v", e.address, at.Sub(from), deliverBy)
		default:
			lat = append(lat, max(0, at.Sub(from)))
		}
	}
	select {
	case err := <-goodDone:
		t.Errorf("the good client's stream ended during the soak: %v", err)
	default:
	}
	alive := s.alive()
	peak := s.peakRSS()
	good.mu.Lock()
	wrong, samples, responses := good.wrong, slices.Clone(good.samples), good.responses
	good.mu.Unlock()

	t.Logf("soak report after %v:", duration)
	t.Logf("  crashes: %d (process %s)", map[bool]int{true: 0, false: 1}[alive], map[bool]string{true: "alive", false: "exited"}[alive])
	t.Logf("  wrong publications seen by the good client: %d in %d responses", wrong, responses)
	windows.mu.Lock()
	nWindows := len(windows.spans)
	windows.mu.Unlock()
	t.Logf("  legitimate edits: %d written (%d during the %d hostile-file windows, held until they closed); %d delivered, %d of the %d that had to arrive lost; applicable → good client %s",
		len(edits), held, nWindows, len(lat), lost, expected, distOf(lat))
	t.Logf("  peak RSS %d MiB (sampled every 250ms, max %d MiB); log %d bytes", peak>>20, rss.max()>>20, s.logBytes.Load())
	t.Logf("  hostile work: %s", counts.String())
	if !alive {
		t.Errorf("the control plane exited during the soak:\n%s", s.logTail())
	}
	if wrong > 0 {
		t.Errorf("the good client saw %d wrong publications, among them:\n  %s", wrong, strings.Join(samples, "\n  "))
	}
	if lost > expected/10 {
		t.Errorf("%d of %d edits written in the open never reached the good client", lost, expected)
	}
	if peak > rssLimitMiB<<20 {
		t.Errorf("peak RSS %d MiB; want under %d MiB", peak>>20, rssLimitMiB)
	}
	if n := s.logBytes.Load(); n > logLimit {
		t.Errorf("the control plane logged %d bytes; want at most %d", n, logLimit)
	}
}

// soak is the running control plane and its manifest directory.
type soak struct {
	t              *testing.T
	dir, staging   string
	proc           *cpbinary.Process
	xdsAddr, admin string
	logBytes       atomic.Int64
	logMu          sync.Mutex
	tail           []byte
	writeMu        sync.Mutex
	stagingSeq     int
}

func (s *soak) start() {
	t := s.t
	s.xdsAddr, s.admin = cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	// Registered before StartTo's Stop, so it runs after the process has
	// ended (clean-ups run last first).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the control plane's last log lines:\n%s", s.logTail())
		}
	})
	s.proc = cpbinary.StartTo(t, s, binary, "serve", "-f", s.dir, "--xds-address", s.xdsAddr, "--admin-address", s.admin,
		"--xds-max-streams", strconv.Itoa(maxStreams))
	s.proc.WaitReady(t, "http://"+s.admin)
}

// Write counts the process's log and keeps its last 16 KiB.
func (s *soak) Write(p []byte) (int, error) {
	s.logBytes.Add(int64(len(p)))
	s.logMu.Lock()
	defer s.logMu.Unlock()
	s.tail = append(s.tail, p...)
	if over := len(s.tail) - 16<<10; over > 0 {
		s.tail = append(s.tail[:0], s.tail[over:]...)
	}
	return len(p), nil
}

func (s *soak) logTail() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return string(s.tail)
}

func (s *soak) alive() bool { return !s.proc.Exited() }

// writeFile replaces a manifest as editors and config tools do: written
// beside the directory, then renamed into it.
func (s *soak) writeFile(name, content string) {
	s.writeMu.Lock()
	s.stagingSeq++
	tmp := filepath.Join(s.staging, strconv.Itoa(s.stagingSeq))
	s.writeMu.Unlock()
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		s.t.Error(err)
		return
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, name)); err != nil {
		s.t.Error(err)
	}
}

// peakRSS is the process's high-water resident set (VmHWM).
func (s *soak) peakRSS() int64 {
	return procStatusKiB(s.proc.Pid(), "VmHWM:") << 10
}

type rssSamples struct {
	mu  sync.Mutex
	top int64
}

func (r *rssSamples) max() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.top
}

func (s *soak) sampleRSS(ctx context.Context) *rssSamples {
	r := &rssSamples{}
	go func() {
		// a sample every 250 ms until the soak ends
		every := time.NewTicker(250 * time.Millisecond)
		defer every.Stop()
		for {
			v := procStatusKiB(s.proc.Pid(), "VmRSS:") << 10
			r.mu.Lock()
			r.top = max(r.top, v)
			r.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-every.C:
			}
		}
	}()
	return r
}

func procStatusKiB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			v, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return v
		}
	}
	return 0
}

// upstreamDocs is an Upstream with one Locality and one EndpointSet.
func upstreamDocs(name string, addrs ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: %s, namespace: %s}\nspec: {}\n---\n", name, ns)
	fmt.Fprintf(&b, "apiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: %s, namespace: %s}\nspec: {upstream: %s, priority: 0, region: r1, zone: z1, weight: 1}\n---\n", name, ns, name)
	fmt.Fprintf(&b, "apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: %s, namespace: %s}\nspec:\n  upstream: %s\n  locality: {region: r1, zone: z1}\n  endpoints:\n", name, ns, name)
	for _, a := range addrs {
		fmt.Fprintf(&b, "  - {address: %s, port: 9090}\n", a)
	}
	return b.String()
}

// churnDocs are the churn upstreams; k varies their endpoints, never their set.
func churnDocs(k int) string {
	var docs []string
	for i := range churnCount {
		docs = append(docs, upstreamDocs(fmt.Sprintf("churn-%d", i), fmt.Sprintf("10.40.%d.%d", i, 1+k%200)))
	}
	return strings.Join(docs, "---\n")
}

func flipAddress(k int) string { return fmt.Sprintf("10.20.%d.%d", k/250%250, k%250+1) }

// forbidden: addresses no EDS may carry (an IP outside the special ranges
// is fine; a name is not).
func forbidden(addr string) bool {
	ip := net.ParseIP(addr)
	return ip == nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsMulticast()
}

// goodClient is a well-behaved ADS client (as Envoy): CDS and the EDS of the
// clusters the files hold (and of "bad", which they hold only refused).
type goodClient struct {
	required, names []string

	mu        sync.Mutex
	clusters  []string // the last CDS response's
	seen      map[string]time.Time
	responses int
	wrong     int
	samples   []string
	full      bool
}

func (g *goodClient) complete() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.full
}

func (g *goodClient) sawAddress(a string) bool { _, ok := g.firstSeen(a); return ok }

func (g *goodClient) firstSeen(a string) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.seen[a]
	return at, ok
}

// wrongLocked records a wrong publication.
func (g *goodClient) wrongLocked(format string, args ...any) {
	g.wrong++
	if len(g.samples) < 10 {
		g.samples = append(g.samples, fmt.Sprintf(format, args...))
	}
}

func (g *goodClient) run(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	node := &core.Node{Id: "soak-good", Cluster: "soak", UserAgentName: "envoy"}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		return err
	}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: g.names}); err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		at := time.Now()
		ack := &discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
		switch resp.GetTypeUrl() {
		case resource.ClusterType:
			g.clustersResponse(resp)
		case resource.EndpointType:
			ack.ResourceNames = g.names
			if err := g.endpointsResponse(resp, at); err != nil {
				return err
			}
		}
		if err := stream.Send(ack); err != nil {
			return err
		}
	}
}

func (g *goodClient) clustersResponse(resp *discovery.DiscoveryResponse) {
	var names []string
	for _, r := range resp.GetResources() {
		name, err := clusterName(r.GetValue())
		if err != nil {
			g.mu.Lock()
			g.wrongLocked("CDS %s: a Cluster that does not decode: %v", resp.GetVersionInfo(), err)
			g.mu.Unlock()
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.responses++
	g.clusters = names
	if !slices.Equal(names, g.required) {
		if g.full || len(names) > len(g.required) {
			g.wrongLocked("CDS %s: clusters %v, want %v", resp.GetVersionInfo(), names, g.required)
		}
		return
	}
	g.full = true
}

func (g *goodClient) endpointsResponse(resp *discovery.DiscoveryResponse, at time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.responses++
	for _, r := range resp.GetResources() {
		var cla endpoint.ClusterLoadAssignment
		if err := proto.Unmarshal(r.GetValue(), &cla); err != nil {
			return fmt.Errorf("EDS %s: %w", resp.GetVersionInfo(), err)
		}
		if !slices.Contains(g.required, cla.GetClusterName()) {
			g.wrongLocked("EDS %s: cluster %s, which no file holds valid", resp.GetVersionInfo(), cla.GetClusterName())
		}
		n := 0
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				a := e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
				n++
				if forbidden(a) {
					g.wrongLocked("EDS %s: cluster %s carries address %q", resp.GetVersionInfo(), cla.GetClusterName(), a)
				}
				if cla.GetClusterName() == ns+"/flip" {
					if _, ok := g.seen[a]; !ok {
						g.seen[a] = at
					}
				}
			}
		}
		if n == 0 && g.full {
			g.wrongLocked("EDS %s: cluster %s has no endpoints", resp.GetVersionInfo(), cla.GetClusterName())
		}
	}
	return nil
}

// clusterName decodes a Cluster and returns its name.
func clusterName(b []byte) (string, error) {
	var c cluster.Cluster
	if err := proto.Unmarshal(b, &c); err != nil {
		return "", err
	}
	return c.GetName(), nil
}

// hostileCounts is what the hostile actors did.
type hostileCounts struct {
	bombs, garbage, oversized, devices, truncations, forbiddenFiles atomic.Int64
	unknownTypes, floodStreams, floodRefused, nacks, churn          atomic.Int64
	oversizedRequests, neverReads                                   atomic.Int64
}

func (c *hostileCounts) String() string {
	return fmt.Sprintf("%d alias bombs, %d random-byte files, %d files over the size limit, %d device files (symlink to /dev/zero, FIFO), %d truncate-then-write edits, %d files with forbidden addresses; "+
		"%d unknown-type-URL requests, %d flood streams opened (%d refused at the limit), %d forged NACKs of 1 MiB, %d connect/disconnect cycles, %d oversized requests, %d clients that never read",
		c.bombs.Load(), c.garbage.Load(), c.oversized.Load(), c.devices.Load(), c.truncations.Load(), c.forbiddenFiles.Load(),
		c.unknownTypes.Load(), c.floodStreams.Load(), c.floodRefused.Load(), c.nacks.Load(), c.churn.Load(), c.oversizedRequests.Load(), c.neverReads.Load())
}

// pause sleeps d or until ctx ends; false when it ended.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// hostileWindows are the spans in which hostile files sit among the
// manifests. While one does, the whole change is refused — the files are
// applied as a full reload would apply them, all or nothing — so legitimate
// edits wait for the window to close.
type hostileWindows struct {
	mu    sync.Mutex
	spans [][2]time.Time // [opened, closed); closed zero while open
}

// applicable is when an edit written at w can be applied: at once, or when
// the window it was written in closed (zero while still open).
func (h *hostileWindows) applicable(w time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, sp := range h.spans {
		if !w.Before(sp[0]) && (sp[1].IsZero() || w.Before(sp[1])) {
			return sp[1]
		}
	}
	return w
}

// quietAfter: no window opens within d after w.
func (h *hostileWindows) quietAfter(w time.Time, d time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, sp := range h.spans {
		if sp[0].After(w) && sp[0].Sub(w) < d {
			return false
		}
	}
	return true
}

// hostileFiles opens a window every 2.5 s: for 1 s the directory also
// holds an alias bomb, random bytes, a symlink to /dev/zero, a FIFO, an
// upstream with an address no client can carry, and (every third window) a
// file over the 64 MiB limit; then they all go.
func hostileFiles(ctx context.Context, s *soak, c *hostileCounts, h *hostileWindows) {
	var b strings.Builder
	b.WriteString("apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: bomb, namespace: soak}\nspec: {}\nx: &a \"")
	b.WriteString(strings.Repeat("x", 256<<10))
	b.WriteString("\"\ny: [")
	for i := range 2000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("*a")
	}
	b.WriteString("]\n")
	bomb := b.String()
	big := "# " + strings.Repeat("x", 64<<20) + "\n"
	garbage := upstreamDocs("garbage", "10.50.0.1")
	bad := []string{"169.254.169.254", "127.0.0.1", "vm1.example.internal", "0.0.0.0", "224.0.0.1", "fe80::1"}
	r := rand.New(rand.NewPCG(1, 2))
	names := []string{"bomb.yaml", "garbage.yaml", "big.yaml", "zero.yaml", "fifo.yaml", "bad.yaml"}
	for k := 0; pause(ctx, 1500*time.Millisecond); k++ {
		h.mu.Lock()
		h.spans = append(h.spans, [2]time.Time{time.Now()})
		h.mu.Unlock()
		s.writeFile("bomb.yaml", bomb)
		c.bombs.Add(1)
		buf := make([]byte, 1+r.IntN(64<<10))
		for i := range buf {
			buf[i] = byte(r.UintN(256))
		}
		s.writeFile("garbage.yaml", garbage[:r.IntN(len(garbage))]+string(buf))
		c.garbage.Add(1)
		if k%3 == 0 {
			s.writeFile("big.yaml", big)
			c.oversized.Add(1)
		}
		if os.Symlink("/dev/zero", filepath.Join(s.dir, "zero.yaml")) == nil {
			c.devices.Add(1)
		}
		if syscall.Mkfifo(filepath.Join(s.dir, "fifo.yaml"), 0o644) == nil {
			c.devices.Add(1)
		}
		s.writeFile("bad.yaml", upstreamDocs("bad", "10.60.0.1", bad[k%len(bad)]))
		c.forbiddenFiles.Add(1)
		pause(ctx, time.Second)
		for _, n := range names {
			_ = os.Remove(filepath.Join(s.dir, n))
		}
		h.mu.Lock()
		h.spans[len(h.spans)-1][1] = time.Now()
		h.mu.Unlock()
	}
}

// truncatedEdits rewrites churn.yaml in place as a careless writer does:
// truncate, a moment of nothing, then the new content.
func truncatedEdits(ctx context.Context, s *soak, c *hostileCounts) {
	path := filepath.Join(s.dir, "churn.yaml")
	for k := 1; pause(ctx, 150*time.Millisecond); k++ {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			continue
		}
		// sleep: the file must stay empty for a moment, as it does for a
		// careless writer, for the watcher to have the chance to read it so
		time.Sleep(time.Duration(k%40) * time.Millisecond)
		_, _ = f.WriteString(churnDocs(k))
		f.Close()
		c.truncations.Add(1)
	}
}

// dial connects to addr. It is not cmd/controlplane's test dial, which ends
// with the test: the hostile actors dial over and over from their own
// goroutines until the soak's context ends, and send requests past gRPC's
// default size limit on purpose.
func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
}

// unknownTypes asks for type URLs the server does not publish.
func unknownTypes(ctx context.Context, s *soak, c *hostileCounts) {
	for k := 0; ctx.Err() == nil; k++ {
		conn, err := dial(s.xdsAddr)
		if err != nil {
			return
		}
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err == nil {
			for i := range 1000 {
				if stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "soak-types"}, TypeUrl: fmt.Sprintf("type.googleapis.com/bogus.T%d_%d", k, i)}) != nil {
					break
				}
				c.unknownTypes.Add(1)
			}
			_, _ = stream.Recv()
		}
		conn.Close()
		pause(ctx, 50*time.Millisecond)
	}
}

// streamFlood opens streams on a few connections until the server refuses
// them, holds them a while, and starts over.
func streamFlood(ctx context.Context, s *soak, c *hostileCounts) {
	for ctx.Err() == nil {
		round, cancel := context.WithTimeout(ctx, 3*time.Second)
		var conns []*grpc.ClientConn
		var wg sync.WaitGroup
		for range 6 {
			conn, err := dial(s.xdsAddr)
			if err != nil {
				break
			}
			conns = append(conns, conn)
			for range 100 {
				wg.Go(func() {
					stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(round)
					if err != nil {
						return
					}
					c.floodStreams.Add(1)
					if stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "soak-flood"}, TypeUrl: resource.ClusterType}) != nil {
						return
					}
					for {
						if _, err := stream.Recv(); err != nil {
							if strings.Contains(err.Error(), "limit") {
								c.floodRefused.Add(1)
							}
							return
						}
					}
				})
			}
		}
		<-round.Done()
		cancel()
		wg.Wait()
		for _, conn := range conns {
			conn.Close()
		}
	}
}

// forgedNACKs subscribes, then NACKs with nonces never sent and 1 MiB messages.
func forgedNACKs(ctx context.Context, s *soak, c *hostileCounts) {
	detail := &status.Status{Code: 3, Message: strings.Repeat("forged ", 150000)}
	for ctx.Err() == nil {
		conn, err := dial(s.xdsAddr)
		if err != nil {
			return
		}
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err == nil && stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "soak-nack"}, TypeUrl: resource.ClusterType}) == nil {
			go func() {
				for {
					if _, err := stream.Recv(); err != nil {
						return
					}
				}
			}()
			for i := 0; i < 200 && ctx.Err() == nil; i++ {
				if stream.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: strconv.Itoa(1000000 + i), VersionInfo: "v-forged", ErrorDetail: detail}) != nil {
					break
				}
				c.nacks.Add(1)
				pause(ctx, 10*time.Millisecond)
			}
		}
		conn.Close()
	}
}

// connectChurn connects, takes the first response and leaves.
func connectChurn(ctx context.Context, s *soak, c *hostileCounts) {
	for ctx.Err() == nil {
		conn, err := dial(s.xdsAddr)
		if err != nil {
			return
		}
		one, cancel := context.WithTimeout(ctx, 2*time.Second)
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(one)
		if err == nil && stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "soak-churn"}, TypeUrl: resource.ClusterType}) == nil {
			_, _ = stream.Recv()
		}
		cancel()
		conn.Close()
		c.churn.Add(1)
	}
}

// oversizedRequests sends a request of 8 MiB of resource names.
func oversizedRequests(ctx context.Context, s *soak, c *hostileCounts) {
	names := make([]string, 8<<10)
	for i := range names {
		names[i] = fmt.Sprintf("%04d", i) + strings.Repeat("n", 1020)
	}
	for pause(ctx, 500*time.Millisecond) {
		conn, err := dial(s.xdsAddr)
		if err != nil {
			return
		}
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err == nil && stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "soak-big"}, TypeUrl: resource.EndpointType, ResourceNames: names}) == nil {
			_, _ = stream.Recv()
			c.oversizedRequests.Add(1)
		}
		conn.Close()
	}
}

// neverReads subscribes to everything and never reads a response.
func neverReads(ctx context.Context, s *soak, c *hostileCounts) {
	for ctx.Err() == nil {
		conn, err := dial(s.xdsAddr)
		if err != nil {
			return
		}
		hold, cancel := context.WithTimeout(ctx, 5*time.Second)
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(hold)
		if err == nil {
			_ = stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "soak-stuck"}, TypeUrl: resource.ClusterType})
			_ = stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "soak-stuck"}, TypeUrl: resource.EndpointType})
			c.neverReads.Add(1)
		}
		<-hold.Done()
		cancel()
		conn.Close()
	}
}

func distOf(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	slices.Sort(d)
	q := func(f float64) time.Duration { return d[min(len(d)-1, int(f*float64(len(d))))].Round(time.Millisecond) }
	return fmt.Sprintf("min %v p50 %v p90 %v p99 %v max %v", d[0].Round(time.Millisecond), q(0.5), q(0.9), q(0.99), d[len(d)-1].Round(time.Millisecond))
}
