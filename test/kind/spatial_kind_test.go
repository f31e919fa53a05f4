//go:build kind

package kind_test

// The spatial phase of the kind suite (examples/kubernetes/50-spatial.yaml,
// docs/spatial.md). Envoy takes the listener "spatial" over LDS and its
// routes over RDS; the suite sends the requests of spatialUp (every replica
// up), scales the echo Deployment of spatialDown to 0 and sends those of
// spatialAfterDown. Every answer is compared with what the control plane
// Envoy is connected to decides for the same request on
// /debug/explain-route, and explain-route with what the suite expects
// (which TestSpatialCases checks against the Go reference without Docker).
//
// Requests go to Service shop/envoy port spatial through the API server's
// service proxy, which forwards the request headers and returns Envoy's
// status, headers and body unchanged.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/xdsname"
	"poise.dev/poise/test/testkit"
)

// spatialRef is what a phase runs against: the Envoy, the control plane pod
// serving it, and the data version (map and replica health) both carry.
type spatialRef struct {
	envoy, plane string
	dataVersion  string
}

// checkSpatial is the spatial phase: every replica up, then spatialDown
// scaled to 0.
func (s *suite) checkSpatial(t *testing.T) {
	var dom v1alpha1.SpatialDomain
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: spatialNS, Name: spatialDomain}, &dom); err != nil {
		t.Fatalf("SpatialDomain %s/%s (examples/kubernetes/50-spatial.yaml): %v", spatialNS, spatialDomain, err)
	}
	upstreamOf := map[string]string{}
	for _, r := range dom.Spec.Replicas {
		upstreamOf[r.Name] = r.Upstream
	}

	synced := false
	t.Run("up", func(t *testing.T) {
		ref := s.spatialSync(t, upstreamOf, "")
		synced = true
		for _, c := range spatialUp {
			t.Run(c.name, func(t *testing.T) { s.spatialCheck(t, ref, c) })
		}
	})
	if !synced {
		t.Fatalf("Envoy never carried the spatial routes of %s/%s with every replica up: not scaling %s down", spatialNS, spatialDomain, spatialDown)
	}

	// spatialDown goes away: its pod terminates, its EndpointSlice empties,
	// its Upstream (panicMode FailClosed) has no capacity, and the replica
	// drops out of every decision.
	s.scale(t, spatialNS, spatialDeployment(spatialDown), 0)
	t.Run(spatialDown+"-down", func(t *testing.T) {
		ref := s.spatialSync(t, upstreamOf, spatialDown)
		for _, c := range spatialAfterDown {
			t.Run(c.name, func(t *testing.T) { s.spatialCheck(t, ref, c) })
		}
	})
}

// spatialSync waits until the control plane Envoy is connected to computes
// every replica's Upstream as wanted (Routable, or NoCapacity with no
// endpoints for down), its data version says the same, Envoy ACKed every
// LDS, RDS, CDS and EDS response, and the Lua Envoy runs carries that data
// version (x-spatial-version of the probe's refusal).
func (s *suite) spatialSync(t *testing.T, upstreamOf map[string]string, down string) spatialRef {
	t.Helper()
	envoy := s.envoyPod(t)
	names := sortedKeys(upstreamOf) // the data version's health digits are in name order
	var wantDigits strings.Builder
	for _, r := range names {
		if r == down {
			wantDigits.WriteByte('0')
		} else {
			wantDigits.WriteByte('1')
		}
	}
	what := fmt.Sprintf("Envoy %s carries the spatial routes of %s/%s with every replica healthy", envoy, spatialNS, spatialDomain)
	if down != "" {
		what = fmt.Sprintf("Envoy %s carries the spatial routes of %s/%s with replica %s down", envoy, spatialNS, spatialDomain, down)
	}
	var ref spatialRef
	took := testkit.EventuallyEvery(t, 4*time.Minute, poll, what, func() (bool, string) {
		plane, err := s.planeServing(envoy)
		if err != nil {
			return false, err.Error()
		}
		for _, r := range names {
			up := spatialNS + "/" + upstreamOf[r]
			var rep explain.Report
			if err := s.admin(plane, "/debug/explain", map[string]string{"upstream": up}, &rep); err != nil {
				return false, err.Error()
			}
			if len(rep.Upstreams) != 1 {
				return false, fmt.Sprintf("/debug/explain has %d upstreams for %s", len(rep.Upstreams), up)
			}
			u := rep.Upstreams[0]
			n := 0
			for _, p := range u.Priorities {
				for _, l := range p.Localities {
					n += len(l.Endpoints)
				}
			}
			if r == down {
				if u.Outcome != "NoCapacity" || n != 0 {
					return false, fmt.Sprintf("Upstream %s (replica %s, Deployment %s scaled to 0): outcome %s with %d endpoints; "+
						"waiting for NoCapacity with none (its EndpointSlice empties once the pod is gone)", up, r, spatialDeployment(r), u.Outcome, n)
				}
			} else if u.Outcome != "Routable" {
				return false, fmt.Sprintf("Upstream %s (replica %s): outcome %s with %d endpoints; waiting for Routable (a ready pod of Deployment %s/%s)",
					up, r, u.Outcome, n, spatialNS, spatialDeployment(r))
			}
		}
		code, rep, body, err := s.explainRoute(plane, spatialProbe)
		if err != nil {
			return false, err.Error()
		}
		if code != http.StatusOK {
			return false, fmt.Sprintf("/debug/explain-route on %s: %d %s; SpatialDomain %s/%s status: %s",
				plane, code, body, spatialNS, spatialDomain, s.spatialDomainStatus())
		}
		if _, digits, _ := strings.Cut(rep.DataVersion, "-h"); digits != wantDigits.String() {
			return false, fmt.Sprintf("the control plane's data version %s has health digits %q for replicas %v, want %q",
				rep.DataVersion, digits, names, wantDigits.String())
		}
		if ok, why := s.syncedTypes(plane, envoy, "LDS", "RDS", "CDS", "EDS"); !ok {
			return false, "Envoy and the control plane: " + why + " (LDS and RDS carry the spatial listener and routes)"
		}
		ans, err := s.spatialRequest(spatialProbe)
		if err != nil {
			return false, err.Error()
		}
		if ans.status != spatialProbe.status || ans.version != rep.DataVersion {
			hint := "Envoy gets the spatial listener over LDS once the domain serves, and the new Lua over RDS"
			if ans.reason == "unknown_domain" {
				hint = "404 unknown_domain with the domain's routes ACKed: an Envoy older than 1.36 ignores vhost_header " +
					"and matches on :authority (docs/spatial.md, Limits); check POISE_KIND_ENVOY_IMAGE"
			}
			return false, fmt.Sprintf("%s: Envoy answers %s; waiting for %d with x-spatial-version %s, the control plane's data version (%s)",
				spatialProbe.describe(), ans, spatialProbe.status, rep.DataVersion, hint)
		}
		// Nothing moved in between.
		_, again, _, err := s.explainRoute(plane, spatialProbe)
		if err != nil {
			return false, err.Error()
		}
		if again.DataVersion != rep.DataVersion {
			return false, fmt.Sprintf("the data version moved from %s to %s", rep.DataVersion, again.DataVersion)
		}
		ref = spatialRef{envoy: envoy, plane: plane, dataVersion: rep.DataVersion}
		return true, ""
	})
	t.Logf("plane %s, Envoy %s: spatial listener, routes and clusters ACKed, both on data version %s after %v",
		ref.plane, ref.envoy, ref.dataVersion, took.Round(time.Millisecond))
	return ref
}

// spatialCheck sends one case through Envoy and compares the answers with
// /debug/explain-route, and explain-route with the case's expectation.
func (s *suite) spatialCheck(t *testing.T, ref spatialRef, c spatialCase) {
	code, rep, body, err := s.explainRoute(ref.plane, c)
	if err != nil {
		t.Fatal(err)
	}
	if c.domainName() != spatialDomain {
		// No such domain: explain-route has nothing to decide on, and Envoy's
		// last VirtualHost answers.
		if code != http.StatusNotFound {
			t.Errorf("%s: explain-route answers %d for domain %q, want 404 (no such SpatialDomain): %s", c.name, code, c.domainName(), body)
		}
		ans, err := s.spatialRequest(c)
		if err != nil {
			t.Fatal(err)
		}
		if ans.status != c.status || ans.reason != c.reason {
			t.Errorf("%s: %s: Envoy answered %s; want %d with x-spatial-reason: %s (the last VirtualHost of RDS spatial, "+
				"for a domain the control plane does not know: explain-route says %d %s)", c.name, c.describe(), ans, c.status, c.reason, code, body)
		} else {
			t.Logf("%s: %s → Envoy %d %s; explain-route %d (no such domain)", c.name, c.describe(), ans.status, ans.reason, code)
		}
		return
	}
	if code != http.StatusOK {
		t.Fatalf("%s: /debug/explain-route on %s: %d %s", c.name, ref.plane, code, body)
	}
	if rep.DataVersion != ref.dataVersion {
		t.Fatalf("%s: explain-route decides on data version %s, but this phase began on %s: a replica's health changed during the run, "+
			"so Envoy's answers cannot be compared with it (see the pods of %s and the control plane's log)", c.name, rep.DataVersion, ref.dataVersion, spatialNS)
	}

	// What the control plane decides, in the terms of the case.
	predicted := spatialCase{status: rep.Result.Status, reason: rep.Result.Reason, replica: rep.Result.Replica}
	key := topology.Key{Namespace: spatialNS, Name: spatialDomain}
	wantCluster := ""
	switch {
	case rep.Result.Status != http.StatusOK:
	case rep.Result.Replica != "":
		wantCluster = xdsname.ReplicaCluster(key, rep.Result.Replica)
	default:
		wantCluster = xdsname.PoolCluster(key, c.product)
		for _, h := range rep.Health {
			if h.Healthy && slices.Contains(rep.Residency.Lawful, h.Name) {
				predicted.pool = append(predicted.pool, h.Name)
			}
		}
		slices.Sort(predicted.pool)
	}
	steps := "\n\texplain-route: " + strings.Join(rep.Steps, "\n\t               ")
	if rep.Result.Cluster != wantCluster {
		t.Errorf("%s: explain-route names cluster %q for %s, want %q%s", c.name, rep.Result.Cluster, predicted.want(), wantCluster, steps)
	}
	if predicted.want() != c.want() {
		t.Errorf("%s: %s: explain-route decides %s, the suite expects %s (the Go reference's decision on examples/kubernetes, "+
			"checked by TestSpatialCases): the control plane's map or health is not the walkthrough's%s", c.name, c.describe(), predicted.want(), c.want(), steps)
	}

	// Envoy must do what explain-route decides.
	n := 1
	switch {
	case predicted.status == http.StatusOK && predicted.replica != "":
		n = 8
	case predicted.status == http.StatusOK:
		n = 24
	}
	served := map[string]int{}
	for range n {
		ans, err := s.spatialRequest(c)
		if err != nil {
			t.Fatal(err)
		}
		if ans.status != predicted.status {
			t.Errorf("%s: %s: Envoy answered %s, but explain-route (data version %s) decides %s%s",
				c.name, c.describe(), ans, rep.DataVersion, predicted.want(), steps)
			return
		}
		if ans.status != http.StatusOK {
			if ans.reason != predicted.reason || ans.body != predicted.reason+"\n" || ans.version != rep.DataVersion {
				t.Errorf("%s: %s: Envoy answered %s; explain-route decides %s on data version %s, so Envoy's Lua should answer "+
					"x-spatial-reason %s, x-spatial-version %s and the body %q%s", c.name, c.describe(), ans, predicted.want(),
					rep.DataVersion, predicted.reason, rep.DataVersion, predicted.reason+"\n", steps)
				return
			}
			continue
		}
		replica, pod := parseReplicaEcho(ans.body)
		switch {
		case replica == "":
			t.Errorf("%s: %s: Envoy answered 200 with %q, not the answer of a replica's echo (\"replica=NAME pod=...\")", c.name, c.describe(), ans.body)
			return
		case !strings.HasPrefix(pod, spatialDeployment(replica)+"-"):
			t.Errorf("%s: pod %s answered as replica %s, but is not a pod of Deployment %s", c.name, pod, replica, spatialDeployment(replica))
			return
		case predicted.replica != "" && replica != predicted.replica:
			t.Errorf("%s: %s: replica %s answered (pod %s), but explain-route decides %s (cluster %s)%s",
				c.name, c.describe(), replica, pod, predicted.want(), rep.Result.Cluster, steps)
			return
		case predicted.replica == "" && !slices.Contains(predicted.pool, replica):
			t.Errorf("%s: %s: replica %s answered (pod %s), which is not in the pool explain-route decides: %s (cluster %s holds only lawful, healthy replicas)%s",
				c.name, c.describe(), replica, pod, predicted.want(), rep.Result.Cluster, steps)
			return
		}
		served[replica]++
	}
	if len(served) == 0 {
		t.Logf("%s: %s → Envoy %d x-spatial-reason %s, as explain-route decides", c.name, c.describe(), predicted.status, predicted.reason)
	} else {
		t.Logf("%s: %s → Envoy: %d of %d from %v; explain-route: %s (cluster %s)", c.name, c.describe(), n, n, served, predicted.want(), rep.Result.Cluster)
	}
}

// spatialDomainStatus is the SpatialDomain's conditions, for a message.
func (s *suite) spatialDomainStatus() string {
	var dom v1alpha1.SpatialDomain
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: spatialNS, Name: spatialDomain}, &dom); err != nil {
		return err.Error()
	}
	var out []string
	for _, c := range dom.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	if len(out) == 0 {
		return "no conditions yet (the elected control plane replica writes them)"
	}
	return strings.Join(out, "; ")
}

// explainRoute asks a control plane pod's /debug/explain-route about a case:
// the same request as Envoy gets (product from the route, path with its
// query, x-spatial-bbox). A status other than 200 returns its body.
func (s *suite) explainRoute(plane string, c spatialCase) (int, *explain.RouteReport, string, error) {
	q := url.Values{"domain": {c.domainName()}, "product": {c.product}, "path": {c.path}}
	if c.query != "" {
		q.Set("path", c.path+"?"+c.query)
	}
	if c.bbox != "" {
		q.Set("bbox", c.bbox)
	}
	code, _, body, err := s.proxied(systemNS, "pods", plane+":"+adminPort, "/debug/explain-route", q.Encode(), nil)
	if err != nil {
		return 0, nil, "", fmt.Errorf("GET /debug/explain-route?%s from %s: %v", q.Encode(), plane, err)
	}
	if code != http.StatusOK {
		return code, nil, strings.TrimSpace(string(body)), nil
	}
	var rep explain.RouteReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return 0, nil, "", fmt.Errorf("GET /debug/explain-route?%s from %s: %v: %s", q.Encode(), plane, err, body)
	}
	return code, &rep, "", nil
}

// spatialAnswer is one answer through Envoy's spatial listener.
type spatialAnswer struct {
	status          int
	reason, version string // x-spatial-reason, x-spatial-version
	server          string
	body            string
}

func (a spatialAnswer) String() string {
	out := fmt.Sprintf("%d", a.status)
	if a.reason != "" {
		out += " x-spatial-reason " + a.reason
	}
	if a.version != "" {
		out += " x-spatial-version " + a.version
	}
	body := strings.TrimSpace(a.body)
	if len(body) > 300 {
		body = body[:300] + "..."
	}
	if a.server != "envoy" {
		// The API server's proxy answers itself when it cannot reach the
		// port (no listener yet, no ready endpoint).
		return fmt.Sprintf("%s (server %q: not Envoy; the API server's proxy could not reach it?) %q", out, a.server, body)
	}
	return fmt.Sprintf("%s %q", out, body)
}

// spatialRequest sends a case to Service shop/envoy port spatial.
func (s *suite) spatialRequest(c spatialCase) (spatialAnswer, error) {
	h := http.Header{}
	h.Set("x-spatial-domain", c.domainName())
	if c.bbox != "" {
		h.Set("x-spatial-bbox", c.bbox)
	}
	for k, v := range c.header {
		h.Set(k, v)
	}
	code, header, body, err := s.proxied(shopNS, "services", envoyService+":"+envoySpatialPort, c.path, c.query, h)
	if err != nil {
		return spatialAnswer{}, fmt.Errorf("%s through Service %s/%s port %s: %v", c.describe(), shopNS, envoyService, envoySpatialPort, err)
	}
	return spatialAnswer{status: code, reason: header.Get("x-spatial-reason"), version: header.Get("x-spatial-version"),
		server: header.Get("server"), body: string(body)}, nil
}

// proxied GETs path (with rawQuery and header) from a pod or Service
// ("pods" or "services", name "NAME:PORT") through the API server's proxy,
// and returns the status, headers and body, whatever the status.
func (s *suite) proxied(ns, resource, name, path, rawQuery string, header http.Header) (int, http.Header, []byte, error) {
	u := s.cs.CoreV1().RESTClient().Get().Namespace(ns).Resource(resource).Name(name).SubResource("proxy").Suffix(path).URL()
	u.RawQuery = rawQuery
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, nil, nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := s.httpc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, body, err
}

// parseReplicaEcho reads "replica=R pod=P node=N".
func parseReplicaEcho(body string) (replica, pod string) {
	f := echoFields(body)
	return f["replica"], f["pod"]
}
