package loadgen

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParsePhase(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Phase
		err  string
	}{
		{in: "hot:hot:0.25:40s", want: Phase{Name: "hot", Select: Select{Kind: "hot"}, Rate: 0.25, Duration: 40 * time.Second}},
		{in: "tail:share=1:2:1m", want: Phase{Name: "tail", Select: Select{Kind: "share", Percent: 1}, Rate: 2, Duration: time.Minute}},
		{in: "churn_1:all:200:5m", want: Phase{Name: "churn_1", Select: Select{Kind: "all"}, Rate: 200, Duration: 5 * time.Minute}},
		{in: "hot:hot:1", err: "not four fields"},
		{in: ":hot:1:1s", err: "name"},
		{in: "a b:hot:1:1s", err: "name"},
		{in: "x:some:1:1s", err: `selection "some"`},
		{in: "x:share=0:1:1s", err: "share"},
		{in: "x:share=101:1:1s", err: "share"},
		{in: "x:share=NaN:1:1s", err: "share"},
		{in: "x:all:0:1s", err: "rate"},
		{in: "x:all:NaN:1s", err: "rate"},
		{in: "x:all:100001:1s", err: "rate"},
		{in: "x:all:1:0s", err: "duration"},
		{in: "x:all:1:25h", err: "duration"},
	} {
		got, err := ParsePhase(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParsePhase(%q) = %v, %v; want an error about %s", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParsePhase(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if again, err := ParsePhase(got.String()); err != nil || again != got {
			t.Errorf("ParsePhase(%q.String() = %q) = %+v, %v", tc.in, got.String(), again, err)
		}
	}
}

func TestSelectTargets(t *testing.T) {
	// 100 clients; clusters 0 and 1 hot; the others' subscribers fall.
	subs := []int32{100, 100, 40, 11, 9, 1, 0, 1, 2, 10, 3, 1}
	for _, tc := range []struct {
		sel  Select
		want []int32
	}{
		{Select{Kind: "all"}, []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
		{Select{Kind: "hot"}, []int32{0, 1}},
		// nearest 10 first, ties by index; a cluster nobody uses never.
		{Select{Kind: "share", Percent: 10}, []int32{9, 3, 4, 10, 8, 5, 7, 11}},
		{Select{Kind: "share", Percent: 100}, []int32{0, 1, 2, 3, 9, 4, 10, 8}},
	} {
		got, err := tc.sel.Targets(subs, 100, 2)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.sel, got, err, tc.want)
		}
	}
	if got, err := (Select{Kind: "hot"}).Targets([]int32{100, 90, 5}, 100, 2); err != nil || !slices.Equal(got, []int32{0}) {
		t.Errorf("hot, the second used by 90 of 100: %v, %v; want [0]", got, err)
	}
	if _, err := (Select{Kind: "hot"}).Targets(subs, 100, 0); err == nil {
		t.Error("hot with no hot clusters: no error")
	}
	if _, err := (Select{Kind: "share", Percent: 1}).Targets(make([]int32, 4), 100, 0); err == nil {
		t.Error("share when nobody subscribes: no error")
	}
}

func TestRSSDrift(t *testing.T) {
	for _, tc := range []struct {
		samples     []float64
		first, last float64
	}{
		{nil, 0, 0},
		{[]float64{1, 2}, 0, 0},
		{[]float64{100, 120, 110}, 100, 110},
		{[]float64{100, 130, 90, 500, 140, 120}, 130, 140},
	} {
		first, last := (RSSTrace{SamplesMiB: tc.samples}).Drift()
		if first != tc.first || last != tc.last {
			t.Errorf("Drift(%v) = %v, %v; want %v, %v", tc.samples, first, last, tc.first, tc.last)
		}
	}
}
