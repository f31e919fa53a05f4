package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"poise.dev/poise/pkg/loadgen"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fleettable:", err)
		os.Exit(1)
	}
}

// maxReport bounds one report read.
const maxReport = 64 << 20

func run(files []string, w io.Writer) error {
	if len(files) == 0 {
		return fmt.Errorf("usage: fleettable REPORT.json...")
	}
	var reps []loadgen.Report
	for _, f := range files {
		b, err := readBounded(f)
		if err != nil {
			return err
		}
		var r loadgen.Report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		reps = append(reps, r)
	}
	return table(w, reps)
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxReport+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxReport {
		return nil, fmt.Errorf("%s: longer than %d bytes", path, maxReport)
	}
	return b, nil
}

// row is one figure: its label, unit and how it is read from a report
// (NaN when the report lacks it).
type row struct {
	label, format string
	of            func(r *loadgen.Report) float64
}

func plane(f func(p *loadgen.PlaneReport) float64) func(r *loadgen.Report) float64 {
	return func(r *loadgen.Report) float64 {
		if r.Plane == nil {
			return math.NaN()
		}
		return f(r.Plane)
	}
}

func phase(name string, f func(p *loadgen.PhaseReport) float64) func(r *loadgen.Report) float64 {
	return func(r *loadgen.Report) float64 {
		for i := range r.Phases {
			if r.Phases[i].Name == name {
				return f(&r.Phases[i])
			}
		}
		return math.NaN()
	}
}

func phasePlane(name string, f func(p *loadgen.PhasePlane) float64) func(r *loadgen.Report) float64 {
	return phase(name, func(p *loadgen.PhaseReport) float64 {
		if p.Plane == nil {
			return math.NaN()
		}
		return f(p.Plane)
	})
}

const mib = 1 << 20

func rows(reps []loadgen.Report) []row {
	out := []row{
		{"clients", "%.0f", func(r *loadgen.Report) float64 { return float64(r.Clients) }},
		{"connections", "%.0f", func(r *loadgen.Report) float64 { return float64(r.Connections) }},
		{"subscriptions", "%.0f", func(r *loadgen.Report) float64 { return float64(r.Subscribed) }},
		{"start: every client synced (s)", "%.1f", func(r *loadgen.Report) float64 { return r.SyncSeconds }},
		{"start: plane CPU (s)", "%.1f", plane(func(p *loadgen.PlaneReport) float64 { return p.StartCPUSeconds })},
		{"plane RSS after the start (MiB)", "%.0f", plane(func(p *loadgen.PlaneReport) float64 { return p.RSSStartBytes / mib })},
		{"plane RSS per client (KiB)", "%.1f", plane(func(p *loadgen.PlaneReport) float64 { return p.RSSPerClientBytes / 1024 })},
		{"plane live heap after the start (MiB)", "%.0f", plane(func(p *loadgen.PlaneReport) float64 { return nanIfZero(p.LiveHeapStartBytes) / mib })},
		{"plane live heap per idle client (KiB)", "%.1f", plane(func(p *loadgen.PlaneReport) float64 { return nanIfZero(p.LiveHeapPerClientBytes) / 1024 })},
		{"plane idle CPU (cores)", "%.3f", plane(func(p *loadgen.PlaneReport) float64 { return p.IdleCores })},
	}
	var names []string
	for _, r := range reps {
		for _, p := range r.Phases {
			if !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
		}
	}
	for _, n := range names {
		out = append(out,
			row{n + ": changes", "%.0f", phase(n, func(p *loadgen.PhaseReport) float64 { return float64(p.Changes) })},
			row{n + ": subscribers per change", "%.1f", phase(n, func(p *loadgen.PhaseReport) float64 { return p.Subscribers })},
			row{n + ": deliveries missing", "%.0f", phase(n, func(p *loadgen.PhaseReport) float64 { return float64(p.Expected - p.Delivered) })},
			row{n + ": convergence p50 (ms)", "%.0f", phase(n, func(p *loadgen.PhaseReport) float64 { return float64(p.Convergence.P50Us) / 1000 })},
			row{n + ": convergence p99 (ms)", "%.0f", phase(n, func(p *loadgen.PhaseReport) float64 { return float64(p.Convergence.P99Us) / 1000 })},
			row{n + ": convergence max (ms)", "%.0f", phase(n, func(p *loadgen.PhaseReport) float64 { return float64(p.Convergence.MaxUs) / 1000 })},
			row{n + ": plane CPU per change (ms)", "%.2f", phasePlane(n, func(p *loadgen.PhasePlane) float64 { return p.PerChangeMs })},
			row{n + ": plane CPU per delivery (µs)", "%.1f", phasePlane(n, func(p *loadgen.PhasePlane) float64 { return p.PerDeliveryUs })},
			row{n + ": plane cores", "%.2f", phasePlane(n, func(p *loadgen.PhasePlane) float64 { return p.Cores })},
			row{n + ": generator CPU per delivery (µs)", "%.1f", phase(n, func(p *loadgen.PhaseReport) float64 { return nanIfZero(p.GeneratorPerDeliveryUs) })},
			row{n + ": plane responses", "%.0f", phasePlane(n, func(p *loadgen.PhasePlane) float64 { return nanIfZero(p.Responses) })},
			row{n + ": plane's convergence within 2 s (%)", "%.2f", phasePlane(n, func(p *loadgen.PhasePlane) float64 { return nanIfZero(p.PlaneWithin2s) * 100 })},
			row{n + ": plane RSS max (MiB)", "%.0f", phasePlane(n, func(p *loadgen.PhasePlane) float64 { return p.RSSMaxBytes / mib })},
			row{n + ": plane RSS at the end (MiB)", "%.0f", phasePlane(n, func(p *loadgen.PhasePlane) float64 { return p.RSSEndBytes / mib })},
			row{n + ": plane RSS peak, first third (MiB)", "%.0f", phasePlane(n, func(p *loadgen.PhasePlane) float64 {
				first, _ := p.RSS.Drift()
				return nanIfZero(first)
			})},
			row{n + ": plane RSS peak, last third (MiB)", "%.0f", phasePlane(n, func(p *loadgen.PhasePlane) float64 {
				_, last := p.RSS.Drift()
				return nanIfZero(last)
			})},
		)
	}
	if slices.Contains(names, "hot") && slices.Contains(names, "tail") {
		out = append(out, row{"tail CPU per change / hot's (%)", "%.2f", func(r *loadgen.Report) float64 {
			hot := phasePlane("hot", func(p *loadgen.PhasePlane) float64 { return p.PerChangeMs })(r)
			tail := phasePlane("tail", func(p *loadgen.PhasePlane) float64 { return p.PerChangeMs })(r)
			return tail / hot * 100
		}})
	}
	out = append(out,
		row{"reconnects", "%.0f", func(r *loadgen.Report) float64 { return float64(r.Counters.Reconnects) }},
		row{"reconnect → first response p50 (ms)", "%.0f", resumed(func(d *loadgen.Dist) int64 { return d.P50Us })},
		row{"reconnect → first response p99 (ms)", "%.0f", resumed(func(d *loadgen.Dist) int64 { return d.P99Us })},
		row{"reconnect → first response max (ms)", "%.0f", resumed(func(d *loadgen.Dist) int64 { return d.MaxUs })},
		row{"Delta resources re-sent at a held version", "%.0f", func(r *loadgen.Report) float64 { return float64(r.Counters.ResentAfterResume) }},
		row{"strays and leaks", "%.0f", func(r *loadgen.Report) float64 { return float64(r.Counters.Strays + r.Counters.Leaks) }},
		row{"re-sent unchanged", "%.0f", func(r *loadgen.Report) float64 { return float64(r.Counters.Resent) }},
		row{"generator CPU (s)", "%.0f", func(r *loadgen.Report) float64 { return r.GeneratorCPUSeconds }},
	)
	return out
}

func resumed(f func(d *loadgen.Dist) int64) func(r *loadgen.Report) float64 {
	return func(r *loadgen.Report) float64 {
		if r.Resumed == nil {
			return math.NaN()
		}
		return float64(f(r.Resumed)) / 1000
	}
}

func nanIfZero(v float64) float64 {
	if v == 0 {
		return math.NaN()
	}
	return v
}

// table writes a column per report, then min and median (lower median for
// an even count), skipping rows no report has.
func table(w io.Writer, reps []loadgen.Report) error {
	var b strings.Builder
	b.WriteString("| figure |")
	for i := range reps {
		fmt.Fprintf(&b, " run %d |", i+1)
	}
	b.WriteString(" min | median |\n|---|")
	b.WriteString(strings.Repeat("---:|", len(reps)+2))
	b.WriteString("\n")
	for _, rw := range rows(reps) {
		var vals []float64
		cells := make([]string, len(reps))
		for i := range reps {
			v := rw.of(&reps[i])
			if math.IsNaN(v) || math.IsInf(v, 0) {
				cells[i] = "—"
				continue
			}
			cells[i] = fmt.Sprintf(rw.format, v)
			vals = append(vals, v)
		}
		if len(vals) == 0 {
			continue
		}
		slices.Sort(vals)
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", rw.label, strings.Join(cells, " | "),
			fmt.Sprintf(rw.format, vals[0]), fmt.Sprintf(rw.format, vals[(len(vals)-1)/2]))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
