package conditions

import (
	"fmt"
	"strings"
)

// Condition types and reasons the source finds when it imports a Service,
// in addition to those of v1alpha1; the status writer writes them.
const (
	// ConditionResolvedRefs says whether an Upstream's endpointsFrom.service resolved.
	ConditionResolvedRefs = "ResolvedRefs"
	ReasonResolved        = "Resolved"
	ReasonServiceNotFound = "ServiceNotFound"
	ReasonPortNotFound    = "PortNotFound"
	// ConditionRemoteClustersSynced says, on an Upstream that imports from
	// remote clusters (or names clusters), whether each is synced.
	ConditionRemoteClustersSynced = "RemoteClustersSynced"
	ReasonClustersSynced          = "Synced"
	// ReasonRemoteClusterUnreachable: a cluster's apiserver does not answer
	// (its last-known endpoints serve, then are Unavailable past the bound).
	ReasonRemoteClusterUnreachable = "RemoteClusterUnreachable"
	// ReasonRemoteClusterError: a cluster is not registered, its Secret is
	// unusable, or it has not synced yet.
	ReasonRemoteClusterError = "RemoteClusterError"
	// ReasonDuplicateAcrossClusters: an address:port in two clusters; the
	// cluster first by name keeps it.
	ReasonDuplicateAcrossClusters = "DuplicateAcrossClusters"
)

// Condition reasons the status writer adds to those of v1alpha1 and of the
// source.
const (
	// ReasonDefaulted: an EndpointSet with no matching Locality object.
	ReasonDefaulted = "DefaultLocality"
	// ReasonRejectedByClients: Programmed=False because xDS clients of the
	// status-writing replica rejected (NACKed) the upstream's resources.
	ReasonRejectedByClients = "RejectedByClients"
	// ReasonDomainNotServing: the SpatialDomain is not published (a
	// Partition of it, or the domain's Programmed condition). The other
	// spatial reasons are those of the problems topology reports
	// (pkg/topology, pkg/partitionmap).
	ReasonDomainNotServing = "DomainNotServing"
)

// Event reasons of their own (the others are the conditions' reasons, and
// leader.ReasonLeaderElected).
const (
	// ReasonRecovered: a condition is good again (Accepted, Programmed or
	// ResolvedRefs True after False; Degraded False after True).
	ReasonRecovered = "Recovered"
	// ReasonOutlierEjected and ReasonOutlierReturned: fleet outlier
	// detection ejected an endpoint, or let it back.
	ReasonOutlierEjected  = "OutlierEjected"
	ReasonOutlierReturned = "OutlierReturned"
	// ReasonCRDSchemaOutdated and ReasonCRDNotInstalled: a CRD of the
	// cluster lacks fields this binary knows, or is missing (and
	// ReasonRecovered when it no longer is).
	ReasonCRDSchemaOutdated = "CRDSchemaOutdated"
	ReasonCRDNotInstalled   = "CRDNotInstalled"
)

// Rejection is why an object is not in the topology (its last accepted
// version, if any, still is): the source finds it, the status writer
// writes it.
type Rejection struct {
	Reason  string // a v1alpha1 Reason* or one of this package's
	Message string
}

// MaxListedItems bounds the items a condition's message lists.
const MaxListedItems = 3

// List joins at most MaxListedItems items, counting the rest.
func List(items []string) string {
	if len(items) <= MaxListedItems {
		return strings.Join(items, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(items[:MaxListedItems], "; "), len(items)-MaxListedItems)
}

// Clip cuts s to at most n bytes, on a rune boundary (the CRD bounds the
// field).
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
