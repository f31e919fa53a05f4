package loadreport

import "math/bits"

// u128 is an unsigned 128-bit integer: the exact weight of one cluster's
// stats in a report, which may pass 64 bits (MaxEndpointStats stats of up
// to 2^65 each stay below 2^83).
type u128 struct{ hi, lo uint64 }

func (a u128) plus(b uint64) u128 {
	lo, carry := bits.Add64(a.lo, b, 0)
	return u128{a.hi + carry, lo}
}

func (a u128) plus128(b u128) u128 {
	lo, carry := bits.Add64(a.lo, b.lo, 0)
	return u128{a.hi + b.hi + carry, lo}
}

func (a u128) minus(b uint64) u128 {
	lo, borrow := bits.Sub64(a.lo, b, 0)
	return u128{a.hi - borrow, lo}
}

func (a u128) less(b u128) bool { return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo }

// shl is a << n, for n < 64 and a << n below 2^128.
func (a u128) shl(n uint) u128 { return u128{a.hi<<n | a.lo>>(64-n), a.lo << n} }

// saturated is a, or the largest uint64 when a does not fit.
func (a u128) saturated() uint64 {
	if a.hi != 0 {
		return 1<<64 - 1
	}
	return a.lo
}

// max of two u128.
func max128(a, b u128) u128 {
	if a.less(b) {
		return b
	}
	return a
}

// scale is ⌊x × r / w⌋, exactly, for x ≤ w, 0 < w and r ≤ MaxMaxRequests:
// x's part of r in the proportion x : w, rounded down. The result is at
// most r.
func scale(x, r uint64, w u128) uint64 {
	hi, lo := bits.Mul64(x, r)
	if w.hi == 0 {
		// hi < w.lo since x ≤ w.lo: the quotient fits
		q, _ := bits.Div64(hi, lo, w.lo)
		return q
	}
	// w ≥ 2^64: the quotient is at most r < 2^32, found a bit at a time
	// (w < 2^83, so w << 31 fits).
	n, q := u128{hi, lo}, uint64(0)
	for i := 31; i >= 0; i-- {
		if d := w.shl(uint(i)); !n.less(d) {
			n = u128{n.hi - d.hi, n.lo}.minus(d.lo)
			q |= 1 << i
		}
	}
	return q
}

// capLog bounds the log of capped reports: at most one line per
// cappedLogEvery, the capped reports in between counted on the next line.
type capLog struct {
	last     int64 // unix ns of the last line; 0 before the first
	unlogged uint64
}

// capLine is one log line of a capped report.
type capLine struct {
	reporter, cluster string
	reported, kept    uint64
	unlogged          uint64
}

// note records a capped report at now (unix ns) and returns its line when
// one is due.
func (l *capLog) note(reporter, cluster string, reported, kept uint64, now int64) *capLine {
	if l.last != 0 && now-l.last < int64(cappedLogEvery) {
		l.unlogged++
		return nil
	}
	line := &capLine{reporter: reporter, cluster: cluster, reported: reported, kept: kept, unlogged: l.unlogged}
	l.last, l.unlogged = now, 0
	return line
}
