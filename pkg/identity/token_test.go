package identity_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	authenticationv1 "k8s.io/api/authentication/v1"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/identity/identitytest"
	"poise.dev/poise/test/testkit"
)

func bearerCtx(values ...string) context.Context {
	md := metadata.MD{}
	for _, v := range values {
		md.Append("authorization", v)
	}
	return metadata.NewIncomingContext(context.Background(), md)
}

func TestBearerBounds(t *testing.T) {
	t.Parallel()
	kube := identitytest.New()
	good := identitytest.Token("ok", time.Now().Add(time.Hour))
	kube.Accept(good, "ns", "sa", "", "", "")
	auth := identity.New(identity.Options{Tokens: identity.NewTokenVerifier(kube, identity.TokenOptions{})})
	for _, tc := range []struct {
		name   string
		values []string
		reason identity.Reason
	}{
		{"one bearer token", []string{"Bearer " + good}, ""},
		{"scheme in lower case", []string{"bearer " + good}, ""},
		{"nothing", nil, identity.ReasonNoCredentials},
		{"two authorization values", []string{"Bearer " + good, "Bearer " + good}, identity.ReasonMalformedCredentials},
		{"basic", []string{"Basic dXNlcjpwYXNz"}, identity.ReasonMalformedCredentials},
		{"no scheme", []string{good}, identity.ReasonMalformedCredentials},
		{"empty token", []string{"Bearer "}, identity.ReasonMalformedCredentials},
		{"a space inside", []string{"Bearer abc def"}, identity.ReasonMalformedCredentials},
		{"a control character", []string{"Bearer abc\x01"}, identity.ReasonMalformedCredentials},
		{"16 KiB", []string{"Bearer " + strings.Repeat("a", identity.MaxTokenBytes)}, identity.ReasonBadToken},
		{"over 16 KiB", []string{"Bearer " + strings.Repeat("a", identity.MaxTokenBytes+1)}, identity.ReasonMalformedCredentials},
		{"a megabyte", []string{"Bearer " + strings.Repeat("a", 1<<20)}, identity.ReasonMalformedCredentials},
		{"unknown token", []string{"Bearer " + identitytest.Token("nobody", time.Now().Add(time.Hour))}, identity.ReasonBadToken},
		{"past exp", []string{"Bearer " + identitytest.Token("old", time.Now().Add(-time.Second))}, identity.ReasonExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := kube.Reviews()
			id, err := auth.Authenticate(bearerCtx(tc.values...))
			if got := identity.ReasonOf(err); got != tc.reason {
				t.Fatalf("reason %q (%v), want %q", got, err, tc.reason)
			}
			if err == nil && (id.Namespace != "ns" || id.ServiceAccount != "sa" || id.Instance != "sa:ns/sa") {
				t.Errorf("identity %+v", id)
			}
			reviewed := kube.Reviews() - before
			if tc.reason == identity.ReasonMalformedCredentials || tc.reason == identity.ReasonExpired || tc.reason == identity.ReasonNoCredentials {
				if reviewed != 0 {
					t.Errorf("%d TokenReviews for a token refused unread", reviewed)
				}
			}
			if err != nil && len(tc.values) > 0 && len(tc.values[0]) >= 16 && strings.Contains(err.Error(), tc.values[0][len(tc.values[0])-16:]) {
				t.Errorf("the error quotes the token: %v", err)
			}
		})
	}
}

func TestTokenReviewAnswers(t *testing.T) {
	t.Parallel()
	exp := time.Now().Add(20 * time.Minute).Truncate(time.Second)
	type setup func(k *identitytest.Kube, token string)
	extra := func(kv ...string) setup {
		return func(k *identitytest.Kube, token string) {
			st := authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"poise"},
				User: authenticationv1.UserInfo{Username: "system:serviceaccount:tenant-a:pay", Extra: map[string]authenticationv1.ExtraValue{}}}
			for i := 0; i < len(kv); i += 2 {
				st.User.Extra[kv[i]] = append(st.User.Extra[kv[i]], kv[i+1])
			}
			k.SetStatus(token, st)
		}
	}
	const podName, podUID, nodeName = "authentication.kubernetes.io/pod-name", "authentication.kubernetes.io/pod-uid", "authentication.kubernetes.io/node-name"
	for _, tc := range []struct {
		name   string
		setup  setup
		reason identity.Reason
		want   identity.Identity
	}{
		{name: "pod, node and zone", setup: extra(podName, "pay-0", podUID, "u0", nodeName, "n1"), want: identity.Identity{
			Method: identity.MethodToken, Namespace: "tenant-a", ServiceAccount: "pay", Instance: "pod:u0",
			Pod: identity.PodRef{Namespace: "tenant-a", Name: "pay-0", UID: "u0"}, Node: "n1",
			Locality: identity.Locality{Region: "r1", Zone: "z1"}, Expires: exp}},
		{name: "node from the pod", setup: extra(podName, "pay-1", podUID, "u1"), want: identity.Identity{
			Method: identity.MethodToken, Namespace: "tenant-a", ServiceAccount: "pay", Instance: "pod:u1",
			Pod: identity.PodRef{Namespace: "tenant-a", Name: "pay-1", UID: "u1"}, Node: "n1",
			Locality: identity.Locality{Region: "r1", Zone: "z1"}, Expires: exp}},
		{name: "node without labels", setup: extra(podName, "pay-0", podUID, "u0", nodeName, "bare"), want: identity.Identity{
			Method: identity.MethodToken, Namespace: "tenant-a", ServiceAccount: "pay", Instance: "pod:u0",
			Pod: identity.PodRef{Namespace: "tenant-a", Name: "pay-0", UID: "u0"}, Node: "bare", Expires: exp}},
		{name: "node gone", setup: extra(podName, "pay-0", podUID, "u0", nodeName, "gone"), want: identity.Identity{
			Method: identity.MethodToken, Namespace: "tenant-a", ServiceAccount: "pay", Instance: "pod:u0",
			Pod: identity.PodRef{Namespace: "tenant-a", Name: "pay-0", UID: "u0"}, Node: "gone", Expires: exp}},
		{name: "pod gone", setup: extra(podName, "pay-9", podUID, "u9"), reason: identity.ReasonBadToken},
		{name: "pod recreated under the name", setup: extra(podName, "pay-1", podUID, "old-uid"), reason: identity.ReasonBadToken},
		{name: "pod name without UID", setup: extra(podName, "pay-0"), reason: identity.ReasonBadToken},
		{name: "two pod names", setup: extra(podName, "pay-0", podName, "pay-1", podUID, "u0"), reason: identity.ReasonBadToken},
		{name: "a user, not a service account", setup: func(k *identitytest.Kube, token string) {
			k.SetStatus(token, authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"poise"}, User: authenticationv1.UserInfo{Username: "alice"}})
		}, reason: identity.ReasonNotServiceAccount},
		{name: "a service account name with a colon", setup: func(k *identitytest.Kube, token string) {
			k.SetStatus(token, authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"poise"}, User: authenticationv1.UserInfo{Username: "system:serviceaccount:a:b:c"}})
		}, reason: identity.ReasonNotServiceAccount},
		{name: "another audience", setup: func(k *identitytest.Kube, token string) {
			k.SetStatus(token, authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"vault"}, User: authenticationv1.UserInfo{Username: "system:serviceaccount:a:b"}})
		}, reason: identity.ReasonBadToken},
		{name: "no audience returned", setup: func(k *identitytest.Kube, token string) {
			k.SetStatus(token, authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "system:serviceaccount:a:b"}})
		}, reason: identity.ReasonBadToken},
		{name: "refused", setup: func(*identitytest.Kube, string) {}, reason: identity.ReasonBadToken},
		{name: "apiserver down", setup: func(k *identitytest.Kube, _ string) { k.Fail(errors.New("connection refused")) }, reason: identity.ReasonTokenReviewFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := identitytest.New()
			kube.SetPod("tenant-a", "pay-1", "u1", "n1")
			kube.SetZone("n1", "r1", "z1")
			kube.SetNode("bare", map[string]string{})
			token := identitytest.Token(tc.name, exp)
			tc.setup(kube, token)
			v := identity.NewTokenVerifier(kube, identity.TokenOptions{})
			id, err := v.Verify(context.Background(), token)
			if got := identity.ReasonOf(err); got != tc.reason {
				t.Fatalf("reason %q (%v), want %q", got, err, tc.reason)
			}
			if err != nil {
				t.Logf("refused: %v", err)
				return
			}
			if !id.Expires.Equal(tc.want.Expires) {
				t.Errorf("expires %v, want %v", id.Expires, tc.want.Expires)
			}
			id.Expires, tc.want.Expires = time.Time{}, time.Time{}
			if id != tc.want {
				t.Errorf("identity\n got %+v\nwant %+v", id, tc.want)
			}
		})
	}
}

// flightWaiters counts the goroutines started by test (a function name)
// that wait in singleflight for a call another goroutine makes.
func flightWaiters(test string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	waiting := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "sync.(*WaitGroup).Wait") && strings.Contains(g, "singleflight.(*Group).Do") && strings.Contains(g, "."+test+".") {
			waiting++
		}
	}
	return waiting
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func TestTokenCache(t *testing.T) {
	t.Parallel()
	t.Run("a review per token lifetime", func(t *testing.T) {
		kube := identitytest.New()
		clk := &clock{now: time.Now()}
		exp := clk.now.Add(30 * time.Minute)
		tok := identitytest.Token("a", exp)
		kube.Accept(tok, "ns", "sa", "p", "u", "")
		kube.SetPod("ns", "p", "u", "")
		v := identity.NewTokenVerifier(kube, identity.TokenOptions{Now: clk.Now})
		for i := 0; i < 1000; i++ {
			if _, err := v.Verify(context.Background(), tok); err != nil {
				t.Fatal(err)
			}
			clk.Add(time.Second) // 1000 s of a 1800 s token
		}
		if st := v.Stats(); st.Reviews != 1 || st.Hits != 999 {
			t.Errorf("1000 verifications: %+v, want one review", st)
		}
		clk.Add(801 * time.Second)
		if _, err := v.Verify(context.Background(), tok); identity.ReasonOf(err) != identity.ReasonExpired {
			t.Errorf("past exp: %v, want expired", err)
		}
		if st := v.Stats(); st.Reviews != 1 {
			t.Errorf("an expired token was reviewed: %+v", st)
		}
	})
	t.Run("capped by the review interval", func(t *testing.T) {
		kube := identitytest.New()
		clk := &clock{now: time.Now()}
		tok := identitytest.Token("b", clk.now.Add(24*time.Hour))
		kube.Accept(tok, "ns", "sa", "", "", "")
		v := identity.NewTokenVerifier(kube, identity.TokenOptions{Now: clk.Now, ReviewInterval: 10 * time.Minute})
		id, err := v.Verify(context.Background(), tok)
		if err != nil || !id.Expires.Equal(clk.now.Add(10*time.Minute)) {
			t.Fatalf("%+v, %v: want it to expire at the cap", id, err)
		}
		clk.Add(10 * time.Minute)
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
		if st := v.Stats(); st.Reviews != 2 {
			t.Errorf("after the cap: %+v, want a second review", st)
		}
	})
	t.Run("refusals remembered briefly", func(t *testing.T) {
		kube := identitytest.New()
		clk := &clock{now: time.Now()}
		tok := identitytest.Token("c", clk.now.Add(time.Hour))
		v := identity.NewTokenVerifier(kube, identity.TokenOptions{Now: clk.Now, NegativeTTL: 5 * time.Second})
		for range 10 {
			if _, err := v.Verify(context.Background(), tok); identity.ReasonOf(err) != identity.ReasonBadToken {
				t.Fatal(err)
			}
		}
		if n := kube.Reviews(); n != 1 {
			t.Errorf("%d reviews of a refused token within the negative TTL, want 1", n)
		}
		kube.Accept(tok, "ns", "sa", "", "", "")
		clk.Add(5 * time.Second)
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Errorf("after the negative TTL: %v", err)
		}
	})
	t.Run("failures to ask are not remembered", func(t *testing.T) {
		kube := identitytest.New()
		tok := identitytest.Token("d", time.Now().Add(time.Hour))
		kube.Accept(tok, "ns", "sa", "", "", "")
		kube.Fail(errors.New("connection refused"))
		v := identity.NewTokenVerifier(kube, identity.TokenOptions{})
		_, err := v.Verify(context.Background(), tok)
		if identity.ReasonOf(err) != identity.ReasonTokenReviewFailed || status.Code(err) != codes.Unavailable {
			t.Fatalf("%v (%v), want token-review-failed, Unavailable", err, status.Code(err))
		}
		kube.Fail(nil)
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Errorf("once the apiserver is back: %v", err)
		}
	})
	t.Run("one review in flight per token", func(t *testing.T) {
		kube := identitytest.New()
		release := kube.Block()
		tok := identitytest.Token("e", time.Now().Add(time.Hour))
		kube.Accept(tok, "ns", "sa", "", "", "")
		v := identity.NewTokenVerifier(kube, identity.TokenOptions{})
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := range 100 {
			ctx, cancel := context.WithCancel(context.Background())
			if i == 0 {
				cancel() // the first caller leaving must not fail the rest
			} else {
				defer cancel()
			}
			wg.Go(func() {
				_, err := v.Verify(ctx, tok)
				errs <- err
			})
		}
		testkit.Eventually(t, 10*time.Second, "the first review asked", func() (bool, string) { return kube.Reviews() > 0, "" })
		// the other 99 join its flight: each waits in singleflight's Do
		testkit.Eventually(t, 10*time.Second, "99 callers waiting on the review in flight", func() (bool, string) {
			n := flightWaiters("TestTokenCache")
			return n == 99, fmt.Sprintf("%d waiting", n)
		})
		release()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		if n := kube.Reviews(); n != 1 {
			t.Errorf("%d reviews for 100 concurrent first uses, want 1", n)
		}
	})
	t.Run("bounded in count", func(t *testing.T) {
		kube := identitytest.New()
		var toks []string
		for i := range 10 {
			tok := identitytest.Token(fmt.Sprint("f", i), time.Now().Add(time.Hour))
			kube.Accept(tok, "ns", "sa", "", "", "")
			toks = append(toks, tok)
		}
		v := identity.NewTokenVerifier(kube, identity.TokenOptions{CacheSize: 4})
		for _, tok := range toks {
			if _, err := v.Verify(context.Background(), tok); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := v.Verify(context.Background(), toks[9]); err != nil { // the most recent stays
			t.Fatal(err)
		}
		if _, err := v.Verify(context.Background(), toks[0]); err != nil { // the oldest went
			t.Fatal(err)
		}
		if st := v.Stats(); st.Cached != 4 || st.Evictions != 7 || st.Reviews != 11 || st.Hits != 1 {
			t.Errorf("10 tokens through a cache of 4, then the last and the first: %+v", st)
		}
	})
}

func TestCheckClaims(t *testing.T) {
	t.Parallel()
	id := identity.Identity{Method: identity.MethodToken, Namespace: "tenant-a", ServiceAccount: "pay"}
	node := func(kv ...any) *corev3.Node {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return &corev3.Node{Id: "n", Metadata: s}
	}
	for _, tc := range []struct {
		name string
		id   identity.Identity
		node *corev3.Node
		ok   bool
	}{
		{"no node", id, nil, true},
		{"no metadata", id, &corev3.Node{Id: "n"}, true},
		{"other keys", id, node("ISTIO_VERSION", "1.30", "poise.dev/demand-weight", "3"), true},
		{"Istio's keys, right", id, node("NAMESPACE", "tenant-a", "SERVICE_ACCOUNT", "pay"), true},
		{"Poise's keys, right", id, node("poise.dev/namespace", "tenant-a", "poise.dev/service-account", "pay"), true},
		{"only the namespace", id, node("NAMESPACE", "tenant-a"), true},
		{"Istio namespace of another tenant", id, node("NAMESPACE", "tenant-b"), false},
		{"Istio service account wrong", id, node("NAMESPACE", "tenant-a", "SERVICE_ACCOUNT", "ledger"), false},
		{"Poise namespace wrong", id, node("poise.dev/namespace", "tenant-b"), false},
		{"Poise service account wrong", id, node("poise.dev/service-account", "ledger"), false},
		{"the two keys disagree", id, node("NAMESPACE", "tenant-a", "poise.dev/namespace", "tenant-b"), false},
		{"empty claim", id, node("NAMESPACE", ""), false},
		{"a number", id, node("NAMESPACE", 3.0), false},
		{"a list", id, node("SERVICE_ACCOUNT", []any{"pay"}), false},
		{"anonymous claims anything", identity.Identity{Method: identity.MethodNone}, node("NAMESPACE", "tenant-b"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := identity.CheckClaims(tc.id, tc.node)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckClaims: %v, want ok=%v", err, tc.ok)
			}
			if err == nil {
				return
			}
			var e *identity.Error
			if !errors.As(err, &e) || e.Reason != identity.ReasonClaimMismatch || status.Code(err) != codes.PermissionDenied {
				t.Errorf("%v: want claim-mismatch, PermissionDenied", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

func TestCheckAnonymous(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr     string
		loopback bool
	}{
		{"127.0.0.1:18000", true},
		{"127.0.0.53:18000", true},
		{"[::1]:18000", true},
		{"localhost:18000", true},
		{"LOCALHOST:18000", true},
		{":18000", false},
		{"0.0.0.0:18000", false},
		{"[::]:18000", false},
		{"10.0.0.7:18000", false},
		{"poise.example:18000", false},
		{"127.0.0.1", false}, // not host:port
	} {
		if got := identity.IsLoopback(tc.addr); got != tc.loopback {
			t.Errorf("IsLoopback(%q) = %v", tc.addr, got)
		}
		if err := identity.CheckAnonymous(tc.addr, false); (err == nil) != tc.loopback {
			t.Errorf("CheckAnonymous(%q, false) = %v", tc.addr, err)
		}
		if err := identity.CheckAnonymous(tc.addr, true); err != nil {
			t.Errorf("CheckAnonymous(%q, true) = %v", tc.addr, err)
		}
	}
	anon := identity.New(identity.Options{AllowAnonymous: true})
	if anon.CheckListener(":18000", false) == nil || anon.CheckListener("127.0.0.1:18000", false) != nil {
		t.Error("an anonymous authenticator's listener check")
	}
	if identity.New(identity.Options{}).CheckListener(":18000", false) != nil {
		t.Error("an authenticator that refuses anonymous clients may listen anywhere")
	}
}

func TestStringBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 10_000)
	id := identity.Identity{Method: identity.MethodCertificate, SPIFFEID: long, Namespace: long, ServiceAccount: long,
		Instance: long, Pod: identity.PodRef{Namespace: long, Name: long}, Node: long,
		Locality: identity.Locality{Region: long, Zone: long}, Expires: time.Now()}
	if s := id.String(); len(s) > 512 {
		t.Errorf("String is %d bytes", len(s))
	}
	if s := (identity.Identity{}).String(); s != "none" {
		t.Errorf("anonymous String %q", s)
	}
	e := &identity.Error{Reason: identity.ReasonBadToken, Detail: "d", Err: errors.New("cause")}
	if st := status.Convert(e); st.Code() != codes.Unauthenticated || strings.Contains(st.Message(), "cause") {
		t.Errorf("status %v: the cause is for logs only", st)
	}
	if got := identity.ReasonOf(fmt.Errorf("stream: %w", e)); got != identity.ReasonBadToken {
		t.Errorf("ReasonOf through a wrap: %q", got)
	}
	if n := len(identity.Reasons()); n != 14 {
		t.Errorf("%d reasons", n)
	}
}
