package identity

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc/peer"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// DefaultAudience is the audience a token must be minted for unless
	// TokenOptions say otherwise.
	DefaultAudience = "poise"
	// MaxTokenBytes bounds a bearer token; longer ones are refused unread.
	MaxTokenBytes = 16 << 10
	// DefaultReviewInterval is how long an accepted token is trusted
	// without a new TokenReview unless TokenOptions say otherwise.
	DefaultReviewInterval = time.Hour
)

// The TokenReview extra keys the apiserver sets for a pod-bound token, and
// the node labels a locality is read from.
const (
	extraPodName  = "authentication.kubernetes.io/pod-name"
	extraPodUID   = "authentication.kubernetes.io/pod-uid"
	extraNodeName = "authentication.kubernetes.io/node-name"
	labelRegion   = "topology.kubernetes.io/region"
	labelZone     = "topology.kubernetes.io/zone"
)

const serviceAccountPrefix = "system:serviceaccount:"

// TokenOptions configure a TokenVerifier; zero fields take the defaults.
type TokenOptions struct {
	// Audiences a token must be meant for (default: DefaultAudience).
	Audiences []string
	// ReviewInterval is how long an accepted token is trusted without a
	// new TokenReview (default DefaultReviewInterval, a projected token's
	// usual lifetime): the identity it proves expires at the token's exp
	// claim or this long after the review, whichever is first, and the
	// token is reviewed again when it is next presented. It bounds how long
	// a revoked token (its pod deleted) keeps being accepted, to this plus
	// the apiserver's own token cache.
	ReviewInterval time.Duration
	// CacheSize bounds the tokens remembered, accepted or refused (default
	// 10,000); the least recently used go first.
	CacheSize int
	// NegativeTTL is how long a refused token stays refused without a new
	// TokenReview (default 10s).
	NegativeTTL time.Duration
	// NodeCacheSize bounds the nodes and the pods remembered, each
	// (default 1,000).
	NodeCacheSize int
	// NodeTTL is how long a node's locality labels are remembered
	// (default 5m).
	NodeTTL time.Duration
	// ReviewTimeout bounds one TokenReview with its lookups (default 10s).
	ReviewTimeout time.Duration
	// RefusalBurst and RefusalsPerSecond bound the TokenReviews one client
	// address may cause that the apiserver refuses (defaults 30 and 1): a
	// client sending made-up tokens is then refused unreviewed
	// (token-review-throttled) instead of making the plane ask the
	// apiserver for each. Reviews that accept a token cost nothing, so a
	// fleet behind one address is never held back by it. Addresses are
	// counted whole for IPv4 and by /64 for IPv6.
	RefusalBurst      int
	RefusalsPerSecond float64
	// PeerCacheSize bounds the client addresses whose refusals are
	// remembered (default 10,000); the least recently used go first.
	PeerCacheSize int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// TokenVerifier checks Kubernetes service-account tokens with TokenReview
// and remembers the answer, keyed by a hash of the token (never the token),
// so a token is reviewed once per review interval (or lifetime, when
// shorter), not per stream or request: concurrent uses of a token whose
// review is due share one review.
type TokenVerifier struct {
	kube   Kube
	o      TokenOptions
	flight singleflight.Group

	mu     sync.Mutex
	tokens *lru[[sha256.Size]byte, tokenEntry]
	peers  *lru[netip.Prefix, refusalBudget]
	pods   *lru[string, string] // pod UID → node name; a pod never moves
	nodes  *lru[string, nodeEntry]

	reviews, hits, podLookups, nodeLookups, throttled atomic.Uint64
}

// refusalBudget is a token bucket of the refused reviews one client
// address may still cause.
type refusalBudget struct {
	left float64
	at   time.Time
}

type tokenEntry struct {
	id    Identity
	err   error
	until time.Time
}

type nodeEntry struct {
	loc   Locality
	until time.Time
}

// TokenStats are a verifier's counts since it was made.
type TokenStats struct {
	// Reviews is the TokenReviews sent.
	Reviews uint64
	// Hits is the verifications answered from the cache, accepted or refused.
	Hits uint64
	// Cached is the tokens remembered now; Evictions those dropped for room.
	Cached    int
	Evictions uint64
	// PodLookups and NodeLookups are the pods and nodes read.
	PodLookups, NodeLookups uint64
	// Throttled is the tokens refused unreviewed because their client's
	// address had used its budget of refused reviews.
	Throttled uint64
}

// NewTokenVerifier is a verifier asking kube.
func NewTokenVerifier(kube Kube, o TokenOptions) *TokenVerifier {
	if len(o.Audiences) == 0 {
		o.Audiences = []string{DefaultAudience}
	}
	o.Audiences = slices.Clone(o.Audiences)
	if o.ReviewInterval <= 0 {
		o.ReviewInterval = DefaultReviewInterval
	}
	if o.CacheSize <= 0 {
		o.CacheSize = 10_000
	}
	if o.NegativeTTL <= 0 {
		o.NegativeTTL = 10 * time.Second
	}
	if o.NodeCacheSize <= 0 {
		o.NodeCacheSize = 1_000
	}
	if o.NodeTTL <= 0 {
		o.NodeTTL = 5 * time.Minute
	}
	if o.ReviewTimeout <= 0 {
		o.ReviewTimeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RefusalBurst <= 0 {
		o.RefusalBurst = 30
	}
	if !(o.RefusalsPerSecond > 0) {
		o.RefusalsPerSecond = 1
	}
	if o.PeerCacheSize <= 0 {
		o.PeerCacheSize = 10_000
	}
	return &TokenVerifier{
		kube: kube, o: o,
		tokens: newLRU[[sha256.Size]byte, tokenEntry](o.CacheSize),
		peers:  newLRU[netip.Prefix, refusalBudget](o.PeerCacheSize),
		pods:   newLRU[string, string](o.NodeCacheSize),
		nodes:  newLRU[string, nodeEntry](o.NodeCacheSize),
	}
}

// Stats are the verifier's counts so far.
func (v *TokenVerifier) Stats() TokenStats {
	v.mu.Lock()
	cached, evictions := v.tokens.len(), v.tokens.evictions
	v.mu.Unlock()
	return TokenStats{
		Reviews: v.reviews.Load(), Hits: v.hits.Load(), Cached: cached, Evictions: evictions,
		PodLookups: v.podLookups.Load(), NodeLookups: v.nodeLookups.Load(), Throttled: v.throttled.Load(),
	}
}

// Verify is the identity a token proves. A refusal is an *Error.
func (v *TokenVerifier) Verify(ctx context.Context, token string) (Identity, error) {
	if token == "" {
		return Identity{}, refuse(ReasonMalformedCredentials, "the bearer token is empty")
	}
	if len(token) > MaxTokenBytes {
		return Identity{}, refuse(ReasonMalformedCredentials, fmt.Sprintf("the bearer token is longer than %d bytes", MaxTokenBytes))
	}
	key := sha256.Sum256([]byte(token))
	if e, ok := v.cached(key); ok {
		return e.id, e.err
	}
	// An exp already past needs no review; one in the future is trusted
	// only once TokenReview has accepted the token.
	if exp, ok := jwtExpiry(token); ok && !v.o.Now().Before(exp) {
		return Identity{}, refuse(ReasonExpired, "the token expired at "+exp.UTC().Format(time.RFC3339))
	}
	// Each review takes one from its client address's budget of refused
	// reviews before it is sent (so concurrent made-up tokens cannot all
	// pass a look made before any was refused) and gives it back unless
	// the apiserver refused the token. Concurrent uses of one token share
	// its review, and its cost: the flight is per token and address.
	from, counted := peerPrefix(ctx)
	flight := "t" + string(key[:])
	if counted {
		flight += from.String()
	}
	r, _, _ := v.flight.Do(flight, func() (any, error) {
		if e, ok := v.cached(key); ok {
			return e, nil
		}
		if counted && !v.takeRefusal(from) {
			v.throttled.Add(1)
			return tokenEntry{err: refuse(ReasonTokenReviewThrottled, fmt.Sprintf(
				"this client's address caused more than %d refused token reviews recently; retry later", v.o.RefusalBurst))}, nil
		}
		e, keep := v.review(ctx, token)
		if counted && !refusedByReview(e.err) {
			v.giveRefusal(from)
		}
		if keep {
			v.mu.Lock()
			v.tokens.put(key, e)
			v.mu.Unlock()
		}
		return e, nil
	})
	e := r.(tokenEntry)
	return e.id, e.err
}

// refusedByReview says whether err is an answer that the token is not
// good (what a made-up token gets), as opposed to an acceptance or a
// failure to ask.
func refusedByReview(err error) bool {
	r := ReasonOf(err)
	return r != "" && r != ReasonTokenReviewFailed
}

// peerPrefix is the client address of an RPC, whole for IPv4 and its /64
// for IPv6 (one host commonly holds a whole /64); false when the RPC has
// no IP peer.
func peerPrefix(ctx context.Context) (netip.Prefix, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Prefix{}, false
	}
	ap, err := netip.ParseAddrPort(p.Addr.String())
	if err != nil {
		return netip.Prefix{}, false
	}
	a := ap.Addr().Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	pfx, err := a.WithZone("").Prefix(bits)
	return pfx, err == nil
}

// takeRefusal takes one refused review from the budget of address from,
// refilled at RefusalsPerSecond up to RefusalBurst; false when none is left.
func (v *TokenVerifier) takeRefusal(from netip.Prefix) bool {
	now := v.o.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	b, ok := v.peers.get(from)
	if !ok {
		b = refusalBudget{left: float64(v.o.RefusalBurst), at: now}
	}
	if elapsed := now.Sub(b.at).Seconds(); elapsed > 0 {
		b.left = min(float64(v.o.RefusalBurst), b.left+elapsed*v.o.RefusalsPerSecond)
	}
	b.at = now
	if b.left < 1 {
		v.peers.put(from, b)
		return false
	}
	b.left--
	v.peers.put(from, b)
	return true
}

// giveRefusal returns what takeRefusal took, for a review that did not
// refuse.
func (v *TokenVerifier) giveRefusal(from netip.Prefix) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if b, ok := v.peers.get(from); ok {
		b.left = min(float64(v.o.RefusalBurst), b.left+1)
		v.peers.put(from, b)
	}
}

func (v *TokenVerifier) cached(key [sha256.Size]byte) (tokenEntry, bool) {
	now := v.o.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.tokens.get(key)
	if !ok {
		return tokenEntry{}, false
	}
	if !now.Before(e.until) {
		v.tokens.remove(key)
		return tokenEntry{}, false
	}
	v.hits.Add(1)
	return e, true
}

// review asks the apiserver; keep says whether the answer may be cached
// (a failure to ask is not).
func (v *TokenVerifier) review(ctx context.Context, token string) (e tokenEntry, keep bool) {
	// The first caller's cancellation must not fail the others waiting on
	// the same review.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.o.ReviewTimeout)
	defer cancel()
	v.reviews.Add(1)
	st, err := v.kube.ReviewToken(ctx, token, v.o.Audiences)
	if err != nil {
		return tokenEntry{err: &Error{Reason: ReasonTokenReviewFailed, Detail: "the apiserver could not review the token", Err: err}}, false
	}
	refused := func(r Reason, detail string) (tokenEntry, bool) {
		return tokenEntry{err: refuse(r, detail), until: v.o.Now().Add(v.o.NegativeTTL)}, true
	}
	if !st.Authenticated {
		detail := "TokenReview refused the token"
		if st.Error != "" {
			detail += ": " + clip(st.Error, 160)
		}
		return refused(ReasonBadToken, detail)
	}
	if !slices.ContainsFunc(st.Audiences, func(a string) bool { return slices.Contains(v.o.Audiences, a) }) {
		return refused(ReasonBadToken, fmt.Sprintf("the token is not meant for audience %s", quote(strings.Join(v.o.Audiences, ","))))
	}
	ns, sa, err := parseServiceAccount(st.User.Username)
	if err != nil {
		return refused(ReasonNotServiceAccount, err.Error())
	}
	extra := func(k string) (string, error) {
		vals := st.User.Extra[k]
		switch {
		case len(vals) == 0:
			return "", nil
		case len(vals) > 1:
			return "", fmt.Errorf("TokenReview's extra %s has %d values", k, len(vals))
		case len(vals[0]) > validation.DNS1123SubdomainMaxLength:
			return "", fmt.Errorf("TokenReview's extra %s is longer than %d bytes", k, validation.DNS1123SubdomainMaxLength)
		}
		return vals[0], nil
	}
	var vals [3]string
	for i, k := range []string{extraPodName, extraPodUID, extraNodeName} {
		if vals[i], err = extra(k); err != nil {
			return refused(ReasonBadToken, err.Error())
		}
	}
	podName, podUID, node := vals[0], vals[1], vals[2]
	id := Identity{Method: MethodToken, Namespace: ns, ServiceAccount: sa, Instance: "sa:" + ns + "/" + sa}
	switch {
	case podName == "" && podUID == "":
		// bound to no pod (or to a Secret): every such token of the
		// service account is one instance
	case podName == "" || podUID == "":
		return refused(ReasonBadToken, "TokenReview names a pod without both its name and UID")
	default:
		id.Pod = PodRef{Namespace: ns, Name: podName, UID: podUID}
		id.Instance = "pod:" + podUID
		if node == "" {
			if node, e, keep = v.podNode(ctx, id.Pod); e.err != nil {
				return e, keep
			}
		}
	}
	if node != "" {
		id.Node = node
		if id.Locality, e, keep = v.locality(ctx, node); e.err != nil {
			return e, keep
		}
	}
	now := v.o.Now()
	id.Expires = now.Add(v.o.ReviewInterval)
	if exp, ok := jwtExpiry(token); ok && exp.Before(id.Expires) {
		id.Expires = exp
	}
	if !now.Before(id.Expires) {
		return refused(ReasonExpired, "the token expired at "+id.Expires.UTC().Format(time.RFC3339))
	}
	return tokenEntry{id: id, until: id.Expires}, true
}

// podNode is the node of the pod a token is bound to, for apiservers that
// do not name it in TokenReview's extra.
func (v *TokenVerifier) podNode(ctx context.Context, pod PodRef) (string, tokenEntry, bool) {
	v.mu.Lock()
	node, ok := v.pods.get(pod.UID)
	v.mu.Unlock()
	if ok {
		return node, tokenEntry{}, true
	}
	r, _, _ := v.flight.Do("p"+pod.UID, func() (any, error) {
		v.podLookups.Add(1)
		uid, node, err := v.kube.PodNode(ctx, pod.Namespace, pod.Name)
		return lookup{uid, node, err}, nil
	})
	l := r.(lookup)
	switch {
	case apierrors.IsNotFound(l.err):
		return "", tokenEntry{err: refuse(ReasonBadToken, fmt.Sprintf("the token's pod %s/%s is gone", pod.Namespace, pod.Name)), until: v.o.Now().Add(v.o.NegativeTTL)}, true
	case l.err != nil:
		return "", tokenEntry{err: &Error{Reason: ReasonTokenReviewFailed, Detail: "the apiserver could not say where the token's pod runs", Err: l.err}}, false
	case l.uid != pod.UID:
		return "", tokenEntry{err: refuse(ReasonBadToken, fmt.Sprintf("pod %s/%s is not the pod the token is bound to", pod.Namespace, pod.Name)), until: v.o.Now().Add(v.o.NegativeTTL)}, true
	}
	if l.node != "" { // a pod not yet scheduled may be later
		v.mu.Lock()
		v.pods.put(pod.UID, l.node)
		v.mu.Unlock()
	}
	return l.node, tokenEntry{}, true
}

type lookup struct {
	uid, node string
	err       error
}

// locality is a node's region and zone. A node that does not exist has no
// locality; one that cannot be read fails the verification, uncached.
func (v *TokenVerifier) locality(ctx context.Context, node string) (Locality, tokenEntry, bool) {
	now := v.o.Now()
	v.mu.Lock()
	n, ok := v.nodes.get(node)
	v.mu.Unlock()
	if ok && now.Before(n.until) {
		return n.loc, tokenEntry{}, true
	}
	type answer struct {
		labels map[string]string
		err    error
	}
	r, _, _ := v.flight.Do("n"+node, func() (any, error) {
		v.nodeLookups.Add(1)
		labels, err := v.kube.NodeLabels(ctx, node)
		return answer{labels, err}, nil
	})
	a := r.(answer)
	if a.err != nil && !apierrors.IsNotFound(a.err) {
		return Locality{}, tokenEntry{err: &Error{Reason: ReasonTokenReviewFailed, Detail: "the apiserver could not say where the token's node is", Err: a.err}}, false
	}
	loc := Locality{Region: clip(a.labels[labelRegion], validation.LabelValueMaxLength), Zone: clip(a.labels[labelZone], validation.LabelValueMaxLength)}
	v.mu.Lock()
	v.nodes.put(node, nodeEntry{loc: loc, until: now.Add(v.o.NodeTTL)})
	v.mu.Unlock()
	return loc, tokenEntry{}, true
}

// parseServiceAccount splits system:serviceaccount:NAMESPACE:NAME.
func parseServiceAccount(user string) (ns, sa string, err error) {
	rest, ok := strings.CutPrefix(user, serviceAccountPrefix)
	if !ok {
		return "", "", fmt.Errorf("the token's user %s is not a service account", quote(user))
	}
	ns, sa, ok = strings.Cut(rest, ":")
	if !ok || strings.Contains(sa, ":") ||
		len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(sa)) > 0 {
		return "", "", fmt.Errorf("the token's user %s is not system:serviceaccount:NAMESPACE:NAME", quote(user))
	}
	return ns, sa, nil
}

// maxExpiry bounds an exp claim to a plausible time (the year 5138), so a
// huge number neither overflows nor means "never".
const maxExpiry = 100_000_000_000

// jwtExpiry reads the exp claim of a JWS compact token without checking its
// signature: it is trusted only as a bound once TokenReview has accepted the
// token, or to refuse one already past.
func jwtExpiry(token string) (time.Time, bool) {
	if len(token) > MaxTokenBytes {
		return time.Time{}, false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp json.RawMessage `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || len(claims.Exp) == 0 {
		return time.Time{}, false
	}
	exp, err := strconv.ParseFloat(string(claims.Exp), 64)
	if err != nil || !(exp > 0 && exp < maxExpiry) {
		return time.Time{}, false
	}
	return time.Unix(int64(exp), 0), true
}
