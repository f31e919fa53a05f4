package trafficmap

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/test/golden"
)

// checkout is the checkout example's snapshot, after each edit replaces
// its old text (which must occur once) with its new.
func checkout(t *testing.T, edits ...string) *topology.Snapshot {
	t.Helper()
	src, err := os.ReadFile("../../examples/checkout.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	for i := 0; i+1 < len(edits); i += 2 {
		if n := strings.Count(text, edits[i]); n != 1 {
			t.Fatalf("%q occurs %d times in checkout.yaml, want once", edits[i], n)
		}
		text = strings.Replace(text, edits[i], edits[i+1], 1)
	}
	set, err := manifest.Decode("checkout.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	d := topology.NewDirectory()
	if _, err := d.Apply(set.Batch); err != nil {
		t.Fatal(err)
	}
	return d.Current()
}

func checkoutReport(t *testing.T) explain.Report { return explain.Build(checkout(t)) }

func render(t *testing.T, write func(*bytes.Buffer, View) error, v View) string {
	t.Helper()
	var b bytes.Buffer
	if err := write(&b, v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func fragment(b *bytes.Buffer, v View) error { return WriteFragment(b, v) }
func page(b *bytes.Buffer, v View) error     { return WritePage(b, v) }

// zoneDown takes every endpoint of eu-west-1a out, each for another
// reason: the locality is down and 58 % of the traffic spills.
var zoneDown = []string{"  - {address: 10.1.1.11, port: 9090, probe: Unhealthy}\n",
	"  - {address: 10.1.1.10, port: 9090, probe: Unhealthy}\n  - {address: 10.1.1.11, port: 9090, probe: Unhealthy}\n" +
		"  - {address: 10.1.1.12, port: 9090, circuit: Open}\n  - {address: 10.1.1.13, port: 9090, outlierEjected: true}\n"}

// The checkout example's page, byte for byte, as it is, with a zone down,
// and for the clients of one zone under PreferSameZone: the same report
// renders the same bytes (the browser test checks what they draw).
func TestCheckoutGolden(t *testing.T) {
	const affinity = "  panicThreshold: 50\n"
	from := explain.From{Region: "eu-west", Zone: "eu-west-1a"}
	classRep, err := explain.BuildFor(checkout(t, affinity, affinity+"  localityAffinity: {mode: PreferSameZone}\n"), explain.ClassOptions{From: from})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rep  explain.Report
	}{
		{"checkout.html", checkoutReport(t)},
		{"checkout-zone-down.html", explain.Build(checkout(t, zoneDown...))},
		{"checkout-from-eu-west-1a.html", classRep},
	} {
		v := View{Report: tc.rep, Version: "1", Page: 1, Pages: 1, Total: 1}
		got := render(t, page, v)
		if again := render(t, page, v); again != got {
			t.Fatalf("%s: two renderings of one report differ", tc.name)
		}
		golden.Check(t, tc.name, got)
		if f := render(t, fragment, v); !strings.HasPrefix(f, `<div id="map" data-version="1"`) || !strings.Contains(got, f) {
			t.Errorf("%s: the fragment is not the page's #map:\n%.200s", tc.name, f)
		}
		checkFits(t, tc.name, v.data().Upstreams)
	}
}

// checkFits fails for a line of text longer than its box.
func checkFits(t *testing.T, name string, us []Upstream) {
	t.Helper()
	check := func(c column, b Box) {
		var first []string
		for _, w := range []string{b.Flag, b.Label, b.Tag, b.Figure} {
			if w != "" {
				first = append(first, w)
			}
		}
		for _, line := range []string{strings.Join(first, " "), b.Sub} {
			if n := utf8.RuneCountInString(line); n > c.runes() {
				t.Errorf("%s: %q is %d characters, its box holds %d", name, line, n, c.runes())
			}
		}
		if b.Sub != "" && b.SubY+4 > b.BarY {
			t.Errorf("%s: the second line %q runs into the bar", name, b.Sub)
		}
	}
	for _, u := range us {
		check(colUpstream, u.Box)
		for _, p := range u.Priorities {
			check(colPriority, p.Box)
			for _, l := range p.Localities {
				check(colLocality, l.Box)
				if l.Box.Sub == "" {
					t.Errorf("%s: locality %s/%s has no second line", name, l.Region, l.Zone)
				}
				for _, e := range l.Endpoints {
					check(colEndpoint, e.Box)
				}
			}
		}
	}
}

// Object names, zones and addresses are user input: the page prints them
// escaped, in text and in attributes, and runs none of them.
func TestNamesAreEscaped(t *testing.T) {
	const evil = `"><script>alert(1)</script><img src=x onerror=alert(2)>`
	rep := explain.Report{Revision: 3, From: &explain.From{Region: evil, Zone: evil}, Upstreams: []explain.Upstream{{
		Namespace: evil, Name: evil, Affinity: explain.Affinity{Mode: "PreferSameZone"},
		Split: explain.Split{Outcome: "Routable", Priorities: []explain.Priority{{Load: 1_000_000, Localities: []explain.Locality{{
			Region: evil, Zone: evil, SubZone: evil, Traffic: 1_000_000,
			Endpoints: []explain.Endpoint{{Address: evil, Port: 80, Share: 1_000_000, Reason: "Eligible", Eligible: true}}}}}}},
		Class: &explain.Class{Mode: "PreferSameZone", ReceivesNone: true, Reason: evil},
	}}}
	out := render(t, page, View{Report: rep, Version: "3", Page: 1, Pages: 1, Total: 1})
	for _, bad := range []string{"<script>alert", "<img", `"><script`} {
		if strings.Contains(out, bad) {
			t.Errorf("the page contains %q unescaped", bad)
		}
	}
	if !strings.Contains(out, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("the names are not printed at all")
	}
}

// A large upstream is drawn within the caps, and what is not drawn is
// summed in "+N more" rows, so each column still carries all the traffic.
func TestCapsSumTheRest(t *testing.T) {
	var prs []explain.Priority
	for p := range MaxPriorities + 3 {
		pr := explain.Priority{Priority: uint32(p), Load: 1000}
		for l := range MaxLocalities + 5 {
			loc := explain.Locality{Region: "r", Zone: fmt.Sprint("z", l), Traffic: 40}
			for e := range MaxEndpoints + 7 {
				loc.Endpoints = append(loc.Endpoints, explain.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", p, l, e), Port: 80, Share: 2, Reason: "Eligible", Eligible: true})
			}
			pr.Localities = append(pr.Localities, loc)
		}
		prs = append(prs, pr)
	}
	u := layoutUpstream(explain.Upstream{Namespace: "n", Name: "big", Split: explain.Split{Priorities: prs}}, nil, reasonsByName(), nil)
	if len(u.Priorities) != MaxPriorities || u.More == nil || u.More.Count != 3 || u.More.Traffic != 3000 {
		t.Fatalf("priorities: %d drawn, more %+v", len(u.Priorities), u.More)
	}
	p := u.Priorities[0]
	if len(p.Localities) != MaxLocalities || p.More == nil || p.More.Count != 5 || p.More.Traffic != 200 {
		t.Fatalf("localities: %d drawn, more %+v", len(p.Localities), p.More)
	}
	l := p.Localities[0]
	if len(l.Endpoints) != MaxEndpoints || l.More == nil || l.More.Count != 7 || l.More.Traffic != 14 {
		t.Fatalf("endpoints: %d drawn, more %+v", len(l.Endpoints), l.More)
	}
	rows := MaxPriorities*(MaxLocalities*(MaxEndpoints+1)+1) + 1
	if want := top + rows*rowH + top; u.Height != want {
		t.Errorf("height %d, want %d (%d rows)", u.Height, want, rows)
	}
}

// healthy is one eligible endpoint carrying traffic.
func healthy(traffic uint64) []explain.Endpoint {
	return []explain.Endpoint{{Address: "10.0.0.1", Port: 80, Weight: 1, Share: traffic, Reason: "Eligible", Eligible: true}}
}

// Spill, panic and drops each have a class of their own and a badge.
func TestHighlights(t *testing.T) {
	u := layoutUpstream(explain.Upstream{Namespace: "n", Name: "u", Policy: explain.Policy{OverprovisioningFactor: 140}, Split: explain.Split{
		Outcome: "Routable", TotalPanic: true, DroppedMillionths: 250_000,
		Priorities: []explain.Priority{
			{Priority: 0, Load: 500_000, EligibleWeight: 1, InPanic: true, DroppedMillionths: 250_000, Localities: []explain.Locality{{Traffic: 500_000, Endpoints: healthy(500_000)}}},
			{Priority: 1, Load: 250_000, EligibleWeight: 1, Localities: []explain.Locality{{Traffic: 250_000, Endpoints: healthy(250_000)}}},
			{Priority: 2, Load: 0, EligibleWeight: 1, Localities: []explain.Locality{{Traffic: 0, Endpoints: healthy(0)}}},
		}}}, nil, reasonsByName(), nil)
	for i, want := range []string{"node priority panic drop", "node priority spill headroom", "node priority"} {
		if got := u.Priorities[i].Class; got != want {
			t.Errorf("priority %d: class %q, want %q", i, got, want)
		}
	}
	if u.Priorities[1].Localities[0].Class != "node locality spill headroom" || u.Priorities[2].Band.Zero != true {
		t.Errorf("spill locality %q, zero band %v", u.Priorities[1].Localities[0].Class, u.Priorities[2].Band.Zero)
	}
	if u.Class != "node upstream panic drop" || u.Drop == nil || u.Drop.Traffic != 250_000 || u.Drop.Class != "more drop" {
		t.Errorf("upstream %q, drop %+v", u.Class, u.Drop)
	}
	if got := badges(u); got != "spill headroom:spill 25.0000% (headroom),panic:total panic,drop:drops 25.0000%" {
		t.Errorf("badges %s", got)
	}
	if u.Priorities[0].Box.Tag != "PANIC" || u.Priorities[1].Box.Tag != "" {
		t.Errorf("PANIC tags %q, %q", u.Priorities[0].Box.Tag, u.Priorities[1].Box.Tag)
	}
	// a band of 25 % is a quarter of the widest
	if got := u.Priorities[1].Band.Width; got != "4.0" {
		t.Errorf("band width %s, want 4.0", got)
	}
}

func badges(u Upstream) string {
	var out []string
	for _, b := range u.Badges {
		out = append(out, b.Class+":"+b.Text)
	}
	return strings.Join(out, ",")
}

// A spill is graded by the upstream's own overprovisioning factor, exactly
// at each threshold: headroom up to 1 − 100/f of the traffic, degraded up
// to half, severe beyond.
func TestSpillSeverityBoundaries(t *testing.T) {
	for _, tc := range []struct {
		opf      uint32
		spill    uint64
		want     Severity
		headroom uint64
	}{
		{140, 0, SpillNone, 285_714},
		{140, 1, SpillHeadroom, 285_714},
		{140, 20_000, SpillHeadroom, 285_714}, // the checkout example
		{140, 285_714, SpillHeadroom, 285_714},
		{140, 285_715, SpillDegraded, 285_714}, // 285 715 × 140 > 40 × 10⁶
		{140, 500_000, SpillDegraded, 285_714},
		{140, 500_001, SpillSevere, 285_714},
		{140, 580_000, SpillSevere, 285_714}, // a zone of the example down
		{140, 1_000_000, SpillSevere, 285_714},
		{125, 200_000, SpillHeadroom, 200_000},
		{125, 200_001, SpillDegraded, 200_000},
		{200, 500_000, SpillHeadroom, 500_000}, // headroom reaches half: no degraded
		{200, 500_001, SpillSevere, 500_000},
		{400, 500_001, SpillSevere, 750_000}, // severe before headroom
		{100, 1, SpillDegraded, 0},           // no headroom
		{50, 500_000, SpillDegraded, 0},
		{1, 0, SpillNone, 0},
		{1000, 500_000, SpillHeadroom, 900_000},
	} {
		if got := spillSeverity(tc.spill, tc.opf); got != tc.want {
			t.Errorf("spill %d at factor %d%%: %s, want %s", tc.spill, tc.opf, got, tc.want)
		}
		if got := headroom(tc.opf); got != tc.headroom {
			t.Errorf("headroom at factor %d%%: %d, want %d", tc.opf, got, tc.headroom)
		}
		// the headroom printed is the last spill graded headroom
		if h := headroom(tc.opf); h > 0 && h <= 500_000 && (spillSeverity(h, tc.opf) != SpillHeadroom || spillSeverity(h+1, tc.opf) == SpillHeadroom) {
			t.Errorf("factor %d%%: headroom %d is not the boundary", tc.opf, h)
		}
	}
	// the grade, the badge and the note of an upstream
	u := layoutUpstream(explain.Upstream{Namespace: "n", Name: "u", Policy: explain.Policy{OverprovisioningFactor: 140}, Split: explain.Split{
		Priorities: []explain.Priority{
			{Priority: 0, Load: 499_999, EligibleWeight: 1, Localities: []explain.Locality{{Traffic: 499_999, Endpoints: healthy(499_999)}}},
			{Priority: 1, Load: 500_001, EligibleWeight: 1, Localities: []explain.Locality{{Traffic: 500_001, Endpoints: healthy(500_001)}}},
		}}}, nil, reasonsByName(), nil)
	if u.Spill != 500_001 || u.Severity != SpillSevere || badges(u) != "spill severe:spill 50.0001% (severe)" {
		t.Errorf("spill %d %s, badges %s", u.Spill, u.Severity, badges(u))
	}
	const note = "spill 50.0001% beyond priority 0 is severe: up to 28.5714% (1 − 100/140) is headroom, up to 50.0000% degraded, above it severe"
	if !slices.Contains(u.Notes, note) {
		t.Errorf("notes %q, want %q", u.Notes, note)
	}
}

// A locality none of whose endpoints is eligible is down: the word DOWN
// on its first line, the class down, a badge in the heading; its weight
// and availability are on its second line, as every locality's are. It
// stays down in panic, where it carries traffic.
func TestDownLocality(t *testing.T) {
	u := layoutUpstream(explain.Build(checkout(t, zoneDown...)).Upstreams[0], nil, reasonsByName(), nil)
	a, b := u.Priorities[0].Localities[0], u.Priorities[0].Localities[1]
	if a.Zone != "eu-west-1a" || !a.Down || !strings.Contains(a.Class, "down") || a.Box.Flag != "DOWN" || a.EligibleWeight != 0 {
		t.Errorf("eu-west-1a: down %v, class %q, flag %q, eligible %d", a.Down, a.Class, a.Box.Flag, a.EligibleWeight)
	}
	if a.Box.Sub != "weight 3 · avail 0.0000% (0/6)" || b.Box.Sub != "weight 2 · avail 100.0000% (2/2)" {
		t.Errorf("second lines %q, %q", a.Box.Sub, b.Box.Sub)
	}
	if !strings.Contains(a.Box.Title, "down: no eligible capacity (2 ProbeUnhealthy, 1 CircuitOpen, 1 OutlierEjected)") {
		t.Errorf("title %q", a.Box.Title)
	}
	if b.Down || strings.Contains(b.Class, "down") || b.Box.Flag != "" {
		t.Errorf("eu-west-1b: down %v, class %q, flag %q", b.Down, b.Class, b.Box.Flag)
	}
	// P0 keeps 140 % × 3/10: 58 % spills, severe.
	if u.Down != 1 || u.Spill != 580_000 || u.Severity != SpillSevere || badges(u) != "down:1 locality down,spill severe:spill 58.0000% (severe)" {
		t.Errorf("down %d, spill %d %s, badges %s", u.Down, u.Spill, u.Severity, badges(u))
	}

	// in panic a down locality carries traffic and stays down
	sick := []explain.Endpoint{{Address: "10.0.0.1", Port: 80, Weight: 1, Share: 1_000_000, Reason: "ProbeUnhealthy", Selectable: true}}
	u = layoutUpstream(explain.Upstream{Namespace: "n", Name: "u", Policy: explain.Policy{OverprovisioningFactor: 140}, Split: explain.Split{
		TotalPanic: true, Priorities: []explain.Priority{{Load: 1_000_000, InPanic: true, ConfiguredWeight: 1, Localities: []explain.Locality{
			{Region: "r", Zone: "z", LocalityWeight: 1, ConfiguredWeight: 1, SelectableWeight: 1, Availability: 1_000_000, Traffic: 1_000_000, Endpoints: sick}}}}}}, nil, reasonsByName(), nil)
	p, l := u.Priorities[0], u.Priorities[0].Localities[0]
	if !l.Down || l.Box.Flag != "DOWN" || l.Traffic != 1_000_000 || !p.Down || p.Class != "node priority panic down" || p.Box.Flag != "DOWN" || p.Box.Tag != "PANIC" {
		t.Errorf("in panic: locality down %v flag %q traffic %d; priority %q flag %q tag %q", l.Down, l.Box.Flag, l.Traffic, p.Class, p.Box.Flag, p.Box.Tag)
	}
	if got := badges(u); got != "down:1 locality down,panic:total panic" {
		t.Errorf("in panic: badges %s", got)
	}
}

// The reasons, their signals and their classes come from the weights
// package's one classification: the key has an entry per ineligible
// reason, each with a class of its own that the stylesheet colours, and
// an endpoint with that reason is drawn with the same class.
func TestReasonsFromClassification(t *testing.T) {
	css, err := os.ReadFile("assets/map.css")
	if err != nil {
		t.Fatal(err)
	}
	keys := reasonKeys()
	seen := map[string]bool{}
	byName := reasonsByName()
	for _, r := range weights.Reasons() {
		if r.Eligible() {
			continue
		}
		k := keys[0]
		keys = keys[1:]
		class := reasonClass(r)
		if k.Reason != r.String() || k.Class != class || k.Signal != strings.ToLower(r.Signal().String()) || k.Signal == "invalid" {
			t.Errorf("key %+v for reason %s (signal %s)", k, r, r.Signal())
		}
		if seen[class] {
			t.Errorf("class %s is used twice", class)
		}
		seen[class] = true
		for _, rule := range []string{"." + class + " > .box, .key." + class + " .swatch {", "." + class + " .tag {"} {
			if !strings.Contains(string(css), rule) {
				t.Errorf("map.css has no rule %q for reason %s", rule, r)
			}
		}
		var l layout
		l.reasons = byName
		ep := l.endpoint(explain.Endpoint{Address: "10.0.0.1", Port: 80, Reason: r.String()}, false)
		if want := "node endpoint ineligible " + class + " signal-" + k.Signal; ep.Class != want || ep.Signal != k.Signal || ep.Box.Tag != r.String() {
			t.Errorf("endpoint %s: class %q (want %q), signal %q, tag %q", r, ep.Class, want, ep.Signal, ep.Box.Tag)
		}
	}
	if len(keys) != 0 {
		t.Errorf("keys for no reason: %+v", keys)
	}
	if got := reasonClass(weights.ReasonProbeUnhealthy); got != "reason-probe-unhealthy" {
		t.Errorf("class %q", got)
	}
	var l layout
	l.reasons = byName
	if ep := l.endpoint(explain.Endpoint{Address: "10.0.0.1", Port: 80, Reason: "Mystery"}, false); ep.Class != "node endpoint ineligible reason-unknown" {
		t.Errorf("an unknown reason: class %q", ep.Class)
	}
}

// An upstream whose requests are keyed (spec.requestAffinity) has a badge
// saying so, and its key sources in order among its notes; one that is not
// has neither.
func TestKeyedUpstreamBadge(t *testing.T) {
	t.Parallel()
	up := func(keyed []string) Upstream {
		return layoutUpstream(explain.Upstream{Namespace: "n", Name: "u", Policy: explain.Policy{OverprovisioningFactor: 140},
			LoadBalancing: explain.LoadBalancing{Policy: "RingHash", KeyedBy: keyed}, Split: explain.Split{
				Outcome: "Routable", Priorities: []explain.Priority{
					{Priority: 0, Load: 1_000_000, EligibleWeight: 1, Localities: []explain.Locality{{Traffic: 1_000_000, Endpoints: healthy(1_000_000)}}},
				}}}, nil, reasonsByName(), nil)
	}
	u := up([]string{"header x-user", "sourceIP; gRPC clients skip it"})
	if got := badges(u); got != "keyed:keyed RingHash" {
		t.Errorf("badges %q, want the keyed badge", got)
	}
	if !slices.Contains(u.Notes, "requests keyed by, in order: header x-user; sourceIP; gRPC clients skip it") {
		t.Errorf("notes %q do not list the key sources", u.Notes)
	}
	if got := badges(up(nil)); got != "" {
		t.Errorf("an upstream without requestAffinity has badges %q", got)
	}
}

// Where the clients report their load, each endpoint shows beside its
// computed share the share of the requests they reported, on a second
// line and a second bar, with a note saying whose reports over what
// window; the figures are exact millionths, rounded down. The cart example
// (Balanced, loadReporting), for the clients of eu-west-1a, byte for byte.
func TestObservedBesideComputed(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../examples/cart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set, err := manifest.Decode("cart.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	d := topology.NewDirectory()
	if _, err := d.Apply(set.Batch); err != nil {
		t.Fatal(err)
	}
	from := explain.From{Region: "eu-west", Zone: "eu-west-1a"}
	rep, err := explain.BuildFor(d.Current(), explain.ClassOptions{From: from, Demand: []explain.DemandEntry{
		{Region: "eu-west", Zone: "eu-west-1a", Weight: 3}, {Region: "eu-west", Zone: "eu-west-1b", Weight: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	// 3,000 requests: 17101 and 17102 took 1,000 and 333, 17122 none.
	obs := &Observed{Window: 30 * time.Second, Class: from.String(), Issued: map[string]uint64{
		"127.0.0.1:17101": 1000, "127.0.0.1:17102": 333, "127.0.0.1:17111": 167, "127.0.0.1:17112": 166, "127.0.0.1:17121": 1334}}
	v := View{Report: rep, Version: "1", Page: 1, Pages: 1, Total: 1, Observed: map[string]*Observed{"shop/cart": obs}}
	got := render(t, fragment, v)
	golden.Check(t, "cart-observed-from-eu-west-1a.html", got)
	checkFits(t, "cart observed", v.data().Upstreams)
	for _, want := range []string{
		`data-observed="true"`,
		`data-address="127.0.0.1" data-port="17101" data-share="296297" data-observed="333333" data-observed-requests="1000"`,
		`data-address="127.0.0.1" data-port="17102" data-share="148148" data-observed="111000" data-observed-requests="333"`,
		`data-address="127.0.0.1" data-port="17122" data-share="222222" data-observed="0" data-observed-requests="0"`,
		"observed 33.3333% (1,000)",
		"observed: 3,000 requests reported by the clients in eu-west/eu-west-1a over the last 30s (load reports)",
		`<rect class="obsbar"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the fragment has no %q", want)
		}
	}
	// Without reports the same upstream is drawn as before: no second line.
	v.Observed = nil
	if plain := render(t, fragment, v); strings.Contains(plain, "observed") || strings.Contains(plain, "obsbar") {
		t.Error("an upstream without reports shows observed figures")
	}
	// Reports of nothing yet say so.
	v.Observed = map[string]*Observed{"shop/cart": {Window: 30 * time.Second}}
	if empty := render(t, fragment, v); !strings.Contains(empty, "observed: no requests reported by the clients over the last 30s") {
		t.Error("no note for an upstream whose clients reported nothing yet")
	}
}
