package conditions

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestList(t *testing.T) {
	for _, tc := range []struct {
		items []string
		want  string
	}{
		{nil, ""},
		{[]string{"a"}, "a"},
		{[]string{"a", "b", "c"}, "a; b; c"},
		{[]string{"a", "b", "c", "d", "e"}, "a; b; c; and 2 more"},
	} {
		if got := List(tc.items); got != tc.want {
			t.Errorf("List(%q) = %q, want %q", tc.items, got, tc.want)
		}
	}
}

func TestClipKeepsRunesWhole(t *testing.T) {
	s := strings.Repeat("é", 10) // two bytes each
	for n := 0; n <= len(s)+1; n++ {
		got := Clip(s, n)
		if len(got) > n || !utf8.ValidString(got) || !strings.HasPrefix(s, got) || len(got) < n-1 {
			t.Errorf("Clip(%d) = %q (%d bytes)", n, got, len(got))
		}
	}
}
