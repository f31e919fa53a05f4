package browser

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/weights"
)

// trouble is what the map shows a person scanning for trouble, read back
// from the DOM with the computed style of each mark: the key, and per
// upstream its badges and its nodes' words and colours.
type trouble struct {
	Reasons   []keyEntry        `json:"reasons"`
	Spills    []keyEntry        `json:"spills"`
	DownKey   string            `json:"downKey"`
	Overflow  []string          `json:"overflow"`
	Upstreams []troubleUpstream `json:"upstreams"`
}

type keyEntry struct {
	Name   string `json:"name"`
	Signal string `json:"signal"`
	Class  string `json:"class"`
	Text   string `json:"text"`
	// Style is the swatch's computed fill, stroke and dash; Stroke is the
	// band's computed stroke colour (spill keys).
	Style  string `json:"style"`
	Stroke string `json:"stroke"`
}

type troubleUpstream struct {
	Name       string            `json:"name"`
	Spill      string            `json:"spill"`
	Severity   string            `json:"severity"`
	Down       string            `json:"down"`
	Badges     []badge           `json:"badges"`
	Notes      []string          `json:"notes"`
	Priorities []troublePriority `json:"priorities"`
}

type badge struct {
	Class string `json:"class"`
	Text  string `json:"text"`
}

// node is what every drawn box shows: its class, its first and second
// lines as drawn (not the hover title), and its computed style.
type node struct {
	Class string `json:"class"`
	Line  string `json:"line"`
	Sub   string `json:"sub"`
	// Style is the box's computed fill, stroke, stroke width and dash;
	// Band the computed stroke colour of the band into it.
	Style string `json:"style"`
	Band  string `json:"band"`
	// Flag and Tag are the computed fill of the DOWN word and of the
	// reason or PANIC word, "" when the box has none.
	Flag string `json:"flag"`
	Tag  string `json:"tag"`
}

type troublePriority struct {
	node
	Priority           string            `json:"priority"`
	Down               string            `json:"down"`
	ConfiguredPriority string            `json:"configuredPriority"`
	Rank               string            `json:"rank"`
	Proximity          string            `json:"proximity"`
	Localities         []troubleLocality `json:"localities"`
}

type troubleLocality struct {
	node
	Zone         string            `json:"zone"`
	Down         string            `json:"down"`
	Weight       string            `json:"weight"`
	Availability string            `json:"availability"`
	Endpoints    []troubleEndpoint `json:"endpoints"`
}

type troubleEndpoint struct {
	node
	Address string `json:"address"`
	Reason  string `json:"reason"`
	Signal  string `json:"signal"`
}

// readTrouble reads the key and the diagrams; every text line whose
// drawn width passes its box's right edge is listed in overflow.
const readTrouble = `(() => {
  const m = document.getElementById('map');
  if (!m) { return null; }
  const overflow = [];
  const style = el => { if (!el) { return ''; } const s = getComputedStyle(el);
    return [s.fill, s.stroke, s.strokeWidth, s.strokeDasharray].join(' | '); };
  const fill = el => el ? getComputedStyle(el).fill : '';
  const line = t => t ? [...t.childNodes].filter(n => n.nodeName !== 'title').map(n => n.textContent).join('') : '';
  const node = g => {
    const box = g.querySelector(':scope > rect.box');
    const first = g.querySelector(':scope > text:not(.sub)'), sub = g.querySelector(':scope > text.sub');
    const right = box.x.baseVal.value + box.width.baseVal.value;
    for (const t of [first, sub]) {
      if (t && t.getBBox().x + t.getBBox().width > right) { overflow.push(line(t)); }
    }
    const band = g.querySelector(':scope > path.band');
    return {class: g.getAttribute('class'), line: line(first), sub: line(sub), style: style(box),
      band: band ? getComputedStyle(band).stroke : '',
      flag: fill(first && first.querySelector('.flag')), tag: fill(first && first.querySelector('.tag'))};
  };
  const kids = (g, cls) => [...g.querySelectorAll(':scope > g.' + cls)];
  const upstreams = [...m.querySelectorAll('section.upstream')].map(s => ({
    name: s.dataset.name, spill: s.dataset.spill, severity: s.dataset.spillSeverity, down: s.dataset.down,
    badges: [...s.querySelectorAll('h2 .badge')].map(b => ({class: b.getAttribute('class'), text: b.textContent})),
    notes: [...s.querySelectorAll('p.note')].map(p => p.textContent),
    priorities: kids(s.querySelector('svg'), 'priority').map(p => Object.assign(node(p), {
      priority: p.dataset.priority, down: p.dataset.down, configuredPriority: p.dataset.configuredPriority || '',
      rank: p.dataset.rank || '', proximity: p.dataset.proximity || '',
      localities: kids(p, 'locality').map(l => Object.assign(node(l), {
        zone: l.dataset.zone, down: l.dataset.down, weight: l.dataset.weight, availability: l.dataset.availability,
        endpoints: kids(l, 'endpoint').map(e => Object.assign(node(e), {
          address: e.dataset.address, reason: e.dataset.reason, signal: e.dataset.signal}))}))}))}));
  return {
    reasons: [...document.querySelectorAll('.legend .key[data-reason]')].map(k => ({
      name: k.dataset.reason, signal: k.dataset.signal, class: k.getAttribute('class'), text: k.textContent.trim(),
      style: style(k.querySelector('.swatch'))})),
    spills: [...document.querySelectorAll('.legend .key[data-severity]')].map(k => ({
      name: k.dataset.severity, class: k.getAttribute('class'), text: k.textContent.trim(),
      stroke: getComputedStyle(k.querySelector('.band')).stroke})),
    downKey: style(document.querySelector('.legend .key.down .swatch')),
    overflow, upstreams};
})()`

func readTroubleNow(t *testing.T, ctx context.Context) trouble {
	t.Helper()
	tr := run(t, ctx, chromedp.Evaluate[*trouble](readTrouble))
	if tr == nil {
		t.Fatal("no map on the page")
	}
	if len(tr.Overflow) > 0 {
		t.Errorf("text drawn past its box: %q", tr.Overflow)
	}
	return *tr
}

// localities is every drawn locality, priority by priority.
func (u troubleUpstream) localities() []troubleLocality {
	var out []troubleLocality
	for _, p := range u.Priorities {
		out = append(out, p.Localities...)
	}
	return out
}

// locality finds a drawn locality by zone.
func (u troubleUpstream) locality(t *testing.T, zone string) troubleLocality {
	t.Helper()
	ls := u.localities()
	i := slices.IndexFunc(ls, func(l troubleLocality) bool { return l.Zone == zone })
	if i < 0 {
		t.Fatalf("no locality %s drawn", zone)
	}
	return ls[i]
}

// endpoint finds a drawn endpoint by address.
func (u troubleUpstream) endpoint(t *testing.T, addr string) troubleEndpoint {
	t.Helper()
	for _, l := range u.localities() {
		if i := slices.IndexFunc(l.Endpoints, func(e troubleEndpoint) bool { return e.Address == addr }); i >= 0 {
			return l.Endpoints[i]
		}
	}
	t.Fatalf("no endpoint %s drawn", addr)
	return troubleEndpoint{}
}

func badgeTexts(u troubleUpstream) []string {
	var out []string
	for _, b := range u.Badges {
		out = append(out, b.Text)
	}
	return out
}

// checkSecondLines: every locality shows its weight and availability, as
// explain computes them, on a line of its own (not only on hover).
func checkSecondLines(t *testing.T, step string, want explain.Upstream, got troubleUpstream) {
	t.Helper()
	for _, p := range want.Split.Priorities {
		for _, l := range p.Localities {
			d := got.locality(t, l.Zone)
			sub := fmt.Sprintf("weight %d · avail %s (%d/%d)", l.LocalityWeight, explain.Percent(l.Availability), l.SelectableWeight, l.ConfiguredWeight)
			if d.Sub != sub || d.Weight != num(l.LocalityWeight) || d.Availability != num(l.Availability) {
				t.Errorf("%s: %s shows %q (weight %s, availability %s), want %q", step, l.Zone, d.Sub, d.Weight, d.Availability, sub)
			}
		}
	}
}

// spillOf is the traffic beyond the first priority of explain's split.
func spillOf(s explain.Split) uint64 {
	var n uint64
	for _, p := range s.Priorities[1:] {
		n += p.Load
	}
	return n
}

// The map as a person scanning for trouble reads it, in a real browser:
// every locality's weight and availability printed; a locality with no
// eligible endpoint marked DOWN in words and colour; each reason an
// endpoint is not eligible in its own colour, the key's, with an entry per
// reason of the weights classification; the spill graded at its
// thresholds; and under ?from= each effective priority labelled with its
// configured priority and rank. A screenshot of each.
func TestTrafficMapMarksTrouble(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	src, err := os.ReadFile("../../examples/checkout.yaml")
	if err != nil {
		t.Fatal(err)
	}
	example := string(src)
	dir := t.TempDir()

	// Healthy: no probe verdicts, nothing draining.
	healthy := replaceOnce(t, example, "status:\n  health:\n  - {address: 10.1.1.11, port: 9090, probe: Unhealthy}\n", "")
	healthy = replaceOnce(t, healthy, ", adminState: Draining", "")
	healthy = replaceOnce(t, healthy, "status:\n  health:\n  - {address: 10.1.3.10, port: 9090, probe: Healthy}\n  - {address: 10.1.3.11, port: 9090, probe: Unhealthy}\n", "")
	writeManifest(t, dir, healthy)
	cp := serve(t, dir)
	run(t, ctx, chromedp.Navigate(cp.adminURL+"/map"))
	want := explainJSON(t, dir)
	waitDrawn(t, ctx, want, "")
	tr := readTroubleNow(t, ctx)
	u := tr.Upstreams[0]
	if u.Severity != "none" || u.Spill != "0" || u.Down != "0" || len(u.Badges) != 0 {
		t.Errorf("healthy: spill %s (%s), down %s, badges %v; want none of them", u.Spill, u.Severity, u.Down, badgeTexts(u))
	}
	checkSecondLines(t, "healthy", want.Upstreams[0], u)
	healthyBox := u.locality(t, "eu-west-1a").Style
	for _, p := range u.Priorities {
		if strings.Contains(p.Class, "down") || strings.Contains(p.Line, "DOWN") {
			t.Errorf("healthy: priority %s drawn down: %q %q", p.Priority, p.Class, p.Line)
		}
		for _, l := range p.Localities {
			if l.Down != "false" || strings.Contains(l.Line, "DOWN") || l.Style != healthyBox {
				t.Errorf("healthy: %s down %s, line %q, style %s", l.Zone, l.Down, l.Line, l.Style)
			}
		}
	}
	checkKey(t, tr)
	screenshot(t, ctx, "map-healthy.png")

	// A zone down: every endpoint of eu-west-1a out, for three reasons.
	// Priority 0 keeps 140 % × 3/10 = 42 %: 58 % spills, severe.
	zoneDown := replaceOnce(t, example, "  - {address: 10.1.1.11, port: 9090, probe: Unhealthy}\n",
		"  - {address: 10.1.1.10, port: 9090, probe: Unhealthy}\n  - {address: 10.1.1.11, port: 9090, probe: Unhealthy}\n"+
			"  - {address: 10.1.1.12, port: 9090, circuit: Open}\n  - {address: 10.1.1.13, port: 9090, outlierEjected: true}\n")
	writeManifest(t, dir, zoneDown)
	want = explainJSON(t, dir)
	if s := spillOf(want.Upstreams[0].Split); s != 580_000 {
		t.Fatalf("a zone down was meant to spill 58 %%: %d", s)
	}
	waitDrawn(t, ctx, want, "")
	tr = readTroubleNow(t, ctx)
	u = tr.Upstreams[0]
	down := u.locality(t, "eu-west-1a")
	if down.Down != "true" || !strings.Contains(down.Class, " down") || !strings.HasPrefix(down.Line, "DOWN eu-west/eu-west-1a") ||
		down.Style == healthyBox || down.Style != tr.DownKey || down.Flag == "" || down.Flag == u.locality(t, "eu-west-1b").Flag {
		t.Errorf("eu-west-1a down: data-down %s, class %q, line %q, style %s (healthy %s, key %s), DOWN drawn in %q",
			down.Down, down.Class, down.Line, down.Style, healthyBox, tr.DownKey, down.Flag)
	}
	if b := u.locality(t, "eu-west-1b"); b.Down != "false" || strings.Contains(b.Line, "DOWN") || b.Style != healthyBox {
		t.Errorf("eu-west-1b is not down: data-down %s, line %q, style %s", b.Down, b.Line, b.Style)
	}
	if got := badgeTexts(u); !slices.Equal(got, []string{"1 locality down", "spill 58.0000% (severe)"}) || u.Severity != "severe" || u.Spill != "580000" {
		t.Errorf("zone down: badges %q, spill %s (%s)", got, u.Spill, u.Severity)
	}
	checkSecondLines(t, "zone down", want.Upstreams[0], u)
	for addr, reason := range map[string]string{"10.1.1.10": "ProbeUnhealthy", "10.1.1.12": "CircuitOpen", "10.1.1.13": "OutlierEjected"} {
		checkReason(t, tr, u.endpoint(t, addr), reason)
	}
	screenshot(t, ctx, "map-zone-down.png")

	// A circuit open, an outlier and an Unavailable endpoint, each in a
	// locality that keeps others: none is down, each has its own colour.
	reasons := replaceOnce(t, example, "  - {address: 10.1.2.12, port: 9090, adminState: Draining}\n",
		"  - {address: 10.1.2.12, port: 9090, adminState: Draining}\nstatus:\n  health:\n  - {address: 10.1.2.10, port: 9090, circuit: Open}\n")
	reasons = replaceOnce(t, reasons, "  - {address: 10.2.1.12, port: 9090}\n", "  - {address: 10.2.1.12, port: 9090, adminState: Unavailable}\n")
	reasons = strings.TrimRight(reasons, "\n") + "\nstatus:\n  health:\n  - {address: 10.2.2.10, port: 9090, outlierEjected: true}\n"
	writeManifest(t, dir, reasons)
	want = explainJSON(t, dir)
	waitDrawn(t, ctx, want, "")
	tr = readTroubleNow(t, ctx)
	u = tr.Upstreams[0]
	if u.Down != "0" {
		t.Errorf("one endpoint out per locality: %s localities drawn down", u.Down)
	}
	drawn := map[string]troubleEndpoint{}
	for addr, reason := range map[string]string{"10.1.2.10": "CircuitOpen", "10.2.2.10": "OutlierEjected", "10.2.1.12": "Unavailable",
		"10.1.2.12": "Draining", "10.1.1.11": "ProbeUnhealthy"} {
		e := u.endpoint(t, addr)
		checkReason(t, tr, e, reason)
		drawn[reason] = e
	}
	for a, ea := range drawn {
		for b, eb := range drawn {
			if a < b && (ea.Style == eb.Style || ea.Tag == eb.Tag) {
				t.Errorf("%s and %s are drawn alike: box %s, word %s", a, b, ea.Style, ea.Tag)
			}
		}
	}
	if e := u.endpoint(t, "10.1.2.11"); strings.Contains(e.Class, "ineligible") || e.Style == drawn["CircuitOpen"].Style {
		t.Errorf("an eligible endpoint is drawn %q, %s", e.Class, e.Style)
	}
	checkSecondLines(t, "reasons", want.Upstreams[0], u)
	screenshot(t, ctx, "map-circuit-open.png")

	// Drained: both endpoints of eu-west-1c Draining. Draining capacity is
	// not configured: the locality has no eligible capacity and is down.
	drained := replaceOnce(t, example, "  - {address: 10.1.3.10, port: 9090}\n  - {address: 10.1.3.11, port: 9090}\n",
		"  - {address: 10.1.3.10, port: 9090, adminState: Draining}\n  - {address: 10.1.3.11, port: 9090, adminState: Draining}\n")
	writeManifest(t, dir, drained)
	want = explainJSON(t, dir)
	waitDrawn(t, ctx, want, "")
	tr = readTroubleNow(t, ctx)
	u = tr.Upstreams[0]
	c := u.locality(t, "eu-west-1c")
	if c.Down != "true" || !strings.HasPrefix(c.Line, "DOWN ") || c.Sub != "weight 1 · avail 0.0000% (0/0)" {
		t.Errorf("eu-west-1c drained: data-down %s, line %q, second line %q", c.Down, c.Line, c.Sub)
	}
	for _, addr := range []string{"10.1.2.12", "10.1.3.10", "10.1.3.11"} {
		checkReason(t, tr, u.endpoint(t, addr), "Draining")
	}
	checkSecondLines(t, "drained", want.Upstreams[0], u)
	screenshot(t, ctx, "map-drained.png")

	// Spill grades at their thresholds, under a factor of 125 %: the
	// headroom is 1 − 100/125 = 20 % exactly.
	writeManifest(t, dir, gradesManifest())
	want = explainJSON(t, dir)
	waitDrawn(t, ctx, want, "")
	tr = readTroubleNow(t, ctx)
	grades := map[string]struct {
		spill    uint64
		severity string
	}{
		"none": {0, "none"}, "at-headroom": {200_000, "headroom"}, "over-headroom": {200_001, "degraded"},
		"at-half": {500_000, "degraded"}, "over-half": {500_001, "severe"},
	}
	if len(tr.Upstreams) != len(grades) {
		t.Fatalf("%d upstreams drawn, want %d", len(tr.Upstreams), len(grades))
	}
	keyStroke := map[string]string{}
	for _, k := range tr.Spills {
		keyStroke[k.Name] = k.Stroke
	}
	for i, g := range tr.Upstreams {
		w, ok := grades[g.Name]
		if !ok || want.Upstreams[i].Name != g.Name {
			t.Fatalf("upstream %s drawn where explain has %s", g.Name, want.Upstreams[i].Name)
		}
		if s := spillOf(want.Upstreams[i].Split); s != w.spill {
			t.Fatalf("%s: explain spills %d, the manifest was meant to spill %d", g.Name, s, w.spill)
		}
		if g.Spill != num(w.spill) || g.Severity != w.severity {
			t.Errorf("%s: drawn spill %s (%s), want %d (%s)", g.Name, g.Spill, g.Severity, w.spill, w.severity)
		}
		if w.spill == 0 {
			if len(g.Badges) != 0 {
				t.Errorf("%s: badges %v", g.Name, badgeTexts(g))
			}
			continue
		}
		text := fmt.Sprintf("spill %s (%s)", explain.Percent(w.spill), w.severity)
		if len(g.Badges) != 1 || g.Badges[0].Text != text || g.Badges[0].Class != "badge spill "+w.severity {
			t.Errorf("%s: badges %+v, want %q", g.Name, g.Badges, text)
		}
		if p := g.Priorities[1]; !strings.Contains(p.Class, "spill "+w.severity) || p.Band != keyStroke[w.severity] {
			t.Errorf("%s: priority 1 class %q, band %s, want the %s key's %s", g.Name, p.Class, p.Band, w.severity, keyStroke[w.severity])
		}
		if !slices.ContainsFunc(g.Notes, func(n string) bool {
			return strings.HasPrefix(n, text[:strings.Index(text, " (")]+" beyond priority 0 is "+w.severity+": up to 20.0000% (1 − 100/125) is headroom")
		}) {
			t.Errorf("%s: no note on the grade and its thresholds: %q", g.Name, g.Notes)
		}
	}
	screenshot(t, ctx, "map-spill-grades.png")

	// Clients of eu-west-1a under PreferSameZone: each effective priority
	// is labelled with the configured priority and rank it stands for.
	affinity := replaceOnce(t, example, "  panicThreshold: 50\n", "  panicThreshold: 50\n  localityAffinity: {mode: PreferSameZone}\n")
	writeManifest(t, dir, affinity)
	const from = "eu-west/eu-west-1a"
	want = explainJSON(t, dir, "--from", from)
	run(t, ctx, chromedp.Navigate(cp.adminURL+"/map?from="+from))
	waitDrawn(t, ctx, want, from)
	tr = readTroubleNow(t, ctx)
	u = tr.Upstreams[0]
	class := want.Upstreams[0].Class
	if class == nil || class.Split == nil || len(class.Effective) != len(u.Priorities) || len(u.Priorities) != 3 {
		t.Fatalf("from %s: explain's class %+v, %d priorities drawn", from, class, len(u.Priorities))
	}
	proximity := map[uint32]string{}
	for _, r := range class.Ranks {
		proximity[r.Rank] = r.Proximity
	}
	for i, e := range class.Effective {
		p := u.Priorities[i]
		label := fmt.Sprintf("eff. priority %d ", e.EffectivePriority)
		sub := fmt.Sprintf("configured %d · rank %d", e.ConfiguredPriority, e.Rank)
		if p.Priority != num(uint64(e.EffectivePriority)) || !strings.HasPrefix(p.Line, label) || p.Sub != sub ||
			p.ConfiguredPriority != num(uint64(e.ConfiguredPriority)) || p.Rank != num(uint64(e.Rank)) || p.Proximity != proximity[e.Rank] {
			t.Errorf("from %s: priority %s drawn %q / %q (configured %s, rank %s %s), want %q / %q (%s)", from, p.Priority, p.Line, p.Sub,
				p.ConfiguredPriority, p.Rank, p.Proximity, label, sub, proximity[e.Rank])
		}
	}
	// eu-west-1a keeps 140 % × 4/6: 6.6667 % spills to its region, headroom
	if got := badgeTexts(u); !slices.Equal(got, []string{"clients in " + from, "spill 6.6667% (headroom)"}) {
		t.Errorf("from %s: badges %q", from, got)
	}
	if !slices.Contains(u.Notes, "effective priority = (configured priority, rank); ranks: 0 SameZone, 1 SameRegion, 2 OtherRegion") {
		t.Errorf("from %s: no note on the ranks: %q", from, u.Notes)
	}
	screenshot(t, ctx, "map-from-eu-west-1a.png")
}

// checkKey: the key has an entry per reason of the weights classification
// that is not Eligible, in its order, each with its signal, its class and
// a swatch unlike the others'; and the three spill grades.
func checkKey(t *testing.T, tr trouble) {
	t.Helper()
	var names []string
	for _, r := range weights.Reasons() {
		if !r.Eligible() {
			names = append(names, r.String())
		}
	}
	var got []string
	styles := map[string]string{}
	for _, k := range tr.Reasons {
		got = append(got, k.Name)
		if k.Signal == "" || !strings.Contains(k.Class, "reason-") || !strings.Contains(k.Text, k.Name) || !strings.Contains(k.Text, "("+k.Signal+")") {
			t.Errorf("key entry %+v", k)
		}
		for other, s := range styles {
			if s == k.Style {
				t.Errorf("the key draws %s and %s alike: %s", other, k.Name, s)
			}
		}
		styles[k.Name] = k.Style
	}
	if !slices.Equal(got, names) {
		t.Errorf("the key lists reasons %v, the classification %v", got, names)
	}
	var grades []string
	for _, k := range tr.Spills {
		grades = append(grades, k.Name)
	}
	if !slices.Equal(grades, []string{"headroom", "degraded", "severe"}) || tr.Spills[0].Stroke == tr.Spills[1].Stroke || tr.Spills[1].Stroke == tr.Spills[2].Stroke {
		t.Errorf("spill key %+v", tr.Spills)
	}
}

// checkReason: the endpoint is drawn with its reason's word and class, and
// its box looks like the reason's swatch in the key.
func checkReason(t *testing.T, tr trouble, e troubleEndpoint, reason string) {
	t.Helper()
	i := slices.IndexFunc(tr.Reasons, func(k keyEntry) bool { return k.Name == reason })
	if i < 0 {
		t.Fatalf("no key entry for %s", reason)
	}
	k := tr.Reasons[i]
	cls := strings.Fields(k.Class)[1] // "key reason-…"
	if e.Reason != reason || e.Signal != k.Signal || !strings.Contains(e.Line, " "+reason+" ") ||
		!strings.Contains(e.Class, " "+cls+" signal-"+k.Signal) || e.Style != k.Style || e.Tag == "" {
		t.Errorf("%s: reason %s signal %s, line %q, class %q, box %s, word in %q; want %s (%s), class %s, the key's box %s",
			e.Address, e.Reason, e.Signal, e.Line, e.Class, e.Style, e.Tag, reason, k.Signal, cls, k.Style)
	}
}

// gradesManifest is five upstreams at overprovisioning factor 125 %, each
// with a priority-0 zone of a healthy and an unhealthy endpoint and a
// healthy priority-1 zone. Priority 0 keeps ⌊125 % × healthy / (healthy +
// unhealthy)⌋ millionths; the rest spills: 0, 200 000 (= the headroom),
// 200 001, 500 000 and 500 001.
func gradesManifest() string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Namespace\nmetadata: {name: grades}\n")
	for _, u := range []struct {
		name            string
		healthy, unwell uint64
	}{
		{"none", 4, 1}, {"at-headroom", 16, 9}, {"over-headroom", 1_599_999, 900_001},
		{"at-half", 2, 3}, {"over-half", 999_999, 1_500_001},
	} {
		fmt.Fprintf(&b, `---
apiVersion: poise.dev/v1alpha1
kind: Upstream
metadata: {name: %[1]s, namespace: grades}
spec: {protocol: GRPC, overprovisioningFactor: 125, panicThreshold: 50}
---
apiVersion: poise.dev/v1alpha1
kind: Locality
metadata: {name: %[1]s-a, namespace: grades}
spec: {upstream: %[1]s, priority: 0, region: r, zone: a, weight: 1}
---
apiVersion: poise.dev/v1alpha1
kind: Locality
metadata: {name: %[1]s-b, namespace: grades}
spec: {upstream: %[1]s, priority: 1, region: r, zone: b, weight: 1}
---
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: %[1]s-a, namespace: grades}
spec:
  upstream: %[1]s
  locality: {region: r, zone: a}
  endpoints:
  - {address: 10.0.0.1, port: 80, weight: %[2]d}
  - {address: 10.0.0.2, port: 80, weight: %[3]d}
status:
  health:
  - {address: 10.0.0.2, port: 80, probe: Unhealthy}
---
apiVersion: poise.dev/v1alpha1
kind: EndpointSet
metadata: {name: %[1]s-b, namespace: grades}
spec:
  upstream: %[1]s
  locality: {region: r, zone: b}
  endpoints:
  - {address: 10.0.1.1, port: 80}
`, u.name, u.healthy, u.unwell)
	}
	return b.String()
}
