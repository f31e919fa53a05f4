package main

import (
	"bytes"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/golden"
)

// docs/weights.md, "Client-locality affinity", worked examples 5 and 6.
const (
	spillDir    = "testdata/affinity-spill"
	balancedDir = "testdata/affinity-balanced"
)

func TestExplainFromGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"explain-from-spill", []string{"explain", "-f", spillDir, "--from", "eu/a/rack-1"}},
		{"explain-from-balanced", []string{"explain", "-f", balancedDir, "--from", "eu/a", "--demand", "eu/a=3,eu/b=1"}},
		{"explain-from-balanced-keeps-all", []string{"explain", "-f", balancedDir, "--from", "eu/b", "--demand", "eu/a=3,eu/b=1"}},
		{"explain-from-balanced-no-demand", []string{"explain", "-f", balancedDir, "--from", "eu/a"}},
		{"explain-from-balanced-json", []string{"explain", "-f", balancedDir, "--from", "eu/a", "--demand", "eu/a=3,eu/b=1", "-o", "json"}},
		{"explain-from-none", []string{"explain", "-f", examples, "--upstream", "shop/catalog", "--from", "eu-west/eu-west-1a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(tc.args...)
			if code != exitOK || stderr != stderrOf(tc.args) {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr)
			}
			golden.Check(t, tc.name, stdout)
		})
	}
}

// explainFrom runs explain -o json with args and returns the one upstream.
func explainFrom(t *testing.T, args ...string) (explain.Report, explain.Upstream) {
	t.Helper()
	code, stdout, stderr := runCLI(append(append([]string{"explain"}, args...), "-o", "json")...)
	if code != exitOK {
		t.Fatalf("%v: exit %d: %s", args, code, stderr)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	var rep explain.Report
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("%v: JSON does not decode into explain.Report: %v", args, err)
	}
	if len(rep.Upstreams) != 1 || rep.Upstreams[0].Class == nil {
		t.Fatalf("%v: want one upstream with a class: %+v", args, rep.Upstreams)
	}
	return rep, rep.Upstreams[0]
}

// splitOf is each locality's traffic ("region/zone") and each endpoint's
// share ("address") in a split.
func splitOf(s explain.Split) (map[string]uint64, map[string]uint64) {
	loc, eps := map[string]uint64{}, map[string]uint64{}
	for _, p := range s.Priorities {
		for _, l := range p.Localities {
			loc[l.Region+"/"+l.Zone] += l.Traffic
			for _, e := range l.Endpoints {
				eps[e.Address] = e.Share
			}
		}
	}
	return loc, eps
}

// TestExplainFromWorkedExamples asserts the figures of the worked examples
// to the unit, as explain --from derives them.
func TestExplainFromWorkedExamples(t *testing.T) {
	spillNone := map[string]uint64{"eu/a": 259_259, "eu/b": 370_371, "us/c": 370_370}
	balancedNone := map[string]uint64{"eu/a": 500_000, "eu/b": 500_000}
	for _, tc := range []struct {
		name      string
		args      []string
		none      map[string]uint64
		localites map[string]uint64
		endpoints map[string]uint64
	}{
		{"5: clients in eu/a spill to their region", []string{"-f", spillDir, "--from", "eu/a"}, spillNone,
			map[string]uint64{"eu/a": 700_000, "eu/b": 300_000, "us/c": 0},
			map[string]uint64{"10.0.1.1": 700_000, "10.0.1.2": 0, "10.0.2.1": 150_000, "10.0.2.2": 150_000, "10.0.3.1": 0, "10.0.3.2": 0}},
		{"5: clients in eu/b stay in their zone", []string{"-f", spillDir, "--from", "eu/b"}, spillNone,
			map[string]uint64{"eu/a": 0, "eu/b": 1_000_000, "us/c": 0},
			map[string]uint64{"10.0.1.1": 0, "10.0.1.2": 0, "10.0.2.1": 500_000, "10.0.2.2": 500_000, "10.0.3.1": 0, "10.0.3.2": 0}},
		{"5: clients in us/c stay in their zone", []string{"-f", spillDir, "--from", "us/c/rack-9"}, spillNone,
			map[string]uint64{"eu/a": 0, "eu/b": 0, "us/c": 1_000_000},
			map[string]uint64{"10.0.1.1": 0, "10.0.1.2": 0, "10.0.2.1": 0, "10.0.2.2": 0, "10.0.3.1": 500_000, "10.0.3.2": 500_000}},
		{"6: clients in eu/a keep two thirds", []string{"-f", balancedDir, "--from", "eu/a", "--demand", "eu/a=3,eu/b=1"}, balancedNone,
			map[string]uint64{"eu/a": 666_667, "eu/b": 333_333},
			map[string]uint64{"10.1.1.1": 333_334, "10.1.1.2": 333_333, "10.1.2.1": 166_667, "10.1.2.2": 166_666}},
		{"6: clients in eu/b keep all", []string{"-f", balancedDir, "--from", "eu/b", "--demand", "eu/a=3,eu/b=1"}, balancedNone,
			map[string]uint64{"eu/a": 0, "eu/b": 1_000_000},
			map[string]uint64{"10.1.1.1": 0, "10.1.1.2": 0, "10.1.2.1": 500_000, "10.1.2.2": 500_000}},
		{"6: bare zones, any order", []string{"-f", balancedDir, "--from", "eu/a", "--demand", "b=1, a=3"}, balancedNone,
			map[string]uint64{"eu/a": 666_667, "eu/b": 333_333},
			map[string]uint64{"10.1.1.1": 333_334, "10.1.1.2": 333_333, "10.1.2.1": 166_667, "10.1.2.2": 166_666}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, u := explainFrom(t, tc.args...)
			if none, _ := splitOf(u.Split); !reflect.DeepEqual(none, tc.none) {
				t.Errorf("None split %v, want %v", none, tc.none)
			}
			c := u.Class
			if c.ReceivesNone || c.Split == nil {
				t.Fatalf("class receives None: %+v", c)
			}
			loc, eps := splitOf(*c.Split)
			if !reflect.DeepEqual(loc, tc.localites) {
				t.Errorf("localities %v, want %v", loc, tc.localites)
			}
			if !reflect.DeepEqual(eps, tc.endpoints) {
				t.Errorf("endpoints %v, want %v", eps, tc.endpoints)
			}
			var load uint64
			for _, p := range c.Split.Priorities {
				load += p.Load
			}
			if load != 1_000_000 {
				t.Errorf("the class's priority loads sum to %d", load)
			}
		})
	}
}

func TestExplainFromDerivation(t *testing.T) {
	rep, u := explainFrom(t, "-f", spillDir, "--from", "eu/a/rack-1")
	if want := (&explain.From{Region: "eu", Zone: "a", SubZone: "rack-1"}); !reflect.DeepEqual(rep.From, want) || rep.Demand != nil {
		t.Errorf("from %+v, demand %+v", rep.From, rep.Demand)
	}
	c := u.Class
	if c.Mode != "PreferSameZone" || c.Region != "eu" || c.Zone != "a" {
		t.Errorf("class %s %s/%s", c.Mode, c.Region, c.Zone)
	}
	if want := []explain.ZoneRank{
		{Region: "eu", Zone: "a", Rank: 0, Proximity: "SameZone"},
		{Region: "eu", Zone: "b", Rank: 1, Proximity: "SameRegion"},
		{Region: "us", Zone: "c", Rank: 2, Proximity: "OtherRegion"},
	}; !reflect.DeepEqual(c.Ranks, want) {
		t.Errorf("ranks %+v", c.Ranks)
	}
	if want := []explain.EffectivePriority{
		{ConfiguredPriority: 0, Rank: 0, EffectivePriority: 0},
		{ConfiguredPriority: 0, Rank: 1, EffectivePriority: 1},
		{ConfiguredPriority: 0, Rank: 2, EffectivePriority: 2},
	}; !reflect.DeepEqual(c.Effective, want) {
		t.Errorf("effective priorities %+v", c.Effective)
	}
	if h := c.Split.Priorities[0].Health; h != 700_000 {
		t.Errorf("health of effective priority 0 = %d, want 700000", h)
	}

	rep, u = explainFrom(t, "-f", balancedDir, "--from", "eu/a", "--demand", "eu/b=1,eu/a=3")
	if want := []explain.DemandEntry{{Region: "eu", Zone: "a", Weight: 3}, {Region: "eu", Zone: "b", Weight: 1}}; !reflect.DeepEqual(rep.Demand, want) {
		t.Errorf("demand %+v, want %+v (canonical order)", rep.Demand, want)
	}
	b := u.Class.Balanced
	if b == nil || b.DemandSource != explain.DemandGiven || b.RoutableMillionths != 1_000_000 || b.Demand != 4 || b.KeepsAll {
		t.Fatalf("balanced %+v", b)
	}
	twoThirds, third := uint64(666_667), uint64(333_333)
	want := []explain.BalancedZone{
		{Region: "eu", Zone: "a", Supply: 500_000, Demand: 3, Surplus: big.NewInt(-1_000_000), Weight: big.NewInt(2_000_000 * 1_000_000), Traffic: &twoThirds},
		{Region: "eu", Zone: "b", Supply: 500_000, Demand: 1, Surplus: big.NewInt(1_000_000), Weight: big.NewInt(1_000_000 * 1_000_000), Traffic: &third},
	}
	if !reflect.DeepEqual(b.Zones, want) || b.SurplusSum.Cmp(big.NewInt(1_000_000)) != 0 {
		t.Errorf("zones %+v, S %v", b.Zones, b.SurplusSum)
	}
	// over all clients, weighted by demand: the None split to the rounding
	_, ub := explainFrom(t, "-f", balancedDir, "--from", "eu/b", "--demand", "eu/b=1,eu/a=3")
	a, _ := splitOf(*u.Class.Split)
	bb, _ := splitOf(*ub.Class.Split)
	if sa, sb := 3*a["eu/a"]+bb["eu/a"], 3*a["eu/b"]+bb["eu/b"]; sa != 2_000_001 || sb != 1_999_999 {
		t.Errorf("demand-weighted load ×4: eu/a %d, eu/b %d; want 2000001 and 1999999", sa, sb)
	}

	_, u = explainFrom(t, "-f", balancedDir, "--from", "eu/a")
	if c := u.Class; !c.ReceivesNone || c.Reason != "no client declares demand" || c.Split != nil || c.Balanced.DemandSource != explain.DemandNone {
		t.Errorf("without --demand: %+v", c)
	}
	_, u = explainFrom(t, "-f", examples, "--upstream", "shop/checkout", "--from", "eu-west/eu-west-1a")
	if c := u.Class; c.Mode != "None" || !c.ReceivesNone || c.Region != "" || c.Split != nil || !strings.Contains(c.Reason, "every client receives the same split") {
		t.Errorf("an upstream without affinity: %+v", c)
	}
}

// The JSON and the text describe the same report, big integers included.
func TestExplainFromJSONRoundTrip(t *testing.T) {
	for _, args := range [][]string{
		{"-f", spillDir, "--from", "eu/a/rack-1", "--simulate", "1000"},
		{"-f", balancedDir, "--from", "eu/a", "--demand", "eu/a=3,eu/b=1", "--simulate", "1000"},
		{"-f", balancedDir, "--from", "eu/a"},
	} {
		rep, _ := explainFrom(t, args...)
		_, text, _ := runCLI(append([]string{"explain"}, args...)...)
		var buf bytes.Buffer
		if err := explain.WriteText(&buf, rep); err != nil {
			t.Fatal(err)
		}
		if buf.String() != text {
			t.Errorf("%v: text from the decoded JSON differs:\n%s", args, golden.Diff(text, buf.String()))
		}
	}
}

// With --simulate the class is drawn from too: clients in eu/a never reach
// us/c, and every pick lands somewhere.
func TestExplainFromSimulate(t *testing.T) {
	_, u := explainFrom(t, "-f", spillDir, "--from", "eu/a", "--simulate", "20000", "--seed", "7")
	s := u.Class.Split
	if s.Simulation == nil || s.Simulation.Picks != 20000 {
		t.Fatalf("class simulation %+v", s.Simulation)
	}
	total := s.Simulation.Dropped
	for _, p := range s.Priorities {
		for _, l := range p.Localities {
			total += *l.Observed
			if l.Region == "us" && *l.Observed != 0 {
				t.Errorf("us/c was picked %d times by clients in eu/a", *l.Observed)
			}
		}
	}
	if total != 20000 {
		t.Errorf("observed %d picks", total)
	}
}

// The order of --demand does not change a byte of the output, and a bare
// zone explains as its full name (the header shows the demand as given).
func TestExplainFromDeterministic(t *testing.T) {
	run := func(demand string) (all, upstreams string) {
		_, out, stderr := runCLI("explain", "-f", balancedDir, "--from", "eu/a", "--demand", demand)
		_, body, ok := strings.Cut(out, "\n\nUpstream")
		if !ok {
			t.Fatalf("--demand %q: no upstream in the output: %s", demand, stderr)
		}
		return out, body
	}
	first, body := run("eu/a=3,eu/b=1")
	for _, d := range []string{"eu/b=1,eu/a=3", " eu/a=3 , eu/b=1 "} {
		if again, _ := run(d); again != first {
			t.Errorf("--demand %q: output differs:\n%s", d, golden.Diff(first, again))
		}
	}
	for _, d := range []string{"b=1,a=3", " a=3 , eu/b=1 "} {
		if _, again := run(d); again != body {
			t.Errorf("--demand %q: the upstream differs:\n%s", d, golden.Diff(body, again))
		}
	}
}

func TestExplainFromErrors(t *testing.T) {
	dir := t.TempDir()
	// zone "a" in two regions: a bare "a" is ambiguous
	twoRegions := write(t, dir, "two.yaml", upstream("web")+"spec: {localityAffinity: {mode: Balanced}}\n---\n"+
		endpointSet("web-a", "web", "a", "[{address: 10.0.0.1, port: 80}]")+"---\n"+
		strings.Replace(endpointSet("web-us-a", "web", "a", "[{address: 10.0.0.2, port: 80}]"), "region: eu", "region: us", 1))
	long := strings.Repeat("z", 129)
	many := make([]string, 65)
	for i := range many {
		many[i] = "eu/z" + strconv.Itoa(i) + "=1"
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"--from without zone", []string{"--from", "eu"}, exitUsage, `--from "eu": want REGION/ZONE[/SUBZONE]`},
		{"--from too deep", []string{"--from", "eu/a/b/c"}, exitUsage, `--from "eu/a/b/c": want REGION/ZONE[/SUBZONE]`},
		{"--from empty region", []string{"--from", "/a"}, exitUsage, `--from "/a": the region is empty`},
		{"--from empty", []string{"--from", ""}, exitUsage, `--from "": want REGION/ZONE[/SUBZONE]`},
		{"--from long zone", []string{"--from", "eu/" + long}, exitUsage, "the zone is 129 bytes, at most 128"},
		{"--from control character", []string{"--from", "eu/a\n"}, exitUsage, "the zone is not printable UTF-8 text"},
		{"--from huge", []string{"--from", strings.Repeat("x", 1000)}, exitUsage, "--from 1000 bytes"},
		{"--demand without --from", []string{"--demand", "eu/a=1"}, exitUsage, "--demand needs --from"},
		{"--demand empty", []string{"--from", "eu/a", "--demand", ""}, exitUsage, "--demand empty"},
		{"--demand without weight", []string{"--from", "eu/a", "--demand", "eu/a"}, exitUsage, `--demand "eu/a": want REGION/ZONE=N`},
		{"--demand zero", []string{"--from", "eu/a", "--demand", "eu/a=0"}, exitUsage, `--demand "eu/a=0": weight "0": want an integer 1..1000000`},
		{"--demand too large", []string{"--from", "eu/a", "--demand", "eu/a=1000001"}, exitUsage, `weight "1000001": want an integer 1..1000000`},
		{"--demand negative", []string{"--from", "eu/a", "--demand", "eu/a=-1"}, exitUsage, `weight "-1"`},
		{"--demand subZone", []string{"--from", "eu/a", "--demand", "eu/a/x=1"}, exitUsage, "demand is per zone, without subZone"},
		{"--demand twice", []string{"--from", "eu/a", "--demand", "eu/a=1,eu/a=2"}, exitUsage, "eu/a is given twice"},
		{"--demand long name", []string{"--from", "eu/a", "--demand", long + "/a=1"}, exitUsage, "the region is 129 bytes, at most 128"},
		{"--demand 65 zones", []string{"--from", "eu/a", "--demand", strings.Join(many, ",")}, exitUsage, "--demand 65 zones, at most 64"},
		{"--demand huge", []string{"--from", "eu/a", "--demand", strings.Repeat("x", 20_000)}, exitUsage, "--demand 20000 bytes, at most"},
		{"--from missing from --demand", []string{"-f", balancedDir, "--from", "eu/c", "--demand", "eu/a=3,eu/b=1"}, exitUsage,
			"--demand eu/a=3,eu/b=1: upstream shop/balanced: localityAffinity Balanced: the demand has no entry for eu/c"},
		{"bare zone unknown", []string{"-f", balancedDir, "--from", "eu/a", "--demand", "a=3,c=1"}, exitUsage, `zone "c" is none of its zones; write REGION/ZONE=N`},
		{"bare zone ambiguous", []string{"-f", twoRegions, "--from", "eu/a", "--demand", "a=3"}, exitUsage, `upstream shop/web: zone "a" is in regions eu, us; write REGION/ZONE=N`},
		{"bare and full zone", []string{"-f", balancedDir, "--from", "eu/a", "--demand", "a=3,eu/a=1"}, exitUsage, `eu/a is given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"explain"}, tc.args...)
			if !strings.Contains(strings.Join(tc.args, " "), "-f ") {
				args = append(args, "-f", balancedDir)
			}
			code, stdout, stderr := runCLI(args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d (want %d), stderr:\n%s\nwant it to contain %q", code, tc.code, stderr, tc.stderr)
			}
			if stdout != "" {
				t.Errorf("stdout should be empty on failure:\n%s", stdout)
			}
			checkNoCrash(t, stderr)
		})
	}
	// demand a zone in only one region resolves in the other upstream's files
	if code, _, stderr := runCLI("explain", "-f", filepath.Join(dir, "two.yaml"), "--from", "us/a", "--demand", "eu/a=1,us/a=1"); code != exitOK {
		t.Errorf("full names in an upstream with zone a twice: exit %d: %s", code, stderr)
	}
}

// The explain --from runs shown in docs/weights.md are real: every line of
// each excerpt is a line of the command's output, in order ("…" marks
// what the excerpt leaves out).
func TestWeightsDocExplainFromExcerpts(t *testing.T) {
	doc, err := os.ReadFile("../../docs/weights.md")
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for _, block := range strings.Split(string(doc), "```\n$ controlplane ")[1:] {
		block, _, _ = strings.Cut(block, "```")
		command, excerpt, _ := strings.Cut(block, "\n")
		args := strings.Fields(command)
		for i := range args {
			if i > 0 && args[i-1] == "-f" {
				args[i] = filepath.Join("../..", args[i]) // the docs run from the repository's root
			}
		}
		code, stdout, stderr := runCLI(args...)
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", command, code, stderr)
		}
		out := strings.Split(stdout, "\n")
		at := 0
		for _, line := range strings.Split(strings.TrimSuffix(excerpt, "\n"), "\n") {
			if line == "…" {
				continue
			}
			for at < len(out) && out[at] != line {
				at++
			}
			if at == len(out) {
				t.Errorf("%s: the output has no line %q here", command, line)
				break
			}
		}
		runs++
	}
	if runs != 2 {
		t.Errorf("%d explain runs in docs/weights.md, want the 2 of examples 5 and 6", runs)
	}
}
