package explain

import (
	"fmt"
	"math/big"
	"strings"
)

// writeFrom prints which clients the report is for, and the demand given.
func writeFrom(tw *textWriter, rep Report) {
	f := rep.From
	tw.printf("Clients in region %q zone %q", f.Region, f.Zone)
	if f.SubZone != "" {
		tw.printf(" subZone %q (a class is a region and a zone: the subZone does not change what they receive)", f.SubZone)
	}
	tw.printf("\n")
	if len(rep.Demand) > 0 {
		parts := make([]string, len(rep.Demand))
		for i, d := range rep.Demand {
			parts[i] = fmt.Sprintf("%s %d", d.key(), d.Weight)
		}
		tw.printf("Demand given: %s\n", strings.Join(parts, ", "))
	}
}

// writeClass prints, after an upstream's own split, what the clients in
// from receive and each step that led there.
func writeClass(tw *textWriter, from From, u Upstream) {
	c := u.Class
	zone := from.Region + "/" + from.Zone
	tw.printf("\n")
	switch c.Mode {
	case "None":
		tw.printf("  Clients in %s: no localityAffinity, so every client receives the split above\n", zone)
		return
	case "PreferSameRegion":
		tw.printf("  Clients in %s: localityAffinity PreferSameRegion, one class per client region (%s)\n", zone, c.Region)
	default:
		tw.printf("  Clients in %s: localityAffinity %s, one class per client zone\n", zone, c.Mode)
	}
	// the class's derivation is printed as an upstream's, one level deeper
	tw.indent = "  "
	defer func() { tw.indent = "" }()
	if c.Balanced != nil {
		writeBalanced(tw, from, u)
		return
	}
	if c.ReceivesNone {
		tw.printf("  they receive the split above: %s\n", c.Reason)
		return
	}
	writeRanks(tw, zone, c)
	if u.SplitBy == "Proxy" {
		tw.printf("  note: healthAdjustment Proxy publishes these effective priorities and the configured weights; the proxy applies its own math\n")
	}
	writeSplit(tw, u.Policy, *c.Split, c.Effective)
}

func writeRanks(tw *textWriter, zone string, c *Class) {
	tw.printf("  proximity rank of each zone, seen from %s:\n", zone)
	width := 0
	for _, r := range c.Ranks {
		width = max(width, len(r.Region)+1+len(r.Zone))
	}
	// the first failover region's rank: 2 under PreferSameZone (after the
	// zone and the region), 1 under PreferSameRegion
	firstFailover := uint32(2)
	if c.Mode == "PreferSameRegion" {
		firstFailover = 1
	}
	for _, r := range c.Ranks {
		why := "every other region"
		switch r.Proximity {
		case "SameZone":
			why = "same zone"
		case "SameRegion":
			why = "same region"
		case "FailoverRegion":
			why = fmt.Sprintf("failoverRegions[%d]", r.Rank-firstFailover)
		}
		tw.printf("    %-*s  rank %d  %s\n", width, r.Region+"/"+r.Zone, r.Rank, why)
	}
	tw.printf("  effective priority = (configured priority, rank) in lexicographic order, renumbered from 0:\n")
	for _, e := range c.Effective {
		tw.printf("    (%d, %d) → %d\n", e.ConfiguredPriority, e.Rank, e.EffectivePriority)
	}
	tw.printf("  the same math on the effective priorities:\n")
}

func writeBalanced(tw *textWriter, from From, u Upstream) {
	zone := from.Region + "/" + from.Zone
	c := u.Class
	b := c.Balanced
	if c.ReceivesNone {
		tw.printf("  they receive the split above: %s\n", c.Reason)
		for _, z := range b.Zones {
			tw.printf("  zone %s/%s: supply u = %d, demand d = %d\n", z.Region, z.Zone, z.Supply, z.Demand)
		}
		if b.DemandSource == DemandNone {
			example := make([]string, len(b.Zones))
			for i, z := range b.Zones {
				example[i] = z.Region + "/" + z.Zone + "=1"
			}
			tw.printf("  offline no client is connected: give each client zone's demand with --demand REGION/ZONE=N,...")
			if len(example) > 0 {
				tw.printf(" (for example --demand %s)", strings.Join(example, ","))
			}
			tw.printf("\n")
		}
		return
	}
	source := map[string]string{DemandGiven: "from --demand", DemandClients: "of the connected clients",
		DemandLoadReports: fmt.Sprintf("demand source: load reports (window %d s): each zone's per-mille share of the %d requests its clients reported", b.DemandWindowSeconds, b.DemandRequests)}[b.DemandSource]
	tw.printf("  start from the split above: routable U = %d millionths, demand D = %d (%s)\n", b.RoutableMillionths, b.Demand, source)
	var me BalancedZone
	for _, z := range b.Zones {
		tw.printf("  zone %s/%s: supply u = %d, demand d = %d, surplus s = u × D − d × U = %s\n", z.Region, z.Zone, z.Supply, z.Demand, z.Surplus)
		if z.Region == from.Region && z.Zone == from.Zone {
			me = z
		}
	}
	D, U := new(big.Int).SetUint64(b.Demand), new(big.Int).SetUint64(b.RoutableMillionths)
	uD := new(big.Int).Mul(new(big.Int).SetUint64(me.Supply), D)
	dU := new(big.Int).Mul(new(big.Int).SetUint64(me.Demand), U)
	var weights, traffic []string
	zeros := false
	for _, z := range b.Zones {
		name := z.Region + "/" + z.Zone
		traffic = append(traffic, fmt.Sprintf("%s %s (%d millionths)", name, Percent(*z.Traffic), *z.Traffic))
		switch {
		case z.Weight.Sign() == 0:
			zeros = true
		case z.Region == from.Region && z.Zone == from.Zone:
			weights = append(weights, fmt.Sprintf("%s u × D × S = %s", name, z.Weight))
		default:
			weights = append(weights, fmt.Sprintf("%s (d × U − u × D) × s = %s", name, z.Weight))
		}
	}
	if zeros {
		weights = append(weights, "every other zone 0")
	}
	if b.KeepsAll {
		tw.printf("  %s: u × D = %s ≥ d × U = %s, so its local fraction min(1, u × D / (d × U)) is 1: it keeps all its traffic local (zone weights N: %s 1, every other zone 0)\n", zone, uD, dU, zone)
	} else {
		tw.printf("  S = the sum of the positive surpluses = %s\n", b.SurplusSum)
		tw.printf("  %s: u × D = %s < d × U = %s, so its local fraction min(1, u × D / (d × U)) is %s / %s; its deficit (the residual) d × U − u × D = %s goes to the zones with a surplus, in proportion to it\n",
			zone, uD, dU, uD, dU, new(big.Int).Sub(dU, uD))
		tw.printf("  zone weights N: %s\n", strings.Join(weights, "; "))
	}
	tw.printf("  zone traffic t = apportion(U, N): %s\n", strings.Join(traffic, ", "))
	writeSimulation(tw, c.Split.Simulation)
	tw.printf("  inside a zone, apportion(t, the traffic of its localities in the split above); inside a locality, its selectable endpoints by weight:\n")
	// the class's split has the shape of the upstream's (see Class.Split)
	for pi, pr := range c.Split.Priorities {
		var none Priority
		if pi < len(u.Priorities) {
			none = u.Priorities[pi]
		}
		tw.printf("\n  Priority %d: load %s for these clients (the split above: %s)\n", pr.Priority, Percent(pr.Load), Percent(none.Load))
		for li, l := range pr.Localities {
			var noneTraffic uint64
			if li < len(none.Localities) {
				noneTraffic = none.Localities[li].Traffic
			}
			tw.printf("\n    Locality region=%q zone=%q subZone=%q: traffic %s (%d millionths); the split above: %s",
				l.Region, l.Zone, l.SubZone, Percent(l.Traffic), l.Traffic, Percent(noneTraffic))
			if l.Observed != nil && c.Split.Simulation != nil {
				tw.printf(", observed %s (%d picks)", observedPercent(*l.Observed, c.Split.Simulation.Picks), *l.Observed)
			}
			tw.printf("\n")
			for _, e := range l.Endpoints {
				writeEndpoint(tw, c.Split.Simulation, e)
			}
		}
	}
}
