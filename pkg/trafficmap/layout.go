package trafficmap

import (
	"cmp"
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
	// lineH is the distance between the two lines of a two-line box.
	lineH = 14
	// textPad is the space left of a box's text and right of it.
	textPad = 6
	// charW is the advance of one character of DejaVu Sans Mono at 12 px
	// (0.602 em), the font the stylesheet draws the diagrams in, in
	// thousandths of a pixel: what sets how many characters fit a box.
	charW = 7225
)

// column is one of the four columns of the diagram.
type column struct{ x, w int }

// runes is how many characters fit on one line of the column's boxes.
func (c column) runes() int { return (c.w - 2*textPad) * 1000 / charW }

var (
	colUpstream = column{8, 170}
	colPriority = column{208, 230}
	colLocality = column{468, 290}
	colEndpoint = column{788, 330}
	svgWidth    = colEndpoint.x + colEndpoint.w + 8
)

// Box is a node's rectangle, its text and its traffic bar.
type Box struct {
	X, Y, W, H int
	TextX      int
	TextY      int
	// BarW is the width of the bar along the box's foot: traffic × W.
	BarW int
	BarY int
	// Obs, on an endpoint whose clients report their load, draws a second
	// bar above the first, ObsBarW long at ObsBarY: the share observed.
	Obs     bool
	ObsBarW int
	ObsBarY int
	// The first line reads Flag (a warning word such as DOWN, in bold),
	// Label (the name, shortened to fit), Tag (a word in its own colour:
	// an endpoint's reason, PANIC) and Figure (the traffic). Sub is the
	// second line of a box two rows high, at SubY. Title is the full
	// description shown on hover.
	Flag, Label, Tag, Figure string
	Sub                      string
	SubY                     int
	Title                    string
}

// text is what a box prints.
type text struct{ flag, label, tag, figure, sub, title string }

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
	Split   string
	Heading string
	Notes   []string
	Badges  []Badge
	Outcome string
	Dropped uint64
	// Spill is the traffic beyond the split's first priority, in
	// millionths, and Severity its grade (see Severity).
	Spill      uint64
	Severity   Severity
	TotalPanic bool
	// Down counts the localities with no eligible capacity, drawn or not.
	Down int
	// Observed: the clients report their load, and each endpoint shows
	// its share of what they reported.
	Observed   bool
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
	Priority         uint32
	Load             uint64
	Health           uint64
	ConfiguredWeight uint64
	EligibleWeight   uint64
	InPanic          bool
	Dropped          uint64
	// Down: no endpoint of the priority is eligible.
	Down bool
	// Effective is set when Priority is an effective priority of a client
	// locality's class: the configured priority and proximity rank it
	// stands for.
	Effective  *Effective
	Class      string
	Box        Box
	Band       Band
	Localities []Locality
	More       *More
}

// Effective is the (configured priority, rank) pair an effective priority
// of a class split stands for, and the proximity of that rank.
type Effective struct {
	ConfiguredPriority uint32
	Rank               uint32
	// Proximity is SameZone, SameRegion, FailoverRegion or OtherRegion;
	// empty when no zone of the upstream has the rank.
	Proximity string
}

// Locality is one drawn locality.
type Locality struct {
	Region, Zone, SubZone string
	Traffic               uint64
	// Weight is the locality weight; ConfiguredWeight, SelectableWeight
	// and EligibleWeight sum the weights of its endpoints that count as
	// configured, that are selectable and that are eligible.
	Weight           uint64
	ConfiguredWeight uint64
	SelectableWeight uint64
	EligibleWeight   uint64
	Availability     uint64
	// Down: no endpoint of the locality is eligible. It may still carry
	// traffic in panic.
	Down      bool
	Class     string
	Box       Box
	Band      Band
	Endpoints []Endpoint
	More      *More
}

// Endpoint is one drawn endpoint.
type Endpoint struct {
	Address string
	Port    uint32
	Share   uint64
	// Observed is set when the clients report their load: the endpoint's
	// share of the requests reported (millionths) and their number.
	Observed         bool
	ObservedShare    uint64
	ObservedRequests uint64
	Reason           string
	// Signal is the input the reason comes from (weights.Reason.Signal),
	// lower case; empty for an eligible endpoint.
	Signal string
	Class  string
	Box    Box
	Band   Band
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
// per row, a locality spanning its endpoints (two rows at least, for its
// second line), a priority its localities.
type layout struct {
	row int
	// reasons finds a reason by the name explain prints.
	reasons map[string]weights.Reason
	// spill is the class of the nodes that carry spilled traffic.
	spill string
	// obs is what the clients reported, nil when they report nothing;
	// obsTotal is the requests they reported in all.
	obs      *Observed
	obsTotal uint64
}

func (l *layout) y(row int) int { return top + row*rowH }

// atLeast pads the rows from `from` to n.
func (l *layout) atLeast(from, n int) { l.row = max(l.row, from+n) }

// box spans rows [from, l.row) of a column; traffic sets its bar. The
// label is shortened so that the first line fits the box, and the second
// line is drawn only on a box two rows high.
func (l *layout) box(c column, from int, t text, traffic uint64) Box {
	rows := max(l.row-from, 1)
	b := Box{X: c.x, Y: l.y(from) + 2, W: c.w, H: rows*rowH - 4, TextX: c.x + textPad,
		Flag: t.flag, Tag: t.tag, Figure: t.figure, Title: t.title}
	room := c.runes()
	for _, w := range []string{t.flag, t.tag, t.figure} {
		if w != "" {
			room -= utf8.RuneCountInString(w) + 1
		}
	}
	b.Label = shorten(t.label, room)
	b.TextY = b.Y + 12
	if rows > 1 && t.sub != "" {
		b.Sub, b.SubY = shorten(t.sub, c.runes()), b.TextY+lineH
	}
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
		if flags[i+1].(bool) && flags[i].(string) != "" {
			out = append(out, flags[i].(string))
		}
	}
	return strings.Join(out, " ")
}

// layoutUpstream draws u: its class split when the report is for a client
// locality and the class has one of its own, else the upstream's split.
// With obs, each endpoint also shows its share of the requests the
// clients reported.
func layoutUpstream(u explain.Upstream, from *explain.From, reasons map[string]weights.Reason, obs *Observed) Upstream {
	split := u.Split
	out := Upstream{Namespace: u.Namespace, Name: u.Name, Split: "none", Heading: u.Namespace + "/" + u.Name}
	out.Notes = append(out.Notes, fmt.Sprintf("locality affinity %s; outcome %s; normalized total availability %s",
		u.Affinity.Mode, u.Outcome, explain.Percent(u.NormalizedTotalAvailability)))
	if u.SplitBy == "Proxy" {
		out.Notes = append(out.Notes, "healthAdjustment Proxy: clients apply their own math to the published topology; these are the figures the control plane would use")
	}
	var effective map[uint32]Effective
	if from != nil && u.Class != nil {
		switch {
		case u.Class.Split != nil:
			split = *u.Class.Split
			out.Split = "class"
			out.Badges = append(out.Badges, Badge{"class", "clients in " + from.String()})
			out.Notes = append(out.Notes, fmt.Sprintf("what clients in %s receive under %s; outcome %s", from, u.Class.Mode, split.Outcome))
			effective = effectiveOf(u.Class)
			if n := ranksNote(u.Class); n != "" {
				out.Notes = append(out.Notes, n)
			}
		default:
			out.Notes = append(out.Notes, fmt.Sprintf("clients in %s receive the upstream's own split: %s", from, u.Class.Reason))
		}
	}
	out.Outcome, out.Dropped, out.TotalPanic = split.Outcome, split.DroppedMillionths, split.TotalPanic
	for i, pr := range split.Priorities {
		if i > 0 {
			out.Spill += pr.Load
		}
		for _, loc := range pr.Localities {
			if eligibleWeight(loc) == 0 {
				out.Down++
			}
		}
	}
	out.Spill = min(out.Spill, weights.Million)
	out.Severity = spillSeverity(out.Spill, u.Policy.OverprovisioningFactor)

	l := layout{reasons: reasons}
	if obs != nil {
		l.obs, l.obsTotal, out.Observed = obs, obs.total(), true
		out.Notes = append(out.Notes, observedNote(obs, l.obsTotal))
	}
	if out.Spill > 0 {
		l.spill = "spill " + string(out.Severity)
		first := priorityName(split.Priorities[0].Priority, effective != nil)
		out.Notes = append(out.Notes, spillNote(out.Spill, out.Severity, first, u.Policy.OverprovisioningFactor))
	}
	var panic bool
	for pi, pr := range split.Priorities {
		if pi == MaxPriorities {
			out.More = more(&l, colPriority, split.Priorities[pi:], func(p explain.Priority) uint64 { return p.Load }, "priorities")
			break
		}
		var eff *Effective
		if e, ok := effective[pr.Priority]; ok {
			eff = &e
		}
		p := l.priority(pr, pi > 0 && pr.Load > 0, eff)
		panic = panic || pr.InPanic
		out.Priorities = append(out.Priorities, p)
	}
	if split.DroppedMillionths > 0 {
		from := l.row
		l.row++
		out.Drop = &More{Traffic: split.DroppedMillionths, Class: "more drop",
			Box: l.box(colPriority, from, text{label: "dropped", figure: explain.Percent(split.DroppedMillionths),
				title: "traffic that reaches no endpoint (FailClosed panic)"}, split.DroppedMillionths)}
	}
	if len(split.Priorities) == 0 {
		l.row++
		out.Notes = append(out.Notes, "no endpoints")
	}
	served := weights.Million - min(split.DroppedMillionths, weights.Million)
	out.Box = l.box(colUpstream, 0, text{label: out.Heading,
		title: fmt.Sprintf("%s: outcome %s, %s served", out.Heading, split.Outcome, explain.Percent(served))}, served)
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
	if out.Down > 0 {
		what := "localities"
		if out.Down == 1 {
			what = "locality"
		}
		out.Badges = append(out.Badges, Badge{"down", fmt.Sprintf("%d %s down", out.Down, what)})
	}
	if out.Spill > 0 {
		out.Badges = append(out.Badges, Badge{"spill " + string(out.Severity),
			fmt.Sprintf("spill %s (%s)", explain.Percent(out.Spill), out.Severity)})
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
	if keys := u.LoadBalancing.KeyedBy; len(keys) > 0 {
		// requestAffinity: which endpoint serves a request is its key's, on
		// each client's ring; explain --key names it
		out.Badges = append(out.Badges, Badge{"keyed", "keyed " + u.LoadBalancing.Policy})
		out.Notes = append(out.Notes, "requests keyed by, in order: "+strings.Join(keys, "; "))
	}
	out.Width, out.Height = svgWidth, l.y(l.row)+top
	return out
}

// priorityName names a priority of the split drawn: an effective priority
// under a client locality's class.
func priorityName(p uint32, effective bool) string {
	if effective {
		return fmt.Sprintf("eff. priority %d", p)
	}
	return fmt.Sprintf("priority %d", p)
}

// effectiveOf maps each effective priority of a class to the configured
// priority and rank it stands for.
func effectiveOf(c *explain.Class) map[uint32]Effective {
	if len(c.Effective) == 0 {
		return nil
	}
	proximity := map[uint32]string{}
	for _, r := range c.Ranks {
		proximity[r.Rank] = r.Proximity // one proximity per rank
	}
	m := make(map[uint32]Effective, len(c.Effective))
	for _, e := range c.Effective {
		m[e.EffectivePriority] = Effective{ConfiguredPriority: e.ConfiguredPriority, Rank: e.Rank, Proximity: proximity[e.Rank]}
	}
	return m
}

// maxRanksNoted bounds the ranks the note names (a rank per failover region).
const maxRanksNoted = MaxPriorities

// ranksNote names the proximity of each rank of a class, for the labels
// "configured P · rank R" of its effective priorities.
func ranksNote(c *explain.Class) string {
	var ranks []string
	seen := map[uint32]bool{}
	rs := slices.Clone(c.Ranks)
	slices.SortStableFunc(rs, func(a, b explain.ZoneRank) int { return cmp.Compare(a.Rank, b.Rank) })
	for _, r := range rs {
		if seen[r.Rank] {
			continue
		}
		seen[r.Rank] = true
		if len(ranks) == maxRanksNoted {
			ranks = append(ranks, "…")
			break
		}
		ranks = append(ranks, fmt.Sprintf("%d %s", r.Rank, r.Proximity))
	}
	if len(ranks) == 0 {
		return ""
	}
	return "effective priority = (configured priority, rank); ranks: " + strings.Join(ranks, ", ")
}

func (l *layout) priority(pr explain.Priority, spill bool, eff *Effective) Priority {
	p := Priority{Priority: pr.Priority, Load: pr.Load, Health: pr.Health, ConfiguredWeight: pr.ConfiguredWeight,
		EligibleWeight: pr.EligibleWeight, InPanic: pr.InPanic, Dropped: pr.DroppedMillionths,
		Down: pr.EligibleWeight == 0, Effective: eff}
	p.Class = classes("node priority", l.spill, spill, "panic", pr.InPanic, "drop", pr.DroppedMillionths > 0, "down", p.Down)
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
	l.atLeast(from, 2)
	t := text{label: priorityName(pr.Priority, eff != nil), figure: explain.Percent(pr.Load),
		sub: fmt.Sprintf("health %s (%d/%d)", explain.Percent(pr.Health), pr.EligibleWeight, pr.ConfiguredWeight)}
	t.title = fmt.Sprintf("%s: health %s = min(100%%, factor × eligible %d / configured %d), load %s",
		t.label, explain.Percent(pr.Health), pr.EligibleWeight, pr.ConfiguredWeight, explain.Percent(pr.Load))
	if eff != nil {
		t.sub = fmt.Sprintf("configured %d · rank %d", eff.ConfiguredPriority, eff.Rank)
		t.title += fmt.Sprintf("; configured priority %d, rank %d", eff.ConfiguredPriority, eff.Rank)
		if eff.Proximity != "" {
			t.title += " (" + eff.Proximity + ")"
		}
	}
	if p.Down {
		t.flag = "DOWN"
		t.title += "; down: no eligible capacity"
	}
	if pr.InPanic {
		t.tag = "PANIC"
		t.title += ", in panic"
	}
	if pr.DroppedMillionths > 0 {
		t.title += ", dropped " + explain.Percent(pr.DroppedMillionths)
	}
	p.Box = l.box(colPriority, from, t, pr.Load)
	for i := range p.Localities {
		p.Localities[i].Band = band(p.Box, p.Localities[i].Box, p.Localities[i].Traffic)
	}
	if p.More != nil {
		p.More.Band = band(p.Box, p.More.Box, p.More.Traffic)
	}
	return p
}

// eligibleWeight sums the weights of a locality's eligible endpoints.
func eligibleWeight(loc explain.Locality) uint64 {
	var w uint64
	for _, e := range loc.Endpoints {
		if e.Eligible {
			w += e.Weight
		}
	}
	return w
}

func (l *layout) locality(loc explain.Locality, spill bool) Locality {
	out := Locality{Region: loc.Region, Zone: loc.Zone, SubZone: loc.SubZone, Traffic: loc.Traffic,
		Weight: loc.LocalityWeight, ConfiguredWeight: loc.ConfiguredWeight, SelectableWeight: loc.SelectableWeight,
		EligibleWeight: eligibleWeight(loc), Availability: loc.Availability}
	out.Down = out.EligibleWeight == 0
	out.Class = classes("node locality", l.spill, spill && loc.Traffic > 0, "down", out.Down)
	from := l.row
	ineligible := map[string]int{}
	for ei, e := range loc.Endpoints {
		if !e.Eligible {
			ineligible[e.Reason]++
		}
		if ei >= MaxEndpoints {
			continue
		}
		out.Endpoints = append(out.Endpoints, l.endpoint(e, spill))
	}
	if len(loc.Endpoints) > MaxEndpoints {
		out.More = more(l, colEndpoint, loc.Endpoints[MaxEndpoints:], func(x explain.Endpoint) uint64 { return x.Share }, "endpoints")
	}
	if len(loc.Endpoints) == 0 {
		l.row++
	}
	l.atLeast(from, 2)
	name := loc.Region + "/" + loc.Zone
	if loc.SubZone != "" {
		name += "/" + loc.SubZone
	}
	t := text{label: name, figure: explain.Percent(loc.Traffic),
		sub: fmt.Sprintf("weight %d · avail %s (%d/%d)", loc.LocalityWeight, explain.Percent(loc.Availability),
			loc.SelectableWeight, loc.ConfiguredWeight)}
	t.title = fmt.Sprintf("%s: locality weight %d; availability %s = min(100%%, factor × selectable %d / configured %d); "+
		"eligible weight %d; share in priority %s, traffic %s", name, loc.LocalityWeight, explain.Percent(loc.Availability),
		loc.SelectableWeight, loc.ConfiguredWeight, out.EligibleWeight, explain.Percent(loc.ShareInPriority), explain.Percent(loc.Traffic))
	if out.Down {
		t.flag = "DOWN"
		t.title += "; down: no eligible capacity (" + l.reasonCounts(ineligible) + ")"
	}
	out.Box = l.box(colLocality, from, t, loc.Traffic)
	for i := range out.Endpoints {
		out.Endpoints[i].Band = band(out.Box, out.Endpoints[i].Box, out.Endpoints[i].Share)
	}
	if out.More != nil {
		out.More.Band = band(out.Box, out.More.Box, out.More.Traffic)
	}
	return out
}

// reasonCounts says how many endpoints each reason holds back, in the
// reasons' declared order.
func (l *layout) reasonCounts(n map[string]int) string {
	var parts []string
	for _, r := range weights.Reasons() {
		if c := n[r.String()]; c > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c, r))
		}
	}
	if len(parts) == 0 {
		return "no endpoints"
	}
	return strings.Join(parts, ", ")
}

func (l *layout) endpoint(e explain.Endpoint, spill bool) Endpoint {
	hp := hostPort(e.Address, e.Port)
	t := text{label: hp, figure: explain.Percent(e.Share), title: fmt.Sprintf("%s weight %d %s: %s", hp, e.Weight, e.AdminState, e.Reason)}
	if e.ReasonFrom != "" {
		t.title += " (from " + e.ReasonFrom + ")"
	}
	ep := Endpoint{Address: e.Address, Port: e.Port, Share: e.Share, Reason: e.Reason}
	var reasonClasses string
	if !e.Eligible {
		t.tag = e.Reason
		reasonClasses = "reason-unknown"
		if r, ok := l.reasons[e.Reason]; ok {
			ep.Signal = signalName(r)
			reasonClasses = reasonClass(r) + " signal-" + ep.Signal
			t.title += "; signal " + ep.Signal
		}
	}
	if e.Selectable && !e.Eligible {
		t.title += ", selectable in panic"
	}
	ep.Class = classes("node endpoint", l.spill, spill && e.Share > 0, "ineligible", !e.Eligible, reasonClasses, !e.Eligible)
	row := l.row
	l.row++
	if l.obs == nil {
		ep.Box = l.box(colEndpoint, row, t, e.Share)
		return ep
	}
	// the share the clients reported, on a second line and a second bar
	ep.Observed, ep.ObservedRequests = true, l.obs.Issued[hp]
	ep.ObservedShare = observedShare(ep.ObservedRequests, l.obsTotal)
	t.sub = fmt.Sprintf("observed %s (%s)", explain.Percent(ep.ObservedShare), thousands(ep.ObservedRequests))
	t.title += fmt.Sprintf("; observed %s: %s of the %s requests reported", explain.Percent(ep.ObservedShare), thousands(ep.ObservedRequests), thousands(l.obsTotal))
	l.row++
	ep.Box = l.box(colEndpoint, row, t, e.Share)
	ep.Box.Obs, ep.Box.ObsBarY = true, ep.Box.BarY-3
	ep.Box.ObsBarW = int(min(ep.ObservedShare, weights.Million) * uint64(colEndpoint.w) / weights.Million)
	return ep
}

// more is one row summing the traffic of the nodes that are not drawn.
func more[T any](l *layout, c column, rest []T, traffic func(T) uint64, what string) *More {
	m := &More{Count: len(rest), Class: "more"}
	for _, x := range rest {
		m.Traffic += traffic(x)
	}
	from := l.row
	l.row++
	m.Box = l.box(c, from, text{label: fmt.Sprintf("+%d more %s", m.Count, what), figure: explain.Percent(m.Traffic),
		title: fmt.Sprintf("%d more %s, not drawn one by one, carry %s", m.Count, what, explain.Percent(m.Traffic))}, m.Traffic)
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
