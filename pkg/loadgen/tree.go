package loadgen

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// The generated topology has the shape of topologytest.Batch: upstream u is
// bench/svc-NNNN with three EndpointSets (7, 7 and 6 endpoints, weights 1..3)
// in three regions, addresses 10.(u/250).(u%250).(10r+i), port 8080.
const (
	Namespace = "bench"
	port      = 8080
	// grayBits endpoints of an upstream's first EndpointSet carry its flip
	// state: the n-th flip of an upstream marks unhealthy the endpoints whose
	// bits are set in the Gray code of n mod 2^grayBits, so each flip toggles
	// exactly one endpoint's probe and the last 2^grayBits states of an
	// upstream all differ — a client that misses some flips (the server
	// coalesced them) still sees new content.
	grayBits = 4
)

var regions = []string{"eu-west", "eu-central", "us-east"}

// UpstreamName is the name of upstream u, as topologytest names it.
func UpstreamName(u int) string { return fmt.Sprintf("svc-%04d", u) }

// ClusterName is the CDS and EDS resource name of upstream u.
func ClusterName(u int) string { return Namespace + "/" + UpstreamName(u) }

// ClusterIndex is the u of a ClusterName, or -1.
func ClusterIndex(name []byte) int {
	const prefix = Namespace + "/svc-"
	if len(name) <= len(prefix) || string(name[:len(prefix)]) != prefix {
		return -1
	}
	u := 0
	for _, c := range name[len(prefix):] {
		if c < '0' || c > '9' || u > 1<<30 {
			return -1
		}
		u = u*10 + int(c-'0')
	}
	return u
}

func gray(n uint32) uint32 { return n ^ n>>1 }

// appendUpstreamFile appends the manifest of upstream u — the Upstream and
// its three EndpointSets — whose first EndpointSet reports the endpoints in
// the bits of unhealthy as probe Unhealthy and the other grayBits as Healthy.
func appendUpstreamFile(b []byte, u int, unhealthy uint32) []byte {
	name := UpstreamName(u)
	b = fmt.Appendf(b, "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: %s, namespace: %s}\n"+
		"spec: {protocol: HTTP2, loadBalancing: RoundRobin, healthAdjustment: ControlPlane}\n", name, Namespace)
	for r, region := range regions {
		b = fmt.Appendf(b, "---\napiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: %s-%s, namespace: %s}\n"+
			"spec:\n  upstream: %s\n  locality: {region: %s}\n  endpoints:\n", name, region, Namespace, name, region)
		n := 7
		if r == 2 {
			n = 6
		}
		for i := range n {
			b = fmt.Appendf(b, "  - {address: %s, port: %d, weight: %d}\n", address(u, r, i), port, 1+i%3)
		}
		if r != 0 {
			continue
		}
		b = append(b, "status:\n  health:\n"...)
		for i := range grayBits {
			probe := "Healthy"
			if unhealthy&(1<<i) != 0 {
				probe = "Unhealthy"
			}
			b = fmt.Appendf(b, "  - {address: %s, port: %d, probe: %s}\n", address(u, r, i), port, probe)
		}
	}
	return b
}

func address(u, r, i int) string {
	return "10." + strconv.Itoa(u/250) + "." + strconv.Itoa(u%250) + "." + strconv.Itoa(r*10+i)
}

// Tree is a generated manifest directory and the flip state of its upstreams.
// A flip writes the upstream's new file beside the directory and renames it
// over the old one, so the source never reads half a file.
type Tree struct {
	Dir     string // the manifests, one file per upstream
	staging string // same file system, not watched
	N       int
	flips   []uint32 // per upstream, how many times it was flipped
	buf     []byte
}

// MaxUpstreams bounds a generated tree: its addresses 10.(u/250).(u%250).x
// stay valid IPv4 below it.
const MaxUpstreams = 250 * 250

// Generate writes n upstream files under root/manifests (root/staging
// holds a flip's file before it is renamed into place).
func Generate(root string, n int) (*Tree, error) {
	if n < 1 || n > MaxUpstreams {
		return nil, fmt.Errorf("generate %d upstreams: want 1 to %d", n, MaxUpstreams)
	}
	t := &Tree{Dir: filepath.Join(root, "manifests"), staging: filepath.Join(root, "staging"), N: n, flips: make([]uint32, n)}
	for _, d := range []string{t.Dir, t.staging} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	for u := range n {
		t.buf = appendUpstreamFile(t.buf[:0], u, 0)
		if err := os.WriteFile(t.Path(u), t.buf, 0o644); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Path is the manifest file of upstream u.
func (t *Tree) Path(u int) string { return filepath.Join(t.Dir, UpstreamName(u)+".yaml") }

// Flip rewrites upstream u's file with one endpoint's probe toggled.
func (t *Tree) Flip(u int) error {
	if u < 0 || u >= t.N {
		return fmt.Errorf("flip upstream %d: the tree holds %d", u, t.N)
	}
	t.flips[u]++
	t.buf = appendUpstreamFile(t.buf[:0], u, gray(t.flips[u]%(1<<grayBits)))
	tmp := filepath.Join(t.staging, UpstreamName(u)+".yaml")
	if err := os.WriteFile(tmp, t.buf, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, t.Path(u))
}
