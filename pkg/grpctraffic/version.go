package grpctraffic

import (
	"strconv"
	"strings"
)

// ParseVersion reads a version the control plane publishes:
// INSTANCE-REVISION, or INSTANCE-REVISION.N for the N-th client-class
// publication since that revision (a class's first client, or a Balanced
// demand, applied). A client that has ACKed a version of revision R holds
// what the snapshot of revision R (or a later one) says.
func ParseVersion(v string) (revision, class uint64, ok bool) {
	i := strings.LastIndexByte(v, '-')
	if i < 0 {
		return 0, 0, false
	}
	rev, seq, hasSeq := strings.Cut(v[i+1:], ".")
	r, err := strconv.ParseUint(rev, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	if hasSeq {
		if class, err = strconv.ParseUint(seq, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return r, class, true
}
