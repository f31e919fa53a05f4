package server

import (
	"time"

	"google.golang.org/grpc"
)

// ServiceInfo is every service and method s registers, for tests that call
// each of them.
func ServiceInfo(s *Server) map[string]grpc.ServiceInfo { return s.g.GetServiceInfo() }

// SetClientLogEvery sets the period of c's connect and disconnect budget.
func SetClientLogEvery(c *Clients, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clientLog.every = d
}

// PassTLSRecheck moves the clock s's TLS files are read by past their
// recheck period, as if that much time had passed: the next handshake
// looks at the files again.
func PassTLSRecheck(s *Server) {
	f := s.tls
	f.mu.Lock()
	defer f.mu.Unlock()
	now, by := f.now, f.recheck
	f.now = func() time.Time { return now().Add(by) }
}
