package explain

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
	"poise.dev/poise/test/golden"
)

// place is one group of a test topology: its locality, the priority and
// weight a Locality object gives it (none when weight is 0), and its
// endpoints, the first `healthy` of them probe-Healthy, the rest Unhealthy.
type place struct {
	region, zone, subZone string
	priority              uint32
	weight                uint64
	endpoints, healthy    int
}

func snapshotOf(t *testing.T, up topology.Upstream, places []place, edit ...func(*topology.Batch)) *topology.Snapshot {
	t.Helper()
	var b topology.Batch
	for _, f := range edit {
		f(&b)
	}
	b.PutUpstream(up)
	for i, p := range places {
		loc := weights.Locality{Region: p.region, Zone: p.zone, SubZone: p.subZone}
		name := up.Key.Name + "-" + strconv.Itoa(i)
		if p.weight > 0 {
			b.PutLocality(topology.Locality{Key: topology.Key{Namespace: up.Key.Namespace, Name: name}, Upstream: up.Key.Name,
				Priority: p.priority, Locality: loc, Weight: p.weight})
		}
		set := topology.EndpointSet{Key: topology.Key{Namespace: up.Key.Namespace, Name: name}, Upstream: up.Key.Name, Locality: loc}
		for j := range p.endpoints {
			h := topology.Health{Probe: weights.ProbeHealthy, ProbeOrigin: "test"}
			if j >= p.healthy {
				h.Probe = weights.ProbeUnhealthy
			}
			set.Endpoints = append(set.Endpoints, topology.Endpoint{Address: "10." + strconv.Itoa(i) + ".0." + strconv.Itoa(j+1), Port: 80, Weight: 1, Health: h})
		}
		b.PutEndpointSet(set)
	}
	snap, err := topology.NewDirectory().Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// orders: PreferSameRegion with us as the failover region, and a second
// configured priority, so effective priorities interleave configured ones
// and the Locality objects must still be found.
func orders(t *testing.T, ha topology.HealthAdjustment) *topology.Snapshot {
	return snapshotOf(t, topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "orders"}, Policy: weights.DefaultPolicy(),
		HealthAdjustment: ha, Affinity: &topology.Affinity{Mode: affinity.PreferSameRegion, FailoverRegions: []string{"us"}, Origin: topology.OriginLocalityAffinity}},
		[]place{
			{"eu", "a", "", 0, 2, 2, 1},
			{"eu", "b", "", 0, 1, 1, 1},
			{"us", "c", "", 0, 1, 2, 2},
			{"ap", "d", "", 0, 0, 1, 1},
			{"us", "e", "", 1, 1, 2, 2},
		})
}

// ledger: Balanced, priority 0 at 70 % health so 30 % spills to priority 1,
// where eu/a has a second locality: a zone's traffic spans priorities, so a
// class's priority loads are its own.
func ledger(t *testing.T, edit ...func(*topology.Batch)) *topology.Snapshot {
	return snapshotOf(t, topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "ledger"}, Policy: weights.DefaultPolicy(),
		HealthAdjustment: topology.ControlPlane, Affinity: &topology.Affinity{Mode: affinity.Balanced, Origin: topology.OriginLocalityAffinity}},
		[]place{
			{"eu", "a", "", 0, 0, 2, 1},
			{"eu", "b", "", 0, 0, 2, 1},
			{"eu", "a", "s2", 1, 1, 1, 1},
			{"us", "c", "", 1, 1, 1, 1},
		}, edit...)
}

// applied is a batch edit that applies demand d to the ledger, as the live
// plane's demand signal does.
func applied(d topology.AppliedDemand) func(*topology.Batch) {
	return func(b *topology.Batch) { b.PutDemand(topology.Key{Namespace: "shop", Name: "ledger"}, d) }
}

// ledgerDemand is the demand of connected clients: three in eu/a, one in eu/b.
var ledgerDemand = applied(topology.AppliedDemand{Zones: []affinity.Demand{{Zone: affinity.Zone{Region: "eu", Zone: "a"}, Weight: 3}, {Zone: affinity.Zone{Region: "eu", Zone: "b"}, Weight: 1}}})

func TestClassGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		snap *topology.Snapshot
		opts ClassOptions
	}{
		{"class-prefer-same-region", orders(t, topology.ControlPlane), ClassOptions{From: From{Region: "eu", Zone: "b"}}},
		{"class-balanced-clients", ledger(t, ledgerDemand), ClassOptions{From: From{Region: "eu", Zone: "a"},
			// the live demand wins over the given one
			Demand: []DemandEntry{{Region: "eu", Zone: "b", Weight: 7}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := BuildFor(tc.snap, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			Simulate(&rep.Upstreams[0], tc.snap.Upstreams()[0], 10_000, 3)
			var buf bytes.Buffer
			if err := WriteText(&buf, rep); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tc.name, buf.String())
			js, err := json.MarshalIndent(rep, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tc.name+"-json", string(js)+"\n")
		})
	}
}

func TestPreferSameFindsLocalityObjectsAtEffectivePriorities(t *testing.T) {
	rep, err := BuildFor(orders(t, topology.ControlPlane), ClassOptions{From: From{Region: "eu", Zone: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Upstreams[0].Class
	want := []EffectivePriority{{0, 0, 0}, {0, 1, 1}, {0, 2, 2}, {1, 1, 3}}
	if !reflect.DeepEqual(c.Effective, want) {
		t.Errorf("effective priorities %+v, want %+v", c.Effective, want)
	}
	ranks := []ZoneRank{{"ap", "d", 2, "OtherRegion"}, {"eu", "a", 0, "SameRegion"}, {"eu", "b", 0, "SameRegion"}, {"us", "c", 1, "FailoverRegion"}, {"us", "e", 1, "FailoverRegion"}}
	if !reflect.DeepEqual(c.Ranks, ranks) || c.Zone != "" || c.Region != "eu" {
		t.Errorf("class %s/%q, ranks %+v", c.Region, c.Zone, c.Ranks)
	}
	from := map[string][]string{}
	for _, p := range c.Split.Priorities {
		for _, l := range p.Localities {
			from[l.Region+"/"+l.Zone] = l.LocalityFrom
		}
	}
	for zone, objs := range map[string][]string{"eu/a": {"Locality shop/orders-0"}, "eu/b": {"Locality shop/orders-1"},
		"us/c": {"Locality shop/orders-2"}, "ap/d": {}, "us/e": {"Locality shop/orders-4"}} {
		if !reflect.DeepEqual(from[zone], objs) {
			t.Errorf("%s: localityFrom %v, want %v", zone, from[zone], objs)
		}
	}
	// under healthAdjustment Proxy the text says whose math runs
	rep, err = BuildFor(orders(t, topology.Proxy), ClassOptions{From: From{Region: "eu", Zone: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, rep); err != nil || !strings.Contains(buf.String(), "the proxy applies its own math") {
		t.Errorf("Proxy: %v\n%s", err, buf.String())
	}
}

// Every class split is a consistent derivation: per priority its
// localities carry its load less its drop, per locality its endpoints carry
// its traffic, and all of it is a million.
func TestClassSplitsAreConsistent(t *testing.T) {
	snap := ledger(t, ledgerDemand)
	u := snap.Upstreams()[0]
	var loadsDiffer bool
	for _, from := range []affinity.Zone{{Region: "eu", Zone: "a"}, {Region: "eu", Zone: "b"}} {
		c, err := BuildClass(u, ClassOptions{From: From{Region: from.Region, Zone: from.Zone}})
		if err != nil {
			t.Fatal(err)
		}
		if c.ReceivesNone || c.Balanced.DemandSource != DemandClients {
			t.Fatalf("%s: %+v", from, c)
		}
		total := c.Split.DroppedMillionths
		for pi, p := range c.Split.Priorities {
			var traffic uint64
			for _, l := range p.Localities {
				var shares uint64
				for _, e := range l.Endpoints {
					shares += e.Share
				}
				if shares != l.Traffic {
					t.Errorf("%s %s/%s/%s: shares %d, traffic %d", from, l.Region, l.Zone, l.SubZone, shares, l.Traffic)
				}
				traffic += l.Traffic
				total += l.Traffic
			}
			if traffic != p.Load-p.DroppedMillionths {
				t.Errorf("%s priority %d: traffic %d, load %d − dropped %d", from, p.Priority, traffic, p.Load, p.DroppedMillionths)
			}
			if p.Load != u.Result.Priorities[pi].Load {
				loadsDiffer = true
			}
		}
		if total != weights.Million {
			t.Errorf("%s: %d in all", from, total)
		}
	}
	if !loadsDiffer {
		t.Error("the test topology should give a class priority loads of its own")
	}
}

func TestBalancedFallbacksAndDemandSources(t *testing.T) {
	u, live := ledger(t).Upstreams()[0], ledger(t, ledgerDemand).Upstreams()[0]
	euA := From{Region: "eu", Zone: "a"}
	for _, tc := range []struct {
		name   string
		u      *topology.UpstreamState
		opts   ClassOptions
		source string
		reason string
	}{
		{"nothing given", u, ClassOptions{From: euA}, DemandNone, "no client declares demand"},
		{"live demand without the zone", live, ClassOptions{From: From{Region: "us", Zone: "c"}}, DemandClients, "no demand is counted for us/c yet"},
		{"no live demand: the given one", u, ClassOptions{From: euA, Demand: []DemandEntry{{Region: "eu", Zone: "a", Weight: 1}}}, DemandGiven, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := BuildClass(tc.u, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if c.Balanced.DemandSource != tc.source || c.Reason != tc.reason || c.ReceivesNone != (tc.reason != "") || (c.Split == nil) != c.ReceivesNone {
				t.Errorf("source %s, reason %q, receivesNone %v", c.Balanced.DemandSource, c.Reason, c.ReceivesNone)
			}
		})
	}
	// from load reports: the source, its requests and window, in JSON and text
	loads := applied(topology.AppliedDemand{Zones: []affinity.Demand{{Zone: affinity.Zone{Region: "eu", Zone: "a"}, Weight: 750}, {Zone: affinity.Zone{Region: "eu", Zone: "b"}, Weight: 250}},
		LoadReports: true, Requests: 400, Window: 30 * time.Second})
	rep, err := BuildFor(ledger(t, loads), ClassOptions{From: euA})
	if err != nil {
		t.Fatal(err)
	}
	if b := rep.Upstreams[0].Class.Balanced; b.DemandSource != DemandLoadReports || b.DemandRequests != 400 || b.DemandWindowSeconds != 30 || b.Demand != 1000 {
		t.Errorf("load reports: %+v", b)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, rep); err != nil || !strings.Contains(buf.String(),
		"demand D = 1000 (demand source: load reports (window 30 s): each zone's per-mille share of the 400 requests its clients reported)") {
		t.Errorf("load reports in text: %v\n%s", err, buf.String())
	}
	_, err = BuildClass(u, ClassOptions{From: From{Region: "us", Zone: "c"}, Demand: []DemandEntry{{Region: "eu", Zone: "a", Weight: 1}}})
	var de *DemandError
	if !errors.As(err, &de) || de.Upstream.Name != "ledger" {
		t.Errorf("given demand without the clients' zone: %v", err)
	}
}

func TestParseFrom(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want From
		err  string
	}{
		{"eu/a", From{Region: "eu", Zone: "a"}, ""},
		{"eu-west/eu-west-1a/rack 1", From{Region: "eu-west", Zone: "eu-west-1a", SubZone: "rack 1"}, ""},
		{strings.Repeat("r", 128) + "/z", From{Region: strings.Repeat("r", 128), Zone: "z"}, ""},
		{"eu", From{}, `"eu": want REGION/ZONE[/SUBZONE]`},
		{"eu/a/b/c", From{}, "want REGION/ZONE[/SUBZONE]"},
		{"eu/", From{}, "the zone is empty"},
		{"eu/a/", From{}, "the subZone is empty"},
		{"eu/a=1", From{}, `the zone may not contain "/", "," or "="`},
		{"eu/\x00", From{}, "the zone is not printable UTF-8 text"},
		{"eu/\xff", From{}, "the zone is not printable UTF-8 text"},
		{strings.Repeat("r", 129) + "/z", From{}, "the region is 129 bytes, at most 128"},
		{strings.Repeat("r", 387), From{}, "387 bytes"},
	} {
		got, err := ParseFrom(tc.in)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("ParseFrom(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseFrom(%q) error %v, want %q", tc.in, err, tc.err)
		}
	}
}

func TestParseDemand(t *testing.T) {
	max64 := make([]string, 64)
	for i := range max64 {
		max64[i] = strings.Repeat("r", 128) + "/" + strings.Repeat(strconv.Itoa(i%10), 126) + strconv.Itoa(10+i) + "=1000000"
	}
	if got, err := ParseDemand(strings.Join(max64, ",")); err != nil || len(got) != 64 {
		t.Errorf("64 zones with the longest names and weights: %d, %v", len(got), err)
	}
	for _, tc := range []struct {
		in   string
		want []DemandEntry
		err  string
	}{
		{"eu/b=1,eu/a=1000000", []DemandEntry{{"eu", "a", 1_000_000}, {"eu", "b", 1}}, ""},
		{"b=2, us/a=1", []DemandEntry{{"", "b", 2}, {"us", "a", 1}}, ""},
		{"", nil, "empty"},
		{" ", nil, "empty"},
		{"eu/a=1,", nil, `"": want REGION/ZONE=N`},
		{"eu/a", nil, `"eu/a": want REGION/ZONE=N or ZONE=N`},
		{"eu/a=", nil, `weight ""`},
		{"eu/a=1.5", nil, `weight "1.5"`},
		{"eu/a=+1", nil, `weight "+1"`},
		{"eu/a=99999999999999999999", nil, "want an integer 1..1000000"},
		{"=1", nil, "the zone is empty"},
		{"/a=1", nil, "the region is empty"},
		{"eu/a/x=1", nil, "without subZone"},
		{"eu/a=1=2", nil, `weight "1=2"`},
		{"a=1,a=2", nil, "a is given twice"},
		{strings.Repeat("eu/a=1,", 64) + "eu/b=1", nil, "65 zones, at most 64"},
		{strings.Repeat(",", 70), nil, "71 zones, at most 64"},
		{strings.Repeat("a", maxDemandBytes+1), nil, "bytes, at most " + strconv.Itoa(maxDemandBytes)},
	} {
		got, err := ParseDemand(tc.in)
		if tc.err == "" && (err != nil || !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("ParseDemand(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseDemand(%.40q) error %v, want %q", tc.in, err, tc.err)
		}
	}
}

// The text writer indents every non-empty line, also one written in pieces,
// and leaves blank lines blank.
func TestTextWriterIndents(t *testing.T) {
	var buf bytes.Buffer
	tw := &textWriter{w: &buf}
	tw.printf("a\n")
	tw.indent = "  "
	tw.printf("\nb")
	tw.printf(", c\nd\n\n")
	tw.indent = ""
	tw.printf("e\n")
	if want := "a\n\n  b, c\n  d\n\ne\n"; buf.String() != want || tw.err != nil {
		t.Errorf("got %q, want %q (%v)", buf.String(), want, tw.err)
	}
}

// A class whose (configured priority, rank) pairs exceed what a proxy
// accepts is an error naming the upstream and the clients, not a report.
func TestTooManyEffectivePriorities(t *testing.T) {
	var places []place
	// 50 priorities × ranks 1 (eu), 2 (us, the failover region), 3 (ap): 150 pairs
	for p := range uint32(50) {
		for _, region := range []string{"eu", "us", "ap"} {
			places = append(places, place{region, "z" + strconv.Itoa(int(p)), "", p, 1, 1, 1})
		}
	}
	snap := snapshotOf(t, topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "wide"}, Policy: weights.DefaultPolicy(),
		Affinity: &topology.Affinity{Mode: affinity.PreferSameZone, FailoverRegions: []string{"us"}}}, places)
	_, err := BuildFor(snap, ClassOptions{From: From{Region: "eu", Zone: "a"}})
	if !errors.Is(err, affinity.ErrTooManyPriorities) || !strings.Contains(err.Error(), "upstream shop/wide, clients in eu/a") {
		t.Errorf("err = %v", err)
	}
}
