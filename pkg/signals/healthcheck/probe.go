package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"poise.dev/poise/pkg/topology"
)

// maxBody is how much of an HTTP check's response body is read (and dropped).
const maxBody = 4 << 10

// Target is one endpoint of an upstream to check.
type Target struct {
	Address string
	Port    uint32 // the endpoint's own port; HealthCheck.Port overrides it
	// Generation names the backend at the address (topology
	// Endpoint.Generation): a new generation is a new target, checked
	// afresh from Unknown, and results of the old one's checks still in
	// flight are dropped.
	Generation string
}

func (t Target) String() string {
	return net.JoinHostPort(t.Address, strconv.FormatUint(uint64(t.Port), 10))
}

// dialAddr is the address a check of t under hc dials.
func dialAddr(hc *topology.HealthCheck, t Target) string {
	if hc.Port != 0 {
		t.Port = hc.Port
	}
	return t.String()
}

// ProbeFunc runs one check of t under hc and returns nil when it passes, or
// why it failed. ctx carries the check's timeout.
type ProbeFunc func(ctx context.Context, hc *topology.HealthCheck, t Target) error

// Probe runs one check of the kind hc says, dialling only t's address.
func Probe(ctx context.Context, hc *topology.HealthCheck, t Target) error {
	addr := dialAddr(hc, t)
	switch hc.Type {
	case "GRPC":
		return probeGRPC(ctx, addr, hc.GRPCService)
	case "HTTP":
		return probeHTTP(ctx, addr, hc)
	case "TCP":
		return probeTCP(ctx, addr)
	}
	return fmt.Errorf("unknown check type %q", hc.Type)
}

func probeTCP(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

func probeGRPC(ctx context.Context, addr, service string) error {
	// A client per check: nothing stays open towards an endpoint that leaves,
	// and no proxy from the environment is used (only addr is dialled).
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithNoProxy())
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return err
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("grpc health %s", s)
	}
	return nil
}

func probeHTTP(ctx context.Context, addr string, hc *topology.HealthCheck) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+hc.HTTPPath, nil)
	if err != nil {
		return err
	}
	if hc.HTTPHost != "" {
		req.Host = hc.HTTPHost
	}
	req.Header.Set("User-Agent", "poise-healthcheck")
	client := &http.Client{
		// no proxy from the environment, no connection kept, no redirect followed:
		// nothing but addr is ever dialled
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	ranges := hc.ExpectedStatuses
	if len(ranges) == 0 {
		ranges = []topology.StatusRange{{Start: http.StatusOK, End: http.StatusOK}}
	}
	for _, r := range ranges {
		if resp.StatusCode >= r.Start && resp.StatusCode <= r.End {
			return nil
		}
	}
	return fmt.Errorf("HTTP status %d", resp.StatusCode)
}

// Describe says why a check failed in a few stable words, for an origin:
// "connection refused", "timeout", "grpc health NOT_SERVING", "HTTP status 503".
// Addresses and ports are left out: the origin is shown beside the endpoint.
func Describe(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	}
	if s, ok := status.FromError(err); ok {
		msg := s.Message()
		switch {
		case s.Code() == codes.DeadlineExceeded:
			return "timeout"
		case strings.Contains(msg, "connection refused"):
			return "connection refused"
		case strings.Contains(msg, "connection reset"):
			return "connection reset"
		case s.Code() == codes.Unimplemented:
			return "grpc health not implemented"
		case s.Code() == codes.NotFound:
			return "grpc health SERVICE_UNKNOWN"
		}
		return "grpc " + s.Code().String()
	}
	msg := err.Error()
	if len(msg) > 128 {
		msg = msg[:128]
	}
	return msg
}
