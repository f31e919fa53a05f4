package loadgen

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestEndReason(t *testing.T) {
	long := strings.Repeat("é", 200)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, "no error"},
		{"plain", errors.New("the plane ended the stream"), "the plane ended the stream"},
		{"status, ports written N", status.Error(codes.Unavailable, "read tcp 127.0.0.1:43122->127.0.0.1:18700: connection reset by peer"),
			"Unavailable: read tcp N.N.N.N:N->N.N.N.N:N: connection reset by peer"},
		{"wrapped status", fmt.Errorf("stream: %w", status.Error(codes.ResourceExhausted, "too many streams (25000)")),
			"ResourceExhausted: too many streams (N)"},
		{"control bytes", errors.New("a\nb\tc\x00d"), "a b c d"},
		{"cut within the bound, on a rune", errors.New(long), strings.Repeat("é", maxEndReasonLen/2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := endReason(tc.err)
			if got != tc.want {
				t.Errorf("endReason(%v) = %q, want %q", tc.err, got, tc.want)
			}
			if len(got) > maxEndReasonLen || !utf8.ValidString(got) {
				t.Errorf("endReason(%v) = %q: %d bytes (bound %d), valid UTF-8 %v", tc.err, got, len(got), maxEndReasonLen, utf8.ValidString(got))
			}
		})
	}
}

// Ends of more reasons than the bound are counted, the surplus as other,
// and merging parts keeps the bound and every count.
func TestStreamEndsBounded(t *testing.T) {
	f, err := NewFleet("127.0.0.1:1", nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * maxEndReasons {
		f.ended(fmt.Errorf("reason %c", 'a'+i))
		f.ended(fmt.Errorf("reason %c", 'a'+i))
	}
	ends := f.Counters().StreamEnds
	if len(ends) != maxEndReasons+1 || ends[otherEndReason] != 2*2*maxEndReasons || ends["reason a"] != 2 {
		t.Fatalf("ends %v: want %d reasons of 2 and %q of %d", ends, maxEndReasons, otherEndReason, 4*maxEndReasons)
	}
	var r Report
	r.add(PartResult{Counters: Counters{StreamEnds: ends}})
	r.add(PartResult{Counters: Counters{StreamEnds: map[string]int64{"reason z": 5, "reason a": 1}}})
	var total int64
	for _, n := range r.Counters.StreamEnds {
		total += n
	}
	if len(r.Counters.StreamEnds) != maxEndReasons+1 || total != 6*maxEndReasons+6 || r.Counters.StreamEnds["reason a"] != 3 ||
		r.Counters.StreamEnds[otherEndReason] != 4*maxEndReasons+5 {
		t.Fatalf("merged %v (%d ends): want %d reasons, %d ends, reason a 3 and other %d", r.Counters.StreamEnds, total,
			maxEndReasons+1, 6*maxEndReasons+6, 4*maxEndReasons+5)
	}
}
