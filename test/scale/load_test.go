package scale

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/loadgen"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/testkit"
)

// bin is the controlplane binary, built once for the package.
var bin string

func TestMain(m *testing.M) { os.Exit(cpbinary.Main(m, &bin)) }

// private is tenant-b's upstream, exported to its own namespace alone.
const private = `apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata: {name: private, namespace: tenant-b}
spec: {protocol: HTTP2, exportTo: ["."]}
---
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: private-a, namespace: tenant-b}
spec:
  upstream: private
  locality: {region: eu-west}
  endpoints:
  - {address: 10.250.0.1, port: 8080}
`

// plane is the real binary serving a generated tree over mTLS, and the
// credentials of two tenants' clients.
type plane struct {
	proc               *cpbinary.Process
	xds, admin         string
	tree               *loadgen.Tree
	root               string
	caFile             string
	tenantA, tenantB   *tls.Config
	certFileA, keyFile string
}

func startPlane(t *testing.T, upstreams int) *plane {
	t.Helper()
	p := &plane{root: t.TempDir()}
	var err error
	if p.tree, err = loadgen.Generate(p.root, upstreams); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.tree.Dir, "tenant-b-private.yaml"), []byte(private), 0o644); err != nil {
		t.Fatal(err)
	}
	ca := testkit.NewCA(t, "load test CA")
	p.caFile = ca.WriteCA(t, p.root)
	servingCert, servingKey := testkit.WriteFiles(t, p.root, "serving",
		ca.Issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour), "spiffe://poise.test/ns/poise-system/sa/poise"))
	client := func(ns string) (*tls.Config, tls.Certificate) {
		cert := ca.Issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour), "spiffe://poise.test/ns/"+ns+"/sa/app")
		return &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1"}, cert
	}
	var certA tls.Certificate
	p.tenantA, certA = client("tenant-a")
	p.tenantB, _ = client("tenant-b")
	p.certFileA, p.keyFile = testkit.WriteFiles(t, p.root, "tenant-a", certA)
	p.xds, p.admin = cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	p.proc = cpbinary.Start(t, bin, "serve", "-f", p.tree.Dir, "--xds-address", p.xds, "--admin-address", p.admin,
		"--tls-cert", servingCert, "--tls-key", servingKey, "--tls-client-ca", p.caFile)
	p.proc.WaitReady(t, "http://"+p.admin)
	return p
}

// TestLoadFleetConverges runs 200 simulated clients (Envoy-like and
// gRPC-like, SotW and Delta, gRPC-like ones two streams to a connection)
// of two tenants against the real binary over mTLS, flips endpoints, and
// holds every client to what the plane serves: each converges to the bytes a
// fresh stream of its node and identity is given after the last change,
// receives nothing it did not subscribe to, and tenant-a's never receive
// tenant-b's private upstream, which every one of them asks for.
func TestLoadFleetConverges(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the controlplane binary")
	}
	const upstreams = 30
	p := startPlane(t, upstreams)
	churn := loadgen.FileChurn{Tree: p.tree}
	clusters := append(churn.Clusters(), "tenant-b/private")
	privateAt := int32(upstreams)
	pattern := loadgen.Pattern{Envoy: 100, GRPC: 100, DeltaPercent: 50, EnvoyMin: 5, EnvoyMax: 20, GRPCMin: 1, GRPCMax: 5,
		Hot: 2, Skew: 1, Localities: 4, StreamsPerConn: 2, Metadata: map[string]string{"app": "load-test"}, Seed: 7}
	specs, err := pattern.Specs(clusters[:upstreams], nil)
	if err != nil {
		t.Fatal(err)
	}
	tenantB := 0
	for i := range specs {
		s := &specs[i]
		if s.Conn%10 == 0 { // a connection is one tenant's
			s.TLS = p.tenantB
			s.Subscribe = append(s.Subscribe, privateAt)
			tenantB++
		} else {
			s.TLS = p.tenantA
			s.Denied = []int32{privateAt}
		}
	}
	fleet, err := loadgen.NewFleet(p.xds, clusters, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	if err := fleet.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	waitSynced(t, ctx, fleet)
	t.Logf("%d clients (%d of tenant-b) on %d connections synced in %v", fleet.Clients(), tenantB, fleet.Connections(), time.Since(start))

	// 45 flips: every upstream once, the hot ones and some more twice.
	lastFlip := map[string]time.Time{}
	for i := range 45 {
		u := i % upstreams
		at := time.Now()
		lastFlip[clusters[u]] = at
		fleet.Log().Add(int32(u), at.UnixNano())
		if err := churn.Flip(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	_, expected := fleet.Log().Flips()
	waitDelivered(t, ctx, fleet, expected, func() string {
		return fmt.Sprintf("%d of %d deliveries; first error: %v", fleet.Delivered(), expected, fleet.Err())
	})
	if err := fleet.Err(); err != nil {
		t.Fatal(err)
	}
	conv := fleet.Conv.Dist()
	t.Logf("%d deliveries in %v from the start; convergence p50 %d µs, p99 %d µs, max %d µs",
		expected, time.Since(start), conv.P50Us, conv.P99Us, conv.MaxUs)
	if conv.N != expected || expected < int64(len(specs)) {
		t.Errorf("the histogram counts %d deliveries; %d were due", conv.N, expected)
	}
	c := fleet.Counters()
	if c.Listeners < int64(pattern.GRPC) || c.Routes < int64(pattern.GRPC) {
		t.Errorf("the gRPC clients received %d listeners and %d routes; want one of each per target", c.Listeners, c.Routes)
	}
	if c.Strays != 0 || c.Leaks != 0 || c.Unattributed != 0 || c.CDSLosses != 0 {
		t.Errorf("strays %d %v, leaks %d %v, unexplained updates %d, CDS losses %d: want none",
			c.Strays, c.StrayNames, c.Leaks, c.LeakNames, c.Unattributed, c.CDSLosses)
	}

	// The live fleet, as /debug/clients shows it, is a sample a pattern
	// copies: kinds, protocols, zones, features and EDS names.
	checkSample(t, ctx, p.admin, specs, clusters)

	// Each client holds what a fresh stream of its node and identity is
	// served now, decoded independently; tenant-a's are served no private.
	held := fleet.Holdings()
	for i, s := range specs {
		fresh := fetchEDS(t, ctx, p.xds, s, clusters)
		for _, h := range held[i] {
			want, ok := fresh[h.Cluster]
			if at, flipped := lastFlip[h.Cluster]; flipped && !h.Received.After(at) {
				t.Errorf("client %s: %s last changed at %v, before its last flip at %v", s.Node.ID, h.Cluster, h.Received, at)
			}
			if !ok || h.Hash != want || !h.CDS {
				t.Errorf("client %s (%s, delta %v): %s holds %x (CDS %v), a fresh stream is served %x (%v)",
					s.Node.ID, s.Node.Kind, s.Delta, h.Cluster, h.Hash, h.CDS, want, ok)
			}
		}
		if _, ok := fresh[clusters[privateAt]]; ok && s.TLS == p.tenantA {
			t.Errorf("client %s of tenant-a: a fresh stream is served %s", s.Node.ID, clusters[privateAt])
		}
		if len(fresh) != len(held[i]) {
			t.Errorf("client %s: a fresh stream is served %d resources; it subscribed to %d it may read", s.Node.ID, len(fresh), len(held[i]))
		}
	}
}

// waitSynced waits until every client of fleet holds its subscription.
func waitSynced(t *testing.T, ctx context.Context, fleet *loadgen.Fleet) {
	t.Helper()
	select {
	case <-fleet.Synced():
	case <-fleet.Failed():
		t.Fatal(fleet.Err())
	case <-ctx.Done():
		t.Fatalf("%d of %d clients hold their subscription; first error: %v", fleet.SyncedCount(), fleet.Clients(), fleet.Err())
	}
}

// waitDelivered waits, delivery by delivery, until fleet has expected
// deliveries; short says what is missing when ctx ends first.
func waitDelivered(t *testing.T, ctx context.Context, fleet *loadgen.Fleet, expected int64, short func() string) {
	t.Helper()
	for fleet.Delivered() < expected {
		select {
		case <-fleet.Changed():
		case <-fleet.Failed():
			t.Fatal(fleet.Err())
		case <-ctx.Done():
			t.Fatal(short())
		}
	}
}

// fetchEDS is what a fresh SotW stream with s's node and credentials is
// served for the EDS names s subscribes to (denied ones included): each
// ClusterLoadAssignment's name, decoded, and the hash of its bytes.
func fetchEDS(t *testing.T, ctx context.Context, addr string, s loadgen.Spec, clusters []string) map[string]uint64 {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(s.TLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range slices.Concat(s.Subscribe, s.Denied) {
		names = append(names, clusters[u])
	}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: s.Node.Proto(), TypeUrl: loadgen.TypeEDS, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("fetch for %s: %v", s.Node.ID, err)
	}
	out := map[string]uint64{}
	for _, a := range resp.GetResources() {
		var cla endpointv3.ClusterLoadAssignment
		if err := proto.Unmarshal(a.GetValue(), &cla); err != nil {
			t.Fatal(err)
		}
		out[cla.GetClusterName()] = loadgen.HashOf(a.GetValue())
	}
	return out
}

// TestLoadCommand runs `controlplane load` of the real binary, its clients
// spread over two worker processes, against the real binary over mTLS,
// flipping the tree's files: every change reaches every subscriber, the
// report reads the plane's RSS from /proc, and the plot is an SVG image.
func TestLoadCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the controlplane binary")
	}
	p := startPlane(t, 20)
	plot := filepath.Join(t.TempDir(), "convergence.svg")
	profiles := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Two phases on one fleet: the hot clusters (every client's), then
	// the clusters nearest 10 % of the clients (5 of 50).
	cmd := exec.CommandContext(ctx, bin, "load", "--xds-address", p.xds, "--pid", fmt.Sprint(p.proc.Pid()), "--admin-address", p.admin,
		"--churn", "files", "--tree", p.root, "--upstreams", "20", "--envoy", "20", "--grpc", "30", "--envoy-clusters", "3-10",
		"--streams-per-connection", "2", "--procs", "2", "--phase", "hot:hot:20:300ms", "--phase", "tail:share=10:50:400ms",
		"--idle", "0", "--drain", "60s", "--profile-dir", profiles,
		"--tls-cert", p.certFileA, "--tls-key", p.keyFile, "--tls-ca", p.caFile, "-o", "json", "--plot", plot, "--log-format", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("load: %v\n%s", err, stderr.String())
	}
	var rep loadgen.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, stdout.String())
	}
	t.Logf("report: %+v", rep)
	if rep.Clients != 50 || rep.Envoy != 20 || rep.GRPC != 30 || rep.Procs != 2 || rep.Connections != 35 {
		t.Errorf("clients %d (envoy %d, grpc %d) on %d connections from %d processes; want 50 (20, 30) on 35 from 2",
			rep.Clients, rep.Envoy, rep.GRPC, rep.Connections, rep.Procs)
	}
	if rep.Changes < 1 || rep.Expected < rep.Changes || rep.Delivered != rep.Expected || rep.Convergence.N != rep.Delivered {
		t.Errorf("%d changes, %d deliveries due, %d delivered, %d in the histogram", rep.Changes, rep.Expected, rep.Delivered, rep.Convergence.N)
	}
	if rep.Counters.Strays != 0 {
		t.Errorf("strays: %d %v", rep.Counters.Strays, rep.Counters.StrayNames)
	}
	if rep.Plane == nil || rep.Plane.RSSStartBytes <= 0 || rep.Plane.RSSEndBytes <= 0 || rep.Plane.LiveHeapStartBytes <= 0 {
		t.Errorf("plane stats %+v: want its RSS read from /proc and its live heap from its admin port", rep.Plane)
	}
	checkPhases(t, rep, profiles)
	svg, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(svg), "<svg ") || !strings.Contains(string(svg), "<polyline") || !strings.Contains(string(svg), "p99 ") {
		t.Errorf("the plot is no convergence CDF:\n%s", svg)
	}
	for d := xml.NewDecoder(bytes.NewReader(svg)); ; {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the plot is not well-formed XML: %v\n%s", err, svg)
		}
	}
}

// checkPhases checks the report of TestLoadCommand's two phases: each
// changed what it selected, got every delivery it was due, and the run's
// figures sum the phases'.
func checkPhases(t *testing.T, rep loadgen.Report, profiles string) {
	t.Helper()
	if len(rep.Phases) != 2 {
		t.Fatalf("%d phases reported, want 2: %+v", len(rep.Phases), rep.Phases)
	}
	hot, tail := rep.Phases[0], rep.Phases[1]
	if hot.Name != "hot" || hot.Targets < 1 || hot.Subscribers != float64(rep.Clients) {
		t.Errorf("phase %s changed %d clusters of %.1f subscribers; want hot: each of all %d clients", hot.Name, hot.Targets, hot.Subscribers, rep.Clients)
	}
	if tail.Name != "tail" || tail.Targets < 1 || tail.Subscribers >= hot.Subscribers {
		t.Errorf("phase %s changed %d clusters of %.1f subscribers; want fewer than the hot ones' %.1f", tail.Name, tail.Targets, tail.Subscribers, hot.Subscribers)
	}
	var changes, delivered int64
	var conv int64
	var generator float64
	for _, ph := range rep.Phases {
		// The kernel counts a process's CPU in ticks (10 ms): a phase this
		// short may read none when other work holds the cores. A reading
		// gives both figures; the run's, with its start, is always read.
		if ph.GeneratorCPUSeconds < 0 || (ph.GeneratorCPUSeconds > 0) != (ph.GeneratorPerDeliveryUs > 0) {
			t.Errorf("phase %s: the generator's CPU %.3f s, %.1f µs a delivery: want both read", ph.Name, ph.GeneratorCPUSeconds, ph.GeneratorPerDeliveryUs)
		}
		generator += ph.GeneratorCPUSeconds
		if ph.Changes < 1 || ph.Delivered != ph.Expected || ph.Convergence.N != ph.Delivered || ph.DrainTimedOut {
			t.Errorf("phase %s: %d changes, %d deliveries due, %d delivered, %d in its histogram (drain timed out: %v)",
				ph.Name, ph.Changes, ph.Expected, ph.Delivered, ph.Convergence.N, ph.DrainTimedOut)
		}
		if ph.Plane == nil || ph.Plane.CPUSeconds <= 0 || ph.Plane.RSSMaxBytes <= 0 {
			t.Errorf("phase %s: plane figures %+v", ph.Name, ph.Plane)
		} else if p := ph.Plane; p.Responses < 1 || p.PlaneConverged < 1 || p.PlaneWithin1s > p.PlaneWithin2s || p.PlaneWithin2s > 1 {
			t.Errorf("phase %s: the plane's counters from its /metrics: %.0f responses, %.0f converged, %.3f within 1 s, %.3f within 2 s",
				ph.Name, p.Responses, p.PlaneConverged, p.PlaneWithin1s, p.PlaneWithin2s)
		}
		if fi, err := os.Stat(filepath.Join(profiles, "cpu-"+ph.Name+".pb.gz")); err != nil || fi.Size() == 0 {
			t.Errorf("phase %s: no CPU profile (%v)", ph.Name, err)
		}
		changes, delivered, conv = changes+ph.Changes, delivered+ph.Delivered, conv+ph.Convergence.N
	}
	if rep.GeneratorCPUSeconds <= 0 {
		t.Errorf("the run's generator CPU %.3f s: want it read", rep.GeneratorCPUSeconds)
	}
	if generator > rep.GeneratorCPUSeconds {
		t.Errorf("the phases' generator CPU sums to %.3f s, more than the run's %.3f s (with its start)", generator, rep.GeneratorCPUSeconds)
	}
	if changes != rep.Changes || delivered != rep.Delivered || conv != rep.Convergence.N {
		t.Errorf("the phases sum to %d changes, %d deliveries, %d measured; the run reports %d, %d, %d",
			changes, delivered, conv, rep.Changes, rep.Delivered, rep.Convergence.N)
	}
	if fi, err := os.Stat(filepath.Join(profiles, "heap-start.pb.gz")); err != nil || fi.Size() == 0 {
		t.Errorf("no heap profile after the start (%v)", err)
	}
}

// checkSample reads the plane's /debug/clients while specs are connected
// and draws a fleet of the same size from it: the same number of each
// kind and protocol, the zones and features its clients sent, as many EDS
// names as a client's last EDS response carried.
func checkSample(t *testing.T, ctx context.Context, admin string, specs []loadgen.Spec, clusters []string) {
	t.Helper()
	sample, err := loadgen.FetchSample(ctx, "http://"+admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sample) != len(specs) {
		t.Fatalf("/debug/clients lists %d clients, %d are connected", len(sample), len(specs))
	}
	copied, err := loadgen.Pattern{Envoy: len(sample), Sample: sample, IDPrefix: "copy-"}.Specs(clusters, nil)
	if err != nil {
		t.Fatal(err)
	}
	type shape struct {
		kind        loadgen.Kind
		delta       bool
		zone        string
		perEndpoint bool
	}
	count := func(ss []loadgen.Spec) map[shape]int {
		m := map[shape]int{}
		for _, s := range ss {
			features := s.Node.Features
			if features == nil {
				features = loadgen.DefaultFeatures(s.Node.Kind)
			}
			m[shape{s.Node.Kind, s.Delta, s.Node.Region + "/" + s.Node.Zone, slices.Contains(features, loadgen.FeatureNoOverprovisioning)}]++
		}
		return m
	}
	if got, want := count(copied), count(specs); !reflect.DeepEqual(got, want) {
		t.Errorf("the copied fleet's shapes %v, the live one's %v", got, want)
	}
	byID := map[string]loadgen.Spec{}
	for _, s := range specs {
		byID[s.Node.ID] = s
	}
	for i, sm := range sample {
		s, ok := byID[sm.NodeID]
		// as many as its last EDS response carried: at most its subscription
		if n := len(copied[i].Subscribe); !ok || n < 1 || n > len(s.Subscribe) {
			t.Errorf("%s (listed %v) subscribes to %d; its copy to %d", sm.NodeID, ok, len(s.Subscribe), n)
		}
	}
}
