package controlplane

import (
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/loadreport"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/publish"
)

// loadDemand is how the publisher reads the load reports of a Balanced
// upstream's clients: the requests each reporter locality class issued to
// the cluster's endpoints over the store's window, read once a bucket.
// Clusters outside the store's catalog (no spec.loadReporting) have none.
func loadDemand(loads *loadreport.Store) publish.LoadDemand {
	return publish.LoadDemand{Bucket: loads.Window() / loadreport.Buckets, Window: loads.Window(),
		Requests: loads.ClassRequests}
}

// appliedDemand is the demand in force for explain: what the publisher
// applied to a Balanced upstream, and from which source.
func appliedDemand(pub *publish.Publisher) func(topology.Key) explain.AppliedDemand {
	return func(k topology.Key) explain.AppliedDemand {
		d, from := pub.AppliedDemandFrom(k)
		return explain.AppliedDemand{Demand: d, LoadReports: from.LoadReports, Requests: from.Requests, Window: from.Window}
	}
}
