package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdsname"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

// callCredsEnv turns on call credentials in grpc-go's xDS bootstrap
// (gRFC A97: xds_servers[].call_creds, jwt_token_file), which grpc-go reads
// once, when its packages initialize: before TestMain can set anything.
const callCredsEnv = "GRPC_EXPERIMENTAL_XDS_BOOTSTRAP_CALL_CREDS"

// withCallCreds runs the test binary again, in place, with callCredsEnv
// set, unless it already is; it returns only when it is set or the exec
// failed. The suite's grpc-go xDS clients then send a projected token from
// their bootstrap, as a proxyless gRPC pod would.
func withCallCreds() error {
	if os.Getenv(callCredsEnv) == "true" {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("test/kube: setting %s: %w", callCredsEnv, err)
	}
	err = syscall.Exec(exe, os.Args, append(os.Environ(), callCredsEnv+"=true"))
	return fmt.Errorf("test/kube: running %s again with %s=true: %w", exe, callCredsEnv, err)
}

// tenantNamespace creates a namespace named base-N, N unique in the run.
func tenantNamespace(t *testing.T, base string) string {
	t.Helper()
	needEnv(t)
	name := fmt.Sprintf("%s-%d", base, nsCounter.Add(1))
	if err := k8s.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// exported is one Upstream of the test, with its one backend.
type exported struct {
	key      topology.Key
	exportTo []string // nil: the plane's default
	backend  *splitcheck.Backend
}

func (e exported) create(t *testing.T) {
	t.Helper()
	for _, o := range []client.Object{
		&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: e.key.Name, Namespace: e.key.Namespace}, Spec: v1alpha1.UpstreamSpec{
			Protocol: v1alpha1.ProtocolGRPC, AddressPolicy: &v1alpha1.AddressPolicy{AllowLoopback: true}, ExportTo: e.exportTo}},
		&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: e.key.Name + "-eu", Namespace: e.key.Namespace}, Spec: v1alpha1.EndpointSetSpec{
			Upstream: e.key.Name, Locality: v1alpha1.LocalityID{Region: "eu-west", Zone: "eu-west-a"},
			Endpoints: []v1alpha1.Endpoint{{Address: "127.0.0.1", Port: e.backend.Port}}}},
	} {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s/%s: %v", o, o.GetNamespace(), o.GetName(), err)
		}
	}
}

// envoyClient is an Envoy-like ADS client: over one stream, SotW or
// Delta, it subscribes to every cluster (wildcard CDS), then to the
// endpoints of each cluster it holds and of extra names it asks for by
// name, and ACKs every response, as Envoy does.
type envoyClient struct {
	id    string
	delta bool
	extra map[string]bool

	mu        sync.Mutex
	clusters  map[string]bool // held now
	endpoints map[string]bool // ClusterLoadAssignments held now, of the clusters it holds
	leaked    map[string]bool // extra names it was sent, which it must never be
	responses int
	err       error
}

func startEnvoyClient(t *testing.T, conn *grpc.ClientConn, nodeID, ns, sa string, delta bool, extra ...string) *envoyClient {
	t.Helper()
	c := &envoyClient{id: nodeID, delta: delta, extra: map[string]bool{}, clusters: map[string]bool{}, endpoints: map[string]bool{}, leaked: map[string]bool{}}
	for _, n := range extra {
		c.extra[n] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	node := claims(nodeID, ns, sa)
	go func() {
		defer close(done)
		ads := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)
		var err error
		if delta {
			var s discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
			if s, err = ads.DeltaAggregatedResources(ctx); err == nil {
				err = c.runDelta(s, node)
			}
		} else {
			var s discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient
			if s, err = ads.StreamAggregatedResources(ctx); err == nil {
				err = c.runSotw(s, node)
			}
		}
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return c
}

// wanted is what it asks endpoints for: the clusters it holds and extra.
func (c *envoyClient) wanted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Collect(maps.Keys(c.clusters))
	for n := range c.extra {
		if !c.clusters[n] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// gotEndpoints records ClusterLoadAssignments received (and removed).
func (c *envoyClient) gotEndpoints(resources []*anypb.Any, removed []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range resources {
		var cla endpointv3.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			return err
		}
		if c.extra[cla.GetClusterName()] && !c.clusters[cla.GetClusterName()] {
			c.leaked[cla.GetClusterName()] = true
		}
		c.endpoints[cla.GetClusterName()] = true
	}
	for _, n := range removed {
		delete(c.endpoints, n)
	}
	c.responses++
	return nil
}

// gotClusters records clusters received: all it holds (SotW) or those
// updated and removed (Delta). A cluster gone takes its endpoints.
func (c *envoyClient) gotClusters(resources []*anypb.Any, removed []string, all bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if all {
		clear(c.clusters)
	}
	for _, a := range resources {
		var cl clusterv3.Cluster
		if err := a.UnmarshalTo(&cl); err != nil {
			return err
		}
		c.clusters[cl.GetName()] = true
	}
	for _, n := range removed {
		delete(c.clusters, n)
	}
	for n := range c.endpoints {
		if !c.clusters[n] {
			delete(c.endpoints, n)
		}
	}
	c.responses++
	return nil
}

func (c *envoyClient) runSotw(s discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient, node *core.Node) error {
	if err := s.Send(&discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		return err
	}
	var edsNames []string
	var edsVersion, edsNonce string
	for {
		resp, err := s.Recv()
		if err != nil {
			return err
		}
		switch resp.GetTypeUrl() {
		case resource.ClusterType:
			if err := c.gotClusters(resp.GetResources(), nil, true); err != nil {
				return err
			}
			if err := s.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
				return err
			}
			if want := c.wanted(); !slices.Equal(want, edsNames) {
				edsNames = want
				if err := s.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: edsNames,
					VersionInfo: edsVersion, ResponseNonce: edsNonce}); err != nil {
					return err
				}
			}
		case resource.EndpointType:
			if err := c.gotEndpoints(resp.GetResources(), nil); err != nil {
				return err
			}
			edsVersion, edsNonce = resp.GetVersionInfo(), resp.GetNonce()
			if err := s.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: edsNames,
				VersionInfo: edsVersion, ResponseNonce: edsNonce}); err != nil {
				return err
			}
		}
	}
}

func (c *envoyClient) runDelta(s discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, node *core.Node) error {
	if err := s.Send(&discoverygrpc.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*"}}); err != nil {
		return err
	}
	subscribed := map[string]bool{}
	for {
		resp, err := s.Recv()
		if err != nil {
			return err
		}
		var as []*anypb.Any
		for _, r := range resp.GetResources() {
			as = append(as, r.GetResource())
		}
		switch resp.GetTypeUrl() {
		case resource.ClusterType:
			if err := c.gotClusters(as, resp.GetRemovedResources(), false); err != nil {
				return err
			}
			if err := s.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: resp.GetNonce()}); err != nil {
				return err
			}
			want := c.wanted()
			var sub, unsub []string
			for _, n := range want {
				if !subscribed[n] {
					sub, subscribed[n] = append(sub, n), true
				}
			}
			for n := range subscribed {
				if !slices.Contains(want, n) {
					unsub = append(unsub, n)
					delete(subscribed, n)
				}
			}
			if len(sub)+len(unsub) > 0 {
				if err := s.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: sub,
					ResourceNamesUnsubscribe: unsub}); err != nil {
					return err
				}
			}
		case resource.EndpointType:
			if err := c.gotEndpoints(as, resp.GetRemovedResources()); err != nil {
				return err
			}
			if err := s.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResponseNonce: resp.GetNonce()}); err != nil {
				return err
			}
		}
	}
}

// ofTenants is the names of the set that belong to one of the test's
// namespaces (an upstream's "ns/name", a SpatialDomain's "spatial:ns:..."),
// sorted; the others are other tests' objects of the same apiserver.
func ofTenants(set map[string]bool, namespaces ...string) (mine, others []string) {
	for n := range set {
		own := false
		for _, ns := range namespaces {
			if strings.HasPrefix(n, ns+"/") || strings.Contains(n, ":"+ns+":") {
				own = true
			}
		}
		if own {
			mine = append(mine, n)
		} else {
			others = append(others, n)
		}
	}
	slices.Sort(mine)
	slices.Sort(others)
	return mine, others
}

// waitHolds waits until the client holds exactly want of the test's
// namespaces' clusters, the endpoints of each, and nothing extra; it
// returns the other tests' clusters it holds.
func (c *envoyClient) waitHolds(t *testing.T, phase string, want []string, namespaces ...string) []string {
	t.Helper()
	var others []string
	testkit.Eventually(t, 20*time.Second, fmt.Sprintf("%s: %s holds %v", phase, c.id, want), func() (bool, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.err != nil {
			t.Fatalf("%s: %s: the stream ended: %v", phase, c.id, c.err)
		}
		if len(c.leaked) > 0 {
			t.Fatalf("%s: %s was sent the endpoints of %v, which it asked for by name and may not read", phase, c.id, slices.Collect(maps.Keys(c.leaked)))
		}
		var mine, eps []string
		mine, others = ofTenants(c.clusters, namespaces...)
		eps, _ = ofTenants(c.endpoints, namespaces...)
		return slices.Equal(mine, want) && slices.Equal(eps, want),
			fmt.Sprintf("clusters %v, endpoints %v after %d responses", mine, eps, c.responses)
	})
	return others
}

// grpcXDSClient dials xds:///listener through grpc-go's own xDS resolver
// with a bootstrap of its own: TLS to the plane (channel_creds tls, its CA
// read by grpc-go's file_watcher certificate provider) and the pod's
// projected token from a file as call credentials (call_creds
// jwt_token_file), its node claiming the pod's namespace and service
// account.
func grpcXDSClient(t *testing.T, xdsAddr, caFile, tokenFile, nodeID, ns, sa, listener string) *grpc.ClientConn {
	t.Helper()
	return splitcheck.DialXDS(t, map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":    "passthrough:///" + xdsAddr,
			"channel_creds": []any{map[string]any{"type": "tls", "config": map[string]any{"ca_certificate_file": caFile}}},
			"call_creds":    []any{map[string]any{"type": "jwt_token_file", "config": map[string]any{"jwt_token_file": tokenFile}}},
		}},
		"node": map[string]any{"id": nodeID, "cluster": "poise-tests", "metadata": map[string]any{"NAMESPACE": ns, "SERVICE_ACCOUNT": sa},
			"locality": map[string]any{"region": "eu-west", "zone": "eu-west-a"}},
	}, listener)
}

// call makes one RPC through conn, waiting up to wait for the channel,
// and returns the backend that served it.
func call(conn *grpc.ClientConn, wait time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var md metadata.MD
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true), grpc.Header(&md)); err != nil {
		return "", err
	}
	if v := md.Get("x-backend"); len(v) == 1 {
		return v[0], nil
	}
	return "", fmt.Errorf("no x-backend header in %v", md)
}

// runBinary runs the controlplane binary and returns its stdout.
func runBinary(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("controlplane %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// TestExportToAcrossTenants: one plane in Kubernetes mode serves two
// tenants, --xds-auth=token over TLS and --default-export-to ".". Each
// tenant has an Upstream of its own ("."), one for every namespace ("*")
// and one for the other tenant by name; tenant-a also one that sets none
// and a SpatialDomain ("."). In each namespace a pod's projected token
// authenticates an Envoy-like client over SotW and one over Delta (every
// cluster, then each one's endpoints, and the other tenant's private one
// by name) and a grpc-go xDS client whose bootstrap sends the token. Each
// holds exactly what exportTo lets its namespace read; tenant-b's grpc-go
// client calls tenant-a's upstream exported to it and cannot resolve
// tenant-a's private one; an exportTo edit through the apiserver moves
// the private one in and out of tenant-b's clients only. /debug/clients,
// `controlplane status` and `controlplane explain --source=kubernetes
// --client-namespace` each say why tenant-b does not see it.
func TestExportToAcrossTenants(t *testing.T) {
	t.Parallel()
	nA, nB := tenantNamespace(t, "tenant-a"), tenantNamespace(t, "tenant-b")
	bin := cpbinary.Build(t)
	backends := splitcheck.StartBackends(t, "127.0.0.1", 7)
	key := func(ns, name string) topology.Key { return topology.Key{Namespace: ns, Name: name} }
	ups := []exported{
		{key(nA, "private"), []string{"."}, backends[0]},
		{key(nA, "shared"), []string{"*"}, backends[1]},
		{key(nA, "partner"), []string{".", nB}, backends[2]},
		{key(nA, "plain"), nil, backends[3]},
		{key(nB, "private"), []string{"."}, backends[4]},
		{key(nB, "shared"), []string{"*"}, backends[5]},
		{key(nB, "partner"), []string{".", nA}, backends[6]},
	}
	for _, u := range ups {
		u.create(t)
	}
	// the plane reads every namespace, and serves one spatial virtual host
	// per domain name: the name is this run's own (another "maps", of a run
	// before it, say, would share its virtual host)
	domain := key(nA, "maps-"+nA)
	for _, o := range []client.Object{
		&v1alpha1.SpatialDomain{ObjectMeta: metav1.ObjectMeta{Name: domain.Name, Namespace: nA}, Spec: v1alpha1.SpatialDomainSpec{
			ExportTo: []string{"."},
			Replicas: []v1alpha1.SpatialReplica{{Name: "eu", Upstream: "plain", Region: "eu-west"}},
			Products: []v1alpha1.SpatialProduct{{Name: "tiles", PathPrefix: "/tiles", AllowedRegions: []string{"eu-west"}}},
		}},
		&v1alpha1.Partition{ObjectMeta: metav1.ObjectMeta{Name: "world", Namespace: nA}, Spec: v1alpha1.PartitionSpec{
			Domain: domain.Name, Extent: v1alpha1.PartitionExtent{West: -180, South: -90, East: 180, North: 90}, Replicas: []string{"eu"}}},
	} {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	cl := func(ns, name string) string { return xdsname.Cluster(key(ns, name)) }
	spatial := []string{xdsname.ReplicaCluster(domain, "eu"), xdsname.PoolCluster(domain, "tiles")}
	// what each tenant may read of both namespaces, sorted
	readA := sorted(append([]string{cl(nA, "private"), cl(nA, "shared"), cl(nA, "partner"), cl(nA, "plain"), cl(nB, "shared"), cl(nB, "partner")}, spatial...)...)
	readB := sorted(cl(nB, "private"), cl(nB, "shared"), cl(nB, "partner"), cl(nA, "shared"), cl(nA, "partner"))

	// The plane reads every namespace, so the other tests' objects too: the
	// Lease held for someone else keeps it from writing their status, and
	// the default "." keeps them from either tenant unless they are exported
	// to "*".
	holdLease(t, nA, "poise-status-writer")
	ca := newTokenCA(t)
	p := startPlaneWith(t, "", "exportto", func(c *controlplane.Config) {
		c.LeaderElectionNamespace = nA
		c.NoRemoteClusters = true
		c.TLS = ca.files
		c.XDSAuth = []string{controlplane.AuthToken}
		c.XDSTokenAudience = "poise"
		c.DefaultExportTo = []string{"."}
	})
	dir := t.TempDir()
	caFile := ca.caFile

	type tenant struct {
		ns, other    string
		read         []string
		sotw, delta  *envoyClient
		w            *workload
		tokenFile    string
		grpcPrivate  *grpc.ClientConn // the other tenant's private upstream
		grpcExported *grpc.ClientConn // the other tenant's upstream exported to this one
	}
	tenants := []*tenant{{ns: nA, other: nB, read: readA}, {ns: nB, other: nA, read: readB}}
	for _, tn := range tenants {
		tn.w = newWorkload(t, tn.ns)
		conn := ca.dialToken(t, p.addrs.XDS, tn.w.token(t, "poise"))
		hidden := cl(tn.other, "private")
		tn.sotw = startEnvoyClient(t, conn, "envoy-sotw."+tn.ns, tn.ns, tn.w.sa, false, hidden)
		tn.delta = startEnvoyClient(t, conn, "envoy-delta."+tn.ns, tn.ns, tn.w.sa, true, hidden)
		tn.tokenFile = filepath.Join(dir, tn.ns+".token")
		if err := os.WriteFile(tn.tokenFile, []byte(tn.w.token(t, "poise")), 0o600); err != nil {
			t.Fatal(err)
		}
		tn.grpcPrivate = grpcXDSClient(t, p.addrs.XDS, caFile, tn.tokenFile, "grpc."+tn.ns, tn.ns, tn.w.sa, translate.ListenerName(key(tn.other, "private")))
		tn.grpcExported = grpcXDSClient(t, p.addrs.XDS, caFile, tn.tokenFile, "grpc."+tn.ns, tn.ns, tn.w.sa, translate.ListenerName(key(tn.other, "partner")))
	}

	// 1. each client holds exactly what exportTo lets its namespace read
	start := time.Now()
	var others [][]string
	for _, tn := range tenants {
		for _, c := range []*envoyClient{tn.sotw, tn.delta} {
			others = append(others, c.waitHolds(t, "start", tn.read, nA, nB))
		}
	}
	t.Logf("four Envoy-like clients hold what their namespace may read %v after they connected; %d clusters of other tests' namespaces (exported to \"*\")",
		time.Since(start).Round(time.Millisecond), len(others[0]))
	for i, o := range others[1:] {
		if !slices.Equal(o, others[0]) {
			t.Errorf("client %d holds other namespaces' clusters %v, client 0 %v: clients of two namespaces may read only the same ones of a third", i+1, o, others[0])
		}
	}

	// 2. grpc-go: the upstream exported to the tenant is called; the other's
	// private one never resolves
	for _, tn := range tenants {
		partner := ups[2].backend
		if tn.ns == nA {
			partner = ups[6].backend
		}
		start := time.Now()
		got, err := call(tn.grpcExported, 30*time.Second)
		if err != nil || got != partner.Addr {
			t.Fatalf("grpc-go client of %s calling %s: served by %q, %v; want %s", tn.ns, cl(tn.other, "partner"), got, err, partner.Addr)
		}
		t.Logf("grpc-go client of %s reached %s (exported to it) in %v", tn.ns, cl(tn.other, "partner"), time.Since(start).Round(time.Millisecond))
		if got, err := call(tn.grpcPrivate, 3*time.Second); err == nil {
			t.Errorf("grpc-go client of %s reached %s, exported to %s only, served by %s", tn.ns, cl(tn.other, "private"), tn.other, got)
		}
	}

	// 3. why tenant-b does not see tenant-a's private upstream
	whyB := "exported to " + nA + " only"
	testkit.Eventually(t, 10*time.Second, "/debug/clients says why tenant-b's clients do not read "+cl(nA, "private"), func() (bool, string) {
		clients, err := p.clients()
		if err != nil {
			return false, err.Error()
		}
		found := map[string]bool{}
		var detail []string
		for _, c := range clients {
			if c.Audience != nB || c.Withheld == nil {
				continue
			}
			detail = append(detail, fmt.Sprintf("%s: %+v", c.NodeID, *c.Withheld))
			for _, h := range c.Withheld.Hidden {
				if (h.Name == cl(nA, "private") || h.Name == translate.ListenerName(key(nA, "private"))) && h.Why == whyB &&
					slices.Equal(h.ExportedTo, []string{nA}) {
					found[c.NodeID+" "+h.Type] = true
				}
			}
			if c.Withheld.Wildcard["CDS"] < 4 && strings.HasPrefix(c.NodeID, "envoy") {
				return false, fmt.Sprintf("%s: wildcard CDS withholds %d, want at least tenant-a's private, plain and two spatial clusters", c.NodeID, c.Withheld.Wildcard["CDS"])
			}
		}
		return found["envoy-sotw."+nB+" EDS"] && found["envoy-delta."+nB+" EDS"] && found["grpc."+nB+" LDS"], strings.Join(detail, "; ")
	})
	text := runBinary(t, bin, "status", "--admin-address", p.addrs.Admin)
	t.Logf("controlplane status:\n%s", text)
	for _, want := range []string{
		fmt.Sprintf("envoy-sotw.%s (%s) asked for EDS %s: %s", nB, nB, cl(nA, "private"), whyB),
		fmt.Sprintf("envoy-delta.%s (%s) asked for EDS %s: %s", nB, nB, cl(nA, "private"), whyB),
		fmt.Sprintf("grpc.%s (%s) asked for LDS %s: %s", nB, nB, translate.ListenerName(key(nA, "private")), whyB),
		fmt.Sprintf("envoy-sotw.%s (%s) asked for every CDS:", nB, nB),
		nB + "/" + tenants[1].w.sa + " (token)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("controlplane status lacks %q", want)
		}
	}
	var status struct {
		Clients []struct {
			Client server.Client `json:"client"`
		} `json:"clients"`
	}
	if err := json.Unmarshal([]byte(runBinary(t, bin, "status", "--admin-address", p.addrs.Admin, "-o", "json")), &status); err != nil {
		t.Fatal(err)
	}
	for _, r := range status.Clients {
		if r.Client.NodeID == "envoy-sotw."+nB && (r.Client.Audience != nB || r.Client.Withheld == nil || len(r.Client.Withheld.Hidden) != 1) {
			t.Errorf("status -o json: %s: audience %q, withheld %+v", r.Client.NodeID, r.Client.Audience, r.Client.Withheld)
		}
	}
	kubeconfig := writeKubeconfig(t, dir, nA)
	explained := func() explain.Report {
		t.Helper()
		var rep explain.Report
		out := runBinary(t, bin, "explain", "--kubeconfig", kubeconfig, "--namespace", nA, "--client-namespace", nB, "--default-export-to", ".", "-o", "json")
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("explain -o json: %v\n%s", err, out)
		}
		return rep
	}
	rep := explained()
	access := map[string]explain.Access{}
	for _, u := range rep.Upstreams {
		if u.Access != nil {
			access[u.Name] = *u.Access
		}
	}
	if a := access["private"]; a.Allowed || a.Why != whyB {
		t.Errorf("explain --client-namespace %s of %s: %+v, want not allowed, %q", nB, cl(nA, "private"), a, whyB)
	}
	for name, want := range map[string]bool{"shared": true, "partner": true, "plain": false} {
		if access[name].Allowed != want {
			t.Errorf("explain --client-namespace %s of %s: %+v, want allowed %v", nB, cl(nA, name), access[name], want)
		}
	}
	if len(rep.SpatialDomains) != 1 || rep.SpatialDomains[0].Access == nil || rep.SpatialDomains[0].Access.Allowed {
		t.Errorf("explain --client-namespace %s of SpatialDomain %s: %+v", nB, domain, rep.SpatialDomains)
	}
	explainText := runBinary(t, bin, "explain", "--kubeconfig", kubeconfig, "--namespace", nA, "--client-namespace", nB,
		"--default-export-to", ".", "--upstream", cl(nA, "private"))
	if want := fmt.Sprintf("a client of namespace %s may NOT read it: %s", nB, whyB); !strings.Contains(explainText, want) {
		t.Errorf("explain text lacks %q:\n%s", want, explainText)
	}

	// 4. tenant-a's private upstream exported to tenant-b too: it reaches
	// tenant-b's clients; tenant-a's hold what they held
	private := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "private", Namespace: nA}}
	updateLatest(t, private, func() { private.Spec.ExportTo = []string{".", nB} })
	start = time.Now()
	withPrivate := sorted(append(slices.Clone(readB), cl(nA, "private"))...)
	tenants[1].sotw.waitHolds(t, "exported to tenant-b", withPrivate, nA, nB)
	tenants[1].delta.waitHolds(t, "exported to tenant-b", withPrivate, nA, nB)
	t.Logf("the exportTo edit reached tenant-b's Envoy-like clients in %v", time.Since(start).Round(time.Millisecond))
	tenants[0].sotw.waitHolds(t, "exported to tenant-b", readA, nA, nB)
	tenants[0].delta.waitHolds(t, "exported to tenant-b", readA, nA, nB)
	start = time.Now()
	if got, err := call(tenants[1].grpcPrivate, 30*time.Second); err != nil || got != ups[0].backend.Addr {
		t.Errorf("grpc-go client of %s calling %s once exported to it: served by %q, %v; want %s", nB, cl(nA, "private"), got, err, ups[0].backend.Addr)
	}
	t.Logf("tenant-b's grpc-go client reached %s %v after it was exported to tenant-b", cl(nA, "private"), time.Since(start).Round(time.Millisecond))
	if a := explainedAccess(explained(), "private"); !a.Allowed {
		t.Errorf("explain, once exported to %s: %+v", nB, a)
	}

	// 5. and back to its own namespace: it leaves tenant-b's clients only
	updateLatest(t, private, func() { private.Spec.ExportTo = []string{"."} })
	start = time.Now()
	tenants[1].sotw.waitHolds(t, "back to its own namespace", readB, nA, nB)
	tenants[1].delta.waitHolds(t, "back to its own namespace", readB, nA, nB)
	t.Logf("the exportTo edit took %s out of tenant-b's Envoy-like clients in %v", cl(nA, "private"), time.Since(start).Round(time.Millisecond))
	tenants[0].sotw.waitHolds(t, "back to its own namespace", readA, nA, nB)
	tenants[0].delta.waitHolds(t, "back to its own namespace", readA, nA, nB)
	if a := explainedAccess(explained(), "private"); a.Allowed || a.Why != whyB {
		t.Errorf("explain, once back to %s only: %+v", nA, a)
	}
}

// explainedAccess is the access an explain report gives an upstream.
func explainedAccess(rep explain.Report, name string) explain.Access {
	for _, u := range rep.Upstreams {
		if u.Name == name && u.Access != nil {
			return *u.Access
		}
	}
	return explain.Access{Why: "not in the report"}
}

// sorted is its arguments, sorted.
func sorted(s ...string) []string { return slices.Sorted(slices.Values(s)) }
