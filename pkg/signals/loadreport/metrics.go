package loadreport

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SpatialMetrics exports the spatial cross-region metric (docs/spatial.md),
// read from the store at each scrape: the store counts the requests as the
// reports arrive, so the counters need no second copy kept in step.
type SpatialMetrics struct {
	requests, share *prometheus.Desc
	store           *Store
}

// NewSpatialMetrics returns the spatial metrics of store, to register.
func NewSpatialMetrics(store *Store) *SpatialMetrics {
	return &SpatialMetrics{
		requests: prometheus.NewDesc("poise_spatial_requests_total",
			"Requests the Envoys of the spatial listener reported (LRS total_issued_requests) to the replica and pool clusters of a SpatialDomain with spec.loadReporting, by domain (namespace/name), the reporting client's locality region and the region of the replica that served them. A client without a region counts as ~none; past 32 client regions a domain counts the rest as ~other. Each control-plane replica counts the reports of its own clients: sum over replicas.",
			[]string{"domain", "client_region", "replica_region"}, nil),
		share: prometheus.NewDesc("poise_spatial_cross_region_share",
			"Share (0 to 1) of a SpatialDomain's reported requests over the load-report window (30 s) that a replica outside the client's region served, of the requests of clients with a known region; absent while there are none.",
			[]string{"domain"}, nil),
		store: store,
	}
}

func (s *SpatialMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.requests
	ch <- s.share
}

func (s *SpatialMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range s.store.SpatialTotals() {
		ch <- prometheus.MustNewConstMetric(s.requests, prometheus.CounterValue, float64(c.Requests), c.Domain, c.ClientRegion, c.ReplicaRegion)
	}
	for _, d := range s.store.Spatial(time.Now()) {
		if d.CrossRegionShare != nil {
			ch <- prometheus.MustNewConstMetric(s.share, prometheus.GaugeValue, *d.CrossRegionShare, d.Domain)
		}
	}
}
