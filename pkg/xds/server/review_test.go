package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/identity/identitytest"
)

// openStream is a SotW stream of the token's client that has received its
// first response; ended receives the status it ends with and when.
type openStream struct {
	ended chan streamEnd
}

type streamEnd struct {
	err error
	at  time.Time
}

func (h *tokenHarness) open(t *testing.T, token, id string) *openStream {
	t.Helper()
	ctx, cancel := context.WithCancel(bearing(token))
	t.Cleanup(cancel)
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(h.conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DiscoveryRequest{Node: envoyNode(id), TypeUrl: CDS}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatalf("%s: not served: %v", id, err)
	}
	o := &openStream{ended: make(chan streamEnd, 1)}
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				o.ended <- streamEnd{err, time.Now()}
				return
			}
		}
	}()
	return o
}

// end waits up to within for the stream's end.
func (o *openStream) end(t *testing.T, within time.Duration) streamEnd {
	t.Helper()
	select {
	case e := <-o.ended:
		return e
	case <-time.After(within):
		t.Fatalf("the stream still open after %v", within)
	}
	return streamEnd{}
}

// open reports whether the stream has not ended.
func (o *openStream) open() bool {
	select {
	case e := <-o.ended:
		o.ended <- e
		return false
	default:
		return true
	}
}

func (h *tokenHarness) refusals(r identity.Reason) float64 {
	return testutil.ToFloat64(h.metrics.Refused.WithLabelValues(string(r)))
}

// TestTokenReviewedAgainWhileStreamsLast: streams whose token's review
// interval ends are not ended while TokenReview still accepts the token:
// it is reviewed again, once per interval however many streams present it,
// and /debug/clients shows the expiry move on. Once the token is revoked
// (its pod deleted), every stream ends with Unauthenticated bad-token within
// an interval of the revocation, each counted; a new stream with the token
// is refused.
func TestTokenReviewedAgainWhileStreamsLast(t *testing.T) {
	// slack: the review itself and the scheduling of a loaded machine (CI runs
	// this under -race beside other packages)
	const interval, slack = time.Second, 2 * time.Second
	h := newTokenHarness(t, identity.TokenOptions{ReviewInterval: interval})
	h.kube.SetZone("node-z1", "r1", "z1")
	publishV1(t, h.harness)
	tok := h.pod("pay-0", "node-z1")
	const streams = 5
	open := make([]*openStream, streams)
	for i := range open {
		open[i] = h.open(t, tok, "pay-0."+itoa(i))
	}
	first := h.client("pay-0.0").Identity.Expires
	start := time.Now()
	// Three intervals and a half: a review runs when an interval ends, so
	// a look at an end could find the old expiry just past.
	// sleep: the streams must outlive several review intervals of real time
	time.Sleep(3*interval + interval/2)
	for i, o := range open {
		if !o.open() {
			t.Fatalf("stream %d ended while its token is valid: %v", i, (<-o.ended).err)
		}
	}
	intervals := int64(time.Since(start) / interval)
	if got := h.kube.Reviews(); got < 2 || got > intervals+2 {
		t.Errorf("%d streams over %d review intervals: %d TokenReviews, want one per interval (2 to %d)", streams, intervals, got, intervals+2)
	}
	t.Logf("%d streams over %d review intervals: %d TokenReviews", streams, intervals, h.kube.Reviews())
	if now := h.client("pay-0.0").Identity.Expires; !now.After(first) || now.Before(time.Now()) {
		t.Errorf("/debug/clients expiry %v after the reviews, first %v: want it moved on, in the future", now, first)
	}

	refusedBefore := h.refusals(identity.ReasonBadToken)
	h.kube.Revoke(tok)
	revoked := time.Now()
	for i, o := range open {
		e := o.end(t, interval+slack+time.Second)
		late := e.at.Sub(revoked)
		if status.Code(e.err) != codes.Unauthenticated || !strings.Contains(e.err.Error(), "bad-token") {
			t.Errorf("stream %d ended with %v, want Unauthenticated bad-token", i, e.err)
		}
		if late > interval+slack {
			t.Errorf("stream %d ended %v after the revocation, want within the review interval %v (and %v for the review)", i, late, interval, slack)
		}
		if i == 0 {
			t.Logf("ended %v after the revocation: %v", late.Round(time.Millisecond), e.err)
		}
	}
	if got := h.refusals(identity.ReasonBadToken) - refusedBefore; got != streams {
		t.Errorf("poise_xds_refused_total{reason=bad-token} rose by %v, want %d", got, streams)
	}
	if err := callIn(bearing(tok), h.conn, "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources", true, envoyNode("pay-0.again")); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "bad-token") {
		t.Errorf("a new stream with the revoked token: %v, want Unauthenticated bad-token", err)
	}
}

// TestTokenReviewEndsStreamWhenItCannotBeAsked: when the apiserver cannot
// be asked at the end of a review interval the stream ends with
// Unavailable (token-review-failed), as a new one would be refused; a
// token's own expiry ends it with Unauthenticated "credentials expired",
// whatever the interval.
func TestTokenReviewEndsStreamWhenItCannotBeAsked(t *testing.T) {
	h := newTokenHarness(t, identity.TokenOptions{ReviewInterval: 200 * time.Millisecond})
	publishV1(t, h.harness)
	unbound := identitytest.Token("unbound", time.Now().Add(time.Hour))
	h.kube.Accept(unbound, "a", "pay", "", "", "")
	o := h.open(t, unbound, "unbound")
	h.kube.Fail(errors.New("connection refused"))
	e := o.end(t, 2*time.Second)
	if status.Code(e.err) != codes.Unavailable || !strings.Contains(e.err.Error(), "token-review-failed") {
		t.Errorf("a review the apiserver could not answer ended the stream with %v, want Unavailable token-review-failed", e.err)
	}
	if got := h.refusals(identity.ReasonTokenReviewFailed); got != 1 {
		t.Errorf("token-review-failed refusals %v, want 1", got)
	}
	h.kube.Fail(nil)

	long := newTokenHarness(t, identity.TokenOptions{ReviewInterval: time.Hour})
	publishV1(t, long.harness)
	exp := time.Now().Add(2 * time.Second).Truncate(time.Second)
	tok := identitytest.Token("short", exp)
	long.kube.Accept(tok, "a", "pay", "", "", "")
	o = long.open(t, tok, "short")
	e = o.end(t, 4*time.Second)
	if late := e.at.Sub(exp); late < 0 || late > time.Second {
		t.Errorf("the stream ended %v after its token's exp, want within 1s", late)
	}
	if status.Code(e.err) != codes.Unauthenticated || !strings.Contains(e.err.Error(), "credentials expired") {
		t.Errorf("at the token's exp the stream ended with %v, want Unauthenticated credentials expired", e.err)
	}
	if got := long.refusals(identity.ReasonExpired); got != 1 {
		t.Errorf("expired refusals %v, want 1", got)
	}
	if got := long.kube.Reviews(); got != 1 {
		t.Errorf("%d TokenReviews, want 1: a token past its exp is refused unreviewed", got)
	}
}

// TestMadeUpTokensAreThrottledPerAddress: over real gRPC, a client sending
// a new made-up token on every RPC (SotW, Delta, Fetch) makes the plane ask
// the apiserver 30 times (the default budget); later RPCs from its address
// are refused unreviewed, Unauthenticated token-review-throttled, each
// counted.
func TestMadeUpTokensAreThrottledPerAddress(t *testing.T) {
	h := newTokenHarness(t, identity.TokenOptions{})
	publishV1(t, h.harness)
	methods := []struct {
		method string
		stream bool
	}{
		{"/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources", true},
		{"/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources", true},
		{"/envoy.service.cluster.v3.ClusterDiscoveryService/FetchClusters", false},
	}
	const rpcs, budget = 90, 30
	reasons := map[string]int{}
	for i := range rpcs {
		m := methods[i%len(methods)]
		tok := identitytest.Token("made-up-"+itoa(i), time.Now().Add(time.Hour))
		err := callIn(bearing(tok), h.conn, m.method, m.stream, envoyNode("liar"))
		switch {
		case status.Code(err) == codes.Unauthenticated && strings.Contains(err.Error(), "bad-token"):
			reasons["bad-token"]++
		case status.Code(err) == codes.Unauthenticated && strings.Contains(err.Error(), "token-review-throttled"):
			reasons["token-review-throttled"]++
		default:
			t.Fatalf("RPC %d (%s) with a made-up token: %v", i, m.method, err)
		}
	}
	if got := h.kube.Reviews(); got != budget {
		t.Errorf("%d TokenReviews for %d made-up tokens from one address, want %d", got, rpcs, budget)
	}
	if reasons["bad-token"] != budget || reasons["token-review-throttled"] != rpcs-budget {
		t.Errorf("outcomes %v, want %d bad-token and %d token-review-throttled", reasons, budget, rpcs-budget)
	}
	if got := h.refusals(identity.ReasonTokenReviewThrottled); got != rpcs-budget {
		t.Errorf("poise_xds_refused_total{reason=token-review-throttled} = %v, want %d", got, rpcs-budget)
	}
}
