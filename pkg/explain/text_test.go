package explain

import "testing"

func TestPercentIsExactIntegerFormatting(t *testing.T) {
	for _, tc := range []struct {
		m    uint64
		want string
	}{
		{0, "0.0000%"}, {1, "0.0001%"}, {259_259, "25.9259%"}, {740_741, "74.0741%"},
		{999_999, "99.9999%"}, {1_000_000, "100.0000%"},
	} {
		if got := Percent(tc.m); got != tc.want {
			t.Errorf("Percent(%d) = %q, want %q", tc.m, got, tc.want)
		}
	}
}

func TestObservedPercent(t *testing.T) {
	if got := observedPercent(1, 3); got != "33.3333%" {
		t.Errorf("observedPercent(1, 3) = %q", got)
	}
	if got := observedPercent(5, 0); got != "0.0000%" {
		t.Errorf("observedPercent(5, 0) = %q", got)
	}
}
