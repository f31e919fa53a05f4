package resilience

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/test/history"
	"poise.dev/poise/test/xdsproxy"
)

// podToken makes pod name in ns, of service account sa on node, and
// returns a token bound to it for audience "poise".
func podToken(t *testing.T, cs kubernetes.Interface, ns, sa, name, node string) string {
	t.Helper()
	ctx := t.Context()
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node, // envtest has no scheduler
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{"poise"}, ExpirationSeconds: new(int64(3600)),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// TestPartitionHealsDuringATokenReReview: a replica that authenticates
// its clients by service-account token, reviewing each token every 2 s,
// loses the apiserver for 6 s, less than a review's 10 s timeout, so the
// reviews due during the cut are still in flight when the link heals.
// Meanwhile one client's pod is deleted (its token revoked) and both
// tenants' Upstreams change. The tenants' clients never receive the other
// tenant's resources (each tenant's Upstreams are exported to it alone);
// the clients whose tokens still hold converge on the changes; the one
// whose pod was deleted is refused once its token is reviewed again, and
// holds what it had until then.
func TestPartitionHealsDuringATokenReReview(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(l.restConfig)
	if err != nil {
		t.Fatal(err)
	}
	tenants := []string{"team-a", "team-b"}
	var sets []client.ObjectKey
	if err := l.k8s.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range tenants {
		for _, o := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns}}} {
			if err := l.k8s.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 2 {
			name := fmt.Sprintf("%s-svc%d", ns, i)
			set := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{Upstream: name,
				Endpoints: []v1alpha1.Endpoint{{Address: fmt.Sprintf("10.%d.0.1", 50+len(sets)), Port: 8080, Weight: new(int64(1))},
					{Address: fmt.Sprintf("10.%d.0.2", 50+len(sets)), Port: 8080, Weight: new(int64(1))}}}}
			if err := l.k8s.Create(ctx, set); err != nil {
				t.Fatal(err)
			}
			sets = append(sets, client.ObjectKeyFromObject(set))
			if err := l.k8s.Create(ctx, &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: v1alpha1.UpstreamSpec{ExportTo: []string{ns}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := l.host(0).serve("", "--leader-election-namespace", "team-a",
		"--xds-auth=token", "--xds-token-audience=poise", "--xds-token-review-interval=2s")
	rec := xdsproxy.NewRecorder()
	link := startProxy(t, "replica-0", r.xds, rec)
	var clients []history.Client
	byID := map[string]*autoClient{}
	start := func(id, class, pod string, delta bool) {
		c := &autoClient{node: node(id, class), addrs: []string{link.Addr()}, delta: delta, names: map[string][]string{},
			token: podToken(t, cs, class, "app", pod, "node-0")}
		go c.run(ctx)
		byID[id] = c
		clients = append(clients, history.Client{ID: id, Class: class})
	}
	for _, ns := range tenants {
		start("observer-"+ns, ns, "observer-0", false)
		start(ns+"-sotw", ns, "sotw-0", false)
		start(ns+"-delta", ns, "delta-0", true)
	}
	revoked := "team-a-sotw"
	build := func() history.History {
		var lists [][]history.Publication
		for _, ns := range tenants {
			pubs, err := history.FromObserver(rec.Events(), "observer-"+ns, ns, revisionOf)
			if err != nil {
				t.Fatal(err)
			}
			lists = append(lists, pubs)
		}
		return history.History{Clients: clients, Publications: history.Merge(lists...), Events: rec.Events()}
	}
	// waitConverged waits, event by event, until the observers have seen
	// more than pubs revisions and every client but those left holds the
	// latest view of its tenant
	waitConverged := func(what string, pubs int, left ...string) time.Duration {
		t.Helper()
		began := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := rec.WaitFor(wctx, func([]history.Event) bool {
			h := build()
			if len(h.Publications) <= pubs {
				return false
			}
			last := h.Publications[len(h.Publications)-1]
			for _, ns := range tenants {
				if len(last.Views[ns][endpointType]) != 2 {
					return false
				}
			}
			return len(history.Check(h, history.Options{Left: left}).Converged) == len(clients)-len(left)
		}); err != nil {
			res := history.Check(build(), history.Options{Left: left})
			t.Fatalf("%s: %d of %d clients converged (%v): %v", what, len(res.Converged), len(clients)-len(left), err, res.Violations)
		}
		return time.Since(began)
	}
	first := waitConverged("every tenant's clients", 0)
	rec.Settled()

	// the cut, shorter than a review's timeout; meanwhile the revoked
	// client's pod goes, and each tenant's first Upstream changes
	const cut = 6 * time.Second
	cutAt := time.Now()
	r.h.cut(r.h.apiLink)
	if err := cs.CoreV1().Pods("team-a").Delete(ctx, "sotw-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []client.ObjectKey{sets[0], sets[2]} {
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var set v1alpha1.EndpointSet
			if err := l.k8s.Get(ctx, k, &set); err != nil {
				return err
			}
			set.Spec.Endpoints[0].Weight = new(int64(5))
			return l.k8s.Update(ctx, &set)
		}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(cutAt.Add(cut))): // the cut's length is time that must pass
	}
	refusedDuringCut := refusals(r.get("/metrics"))
	before := len(build().Publications) // the edits made during the cut come after
	healed := time.Now()
	r.h.restore(r.h.apiLink)

	after := waitConverged("after the heal", before, revoked)
	rec.Settled()
	// the revoked client is refused once its token is reviewed again:
	// within the review interval, the apiserver's own token cache (10 s)
	// and a review's round trip
	var refusedAt time.Time
	deadline := time.After(30 * time.Second)
	for refusedAt.IsZero() {
		for _, e := range byID[revoked].Ends() {
			if e.at.After(healed) && status.Code(e.err) == codes.Unauthenticated && refusedAt.IsZero() {
				refusedAt = e.at
			}
		}
		if !refusedAt.IsZero() {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("the client whose pod was deleted was not refused within 30s of the heal; its streams ended: %s", summarize(byID[revoked].Ends()))
		case <-time.After(100 * time.Millisecond): // its stream's end is seen only by the client
		}
	}
	h := build()
	res := history.Check(h, history.Options{HealedAt: healed, ConvergeWithin: 30 * time.Second, Left: []string{revoked}})
	for _, v := range res.Violations {
		t.Error(v)
	}
	// the revoked client received nothing after its refusal
	for _, e := range h.Events {
		if e.Client == revoked && e.Kind == history.Response && e.At.After(refusedAt) {
			t.Errorf("the revoked client received %s version %s at %v, after its refusal at %v", e.Type, e.Version, e.At, refusedAt)
		}
	}
	var kept []string
	for _, id := range []string{"team-a-delta", "team-b-sotw", "team-b-delta"} {
		ends := 0
		for _, e := range byID[id].Ends() {
			if e.at.After(cutAt) {
				ends++
			}
		}
		kept = append(kept, fmt.Sprintf("%s %d", id, ends))
	}
	t.Logf("a %v cut of a token-authenticating replica (review every 2s, timeout 10s), a pod deleted and both tenants' Upstreams changed meanwhile: "+
		"first convergence %v; every client whose token holds converged %v after the heal (slowest %v); the revoked client refused %v after the heal; "+
		"refusals by reason at the heal: %s; stream ends since the cut: %s; %d revisions, %d events, %d violations",
		cut, first.Round(time.Millisecond), after.Round(time.Millisecond), res.Slowest.Round(time.Millisecond), refusedAt.Sub(healed).Round(time.Millisecond),
		refusedDuringCut, strings.Join(kept, ", "), len(h.Publications), len(h.Events), len(res.Violations))
}

// summarize counts a client's stream ends by their status, with the
// last one's message.
func summarize(ends []streamEnd) string {
	counts := map[string]int{}
	var order []string
	last := ""
	for _, e := range ends {
		st, _ := status.FromError(e.err)
		k := st.Code().String()
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
		last = st.Message()
	}
	var out []string
	for _, k := range order {
		out = append(out, fmt.Sprintf("%s ×%d", k, counts[k]))
	}
	return fmt.Sprintf("%s; the last: %q", strings.Join(out, ", "), last)
}

// refusals is poise_xds_refused_total's lines, reason by reason.
func refusals(metrics string) string {
	var out []string
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "poise_xds_refused_total{") && !strings.HasSuffix(line, " 0") {
			out = append(out, strings.TrimPrefix(line, "poise_xds_refused_total"))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}
