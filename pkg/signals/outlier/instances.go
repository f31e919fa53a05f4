package outlier

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
)

// Counting failing instances over replicas.
//
// minReporters counts distinct workload instances: an authenticated
// client reports as its instance ("pod:UID", "cert:HASH", "sa:NS/SA"), an
// anonymous one as its node ID, and one replica's load-report store holds
// each once however many streams or node IDs it uses. In Kubernetes one
// instance may report to several replicas, and their counts add up in
// Merge; so each replica also shares, per endpoint, its failing
// reporters as an InstanceSet: the InstanceHash of each reporter ID (the
// same on every replica), only the m smallest (m = minReporters, a
// bottom-m set). The leader unions the replicas' sets, and the union
// reaches m exactly when all the failing instances together do:
//
//	Let F_r be the hashes of replica r's failing reporters, S_r the m
//	smallest of F_r, U = ∪ F_r, and c = min(m, |U|).
//	Fewer: ∪ S_r ⊆ U, so |∪ S_r| ≤ |U|.
//	Enough: let B be the c smallest of U, and b ∈ B, b ∈ F_r. Every
//	element of F_r below b is an element of U below b, and fewer than c ≤ m
//	of those exist, so b is among the m smallest of F_r: b ∈ S_r. So
//	B ⊆ ∪ S_r, and |∪ S_r| ≥ c.
//	Together: min(|∪ S_r|, m) = min(|U|, m).
//
// B is also the c smallest of the union, so a union cut to its smallest
// k ≥ m (Merge keeps MaxInstances) still decides the same, in any order
// and grouping of merges. Two IDs with one hash count once: a collision
// (about 2⁻⁶⁴ a pair) can only lower the count. A set cut shorter than m
// (Compact, when a share would outgrow its bound) still holds only hashes
// of real failing reporters, so its union can only count fewer: a cut may
// miss an ejection, never make one. Each replica's own count of failing
// reporters (Failing) is exact, its reporters being distinct, and is kept
// whole: the count the decider reads, FailingInstances, is the larger of
// the union's size and the largest such count, so it too is never above
// |U|. TestBottomSetsCountDistinctInstances holds the equality,
// TestFleetCountsEachInstanceOnce the whole path from the reports to the
// decision.

// MaxInstances bounds an InstanceSet: the largest minReporters
// (v1alpha1.MaxOutlierMinReporters).
const MaxInstances = 1000

// InstanceHash is a reporter ID's hash in an InstanceSet: the first 8
// bytes of its SHA-256, big-endian.
func InstanceHash(id string) uint64 {
	h := sha256.Sum256([]byte(id))
	return binary.BigEndian.Uint64(h[:8])
}

// InstanceSet is the smallest InstanceHashes of a set of reporters,
// ascending and distinct, at most MaxInstances. Its JSON is a string: the
// hashes as 8 big-endian bytes each, in standard base64 (DecodeShared reads
// it back).
type InstanceSet []uint64

// bottom sorts hs and keeps its k smallest distinct values; it may reuse hs.
func bottom(hs []uint64, k int) InstanceSet {
	if len(hs) == 0 {
		return nil
	}
	slices.Sort(hs)
	hs = slices.Compact(hs)
	if len(hs) > k {
		return InstanceSet(slices.Clone(hs[:k]))
	}
	return InstanceSet(hs)
}

// union is the k smallest distinct hashes of two sets, in a new slice.
func union(a, b InstanceSet, k int) InstanceSet {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := make(InstanceSet, 0, min(len(a)+len(b), k))
	i, j := 0, 0
	for len(out) < k && (i < len(a) || j < len(b)) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			out = append(out, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			out = append(out, b[j])
			j++
		default: // equal
			out = append(out, a[i])
			i++
			j++
		}
	}
	return out
}

// MarshalJSON writes the set as one base64 string.
func (s InstanceSet) MarshalJSON() ([]byte, error) {
	raw := make([]byte, 8*len(s))
	for i, h := range s {
		binary.BigEndian.PutUint64(raw[8*i:], h)
	}
	return json.Marshal(raw)
}

// parseInstances reads the bytes of a set MarshalJSON wrote, refusing
// them unless they are whole hashes, at most MaxInstances, ascending and
// distinct.
func parseInstances(raw []byte) (InstanceSet, error) {
	switch {
	case len(raw)%8 != 0:
		return nil, fmt.Errorf("%d bytes, not whole 8-byte hashes", len(raw))
	case len(raw) > 8*MaxInstances:
		return nil, fmt.Errorf("%d hashes, over %d", len(raw)/8, MaxInstances)
	case len(raw) == 0:
		return nil, nil
	}
	out := make(InstanceSet, len(raw)/8)
	for i := range out {
		out[i] = binary.BigEndian.Uint64(raw[8*i:])
		if i > 0 && out[i] <= out[i-1] {
			return nil, fmt.Errorf("hashes not ascending and distinct")
		}
	}
	return out, nil
}
