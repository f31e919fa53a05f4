package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
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
	s := PlaneSample{At: time.Now()}
	if p.Pid > 0 {
		pid := strconv.Itoa(p.Pid)
		var err error
		if s.CPUSeconds, err = CPUSeconds(pid); err != nil {
			return s, err
		}
		s.RSSBytes, _, err = Memory(pid)
		return s, err
	}
	m, err := p.metrics(ctx)
	if err != nil {
		return s, err
	}
	cpu, okCPU := m["process_cpu_seconds_total"]
	rss, okRSS := m["process_resident_memory_bytes"]
	if !okCPU || !okRSS {
		return s, fmt.Errorf("%s/metrics has no process_cpu_seconds_total or process_resident_memory_bytes", p.AdminURL)
	}
	s.CPUSeconds, s.RSSBytes = cpu, rss
	return s, nil
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
