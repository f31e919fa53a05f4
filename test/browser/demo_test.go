package browser

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/grpctraffic"
	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/testkit"
)

// During the demo (cmd/demo serving a copy of the bundled examples, its
// grpc-go clients in eu-west-1a and eu-west-1b calling shop/cart, which
// reports its load), the traffic map draws, beside each endpoint's
// computed share, its share of the requests the clients reported: for the
// clients of eu-west-1a picked in the zone selector, and for every client.
// The computed figures are /debug/explain's to the millionth; the observed
// ones are there for every endpoint and add up to what was reported. A
// screenshot of each is kept.
func TestTrafficMapShowsObservedDuringDemo(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	demoBin := cpbinary.BuildCommand(t, "demo")
	dir, _ := cpbinary.DemoExamples(t, filepath.Join("..", ".."))
	d := cpbinary.StartDemo(t, demoBin, binary, dir)
	for _, zone := range []string{"eu-west/eu-west-1a", "eu-west/eu-west-1b"} {
		d.Out.Wait(t, 60*time.Second, d.Done(), "the demo's clients in "+zone+" hold their split", 0,
			regexp.MustCompile(`in `+regexp.QuoteMeta(zone)+` holds? shop/cart's split`))
	}

	const from = "eu-west/eu-west-1a"
	// Balanced divides shop/cart by its clients' load reports once they
	// weigh enough (docs/weights.md); from then on steady clients keep the
	// division where it is, and the figures drawn stay put.
	testkit.EventuallyEvery(t, 30*time.Second, 200*time.Millisecond, "shop/cart divided by its clients' load reports", func() (bool, string) {
		var rep explain.Report
		if err := testkit.GetJSON(d.AdminURL+"/debug/explain?upstream=shop/cart&from="+from, &rep); err != nil {
			return false, err.Error()
		}
		if c := rep.Upstreams[0].Class; c != nil && c.Balanced != nil {
			return c.Balanced.DemandSource == explain.DemandLoadReports, "demand source " + c.Balanced.DemandSource
		}
		return false, "no Balanced class"
	})
	run(t, ctx, chromedp.Navigate(d.AdminURL+"/map"))
	// the zone is picked as a person picks it: in the selector
	testkit.EventuallyEvery(t, 20*time.Second, 100*time.Millisecond, "a locality selector with "+from, func() (bool, string) {
		p, err := tryRead(ctx)
		if err != nil || p == nil {
			return false, fmt.Sprint(err)
		}
		return strings.Contains(strings.Join(p.Zones, " "), from), fmt.Sprintf("zones %v", p.Zones)
	})
	run(t, ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const s = document.getElementById('from');
		s.value = %q; s.dispatchEvent(new Event('change')); return true; })()`, from)))
	for _, view := range []struct{ from, png string }{{from, "demo-from-eu-west-1a.png"}, {"", "demo.png"}} {
		if view.from == "" {
			run(t, ctx, chromedp.Navigate(d.AdminURL+"/map"))
		}
		cart := waitObserved(t, ctx, view.from, 2000)
		// the computed figures are the plane's, for the same clients
		var want explain.Report
		q := ""
		if view.from != "" {
			q = "?from=" + view.from
		}
		testkit.MustGetJSON(t, d.AdminURL+"/debug/explain"+q, &want)
		waitDrawn(t, ctx, want, view.from)
		var lines []string
		for _, pr := range cart.Priorities {
			for _, l := range pr.Localities {
				for _, e := range l.Endpoints {
					lines = append(lines, fmt.Sprintf("  %s:%s  computed %s  %s", e.Address, e.Port, e.Figure, e.Sub))
				}
			}
		}
		t.Logf("clients in %q: shop/cart as drawn:\n%s", view.from, strings.Join(lines, "\n"))
		screenshot(t, ctx, view.png)
	}
}

// waitObserved waits until the page, for the clients of from ("" for
// all), draws shop/cart with its observed figures: on every endpoint, the
// requests they count adding up to at least min, each endpoint's observed
// share its requests' share of them, its second line saying so, and its
// requests within 4.5 σ of its computed share of them. The reports of the
// first seconds, when the class was not yet divided by its demand, leave
// the 30 s window as it slides: that agreement is the event waited for.
// (Summed over both zones' clients, whose calls weigh their zone's demand,
// the class splits add up to the upstream's own: the page without a zone
// agrees with it too.) It returns shop/cart as drawn.
func waitObserved(t *testing.T, ctx context.Context, from string, min uint64) drawnUpstream {
	t.Helper()
	var cart drawnUpstream
	testkit.EventuallyEvery(t, 90*time.Second, 200*time.Millisecond, "the map draws what shop/cart's clients in "+from+" reported, within 4.5σ of the computed shares", func() (bool, string) {
		p, err := tryRead(ctx)
		if err != nil || p == nil {
			return false, fmt.Sprint(err)
		}
		if p.From != from {
			return false, fmt.Sprintf("the page is for %q", p.From)
		}
		i := slices.IndexFunc(p.Upstreams, func(u drawnUpstream) bool { return u.Namespace == "shop" && u.Name == "cart" })
		if i < 0 {
			return false, "no shop/cart"
		}
		cart = p.Upstreams[i]
		var total uint64
		var eps []drawnEndpoint
		for _, pr := range cart.Priorities {
			for _, l := range pr.Localities {
				eps = append(eps, l.Endpoints...)
			}
		}
		for _, e := range eps {
			n, err := strconv.ParseUint(e.ObservedRequests, 10, 64)
			if err != nil {
				return false, fmt.Sprintf("%s:%s has no observed requests (%q)", e.Address, e.Port, e.ObservedRequests)
			}
			total += n
		}
		if total < min {
			return false, fmt.Sprintf("%d requests reported", total)
		}
		for _, e := range eps {
			n, _ := strconv.ParseUint(e.ObservedRequests, 10, 64)
			want := n * 1_000_000 / total
			if e.Observed != strconv.FormatUint(want, 10) || !strings.Contains(e.Sub, "observed "+explain.Percent(want)) {
				return false, fmt.Sprintf("%s:%s: observed %s, second line %q; want %d of %d requests: %d", e.Address, e.Port, e.Observed, e.Sub, n, total, want)
			}
			share, _ := strconv.ParseUint(e.Share, 10, 64)
			if z := grpctraffic.Binomial(int(n), int(total), share); math.Abs(z) > grpctraffic.Limit {
				return false, fmt.Sprintf("%s:%s: %d of %d requests is %.1fσ from its computed share %s", e.Address, e.Port, n, total, z, explain.Percent(share))
			}
		}
		return true, ""
	})
	return cart
}
