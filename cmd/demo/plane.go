package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"time"

	"poise.dev/poise/pkg/explain"
)

// plane is the controlplane process the demo serves the manifests with.
type plane struct {
	cmd      *exec.Cmd
	adminURL string
	done     chan struct{} // closed when the process has ended
	http     *http.Client
}

// stopWithin is how long an interrupted plane may take to stop before it
// is killed.
const stopWithin = 10 * time.Second

// startPlane runs `controlplane serve -f FILES` on the configured
// addresses; every line it writes goes to log, prefixed.
func startPlane(cfg config, log io.Writer) (*plane, error) {
	args := []string{"serve", "--xds-address", cfg.xdsAddr, "--admin-address", cfg.adminAddr}
	for _, f := range cfg.files {
		args = append(args, "-f", f)
	}
	cmd := exec.Command(cfg.controlplane, args...)
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.controlplane, err)
	}
	p := &plane{cmd: cmd, adminURL: "http://" + cfg.adminAddr, done: make(chan struct{}), http: &http.Client{Timeout: 5 * time.Second}}
	go func() {
		s := bufio.NewScanner(r)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		for s.Scan() {
			fmt.Fprintf(log, "controlplane | %s\n", s.Text())
		}
		_, _ = io.Copy(io.Discard, r) // a line past the buffer: drop the rest, never block the plane
	}()
	go func() {
		_ = cmd.Wait()
		w.Close()
		close(p.done)
	}()
	return p, nil
}

// waitReady waits until /readyz answers 200, the process ends or ctx is
// done.
func (p *plane) waitReady(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := p.http.Get(p.adminURL + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return fmt.Errorf("the control plane exited (%v) before it was ready: its output is above", p.cmd.ProcessState)
		case <-tick.C:
		}
	}
}

// stop interrupts the plane and waits for it, killing it if it takes
// longer than stopWithin.
func (p *plane) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(stopWithin):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// getJSON decodes GET adminURL+path into v.
func (p *plane) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.adminURL+path, nil)
	if err != nil {
		return err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// explain is /debug/explain for one upstream ("" for all) and, when from
// is set, what its clients receive.
func (p *plane) explain(ctx context.Context, upstream string, from *explain.From) (explain.Report, error) {
	q := url.Values{}
	if upstream != "" {
		q.Set("upstream", upstream)
	}
	if from != nil {
		q.Set("from", from.String())
	}
	var rep explain.Report
	err := p.getJSON(ctx, "/debug/explain?"+q.Encode(), &rep)
	return rep, err
}

// client is what the demo reads of /debug/clients.
type client struct {
	NodeID string `json:"nodeId"`
	Types  map[string]struct {
		LastAckedVersion string `json:"lastAckedVersion"`
	} `json:"types"`
}

// acked is the EDS version each connected node last ACKed.
func (p *plane) acked(ctx context.Context) (map[string]string, error) {
	var v struct {
		Clients []client `json:"clients"`
	}
	if err := p.getJSON(ctx, "/debug/clients", &v); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range v.Clients {
		out[c.NodeID] = c.Types["EDS"].LastAckedVersion
	}
	return out, nil
}

// errPlaneExited is the plane ending while the demo runs.
var errPlaneExited = errors.New("the control plane exited: its output is above")
