package manifest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// checkFast checks the fast path against the general one on one document:
// whatever the fast path accepts, the general path accepts too and decodes
// to the same API object and the same Document. It reports whether the fast
// path took the document.
func checkFast(t testing.TB, p *fastParser, raw []byte) bool {
	t.Helper()
	obj, ok := p.apiObject(raw)
	fast, fastOK := p.fastDecode("f.yaml", 3, raw)
	general, errs := decodeGeneral("f.yaml", 3, 1, raw)
	if !ok {
		if fastOK {
			t.Fatalf("fast path decoded what it could not parse:\n%s", raw)
		}
		return false
	}
	// the general path's API object, decoded as it decodes
	js, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		t.Fatalf("fast path took a document the general path cannot convert (%v):\n%s", err, raw)
	}
	want := reflect.New(reflect.TypeOf(obj).Elem()).Interface()
	strictErrs, err := sigsjson.UnmarshalStrict(js, want)
	if err != nil || len(strictErrs) > 0 {
		t.Fatalf("fast path took a document the general path refuses (%v %v):\n%s", err, strictErrs, raw)
	}
	if !reflect.DeepEqual(obj, want) {
		t.Fatalf("fast path decoded\n%#v\nthe general path\n%#v\nfrom:\n%s", obj, want, raw)
	}
	if !fastOK {
		if errs == nil {
			t.Fatalf("fast path declined a document it parsed, the general path accepted it:\n%s", raw)
		}
		return false
	}
	if errs != nil {
		t.Fatalf("fast path accepted, the general path reports %v:\n%s", errs, raw)
	}
	if !reflect.DeepEqual(fast, general) {
		t.Fatalf("fast path gives\n%#v\nthe general path\n%#v\nfrom:\n%s", fast, general, raw)
	}
	return true
}

// docGen writes random documents in the shapes people write them: Poise's
// kinds with their fields and odd ones, scalars YAML reads as other types,
// block and flow styles, quoting, comments and spacing.
type docGen struct {
	r     *rand.Rand
	b     strings.Builder
	noise int // 1 in noise values is odd; 0: none
}

// odd reports whether to write something odd here.
func (g *docGen) odd(scale int) bool { return g.noise > 0 && g.r.IntN(g.noise*scale) == 0 }

type gval struct {
	scalar *string
	keys   []string
	vals   []*gval
	items  []*gval
	isMap  bool
	isList bool
}

func sv(s string) *gval { return &gval{scalar: &s} }

var oddScalars = []string{
	"", "~", "null", "Null", "NULL", "yes", "no", "on", "off", "y", "n", "Y", "true", "False", "0", "1", "-1", "007", "0x10",
	"0o7", "0b11", "-0b1", "1e3", "1.5", ".5", "-.inf", ".nan", "2001-01-01", "2001-12-14t21:59:43.10-05:00", "1_000",
	"65536", "4294967295", "4294967296", "9223372036854775807", "9223372036854775808", "-9223372036854775809", "5s", "1h",
	"90m", "0s", "fe80::1", "::1", "a b", "a#b", "a #b", "#x", "-", "-x", "-5.5.5", "10.0.0.1", "10.0.0.256", "1.2.3",
	"a:b", "a: b", "'q'", "\"q\"", "svc-1", "Svc", "x.y/z", "a,b", "{a}", "[a]", "&a", "*a", "!x", "|", ">", "%", "@", "`",
	"1e", "1e+", "+1", "+.5", "0.", "-0", "00", "0x", "1.2e3.4", "tcp", "Healthy", "Draining", "RoundRobin", "HTTP2",
}

func (g *docGen) pick(valid ...string) *gval {
	if g.odd(1) {
		return sv(oddScalars[g.r.IntN(len(oddScalars))])
	}
	return sv(valid[g.r.IntN(len(valid))])
}

func (g *docGen) num(lo, hi int) *gval {
	if g.odd(1) {
		return sv(oddScalars[g.r.IntN(len(oddScalars))])
	}
	return sv(fmt.Sprint(lo + g.r.IntN(hi-lo+1)))
}

func (g *docGen) object(fields ...any) *gval {
	m := &gval{isMap: true}
	for i := 0; i+1 < len(fields); i += 2 {
		if g.r.IntN(8) == 0 {
			continue
		}
		m.keys = append(m.keys, fields[i].(string))
		m.vals = append(m.vals, fields[i+1].(func() *gval)())
	}
	switch {
	case g.odd(6):
		m.keys = append(m.keys, "unknown")
		m.vals = append(m.vals, sv("x"))
	case g.odd(6):
		if len(m.keys) > 0 { // a repeated key
			m.keys = append(m.keys, m.keys[0])
			m.vals = append(m.vals, m.vals[0])
		}
	case g.odd(6):
		if len(m.keys) > 0 { // a key in another case
			m.keys[0] = strings.ToUpper(m.keys[0][:1]) + m.keys[0][1:]
		}
	}
	g.r.Shuffle(len(m.keys), func(i, j int) {
		m.keys[i], m.keys[j] = m.keys[j], m.keys[i]
		m.vals[i], m.vals[j] = m.vals[j], m.vals[i]
	})
	if g.odd(8) {
		return sv(oddScalars[g.r.IntN(len(oddScalars))]) // a scalar where an object belongs
	}
	return m
}

func (g *docGen) list(n int, item func() *gval) *gval {
	l := &gval{isList: true}
	for range g.r.IntN(n + 1) {
		if g.odd(8) {
			l.items = append(l.items, sv("null"))
			continue
		}
		l.items = append(l.items, item())
	}
	return l
}

func (g *docGen) doc() *gval {
	f := func(v func() *gval) func() *gval { return v }
	name := f(func() *gval { return g.pick("svc-1", "u", "a.b", "s-2", "x0") })
	ns := f(func() *gval { return g.pick("bench", "default", "n1") })
	region := f(func() *gval { return g.pick("eu-west", "us", "r1") })
	kind := g.pick("Upstream", "Locality", "EndpointSet", "EndpointSet", "EndpointSet")
	var spec, status func() *gval
	switch *kind.scalar {
	case "Upstream":
		spec = func() *gval {
			return g.object(
				"overprovisioningFactor", f(func() *gval { return g.num(1, 1000) }),
				"panicThreshold", f(func() *gval { return g.num(0, 100) }),
				"panicMode", f(func() *gval { return g.pick("UseAll", "FailClosed") }),
				"drainingCapacity", f(func() *gval { return g.pick("Exclude", "Include") }),
				"healthAdjustment", f(func() *gval { return g.pick("ControlPlane", "Proxy") }),
				"loadBalancing", f(func() *gval { return g.pick("RoundRobin", "Maglev", "Random") }),
				"protocol", f(func() *gval { return g.pick("HTTP1", "HTTP2", "GRPC", "TCP") }),
				"connectTimeout", f(func() *gval { return g.pick("5s", "250ms", "1h", "90s") }),
				"endpointsFrom", f(func() *gval {
					return g.object("service", f(func() *gval {
						return g.object("name", name, "port", f(func() *gval { return g.pick("80", "http", "'8080'", "65535", "grpc-web") }))
					}))
				}),
				"addressPolicy", f(func() *gval {
					return g.object("allowLoopback", f(func() *gval { return g.pick("true", "false", "yes", "null") }))
				}),
				"exportTo", f(func() *gval {
					// a plain * is an alias to YAML: "*" must be quoted
					return g.list(3, func() *gval { return g.pick(`"*"`, "'*'", ".", `"."`, "shop", "default", "n1", "*") })
				}),
			)
		}
		status = func() *gval { return g.object() }
	case "Locality":
		spec = func() *gval {
			return g.object("upstream", name, "priority", f(func() *gval { return g.num(0, 127) }),
				"region", region, "zone", region, "subZone", region, "weight", f(func() *gval { return g.num(1, 10) }))
		}
		status = func() *gval { return g.object() }
	default:
		// endpoints have distinct addresses; health names one of them
		next, made := 0, 0
		addrs := []string{"10.0.0.1", "10.0.1.0", "host.example", "a-b", "10.0.0.2", "fe80--1.x", "192.168.1.17", "127.0.0.1", "169.254.169.254"}
		addr := f(func() *gval { next++; made = max(made, next); return g.pick(addrs[(next-1)%len(addrs)]) })
		healthAddr := f(func() *gval { return g.pick(addrs[g.r.IntN(max(made, 1))%len(addrs)]) })
		port := f(func() *gval { return g.num(80, 80) })
		spec = func() *gval {
			return g.object("upstream", name, "priority", f(func() *gval { return g.num(0, 127) }),
				"locality", f(func() *gval { return g.object("region", region, "zone", region, "subZone", region) }),
				"endpoints", f(func() *gval {
					next = 0
					return g.list(6, func() *gval {
						return g.object("address", addr, "port", port, "weight", f(func() *gval { return g.num(1, 4) }),
							"adminState", f(func() *gval { return g.pick("Ready", "Draining", "Unavailable") }))
					})
				}))
		}
		status = func() *gval {
			return g.object("observedGeneration", f(func() *gval { return g.num(0, 9) }),
				"health", f(func() *gval {
					return g.list(4, func() *gval {
						return g.object("address", healthAddr, "port", port, "probe", f(func() *gval { return g.pick("Healthy", "Unhealthy", "Unknown") }),
							"circuit", f(func() *gval { return g.pick("Open", "Closed") }),
							"outlierEjected", f(func() *gval { return g.pick("true", "false") }))
					})
				}))
		}
	}
	top := g.object(
		"apiVersion", f(func() *gval { return g.pick("poise.dev/v1alpha1") }),
		"kind", f(func() *gval { return kind }),
		"metadata", f(func() *gval { return g.object("name", name, "namespace", ns) }),
		"spec", spec,
		"status", status,
	)
	if !top.isMap {
		return top
	}
	// apiVersion and kind nearly always, spec often
	for _, k := range []string{"apiVersion", "kind", "spec"} {
		if !slicesContains(top.keys, k) && g.r.IntN(10) > 0 {
			top.keys = append(top.keys, k)
			switch k {
			case "apiVersion":
				top.vals = append(top.vals, sv("poise.dev/v1alpha1"))
			case "kind":
				top.vals = append(top.vals, kind)
			default:
				top.vals = append(top.vals, spec())
			}
		}
	}
	return top
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// render writes a document.
func (g *docGen) render(v *gval) []byte {
	g.b.Reset()
	switch g.r.IntN(4) {
	case 0:
		g.b.WriteString("---\n")
	case 1:
		g.b.WriteString("# a comment\n")
	}
	if v.isMap {
		g.block(v, 0)
	} else {
		g.b.WriteString(g.inline(v) + "\n")
	}
	return []byte(g.b.String())
}

func (g *docGen) spaces() string {
	if g.r.IntN(20) == 0 {
		return "  "
	}
	return " "
}

func (g *docGen) comment() string {
	switch g.r.IntN(15) {
	case 0:
		return " # note"
	case 1:
		return "   #note: x"
	case 2:
		return "  "
	}
	return ""
}

func (g *docGen) key(k string) string {
	switch g.r.IntN(30) {
	case 0:
		return `"` + k + `"`
	case 1:
		return "'" + k + "'"
	}
	return k
}

// block writes a mapping's entries at indent.
func (g *docGen) block(m *gval, indent int) {
	pad := strings.Repeat(" ", indent)
	for i, k := range m.keys {
		if i > 0 { // the caller wrote the first key's indent
			g.b.WriteString(pad)
		}
		if g.r.IntN(40) == 0 {
			g.b.WriteString("\n" + pad + "# between\n" + pad)
		}
		g.b.WriteString(g.key(k) + ":")
		g.value(m.vals[i], indent)
	}
}

// value writes a mapping value after "key:" at indent.
func (g *docGen) value(v *gval, indent int) {
	switch {
	case v.isMap && len(v.keys) > 0 && g.r.IntN(3) > 0:
		g.b.WriteString(g.comment() + "\n")
		in := indent + 2 + g.r.IntN(2)*2
		g.b.WriteString(strings.Repeat(" ", in))
		g.block(v, in)
	case v.isList && len(v.items) > 0 && g.r.IntN(3) > 0:
		g.b.WriteString(g.comment() + "\n")
		in := indent + g.r.IntN(2)*2 // indentless or indented
		for _, it := range v.items {
			g.b.WriteString(strings.Repeat(" ", in) + "-" + g.spaces())
			if it.isMap && len(it.keys) > 0 && g.r.IntN(2) == 0 {
				g.block(it, in+2)
				continue
			}
			g.b.WriteString(g.inline(it) + g.comment() + "\n")
		}
	case v.scalar != nil && *v.scalar == "" && g.r.IntN(2) == 0:
		g.b.WriteString(g.comment() + "\n") // null by omission
	default:
		g.b.WriteString(g.spaces() + g.inline(v) + g.comment() + "\n")
	}
}

// inline writes a value on one line.
func (g *docGen) inline(v *gval) string {
	switch {
	case v.isMap:
		parts := make([]string, len(v.keys))
		for i, k := range v.keys {
			parts[i] = g.key(k) + ":" + g.spaces() + g.inline(v.vals[i])
		}
		return "{" + strings.Join(parts, ","+g.spaces()) + "}"
	case v.isList:
		parts := make([]string, len(v.items))
		for i, it := range v.items {
			parts[i] = g.inline(it)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	s := *v.scalar
	switch g.r.IntN(30) {
	case 0:
		if !strings.ContainsAny(s, `"\`) {
			return `"` + s + `"`
		}
	case 1:
		if !strings.Contains(s, "'") {
			return "'" + s + "'"
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

// TestFastPathMatchesGeneral: on random documents, valid and not, the fast
// path decodes to exactly what the general path does, or leaves the
// document to it; and it takes most valid documents.
func TestFastPathMatchesGeneral(t *testing.T) {
	t.Parallel()
	n := 5000
	if testing.Short() {
		n = 1000
	}
	g := &docGen{r: rand.New(rand.NewPCG(10, 1))}
	var p fastParser
	var took, valid int
	for i := range n {
		g.noise = []int{0, 0, 100, 20, 5}[i%5]
		raw := g.render(g.doc())
		if _, errs := decodeGeneral("f.yaml", 3, 1, raw); errs == nil {
			valid++
		}
		if checkFast(t, &p, raw) {
			took++
		}
	}
	t.Logf("%d documents, %d valid, %d by the fast path", n, valid, took)
	if took < valid/2 {
		t.Fatalf("the fast path took %d of %d valid documents", took, valid)
	}
}

// TestFastPathTakesExamples: the bundled examples and the scale fixture's
// shape decode by the fast path, where they can, to the same objects.
func TestFastPathTakesExamples(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	var p fastParser
	took := 0
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := splitDocuments(path, data, func(_, _ int, raw []byte) {
			if checkFast(t, &p, raw) {
				took++
			}
		}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if took == 0 {
		t.Fatal("the fast path took none of the examples' documents")
	}
	if !checkFast(t, &p, []byte(scaleDocument)) {
		t.Fatal("the fast path declined the scale fixture's EndpointSet")
	}
}

// scaleDocument is an EndpointSet as test/scale's generator writes it.
const scaleDocument = `apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: svc-0001-eu-west, namespace: bench}
spec:
  upstream: svc-0001
  locality: {region: eu-west}
  endpoints:
  - {address: 10.0.1.0, port: 8080, weight: 1}
  - {address: 10.0.1.1, port: 8080, weight: 2}
  - {address: 10.0.1.2, port: 8080, weight: 3}
  - {address: 10.0.1.3, port: 8080, weight: 1}
  - {address: 10.0.1.4, port: 8080, weight: 2}
  - {address: 10.0.1.5, port: 8080, weight: 3}
  - {address: 10.0.1.6, port: 8080, weight: 1}
status:
  health:
  - {address: 10.0.1.0, port: 8080, probe: Healthy}
  - {address: 10.0.1.1, port: 8080, probe: Unhealthy}
  - {address: 10.0.1.2, port: 8080, probe: Healthy}
  - {address: 10.0.1.3, port: 8080, probe: Healthy}
`

// FuzzFastPath: on any input, what the fast path decodes is what the
// general path decodes.
func FuzzFastPath(f *testing.F) {
	g := &docGen{r: rand.New(rand.NewPCG(3, 4))}
	for i := range 200 {
		g.noise = []int{0, 50, 10}[i%3]
		f.Add(g.render(g.doc()))
	}
	f.Add([]byte(scaleDocument))
	for _, doc := range fastMistakes {
		f.Add([]byte(doc))
	}
	var p fastParser
	f.Fuzz(func(t *testing.T, raw []byte) {
		// documents as splitDocuments hands them over
		_ = splitDocuments("f.yaml", raw, func(_, _ int, doc []byte) { checkFast(t, &p, doc) }, nil)
	})
}

// fastMistakes are documents the fast path parses but must leave to the
// general path, which names their problems: a quoted number, an unknown
// field one edit from a known one, a mistyped group or kind.
var fastMistakes = []string{
	"apiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: l, namespace: shop}\nspec: {upstream: u, weight: \"3\"}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Locality\nmetadata: {name: l, namespace: shop}\nspec: {upstream: u, weigth: 3}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: s, namespace: shop}\nspec:\n  upstream: u\n  endpoints:\n  - {address: 10.0.0.1, port: \"80\"}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: s, namespace: shop}\nspec:\n  upstream: u\n  endpoints:\n  - {adress: 10.0.0.1, port: 80}\n",
	"apiVersion: poise.io/v1alpha1\nkind: Upstream\nmetadata: {name: u, namespace: shop}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstrem\nmetadata: {name: u, namespace: shop}\n",
	"apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u, namespace: shop}\nspec: {connectTimeout: 10, protocol: 2}\n",
}

// TestFastPathLeavesMistakesToTheGeneralPath: a document with a one-character
// mistake is never decoded by the fast path; the general path names the
// field (or the apiVersion, or the kind) of each.
func TestFastPathLeavesMistakesToTheGeneralPath(t *testing.T) {
	t.Parallel()
	var p fastParser
	for _, doc := range fastMistakes {
		raw := []byte(doc)
		if checkFast(t, &p, raw) {
			t.Errorf("the fast path decoded a document with a mistake:\n%s", doc)
		}
		_, errs := decodeDocument(&p, "f.yaml", 1, 1, raw)
		if len(errs) == 0 || errs[0].Field == "" {
			t.Errorf("want a problem naming a field, got %v:\n%s", errs, doc)
		}
	}
}

// scaleUpstream is an Upstream as test/scale's generator writes it.
const scaleUpstream = `apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata: {name: svc-0001, namespace: bench}
spec: {protocol: HTTP2, loadBalancing: RoundRobin, healthAdjustment: ControlPlane}
`

// BenchmarkDecodeDocument: one document of the 1M fixture's shape, by the
// general path (what every document cost before the fast path) and as
// decoded now.
func BenchmarkDecodeDocument(b *testing.B) {
	for _, doc := range []struct{ name, text string }{{"EndpointSet", scaleDocument}, {"Upstream", scaleUpstream}} {
		raw := []byte(doc.text)
		b.Run(doc.name+"/general", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, errs := decodeGeneral("f.yaml", 1, 1, raw); errs != nil {
					b.Fatal(errs)
				}
			}
		})
		b.Run(doc.name+"/fast", func(b *testing.B) {
			b.ReportAllocs()
			var p fastParser
			for b.Loop() {
				if _, errs := decodeDocument(&p, "f.yaml", 1, 1, raw); errs != nil {
					b.Fatal(errs)
				}
			}
		})
	}
}

// TestFastPathBounds: a document past maxFastDocument takes the general
// path, and a parser does not keep a large node array for the next file.
func TestFastPathBounds(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("apiVersion: poise.dev/v1alpha1\nkind: EndpointSet\nmetadata: {name: s}\nspec:\n  upstream: u\n  endpoints:\n")
	for i := 0; b.Len() <= maxFastDocument; i++ {
		fmt.Fprintf(&b, "  - {address: 10.%d.%d.%d, port: 80}\n", i>>16, i>>8&255, i&255)
	}
	var p fastParser
	if _, ok := p.apiObject([]byte(b.String())); ok {
		t.Fatal("the fast path parsed a document larger than maxFastDocument")
	}
	var d Decoder
	d.DecodeFile("big.yaml", []byte(b.String()[:maxFastDocument/2]+"\n"), nil)
	if cap(d.fast.nodes) > keptNodes || d.fast.doc != nil {
		t.Fatalf("the decoder keeps %d nodes and %d bytes after a file", cap(d.fast.nodes), len(d.fast.doc))
	}
}

// TestFastPathTakesExportTo: an Upstream's spec.exportTo, block or flow,
// quoted or plain, decodes by the fast path to what the general path
// decodes; a plain * (a YAML alias) is left to the general path.
func TestFastPathTakesExportTo(t *testing.T) {
	t.Parallel()
	var p fastParser
	for _, tc := range []struct {
		doc  string
		fast bool
	}{
		{"spec: {exportTo: [\".\", shop]}\n", true},
		{"spec: {exportTo: ['*']}\n", true},
		{"spec:\n  exportTo:\n  - \"*\"\n", true},
		{"spec:\n  exportTo:\n  - .\n  - b\n  - a\n", true},
		{"spec: {exportTo: null}\n", true},
		{"spec: {exportTo: [*]}\n", false},
		{"spec: {exportTo: [a, a]}\n", false}, // the general path names the duplicate
		{"spec: {exportTo: []}\n", false},
	} {
		raw := []byte("apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata: {name: u, namespace: shop}\n" + tc.doc)
		if got := checkFast(t, &p, raw); got != tc.fast {
			t.Errorf("fast path took it: %v, want %v:\n%s", got, tc.fast, raw)
		}
	}
}
