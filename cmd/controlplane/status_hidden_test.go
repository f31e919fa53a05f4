package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/test/golden"
	"poise.dev/poise/test/testkit"
)

// withheldRows are three clients of one replica: tenant-a's Envoy, which
// is sent all it asks for; tenant-b's gRPC client, which asks for
// tenant-a's private upstream by name, a name nothing has and more than
// the list holds, and every cluster; an anonymous Envoy.
func withheldRows(replicas ...string) []replicaClient {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	acked := map[string]*server.TypeState{"CDS": {LastAckedVersion: "i-7", LastSentVersion: "i-7"}}
	rows := []replicaClient{
		{Client: server.Client{Stream: 1, Protocol: "sotw", NodeID: "envoy-a", Kind: server.KindEnvoy, Audience: "tenant-a", Connected: at, Types: acked,
			Identity: &server.ClientIdentity{Principal: "tenant-a/checkout", Method: "token"}}},
		{Client: server.Client{Stream: 2, Protocol: "delta", NodeID: "grpc-b", Kind: server.KindGRPC, Audience: "tenant-b", Connected: at, Types: acked,
			Identity: &server.ClientIdentity{Principal: "tenant-b/ledger", Method: "certificate"},
			Withheld: &server.Withheld{
				Hidden: []server.HiddenResource{{NamedResource: server.NamedResource{Type: "LDS", Name: "private.tenant-a"},
					ExportedTo: []string{"tenant-a"}, Why: server.WhyHidden([]string{"tenant-a"}, false)}},
				HiddenMore:  3,
				Unpublished: []server.NamedResource{{Type: "LDS", Name: "nowhere.tenant-b"}},
				Wildcard:    map[string]int{"CDS": 2},
			}}},
		{Client: server.Client{Stream: 3, Protocol: "sotw", NodeID: "envoy-anon", Kind: server.KindEnvoy, Audience: "anonymous", Connected: at, Types: acked,
			Withheld: &server.Withheld{
				Hidden: []server.HiddenResource{{NamedResource: server.NamedResource{Type: "EDS", Name: "tenant-a/private"},
					ExportedTo: []string{"tenant-a"}, Why: server.WhyHidden([]string{"tenant-a"}, true)}},
				Wildcard: map[string]int{"CDS": 4},
			}}},
	}
	for i := range rows {
		rows[i].Replica = replicas[i%len(replicas)]
	}
	return rows
}

// TestStatusWithheldGolden: status shows each client's audience and
// principal, then what each asked for and is not sent, and why; the
// replica is named when there are several.
func TestStatusWithheldGolden(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := writeStatusText(&b, statusReport{Clients: withheldRows("127.0.0.1:19000")}); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "status-withheld", b.String())

	b.Reset()
	if err := writeStatusText(&b, statusReport{Clients: withheldRows("127.0.0.1:19000", "127.0.0.1:19010")}); err != nil {
		t.Fatal(err)
	}
	if want := "grpc-b (tenant-b) on 127.0.0.1:19010 asked for LDS private.tenant-a: exported to tenant-a only"; !strings.Contains(b.String(), want) {
		t.Errorf("two replicas: no %q in\n%s", want, b.String())
	}
	// nothing withheld: no section
	b.Reset()
	if err := writeStatusText(&b, statusReport{Clients: withheldRows("127.0.0.1:19000")[:1]}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Withheld") {
		t.Errorf("a client sent all it asks for has a withheld section:\n%s", b.String())
	}
}

// TestStatusWithheldLive: against a files-mode plane (every client
// anonymous) holding two tenants, an Envoy that asks for every cluster and
// for tenant-a's private endpoints by name is told, in status text and
// JSON, that they are exported to tenant-a only, and that a name nothing
// has is not published.
func TestStatusWithheldLive(t *testing.T) {
	t.Parallel()
	a := startPlaneOn(t, tenantsDir)
	st := adsStream(t, a.XDS)
	node := &core.Node{Id: "envoy-anon", Cluster: "test", UserAgentName: "envoy"}
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType,
		ResourceNames: []string{"tenant-a/private", "tenant-a/shared", "nowhere/none"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil { // tenant-a/shared's endpoints
		t.Fatal(err)
	}
	var rows []replicaClient
	testkit.Eventually(t, 10*time.Second, "status -o json shows the EDS names withheld", func() (bool, string) {
		code, stdout, stderr := runCLI("status", "--admin-address", a.Admin, "-o", "json")
		if code != exitOK {
			return false, stderr
		}
		var rep statusReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			return false, err.Error()
		}
		rows = rep.Clients
		return len(rows) == 1 && rows[0].Client.Withheld != nil && len(rows[0].Client.Withheld.Hidden) == 1, stdout
	})
	wh := rows[0].Client.Withheld
	if h := wh.Hidden[0]; h.Type != "EDS" || h.Name != "tenant-a/private" || len(h.ExportedTo) != 1 || h.ExportedTo[0] != "tenant-a" {
		t.Errorf("hidden: %+v", h)
	}
	if len(wh.Unpublished) != 1 || wh.Unpublished[0].Name != "nowhere/none" {
		t.Errorf("unpublished: %+v", wh.Unpublished)
	}
	// private, partner, ledger and the domain's clusters, exported to
	// some namespaces only
	if n := wh.Wildcard["CDS"]; n < 3 || n+len(resp.GetResources()) < 5 {
		t.Errorf("wildcard CDS withholds %d of %d+%d clusters", n, n, len(resp.GetResources()))
	}
	if rows[0].Client.Audience != "anonymous" {
		t.Errorf("audience %q, want anonymous", rows[0].Client.Audience)
	}

	code, text, stderr := runCLI("status", "--admin-address", a.Admin)
	t.Logf("status:\n%s", text)
	if code != exitOK {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"AUDIENCE", "anonymous",
		"envoy-anon (anonymous) asked for every CDS:",
		"envoy-anon (anonymous) asked for EDS tenant-a/private: exported to tenant-a only; an anonymous client reads only what is exported to every namespace",
		"envoy-anon (anonymous) asked for EDS nowhere/none: not published",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q", want)
		}
	}
}
