package loadgen

import "testing"

// TestFlipLogCredit: a receipt credits the flips written before it; one
// that a flip logged later (a worker reading its pipe late) explains is
// credited when the flip arrives, and only with the first uncredited flip.
func TestFlipLogCredit(t *testing.T) {
	type step struct {
		flip    bool  // log a flip at at, else a receipt at at
		at      int64 // µs
		wantDel int64 // deliveries after the step
	}
	for _, tc := range []struct {
		name        string
		steps       []step
		wantPending int64
		wantMaxMs   int64
	}{
		{"in order", []step{{true, 1000, 0}, {false, 5000, 1}}, 0, 4},
		{"coalesced", []step{{true, 1000, 0}, {true, 2000, 0}, {false, 9000, 2}}, 0, 8},
		{"receipt read first", []step{{false, 5000, 0}, {true, 1000, 1}}, 0, 4},
		{"receipt before the flip", []step{{false, 500, 0}, {true, 1000, 0}}, 0, 0},
		{"unexplained", []step{{true, 1000, 0}, {false, 5000, 1}, {false, 6000, 1}}, 1, 4},
		{"late then in order", []step{{false, 5000, 0}, {true, 1000, 1}, {true, 7000, 1}, {false, 9000, 2}}, 0, 4},
		// two flips in one publication, the second's log read after the
		// receipt that holds both: credited when it is logged
		{"coalesced, the second logged late", []step{{true, 1000, 0}, {false, 5000, 1}, {true, 2000, 2}}, 0, 4},
		{"explained, then a later flip", []step{{true, 1000, 0}, {false, 5000, 1}, {true, 6000, 1}, {false, 9000, 2}}, 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			var delivered int64
			l := NewFlipLog(1, []int32{1}, &h, func(n int) { delivered += int64(n) })
			var cursor int32
			for i, s := range tc.steps {
				if s.flip {
					l.Add(0, s.at*1000)
				} else {
					l.credit(0, &cursor, s.at*1000)
				}
				if delivered != s.wantDel {
					t.Fatalf("step %d: %d deliveries, want %d", i, delivered, s.wantDel)
				}
			}
			if p := l.Pending(); p != tc.wantPending {
				t.Errorf("%d pending, want %d", p, tc.wantPending)
			}
			if d := h.Dist(); d.MaxUs != tc.wantMaxMs*1000 && d.N > 0 || d.N != delivered {
				t.Errorf("dist %+v; want %d deliveries, the longest %d ms", d, delivered, tc.wantMaxMs)
			}
		})
	}
}
