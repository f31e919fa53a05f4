package kube_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"github.com/cespare/xxhash/v2"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/xdsname"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/splitcheck"
	"poise.dev/poise/test/testkit"
)

const (
	// rollingDrain is the replicas' --drain-period.
	rollingDrain = 3 * time.Second
	// rollingPerReplica is how many raw ADS clients each replica holds
	// before the upgrade.
	rollingPerReplica = 12
	// envoyRetryBase is Envoy's first xDS stream retry interval: after a
	// stream ends it waits a uniformly random time below it, and below
	// twice as long after each retry that got no response (Envoy's cap is
	// 30 s, rollingRetryMax here).
	envoyRetryBase  = 500 * time.Millisecond
	rollingRetryMax = 4 * time.Second
	// rollingMargin is what a client may take beyond the drain period to
	// hold everything again from a new replica: the retry wait (below
	// envoyRetryBase) and the whole state, with room for a loaded 2-core
	// machine (measured: 0.3 s at most).
	rollingMargin = 2 * time.Second
)

// rollingClasses are the raw clients' localities ("" names none): each
// receives its own split of the PreferSameZone upstream.
var rollingClasses = []string{"eu/eu-a", "eu/eu-b", "us/us-c", ""}

// TestRollingUpgrade replaces both replicas of a Kubernetes-mode plane one
// at a time, as the chart's Deployment rolls (maxSurge 1, maxUnavailable 0):
// a new process starts and becomes ready, then the old one is taken out of
// the Service and sent SIGTERM. Each replica is the real binary. 24 raw
// ADS clients (SotW and Delta, Envoy-like nodes in three zones and none)
// and a grpc-go xDS client reach the replicas through a Service (a
// round-robin TCP proxy, as kube-proxy is) and reconnect to it when their
// stream ends, after Envoy's retry backoff. The upstreams are a weighted
// one whose first priority spills into its second, and a PreferSameZone
// one, each with an unhealthy endpoint. It checks:
//   - every client of a drained replica reconnects to a remaining one and
//     is sent its whole state again, the last within the drain period and
//     a margin of SIGTERM, the streams ending one at a time over the
//     period with UNAVAILABLE, and the old process exits 0;
//   - every client holds, byte for byte, the ClusterLoadAssignments it held
//     before, which are the figures the new replicas' explain derives for
//     its class;
//   - no version string is ever sent for two contents: over the whole run,
//     (class, protocol, type, resource, version) → digest of the bytes is a
//     function, and every version names the process that sent it;
//   - status does not move: across two leader handovers no Upstream,
//     Locality or EndpointSet is written at all (watched through the
//     apiserver), and each new leader checks every object and writes none;
//   - the grpc-go client's RPCs never fail, and its split is explain's;
//   - a change made while a replica drains reaches every client within the
//     drain period and the margin: the draining replica's when they
//     reconnect.
//
// It runs alone (not in parallel): its replicas' drains, and how each stream
// ends in them, are timed against the drain period, which a machine busy
// with another test stretches.
func TestRollingUpgrade(t *testing.T) {
	ns := namespace(t)
	bin := cpbinary.Build(t)
	b := splitcheck.StartBackends(t, "127.0.0.1", 7)
	objs := rollingObjects(ns, b)
	for _, o := range objs {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	setHealth(t, ns, "weighted-eu-a", unhealthy(b[0]))
	setHealth(t, ns, "zonal-eu-a", unhealthy(b[0]))
	kubeconfig := writeKubeconfig(t, t.TempDir(), ns)
	svc := startService(t)
	reg := &replicas{}

	// 1. two replicas, r1 leading, behind the Service
	r1 := startReplica(t, bin, kubeconfig, ns, "r1", reg)
	testkit.Eventually(t, 20*time.Second, "r1 leads", func() (bool, string) { return r1.leads(), leaseHolder(t, ns) })
	r2 := startReplica(t, bin, kubeconfig, ns, "r2", reg)
	svc.set(r1.XDS(), r2.XDS())
	probed := func(rep explain.Report) (bool, string) {
		if len(rep.Upstreams) != 2 {
			return false, fmt.Sprintf("%d upstreams", len(rep.Upstreams))
		}
		for _, u := range rep.Upstreams {
			if ep, ok := endpointOf(u, b[0]); !ok || ep.Probe != string(v1alpha1.ProbeUnhealthy) {
				return false, fmt.Sprintf("%s: %s is %+v", u.Name, b[0].Addr, ep)
			}
		}
		return true, ""
	}
	before := classFigures(t, []*replica{r1, r2}, probed)
	if fig := before[""][xdsname.Cluster(topology.Key{Namespace: ns, Name: "weighted"})]; !strings.Contains(fig, "p0 us/us-c/ weight") {
		t.Fatalf("the weighted upstream does not spill into its standby priority:\n%s", fig)
	}
	if maps.Equal(before["eu/eu-a"], before["eu/eu-b"]) {
		t.Fatalf("the PreferSameZone upstream gives eu-a and eu-b the same split")
	}

	// status settled under r1 before anything is watched
	names := upstreamNames(objs)
	for _, n := range names {
		waitStatus(t, r1.plane, ns, n)
	}
	settled := testkit.Eventually(t, 20*time.Second, "r1 checked every object and its queue is empty", func() (bool, string) {
		done := statusMetric(r1.plane, "poise_status_writes_total") + statusMetric(r1.plane, "poise_status_unchanged_total")
		depth := statusMetric(r1.plane, "poise_status_queue_depth")
		return done >= float64(len(objs)) && depth == 0, fmt.Sprintf("%v checked of %d, %v queued", done, len(objs), depth)
	})
	sw := watchStatus(t, ns)
	t.Logf("1 start: r1 (instance %s) leads, r2 (%s) follows; status settled %v after the first checks", r1.instance, r2.instance, settled.Round(time.Millisecond))

	// 2. the clients: a grpc-go xDS client calling the weighted upstream,
	// and the raw ADS clients
	grpcConn := splitcheck.NewXDSClient(t, svc.addr(), "rolling-grpc", "weighted."+ns)
	weightedRep, err := r1.explainOf(ns, "weighted")
	if err != nil {
		t.Fatal(err)
	}
	splitcheck.Warm(t, grpcConn, splitcheck.ExpectationOf(t, weightedRep))
	led := &ledger{seen: map[string]sent{}}
	f := &fleet{memo: map[string]string{}}
	var rcs []*rollingClient
	for i := range 2 * rollingPerReplica {
		rc := newRollingClient(fmt.Sprintf("rolling-%02d", i), rollingClasses[i%len(rollingClasses)], (i/len(rollingClasses))%2 == 1, len(names), svc, reg, led)
		rc.oldNonce = i/(2*len(rollingClasses)) == 1 // clients 8 to 15: both protocols, every class
		rcs = append(rcs, rc)
		f.clients = append(f.clients, rc.adsClient)
	}
	connected := time.Now()
	for _, rc := range rcs {
		rc.start(t)
	}
	converge(t, f, rcs, before, "2 every client holds its class's figures")
	t.Logf("2 clients: %d raw clients hold their class's figures %v after connecting; on r1 %d, on r2 %d",
		len(rcs), time.Since(connected).Round(time.Millisecond), len(onReplica(rcs, r1)), len(onReplica(rcs, r2)))
	for _, r := range []*replica{r1, r2} {
		if n := len(onReplica(rcs, r)); n < rollingPerReplica-1 {
			t.Fatalf("%s holds %d raw clients, want about %d: the Service does not spread them", r.name, n, rollingPerReplica)
		}
	}
	held := map[*rollingClient]map[string][]byte{}
	for _, rc := range rcs {
		rc.mu.Lock()
		held[rc] = maps.Clone(rc.cla)
		rc.mu.Unlock()
	}
	ping := startPinger(grpcConn)
	pingStart := time.Now()

	// 3. the rollout: r3 replaces r1 (the leader), then r4 replaces r2
	r3 := roll(t, "3", svc, rcs, r1, func() *replica { return startReplica(t, bin, kubeconfig, ns, "r3", reg) }, []*replica{r2}, nil)
	// r1 hands the Lease on at SIGTERM: r2 or r3, whichever asks first,
	// takes it over
	var next *replica
	handover := testkit.Eventually(t, 15*time.Second, "r2 or r3 leads and has checked every object", func() (bool, string) {
		for _, r := range []*replica{r2, r3} {
			done := statusMetric(r.plane, "poise_status_unchanged_total") + statusMetric(r.plane, "poise_status_writes_total")
			if r.leads() && done >= float64(len(objs)) {
				next = r
				return true, ""
			}
		}
		return false, "Lease holder " + leaseHolder(t, ns)
	})
	t.Logf("3 handover: %s leads and checked every object %v after r1's clients were all back; it wrote %v statuses",
		next.name, handover.Round(time.Millisecond), statusMetric(next.plane, "poise_status_writes_total"))
	if w := statusMetric(next.plane, "poise_status_writes_total"); w != 0 {
		t.Errorf("%s, the new leader, wrote %v statuses that were already right", next.name, w)
	}
	r4 := roll(t, "3", svc, rcs, r2, func() *replica { return startReplica(t, bin, kubeconfig, ns, "r4", reg) }, []*replica{r3}, nil)

	// 4. after: the same figures, the same bytes, every client on r3 or r4
	var last *replica
	testkit.Eventually(t, 15*time.Second, "r3 or r4 leads and has checked every object", func() (bool, string) {
		for _, r := range []*replica{r3, r4} {
			done := statusMetric(r.plane, "poise_status_unchanged_total") + statusMetric(r.plane, "poise_status_writes_total")
			if r.leads() && done >= float64(len(objs)) {
				last = r
				return true, ""
			}
		}
		return false, "Lease holder " + leaseHolder(t, ns)
	})
	if w := statusMetric(last.plane, "poise_status_writes_total"); w != 0 {
		t.Errorf("%s, the last new leader, wrote %v statuses that were already right", last.name, w)
	}
	after := classFigures(t, []*replica{r3, r4}, probed)
	for _, class := range rollingClasses {
		if !maps.Equal(after[class], before[class]) {
			t.Errorf("class %q: the new replicas explain other figures than the old ones", class)
		}
	}
	converge(t, f, rcs, after, "4 every client holds its class's figures from r3 or r4")
	for _, rc := range rcs {
		rc.mu.Lock()
		if !maps.EqualFunc(rc.cla, held[rc], func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Errorf("client %s holds other ClusterLoadAssignment bytes than before the upgrade", rc.node.GetId())
		}
		if rc.on != r3.plane && rc.on != r4.plane {
			t.Errorf("client %s is on %s after the upgrade", rc.node.GetId(), rc.on.String())
		}
		rc.mu.Unlock()
	}
	f.checkAcked(t, []*plane{r3.plane, r4.plane})
	testkit.Eventually(t, 15*time.Second, "the grpc-go client's stream is on r3 or r4", func() (bool, string) {
		for _, r := range []*replica{r3, r4} {
			list, err := r.clients()
			if err != nil {
				return false, err.Error()
			}
			if slices.ContainsFunc(list, func(c server.Client) bool { return c.NodeID == "rolling-grpc" }) {
				return true, ""
			}
		}
		return false, "listed by neither"
	})
	ping.haltAndCheck(t, "4 grpc-go, through the upgrade", "while the control plane was replaced", pingStart)
	weightedRep, err = r3.explainOf(ns, "weighted")
	if err != nil {
		t.Fatal(err)
	}
	want := splitcheck.ExpectationOf(t, weightedRep)
	splitcheck.Warm(t, grpcConn, want)
	splitcheck.CheckSplit(t, "4 grpc-go after the upgrade", splitcheck.Send(grpcConn, 2000), want)

	// status: not one write through the upgrade
	events, problems := sw.stop()
	t.Logf("4 status: %d watch events on the %d objects from before r3 started to after %s's first pass (Lease holder %s)",
		len(events), len(objs), last.name, leaseHolder(t, ns))
	for _, p := range problems {
		t.Errorf("status watch: %s", p)
	}
	for _, e := range events {
		t.Errorf("status written during the upgrade (bound: no write at all): %s", e)
	}
	sw.checkUnmoved(t)

	// 5. a change while a replica drains: r5 replaces r4, and a quarter
	// into r4's drain b3 (eu-b) turns unhealthy. A replica stops following
	// the cluster at SIGTERM, so r4's clients get the change from the
	// replica they reconnect to: every client holds it within the drain
	// period and the margin of the change.
	var changed time.Time
	r4clients := onReplica(rcs, r4)
	rolled := time.Now()
	r5 := roll(t, "5", svc, rcs, r4, func() *replica { return startReplica(t, bin, kubeconfig, ns, "r5", reg) }, []*replica{r3}, func() {
		// a quarter into the drain: r4 ends its streams one at a time
		// over the drain period, and a quarter of them have ended
		testkit.Eventually(t, rollingDrain, "a quarter of r4's clients' streams ended", func() (bool, string) {
			ended := 0
			for _, rc := range r4clients {
				if len(rc.endsBetween(rolled, time.Now())) > 0 {
					ended++
				}
			}
			return 4*ended >= len(r4clients), fmt.Sprintf("%d of %d", ended, len(r4clients))
		})
		changed = time.Now()
		setHealth(t, ns, "weighted-eu-b", unhealthy(b[3]))
		setHealth(t, ns, "zonal-eu-b", unhealthy(b[3]))
	})
	changedFigures := classFigures(t, []*replica{r3, r5}, func(rep explain.Report) (bool, string) {
		if ok, why := probed(rep); !ok {
			return false, why
		}
		for _, u := range rep.Upstreams {
			if ep, ok := endpointOf(u, b[3]); !ok || ep.Probe != string(v1alpha1.ProbeUnhealthy) {
				return false, fmt.Sprintf("%s: %s is %+v", u.Name, b[3].Addr, ep)
			}
		}
		return true, ""
	})
	converge(t, f, rcs, changedFigures, "5 every client holds the change made during the drain")
	var fromR3, fromR4 []time.Duration
	for _, rc := range rcs {
		rc.mu.Lock()
		d := rc.changed.Sub(changed)
		rc.mu.Unlock()
		if slices.Contains(r4clients, rc) {
			fromR4 = append(fromR4, d)
		} else {
			fromR3 = append(fromR3, d)
		}
		if d > rollingDrain+rollingMargin {
			t.Errorf("client %s held the change %v after it was made, beyond the drain period %v and the margin %v", rc.node.GetId(), d.Round(time.Millisecond), rollingDrain, rollingMargin)
		}
	}
	t.Logf("5 change during the drain: r3's %d clients held it %s after the write; the %d clients r4 held while it drained, %s",
		len(fromR3), quantiles(fromR3), len(fromR4), quantiles(fromR4))
	f.checkAcked(t, []*plane{r3.plane, r5.plane})

	// 6. versions, over the whole run: one content per version, each
	// naming the process that sent it
	led.check(t)
}

// quantiles prints the median and the largest of ds.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Sorted(slices.Values(ds))
	return fmt.Sprintf("median %v, last %v", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// ---- the topology ----

// rollingObjects are two upstreams over the same seven backends, in
// eu/eu-a (b0..b2), eu/eu-b (b3, b4) and us/us-c (b5, b6): "weighted"
// (locality weights 3 and 1 at priority 0, us-c the standby at priority 1)
// and "zonal" (PreferSameZone, every locality weight 1 at priority 0).
func rollingObjects(ns string, b []*splitcheck.Backend) []client.Object {
	zones := []struct {
		suffix, region, zone string
		backends             []int
		weights              []int64
	}{
		{"eu-a", "eu", "eu-a", []int{0, 1, 2}, []int64{2, 1, 1}},
		{"eu-b", "eu", "eu-b", []int{3, 4}, []int64{1, 1}},
		{"us-c", "us", "us-c", []int{5, 6}, []int64{1, 2}},
	}
	var objs []client.Object
	for _, name := range []string{"weighted", "zonal"} {
		u := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
			Protocol: v1alpha1.ProtocolGRPC, AddressPolicy: &v1alpha1.AddressPolicy{AllowLoopback: true}}}
		if name == "zonal" {
			u.Spec.LocalityAffinity = &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityPreferSameZone}
		}
		objs = append(objs, u)
		for i, z := range zones {
			id := v1alpha1.LocalityID{Region: z.region, Zone: z.zone}
			priority, weight := int32(0), int64(1)
			if name == "weighted" {
				weight = []int64{3, 1, 1}[i]
				if z.region == "us" {
					priority = 1
				}
			}
			set := name + "-" + z.suffix
			objs = append(objs, &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: set, Namespace: ns}, Spec: v1alpha1.LocalitySpec{
				Upstream: name, Priority: new(priority), Weight: new(weight), LocalityID: id}})
			es := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: set, Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: name, Locality: id}}
			for j, k := range z.backends {
				es.Spec.Endpoints = append(es.Spec.Endpoints, v1alpha1.Endpoint{Address: b[k].Host, Port: b[k].Port, Weight: new(z.weights[j])})
			}
			objs = append(objs, es)
		}
	}
	return objs
}

func upstreamNames(objs []client.Object) []string {
	var out []string
	for _, o := range objs {
		if _, ok := o.(*v1alpha1.Upstream); ok {
			out = append(out, o.GetName())
		}
	}
	return out
}

// classFigures waits until every replica's explain passes ready and they
// all derive the same figures, and returns, per client class ("" for
// clients without a locality), per cluster, the figures of the
// ClusterLoadAssignment /debug/explain?from=CLASS says the class receives.
func classFigures(t *testing.T, rs []*replica, ready func(explain.Report) (bool, string)) map[string]map[string]string {
	t.Helper()
	var out map[string]map[string]string
	testkit.Eventually(t, 30*time.Second, "every replica explains the topology, alike", func() (bool, string) {
		out = map[string]map[string]string{}
		for _, class := range rollingClasses {
			for _, r := range rs {
				url := r.adminURL + "/debug/explain"
				if class != "" {
					url += "?from=" + class
				}
				var rep explain.Report
				if err := testkit.GetJSON(url, &rep); err != nil {
					return false, err.Error()
				}
				if ok, why := ready(rep); !ok {
					return false, fmt.Sprintf("%s revision %d: %s", r.name, rep.Revision, why)
				}
				figs := map[string]string{}
				for _, u := range rep.Upstreams {
					if u.Class != nil && !u.Class.ReceivesNone && u.Class.Split != nil {
						u.Split = *u.Class.Split
					}
					figs[xdsname.Cluster(topology.Key{Namespace: u.Namespace, Name: u.Name})] = explainedCLA(u)
				}
				if out[class] == nil {
					out[class] = figs
				} else if !maps.Equal(figs, out[class]) {
					return false, fmt.Sprintf("class %q: %s derives other figures than %s", class, r.name, rs[0].name)
				}
			}
		}
		return true, ""
	})
	return out
}

// converge waits until every client holds its class's figures.
func converge(t *testing.T, f *fleet, rcs []*rollingClient, want map[string]map[string]string, what string) {
	t.Helper()
	for _, class := range rollingClasses {
		var cs []*adsClient
		for _, rc := range rcs {
			if rc.class == class {
				cs = append(cs, rc.adsClient)
			}
		}
		f.waitConverged(t, fmt.Sprintf("%s (class %q)", what, class), cs, want[class])
	}
}

// ---- replicas: the real binary ----

// replica is one controlplane process in Kubernetes mode; its plane has
// only what reaches it from outside (addresses, admin endpoints).
type replica struct {
	*plane
	proc     *cpbinary.Process
	instance string
}

var instancePattern = regexp.MustCompile(`\(instance ([0-9a-z]+)\)`)

// startReplica runs the binary on namespace ns as the chart runs it, with
// a drain period of rollingDrain, and waits until it says its instance
// and is ready (its first snapshot published).
func startReplica(t *testing.T, bin, kubeconfig, ns, name string, reg *replicas) *replica {
	t.Helper()
	xds, admin := cpbinary.FreeAddr(t), cpbinary.FreeAddr(t)
	proc := cpbinary.Start(t, bin, "serve", "--source=kubernetes", "--kubeconfig", kubeconfig, "--namespace", ns,
		"--leader-election-namespace", ns, "--xds-address", xds, "--admin-address", admin,
		"--drain-period", rollingDrain.String(), "--remote-clusters=false")
	r := &replica{plane: &plane{name: name, addrs: controlplane.Addrs{XDS: xds, Admin: admin}, adminURL: "http://" + admin}, proc: proc}
	testkit.Eventually(t, 60*time.Second, name+" ready", func() (bool, string) {
		if proc.Exited() {
			t.Fatalf("%s exited with %d:\n%s", name, proc.ExitCode(), proc.Logs())
		}
		if m := instancePattern.FindStringSubmatch(proc.Logs()); m != nil {
			r.instance = m[1]
		}
		resp, err := http.Get(r.adminURL + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return r.instance != "" && resp.StatusCode == http.StatusOK, string(body)
	})
	r.addrs.Instance = r.instance
	reg.add(r)
	return r
}

// XDS is the replica's xDS address.
func (r *replica) XDS() string { return r.addrs.XDS }

// leads reports whether the replica's status writer has started.
func (r *replica) leads() bool { return strings.Contains(r.proc.Logs(), "status writer started") }

// onReplica lists the clients connected to r.
func onReplica(rcs []*rollingClient, r *replica) []*rollingClient {
	var out []*rollingClient
	for _, rc := range rcs {
		rc.mu.Lock()
		if rc.on == r.plane {
			out = append(out, rc)
		}
		rc.mu.Unlock()
	}
	return out
}

// roll replaces old as a Deployment with maxSurge 1 and maxUnavailable 0
// does: the new replica starts and is ready, joins the Service, and only
// then old leaves it and is sent SIGTERM (then midDrain runs, when set).
// It waits until every client of old holds its whole state again from a
// replica of remaining or the new one, checks how and when they moved and
// that old exits 0, and returns the new replica.
func roll(t *testing.T, phase string, svc *service, rcs []*rollingClient, old *replica, start func() *replica, remaining []*replica, midDrain func()) *replica {
	t.Helper()
	began := time.Now()
	next := start()
	t.Logf("%s %s: %s (instance %s) ready %v after it started", phase, next.name, next.name, next.instance, time.Since(began).Round(time.Millisecond))
	ready := []string{next.XDS()}
	for _, r := range remaining {
		ready = append(ready, r.XDS())
	}
	svc.set(append(ready, old.XDS())...)
	movers := onReplica(rcs, old)
	svc.set(ready...)
	sigterm := time.Now()
	if err := old.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if midDrain != nil {
		midDrain()
	}
	var moved []*span
	testkit.Eventually(t, rollingDrain+rollingMargin+10*time.Second, fmt.Sprintf("the %d clients of %s hold their whole state again", len(movers), old.name), func() (bool, string) {
		moved = moved[:0]
		for _, rc := range movers {
			sp := rc.completeAfter(sigterm)
			if sp == nil {
				return false, fmt.Sprintf("client %s: %s", rc.node.GetId(), rc.describe())
			}
			moved = append(moved, sp)
		}
		return true, ""
	})
	select {
	case <-old.proc.Done():
	case <-time.After(rollingDrain + 10*time.Second):
		t.Fatalf("%s still runs %v after SIGTERM", old.name, time.Since(sigterm).Round(time.Millisecond))
	}
	exited := time.Since(sigterm)
	if code := old.proc.ExitCode(); code != 0 {
		t.Errorf("%s exited with %d after SIGTERM", old.name, code)
	}
	if exited > rollingDrain+2*time.Second {
		t.Errorf("%s exited %v after SIGTERM, beyond its drain period %v and 2 s", old.name, exited.Round(time.Millisecond), rollingDrain)
	}

	// how they moved: each stream ended with UNAVAILABLE, one at a time
	// over the drain period, to a replica still in the Service
	var reconnect, whole []time.Duration
	to := map[string]int{}
	for i, rc := range movers {
		sp := moved[i]
		reconnect = append(reconnect, sp.start.Sub(sigterm))
		whole = append(whole, sp.complete.Sub(sigterm))
		if sp.r != next && !slices.Contains(remaining, sp.r) {
			t.Errorf("client %s moved to %s, not a replica in the Service", rc.node.GetId(), sp.r.name)
		} else {
			to[sp.r.name]++
		}
		for _, e := range rc.endsBetween(sigterm, sp.start) {
			if e.code != codes.Unavailable || !strings.Contains(e.msg, "shutting down") {
				t.Errorf("client %s: its stream on %s ended with %v %q, want UNAVAILABLE saying the server shuts down", rc.node.GetId(), old.name, e.code, e.msg)
			}
		}
	}
	slices.Sort(reconnect)
	slices.Sort(whole)
	first, lastBack := reconnect[0], whole[len(whole)-1]
	t.Logf("%s %s → %s: SIGTERM; %d clients moved %v; new streams from %v to %v after SIGTERM (median %v); the last held its whole state %v after SIGTERM (drain period %v, margin %v); %s exited %v after SIGTERM",
		phase, old.name, next.name, len(movers), to, first.Round(time.Millisecond), reconnect[len(reconnect)-1].Round(time.Millisecond),
		reconnect[len(reconnect)/2].Round(time.Millisecond), lastBack.Round(time.Millisecond), rollingDrain, rollingMargin, old.name, exited.Round(time.Millisecond))
	if lastBack > rollingDrain+rollingMargin {
		t.Errorf("the last client of %s held its state again %v after SIGTERM, beyond the drain period %v and the margin %v", old.name, lastBack.Round(time.Millisecond), rollingDrain, rollingMargin)
	}
	// the drain ends stream k of n at k/n of the period: the moves spread
	// over most of it rather than coming at once
	if spread := reconnect[len(reconnect)-1] - first; spread < rollingDrain/2 {
		t.Errorf("the clients of %s reconnected within %v of each other: the drain should spread them over its %v", old.name, spread.Round(time.Millisecond), rollingDrain)
	}
	for _, rc := range movers {
		rc.startedWithCDS(t)
	}
	return next
}

// replicas are the test's replicas, found by their xDS address or their
// instance id.
type replicas struct {
	mu   sync.Mutex
	list []*replica
}

func (rs *replicas) add(r *replica) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.list = append(rs.list, r)
}

// find is the replica f holds for, nil when none does.
func (rs *replicas) find(f func(*replica) bool) *replica {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if i := slices.IndexFunc(rs.list, f); i >= 0 {
		return rs.list[i]
	}
	return nil
}

// at is the replica listening on the xDS address addr.
func (rs *replicas) at(addr string) *replica {
	return rs.find(func(r *replica) bool { return r.XDS() == addr })
}

// instanceOf is the process part of a version: INSTANCE-REVISION[.N][@…].
func instanceOf(version string) string {
	id, _, _ := strings.Cut(version, "-")
	return id
}

// ---- the Service ----

// service stands for the Kubernetes Service in front of the replicas, as
// kube-proxy carries it out: each new connection goes to the next ready
// replica in turn and stays with it until either end closes it. A replica
// taken out of it (terminating) gets no new connection; those it has stay.
type service struct {
	lis    net.Listener
	mu     sync.Mutex
	ready  []string
	next   int
	open   map[net.Conn]struct{}
	routes map[string]string // client address → the endpoint its connection went to
	closed bool
}

func startService(t *testing.T) *service {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &service{lis: lis, open: map[net.Conn]struct{}{}, routes: map[string]string{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { s.carry(c) })
		}
	})
	t.Cleanup(func() {
		lis.Close()
		s.mu.Lock()
		s.closed = true
		for c := range s.open {
			c.Close()
		}
		s.mu.Unlock()
		wg.Wait()
	})
	return s
}

func (s *service) addr() string { return s.lis.Addr().String() }

// route is the endpoint the connection from the client address went to,
// "" for none.
func (s *service) route(client string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.routes[client]
}

// set makes addrs the Service's ready endpoints.
func (s *service) set(addrs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready = slices.Clone(addrs)
}

// carry takes one connection to the next ready endpoint; a connection
// that finds none, or whose endpoint refuses it, is closed, as a client
// of a Service with no ready endpoint sees it.
func (s *service) carry(in net.Conn) {
	s.mu.Lock()
	if len(s.ready) == 0 || s.closed {
		s.mu.Unlock()
		in.Close()
		return
	}
	to := s.ready[s.next%len(s.ready)]
	s.next++
	s.mu.Unlock()
	out, err := net.DialTimeout("tcp", to, 2*time.Second)
	if err != nil {
		in.Close()
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	s.open[in], s.open[out] = struct{}{}, struct{}{}
	s.routes[in.RemoteAddr().String()] = to
	s.mu.Unlock()
	pipe(in, out)
	s.mu.Lock()
	delete(s.open, in)
	delete(s.open, out)
	s.mu.Unlock()
}

// pipe copies between a and b both ways until either side ends, then
// closes both and waits for both copies.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(a, b); done <- struct{}{} }()
	go func() { _, _ = io.Copy(b, a); done <- struct{}{} }()
	<-done
	a.Close()
	b.Close()
	<-done
}

// ---- the clients ----

// rollingClient is an adsClient behind the Service: one channel to it,
// and a new stream after Envoy's retry backoff whenever the last ends. It
// records every response: which replica sent it (the Service says where
// the stream's connection went), in its spans, how each stream ended, and
// each (version, content) in the ledger.
type rollingClient struct {
	*adsClient
	class    string
	clusters int // how many clusters it holds: a span is complete once it has sent each one and its assignment
	svc      *service
	reg      *replicas
	led      *ledger

	// under adsClient.mu
	local     string // the address of the current stream's connection
	spans     []*span
	newStream bool
	ends      []streamEnd
}

// span is what a client received on one stream: from which replica, when
// the first response came, which resources it sent, and when it had sent
// every cluster and every assignment.
type span struct {
	r               *replica
	start, complete time.Time
	got             [2]map[string]bool
	answered        [2]bool // a response of each type arrived on it
}

type streamEnd struct {
	at   time.Time
	code codes.Code
	msg  string
}

func newRollingClient(id, class string, delta bool, clusters int, svc *service, reg *replicas, led *ledger) *rollingClient {
	c := newADSClient(id, delta)
	c.node.Cluster = "rolling"
	if region, zone, ok := strings.Cut(class, "/"); ok {
		c.node.Locality = &core.Locality{Region: region, Zone: zone}
	}
	rc := &rollingClient{adsClient: c, class: class, clusters: clusters, svc: svc, reg: reg, led: led}
	c.observe = rc.observe
	return rc
}

// start runs the client until the test ends.
func (rc *rollingClient) start(t *testing.T) {
	t.Helper()
	// each stream notes the address of its connection, which the Service
	// knows the replica of
	local := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err == nil {
			if p, ok := peer.FromContext(cs.Context()); ok && p.LocalAddr != nil {
				rc.mu.Lock()
				rc.local = p.LocalAddr.String()
				rc.mu.Unlock()
			}
		}
		return cs, err
	}
	conn, err := grpc.NewClient(rc.svc.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStreamInterceptor(local))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	done := make(chan struct{})
	t.Cleanup(func() {
		<-done
		conn.Close()
	})
	ads := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)
	go func() {
		defer close(done)
		backoff := envoyRetryBase
		for {
			rc.mu.Lock()
			rc.firstType, rc.newStream = "", true
			before := rc.responses
			rc.mu.Unlock()
			var err error
			if rc.delta {
				err = rc.runDelta(ctx, ads)
			} else {
				err = rc.runSotw(ctx, ads)
			}
			if ctx.Err() != nil {
				return
			}
			st := status.Convert(err)
			rc.mu.Lock()
			rc.ends = append(rc.ends, streamEnd{at: time.Now(), code: st.Code(), msg: st.Message()})
			if rc.responses > before {
				backoff = envoyRetryBase
			}
			rc.mu.Unlock()
			wait := rand.N(backoff)
			backoff = min(2*backoff, rollingRetryMax)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}()
}

// observe records one response; rc.mu is held.
func (rc *rollingClient) observe(m proto.Message) {
	now := time.Now()
	protocol := "sotw"
	var typeURL, version string
	type item struct {
		name, version string
		value         []byte
	}
	var items []item
	switch resp := m.(type) {
	case *discoverygrpc.DiscoveryResponse:
		typeURL, version = resp.GetTypeUrl(), resp.GetVersionInfo()
		for _, a := range resp.GetResources() {
			items = append(items, item{resourceName(a), version, a.GetValue()})
		}
	case *discoverygrpc.DeltaDiscoveryResponse:
		protocol, typeURL, version = "delta", resp.GetTypeUrl(), resp.GetSystemVersionInfo()
		for _, r := range resp.GetResources() {
			items = append(items, item{r.GetName(), r.GetVersion(), r.GetResource().GetValue()})
		}
	}
	r := rc.reg.at(rc.svc.route(rc.local))
	if r == nil {
		rc.problem("a response on connection %s, which the Service did not carry to a replica", rc.local)
		return
	}
	rc.on = r.plane
	// a response's version is the replica's; a Delta resource's names its
	// bytes (a zone variant's adds @ZONE to its base's, whose bytes it has)
	if instanceOf(version) != r.instance {
		rc.problem("%s sent version %q, which does not start with its instance %s", r.name, version, r.instance)
	}
	for _, it := range items {
		if protocol != "delta" {
			continue
		}
		digest, _, _ := strings.Cut(it.version, "@")
		if want := fmt.Sprintf("%016x", xxhash.Sum64(it.value)); digest != want {
			rc.problem("%s sent %s at version %q, not the digest of its bytes %s", r.name, it.name, it.version, want)
		}
	}
	var sp *span
	if n := len(rc.spans); n > 0 && !rc.newStream && rc.spans[n-1].r == r {
		sp = rc.spans[n-1]
	} else {
		sp = &span{r: r, start: now, got: [2]map[string]bool{{}, {}}}
		rc.spans = append(rc.spans, sp)
		rc.newStream = false
	}
	k := cdsIdx
	if typeURL == resource.EndpointType {
		k = edsIdx
	}
	sp.answered[k] = true
	for _, it := range items {
		sp.got[k][it.name] = true
		rc.led.record(rc.node.GetId(), r.name, strings.Join([]string{rc.class, protocol, typeURL, it.name, it.version}, " "), it.value)
	}
	// whole again: a SotW client is sent everything on a new stream; a
	// Delta one says what it holds and is sent only what differs (resource
	// versions name their bytes), so it is whole once both types have
	// answered and it holds every cluster and assignment
	held := func(i int) int {
		n := len(rc.resources[i])
		for name := range sp.got[i] {
			if _, ok := rc.resources[i][name]; !ok {
				n++
			}
		}
		return n
	}
	whole := len(sp.got[cdsIdx]) >= rc.clusters && len(sp.got[edsIdx]) >= rc.clusters
	if protocol == "delta" {
		whole = sp.answered[cdsIdx] && sp.answered[edsIdx] && held(cdsIdx) >= rc.clusters && held(edsIdx) >= rc.clusters
	}
	if sp.complete.IsZero() && whole {
		sp.complete = now
	}
}

// resourceName is the name of a Cluster or ClusterLoadAssignment.
func resourceName(a *anypb.Any) string {
	if a.GetTypeUrl() == resource.EndpointType {
		n, _ := claCluster(a.GetValue())
		return n
	}
	n, _ := clusterName(a)
	return n
}

// completeAfter is the first span begun after t in which the client was
// sent its whole state, nil while there is none.
func (rc *rollingClient) completeAfter(t time.Time) *span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, sp := range rc.spans {
		if sp.start.After(t) && !sp.complete.IsZero() {
			return sp
		}
	}
	return nil
}

// endsBetween are the stream ends from a to b.
func (rc *rollingClient) endsBetween(a, b time.Time) []streamEnd {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []streamEnd
	for _, e := range rc.ends {
		if e.at.After(a) && e.at.Before(b) {
			out = append(out, e)
		}
	}
	return out
}

// describe says where the client is, for a failure.
func (rc *rollingClient) describe() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rc.protocol(), rc.class)
	for _, sp := range rc.spans {
		fmt.Fprintf(&b, "; on %s from %s: %d clusters, %d assignments", sp.r.name, sp.start.Format("15:04:05.000"), len(sp.got[cdsIdx]), len(sp.got[edsIdx]))
	}
	for _, e := range rc.ends {
		fmt.Fprintf(&b, "; stream ended %s: %v %s", e.at.Format("15:04:05.000"), e.code, e.msg)
	}
	return b.String()
}

// ---- versions ----

// ledger holds, for every (class, protocol, type, resource, version) any
// client was sent, a digest of the bytes sent under it and who sent them
// first. Two contents under one key would let a client that says it holds
// the version keep the wrong one.
type ledger struct {
	mu        sync.Mutex
	seen      map[string]sent
	conflicts []string
}

type sent struct {
	sum  [32]byte
	from string
}

func (l *ledger) record(client, from, key string, value []byte) {
	sum := sha256.Sum256(value)
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.seen[key]; ok && old.sum != sum {
		l.conflicts = append(l.conflicts, fmt.Sprintf("client %s was sent %s by %s as %x, and by %s as %x", client, key, from, sum[:6], old.from, old.sum[:6]))
		return
	}
	l.seen[key] = sent{sum, from}
}

// check fails on any version sent for two contents.
func (l *ledger) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conflicts {
		t.Errorf("a version sent for two contents: %s", c)
	}
	per := map[string]int{}
	for _, s := range l.seen {
		per[s.from]++
	}
	t.Logf("6 versions: %d (class, protocol, type, resource, version) keys, each with one content; first sent by %v", len(l.seen), per)
}

// ---- status ----

// statusWatch watches the Upstreams, Localities and EndpointSets of a
// namespace through the apiserver from a list's resource version on, and
// records every event.
type statusWatch struct {
	ns       string
	rvs      map[string]string // kind/name → resourceVersion at the start
	mu       sync.Mutex
	events   []string
	errs     []string
	stopping bool // what a watch says once stopped is not the apiserver's
	cancel   func()
	done     sync.WaitGroup
}

func watchStatus(t *testing.T, ns string) *statusWatch {
	t.Helper()
	wc, err := client.NewWithWatch(restConfig, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	w := &statusWatch{ns: ns, rvs: map[string]string{}}
	var watches []watch.Interface
	for _, list := range statusLists() {
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for k, rv := range objectVersions(list) {
			w.rvs[k] = rv
		}
		lm, _ := list.(metav1.ListInterface)
		wi, err := wc.Watch(ctx, list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: lm.GetResourceVersion()}})
		if err != nil {
			t.Fatal(err)
		}
		watches = append(watches, wi)
	}
	w.cancel = func() {
		for _, wi := range watches {
			wi.Stop()
		}
		cancel()
	}
	for i, wi := range watches {
		w.done.Go(func() {
			for ev := range wi.ResultChan() {
				w.mu.Lock()
				switch o := ev.Object.(type) {
				case *metav1.Status:
					if !w.stopping {
						w.errs = append(w.errs, o.Message)
					}
				case client.Object:
					w.events = append(w.events, fmt.Sprintf("%s %T %s resourceVersion %s: %s", ev.Type, o, o.GetName(), o.GetResourceVersion(), conditionsOf(o)))
				}
				w.mu.Unlock()
			}
			w.mu.Lock()
			if !w.stopping {
				w.errs = append(w.errs, fmt.Sprintf("the watch of %T ended before the test stopped it", statusLists()[i]))
			}
			w.mu.Unlock()
		})
	}
	t.Cleanup(func() { w.stop() })
	return w
}

// stop ends the watch and returns what it saw.
func (w *statusWatch) stop() (events, errs []string) {
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
	w.cancel()
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events), slices.Clone(w.errs)
}

// checkUnmoved compares every object's resourceVersion with the start's.
func (w *statusWatch) checkUnmoved(t *testing.T) {
	t.Helper()
	now := map[string]string{}
	for _, list := range statusLists() {
		if err := k8s.List(t.Context(), list, client.InNamespace(w.ns)); err != nil {
			t.Fatal(err)
		}
		maps.Copy(now, objectVersions(list))
	}
	if !maps.Equal(now, w.rvs) {
		t.Errorf("resourceVersions moved during the upgrade: before %v, after %v", w.rvs, now)
	}
}

func statusLists() []client.ObjectList {
	return []client.ObjectList{&v1alpha1.UpstreamList{}, &v1alpha1.LocalityList{}, &v1alpha1.EndpointSetList{}}
}

func objectVersions(list client.ObjectList) map[string]string {
	out := map[string]string{}
	switch l := list.(type) {
	case *v1alpha1.UpstreamList:
		for _, o := range l.Items {
			out["Upstream/"+o.Name] = o.ResourceVersion
		}
	case *v1alpha1.LocalityList:
		for _, o := range l.Items {
			out["Locality/"+o.Name] = o.ResourceVersion
		}
	case *v1alpha1.EndpointSetList:
		for _, o := range l.Items {
			out["EndpointSet/"+o.Name] = o.ResourceVersion
		}
	}
	return out
}

// conditionsOf summarises an object's observedGeneration and conditions.
func conditionsOf(o client.Object) string {
	var gen int64
	var conds []metav1.Condition
	switch x := o.(type) {
	case *v1alpha1.Upstream:
		gen, conds = x.Status.ObservedGeneration, x.Status.Conditions
	case *v1alpha1.Locality:
		gen, conds = x.Status.ObservedGeneration, x.Status.Conditions
	case *v1alpha1.EndpointSet:
		gen, conds = x.Status.ObservedGeneration, x.Status.Conditions
	}
	parts := []string{fmt.Sprintf("observedGeneration %d", gen)}
	for _, c := range conds {
		parts = append(parts, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
	}
	return strings.Join(parts, ", ")
}
