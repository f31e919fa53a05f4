package main

import (
	"context"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/grpctraffic"
	"poise.dev/poise/pkg/topology"
)

// A command line the demo refuses exits 2 and says what is wrong.
func TestRefusedCommandLines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--clients", "eu-west=3"}, `"eu-west=3": want REGION/ZONE=N`},
		{[]string{"--clients", "eu/a=0"}, `"eu/a=0": want 1 to 20 clients`},
		{[]string{"--clients", "eu/a=1,eu/a=2"}, "zone eu/a is given twice"},
		{[]string{"--clients", "eu/a/x=1"}, `"eu/a/x=1": want REGION/ZONE=N`},
		{[]string{"--rate", "0"}, "--rate 0: want 1 to 1000 calls a second"},
		{[]string{"--window", "10"}, "--window 10: want 100 to 100000 calls"},
		{[]string{"--warmup", "2000"}, "--warmup 2000: want 0 to the window, 1000"},
		{[]string{"--every", "1ms"}, "--every 1ms: want 100ms to 1m"},
		{[]string{"--timeout", "2h"}, "--timeout 2h0m0s: want 1s to 1h"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--nope"}, "unknown flag: --nope"},
	} {
		var stderr strings.Builder
		args := append([]string{"--controlplane", "/nonexistent"}, tc.args...)
		if code := run(context.Background(), args, io.Discard, &stderr); code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), exitUsage, tc.want)
		}
	}
}

func TestParseClients(t *testing.T) {
	t.Parallel()
	got, err := parseClients("eu-west/eu-west-1a=3, eu-west/eu-west-1b=1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].from != (explain.From{Region: "eu-west", Zone: "eu-west-1a"}) || got[0].count != 3 || got[1].count != 1 {
		t.Errorf("got %+v", got)
	}
}

// testFlow is a flow of two clients over a window of 100 calls, without
// a warm-up, whose clients hold split at revision 5.
func testFlow(t *testing.T, split grpctraffic.Split) *flow {
	t.Helper()
	f := newFlow(topology.Key{Namespace: "shop", Name: "cart"}, explain.From{Region: "eu", Zone: "a"}, 100)
	f.nodes = []string{"n1", "n2"}
	if line := f.follow(split, 5); line != "" {
		t.Fatalf("the first split is no move: %q", line)
	}
	if line := f.ackedBy(map[string]string{"n1": "abc-5", "n2": "abc-4"}, 0); line != "" || !f.isSettling() {
		t.Fatalf("one client holds an older revision, yet the window starts: %q", line)
	}
	if line := f.ackedBy(map[string]string{"n1": "abc-5", "n2": "abc-6"}, 0); !strings.Contains(line, "the 2 clients in eu/a hold shop/cart's split") {
		t.Fatalf("both clients hold revision 5 or later: %q", line)
	}
	return f
}

// A window is judged once, when it is first full: within 4.5 σ of the
// split it is OK; a share off by more, an endpoint of share 0 that
// serves, or a failed call is OFF. Calls before the clients hold the
// split are not counted, and a split that moves starts the window again.
func TestFlowJudgesItsFirstFullWindow(t *testing.T) {
	t.Parallel()
	half := grpctraffic.Split{Share: map[string]uint64{"a:1": 500_000, "b:1": 500_000, "c:1": 0}}
	for _, tc := range []struct {
		name    string
		calls   map[string]int // outcome → calls
		ok      bool
		worstAt string
		worst   float64
	}{
		{"even", map[string]int{"a:1": 50, "b:1": 50}, true, "a:1", 0},
		{"4 σ", map[string]int{"a:1": 70, "b:1": 30}, true, "a:1", 4},
		{"5 σ", map[string]int{"a:1": 75, "b:1": 25}, false, "a:1", 5},
		{"share 0 serves", map[string]int{"a:1": 50, "b:1": 49, "c:1": 1}, false, "c:1", math.Inf(1)},
		{"a call fails", map[string]int{"a:1": 50, "b:1": 49, failed: 1}, false, failed, math.Inf(1)},
	} {
		f := testFlow(t, half)
		for outcome, n := range tc.calls {
			for range n {
				var err error
				if outcome == failed {
					err = errors.New("unavailable")
				}
				f.add(outcome, err)
			}
		}
		v := f.judged()
		if v == nil || v.ok != tc.ok || v.worstAt != tc.worstAt || math.Abs(v.worst-tc.worst) > 1e-9 || v.calls != 100 || v.revision != 5 {
			t.Errorf("%s: verdict %+v, want ok %v, worst %v at %s", tc.name, v, tc.ok, tc.worst, tc.worstAt)
		}
	}

	f := testFlow(t, half)
	for range 99 {
		f.add("a:1", nil)
	}
	if f.judged() != nil {
		t.Fatal("judged before the window is full")
	}
	moved := grpctraffic.Split{Share: map[string]uint64{"a:1": 1_000_000, "b:1": 0}}
	if line := f.follow(moved, 7); !strings.Contains(line, "revision 7: explain moves shop/cart for clients in eu/a: a:1 50.0000% → 100.0000%, b:1 50.0000% → 0.0000%") {
		t.Errorf("move: %q", line)
	}
	f.add("b:1", nil) // the clients still hold revision 5: not counted
	f.ackedBy(map[string]string{"n1": "abc-7", "n2": "abc-7"}, 10)
	for range 110 {
		f.add("a:1", nil) // the first 10 are the warm-up
	}
	if v := f.judged(); v == nil || !v.ok || v.revision != 7 || v.calls != 100 {
		t.Errorf("after the move: %+v", v)
	}
}
