package topology

import (
	"slices"
	"time"

	"poise.dev/poise/pkg/partitionmap"
)

// Kinds of the spatial routing objects, as named in messages.
const (
	KindSpatialDomain = "SpatialDomain"
	KindPartition     = "Partition"
)

// SpatialDomain is one SpatialDomain object. Domain.Name is Key.Name; its replicas name
// Upstreams in Key.Namespace.
type SpatialDomain struct {
	Key    Key
	Domain partitionmap.Domain
	// LoadReportInterval is spec.loadReporting.interval: when set, the domain's replica
	// and pool clusters ask Envoy to report their load; 0 when unset.
	LoadReportInterval time.Duration
	// ExportTo is spec.exportTo, the namespaces whose clients may read the
	// domain's resources, with "." resolved to Key.Namespace; not Set
	// follows the control plane's default (VisibleTo).
	ExportTo Export
}

// VisibleTo reports whether a client of namespace ns may read the domain's
// resources, given the control plane's default rule def, as
// Upstream.VisibleTo does.
func (d *SpatialDomain) VisibleTo(ns string, def Export) bool {
	return exportOf(d.ExportTo, def).allows(ns, d.Key.Namespace)
}

// Partition is one Partition object of the domain named Domain in Key.Namespace.
type Partition struct {
	Key      Key
	Domain   string
	Extent   partitionmap.BBox
	Replicas []string
}

// PutSpatialDomain adds or replaces a SpatialDomain. The Directory keeps its own copy.
func (b *Batch) PutSpatialDomain(d SpatialDomain) {
	d.Domain.Replicas = slices.Clone(d.Domain.Replicas)
	d.Domain.Products = slices.Clone(d.Domain.Products)
	for i := range d.Domain.Products {
		d.Domain.Products[i].AllowedRegions = slices.Clone(d.Domain.Products[i].AllowedRegions)
	}
	setOp(&b.domains, d.Key, &d)
}

// DeleteSpatialDomain removes a SpatialDomain; its Partitions stay as orphans.
func (b *Batch) DeleteSpatialDomain(k Key) { setOp(&b.domains, k, nil) }

// PutPartition adds or replaces a Partition. The Directory keeps its own copy.
func (b *Batch) PutPartition(p Partition) {
	p.Replicas = slices.Clone(p.Replicas)
	setOp(&b.partitions, p.Key, &p)
}

// DeletePartition removes a Partition.
func (b *Batch) DeletePartition(k Key) { setOp(&b.partitions, k, nil) }
