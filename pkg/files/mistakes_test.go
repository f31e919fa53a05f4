package files

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/topology"
)

// checkoutExample is the walkthrough's manifest: a Namespace (document 1),
// Upstream shop/checkout (2), five Localities (3-7: eu-west-1a, 1b, 1c,
// us-east-1a, 1b) and their five EndpointSets (8-12).
func checkoutExample(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/checkout.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// burster applies a harness's bursts as Run does, with its log, /readyz's
// refusal and the metrics.
type burster struct {
	h    *harness
	m    *metrics.Source
	logs *bytes.Buffer // applyBurst logs on the test's goroutine
	log  *slog.Logger
}

func newBurster(t *testing.T, files map[string]string) *burster {
	h := newHarness(t, files)
	b := &burster{h: h, m: metrics.New(metrics.Options{Source: "files"}).Source, logs: &bytes.Buffer{}}
	b.log = slog.New(slog.NewTextHandler(b.logs, nil))
	h.src.Metrics, h.src.Log = b.m, b.log
	return b
}

// burst applies what the harness recorded, and returns how long until a
// held change is looked at again.
func (b *burster) burst(pending bool) time.Duration {
	ch := b.h.ch
	b.h.ch = newChanges()
	ch.pending = pending
	return b.h.src.applyBurst(ch, b.log)
}

// pass moves the settle clock of every held file back by d, as if the
// files had shown their content d longer: the settle rule reads the wall
// clock, which a test need not wait out.
func (b *burster) pass(d time.Duration) {
	b.h.src.mu.Lock()
	defer b.h.src.mu.Unlock()
	for _, f := range b.h.src.pending {
		if !f.shrunk.IsZero() {
			f.shrunk = f.shrunk.Add(-d)
		}
	}
}

func (b *burster) refusing() float64 {
	return testutil.ToFloat64(b.m.Refusing.WithLabelValues("files"))
}
func (b *burster) rejected() float64 {
	return testutil.ToFloat64(b.m.Batches.WithLabelValues("files", "rejected"))
}

// lineOf is the 1-based line of content that starts with prefix.
func lineOf(content, prefix string) int {
	for i, l := range strings.Split(content, "\n") {
		if strings.HasPrefix(l, prefix) {
			return i + 1
		}
	}
	return 0
}

// TestOneCharacterMistakesAreRefused: each one-character mistake of a
// manifest, saved over the walkthrough's file, is refused as an invalid
// value is: the reason names the file, the document and the field (and what
// was likely meant), /readyz's warning and poise_source_refusing say so, the
// refusal is logged and counted, and the last good snapshot keeps serving;
// putting the file back clears it all.
func TestOneCharacterMistakesAreRefused(t *testing.T) {
	t.Parallel()
	good := checkoutExample(t)
	syntax := strings.Replace(good, "  zone: eu-west-1a\n  weight: 3\n", "  zone: eu-west-1a\n  weight: 3\n   bad: indent\n", 1)
	tests := []struct {
		name string
		old  string // replaced once in the file by new
		new  string
		// want are in the refusal, DIR the harness's directory
		want []string
	}{
		{
			name: "an EndpointSet names a mistyped upstream",
			old:  "  name: checkout-us-east-1b\n  namespace: shop\nspec:\n  upstream: checkout\n  locality",
			new:  "  name: checkout-us-east-1b\n  namespace: shop\nspec:\n  upstream: checkuot\n  locality",
			want: []string{
				"EndpointSet shop/checkout-us-east-1b (DIR/checkout.yaml document 12): spec.upstream: no Upstream shop/checkuot (did you mean checkout?) (see Upstream shop/checkout (DIR/checkout.yaml document 2))",
				`Locality shop/checkout-us-east-1b (DIR/checkout.yaml document 7): spec.upstream: matches no endpoints of Upstream shop/checkout: no endpoint set is in priority 1, locality region "us-east" zone "us-east-1b" (EndpointSet shop/checkout-us-east-1b is in that locality, and names Upstream checkuot) (see EndpointSet shop/checkout-us-east-1b (DIR/checkout.yaml document 12))`,
			},
		},
		{
			name: "the Upstream loses its metadata.namespace",
			old:  "kind: Upstream\nmetadata:\n  name: checkout\n  namespace: shop\n",
			new:  "kind: Upstream\nmetadata:\n  name: checkout\n",
			want: []string{
				"EndpointSet shop/checkout-eu-west-1a (DIR/checkout.yaml document 8): spec.upstream: no Upstream shop/checkout (an Upstream default/checkout exists: did it lose its metadata.namespace?) (see Upstream default/checkout (DIR/checkout.yaml document 2))",
				"EndpointSet shop/checkout-eu-west-1b (DIR/checkout.yaml document 9): spec.upstream: no Upstream shop/checkout",
			},
		},
		{
			name: "the Upstream's group is mistyped",
			old:  "apiVersion: poise.dev/v1alpha1\nkind: Upstream\n",
			new:  "apiVersion: poise.io/v1alpha1\nkind: Upstream\n",
			want: []string{`DIR/checkout.yaml: document 2 (Upstream shop/checkout): apiVersion: unknown apiVersion "poise.io/v1alpha1" for kind Upstream: did you mean poise.dev/v1alpha1?`},
		},
		{
			name: "a Locality's zone is mistyped",
			old:  "  zone: eu-west-1a\n  weight: 3\n",
			new:  "  zone: eu-west-la\n  weight: 3\n",
			want: []string{
				`Locality shop/checkout-eu-west-1a (DIR/checkout.yaml document 3): spec.zone: matches no endpoints of Upstream shop/checkout: no endpoint set is in priority 0, locality region "eu-west" zone "eu-west-la" (did you mean zone "eu-west-1a"? EndpointSet shop/checkout-eu-west-1a is there, and no Locality object places it) (see EndpointSet shop/checkout-eu-west-1a (DIR/checkout.yaml document 8))`,
			},
		},
		{
			name: "a weight is quoted",
			old:  "  zone: eu-west-1a\n  weight: 3\n",
			new:  "  zone: eu-west-1a\n  weight: \"3\"\n",
			want: []string{`DIR/checkout.yaml: document 3 (Locality shop/checkout-eu-west-1a): spec.weight: want an integer, got string "3" (the quotes make it a string: remove them)`},
		},
		{
			name: "a field is mistyped",
			old:  "  zone: eu-west-1a\n  weight: 3\n",
			new:  "  zone: eu-west-1a\n  weigth: 3\n",
			want: []string{"DIR/checkout.yaml: document 3 (Locality shop/checkout-eu-west-1a): spec.weigth: unknown field (did you mean spec.weight?)"},
		},
		{
			name: "a line is indented one space too far",
			old:  good,
			new:  syntax,
			want: []string{fmt.Sprintf("DIR/checkout.yaml: document 3: not valid YAML: line %d: mapping values are not allowed in this context", lineOf(syntax, "   bad: indent"))},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBurster(t, map[string]string{"checkout.yaml": good})
			before := b.h.src.Dir.Current()
			if before.Upstream(topology.Key{Namespace: "shop", Name: "checkout"}) == nil {
				t.Fatal("the example does not load")
			}
			edited := strings.Replace(good, tc.old, tc.new, 1)
			if edited == good {
				t.Fatalf("%q is not in the example", tc.old)
			}
			b.h.write("checkout.yaml", edited)
			b.burst(false)

			refusal := b.h.src.Refusal()
			if !strings.HasPrefix(refusal, fmt.Sprintf("the latest manifest change is refused; revision %d keeps serving: ", before.Revision)) {
				t.Errorf("/readyz's warning: %q", refusal)
			}
			for _, w := range tc.want {
				w = strings.ReplaceAll(w, "DIR", b.h.dir)
				if !strings.Contains(refusal, w) {
					t.Errorf("the refusal lacks\n%s\nit is\n%s", w, refusal)
				}
			}
			if b.refusing() != 1 || b.rejected() != 1 {
				t.Errorf("poise_source_refusing %v, rejected batches %v; want 1 and 1", b.refusing(), b.rejected())
			}
			// the log's reason is the same, quoted
			first := strings.ReplaceAll(strings.ReplaceAll(tc.want[0], "DIR", b.h.dir), `"`, `\"`)
			if logs := b.logs.String(); !strings.Contains(logs, "manifest change refused; the last good topology keeps serving") ||
				!strings.Contains(logs, first) {
				t.Errorf("the log does not say\n%s\nit is\n%s", first, logs)
			}
			if b.h.src.Dir.Current() != before {
				t.Error("a refused change changed the snapshot")
			}

			b.h.write("checkout.yaml", good)
			b.burst(false)
			if r := b.h.src.Refusal(); r != "" || b.refusing() != 0 {
				t.Errorf("the file put back: warning %q, poise_source_refusing %v", r, b.refusing())
			}
			if !strings.Contains(b.logs.String(), "manifest files are back to the applied topology") {
				t.Error("the file put back is not logged")
			}
			if b.h.src.Dir.Current() != before {
				t.Error("the file put back changed the snapshot")
			}
		})
	}
}

// TestSettleCountsOrphanedObjects: a change that takes away an Upstream
// takes its Localities and EndpointSets out of the topology too. The settle
// rule counts them: a file losing its Upstream's namespace is held back
// (as a truncated file would be), and once it has stayed so for the settle
// time, refused, naming the objects it orphans. An Upstream moved to
// another file in the same change orphans nothing and is applied at once;
// a new file naming an Upstream that another is about to bring waits for it.
func TestSettleCountsOrphanedObjects(t *testing.T) {
	t.Parallel()
	good := checkoutExample(t)
	b := newBurster(t, map[string]string{"checkout.yaml": good})
	const settle = 200 * time.Millisecond
	b.h.src.Settle = settle
	before := b.h.src.Dir.Current()

	b.h.write("checkout.yaml", strings.Replace(good, "  name: checkout\n  namespace: shop\n", "  name: checkout\n", 1))
	wait := b.burst(false)
	held := b.h.src.Refusal()
	if want := b.h.path("checkout.yaml") + " would take 1 of its 11 objects away and leave 10 objects naming an Upstream or SpatialDomain no file defines"; !strings.Contains(held, "held back") || !strings.Contains(held, want) {
		t.Fatalf("warning %q, want it held back: %s", held, want)
	}
	if wait <= 0 || b.refusing() != 1 || b.h.src.Dir.Current() != before {
		t.Fatalf("recheck in %v, poise_source_refusing %v, snapshot changed %v", wait, b.refusing(), b.h.src.Dir.Current() != before)
	}
	b.pass(wait)
	b.burst(true)
	if r := b.h.src.Refusal(); !strings.Contains(r, "refused") || !strings.Contains(r, "did it lose its metadata.namespace?") {
		t.Fatalf("after the settle time: %q, want the change refused", r)
	}
	if b.h.src.Dir.Current() != before {
		t.Fatal("the refused change changed the snapshot")
	}

	// the Upstream moved to a file of its own, and edited: nothing is
	// orphaned
	up := good[strings.Index(good, "apiVersion: poise.dev/v1alpha1\nkind: Upstream"):]
	up = up[:strings.Index(up, "---\n")]
	b.h.write("checkout.yaml", strings.Replace(good, up+"---\n", "", 1))
	b.h.write("upstream.yaml", strings.Replace(up, "panicThreshold: 50", "panicThreshold: 40", 1))
	b.burst(false)
	if r := b.h.src.Refusal(); r != "" {
		t.Fatalf("moving the Upstream to another file: %q", r)
	}
	moved := b.h.src.Dir.Current()
	if moved == before || moved.Upstream(topology.Key{Namespace: "shop", Name: "checkout"}) == nil {
		t.Fatal("the move was not applied")
	}

	// a new file naming an Upstream another file brings a moment later
	// waits for it, rather than being refused
	b.h.write("payments-sets.yaml", `apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: payments-a, namespace: shop}
spec:
  upstream: payments
  locality: {region: eu-west, zone: eu-west-1a}
  endpoints: [{address: 10.9.0.1, port: 80}]
`)
	b.burst(false)
	if r := b.h.src.Refusal(); !strings.Contains(r, "payments-sets.yaml would leave 1 object naming an Upstream or SpatialDomain no file defines") {
		t.Fatalf("a set written before its Upstream: %q, want it held", r)
	}
	b.h.write("payments.yaml", "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: payments, namespace: shop}\n")
	b.burst(false)
	if r := b.h.src.Refusal(); r != "" || b.h.src.Dir.Current().Upstream(topology.Key{Namespace: "shop", Name: "payments"}) == nil {
		t.Fatalf("the Upstream written: %q; want both files applied", r)
	}
	if b.rejected() != 1 {
		t.Errorf("%v changes refused, want only the namespace lost", b.rejected())
	}
}
