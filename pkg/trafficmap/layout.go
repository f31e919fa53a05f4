package trafficmap

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/weights"
)

// Caps on what one page draws. They bound the response (a page holds at
// most PerPage × MaxPriorities × MaxLocalities × (MaxEndpoints+1) rows, a
// few MiB) however large the topology; what is not drawn is summed in a
// "+N more" row, so every column still adds up to the upstream's traffic.
const (
	// PerPage is how many upstreams one page draws; the rest are paginated.
	PerPage = 8
	// MaxPriorities is how many priorities of one upstream are drawn.
	MaxPriorities = 8
	// MaxLocalities is how many localities of one priority are drawn.
	MaxLocalities = 16
	// MaxEndpoints is how many endpoints of one locality are drawn.
	MaxEndpoints = 12
	// MaxZones is how many client zones the locality selector offers.
	MaxZones = 64
)

// Geometry, in SVG user units (pixels at 100 %).
const (
	rowH    = 22
	top     = 6
	maxBand = 160 // tenths of a pixel: a band carrying 100 % is 16 px wide
	minBand = 5   // tenths: a band carrying anything is at least 0.5 px
)

// column is one of the four columns of the diagram, and the longest label
// (in runes) that fits its boxes.
type column struct{ x, w, label int }

var (
	colUpstream = column{8, 180, 24}
	colPriority = column{228, 190, 26}
	colLocality = column{458, 260, 22}
	colEndpoint = column{758, 320, 34}
	svgWidth    = colEndpoint.x + colEndpoint.w + 8
)

// Box is a node's rectangle, its text baseline and its traffic bar.
type Box struct {
	X, Y, W, H int
	TextX      int
	TextY      int
	// BarW is the width of the bar along the box's foot: traffic × W.
	BarW int
	BarY int
	// Label is the text drawn (shortened to fit), Figure the percentage
	// after it, Title the full description shown on hover.
	Label, Figure, Title string
}

// Band is the curve from a parent node to a child, as wide as its traffic.
type Band struct {
	D     string
	Width string
	// Zero: the band carries nothing; it is drawn thin and dashed so the
	// structure stays visible.
	Zero bool
}

// Upstream is one drawn upstream.
type Upstream struct {
	Namespace, Name string
	// Split is "none" for the upstream's own split, "class" for what the
	// clients of the selected locality receive.
	Split      string
	Heading    string
	Notes      []string
	Badges     []Badge
	Outcome    string
	Dropped    uint64
	TotalPanic bool
	Width      int
	Height     int
	Class      string
	Box        Box
	Priorities []Priority
	// More sums the priorities not drawn; nil when all are.
	More *More
	// Drop is the node of the traffic dropped; nil when none is.
	Drop *More
}

// Badge is a highlight named in an upstream's heading.
type Badge struct{ Class, Text string }

// Priority is one drawn priority.
type Priority struct {
	Priority   uint32
	Load       uint64
	InPanic    bool
	Dropped    uint64
	Class      string
	Box        Box
	Band       Band
	Localities []Locality
	More       *More
}

// Locality is one drawn locality.
type Locality struct {
	Region, Zone, SubZone string
	Traffic               uint64
	Class                 string
	Box                   Box
	Band                  Band
	Endpoints             []Endpoint
	More                  *More
}

// Endpoint is one drawn endpoint.
type Endpoint struct {
	Address string
	Port    uint32
	Share   uint64
	Reason  string
	Class   string
	Box     Box
	Band    Band
}

// More is a row that stands for several nodes not drawn one by one (or,
// as an upstream's Drop, for the traffic that reaches no endpoint).
type More struct {
	Count   int
	Traffic uint64
	Class   string
	Box     Box
	Band    Band
}

// layout places one upstream's split on rows: an endpoint (or a "+N more")
// per row, a locality spanning its endpoints, a priority its localities.
type layout struct {
	row int
}

func (l *layout) y(row int) int { return top + row*rowH }

// box spans rows [from, l.row) of a column; traffic sets its bar.
func (l *layout) box(c column, from int, label, figure, title string, traffic uint64) Box {
	rows := max(l.row-from, 1)
	b := Box{X: c.x, Y: l.y(from) + 2, W: c.w, H: rows*rowH - 4, TextX: c.x + 6, Label: shorten(label, c.label),
		Figure: figure, Title: title}
	b.TextY = b.Y + 12
	b.BarY = b.Y + b.H - 2
	b.BarW = int(min(traffic, weights.Million) * uint64(c.w) / weights.Million)
	return b
}

// band joins the middle of parent's right edge to the middle of child's left edge.
func band(parent, child Box, traffic uint64) Band {
	x1, y1 := parent.X+parent.W, parent.Y+parent.H/2
	x2, y2 := child.X, child.Y+child.H/2
	xm := (x1 + x2) / 2
	w := min(traffic, weights.Million) * maxBand / weights.Million
	if traffic > 0 && w < minBand {
		w = minBand
	}
	if traffic == 0 {
		w = 10
	}
	return Band{D: fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, xm, y1, xm, y2, x2, y2),
		Width: fmt.Sprintf("%d.%d", w/10, w%10), Zero: traffic == 0}
}

// classes joins the CSS classes that apply.
func classes(base string, flags ...any) string {
	out := []string{base}
	for i := 0; i+1 < len(flags); i += 2 {
		if flags[i+1].(bool) {
			out = append(out, flags[i].(string))
		}
	}
	return strings.Join(out, " ")
}

// layoutUpstream draws u: its class split when the report is for a client
// locality and the class has one of its own, else the upstream's split.
func layoutUpstream(u explain.Upstream, from *explain.From) Upstream {
	split := u.Split
	out := Upstream{Namespace: u.Namespace, Name: u.Name, Split: "none", Heading: u.Namespace + "/" + u.Name}
	out.Notes = append(out.Notes, fmt.Sprintf("locality affinity %s; outcome %s; normalized total availability %s",
		u.Affinity.Mode, u.Outcome, explain.Percent(u.NormalizedTotalAvailability)))
	if u.SplitBy == "Proxy" {
		out.Notes = append(out.Notes, "healthAdjustment Proxy: clients apply their own math to the published topology; these are the figures the control plane would use")
	}
	if from != nil && u.Class != nil {
		switch {
		case u.Class.Split != nil:
			split = *u.Class.Split
			out.Split = "class"
			out.Badges = append(out.Badges, Badge{"class", "clients in " + from.String()})
			out.Notes = append(out.Notes, fmt.Sprintf("what clients in %s receive under %s; outcome %s", from, u.Class.Mode, split.Outcome))
		default:
			out.Notes = append(out.Notes, fmt.Sprintf("clients in %s receive the upstream's own split: %s", from, u.Class.Reason))
		}
	}
	out.Outcome, out.Dropped, out.TotalPanic = split.Outcome, split.DroppedMillionths, split.TotalPanic

	var l layout
	var spill, panic bool
	for pi, pr := range split.Priorities {
		if pi == MaxPriorities {
			out.More = more(&l, colPriority, split.Priorities[pi:], func(p explain.Priority) uint64 { return p.Load }, "priorities")
			break
		}
		p := l.priority(pr)
		spill = spill || pr.Priority > 0 && pr.Load > 0
		panic = panic || pr.InPanic
		out.Priorities = append(out.Priorities, p)
	}
	if split.DroppedMillionths > 0 {
		from := l.row
		l.row++
		out.Drop = &More{Traffic: split.DroppedMillionths, Class: "more drop",
			Box: l.box(colPriority, from, "dropped", explain.Percent(split.DroppedMillionths),
				"traffic that reaches no endpoint (FailClosed panic)", split.DroppedMillionths)}
	}
	if len(split.Priorities) == 0 {
		l.row++
		out.Notes = append(out.Notes, "no endpoints")
	}
	served := weights.Million - min(split.DroppedMillionths, weights.Million)
	out.Box = l.box(colUpstream, 0, out.Heading, explain.Percent(served),
		fmt.Sprintf("%s: outcome %s, %s served", out.Heading, split.Outcome, explain.Percent(served)), served)
	out.Box.Figure = ""
	out.Class = classes("node upstream", "panic", split.TotalPanic, "drop", split.DroppedMillionths > 0)
	for i := range out.Priorities {
		out.Priorities[i].Band = band(out.Box, out.Priorities[i].Box, out.Priorities[i].Load)
	}
	if out.More != nil {
		out.More.Band = band(out.Box, out.More.Box, out.More.Traffic)
	}
	if out.Drop != nil {
		out.Drop.Band = band(out.Box, out.Drop.Box, out.Drop.Traffic)
	}
	if spill {
		out.Badges = append(out.Badges, Badge{"spill", "spill"})
	}
	if panic || split.TotalPanic {
		text := "panic"
		if split.TotalPanic {
			text = "total panic"
		}
		out.Badges = append(out.Badges, Badge{"panic", text})
	}
	if split.DroppedMillionths > 0 {
		out.Badges = append(out.Badges, Badge{"drop", "drops " + explain.Percent(split.DroppedMillionths)})
	}
	out.Width, out.Height = svgWidth, l.y(l.row)+top
	return out
}

func (l *layout) priority(pr explain.Priority) Priority {
	spill := pr.Priority > 0 && pr.Load > 0
	p := Priority{Priority: pr.Priority, Load: pr.Load, InPanic: pr.InPanic, Dropped: pr.DroppedMillionths,
		Class: classes("node priority", "spill", spill, "panic", pr.InPanic, "drop", pr.DroppedMillionths > 0)}
	from := l.row
	for li, loc := range pr.Localities {
		if li == MaxLocalities {
			p.More = more(l, colLocality, pr.Localities[li:], func(x explain.Locality) uint64 { return x.Traffic }, "localities")
			break
		}
		p.Localities = append(p.Localities, l.locality(loc, spill))
	}
	if len(pr.Localities) == 0 {
		l.row++
	}
	label := fmt.Sprintf("priority %d", pr.Priority)
	title := fmt.Sprintf("priority %d: health %s, load %s", pr.Priority, explain.Percent(pr.Health), explain.Percent(pr.Load))
	if pr.InPanic {
		label += " PANIC"
		title += ", in panic"
	}
	if pr.DroppedMillionths > 0 {
		title += ", dropped " + explain.Percent(pr.DroppedMillionths)
	}
	p.Box = l.box(colPriority, from, label, explain.Percent(pr.Load), title, pr.Load)
	for i := range p.Localities {
		p.Localities[i].Band = band(p.Box, p.Localities[i].Box, p.Localities[i].Traffic)
	}
	if p.More != nil {
		p.More.Band = band(p.Box, p.More.Box, p.More.Traffic)
	}
	return p
}

func (l *layout) locality(loc explain.Locality, spill bool) Locality {
	out := Locality{Region: loc.Region, Zone: loc.Zone, SubZone: loc.SubZone, Traffic: loc.Traffic,
		Class: classes("node locality", "spill", spill && loc.Traffic > 0)}
	from := l.row
	for ei, e := range loc.Endpoints {
		if ei == MaxEndpoints {
			out.More = more(l, colEndpoint, loc.Endpoints[ei:], func(x explain.Endpoint) uint64 { return x.Share }, "endpoints")
			break
		}
		hp := hostPort(e.Address, e.Port)
		label, title := hp, fmt.Sprintf("%s weight %d %s: %s", hp, e.Weight, e.AdminState, e.Reason)
		if e.ReasonFrom != "" {
			title += " (from " + e.ReasonFrom + ")"
		}
		if e.Reason != "Eligible" {
			label = shorten(hp, colEndpoint.label-len(e.Reason)-1) + " " + e.Reason
		}
		if e.Selectable && !e.Eligible {
			title += ", selectable in panic"
		}
		ep := Endpoint{Address: e.Address, Port: e.Port, Share: e.Share, Reason: e.Reason,
			Class: classes("node endpoint", "spill", spill && e.Share > 0, "ineligible", !e.Eligible)}
		row := l.row
		l.row++
		ep.Box = l.box(colEndpoint, row, label, explain.Percent(e.Share), title, e.Share)
		out.Endpoints = append(out.Endpoints, ep)
	}
	if len(loc.Endpoints) == 0 {
		l.row++
	}
	name := loc.Region + "/" + loc.Zone
	if loc.SubZone != "" {
		name += "/" + loc.SubZone
	}
	out.Box = l.box(colLocality, from, name, explain.Percent(loc.Traffic),
		fmt.Sprintf("%s: availability %s, share in priority %s, traffic %s", name, explain.Percent(loc.Availability),
			explain.Percent(loc.ShareInPriority), explain.Percent(loc.Traffic)), loc.Traffic)
	for i := range out.Endpoints {
		out.Endpoints[i].Band = band(out.Box, out.Endpoints[i].Box, out.Endpoints[i].Share)
	}
	if out.More != nil {
		out.More.Band = band(out.Box, out.More.Box, out.More.Traffic)
	}
	return out
}

// more is one row summing the traffic of the nodes that are not drawn.
func more[T any](l *layout, c column, rest []T, traffic func(T) uint64, what string) *More {
	m := &More{Count: len(rest), Class: "more"}
	for _, x := range rest {
		m.Traffic += traffic(x)
	}
	from := l.row
	l.row++
	m.Box = l.box(c, from, fmt.Sprintf("+%d more %s", m.Count, what), explain.Percent(m.Traffic),
		fmt.Sprintf("%d more %s, not drawn one by one, carry %s", m.Count, what, explain.Percent(m.Traffic)), m.Traffic)
	return m
}

func hostPort(addr string, port uint32) string {
	if strings.Contains(addr, ":") {
		return fmt.Sprintf("[%s]:%d", addr, port)
	}
	return fmt.Sprintf("%s:%d", addr, port)
}

// shorten keeps at most n runes of s, marking a cut with an ellipsis; the
// full text stays in the node's title and data attributes.
func shorten(s string, n int) string {
	n = max(n, 4)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// zones lists the client zones a person can pick: those of the localities
// of upstreams with a localityAffinity, sorted, at most MaxZones, with the
// selected one added when it is not among them.
func zones(rep explain.Report) []string {
	var out []string
	for _, u := range rep.Upstreams {
		if u.Affinity.Mode == affinity.None.String() {
			continue
		}
		for _, p := range u.Split.Priorities {
			for _, l := range p.Localities {
				out = append(out, l.Region+"/"+l.Zone)
			}
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > MaxZones {
		out = out[:MaxZones]
	}
	if rep.From != nil && !slices.Contains(out, rep.From.String()) {
		out = append(out, rep.From.String())
	}
	return out
}
