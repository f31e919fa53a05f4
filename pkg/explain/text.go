package explain

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Percent formats millionths as a percentage with four decimals, exactly
// (integer arithmetic, no rounding): 259259 → "25.9259%".
func Percent(m uint64) string {
	return fmt.Sprintf("%d.%04d%%", m/10_000, m%10_000)
}

// WriteText prints a report as a worked example a person can follow.
func WriteText(w io.Writer, rep Report) error {
	tw := &textWriter{w: w}
	tw.printf("Topology revision %d: %d upstream(s)\n", rep.Revision, len(rep.Upstreams))
	writeAudience(tw, rep)
	if rep.From != nil {
		writeFrom(tw, rep)
	}
	for _, u := range rep.Upstreams {
		tw.printf("\n")
		writeUpstream(tw, u, rep.Audience)
		if u.Class != nil && rep.From != nil {
			writeClass(tw, *rep.From, u)
		}
	}
	writeSpatialDomains(tw, rep)
	if len(rep.Orphans) > 0 {
		tw.printf("\nObjects whose upstream does not exist (ignored until it does):\n")
		for _, o := range rep.Orphans {
			tw.printf("  %s\n", o)
		}
	}
	return tw.err
}

// textWriter prints lines, each non-empty one after indent, so a
// derivation can be nested under a heading with the code that prints it
// at the top level.
type textWriter struct {
	w      io.Writer
	err    error
	indent string
	// midLine: the last write did not end a line, so the next does not
	// start one.
	midLine bool
}

func (t *textWriter) printf(format string, a ...any) {
	if t.err != nil {
		return
	}
	s := fmt.Sprintf(format, a...)
	var b strings.Builder
	for s != "" {
		line := s
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			line = s[:i+1]
		}
		s = s[len(line):]
		if !t.midLine && line != "\n" {
			b.WriteString(t.indent) // blank lines stay blank: no trailing spaces
		}
		b.WriteString(line)
		t.midLine = !strings.HasSuffix(line, "\n")
	}
	_, t.err = io.WriteString(t.w, b.String())
}

func writeUpstream(tw *textWriter, u Upstream, aud *Audience) {
	p := u.Policy
	tw.printf("Upstream %s/%s\n", u.Namespace, u.Name)
	tw.printf("  policy: overprovisioning factor %d%%, panic threshold %d%% (%s), draining capacity %s, health adjustment %s\n",
		p.OverprovisioningFactor, p.PanicThreshold, p.PanicMode, p.DrainingCapacity, p.HealthAdjustment)
	if u.SplitBy == "Proxy" {
		tw.printf("  note: healthAdjustment Proxy publishes the source topology; the split clients carry out is the proxy's own math, not the figures below\n")
	}
	writeLoadBalancing(tw, u.LoadBalancing)
	writeAffinity(tw, u.Affinity)
	writeHealthCheck(tw, u.HealthCheck)
	writeRetries(tw, u.Retries)
	writeVisibility(tw, u.Visibility)
	writeAccess(tw, aud, u.Access, "it")
	writeSplit(tw, p, u.Split, nil)
	if len(u.UnmatchedLocalities) > 0 {
		tw.printf("\n  Locality objects that match no endpoints (their weight applies to nothing):\n")
		for _, l := range u.UnmatchedLocalities {
			tw.printf("    priority %d, region=%q zone=%q subZone=%q: weight %d (%s)\n", l.Priority, l.Region, l.Zone, l.SubZone, l.LocalityWeight, l.Locality)
		}
	}
}

func writeVisibility(tw *textWriter, v *Visibility) {
	origin := "spec.exportTo"
	if v != nil && v.Origin == OriginDefault {
		origin = "the default: no spec.exportTo"
	}
	switch {
	case v == nil:
	case v.All:
		tw.printf("  visibility: exported to every namespace (%s)\n", origin)
	case len(v.Namespaces) == 0:
		tw.printf("  visibility: exported to no namespace (%s)\n", origin)
	default:
		tw.printf("  visibility: exported to namespace%s %s only (%s)\n", plural(len(v.Namespaces)), strings.Join(v.Namespaces, ", "), origin)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// writeSplit prints a derivation; eff, when given, names the configured
// priority and rank behind each effective priority.
func writeSplit(tw *textWriter, p Policy, u Split, eff []EffectivePriority) {
	tw.printf("  outcome: %s; normalized total availability %s", u.Outcome, Percent(u.NormalizedTotalAvailability))
	if u.TotalPanic {
		tw.printf("; TOTAL PANIC (%s)", p.PanicMode)
	}
	if u.DroppedMillionths > 0 {
		tw.printf("; dropped %s", Percent(u.DroppedMillionths))
	}
	tw.printf("\n")
	writeSimulation(tw, u.Simulation)
	if len(u.Priorities) == 0 {
		tw.printf("  no endpoints\n")
	}
	for _, pr := range u.Priorities {
		behind := ""
		for _, e := range eff {
			if e.EffectivePriority == pr.Priority {
				behind = fmt.Sprintf(" (configured priority %d, rank %d)", e.ConfiguredPriority, e.Rank)
			}
		}
		tw.printf("\n  Priority %d%s: configured weight %d, eligible %d, panic-eligible %d\n",
			pr.Priority, behind, pr.ConfiguredWeight, pr.EligibleWeight, pr.PanicEligibleWeight)
		if pr.ConfiguredWeight > 0 {
			tw.printf("    health = min(100%%, %d%% × %d / %d) = %s\n",
				p.OverprovisioningFactor, pr.EligibleWeight, pr.ConfiguredWeight, Percent(pr.Health))
		} else {
			tw.printf("    nothing configured: takes no part in priority load\n")
		}
		state := "not in panic"
		if pr.InPanic {
			state = fmt.Sprintf("IN PANIC (eligible %d × 100 < threshold %d × %d)", pr.EligibleWeight, p.PanicThreshold, pr.ConfiguredWeight)
		}
		tw.printf("    load = %s, %s", Percent(pr.Load), state)
		if pr.DroppedMillionths > 0 {
			tw.printf(", dropped %s (FailClosed)", Percent(pr.DroppedMillionths))
		}
		tw.printf("\n")
		for _, l := range pr.Localities {
			writeLocality(tw, p.OverprovisioningFactor, u.Simulation, l)
		}
	}
}

func writeLoadBalancing(tw *textWriter, lb LoadBalancing) {
	tw.printf("  load balancing %s:\n", lb.Policy)
	for _, c := range lb.Clients {
		size := ""
		switch {
		case c.RingSize > 0:
			size = fmt.Sprintf(", ring %d", c.RingSize)
		case c.TableSize > 0:
			size = fmt.Sprintf(", table %d", c.TableSize)
		}
		verdict := "split exact"
		switch c.Split {
		case SplitApproximate:
			verdict = "split approximate: each endpoint within ±" + Percent(c.BoundMillionths) + " of its share"
		case SplitLoadDependent:
			verdict = "split load-dependent"
		case SplitProxy:
			verdict = "split by the client's own math"
		}
		tw.printf("    %-5s %s, %s%s: %s (%s)\n", c.Client, c.Rendering, c.LbPolicy, size, verdict, c.Note)
		if c.Refusal != "" {
			tw.printf("          every request: %s\n", c.Refusal)
		}
	}
	for i, k := range lb.KeyedBy {
		if i == 0 {
			tw.printf("    keyed by, in order (the first the request carries):\n")
		}
		tw.printf("      %s\n", k)
	}
}

func writeAffinity(tw *textWriter, a Affinity) {
	tw.printf("  locality affinity: %s", a.Mode)
	if len(a.FailoverRegions) > 0 {
		tw.printf(", failover regions %s", strings.Join(a.FailoverRegions, ", "))
	}
	if a.Origin == AffinityDefault {
		tw.printf(" (default: nothing sets a mode; every client receives this split)\n")
		return
	}
	tw.printf(" (from %s)\n", a.Origin)
}

func writeHealthCheck(tw *textWriter, hc *HealthCheck) {
	if hc == nil {
		return
	}
	tw.printf("  active health check: %s %s", hc.Type, hc.Target)
	if hc.Port != 0 {
		tw.printf(" on port %d", hc.Port)
	}
	tw.printf(", every %s ± %d%%, timeout %s; Unhealthy after %d failures, Healthy after %d passes (origins \"active check by ...\")\n",
		time.Duration(hc.IntervalMs)*time.Millisecond, hc.JitterPercent, time.Duration(hc.TimeoutMs)*time.Millisecond, hc.UnhealthyThreshold, hc.HealthyThreshold)
}

func writeLocality(tw *textWriter, opf uint32, sim *Simulation, l Locality) {
	from := "default weight, no Locality object"
	if len(l.LocalityFrom) > 0 {
		from = strings.Join(l.LocalityFrom, ", ")
	}
	tw.printf("\n    Locality region=%q zone=%q subZone=%q: weight %d (%s)\n", l.Region, l.Zone, l.SubZone, l.LocalityWeight, from)
	tw.printf("      configured weight %d, selectable weight %d\n", l.ConfiguredWeight, l.SelectableWeight)
	if l.ConfiguredWeight > 0 {
		tw.printf("      availability = min(100%%, %d%% × %d / %d) = %s\n", opf, l.SelectableWeight, l.ConfiguredWeight, Percent(l.Availability))
	}
	tw.printf("      effective weight = %d × %d = %d\n", l.LocalityWeight, l.Availability, l.EffectiveWeight)
	tw.printf("      share in priority %s, traffic %s (%d millionths)", Percent(l.ShareInPriority), Percent(l.Traffic), l.Traffic)
	if l.Observed != nil && sim != nil {
		tw.printf(", observed %s (%d picks)", observedPercent(*l.Observed, sim.Picks), *l.Observed)
	}
	tw.printf("\n")
	for _, e := range l.Endpoints {
		writeEndpoint(tw, sim, e)
	}
}

func writeSimulation(tw *textWriter, s *Simulation) {
	if s != nil {
		tw.printf("  simulated %d picks with seed %d: %d dropped (%s)\n", s.Picks, s.Seed, s.Dropped, observedPercent(s.Dropped, s.Picks))
	}
}

func writeEndpoint(tw *textWriter, sim *Simulation, e Endpoint) {
	status := "eligible"
	if !e.Eligible {
		status = e.Reason
		if e.ReasonFrom != "" {
			status += " (from " + e.ReasonFrom + ")"
		}
	}
	if e.Selectable && !e.Eligible {
		status += ", selectable in panic"
	}
	tw.printf("        %-24s weight %-5d %-11s share %9s", hostPort(e.Address, e.Port), e.Weight, e.AdminState, Percent(e.Share))
	if e.Observed != nil && sim != nil {
		tw.printf("  observed %9s", observedPercent(*e.Observed, sim.Picks))
	}
	tw.printf("  %s", status)
	if e.Origin != "" && e.Eligible {
		tw.printf(" (from %s)", e.Origin)
	}
	if e.HashKey != "" {
		tw.printf("  hash key %q", e.HashKey)
	}
	if e.Generation != "" {
		tw.printf("  generation %q", e.Generation)
	}
	tw.printf("\n")
}

func hostPort(addr string, port uint32) string {
	if strings.Contains(addr, ":") {
		return fmt.Sprintf("[%s]:%d", addr, port)
	}
	return fmt.Sprintf("%s:%d", addr, port)
}

// observedPercent is count/total as a percentage with four decimals (integer math).
func observedPercent(count, total uint64) string {
	if total == 0 {
		return Percent(0)
	}
	return Percent(count * 1_000_000 / total)
}
