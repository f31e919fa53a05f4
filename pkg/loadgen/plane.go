package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

// PlaneProbe reads the plane's CPU seconds and RSS: from /proc when the
// plane runs here (Pid), else from its admin port's /metrics (AdminURL,
// process_cpu_seconds_total and process_resident_memory_bytes).
type PlaneProbe struct {
	Pid      int
	AdminURL string
	Client   *http.Client
}

// PlaneSample is the plane's CPU and memory at one moment.
type PlaneSample struct {
	At         time.Time
	CPUSeconds float64
	RSSBytes   float64
}

// maxMetricsBytes bounds what is read of /metrics.
const maxMetricsBytes = 64 << 20

// Enabled says whether the probe has anything to read.
func (p PlaneProbe) Enabled() bool { return p.Pid > 0 || p.AdminURL != "" }

// Sample reads the plane's figures now.
func (p PlaneProbe) Sample(ctx context.Context) (PlaneSample, error) {
	s, _, err := p.read(ctx, false)
	return s, err
}

// SampleAndCount is Sample and the plane's counters (zero without an admin
// URL) from one read of its /metrics.
func (p PlaneProbe) SampleAndCount(ctx context.Context) (PlaneSample, PlaneCounters, error) {
	return p.read(ctx, true)
}

// read samples the plane, and with counted reads its counters too: /proc
// for CPU and RSS when there is a pid, /metrics for whatever else is asked.
func (p PlaneProbe) read(ctx context.Context, counted bool) (PlaneSample, PlaneCounters, error) {
	s := PlaneSample{At: time.Now()}
	var c PlaneCounters
	var m map[string]float64
	if p.AdminURL != "" && (counted || p.Pid <= 0) {
		var err error
		if m, err = p.metrics(ctx); err != nil {
			return s, c, err
		}
		if counted {
			c = countersOf(m)
		}
	}
	if p.Pid > 0 {
		pid := strconv.Itoa(p.Pid)
		var err error
		if s.CPUSeconds, err = CPUSeconds(pid); err != nil {
			return s, c, err
		}
		s.RSSBytes, _, err = Memory(pid)
		return s, c, err
	}
	cpu, okCPU := m["process_cpu_seconds_total"]
	rss, okRSS := m["process_resident_memory_bytes"]
	if !okCPU || !okRSS {
		return s, c, fmt.Errorf("%s/metrics has no process_cpu_seconds_total or process_resident_memory_bytes", p.AdminURL)
	}
	s.CPUSeconds, s.RSSBytes = cpu, rss
	return s, c, nil
}

func (p PlaneProbe) metrics(ctx context.Context) (map[string]float64, error) {
	b, err := getAdmin(ctx, p.Client, p.AdminURL+"/metrics", maxMetricsBytes)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(b)
}

// FetchSample is the plane's /debug/clients, for Pattern.Sample.
func FetchSample(ctx context.Context, adminURL string, hc *http.Client) ([]SampleClient, error) {
	b, err := getAdmin(ctx, hc, adminURL+"/debug/clients", MaxSampleBytes)
	if err != nil {
		return nil, err
	}
	return ParseSample(bytes.NewReader(b))
}

// getAdmin is the body of GET url, at most limit bytes (hc nil: a client
// with a 30 s timeout).
func getAdmin(ctx context.Context, hc *http.Client, url string, limit int64) ([]byte, error) {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("GET %s: longer than %d bytes", url, limit)
	}
	return b, nil
}

// maxProfileBytes bounds a profile read from the plane.
const maxProfileBytes = 256 << 20

// LiveHeap is the plane's heap right after a collection: its heap profile
// is asked for with gc=1 (kept at save unless save is empty), then
// /metrics' go_memstats_heap_alloc_bytes read. Without an admin URL it is 0.
func (p PlaneProbe) LiveHeap(ctx context.Context, save string) (float64, error) {
	if p.AdminURL == "" {
		return 0, nil
	}
	b, err := getAdmin(ctx, p.Client, p.AdminURL+"/debug/pprof/heap?gc=1", maxProfileBytes)
	if err != nil {
		return 0, err
	}
	if save != "" {
		if err := os.WriteFile(save, b, 0o644); err != nil {
			return 0, err
		}
	}
	m, err := p.metrics(ctx)
	if err != nil {
		return 0, err
	}
	heap, ok := m["go_memstats_heap_alloc_bytes"]
	if !ok {
		return 0, fmt.Errorf("%s/metrics has no go_memstats_heap_alloc_bytes", p.AdminURL)
	}
	return heap, nil
}

// ProfileCPU starts a CPU profile of the plane over d, written to path;
// the function it returns waits for it. Without an admin URL it does
// nothing.
func (p PlaneProbe) ProfileCPU(ctx context.Context, path string, d time.Duration) func() error {
	if p.AdminURL == "" {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() {
		hc := &http.Client{Timeout: d + time.Minute}
		url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", p.AdminURL, int(max(d.Round(time.Second)/time.Second, 1)))
		b, err := getAdmin(ctx, hc, url, maxProfileBytes)
		if err == nil {
			err = os.WriteFile(path, b, 0o644)
		}
		done <- err
	}()
	return func() error { return <-done }
}

// maxRSSSamples bounds the RSS samples a phase keeps: past it, every
// other one is dropped and the interval doubles.
const maxRSSSamples = 512

// RSSTrace is the plane's RSS over a phase: Samples every Every seconds
// from its start (in MiB), and the largest seen.
type RSSTrace struct {
	Every      float64   `json:"everySeconds"`
	SamplesMiB []float64 `json:"samplesMiB"`
	MaxBytes   float64   `json:"-"`
}

// watchRSS samples the plane's RSS once a second from now; the function it
// returns stops and gives the trace (its largest at least from).
func (p PlaneProbe) watchRSS(ctx context.Context, from float64) func() RSSTrace {
	stop := make(chan struct{})
	out := make(chan RSSTrace, 1)
	go func() {
		tr := RSSTrace{Every: 1, MaxBytes: from}
		skip, n := 1, 0 // keep one sample in skip
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s, err := p.Sample(ctx)
				if err != nil {
					continue
				}
				tr.MaxBytes = max(tr.MaxBytes, s.RSSBytes)
				if n++; n%skip != 0 {
					continue
				}
				tr.SamplesMiB = append(tr.SamplesMiB, s.RSSBytes/(1<<20))
				if len(tr.SamplesMiB) == maxRSSSamples {
					for i := range maxRSSSamples / 2 {
						tr.SamplesMiB[i] = tr.SamplesMiB[2*i+1]
					}
					tr.SamplesMiB = tr.SamplesMiB[:maxRSSSamples/2]
					skip *= 2
					tr.Every *= 2
				}
			case <-stop:
				out <- tr
				return
			case <-ctx.Done():
				out <- tr
				return
			}
		}
	}()
	return func() RSSTrace {
		close(stop)
		return <-out
	}
}

// PlaneCounters are the plane's own counts of what it sent, read from its
// /metrics: responses and its convergence histogram
// (poise_xds_convergence_seconds, publication → ACK, over every type).
type PlaneCounters struct {
	Responses float64
	// Converged counts the convergence observations; Within are those at
	// most each of ConvergenceBounds seconds.
	Converged float64
	Within    [len(ConvergenceBounds)]float64
}

// ConvergenceBounds are the histogram's bucket bounds a phase reports the
// share of: the targets of a second and two.
var ConvergenceBounds = [...]string{"1", "2"}

// countersOf reads the plane's counters from its /metrics.
func countersOf(m map[string]float64) PlaneCounters {
	c := PlaneCounters{Responses: SumMetric(m, "poise_xds_pushes_total"), Converged: SumMetric(m, "poise_xds_convergence_seconds_count")}
	for i, le := range ConvergenceBounds {
		c.Within[i] = SumMetric(m, "poise_xds_convergence_seconds_bucket", `le="`+le+`"`)
	}
	return c
}

// since is what was counted between c0 and c.
func (c PlaneCounters) since(c0 PlaneCounters) PlaneCounters {
	d := PlaneCounters{Responses: c.Responses - c0.Responses, Converged: c.Converged - c0.Converged}
	for i := range c.Within {
		d.Within[i] = c.Within[i] - c0.Within[i]
	}
	return d
}
