package loadgen

import (
	"testing"
	"time"
)

// TestHistogramBuckets: every value falls in a bucket whose upper bound is
// at least it and less than 1/32 above it, and buckets are in order.
func TestHistogramBuckets(t *testing.T) {
	for _, us := range []uint64{0, 1, 63, 64, 65, 127, 128, 1000, 4095, 4096, 65535, 1 << 20, 123456789, 1<<40 - 1} {
		b := bucketOf(us)
		up := bucketUpper(b)
		if up < us || float64(up-us) > float64(us)/32 || b > 0 && bucketUpper(b-1) >= us {
			t.Errorf("%d µs: bucket %d up to %d, the one before up to %d", us, b, up, bucketUpper(b-1))
		}
	}
	if b := bucketOf(1 << 50); b != histBuckets-1 {
		t.Errorf("2^50 µs: bucket %d, want the last, %d", b, histBuckets-1)
	}
}

// TestHistogramDist: nearest-rank percentiles, each a bucket's upper
// bound, never above the largest value; merging adds counts.
func TestHistogramDist(t *testing.T) {
	for _, tc := range []struct {
		name  string
		us    []int64
		want  Dist
		merge int // times the data is merged into a second histogram
	}{
		{"empty", nil, Dist{}, 1},
		{"one", []int64{1500}, Dist{N: 1, P50Us: 1500, P90Us: 1500, P99Us: 1500, MaxUs: 1500}, 1},
		{"exact below 64 µs", []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, Dist{N: 10, P50Us: 5, P90Us: 9, P99Us: 10, MaxUs: 10}, 1},
		{"a tail", append(make([]int64, 98), 100_000, 2_000_000), Dist{N: 100, P50Us: 0, P90Us: 0, P99Us: 100351, MaxUs: 2_000_000}, 1},
		{"merged twice", []int64{10, 20}, Dist{N: 4, P50Us: 10, P90Us: 20, P99Us: 20, MaxUs: 20}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h, m Histogram
			for _, us := range tc.us {
				h.Record(int64(time.Duration(us) * time.Microsecond))
			}
			for range tc.merge {
				m.Merge(h.Data())
			}
			if got := m.Dist(); got != tc.want {
				t.Errorf("dist %+v, want %+v", got, tc.want)
			}
		})
	}
}
