package shares

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;create;patch;delete

// Bounds of the shared aggregates.
const (
	// MaxPayload is the largest aggregate a replica shares: half of a
	// ConfigMap's limit, so the object with its metadata always fits.
	MaxPayload = 512 << 10
	// MaxShares is how many replicas' aggregates the leader reads at most
	// (the most recently written first).
	MaxShares = 64
	// LabelShare marks the ConfigMaps that carry replicas' aggregates; its
	// value names the Lease the replicas elect with.
	LabelShare = "poise.dev/load-aggregate"
	// annotationWritten is when the replica wrote its aggregate (RFC 3339).
	annotationWritten = "poise.dev/written-at"
	annotationReplica = "poise.dev/replica"
	shareKey          = "aggregate"
	shareFieldOwner   = "poise-controlplane"
)

// ErrTooLarge is returned by Put for a payload over MaxPayload:
// the caller must send less (the most telling part of it).
var ErrTooLarge = errors.New("shared aggregate over 512 KiB")

// Store carries each replica's compact aggregate of its own clients' load
// reports to the leader (docs/health.md, "Who decides"):
// one ConfigMap per replica in the Lease's namespace, written by that
// replica, read by the leader. It reads the apiserver directly (no informer:
// only the leader reads, once an evaluation), so replicas do not cache every
// ConfigMap of the namespace.
type Store struct {
	Writer client.Client // writes; its reads are not used
	Reader client.Reader // the apiserver itself (manager.GetAPIReader)
	// Namespace is the Lease's; Lease is the Lease's name; Replica names
	// this replica (a pod name).
	Namespace, Lease, Replica string
}

// Share is one replica's aggregate as the leader reads it.
type Share struct {
	Replica string
	Written time.Time
	Payload []byte
}

// labelValue is the Lease name as a label value: itself when it fits, else
// a prefix and a hash (label values are at most 63 characters).
func labelValue(lease string) string {
	if len(lease) <= 63 {
		return lease
	}
	h := sha256.Sum256([]byte(lease))
	return strings.TrimRight(lease[:46], "-._") + "-" + hex.EncodeToString(h[:])[:16]
}

// name is this replica's ConfigMap: the Lease's name and the replica's,
// hashed when that is too long for an object name.
func (s *Store) name() string {
	n := s.Lease + "-loads-" + strings.ToLower(s.Replica)
	if len(n) <= 253 {
		return n
	}
	h := sha256.Sum256([]byte(n))
	return s.Lease[:min(len(s.Lease), 200)] + "-loads-" + hex.EncodeToString(h[:])[:32]
}

// Put writes this replica's aggregate (server-side apply: one request,
// whether the ConfigMap exists or not).
func (s *Store) Put(ctx context.Context, payload []byte, written time.Time) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, len(payload))
	}
	name := s.name()
	cm := corev1ac.ConfigMap(name, s.Namespace).
		WithLabels(map[string]string{LabelShare: labelValue(s.Lease)}).
		WithAnnotations(map[string]string{annotationWritten: written.UTC().Format(time.RFC3339Nano), annotationReplica: s.Replica}).
		WithBinaryData(map[string][]byte{shareKey: payload})
	if err := s.Writer.Apply(ctx, cm, client.FieldOwner(shareFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("sharing this replica's load aggregate in ConfigMap %s/%s: %w", s.Namespace, name, err)
	}
	return nil
}

// Delete removes this replica's aggregate (nothing to share any more, or
// the replica stops).
func (s *Store) Delete(ctx context.Context) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.name()}}
	if err := s.Writer.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ConfigMap %s/%s: %w", s.Namespace, cm.Name, err)
	}
	return nil
}

// List reads every replica's aggregate written within fresh of now (of the
// first 2×MaxShares ConfigMaps listed), the most recent first, at most
// MaxShares; older ones (a replica that stopped
// without deleting its own) are left out, and those older than stale are
// deleted.
func (s *Store) List(ctx context.Context, now time.Time, fresh, stale time.Duration) ([]Share, error) {
	var list corev1.ConfigMapList
	// one page, bounded: shares are one per live replica (stale ones are
	// deleted), so a page past MaxShares holds them all but in a namespace
	// where something else writes such ConfigMaps
	if err := s.Reader.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{LabelShare: labelValue(s.Lease)},
		client.Limit(2*MaxShares)); err != nil {
		return nil, fmt.Errorf("listing the replicas' load aggregates in %s: %w", s.Namespace, err)
	}
	var out []Share
	for i := range list.Items {
		cm := &list.Items[i]
		w, err := time.Parse(time.RFC3339Nano, cm.Annotations[annotationWritten])
		if err != nil {
			continue
		}
		age := now.Sub(w)
		if age > stale {
			_ = s.Writer.Delete(ctx, cm) // best effort: the next evaluation retries
			continue
		}
		p := cm.BinaryData[shareKey]
		if age > fresh || len(p) > MaxPayload {
			continue
		}
		out = append(out, Share{Replica: cm.Annotations[annotationReplica], Written: w, Payload: p})
	}
	slices.SortFunc(out, func(a, b Share) int {
		if c := b.Written.Compare(a.Written); c != 0 {
			return c
		}
		return strings.Compare(a.Replica, b.Replica)
	})
	return out[:min(len(out), MaxShares)], nil
}
