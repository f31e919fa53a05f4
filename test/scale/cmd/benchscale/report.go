package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// result is one configuration's figures; it is also the JSON written by -json.
type result struct {
	Size      string   `json:"size"`
	Upstreams int      `json:"upstreams"`
	Endpoints int      `json:"endpoints"`
	Clients   int      `json:"clients"`
	Protocol  string   `json:"protocol"`
	ServeArgs []string `json:"serve_args,omitempty"`
	// EDS subscription of every client: upstreams EDSFirst..EDSLast.
	EDSNames        int     `json:"eds_names_per_client"`
	EDSFirst        string  `json:"eds_first"`
	EDSLast         string  `json:"eds_last"`
	GenerateSeconds float64 `json:"generate_seconds"`
	Startup         struct {
		ReadyzSeconds     float64 `json:"readyz_seconds"`      // process start → /readyz 200
		AllClientsSeconds float64 `json:"all_clients_seconds"` // process start → every client holds every resource
	} `json:"startup"`
	Memory struct {
		AfterStartup   memSample  `json:"after_startup"`
		AfterSingle    *memSample `json:"after_single,omitempty"`
		AfterSustained *memSample `json:"after_sustained,omitempty"`
		// AtEnd is taken after the peak, with a forced collection.
		AtEnd      *memSample `json:"at_end,omitempty"`
		PeakRSSMiB float64    `json:"peak_rss_mib"` // VmHWM at the end
	} `json:"memory"`
	Single    *singleResult    `json:"single,omitempty"`
	Sustained *sustainedResult `json:"sustained,omitempty"`
	Error     string           `json:"error,omitempty"`
}

type memSample struct {
	RSSMiB             float64  `json:"rss_mib"`
	HeapInuseMiB       float64  `json:"heap_inuse_mib"`
	HeapAllocMiB       float64  `json:"heap_alloc_mib"`
	LiveHeapAfterGCMiB *float64 `json:"live_heap_after_gc_mib,omitempty"`
}

// msDist is a latency distribution in milliseconds.
type msDist struct {
	N     int     `json:"n"`
	MinMs float64 `json:"min_ms"`
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

func msOf(d dist) msDist {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return msDist{N: d.N, MinMs: ms(d.Min), P50Ms: ms(d.P50), P90Ms: ms(d.P90), P99Ms: ms(d.P99), MaxMs: ms(d.Max)}
}

type singleResult struct {
	Flips       int `json:"flips"`
	Delivered   int `json:"delivered"`   // to every client
	Partial     int `json:"partial"`     // to some clients
	Undelivered int `json:"undelivered"` // to none
	TimedOut    int `json:"timed_out"`
	// LastClient is event → last client: from just before the file write to
	// the last client's receipt of the changed content.
	LastClient         msDist  `json:"last_client"`
	WallSeconds        float64 `json:"wall_seconds"`
	ServerCPUSeconds   float64 `json:"server_cpu_seconds"`
	IdleCores          float64 `json:"idle_cores"`
	IdleSeconds        float64 `json:"idle_seconds"`
	ServerCPUPerFlipMs float64 `json:"server_cpu_per_flip_ms"` // idle subtracted
	CDSResponses       int64   `json:"cds_responses"`          // over all clients; an endpoint change should send none
	CDSLosses          int64   `json:"cds_losses"`             // CDS responses that lacked or removed clusters
	StrayCLAs          int64   `json:"stray_clas"`             // CLAs sent to a client that did not subscribe to them
	EDSResponses       int64   `json:"eds_responses"`
	CLAUpdates         int64   `json:"cla_updates"`
	CLAResent          int64   `json:"cla_resent"` // CLAs sent again with the same content
	MultiCredits       int64   `json:"multi_credits"`
	Unattributed       int64   `json:"unattributed"`
	SourceBatches      float64 `json:"source_batches"` // poise_source_batches_total{result="applied"} delta
}

type sustainedResult struct {
	TargetRate        float64 `json:"target_rate"`
	Issued            int     `json:"issued"`
	IssueSeconds      float64 `json:"issue_seconds"`
	IssuedRate        float64 `json:"issued_rate"`
	DrainSeconds      float64 `json:"drain_seconds"`
	DrainLimitSeconds float64 `json:"drain_limit_seconds"`
	Delivered         int     `json:"delivered"`
	Partial           int     `json:"partial"`
	Undelivered       int     `json:"undelivered"`
	LastClient        msDist  `json:"last_client"`
	// ServerCores is the server's CPU seconds over the issuing wall seconds;
	// ServerCPUSeconds runs to the end of the drain.
	ServerCores               float64 `json:"server_cores"`
	ServerCPUSeconds          float64 `json:"server_cpu_seconds"`
	BenchCores                float64 `json:"bench_cores"`
	EDSResponsesPerClientPerS float64 `json:"eds_responses_per_client_per_s"`
	CLAUpdatesPerClientPerS   float64 `json:"cla_updates_per_client_per_s"`
	CLAsPerResponse           float64 `json:"clas_per_response"`
	FlipsPerClusterPerS       float64 `json:"flips_per_cluster_per_s"`
	PushesPerClusterPerS      float64 `json:"pushes_per_cluster_per_s"` // CLA updates one client received per flipped cluster per second
	FlipsPerCLAUpdate         float64 `json:"flips_per_cla_update"`     // coalescing: above 1 when flips of one cluster merge
	CDSResponses              int64   `json:"cds_responses"`
	CDSLosses                 int64   `json:"cds_losses"`
	StrayCLAs                 int64   `json:"stray_clas"`
	CLAResent                 int64   `json:"cla_resent"`
	MultiCredits              int64   `json:"multi_credits"`
	Unattributed              int64   `json:"unattributed"`
	SourceBatches             float64 `json:"source_batches"`
	ServerEDSPushes           float64 `json:"server_eds_pushes"`
}

func (d msDist) String(pcts ...string) string {
	var b strings.Builder
	for i, p := range pcts {
		if i > 0 {
			b.WriteString("  ")
		}
		v := map[string]float64{"min": d.MinMs, "p50": d.P50Ms, "p90": d.P90Ms, "p99": d.P99Ms, "max": d.MaxMs}[p]
		fmt.Fprintf(&b, "%s %.1f ms", p, v)
	}
	return b.String()
}

// printResult prints one configuration as a two-column table.
func printResult(w io.Writer, r *result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(label, format string, a ...any) {
		fmt.Fprintf(tw, "  %s\t"+format+"\n", append([]any{label}, a...)...)
	}
	fmt.Fprintf(w, "== %s: %d upstreams × 20 = %d endpoints, %d %s clients\n", r.Size, r.Upstreams, r.Endpoints, r.Clients, strings.ToUpper(r.Protocol))
	scope := "all"
	if r.EDSNames < r.Upstreams {
		scope = "a window holding every flipped upstream"
	}
	row("EDS names per client", "%d of %d (%s … %s: %s); CDS wildcard", r.EDSNames, r.Upstreams, r.EDSFirst, r.EDSLast, scope)
	if len(r.ServeArgs) > 0 {
		row("serve arguments", "%s", strings.Join(r.ServeArgs, " "))
	}
	row("manifests generated", "%.2f s (%d files)", r.GenerateSeconds, r.Upstreams)
	if r.Startup.AllClientsSeconds > 0 {
		row("startup: process -> /readyz 200", "%.3f s", r.Startup.ReadyzSeconds)
		row("startup: process -> all clients", "%.3f s", r.Startup.AllClientsSeconds)
		m := r.Memory.AfterStartup
		row("RSS after startup", "%.1f MiB", m.RSSMiB)
		row("heap in use after startup", "%.1f MiB", m.HeapInuseMiB)
		if m.LiveHeapAfterGCMiB != nil {
			row("live heap after GC", "%.1f MiB", *m.LiveHeapAfterGCMiB)
		}
	}
	if s := r.Single; s != nil {
		row("single: flips delivered", "%d of %d (%d to some clients, %d to none)", s.Delivered, s.Flips, s.Partial, s.Undelivered)
		row("single: event -> last client", "%s", s.LastClient.String("min", "p50", "p99", "max"))
		row("single: server CPU per flip", "%.2f ms (%.3f s over %.1f s, idle %.4f cores subtracted)", s.ServerCPUPerFlipMs,
			s.ServerCPUSeconds, s.WallSeconds, s.IdleCores)
		row("single: file-source batches", "%.0f", s.SourceBatches)
		row("single: hygiene", "%d CDS responses (%d lacking clusters), %d CLAs resent unchanged, %d not subscribed to",
			s.CDSResponses, s.CDSLosses, s.CLAResent, s.StrayCLAs)
	}
	if s := r.Sustained; s != nil {
		row("sustained: flips", "%d issued in %.1f s (%.0f/s of %.0f/s)", s.Issued, s.IssueSeconds, s.IssuedRate, s.TargetRate)
		row("sustained: flips delivered", "%d of %d (%d to some clients, %d to none; drained %.1f s of %.0f s)",
			s.Delivered, s.Issued, s.Partial, s.Undelivered, s.DrainSeconds, s.DrainLimitSeconds)
		row("sustained: event -> last client", "%s", s.LastClient.String("p50", "p90", "p99", "max"))
		row("sustained: server CPU", "%.2f cores (%.1f CPU s to the end of the drain)", s.ServerCores, s.ServerCPUSeconds)
		row("sustained: EDS per client", "%.1f responses/s, %.1f CLAs per response", s.EDSResponsesPerClientPerS, s.CLAsPerResponse)
		row("sustained: pushes per cluster", "%.3f/s for %.3f flips/s (%.2f flips per CLA update)", s.PushesPerClusterPerS,
			s.FlipsPerClusterPerS, s.FlipsPerCLAUpdate)
		row("sustained: file-source batches", "%.0f", s.SourceBatches)
		row("sustained: hygiene", "%d CDS responses (%d lacking clusters), %d CLAs resent unchanged, %d not subscribed to",
			s.CDSResponses, s.CDSLosses, s.CLAResent, s.StrayCLAs)
		row("sustained: bench process CPU", "%.2f cores", s.BenchCores)
	}
	if m := r.Memory.AtEnd; m != nil {
		row("RSS at end / peak", "%.1f / %.1f MiB", m.RSSMiB, r.Memory.PeakRSSMiB)
		row("heap in use at end", "%.1f MiB", m.HeapInuseMiB)
		if m.LiveHeapAfterGCMiB != nil {
			row("live heap after GC at end", "%.1f MiB", *m.LiveHeapAfterGCMiB)
		}
	}
	if r.Error != "" {
		row("error", "%s", r.Error)
	}
	tw.Flush()
}

// printSummary prints one row per configuration.
func printSummary(w io.Writer, rs []*result) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w, "== summary (times from process start; latencies event -> last client, ms)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\tclients\tproto\tstartup s\tRSS MiB\tlive heap MiB\tCPU/flip ms\tsingle p50\tp99\tmax\tsust p50\tp99\tmax\tcores\tdelivered\t")
	for _, r := range rs {
		live := 0.0
		if r.Memory.AfterStartup.LiveHeapAfterGCMiB != nil {
			live = *r.Memory.AfterStartup.LiveHeapAfterGCMiB
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.2f\t%.0f\t%.0f\t", r.Size, r.Clients, r.Protocol, r.Startup.AllClientsSeconds,
			r.Memory.AfterStartup.RSSMiB, live)
		if s := r.Single; s != nil {
			fmt.Fprintf(tw, "%.2f\t%.0f\t%.0f\t%.0f\t", s.ServerCPUPerFlipMs, s.LastClient.P50Ms, s.LastClient.P99Ms, s.LastClient.MaxMs)
		} else {
			fmt.Fprint(tw, "-\t-\t-\t-\t")
		}
		if s := r.Sustained; s != nil {
			fmt.Fprintf(tw, "%.0f\t%.0f\t%.0f\t%.2f\t%d/%d\t", s.LastClient.P50Ms, s.LastClient.P99Ms, s.LastClient.MaxMs, s.ServerCores,
				s.Delivered, s.Issued)
		} else {
			fmt.Fprint(tw, "-\t-\t-\t-\t-\t")
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
