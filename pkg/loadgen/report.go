package loadgen

import (
	"cmp"
	"fmt"
	"html"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// ms is microseconds as milliseconds, for the text report.
func ms(us int64) string { return fmt.Sprintf("%.1f ms", float64(us)/1000) }

// mib is bytes as MiB.
func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// WriteText writes the report as lines of "label  value", the labels
// docs/performance.md explains.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(label, format string, a ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{label}, a...)...)
	}
	row("plane", "%s", r.Address)
	row("clients", "%d (envoy %d, grpc %d; delta %d, sotw %d) on %d connections from %d process(es)",
		r.Clients, r.Envoy, r.GRPC, r.Delta, r.Clients-r.Delta, r.Connections, r.Procs)
	row("subscriptions", "%d over %d clusters (%.1f per client)", r.Subscribed, r.Clusters, float64(r.Subscribed)/float64(max(r.Clients, 1)))
	row("start", "every client synced in %.2f s", r.SyncSeconds)
	row("changes", "%d in %.2f s (target %g/s)", r.Changes, r.ChurnSeconds, r.TargetRate)
	timedOut := ""
	if r.DrainTimedOut {
		timedOut = ", drain limit reached"
	}
	row("delivered", "%d of %d due (%d missing%s) in %.2f s after the last change", r.Delivered, r.Expected, r.Expected-r.Delivered, timedOut, r.DrainSeconds)
	c := r.Convergence
	row("convergence", "p50 %s  p90 %s  p99 %s  max %s  (%d deliveries)", ms(c.P50Us), ms(c.P90Us), ms(c.P99Us), ms(c.MaxUs), c.N)
	for _, ph := range r.Phases {
		label := "phase " + ph.Name
		timedOut := ""
		if ph.DrainTimedOut {
			timedOut = ", drain limit reached"
		}
		row(label, "%s: %d changes of %d cluster(s) (%.1f subscribers each) in %.2f s (target %g/s); %d of %d delivered%s",
			ph.Select, ph.Changes, ph.Targets, ph.Subscribers, ph.ChurnSeconds, ph.TargetRate, ph.Delivered, ph.Expected, timedOut)
		c := ph.Convergence
		row(label+" convergence", "p50 %s  p90 %s  p99 %s  max %s", ms(c.P50Us), ms(c.P90Us), ms(c.P99Us), ms(c.MaxUs))
		if ph.GeneratorCPUSeconds > 0 {
			row(label+" generator", "%.3f s CPU, %.1f µs per delivery", ph.GeneratorCPUSeconds, ph.GeneratorPerDeliveryUs)
		}
		if p := ph.Plane; p != nil {
			row(label+" plane", "%.3f s CPU (%.3f cores), %.3f ms per change, %.1f µs per delivery; RSS max %s, end %s",
				p.CPUSeconds, p.Cores, p.PerChangeMs, p.PerDeliveryUs, mib(p.RSSMaxBytes), mib(p.RSSEndBytes))
			if p.PlaneConverged > 0 {
				row(label+" plane's convergence", "%.0f responses; publication → ACK within 1 s %.2f %%, within 2 s %.2f %% of %.0f",
					p.Responses, p.PlaneWithin1s*100, p.PlaneWithin2s*100, p.PlaneConverged)
			}
		}
	}
	if p := r.Plane; p != nil {
		row("plane CPU for the start", "%.3f s (%.1f µs per client)", p.StartCPUSeconds, p.StartCPUSeconds/float64(max(r.Clients, 1))*1e6)
		row("plane CPU", "%.3f s, %.3f cores (idle %.3f cores)", p.CPUSeconds, p.Cores, p.IdleCores)
		row("plane CPU per change", "%.3f ms", p.PerChangeMs)
		row("plane CPU per client per change", "%.1f µs", p.PerDeliveryUs)
		row("plane RSS", "%s before the clients, %s after the start (%.1f KiB per client), %s at the end",
			mib(p.RSSBeforeBytes), mib(p.RSSStartBytes), p.RSSPerClientBytes/1024, mib(p.RSSEndBytes))
		if p.LiveHeapStartBytes > 0 {
			row("plane live heap", "%s before the clients, %s after the start (%.1f KiB per client)",
				mib(p.LiveHeapBeforeBytes), mib(p.LiveHeapStartBytes), p.LiveHeapPerClientBytes/1024)
		}
	} else {
		row("plane CPU", "not read (give -pid or -admin)")
	}
	cn := r.Counters
	row("strays", "%d %s", cn.Strays, strings.Join(cn.StrayNames, ", "))
	row("unexplained updates", "%d (resent unchanged: %d; CDS clusters lost: %d)", cn.Unattributed, cn.Resent, cn.CDSLosses)
	if d := r.Resumed; d != nil {
		row("reconnects", "%d; stream end → first response of the next: p50 %s  p99 %s  max %s", cn.Reconnects, ms(d.P50Us), ms(d.P99Us), ms(d.MaxUs))
		row("sent again after a reconnect", "Delta, at the version the client held: %d (due: none); SotW, unchanged: %d (due: SotW has no versions per resource)",
			cn.ResentAfterResume, cn.SotWResentAfterReconnect)
		for _, reason := range sortedEnds(cn.StreamEnds) {
			row("streams ended", "%d: %s", cn.StreamEnds[reason], reason)
		}
	}
	row("generator", "%.2f s CPU, %s RSS", r.GeneratorCPUSeconds, mib(r.GeneratorRSSBytes))
	return tw.Flush()
}

// WriteSVG draws the convergence CDF: the share of deliveries (y) that
// arrived within a time (x, logarithmic, ms), with the p50, p90 and p99 marked.
func (r *Report) WriteSVG(w io.Writer) error {
	const (
		width, height = 720, 420
		left, right   = 70, 20
		top, bottom   = 40, 60
	)
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	type series struct {
		name string
		d    HistogramData
		dist Dist
	}
	all := []series{{"all", r.ConvergenceData, r.Convergence}}
	if len(r.Phases) > 1 {
		all = all[:0]
		for _, p := range r.Phases {
			all = append(all, series{p.Name, p.ConvergenceData, p.Convergence})
		}
	}
	d := r.ConvergenceData
	var total int64
	for _, n := range d.Buckets {
		total += n
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	title := fmt.Sprintf("change → subscriber: %d deliveries, %d clients, %d changes", total, r.Clients, r.Changes)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14">%s</text>`+"\n", left, html.EscapeString(title))
	// x: decades of ms from the smallest to the largest bucket.
	lo, hi := 0.1, 1.0
	if total > 0 {
		lo = math.Pow(10, math.Floor(math.Log10(max(float64(d.Upper[0])/1000, 0.01))))
		hi = math.Pow(10, math.Ceil(math.Log10(max(float64(d.MaxUs)/1000, lo*10))))
	}
	x := func(msv float64) float64 {
		msv = min(max(msv, lo), hi)
		return left + pw*(math.Log10(msv)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
	}
	y := func(f float64) float64 { return top + ph*(1-f) }
	for dec := lo; dec <= hi*1.0001; dec *= 10 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x(dec), top, x(dec), height-bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%g ms</text>`+"\n", x(dec), height-bottom+16, dec)
	}
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 0.9, 0.99, 1} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", left, y(f), width-right, y(f))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", left-6, y(f)+4, f)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">time from the change to the subscriber's receipt</text>`+"\n", left+pw/2, height-16)
	fmt.Fprintf(&b, `<text x="16" y="%.0f" transform="rotate(-90 16 %.0f)" text-anchor="middle">share of deliveries</text>`+"\n", top+ph/2, top+ph/2)
	colors := []string{"#1f6feb", "#d1242f", "#1a7f37", "#8250df", "#bf8700", "#0550ae", "#cf222e", "#116329"}
	if total > 0 {
		for k, sr := range all {
			var n int64
			for _, c := range sr.d.Buckets {
				n += c
			}
			if n == 0 {
				continue
			}
			color := colors[k%len(colors)]
			var pts strings.Builder
			var seen int64
			fmt.Fprintf(&pts, "%.1f,%.1f", x(lo), y(0))
			for i, c := range sr.d.Buckets {
				prev := y(float64(seen) / float64(n))
				seen += c
				at := x(float64(min(int64(sr.d.Upper[i]), sr.d.MaxUs)) / 1000)
				fmt.Fprintf(&pts, " %.1f,%.1f %.1f,%.1f", at, prev, at, y(float64(seen)/float64(n)))
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", pts.String(), color)
			if len(all) > 1 {
				fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s: p99 %s</text>`+"\n", left+8, top+16+14*k, color,
					html.EscapeString(sr.name), ms(sr.dist.P99Us))
				continue
			}
			c := sr.dist
			for _, m := range []struct {
				name string
				us   int64
				f    float64
			}{{"p50", c.P50Us, 0.5}, {"p90", c.P90Us, 0.9}, {"p99", c.P99Us, 0.99}} {
				px := x(float64(m.us) / 1000)
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#d1242f"/>`+"\n", px, y(m.f))
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#d1242f">%s %s</text>`+"\n", px+6, y(m.f)+14, m.name, ms(m.us))
			}
		}
	} else {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">no deliveries</text>`+"\n", left+pw/2, top+ph/2)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// sortedEnds is the reasons of ends by count, most first, then by reason.
func sortedEnds(ends map[string]int64) []string {
	reasons := slices.Collect(maps.Keys(ends))
	slices.SortFunc(reasons, func(a, b string) int {
		return cmp.Or(cmp.Compare(ends[b], ends[a]), strings.Compare(a, b))
	})
	return reasons
}
