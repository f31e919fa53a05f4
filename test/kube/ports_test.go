package kube_test

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// restartPorts are the ports handed out by restartPort in this process.
var restartPorts = struct {
	sync.Mutex
	taken map[int]bool
}{taken: map[int]bool{}}

// restartPort returns a free loopback port below the kernel's ephemeral
// range, for an apiserver that a test stops and starts again at the same
// address. No listener on port 0 and no outgoing connection of another test
// is given a port there, so a test that keeps its apiserver down for seconds
// can run in parallel with the others and still find its port free.
func restartPort(t *testing.T) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const floor = 10000
	if low <= floor+100 {
		t.Fatalf("the ephemeral port range starts at %d: no room below it for a port a restarted apiserver keeps", low)
	}
	restartPorts.Lock()
	defer restartPorts.Unlock()
	for range 200 {
		p := floor + rand.IntN(low-floor)
		if restartPorts.taken[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		restartPorts.taken[p] = true
		return strconv.Itoa(p)
	}
	t.Fatalf("no free port in [%d, %d)", floor, low)
	return ""
}
