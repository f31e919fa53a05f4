package loadgen

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A run drives its changes in phases, one after another on the same
// connected fleet: each phase changes a selection of clusters at a rate for
// a duration, then waits for its deliveries, and is reported on its own
// (convergence, the plane's CPU per change and per delivery). So one start
// of 25,000 clients measures a flip every client cares about, a flip few
// do, and sustained churn.

// Select says which clusters a phase changes.
type Select struct {
	// Kind is "all" (every cluster, round-robin from the first), "hot" (the
	// hot clusters every client subscribes to: a client subscribed to
	// fewer clusters than there are hot ones takes the first) or "share" (the clusters whose
	// subscribers are nearest Percent of the clients).
	Kind    string
	Percent float64
}

func (s Select) String() string {
	if s.Kind == "share" {
		return "share=" + strconv.FormatFloat(s.Percent, 'g', -1, 64)
	}
	return s.Kind
}

// Phase is one stretch of changes.
type Phase struct {
	Name     string
	Select   Select
	Rate     float64
	Duration time.Duration
}

// Bounds of a phase (the command's flag bounds repeat them).
const (
	MaxPhases        = 16
	maxPhaseName     = 32
	MaxPhaseRate     = 100000
	MaxPhaseDuration = 24 * time.Hour
	// shareClusters is how many clusters a "share" phase cycles through:
	// those nearest the share, so that a flip of one is not coalesced with
	// the previous flip of the same.
	shareClusters = 8
)

// ParsePhase reads NAME:SELECT:RATE:DURATION, SELECT being all, hot or
// share=PERCENT (e.g. "tail:share=1:0.25:40s").
func ParsePhase(v string) (Phase, error) {
	parts := strings.Split(v, ":")
	bad := func(why string) (Phase, error) {
		return Phase{}, fmt.Errorf("phase %q: %s (want NAME:SELECT:RATE:DURATION, SELECT all, hot or share=PERCENT)", v, why)
	}
	if len(parts) != 4 {
		return bad("not four fields")
	}
	p := Phase{Name: parts[0]}
	if p.Name == "" || len(p.Name) > maxPhaseName || strings.ContainsFunc(p.Name, func(r rune) bool {
		return !(r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		return bad(fmt.Sprintf("the name must be 1 to %d letters, digits, '-' or '_'", maxPhaseName))
	}
	switch sel := parts[1]; {
	case sel == "all" || sel == "hot":
		p.Select.Kind = sel
	case strings.HasPrefix(sel, "share="):
		pc, err := strconv.ParseFloat(strings.TrimPrefix(sel, "share="), 64)
		if err != nil || !(pc > 0 && pc <= 100) {
			return bad("share must be a percent above 0, at most 100")
		}
		p.Select = Select{Kind: "share", Percent: pc}
	default:
		return bad(fmt.Sprintf("selection %q", sel))
	}
	rate, err := strconv.ParseFloat(parts[2], 64)
	if err != nil || !(rate > 0 && rate <= MaxPhaseRate) {
		return bad(fmt.Sprintf("rate %q: want above 0, at most %d a second", parts[2], MaxPhaseRate))
	}
	p.Rate = rate
	d, err := time.ParseDuration(parts[3])
	if err != nil || d <= 0 || d > MaxPhaseDuration {
		return bad(fmt.Sprintf("duration %q: want above 0, at most %s", parts[3], MaxPhaseDuration))
	}
	p.Duration = d
	return p, nil
}

func (p Phase) String() string {
	return fmt.Sprintf("%s:%s:%g:%s", p.Name, p.Select, p.Rate, p.Duration)
}

// Targets are the clusters (indices) a phase changes, in the order it
// cycles through them, given each cluster's subscribers and the fleet's
// size and hot clusters.
func (s Select) Targets(subs []int32, clients, hot int) ([]int32, error) {
	switch s.Kind {
	case "all":
		out := make([]int32, len(subs))
		for i := range out {
			out[i] = int32(i)
		}
		return out, nil
	case "hot":
		var out []int32
		for i := range min(hot, len(subs)) {
			if int(subs[i]) == clients {
				out = append(out, int32(i))
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("phase selection hot: no cluster has every client subscribed (%d hot; a client subscribed to fewer takes the first)", hot)
		}
		return out, nil
	case "share":
		want := s.Percent / 100 * float64(clients)
		idx := make([]int32, 0, len(subs))
		for i, n := range subs {
			if n > 0 {
				idx = append(idx, int32(i))
			}
		}
		if len(idx) == 0 {
			return nil, fmt.Errorf("phase selection %s: no cluster has a subscriber", s)
		}
		dist := func(i int32) float64 {
			d := float64(subs[i]) - want
			if d < 0 {
				d = -d
			}
			return d
		}
		slices.SortStableFunc(idx, func(a, b int32) int {
			da, db := dist(a), dist(b)
			switch {
			case da < db:
				return -1
			case da > db:
				return 1
			}
			return int(a - b)
		})
		return idx[:min(shareClusters, len(idx))], nil
	}
	return nil, fmt.Errorf("phase selection %q: want all, hot or share", s.Kind)
}

// PhaseReport is what one phase measured.
type PhaseReport struct {
	Name   string `json:"name"`
	Select string `json:"select"`
	// Targets are how many clusters it cycled through; Subscribers their
	// mean subscribers (the deliveries one change is due, on average).
	Targets       int     `json:"targets"`
	Subscribers   float64 `json:"meanSubscribers"`
	Changes       int64   `json:"changes"`
	TargetRate    float64 `json:"targetRate"`
	ChurnSeconds  float64 `json:"churnSeconds"`
	DrainSeconds  float64 `json:"drainSeconds"`
	Expected      int64   `json:"expectedDeliveries"`
	Delivered     int64   `json:"delivered"`
	DrainTimedOut bool    `json:"drainTimedOut,omitempty"`
	// Convergence is change written → each subscriber's receipt, over the
	// phase's changes.
	Convergence     Dist          `json:"convergence"`
	ConvergenceData HistogramData `json:"convergenceHistogram"`
	// The plane over the phase, from its first change to its drain's end.
	Plane *PhasePlane `json:"planeStats,omitempty"`
	// GeneratorCPUSeconds is the load processes' CPU over the phase (the
	// clients reading responses and answering, and the churn's writer);
	// GeneratorPerDeliveryUs that per delivery: what a reader needs to size
	// the machines a load of their own fleet's shape takes, and how much of
	// the shared cores the plane did not have.
	GeneratorCPUSeconds    float64 `json:"generatorCpuSeconds"`
	GeneratorPerDeliveryUs float64 `json:"generatorCpuPerDeliveryUs"`
}

// PhasePlane is the plane's CPU and memory over a phase.
type PhasePlane struct {
	CPUSeconds float64 `json:"cpuSeconds"`
	Cores      float64 `json:"cores"`
	// PerChangeMs and PerDeliveryUs are CPUSeconds less the idle CPU of
	// the phase's wall time, per change and per delivery.
	PerChangeMs   float64 `json:"cpuPerChangeMs"`
	PerDeliveryUs float64 `json:"cpuPerDeliveryUs"`
	RSSEndBytes   float64 `json:"rssEndBytes"`
	// RSSMaxBytes is the largest RSS sampled during the phase (once a
	// second); RSS its samples over time: whether memory stayed flat.
	RSSMaxBytes float64  `json:"rssMaxBytes"`
	RSS         RSSTrace `json:"rss"`
	// Responses the plane sent over the phase (poise_xds_pushes_total;
	// with an admin URL only).
	Responses float64 `json:"responses,omitempty"`
	// PlaneConverged counts the plane's own convergence observations over
	// the phase (poise_xds_convergence_seconds: publication → ACK, the
	// file's debounce and parsing not in it), and PlaneWithin1s/2s the
	// share of them within a second and two.
	PlaneConverged float64 `json:"planeConverged,omitempty"`
	PlaneWithin1s  float64 `json:"planeWithin1s,omitempty"`
	PlaneWithin2s  float64 `json:"planeWithin2s,omitempty"`
}

// counted fills what the plane's counters say of the phase.
func (pp *PhasePlane) counted(d PlaneCounters) {
	pp.Responses, pp.PlaneConverged = d.Responses, d.Converged
	if d.Converged > 0 {
		pp.PlaneWithin1s, pp.PlaneWithin2s = d.Within[0]/d.Converged, d.Within[1]/d.Converged
	}
}

// Drift compares the RSS of the phase's last third with its first third:
// the largest sample of each, in MiB (0, 0 with fewer than 3 samples).
func (t RSSTrace) Drift() (first, last float64) {
	n := len(t.SamplesMiB)
	if n < 3 {
		return 0, 0
	}
	for _, v := range t.SamplesMiB[:n/3] {
		first = max(first, v)
	}
	for _, v := range t.SamplesMiB[n-n/3:] {
		last = max(last, v)
	}
	return first, last
}
