package identity

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// IsLoopback reports whether a listen address ("host:port") binds loopback
// only: a loopback IP or "localhost". An empty host (every interface) or
// another name is not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.WithZone("").IsLoopback()
}

// CheckAnonymous refuses to serve clients without authentication on addr
// unless it is loopback or allowNonLoopback says so explicitly.
func CheckAnonymous(addr string, allowNonLoopback bool) error {
	if allowNonLoopback || IsLoopback(addr) {
		return nil
	}
	return fmt.Errorf("serving xDS to unauthenticated clients on %s, which is not a loopback address, needs an explicit opt-in", addr)
}
