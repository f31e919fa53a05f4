package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Status are the Kubernetes status writer's metrics (it writes on the
// leader only) and the gauge saying whether this replica leads.
type Status struct {
	group
	Writes       *prometheus.CounterVec // kind
	WriteErrors  *prometheus.CounterVec // kind, reason: conflict | timeout | throttled | invalid | error
	Unchanged    *prometheus.CounterVec // kind
	QueueDepth   prometheus.Gauge
	QueueAdds    prometheus.Counter
	QueueLatency prometheus.Histogram
	WorkDuration prometheus.Histogram
	Retries      prometheus.Counter
	Leader       prometheus.Gauge // 1 while this replica holds the status-writer Lease
}

// newStatus makes the status writer's metrics; with writes, the series of
// every kind (and reason) exist at 0.
func newStatus(kinds []string, writes bool) *Status {
	s := &Status{
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_status_writes_total", Help: "Status subresource patches the status writer issued and the apiserver accepted, by kind.",
		}, []string{"kind"}),
		WriteErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_status_write_errors_total", Help: "Status writes that failed and are retried with backoff, by kind and reason (conflict, timeout, throttled, invalid, error).",
		}, []string{"kind", "reason"}),
		Unchanged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_status_unchanged_total", Help: "Objects the status writer checked and left alone because their status was already right, by kind.",
		}, []string{"kind"}),
		QueueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "poise_status_queue_depth", Help: "Objects waiting in the status writer's work queue.",
		}),
		QueueAdds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poise_status_queue_adds_total", Help: "Objects queued for the status writer (an object queued twice before it is processed counts twice and is processed once).",
		}),
		QueueLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "poise_status_queue_wait_seconds", Help: "Time an object waits in the status writer's queue before it is processed.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 11),
		}),
		WorkDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "poise_status_work_duration_seconds", Help: "Time to process one object: compute, wait for the write budget, write.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12),
		}),
		Retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "poise_status_retries_total", Help: "Objects re-queued with backoff after a failed status write.",
		}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "poise_status_leader", Help: "1 while this replica holds the status-writer Lease and writes status; 0 otherwise (and always with the files source).",
		}),
	}
	s.group = group{s.Writes, s.WriteErrors, s.Unchanged, s.QueueDepth, s.QueueAdds, s.QueueLatency, s.WorkDuration, s.Retries, s.Leader}
	if writes {
		for _, k := range kinds {
			s.Writes.WithLabelValues(k)
			s.Unchanged.WithLabelValues(k)
			for _, r := range StatusErrorReasons {
				s.WriteErrors.WithLabelValues(k, r)
			}
		}
	}
	return s
}

// NewStatus is a status writer's metrics on no registry, for a writer
// given none.
func NewStatus() *Status { return newStatus(nil, false) }

// Checks are the active health checks' metrics (spec.healthCheck), where
// this replica runs them.
type Checks struct {
	group
	Runs      *prometheus.CounterVec // result: pass | fail
	Lag       prometheus.Histogram
	endpoints *funcGaugeVec // state: healthy | unhealthy | unknown | unchecked
}

func newChecks() *Checks {
	c := &Checks{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_active_checks_total", Help: "Active health checks (spec.healthCheck) this replica ran, by result (pass or fail).",
		}, []string{"result"}),
		Lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "poise_active_check_lag_seconds", Help: "How late after its due time an active health check started; a growing lag says --health-check-concurrency is too small for the checks configured.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
		endpoints: &funcGaugeVec{desc: prometheus.NewDesc("poise_active_check_endpoints",
			"Endpoints this replica actively checks, by verdict (healthy, unhealthy, unknown), and those past --health-check-max-endpoints or the 5,000 per upstream (unchecked). 0 on a replica that does not check (a Kubernetes follower).",
			[]string{"state"}, nil), zero: ActiveCheckStates},
	}
	c.group = group{c.Runs, c.Lag, c.endpoints}
	c.Runs.WithLabelValues("pass")
	c.Runs.WithLabelValues("fail")
	return c
}

// Observe counts one active check and how late it started.
func (c *Checks) Observe(passed bool, late time.Duration) {
	r := "fail"
	if passed {
		r = "pass"
	}
	c.Runs.WithLabelValues(r).Inc()
	c.Lag.Observe(late.Seconds())
}

// SetEndpoints makes poise_active_check_endpoints read f at each scrape
// (nil: every state 0, as on a replica that does not check).
func (c *Checks) SetEndpoints(f func() map[string]float64) {
	if f == nil {
		c.endpoints.f.Store(nil)
		return
	}
	c.endpoints.f.Store(&f)
}

// Outliers are fleet outlier detection's metrics, per upstream with
// spec.outlierDetection (upstream: NAMESPACE/NAME; the series go with the
// detection, see Forget), and the load reports' own: the requests cut to
// one reporter's cap, a single series.
type Outliers struct {
	group
	Ejections          *prometheus.CounterVec // upstream: ejections decided
	Ejected            *prometheus.GaugeVec   // upstream: endpoints ejected now
	UntrustedReporters *prometheus.GaugeVec   // upstream: reporters left out of the last window
	capped             *funcCounter
}

func newOutliers() *Outliers {
	o := &Outliers{
		Ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_outlier_ejections_total", Help: "Endpoints ejected by fleet outlier detection (spec.outlierDetection), by upstream.",
		}, []string{"upstream"}),
		Ejected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_outlier_ejected_endpoints", Help: "Endpoints ejected now by fleet outlier detection, by upstream.",
		}, []string{"upstream"}),
		UntrustedReporters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_loadreport_untrusted_reporters", Help: "Load reporters left out of the last outlier evaluation of an upstream's window because they failed on more than half of the endpoints they reported on, by upstream.",
		}, []string{"upstream"}),
	}
	o.capped = &funcCounter{desc: prometheus.NewDesc("poise_loadreport_capped_requests_total",
		"Requests load reports carried past one reporter's cap (--load-report-max-requests-per-instance: requests to one cluster over the window, from one workload instance, or one node ID of an anonymous client), not kept: each such report is kept scaled down to the cap, its error ratio unchanged. This replica's clients only.",
		nil, nil)}
	o.group = group{o.Ejections, o.Ejected, o.UntrustedReporters, o.capped}
	return o
}

// SetCappedRequests makes poise_loadreport_capped_requests_total read f at
// each scrape (the load-report store's count).
func (o *Outliers) SetCappedRequests(f func() uint64) { o.capped.f.Store(&f) }

// Init creates an upstream's outlier detection series at 0.
func (o *Outliers) Init(upstream string) {
	o.Ejections.WithLabelValues(upstream)
	o.Ejected.WithLabelValues(upstream)
	o.UntrustedReporters.WithLabelValues(upstream)
}

// Forget deletes an upstream's outlier detection series, when its
// detection (or the upstream) goes: the series are bounded by the upstreams
// with spec.outlierDetection.
func (o *Outliers) Forget(upstream string) {
	o.Ejections.DeleteLabelValues(upstream)
	o.Ejected.DeleteLabelValues(upstream)
	o.UntrustedReporters.DeleteLabelValues(upstream)
}
