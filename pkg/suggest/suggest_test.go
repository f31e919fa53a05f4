package suggest

import (
	"slices"
	"strings"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"weight", "weight", 0},
		{"weigth", "weight", 1},  // transposition
		{"wieght", "weight", 1},  // transposition
		{"weght", "weight", 1},   // deletion
		{"weightt", "weight", 1}, // insertion
		{"weigjt", "weight", 1},  // substitution
		{"checkuot", "checkout", 1},
		{"eu-west-la", "eu-west-1a", 1},
		{"poise.io", "poise.dev", 3}, // above the limit: limit+1
		{"ca", "abc", 3},             // optimal string alignment, not unrestricted
		{"abc", "xyz", 3},
	} {
		want := min(tc.want, MaxDistance+1)
		if got := Distance(tc.a, tc.b, MaxDistance); got != want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, want)
		}
		if got := Distance(tc.b, tc.a, MaxDistance); got != want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, want)
		}
	}
	long := strings.Repeat("a", MaxLength+1)
	if got := Distance(long, long, MaxDistance); got != MaxDistance+1 {
		t.Errorf("a name past MaxLength: distance %d, want none (%d)", got, MaxDistance+1)
	}
}

func TestClosest(t *testing.T) {
	fields := []string{"upstream", "priority", "region", "zone", "subZone", "weight"}
	for _, tc := range []struct {
		name string
		want string // "" for none
	}{
		{"weigth", "weight"},
		{"upstrem", "upstream"},
		{"subzone", "subZone"},
		{"zoen", "zone"},
		{"colour", ""}, // nothing near
		{"weight", ""}, // itself is not a suggestion
		{"zo", ""},     // two edits of a two-letter name is a guess
		{"wei", ""},    // three edits away
	} {
		got, ok := Closest(tc.name, fields)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("Closest(%q) = %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
	// two candidates equally near: neither is suggested
	if got, ok := Closest("ab", []string{"aa", "bb"}); ok {
		t.Errorf("a tie suggested %q", got)
	}
}

// FuzzDistance: the distance is symmetric, zero only for equal strings,
// bounded by the longer length, and never above the limit it returns.
func FuzzDistance(f *testing.F) {
	f.Add("weigth", "weight")
	f.Add("", "abc")
	f.Add("eu-west-la", "eu-west-1a")
	f.Fuzz(func(t *testing.T, a, b string) {
		d := Distance(a, b, MaxDistance)
		if d != Distance(b, a, MaxDistance) {
			t.Fatalf("asymmetric: %q %q", a, b)
		}
		if (d == 0) != (a == b) && len(a) <= MaxLength && len(b) <= MaxLength {
			t.Fatalf("distance %d between %q and %q", d, a, b)
		}
		if d > MaxDistance+1 || d > max(len(a), len(b)) && d <= MaxDistance {
			t.Fatalf("distance %d between %q and %q", d, a, b)
		}
	})
}

func TestNames(t *testing.T) {
	t.Parallel()
	names := []string{"shop/checkout", "web/checkout", "shop/cart", "shop/catalog"}
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"checkout", []string{"shop/checkout", "web/checkout"}},       // the name alone: every namespace's
		{"tools/checkout", []string{"shop/checkout", "web/checkout"}}, // another namespace
		{"shop/chekout", []string{"shop/checkout"}},                   // a slip
		{"shop/checkout", []string{"web/checkout"}},                   // itself is never suggested
		{"shop/payments", nil},                                        // ...nor what is far away
	} {
		got := Names(tc.name, names, 3)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Names(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := Names("checkout", names, 1); !slices.Equal(got, []string{"shop/checkout"}) {
		t.Errorf("Names limited to 1 = %q", got)
	}
}
