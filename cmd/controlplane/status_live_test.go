package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/test/adstest"
	"poise.dev/poise/test/golden"
	"poise.dev/poise/test/testkit"
)

// fleetVersion is what the planes of these tests say they run.
const fleetVersion = "v9.8.7-test"

// fleet is one plane on the examples and the clients status and
// proxy-config are shown with, each over a real ADS stream:
//
//   - envoy-synced ACKs the clusters and shop/checkout's endpoints;
//   - envoy-nack NACKs the clusters;
//   - envoy-stale leaves the clusters unanswered;
//   - grpc-zone, a gRPC client in eu-west/eu-west-1b (a locality class of
//     its own), ACKs the clusters, shop/checkout's endpoints, its listener
//     and its route.
type fleet struct {
	addrs controlplane.Addrs
	// cds is the clusters' version; lds the listener's.
	cds, lds string
}

const nackError = "cluster shop/checkout: unsupported lb_policy"

func startFleet(t *testing.T) fleet {
	t.Helper()
	a := startPlaneVersion(t, fleetVersion, examples)
	f := fleet{addrs: a}
	envoy := func(id string) *core.Node {
		return &core.Node{Id: id, Cluster: "test", UserAgentName: "envoy", Locality: &core.Locality{Region: "eu-west", Zone: "eu-west-1a"}}
	}

	synced := adstest.Dial(t, a.XDS, envoy("envoy-synced"))
	cds := synced.Ask(resource.ClusterType)
	f.cds = cds.GetVersionInfo()
	synced.ACK(cds)
	synced.ACK(synced.Ask(resource.EndpointType, "shop/checkout"))

	nack := adstest.Dial(t, a.XDS, envoy("envoy-nack"))
	nack.NACK(nack.Ask(resource.ClusterType), "", nackError)

	stale := adstest.Dial(t, a.XDS, envoy("envoy-stale"))
	stale.Ask(resource.ClusterType)

	zone := adstest.Dial(t, a.XDS, &core.Node{Id: "grpc-zone", Cluster: "test", UserAgentName: "gRPC Go",
		Locality:       &core.Locality{Region: "eu-west", Zone: "eu-west-1b"},
		ClientFeatures: []string{"envoy.lb.does_not_support_overprovisioning", "xds.config.resource-in-sotw"}})
	lds := zone.Ask(resource.ListenerType, "checkout.shop")
	f.lds = lds.GetVersionInfo()
	zone.ACK(lds)
	zone.ACK(zone.Ask(resource.RouteType, "shop/checkout"))
	zone.ACK(zone.Ask(resource.ClusterType))
	zone.ACK(zone.Ask(resource.EndpointType, "shop/checkout"))

	// the answers are recorded once the plane reads them
	testkit.Eventually(t, 10*time.Second, "every client's answer recorded", func() (bool, string) {
		rep, detail := statusJSON(t, "--admin-address", a.Admin)
		states := map[string]string{}
		for _, r := range rep.Clients {
			for typ, ts := range r.Client.Types {
				states[r.Client.NodeID+" "+typ] = ts.State
			}
		}
		return states["envoy-synced EDS"] == server.Synced && states["envoy-nack CDS"] == server.NACKed &&
			states["grpc-zone EDS"] == server.Synced && states["grpc-zone RDS"] == server.Synced, detail
	})
	return f
}

// startPlaneVersion runs a plane on paths that says it runs version.
func startPlaneVersion(t *testing.T, version string, paths ...string) controlplane.Addrs {
	t.Helper()
	return startPlaneWith(t, controlplane.Config{Paths: paths, Version: version})
}

// statusJSON is status -o json with args, and the output for a message.
func statusJSON(t *testing.T, args ...string) (statusReport, string) {
	t.Helper()
	code, stdout, stderr := runCLI(append([]string{"status", "-o", "json"}, args...)...)
	var rep statusReport
	if code != exitOK {
		return rep, stderr
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, stdout)
	}
	return rep, stdout
}

// normalize replaces what changes from run to run (the plane's addresses,
// its instance id in versions, times) with fixed words, for goldens.
func normalize(s string, a controlplane.Addrs) string {
	s = strings.ReplaceAll(s, a.Admin, "ADMIN")
	s = strings.ReplaceAll(s, a.Instance, "INSTANCE")
	s = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`).ReplaceAllString(s, "TIME")
	// tabwriter pads to the longest cell: with the names replaced, the
	// padding is fixed by trimming runs of spaces to two
	return regexp.MustCompile(` {2,}`).ReplaceAllString(s, "  ")
}

// The live status tests are not parallel: their goldens hold the plane's
// first revision, and once, run beside the package's other tests under a
// loaded machine, a plane serving the unchanged examples had published a
// second one before the clients asked.

// TestStatusLive: status against a real plane with real ADS clients shows
// the replica's version and, per client and type, SYNCED, NACKED (with the
// client's error as the last NACK), STALE (against the version it has not
// answered) and the class of a client in a zone class.
func TestStatusLive(t *testing.T) {
	f := startFleet(t)
	a := f.addrs
	rep, out := statusJSON(t, "--admin-address", a.Admin)
	if len(rep.Replicas) != 1 || rep.Replicas[0].Replica != a.Admin || rep.Replicas[0].Version.Version != fleetVersion ||
		rep.Replicas[0].Instance != a.Instance || rep.Replicas[0].Clients != 4 {
		t.Errorf("replicas: %+v", rep.Replicas)
	}
	clients := map[string]server.Client{}
	for _, r := range rep.Clients {
		clients[r.Client.NodeID] = r.Client
	}
	for _, tc := range []struct {
		node, typ, state, acked string
	}{
		{"envoy-synced", "CDS", server.Synced, f.cds},
		{"envoy-nack", "CDS", server.NACKed, ""},
		{"envoy-stale", "CDS", server.Stale, ""},
		{"grpc-zone", "LDS", server.Synced, f.lds},
	} {
		ts := clients[tc.node].Types[tc.typ]
		if ts == nil || ts.State != tc.state || ts.LastAckedVersion != tc.acked || ts.CurrentVersion == "" {
			t.Errorf("%s %s: %+v; want %s, acked %q, and the current version", tc.node, tc.typ, ts, tc.state, tc.acked)
		}
	}
	if n := clients["envoy-nack"].Types["CDS"].LastNACK; n == nil || n.Error != nackError {
		t.Errorf("envoy-nack's last NACK: %+v", n)
	}
	if c := clients["grpc-zone"].Class; c != "eu-west/eu-west-1b" {
		t.Errorf("grpc-zone's class %q, want its zone's", c)
	}
	if !strings.HasPrefix(clients["envoy-synced"].Types["CDS"].CurrentVersion, a.Instance) {
		t.Errorf("current version %q is not of this replica (instance %s):\n%s", clients["envoy-synced"].Types["CDS"].CurrentVersion, a.Instance, out)
	}

	code, text, stderr := runCLI("status", "--admin-address", a.Admin)
	if code != exitOK || stderr != "" {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	t.Logf("status:\n%s", text)
	golden.Check(t, "status-live", normalize(text, a))

	// with no flag, status asks where serve listens by default (whether
	// something listens there on this machine or not)
	if rep, detail := statusJSON(t, "--timeout", "1s"); !strings.Contains(detail, "replica "+defaultAdminAddress+":") &&
		(len(rep.Replicas) != 1 || rep.Replicas[0].Replica != defaultAdminAddress) {
		t.Errorf("status with no flag did not ask %s: %s", defaultAdminAddress, detail)
	}

	// a replica that does not answer is named, the others still listed
	code, stdout, stderr := runCLI("status", "--admin-address", "127.0.0.1:1,"+a.Admin)
	if code != exitInvalid || !strings.Contains(stderr, "replica 127.0.0.1:1:") || !strings.Contains(stdout, "envoy-synced") {
		t.Errorf("status with a dead replica: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestProxyConfigLive: proxy-config shows a client's class and, per type
// and resource, what it holds, what it has not ACKed and what it NACKed with
// its error; the listener and route views; an unknown resource is exit 1,
// with the name meant.
func TestProxyConfigLive(t *testing.T) {
	f := startFleet(t)
	a := f.addrs
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"proxy-config-nack", []string{"envoy-nack", "--type", "clusters", "--resource", "shop/checkout"}},
		{"proxy-config-stale", []string{"envoy-stale", "--type", "clusters", "--resource", "shop/checkout"}},
		{"proxy-config-zone", []string{"grpc-zone", "--resource", "shop/checkout"}},
		{"proxy-config-listeners", []string{"grpc-zone", "--type", "listeners"}},
		{"proxy-config-routes", []string{"grpc-zone", "--type", "routes"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			code, text, stderr := runCLI(append(append([]string{"proxy-config"}, tc.args...), "--admin-address", a.Admin)...)
			if code != exitOK || stderr != "" {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			t.Logf("proxy-config %v:\n%s", tc.args, text)
			golden.Check(t, tc.golden, normalize(text, a))
		})
	}

	code, stdout, stderr := runCLI("proxy-config", "envoy-nack", "--admin-address", a.Admin, "--type", "clusters", "-o", "json")
	var replicas []replicaConfig
	if err := json.Unmarshal([]byte(stdout), &replicas); code != exitOK || err != nil || len(replicas) != 1 || len(replicas[0].Streams) != 1 {
		t.Fatalf("proxy-config -o json: exit %d %v\n%s%s", code, err, stdout, stderr)
	}
	cds, ok := replicas[0].Streams[0].Types["CDS"]
	if !ok || len(replicas[0].Streams[0].Types) != 1 || cds.State != server.NACKed || cds.Rejected["shop/checkout"] != nackError {
		t.Errorf("envoy-nack's CDS: %+v", replicas[0].Streams[0].Types)
	}

	for _, tc := range []struct {
		args   []string
		code   int
		stderr []string
	}{
		{[]string{"envoy-synced", "--resource", "shop/chekout"}, exitInvalid,
			[]string{`no resource named \"shop/chekout\" is served to node \"envoy-synced\"; did you mean shop/checkout?`}},
		// the name alone, as explain --upstream takes it
		{[]string{"envoy-synced", "--resource", "checkout"}, exitInvalid,
			[]string{`no resource named \"checkout\" is served to node \"envoy-synced\"; did you mean shop/checkout?`}},
		{[]string{"envoy-synced", "--resource", "listeners"}, exitInvalid,
			[]string{`no resource named \"listeners\"`, "note: --resource names a resource; for the listeners view, --type listeners"}},
		{[]string{"envoy-synced", "--type", "listener"}, exitUsage, []string{`--type "listener": did you mean listeners?`}},
		{[]string{"envoy-synce"}, exitInvalid, []string{`node id \"envoy-synce\" is connected to this replica; did you mean envoy-synced?`,
			`node "envoy-synce" is connected to none of the replicas asked`}},
	} {
		code, stdout, stderr := runCLI(append(append([]string{"proxy-config"}, tc.args...), "--admin-address", a.Admin)...)
		if code != tc.code || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q; want %d", tc.args, code, stdout, tc.code)
		}
		for _, want := range tc.stderr {
			if !strings.Contains(stderr, strings.ReplaceAll(want, `\"`, `"`)) {
				t.Errorf("%v: stderr lacks %q:\n%s", tc.args, want, stderr)
			}
		}
	}
}
