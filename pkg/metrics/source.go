package metrics

import "github.com/prometheus/client_golang/prometheus"

// Source are a source's metrics: the topology revision it made, its
// batches, what it refuses or sets aside, and, for the Kubernetes source,
// its watches and remote clusters.
type Source struct {
	group
	Revision prometheus.Gauge
	Batches  *prometheus.CounterVec // source, result: applied | rejected
	Refusing *prometheus.GaugeVec   // source: 1 while its latest change is refused or held back
	// kind: seconds the Kubernetes source's watch of it has been broken (see SetKubeStale)
	kubeStale *funcGaugeVec
	// cluster, state: 1 for each remote cluster's current state (see SetRemoteClusters)
	remoteClusterState *funcGaugePairs
	// cluster: seconds since a remote cluster last answered synced
	remoteClusterLastSync *funcGaugeVec
	// kind: objects the source sets aside as invalid (see SetInvalidObjects)
	invalidObjects *funcGaugeVec
	// crd: 1 while the cluster's CRD prunes fields the binary knows, and
	// how many (see SetCRDSchemas)
	crdOutdated, crdPruned *funcGaugeVec
}

// newSource makes a source's metrics, with the series of the source named
// name (none when empty) and of every kind at 0.
func newSource(name string, kinds []string) *Source {
	s := &Source{
		Revision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "poise_topology_revision", Help: "Revision of the current topology snapshot.",
		}),
		Batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poise_source_batches_total", Help: "Topology batches from a source, by result (applied or rejected).",
		}, []string{"source", "result"}),
		Refusing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "poise_source_refusing", Help: "1 while a source's latest change is refused (a file that cannot be read, an invalid object) or held back (a file emptied or cut short, until --settle) and the last good topology serves.",
		}, []string{"source"}),
		kubeStale: &funcGaugeVec{desc: prometheus.NewDesc("poise_kube_source_stale_seconds",
			"Seconds the Kubernetes source's list and watch of a kind have not reached the apiserver (0 while they do); kind=\"apiserver\": seconds the apiserver has not answered the replica's heartbeat. Meanwhile the topology last seen keeps serving.",
			[]string{"kind"}, nil)},
		remoteClusterState: &funcGaugePairs{desc: prometheus.NewDesc("poise_remote_cluster_state",
			"1 for each remote cluster's current sync state (Pending, Synced, Unreachable, Stale, Error), 0 for the others.",
			[]string{"cluster", "state"}, nil)},
		remoteClusterLastSync: &funcGaugeVec{desc: prometheus.NewDesc("poise_remote_cluster_last_sync_seconds",
			"Seconds since a remote cluster last answered with its cache synced (-1 while it never has).",
			[]string{"cluster"}, nil)},
		invalidObjects: &funcGaugeVec{desc: prometheus.NewDesc("poise_source_invalid_objects",
			"Objects the source sets aside because they are invalid (each has a status condition saying why; the rest of the topology serves), by kind. The files source refuses a whole change instead (poise_source_refusing), so it reports 0.",
			[]string{"kind"}, nil), zero: kinds},
		crdOutdated: &funcGaugeVec{desc: prometheus.NewDesc("poise_crd_schema_outdated",
			"1 while the cluster's CRD lacks fields this binary knows (the apiserver prunes them from every object written) or is not installed, else 0; Kubernetes source only, one series per CRD.",
			[]string{"crd"}, nil)},
		crdPruned: &funcGaugeVec{desc: prometheus.NewDesc("poise_crd_pruned_fields",
			"Fields this binary knows that the cluster's CRD lacks, which the apiserver prunes; Kubernetes source only, one series per CRD.",
			[]string{"crd"}, nil)},
	}
	s.group = group{s.Revision, s.Batches, s.Refusing, s.kubeStale, s.invalidObjects, s.remoteClusterState, s.remoteClusterLastSync,
		s.crdOutdated, s.crdPruned}
	if name != "" {
		for _, r := range SourceResults {
			s.Batches.WithLabelValues(name, r)
		}
		s.Refusing.WithLabelValues(name)
	}
	return s
}

// SetKubeStale makes poise_kube_source_stale_seconds report what f returns
// at each scrape: seconds by kind.
func (s *Source) SetKubeStale(f func() map[string]float64) { s.kubeStale.f.Store(&f) }

// SetRemoteClusters makes poise_remote_cluster_state and
// poise_remote_cluster_last_sync_seconds report what state and lastSync
// return at each scrape.
func (s *Source) SetRemoteClusters(state func() map[[2]string]float64, lastSync func() map[string]float64) {
	s.remoteClusterState.f.Store(&state)
	s.remoteClusterLastSync.f.Store(&lastSync)
}

// SetInvalidObjects makes poise_source_invalid_objects report what f
// returns at each scrape: objects set aside by kind (kinds it leaves out are 0).
func (s *Source) SetInvalidObjects(f func() map[string]float64) { s.invalidObjects.f.Store(&f) }

// SetCRDSchemas makes poise_crd_schema_outdated and poise_crd_pruned_fields
// report what outdated and pruned return at each scrape, by CRD name.
func (s *Source) SetCRDSchemas(outdated, pruned func() map[string]float64) {
	s.crdOutdated.f.Store(&outdated)
	s.crdPruned.f.Store(&pruned)
}
