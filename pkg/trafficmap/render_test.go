package trafficmap

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/test/golden"
)

func checkoutReport(t *testing.T) explain.Report {
	t.Helper()
	set, err := manifest.Load("../../examples/checkout.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := topology.NewDirectory()
	if _, err := d.Apply(set.Batch); err != nil {
		t.Fatal(err)
	}
	return explain.Build(d.Current())
}

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

// The checkout example's page, byte for byte: the same report renders the
// same bytes (the browser test checks what they draw).
func TestCheckoutGolden(t *testing.T) {
	v := View{Report: checkoutReport(t), Version: "1", Page: 1, Pages: 1, Total: 1}
	got := render(t, page, v)
	if again := render(t, page, v); again != got {
		t.Fatal("two renderings of one report differ")
	}
	golden.Check(t, "checkout.html", got)
	if f := render(t, fragment, v); !strings.HasPrefix(f, `<div id="map" data-version="1"`) || !strings.Contains(got, f) {
		t.Errorf("the fragment is not the page's #map:\n%.200s", f)
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
	u := layoutUpstream(explain.Upstream{Namespace: "n", Name: "big", Split: explain.Split{Priorities: prs}}, nil)
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

// Spill, panic and drops each have a class of their own and a badge.
func TestHighlights(t *testing.T) {
	u := layoutUpstream(explain.Upstream{Namespace: "n", Name: "u", Split: explain.Split{
		Outcome: "Routable", TotalPanic: true, DroppedMillionths: 250_000,
		Priorities: []explain.Priority{
			{Priority: 0, Load: 500_000, InPanic: true, DroppedMillionths: 250_000, Localities: []explain.Locality{{Traffic: 500_000}}},
			{Priority: 1, Load: 250_000, Localities: []explain.Locality{{Traffic: 250_000}}},
			{Priority: 2, Load: 0, Localities: []explain.Locality{{Traffic: 0}}},
		}}}, nil)
	for i, want := range []string{"node priority panic drop", "node priority spill", "node priority"} {
		if got := u.Priorities[i].Class; got != want {
			t.Errorf("priority %d: class %q, want %q", i, got, want)
		}
	}
	if u.Priorities[1].Localities[0].Class != "node locality spill" || u.Priorities[2].Band.Zero != true {
		t.Errorf("spill locality %q, zero band %v", u.Priorities[1].Localities[0].Class, u.Priorities[2].Band.Zero)
	}
	if u.Class != "node upstream panic drop" || u.Drop == nil || u.Drop.Traffic != 250_000 || u.Drop.Class != "more drop" {
		t.Errorf("upstream %q, drop %+v", u.Class, u.Drop)
	}
	var badges []string
	for _, b := range u.Badges {
		badges = append(badges, b.Class+":"+b.Text)
	}
	if got := strings.Join(badges, ","); got != "spill:spill,panic:total panic,drop:drops 25.0000%" {
		t.Errorf("badges %s", got)
	}
	// a band of 25 % is a quarter of the widest
	if got := u.Priorities[1].Band.Width; got != "4.0" {
		t.Errorf("band width %s, want 4.0", got)
	}
}
