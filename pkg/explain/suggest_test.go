package explain

import (
	"slices"
	"testing"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// TestSuggestUpstream: an upstream asked for by a name it has in other
// namespaces is suggested there (at most three); else the one a slip of the
// finger away, unless two are as near.
func TestSuggestUpstream(t *testing.T) {
	var b topology.Batch
	for _, k := range []string{"a/web", "b/web", "c/web", "d/web", "shop/checkout", "shop/checkin", "shop/aa", "shop/ab"} {
		key, err := topology.ParseKey(k)
		if err != nil {
			t.Fatal(err)
		}
		b.PutUpstream(topology.Upstream{Key: key, Policy: weights.DefaultPolicy()})
	}
	snap, err := topology.NewDirectory().Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ask  string
		want []string
		text string
	}{
		{"default/web", []string{"a/web", "b/web", "c/web"}, "; did you mean a/web, b/web or c/web?"},
		{"default/checkout", []string{"shop/checkout"}, "; did you mean shop/checkout?"},
		{"shop/checkut", []string{"shop/checkout"}, "; did you mean shop/checkout?"},
		{"shop/ac", nil, ""},     // shop/aa and shop/ab are as near: neither
		{"shop/zzzzzz", nil, ""}, // nothing near
	} {
		k, _ := topology.ParseKey(tc.ask)
		got := SuggestUpstream(snap, k)
		if !slices.Equal(got, tc.want) || DidYouMean(got) != tc.text {
			t.Errorf("%s: %v %q, want %v %q", tc.ask, got, DidYouMean(got), tc.want, tc.text)
		}
	}
}
