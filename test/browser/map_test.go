package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/testkit"
)

// page is what the traffic map shows, read back from the DOM: every figure
// from the data attributes (millionths, exact) and the printed percentage.
type page struct {
	Revision  string          `json:"revision"`
	From      string          `json:"from"`
	Zones     []string        `json:"zones"`
	More      int             `json:"more"`
	Marker    bool            `json:"marker"`
	Upstreams []drawnUpstream `json:"upstreams"`
}

type drawnUpstream struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Split      string `json:"split"`
	Dropped    string `json:"dropped"`
	TotalPanic string `json:"totalPanic"`
	// Drop is the traffic of the dropped node, "" when none is drawn.
	Drop       string          `json:"drop"`
	Badges     []string        `json:"badges"`
	Priorities []drawnPriority `json:"priorities"`
}

type drawnPriority struct {
	Priority   string          `json:"priority"`
	Load       string          `json:"load"`
	InPanic    string          `json:"inPanic"`
	Dropped    string          `json:"dropped"`
	Figure     string          `json:"figure"`
	Class      string          `json:"class"`
	BandStroke string          `json:"bandStroke"`
	Localities []drawnLocality `json:"localities"`
}

type drawnLocality struct {
	Region    string          `json:"region"`
	Zone      string          `json:"zone"`
	SubZone   string          `json:"subZone"`
	Traffic   string          `json:"traffic"`
	Figure    string          `json:"figure"`
	Endpoints []drawnEndpoint `json:"endpoints"`
}

type drawnEndpoint struct {
	Address string `json:"address"`
	Port    string `json:"port"`
	Share   string `json:"share"`
	Reason  string `json:"reason"`
	Figure  string `json:"figure"`
	// Observed and ObservedRequests are the share of the requests the
	// clients reported and their number, where they report their load;
	// Sub is the endpoint's second line. Not figures of explain's.
	Observed         string `json:"observed"`
	ObservedRequests string `json:"observedRequests"`
	Sub              string `json:"sub"`
}

// readPage walks the drawn diagram: sections are upstreams, and the nested
// groups of each SVG are priority → locality → endpoint.
const readPage = `(() => {
  // Between two pages, or a page not yet laid out (a screenshot of it
  // would have no width): nothing to read yet.
  if (document.readyState !== 'complete') { return null; }
  const m = document.getElementById('map');
  if (!m) { return null; }
  const fig = g => { const f = g.querySelector(':scope > text > .fig'); return f ? f.textContent : ''; };
  const kids = (g, cls) => [...g.querySelectorAll(':scope > g.' + cls)];
  return {
    revision: m.dataset.revision, from: m.dataset.from,
    zones: [...m.querySelectorAll('#from option')].map(o => o.value).filter(v => v),
    more: m.querySelectorAll('g.more:not(.drop)').length,
    marker: window.poiseTestMarker === true,
    upstreams: [...m.querySelectorAll('section.upstream')].map(s => ({
      namespace: s.dataset.namespace, name: s.dataset.name, split: s.dataset.split,
      dropped: s.dataset.dropped, totalPanic: s.dataset.totalPanic,
      drop: (s.querySelector('svg > g.more.drop') || {dataset: {traffic: ''}}).dataset.traffic,
      badges: [...s.querySelectorAll('h2 .badge')].map(b => b.textContent),
      priorities: kids(s.querySelector('svg'), 'priority').map(p => ({
        priority: p.dataset.priority, load: p.dataset.load, inPanic: p.dataset.inPanic, dropped: p.dataset.dropped,
        figure: fig(p), class: p.getAttribute('class'),
        bandStroke: getComputedStyle(p.querySelector(':scope > path.band')).stroke,
        localities: kids(p, 'locality').map(l => ({
          region: l.dataset.region, zone: l.dataset.zone, subZone: l.dataset.subzone,
          traffic: l.dataset.traffic, figure: fig(l),
          endpoints: kids(l, 'endpoint').map(e => ({
            address: e.dataset.address, port: e.dataset.port, share: e.dataset.share,
            reason: e.dataset.reason, figure: fig(e),
            observed: e.dataset.observed || '', observedRequests: e.dataset.observedRequests || '',
            sub: (e.querySelector(':scope > text.sub') || {textContent: ''}).textContent}))}))}))}))
  };
})()`

// figures is what explain says the page must draw: each upstream's own
// split, or its class split when the report is for a client locality and
// the class has one. Class, badges and colours are not figures: zeroed.
func figures(rep explain.Report) []drawnUpstream {
	out := []drawnUpstream{}
	for _, u := range rep.Upstreams {
		split, kind := u.Split, "none"
		if u.Class != nil && u.Class.Split != nil {
			split, kind = *u.Class.Split, "class"
		}
		du := drawnUpstream{Namespace: u.Namespace, Name: u.Name, Split: kind, Dropped: num(split.DroppedMillionths),
			TotalPanic: strconv.FormatBool(split.TotalPanic), Priorities: []drawnPriority{}}
		if split.DroppedMillionths > 0 {
			du.Drop = num(split.DroppedMillionths)
		}
		for _, p := range split.Priorities {
			dp := drawnPriority{Priority: num(uint64(p.Priority)), Load: num(p.Load), InPanic: strconv.FormatBool(p.InPanic),
				Dropped: num(p.DroppedMillionths), Figure: explain.Percent(p.Load), Localities: []drawnLocality{}}
			for _, l := range p.Localities {
				dl := drawnLocality{Region: l.Region, Zone: l.Zone, SubZone: l.SubZone, Traffic: num(l.Traffic),
					Figure: explain.Percent(l.Traffic), Endpoints: []drawnEndpoint{}}
				for _, e := range l.Endpoints {
					dl.Endpoints = append(dl.Endpoints, drawnEndpoint{Address: e.Address, Port: num(uint64(e.Port)),
						Share: num(e.Share), Reason: e.Reason, Figure: explain.Percent(e.Share)})
				}
				dp.Localities = append(dp.Localities, dl)
			}
			du.Priorities = append(du.Priorities, dp)
		}
		out = append(out, du)
	}
	return out
}

func num(n uint64) string { return strconv.FormatUint(n, 10) }

// onlyFigures drops what figures does not compute.
func onlyFigures(us []drawnUpstream) []drawnUpstream {
	out := slices.Clone(us)
	for i := range out {
		out[i].Badges = nil
		out[i].Priorities = slices.Clone(out[i].Priorities)
		for j := range out[i].Priorities {
			p := &out[i].Priorities[j]
			p.Class, p.BandStroke = "", ""
			p.Localities = slices.Clone(p.Localities)
			for k := range p.Localities {
				l := &p.Localities[k]
				l.Endpoints = slices.Clone(l.Endpoints)
				for e := range l.Endpoints {
					l.Endpoints[e].Observed, l.Endpoints[e].ObservedRequests, l.Endpoints[e].Sub = "", "", ""
				}
			}
		}
	}
	return out
}

// waitDrawn reads the page until it draws the figures of want for the
// clients of from ("" for none), with no help from the test: the page's
// own script must fetch the change. A read may fail while the page's
// script navigates (the zone selector); it is tried again. It fails with
// the last page read.
func waitDrawn(t *testing.T, ctx context.Context, want explain.Report, from string) page {
	t.Helper()
	wantUps := figures(want)
	var last page
	var lastErr error
	testkit.EventuallyEvery(t, 20*time.Second, 100*time.Millisecond, "the page draws explain's figures", func() (bool, string) {
		p, err := tryRead(ctx)
		if lastErr = err; err == nil && p != nil {
			if last = *p; last.From == from && reflect.DeepEqual(onlyFigures(last.Upstreams), wantUps) {
				return true, ""
			}
		}
		got, _ := json.MarshalIndent(onlyFigures(last.Upstreams), "", "  ")
		exp, _ := json.MarshalIndent(wantUps, "", "  ")
		return false, fmt.Sprintf("from %q, want %q; last error %v\ndrawn:\n%s\nexplain:\n%s", last.From, from, lastErr, got, exp)
	})
	return last
}

// tryRead reads the page once; nil while no map is loaded.
func tryRead(ctx context.Context) (*page, error) {
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(tctx, chromedp.Evaluate[*page](readPage))
}

// screenshot saves a full-page PNG in the test's artifact directory, which
// `go test -artifacts -outputdir DIR` (as make test runs it) keeps.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	// A page that was read a moment ago can still be between layouts; the
	// browser then refuses with "0 width". Only that is retried, briefly.
	testkit.EventuallyEvery(t, 5*time.Second, 100*time.Millisecond, "screenshot "+name, func() (bool, string) {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		png, err = chromedp.Run(tctx, chromedp.FullScreenshot(100))
		if err != nil && !strings.Contains(err.Error(), "0 width") {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		return err == nil, fmt.Sprint(err)
	})
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", path, len(png))
}

func writeManifest(t *testing.T, dir, text string) {
	t.Helper()
	// Write then rename, so the file source never reads half a file.
	tmp := filepath.Join(dir, ".checkout.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "checkout.yaml")); err != nil {
		t.Fatal(err)
	}
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if strings.Count(s, old) != 1 {
		t.Fatalf("%q occurs %d times in the manifest, want once", old, strings.Count(s, old))
	}
	return strings.Replace(s, old, new, 1)
}

// The traffic map of the checkout example, in a real browser, draws to the
// millionth what `controlplane explain -o json` computes; when the manifest
// changes it redraws by itself (the test never reloads), highlighting the
// spill and the panic; with localityAffinity it offers the client zones and
// draws the class split of the zone picked.
func TestTrafficMapDrawsExplainLive(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	src, err := os.ReadFile("../../examples/checkout.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	manifest := string(src)
	writeManifest(t, dir, manifest)
	cp := serve(t, dir)

	run(t, ctx, chromedp.Navigate(cp.adminURL+"/map"))
	p := waitDrawn(t, ctx, explainJSON(t, dir), "")
	if rev := cp.liveRevision(t); p.Revision != num(rev) {
		t.Errorf("the page draws revision %s, /debug/explain serves %d", p.Revision, rev)
	}
	if p.More != 0 || len(p.Zones) != 0 {
		t.Errorf("checkout: %d rows summed as more, zones %v; want every node drawn and no selector", p.More, p.Zones)
	}
	// Priority 1 carries 2 %: the example already spills, without panic.
	pr := p.Upstreams[0].Priorities
	if !slices.Equal(p.Upstreams[0].Badges, []string{"spill 2.0000% (headroom)"}) || !strings.Contains(pr[1].Class, "spill") || strings.Contains(pr[0].Class, "spill") {
		t.Errorf("checkout: badges %v, priority classes %q, %q; want a spill at priority 1 only", p.Upstreams[0].Badges, pr[0].Class, pr[1].Class)
	}
	if pr[0].BandStroke == pr[1].BandStroke {
		t.Errorf("the spill band is drawn as the others: %s", pr[1].BandStroke)
	}
	screenshot(t, ctx, "checkout.png")

	// eu-west-1a loses its three healthy endpoints and us-east keeps one
	// of seven: both priorities fall below the 50 % panic threshold, the
	// normalized total availability to 62 % (total panic), and 41 % of the
	// traffic spills to priority 1.
	run(t, ctx, chromedp.Evaluate[bool](`window.poiseTestMarker = true`))
	manifest = replaceOnce(t, manifest, "  - {address: 10.1.1.11, port: 9090, probe: Unhealthy}\n",
		"  - {address: 10.1.1.10, port: 9090, probe: Unhealthy}\n  - {address: 10.1.1.11, port: 9090, probe: Unhealthy}\n"+
			"  - {address: 10.1.1.12, port: 9090, probe: Unhealthy}\n  - {address: 10.1.1.13, port: 9090, probe: Unhealthy}\n")
	manifest = replaceOnce(t, manifest, "  - {address: 10.2.1.12, port: 9090}\n",
		"  - {address: 10.2.1.12, port: 9090}\nstatus:\n  health:\n  - {address: 10.2.1.10, port: 9090, probe: Unhealthy}\n"+
			"  - {address: 10.2.1.11, port: 9090, probe: Unhealthy}\n  - {address: 10.2.1.12, port: 9090, probe: Unhealthy}\n")
	manifest = strings.TrimRight(manifest, "\n") + "\nstatus:\n  health:\n  - {address: 10.2.2.11, port: 9090, probe: Unhealthy}\n"
	writeManifest(t, dir, manifest)
	want := explainJSON(t, dir)
	if w := want.Upstreams[0]; !w.TotalPanic || !w.Priorities[0].InPanic || w.Priorities[1].Load == 0 {
		t.Fatalf("the change was meant to spill in total panic: %+v", w.Split)
	}
	p = waitDrawn(t, ctx, want, "")
	if !p.Marker {
		t.Error("the page was reloaded; it must update in place")
	}
	pr = p.Upstreams[0].Priorities
	badges := []string{"2 localities down", "spill " + explain.Percent(spillOf(want.Upstreams[0].Split)) + " (degraded)", "total panic"}
	if !slices.Equal(p.Upstreams[0].Badges, badges) || !strings.Contains(pr[0].Class, "panic") ||
		!strings.Contains(pr[1].Class, "spill") || !strings.Contains(pr[1].Class, "panic") {
		t.Errorf("after the change: badges %v, priority classes %q, %q; want badges %v, panic at both and spill at 1", p.Upstreams[0].Badges, pr[0].Class, pr[1].Class, badges)
	}
	screenshot(t, ctx, "checkout-spill-panic.png")

	// FailClosed: in total panic the upstream drops all its traffic.
	failClosed := replaceOnce(t, manifest, "  panicThreshold: 50\n", "  panicThreshold: 50\n  panicMode: FailClosed\n")
	writeManifest(t, dir, failClosed)
	want = explainJSON(t, dir)
	if want.Upstreams[0].DroppedMillionths == 0 {
		t.Fatalf("FailClosed was meant to drop: %+v", want.Upstreams[0].Split)
	}
	p = waitDrawn(t, ctx, want, "")
	if u := p.Upstreams[0]; !slices.Contains(u.Badges, "drops "+explain.Percent(want.Upstreams[0].DroppedMillionths)) || u.Drop == "" || !p.Marker {
		t.Errorf("FailClosed: badges %v, drop node %q, marker %v", u.Badges, u.Drop, p.Marker)
	}
	screenshot(t, ctx, "checkout-drop.png")

	// With localityAffinity the page offers the upstream's zones; picking
	// one draws what the clients there receive.
	manifest = replaceOnce(t, manifest, "  panicThreshold: 50\n", "  panicThreshold: 50\n  localityAffinity: {mode: PreferSameZone}\n")
	writeManifest(t, dir, manifest)
	const from = "eu-west/eu-west-1b"
	testkit.EventuallyEvery(t, 20*time.Second, 100*time.Millisecond, "a locality selector with "+from+" after localityAffinity was set", func() (bool, string) {
		if read, err := tryRead(ctx); err == nil && read != nil {
			p = *read
		}
		return slices.Contains(p.Zones, from), fmt.Sprintf("zones %v", p.Zones)
	})
	run(t, ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const s = document.getElementById('from');
		s.value = %q; s.dispatchEvent(new Event('change')); return true; })()`, from)))
	want = explainJSON(t, dir, "--from", from)
	p = waitDrawn(t, ctx, want, from)
	if p.Upstreams[0].Split != "class" || !slices.Contains(p.Upstreams[0].Badges, "clients in "+from) {
		t.Errorf("clients in %s: split %q, badges %v", from, p.Upstreams[0].Split, p.Upstreams[0].Badges)
	}
	screenshot(t, ctx, "checkout-from-eu-west-1b.png")
}
