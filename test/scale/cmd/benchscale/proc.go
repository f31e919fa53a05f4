package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"poise.dev/poise/pkg/loadgen"
)

// server is a running `controlplane serve`.
type server struct {
	cmd      *exec.Cmd
	xdsAddr  string
	adminURL string
	logPath  string
	log      *os.File
	exited   chan struct{}
	waitErr  error
	start    time.Time
	// profiles, when set, is where heap profiles taken after a GC are kept:
	// PREFIX-1.pb.gz after start-up, PREFIX-2.pb.gz at the end.
	profiles     string
	profileCount int
}

// freeAddr is a 127.0.0.1 address nothing listens on now.
func freeAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

// startServer starts binary serving dir; its output goes to logPath.
func startServer(binary, dir, logPath string, extra []string) (*server, error) {
	xds, err := freeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "-f", dir, "--xds-address", xds, "--admin-address", admin}, extra...)
	s := &server{cmd: exec.Command(binary, args...), xdsAddr: xds, adminURL: "http://" + admin, logPath: logPath, log: log,
		exited: make(chan struct{})}
	s.cmd.Stdout, s.cmd.Stderr = log, log
	s.start = time.Now()
	if err := s.cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	return s, nil
}

// alive is nil while the process runs.
func (s *server) alive() error {
	select {
	case <-s.exited:
		return fmt.Errorf("controlplane exited (%v); its log:\n%s", s.waitErr, s.tail(20))
	default:
		return nil
	}
}

// tail is the last n lines of the server's log.
func (s *server) tail(n int) string {
	b, _ := os.ReadFile(s.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// stop ends the process: SIGTERM, then SIGKILL after 10 s.
func (s *server) stop() {
	select {
	case <-s.exited:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	s.log.Close()
}

// waitListening returns when the xDS port accepts connections.
func (s *server) waitListening(ctx context.Context) error {
	for {
		c, err := net.DialTimeout("tcp", s.xdsAddr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if err := s.alive(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitReady returns the time from process start to /readyz answering 200.
func (s *server) waitReady(ctx context.Context) (time.Duration, error) {
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(s.adminURL + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(s.start), nil
			}
		}
		if err := s.alive(); err != nil {
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// get is the body of an admin path.
func (s *server) get(path string) ([]byte, error) {
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Get(s.adminURL + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return b, nil
}

// metrics is the admin /metrics, by series ("name{labels}").
func (s *server) metrics() (map[string]float64, error) {
	b, err := s.get("/metrics")
	if err != nil {
		return nil, err
	}
	return loadgen.ParseMetrics(b)
}

// gc makes the server collect its garbage, through the heap profile's gc=1,
// and keeps the profile when asked to (-heap-profiles).
func (s *server) gc() error {
	// Twice: what sync.Pools hold (gRPC's buffers) survives one collection
	// in their victim caches, and is not live data.
	if _, err := s.get("/debug/pprof/heap?gc=1"); err != nil {
		return err
	}
	b, err := s.get("/debug/pprof/heap?gc=1")
	if err != nil || s.profiles == "" {
		return err
	}
	s.profileCount++
	return os.WriteFile(fmt.Sprintf("%s-%d.pb.gz", s.profiles, s.profileCount), b, 0o644)
}

func (s *server) cpu() (float64, error) { return loadgen.CPUSeconds(strconv.Itoa(s.cmd.Process.Pid)) }

// memory is VmRSS and VmHWM (the peak) of the process, in bytes.
func (s *server) memory() (rss, hwm float64, err error) {
	return loadgen.Memory(strconv.Itoa(s.cmd.Process.Pid))
}
