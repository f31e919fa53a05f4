package explain

import (
	"fmt"
	"net"
	"regexp"
	"strconv"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"poise.dev/poise/pkg/hashring"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/pkg/xds/translate"
)

// KeyRequest is what a request carries that a key source can read. A map
// without an entry is a request without that header, cookie or parameter;
// SourceIP "" is an address explain was not told.
type KeyRequest struct {
	Headers  map[string]string // lower-case names
	Cookies  map[string]string
	SourceIP string
	Query    map[string]string
}

// KeyError is a request explain cannot place: an input the upstream cannot
// key by, named with its flag's words.
type KeyError struct{ Msg string }

func (e *KeyError) Error() string { return e.Msg }

// KeyClient is one client's consistent-hash structure for an upstream: the
// ring or table it builds from the endpoints Poise publishes to it, and how
// much of the hash space each endpoint owns there (which is not its weight
// share on a small ring).
type KeyClient struct {
	Client string `json:"client"` // envoy-ring-hash, envoy-maglev, grpc-go, grpc-js
	// Entries is the ring's entries or the Maglev table's slots.
	Entries int        `json:"entries"`
	Shares  []KeyShare `json:"shares"`
	Note    string     `json:"note,omitempty"`
	table   *hashring.Table
	eps     []string
	sources []topology.RequestKey // the key sources this client reads, in order
	rewrite []*regexp.Regexp      // each source's compiled rewrite, nil for none
}

// setSources sets the key sources kc reads and compiles their rewrites.
func (kc *KeyClient) setSources(sources []topology.RequestKey) error {
	kc.sources, kc.rewrite = sources, make([]*regexp.Regexp, len(sources))
	for i, k := range sources {
		if k.RewritePattern == "" {
			continue
		}
		re, err := regexp.Compile(k.RewritePattern)
		if err != nil {
			return fmt.Errorf("key source %d: rewrite pattern: %w", i, err)
		}
		kc.rewrite[i] = re
	}
	return nil
}

// KeyShare is an endpoint's part of a client's hash space, next to the
// share of the traffic Poise computed for it.
type KeyShare struct {
	Endpoint string `json:"endpoint"`
	// HashSpace is the millionths of request hashes that pick it.
	HashSpace uint64 `json:"hashSpaceMillionths"`
	// Weight is the millionths of the upstream's traffic explain computes
	// for it: what the ring approximates.
	Weight uint64 `json:"weightMillionths"`
}

// KeyPick is where one client sends one request, and where a retry of it
// goes.
type KeyPick struct {
	Client string `json:"client"`
	// Source is the key source that gave the hash ("header x-user"), or
	// "" when none did and the client picks at random (Random says why).
	Source string `json:"source,omitempty"`
	// Key is the source's value after its rewrite: what is hashed.
	Key  string `json:"key,omitempty"`
	Hash string `json:"hash,omitempty"` // hex
	// Endpoint is the pick; Retry the endpoint a retry of the request goes
	// to next: for Envoy the next selection that is not the same host (the
	// previous-hosts predicate), for a gRPC client the same endpoint (it
	// hashes a retry again to the same place).
	Endpoint string `json:"endpoint,omitempty"`
	Retry    string `json:"retry,omitempty"`
	Random   string `json:"random,omitempty"`
}

// KeyTables builds, for upstream u, every client's consistent-hash
// structure from the ClusterLoadAssignments Poise publishes to it: Envoy's
// (RingHash or Maglev, from the weighted rendering) and, when the upstream
// has request affinity, grpc-go's and grpc-js's ring_hash (from the
// rendering for proxyless gRPC; without request affinity they are sent
// round robin and keep no key). ringCap is the gRPC clients' own cap on
// the ring (GRPC_RING_HASH_CAP), 0 for their default, 4,096. The clients
// are taken to see every published endpoint healthy, as Poise publishes
// them, and Envoy to have no locality of its own.
func KeyTables(u *topology.UpstreamState, ringCap uint64) ([]*KeyClient, error) {
	up := u.Upstream
	var envoy hashring.Client
	switch up.LoadBalancing {
	case "RingHash":
		envoy = hashring.EnvoyRingHash
	case "Maglev":
		envoy = hashring.EnvoyMaglev
	default:
		return nil, &KeyError{Msg: fmt.Sprintf("upstream %s has loadBalancing %s: no client keeps a key (set RingHash or Maglev, and requestAffinity)", up.Key, up.LoadBalancing)}
	}
	shares := weightShares(u)
	var out []*KeyClient
	weighted, err := translate.Endpoints(u, translate.Weighted)
	if err != nil {
		return nil, err
	}
	c, err := keyClient(envoy, hashring.Config{
		MinRingSize: translate.RingSize, MaxRingSize: translate.RingSize,
		TableSize: translate.MaglevTableSize, LocalityWeighted: true,
	}, weighted, shares)
	if err != nil {
		return nil, err
	}
	if up.RequestAffinity != nil {
		if err := c.setSources(up.RequestAffinity.Keys); err != nil {
			return nil, err
		}
	}
	out = append(out, c)
	if up.RequestAffinity == nil {
		return out, nil
	}
	perEndpoint, err := translate.Endpoints(u, translate.PerEndpoint)
	if err != nil {
		return nil, err
	}
	var headers []topology.RequestKey
	for _, k := range up.RequestAffinity.Keys {
		if k.Source == topology.KeyHeader {
			headers = append(headers, k)
		}
	}
	for _, g := range []hashring.Client{hashring.GRPCGo, hashring.GRPCJS} {
		c, err := keyClient(g, hashring.Config{MinRingSize: translate.RingSize, MaxRingSize: translate.RingSize, RingSizeCap: ringCap}, perEndpoint, shares)
		if err != nil {
			return nil, err
		}
		if err := c.setSources(headers); err != nil {
			return nil, err
		}
		if g == hashring.GRPCJS && c.Note == "" {
			c.Note = "grpc-js places endpoints by address, in the order of the assignment, and ignores hash keys"
		}
		out = append(out, c)
	}
	return out, nil
}

// weightShares is each endpoint's share of the upstream's traffic, in
// millionths, by address.
func weightShares(u *topology.UpstreamState) map[string]uint64 {
	out := map[string]uint64{}
	for i := range u.Result.Localities {
		l := &u.Result.Localities[i]
		for ei := l.FirstEndpoint; ei < l.FirstEndpoint+l.EndpointCount; ei++ {
			er, e, _ := u.EndpointResult(ei)
			out[net.JoinHostPort(e.Address, strconv.FormatUint(uint64(e.Port), 10))] += er.Share
		}
	}
	return out
}

// keyClient builds client c's table from priority 0 of cla: Poise puts
// every endpoint with traffic there, and the standby priorities after it
// take traffic only when a client finds priority 0 unhealthy itself.
func keyClient(c hashring.Client, cfg hashring.Config, cla *endpoint.ClusterLoadAssignment, shares map[string]uint64) (*KeyClient, error) {
	var eps []hashring.Endpoint
	var names []string
	for _, l := range cla.GetEndpoints() {
		if l.GetPriority() != 0 {
			continue
		}
		loc := hashring.Locality{Region: l.GetLocality().GetRegion(), Zone: l.GetLocality().GetZone(), SubZone: l.GetLocality().GetSubZone()}
		for _, lb := range l.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			addr := net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10))
			w := lb.GetLoadBalancingWeight().GetValue()
			if w == 0 {
				w = 1
			}
			e := hashring.Endpoint{
				Address: addr, Hostname: lb.GetEndpoint().GetHostname(), Weight: w,
				Locality: loc, LocalityWeight: l.GetLoadBalancingWeight().GetValue(),
				Healthy: true,
			}
			if f := lb.GetMetadata().GetFilterMetadata()[translate.HashKeyFilter]; f != nil {
				e.HashKey = f.GetFields()[translate.HashKeyField].GetStringValue()
			}
			eps = append(eps, e)
			names = append(names, addr)
		}
	}
	kc := &KeyClient{Client: c.String(), eps: names}
	if dropsAll(cla) {
		// PanicRejected: a gRPC client is sent the eligible endpoints only
		// to connect to and drop at; no request reaches them
		kc.eps, kc.Note = nil, `every request is dropped (category "panic"): the upstream is refused by its FailClosed policy`
		return kc, nil
	}
	if len(eps) == 0 {
		kc.Note = "no endpoint has traffic: every request fails"
		return kc, nil
	}
	t, err := hashring.Build(c, cfg, eps)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c, err)
	}
	kc.table, kc.Entries = t, t.Len()
	for i, s := range t.Shares() {
		kc.Shares = append(kc.Shares, KeyShare{Endpoint: names[i], HashSpace: s.Millionths, Weight: shares[names[i]]})
	}
	return kc, nil
}

// dropsAll reports whether cla drops every request: a 100 % drop_overloads
// entry, as a PanicRejected upstream is published.
func dropsAll(cla *endpoint.ClusterLoadAssignment) bool {
	for _, d := range cla.GetPolicy().GetDropOverloads() {
		p := d.GetDropPercentage()
		if p.GetDenominator() == typev3.FractionalPercent_MILLION && p.GetNumerator() >= weights.Million {
			return true
		}
	}
	return false
}

// FirstKeyHash is the key and hash of a request that carries value for
// the upstream's first key source and nothing else: the source's rewrite
// applied, then xxHash64, which every client computes alike for one value.
// ok is false when the upstream has no key source.
func (kc *KeyClient) FirstKeyHash(value string) (key string, hash uint64, ok bool) {
	if len(kc.sources) == 0 {
		return "", 0, false
	}
	key = value
	if re := kc.rewrite[0]; re != nil {
		key = re.ReplaceAllLiteralString(value, kc.sources[0].RewriteSubstitution)
	}
	hash, _ = hashring.RequestHash(hashring.EnvoyRingHash, key)
	return key, hash, true
}

// ReadsFirst reports whether kc keys a request by the upstream's first key
// source (first): a gRPC client reads header sources only.
func (kc *KeyClient) ReadsFirst(first topology.RequestKey) bool {
	return kc.table != nil && len(kc.sources) > 0 && kc.sources[0] == first
}

// OwnerOf is the endpoint kc sends a request of this hash to, and its
// index in kc.Shares.
func (kc *KeyClient) OwnerOf(hash uint64) (string, int) {
	e, ok := kc.table.Pick(hash)
	if !ok {
		return "", -1
	}
	return kc.eps[e], e
}

// Pick is where client kc sends request r, and where its retry goes.
func (kc *KeyClient) Pick(r KeyRequest) KeyPick {
	p := KeyPick{Client: kc.Client}
	if kc.table == nil {
		p.Random = kc.Note
		return p
	}
	grpc := kc.Client == hashring.GRPCGo.String() || kc.Client == hashring.GRPCJS.String()
	for i, k := range kc.sources {
		value, ok, random := sourceValue(k, r)
		if random != "" {
			p.Random = random
			return p
		}
		if !ok {
			continue
		}
		key := value
		if re := kc.rewrite[i]; re != nil {
			// the substitution is literal (convert refuses any other), as
			// every client then applies it
			key = re.ReplaceAllLiteralString(value, k.RewriteSubstitution)
		}
		c := kc.table.Client()
		h, _ := hashring.RequestHash(c, key)
		p.Source, p.Key, p.Hash = k.Source.String()+" "+k.Name, key, fmt.Sprintf("%016x", h)
		if k.Source == topology.KeySourceIP {
			p.Source = "sourceIP"
		}
		e, _ := kc.table.Pick(h)
		p.Endpoint = kc.eps[e]
		if grpc {
			p.Retry = p.Endpoint
			return p
		}
		p.Retry = p.Endpoint
		for a := uint32(1); a <= 32; a++ {
			n, ok, err := kc.table.PickAttempt(h, a)
			if err != nil || !ok {
				break
			}
			if n != e {
				p.Retry = kc.eps[n]
				break
			}
		}
		return p
	}
	if grpc {
		p.Random = "no header key source of the upstream is in the request: the client hashes a random number"
	} else {
		p.Random = "no key source of the upstream is in the request: Envoy picks at random"
	}
	return p
}

// sourceValue is the value request r carries for source k; random says why
// the client keys the request at random instead (a cookie Envoy generates).
func sourceValue(k topology.RequestKey, r KeyRequest) (value string, ok bool, random string) {
	switch k.Source {
	case topology.KeyHeader:
		value, ok = r.Headers[k.Name]
	case topology.KeyCookie:
		if value, ok = r.Cookies[k.Name]; !ok && k.CookieGenerate {
			return "", false, "the request has no cookie " + k.Name + ": Envoy generates one, whose value is random, and keys this request and the next ones by it"
		}
	case topology.KeySourceIP:
		if r.SourceIP == "" {
			return "", false, "the request's source address, which explain was not given (--source-ip), keys it"
		}
		value, ok = r.SourceIP, true
	case topology.KeyQueryParameter:
		value, ok = r.Query[k.Name]
	}
	return value, ok, ""
}
