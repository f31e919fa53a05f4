package loadgen

import (
	"math/bits"
	"sync/atomic"
)

// Histogram counts durations in whole microseconds, log-linear: exact below
// 64 µs, then 32 buckets per power of two (each at most 1/32 = 3.1 % wide),
// up to 2^40 µs (12.7 days; longer ones count in the last bucket). Record
// is safe for concurrent use; percentiles are a bucket's upper bound, so
// they are deterministic for given counts and never below the true value.
type Histogram struct {
	counts [histBuckets]atomic.Int64
	maxUs  atomic.Int64
}

const (
	histLinear  = 64
	histSub     = 32
	histShifts  = 35
	histBuckets = histLinear + histShifts*histSub
)

// bucketOf is the bucket of us microseconds.
func bucketOf(us uint64) int {
	if us < histLinear {
		return int(us)
	}
	shift := bits.Len64(us) - 6 // us>>shift is in [32, 63]
	if shift > histShifts {
		return histBuckets - 1
	}
	return histLinear + (shift-1)*histSub + int(us>>shift) - histSub
}

// bucketUpper is the largest value of bucket b, in microseconds.
func bucketUpper(b int) uint64 {
	if b < histLinear {
		return uint64(b)
	}
	shift := uint((b-histLinear)/histSub + 1)
	mant := uint64((b-histLinear)%histSub + histSub)
	return (mant+1)<<shift - 1
}

// Record counts one duration of ns nanoseconds (negative ones as 0).
func (h *Histogram) Record(ns int64) {
	us := max(ns, 0) / 1000
	h.counts[bucketOf(uint64(us))].Add(1)
	for {
		m := h.maxUs.Load()
		if us <= m || h.maxUs.CompareAndSwap(m, us) {
			return
		}
	}
}

// HistogramData is a histogram's counts, for JSON and for merging the
// counts of several processes: Buckets[i] counts the durations of at most
// Upper[i] µs (and above Upper[i-1]), zero buckets left out.
type HistogramData struct {
	Upper   []uint64 `json:"upperUs"`
	Buckets []int64  `json:"counts"`
	MaxUs   int64    `json:"maxUs"`
}

// Data is the histogram's counts now.
func (h *Histogram) Data() HistogramData {
	var d HistogramData
	for i := range h.counts {
		if n := h.counts[i].Load(); n > 0 {
			d.Upper = append(d.Upper, bucketUpper(i))
			d.Buckets = append(d.Buckets, n)
		}
	}
	d.MaxUs = h.maxUs.Load()
	return d
}

// Merge adds d's counts.
func (h *Histogram) Merge(d HistogramData) {
	for i, up := range d.Upper {
		if i < len(d.Buckets) {
			h.counts[bucketOf(up)].Add(d.Buckets[i])
		}
	}
	for {
		m := h.maxUs.Load()
		if d.MaxUs <= m || h.maxUs.CompareAndSwap(m, d.MaxUs) {
			return
		}
	}
}

// Dist is a distribution's count and percentiles, in microseconds.
type Dist struct {
	N     int64 `json:"n"`
	P50Us int64 `json:"p50Us"`
	P90Us int64 `json:"p90Us"`
	P99Us int64 `json:"p99Us"`
	MaxUs int64 `json:"maxUs"`
}

// Dist is the histogram's percentiles: nearest rank, each the upper bound
// of its bucket (at most the largest value recorded).
func (h *Histogram) Dist() Dist {
	d := h.Data()
	var n int64
	for _, c := range d.Buckets {
		n += c
	}
	out := Dist{N: n, MaxUs: d.MaxUs}
	if n == 0 {
		return out
	}
	q := func(num, den int64) int64 {
		rank := (n*num + den - 1) / den // ceil(n·p), at least 1
		rank = max(rank, 1)
		var seen int64
		for i, c := range d.Buckets {
			if seen += c; seen >= rank {
				return min(int64(d.Upper[i]), d.MaxUs)
			}
		}
		return d.MaxUs
	}
	out.P50Us, out.P90Us, out.P99Us = q(50, 100), q(90, 100), q(99, 100)
	return out
}
