package kube

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

// maxListedItems bounds the items a condition's message lists.
const maxListedItems = 3

// bounded joins at most maxListedItems items, counting the rest.
func bounded(items []string) string {
	if len(items) <= maxListedItems {
		return strings.Join(items, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(items[:maxListedItems], "; "), len(items)-maxListedItems)
}

// clip cuts s to at most n bytes, on a rune boundary (the CRD bounds the field).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
