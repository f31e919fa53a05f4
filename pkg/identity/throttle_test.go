package identity_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"poise.dev/poise/pkg/identity"
	"poise.dev/poise/pkg/identity/identitytest"
	"poise.dev/poise/test/testkit"
)

func fromAddr(ip string) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}})
}

// A client sending made-up tokens makes the plane ask the apiserver a
// bounded number of times: its address has a budget of refused reviews,
// and past it new tokens are refused unreviewed until the budget refills.
// Accepted tokens cost nothing, other addresses keep their own budget, and
// IPv6 addresses count by /64.
func TestRefusedReviewsPerAddress(t *testing.T) {
	t.Parallel()
	const burst, perSecond = 10, 1.0
	exp := time.Now().Add(time.Hour)
	newVerifier := func() (*identitytest.Kube, *identity.TokenVerifier, *clock) {
		kube := identitytest.New()
		clk := &clock{now: time.Now()}
		v := identity.NewTokenVerifier(kube, identity.TokenOptions{Now: clk.Now, RefusalBurst: burst, RefusalsPerSecond: perSecond})
		return kube, v, clk
	}
	madeUp := func(i int) string { return identitytest.Token(fmt.Sprintf("made-up-%d", i), exp) }

	t.Run("made-up tokens from one address", func(t *testing.T) {
		kube, v, clk := newVerifier()
		attacker := fromAddr("10.0.0.1")
		for i := range 1000 {
			_, err := v.Verify(attacker, madeUp(i))
			want := identity.ReasonBadToken
			if i >= burst {
				want = identity.ReasonTokenReviewThrottled
			}
			if got := identity.ReasonOf(err); got != want {
				t.Fatalf("token %d: %v, want %s", i, err, want)
			}
		}
		if n := kube.Reviews(); n != burst {
			t.Errorf("%d TokenReviews for 1,000 made-up tokens from one address, want %d", n, burst)
		}
		_, err := v.Verify(attacker, madeUp(5000))
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("a throttled token ends the RPC with %v, want Unauthenticated (it proved nothing)", status.Code(err))
		}
		if st := v.Stats(); st.Throttled != 991 {
			t.Errorf("throttled %d, want 991", st.Throttled)
		}

		// Another address is not held back; a good token from it passes.
		good := identitytest.Token("good", exp)
		kube.Accept(good, "ns", "sa", "", "", "")
		if _, err := v.Verify(fromAddr("10.0.0.2"), good); err != nil {
			t.Errorf("another address: %v", err)
		}
		// A token refused before is answered from the cache, unthrottled.
		if got := identity.ReasonOf(func() error { _, err := v.Verify(attacker, madeUp(0)); return err }()); got != identity.ReasonBadToken {
			t.Errorf("a remembered refusal: %s, want bad-token from the cache", got)
		}
		// The budget refills at perSecond.
		clk.Add(2 * time.Second)
		before := kube.Reviews()
		for i := range 3 {
			_, err := v.Verify(attacker, madeUp(10_000+i))
			want := identity.ReasonBadToken
			if i >= 2 {
				want = identity.ReasonTokenReviewThrottled
			}
			if got := identity.ReasonOf(err); got != want {
				t.Errorf("after 2 s, token %d: %v, want %s", i, err, want)
			}
		}
		if n := kube.Reviews() - before; n != 2 {
			t.Errorf("%d reviews 2 s later, want 2", n)
		}
	})

	t.Run("accepted tokens cost nothing", func(t *testing.T) {
		kube, v, _ := newVerifier()
		nat := fromAddr("192.0.2.7") // a whole fleet behind one address
		for i := range 500 {
			tok := identitytest.Token(fmt.Sprintf("pod-%d", i), exp)
			kube.Accept(tok, "ns", "sa", "", "", "")
			if _, err := v.Verify(nat, tok); err != nil {
				t.Fatalf("pod %d: %v", i, err)
			}
		}
		if n := kube.Reviews(); n != 500 {
			t.Errorf("%d reviews, want 500", n)
		}
	})

	t.Run("IPv6 counts by /64", func(t *testing.T) {
		kube, v, _ := newVerifier()
		for i := range burst {
			if _, err := v.Verify(fromAddr(fmt.Sprintf("2001:db8::%x", i+1)), madeUp(i)); identity.ReasonOf(err) != identity.ReasonBadToken {
				t.Fatalf("token %d: %v", i, err)
			}
		}
		if _, err := v.Verify(fromAddr("2001:db8::ffff"), madeUp(100)); identity.ReasonOf(err) != identity.ReasonTokenReviewThrottled {
			t.Errorf("another address of the same /64: %v, want throttled", err)
		}
		if _, err := v.Verify(fromAddr("2001:db8:0:1::1"), madeUp(101)); identity.ReasonOf(err) != identity.ReasonBadToken {
			t.Errorf("another /64: %v, want reviewed", err)
		}
		if _, err := v.Verify(fromAddr("::ffff:10.9.9.9"), madeUp(102)); identity.ReasonOf(err) != identity.ReasonBadToken {
			t.Errorf("an IPv4-mapped address: %v, want reviewed", err)
		}
		if n := kube.Reviews(); n != burst+2 {
			t.Errorf("%d reviews, want %d", n, burst+2)
		}
	})

	t.Run("concurrent made-up tokens", func(t *testing.T) {
		kube, v, _ := newVerifier()
		release := kube.Block()
		attacker := fromAddr("10.0.0.9")
		var wg sync.WaitGroup
		reasons := make([]identity.Reason, 200)
		for i := range reasons {
			wg.Go(func() {
				_, err := v.Verify(attacker, madeUp(i))
				reasons[i] = identity.ReasonOf(err)
			})
		}
		testkit.Eventually(t, 10*time.Second, "the made-up tokens past the budget throttled while the reviews are in flight", func() (bool, string) {
			return v.Stats().Throttled >= uint64(len(reasons)-burst),
				fmt.Sprintf("throttled %d of %d while %d reviews were in flight", v.Stats().Throttled, len(reasons), kube.Reviews())
		})
		release()
		wg.Wait()
		if n := kube.Reviews(); n != burst {
			t.Errorf("%d TokenReviews for %d concurrent made-up tokens, want %d", n, len(reasons), burst)
		}
		counts := map[identity.Reason]int{}
		for _, r := range reasons {
			counts[r]++
		}
		if counts[identity.ReasonBadToken] != burst || counts[identity.ReasonTokenReviewThrottled] != len(reasons)-burst {
			t.Errorf("outcomes %v", counts)
		}
	})

	t.Run("concurrent uses of one token share one review", func(t *testing.T) {
		kube, v, _ := newVerifier()
		from := fromAddr("10.0.0.7")
		for i := range burst - 1 { // one refused review left
			if _, err := v.Verify(from, madeUp(i)); identity.ReasonOf(err) != identity.ReasonBadToken {
				t.Fatalf("token %d: %v", i, err)
			}
		}
		good := identitytest.Token("fifty-streams", exp)
		kube.Accept(good, "ns", "sa", "", "", "")
		release := kube.Block()
		var wg sync.WaitGroup
		errs := make([]error, 50)
		for i := range errs {
			wg.Go(func() { _, errs[i] = v.Verify(from, good) })
		}
		testkit.Eventually(t, 10*time.Second, "the good token's review started", func() (bool, string) {
			return kube.Reviews() >= burst, fmt.Sprintf("%d reviews", kube.Reviews())
		})
		release()
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("use %d of the good token: %v", i, err)
			}
		}
		if n := kube.Reviews(); n != burst {
			t.Errorf("%d reviews, want %d: the good token's 50 uses share one", n, burst)
		}
	})

	t.Run("a failure to ask costs nothing", func(t *testing.T) {
		kube, v, _ := newVerifier()
		kube.Fail(fmt.Errorf("connection refused"))
		from := fromAddr("10.0.0.5")
		for i := range 3 * burst {
			if _, err := v.Verify(from, madeUp(i)); identity.ReasonOf(err) != identity.ReasonTokenReviewFailed {
				t.Fatalf("token %d: %v, want token-review-failed", i, err)
			}
		}
		kube.Fail(nil)
		if _, err := v.Verify(from, madeUp(1000)); identity.ReasonOf(err) != identity.ReasonBadToken {
			t.Errorf("after the apiserver came back: %v, want a review", err)
		}
	})
}
