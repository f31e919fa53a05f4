package grpctraffic

import (
	"strconv"
	"strings"
)

// ParseVersion reads the revision out of a version the control plane
// publishes, INSTANCE-REVISION: a client that has ACKed a version of
// revision R holds what the snapshot of revision R (or a later one) says.
func ParseVersion(v string) (revision uint64, ok bool) {
	i := strings.LastIndexByte(v, '-')
	if i < 0 {
		return 0, false
	}
	r, err := strconv.ParseUint(v[i+1:], 10, 64)
	if err != nil {
		return 0, false
	}
	return r, true
}
