package server

import "google.golang.org/grpc"

// ServiceInfo is every service and method s registers, for tests that call
// each of them.
func ServiceInfo(s *Server) map[string]grpc.ServiceInfo { return s.g.GetServiceInfo() }
