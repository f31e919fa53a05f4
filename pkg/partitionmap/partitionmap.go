package partitionmap

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Reasons of a Problem found while building a map.
const (
	// ProblemUnknownReplica: a partition names a replica the domain does not have; the
	// partition is left out of the map.
	ProblemUnknownReplica = "UnknownReplica"
	// ProblemInvalidExtent: a partition's extent is out of range or inverted; left out.
	ProblemInvalidExtent = "InvalidExtent"
	// ProblemNoLawfulReplica: no replica lives in any of a product's allowed regions;
	// the product stays in the map and every request for it is refused with 451.
	ProblemNoLawfulReplica = "NoLawfulReplica"
)

// Problem is something wrong with one partition or product of a domain. It never stops
// the rest of the domain from being built.
type Problem struct {
	Kind    string // "Partition" or "Product"
	Name    string
	Field   string // the field at fault, e.g. "spec.replicas[1]"
	Reason  string
	Message string
}

func (p Problem) Error() string {
	return fmt.Sprintf("%s %s: %s: %s", p.Kind, p.Name, p.Field, p.Message)
}

// ErrInvalidDomain is wrapped by Build when the domain itself cannot make a map.
var ErrInvalidDomain = errors.New("invalid spatial domain")

// Map is the immutable partition map of one domain: which partitions each grid cell
// holds and which replicas hold each partition. Replicas and products are in name
// order; everything that refers to them uses those indexes.
type Map struct {
	domain     Domain
	xMin, yMin int
	nx, ny     int
	// cells in CSR form: the partitions of cell (kx, ky) are
	// cellParts[cellStart[i]:cellStart[i+1]] with i = (kx-xMin)*ny + (ky-yMin).
	cellStart []int32
	cellParts []int32
	occupied  int
	// partitions in name order and, for each, its replicas in index order.
	partitions []string
	holders    [][]int32
	// lawful[p]: the replicas allowed for product p, in index order.
	lawful  [][]int32
	version string
}

// Build makes the map of a domain from its partitions. A partition that names an
// unknown replica or has an invalid extent is left out and reported; a product with no
// lawful replica is kept and reported. An invalid domain (grid, duplicate names,
// identifiers the Lua cannot carry) is an error wrapping ErrInvalidDomain.
func Build(d Domain, parts []Partition) (*Map, []Problem, error) {
	if err := checkDomain(d); err != nil {
		return nil, nil, err
	}
	m := &Map{domain: d}
	m.domain.Replicas = slices.Clone(d.Replicas)
	slices.SortFunc(m.domain.Replicas, func(a, b Replica) int { return strings.Compare(a.Name, b.Name) })
	m.domain.Products = make([]Product, len(d.Products))
	for i, p := range d.Products {
		p.AllowedRegions = slices.Clone(p.AllowedRegions)
		slices.Sort(p.AllowedRegions)
		p.AllowedRegions = slices.Compact(p.AllowedRegions)
		m.domain.Products[i] = p
	}
	slices.SortFunc(m.domain.Products, func(a, b Product) int { return strings.Compare(a.Name, b.Name) })

	var problems []Problem
	for _, p := range m.domain.Products {
		var lawful []int32
		for i, r := range m.domain.Replicas {
			if slices.Contains(p.AllowedRegions, r.Region) {
				lawful = append(lawful, int32(i))
			}
		}
		if len(lawful) == 0 {
			problems = append(problems, Problem{Kind: "Product", Name: p.Name, Field: "spec.products[" + p.Name + "].allowedRegions",
				Reason: ProblemNoLawfulReplica, Message: fmt.Sprintf("no replica is in regions %v: every request is refused with 451", p.AllowedRegions)})
		}
		m.lawful = append(m.lawful, lawful)
	}

	parts = slices.Clone(parts)
	slices.SortFunc(parts, func(a, b Partition) int { return strings.Compare(a.Name, b.Name) })
	g := d.GridDeg
	xMin, xMax, yMin, yMax := IndexBounds(g)
	m.xMin, m.yMin, m.nx, m.ny = xMin, yMin, xMax-xMin+1, yMax-yMin+1
	perCell := make([][]int32, m.nx*m.ny)
	for _, p := range parts {
		holders, prob := m.holdersOf(p)
		if prob != nil {
			problems = append(problems, *prob)
			continue
		}
		idx := int32(len(m.partitions))
		m.partitions = append(m.partitions, p.Name)
		m.holders = append(m.holders, holders)
		xs, nx, y := spans(p.Extent, g)
		for _, s := range xs[:nx] {
			for kx := s.lo; kx <= s.hi; kx++ {
				for ky := y.lo; ky <= y.hi; ky++ {
					i := (kx-xMin)*m.ny + (ky - yMin)
					perCell[i] = append(perCell[i], idx)
				}
			}
		}
	}
	m.cellStart = make([]int32, len(perCell)+1)
	for i, ps := range perCell {
		m.cellStart[i+1] = m.cellStart[i] + int32(len(ps))
		if len(ps) > 0 {
			m.occupied++
		}
	}
	m.cellParts = make([]int32, 0, m.cellStart[len(perCell)])
	for _, ps := range perCell {
		m.cellParts = append(m.cellParts, ps...)
	}
	m.version = m.hash()
	return m, problems, nil
}

func (m *Map) holdersOf(p Partition) ([]int32, *Problem) {
	if err := p.Extent.validate(); err != nil {
		return nil, &Problem{Kind: "Partition", Name: p.Name, Field: "spec.extent", Reason: ProblemInvalidExtent,
			Message: fmt.Sprintf("extent %v: %v", p.Extent, err)}
	}
	var hs []int32
	for i, name := range p.Replicas {
		r := m.ReplicaIndex(name)
		if r < 0 {
			return nil, &Problem{Kind: "Partition", Name: p.Name, Field: fmt.Sprintf("spec.replicas[%d]", i), Reason: ProblemUnknownReplica,
				Message: fmt.Sprintf("domain %s has no replica %q", m.domain.Name, name)}
		}
		hs = append(hs, int32(r))
	}
	slices.Sort(hs)
	return slices.Compact(hs), nil
}

func checkDomain(d Domain) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidDomain, d.Name, fmt.Sprintf(format, args...))
	}
	if !ValidIdentifier(d.Name) {
		return fail("name must match [A-Za-z0-9._:-]+")
	}
	if err := checkGrid(d.GridDeg, d.MaxCells); err != nil {
		return fail("gridDegrees %d must divide 180 and maxCells %d must be at least 1", d.GridDeg, d.MaxCells)
	}
	if d.CapPercent != NoCap && (d.CapPercent < 0 || d.CapPercent > 100) {
		return fail("localityCapPercent %d must be 0..100", d.CapPercent)
	}
	seen := map[string]bool{}
	for i, r := range d.Replicas {
		if !ValidIdentifier(r.Name) || !ValidIdentifier(r.Region) {
			return fail("replicas[%d]: name %q and region %q must match [A-Za-z0-9._:-]+", i, r.Name, r.Region)
		}
		if seen[r.Name] {
			return fail("replicas[%d]: duplicate name %q", i, r.Name)
		}
		seen[r.Name] = true
	}
	seen = map[string]bool{}
	for i, p := range d.Products {
		if !ValidIdentifier(p.Name) {
			return fail("products[%d]: name %q must match [A-Za-z0-9._:-]+", i, p.Name)
		}
		if seen[p.Name] {
			return fail("products[%d]: duplicate name %q", i, p.Name)
		}
		seen[p.Name] = true
		for j, r := range p.AllowedRegions {
			if !ValidIdentifier(r) {
				return fail("products[%d].allowedRegions[%d]: %q must match [A-Za-z0-9._:-]+", i, j, r)
			}
		}
	}
	return nil
}

// hash is a content version: the same domain and partitions give the same version on
// every machine, so explain-route from manifests names the version a proxy carries.
func (m *Map) hash() string {
	h := sha256.New()
	var n [8]byte
	num := func(v int64) { binary.BigEndian.PutUint64(n[:], uint64(v)); h.Write(n[:]) }
	str := func(s string) { num(int64(len(s))); h.Write([]byte(s)) }
	d := m.domain
	str(d.Name)
	num(int64(d.GridDeg))
	num(int64(d.MaxCells))
	num(int64(d.CapPercent))
	num(int64(len(d.Replicas)))
	for _, r := range d.Replicas {
		str(r.Name)
		str(r.Upstream)
		str(r.Region)
	}
	num(int64(len(d.Products)))
	for i, p := range d.Products {
		str(p.Name)
		str(p.PathPrefix)
		num(int64(len(m.lawful[i])))
		for _, r := range m.lawful[i] {
			num(int64(r))
		}
	}
	num(int64(len(m.partitions)))
	for i, p := range m.partitions {
		str(p)
		num(int64(len(m.holders[i])))
		for _, r := range m.holders[i] {
			num(int64(r))
		}
	}
	for _, v := range m.cellStart {
		num(int64(v))
	}
	for _, v := range m.cellParts {
		num(int64(v))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Version identifies the map's content (domain, replicas, products, partitions).
func (m *Map) Version() string { return m.version }

// DataVersion identifies everything a decision depends on: the map and the health of
// each replica, one digit per replica in name order ("1" healthy).
func (m *Map) DataVersion(health []bool) string {
	var b strings.Builder
	b.WriteString(m.version)
	b.WriteString("-h")
	for i := range m.domain.Replicas {
		if i < len(health) && health[i] {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}

// Domain returns the domain with replicas and products in name order. Do not modify it.
func (m *Map) Domain() Domain { return m.domain }

// Replicas returns the replicas in name order; health slices are indexed the same way.
func (m *Map) Replicas() []Replica { return m.domain.Replicas }

// ReplicaIndex returns the index of the named replica, or -1.
func (m *Map) ReplicaIndex(name string) int {
	i, ok := slices.BinarySearchFunc(m.domain.Replicas, name, func(r Replica, n string) int { return strings.Compare(r.Name, n) })
	if !ok {
		return -1
	}
	return i
}

func (m *Map) productIndex(name string) int {
	i, ok := slices.BinarySearchFunc(m.domain.Products, name, func(p Product, n string) int { return strings.Compare(p.Name, n) })
	if !ok {
		return -1
	}
	return i
}

// Lawful returns the names of the replicas a product may be served from, in name order.
func (m *Map) Lawful(product string) []string {
	p := m.productIndex(product)
	if p < 0 {
		return nil
	}
	out := make([]string, len(m.lawful[p]))
	for i, r := range m.lawful[p] {
		out[i] = m.domain.Replicas[r].Name
	}
	return out
}

// Partitions returns the accepted partitions in name order.
func (m *Map) Partitions() []string { return m.partitions }

// Held returns how many accepted partitions each replica holds, by replica index.
func (m *Map) Held() []int {
	out := make([]int, len(m.domain.Replicas))
	for _, hs := range m.holders {
		for _, r := range hs {
			out[r]++
		}
	}
	return out
}

// OccupiedCells is the number of cells holding at least one partition.
func (m *Map) OccupiedCells() int { return m.occupied }

// PartitionCells returns how many cells a partition extent covers on the map's grid.
func (m *Map) PartitionCells(extent BBox) int {
	n, err := CountCells(extent, m.domain.GridDeg)
	if err != nil {
		return 0
	}
	return n
}

// cellPartitions returns the partitions of a cell, by index.
func (m *Map) cellPartitions(kx, ky int) []int32 {
	i := (kx-m.xMin)*m.ny + (ky - m.yMin)
	return m.cellParts[m.cellStart[i]:m.cellStart[i+1]]
}

// eachCell calls fn for every occupied cell in (X, Y) order with its partitions' names.
func (m *Map) eachCell(fn func(c Cell, parts []int32)) {
	for i := 0; i < m.nx*m.ny; i++ {
		if ps := m.cellParts[m.cellStart[i]:m.cellStart[i+1]]; len(ps) > 0 {
			fn(Cell{X: m.xMin + i/m.ny, Y: m.yMin + i%m.ny}, ps)
		}
	}
}

// Holders returns the replicas holding an accepted partition, in name order.
func (m *Map) Holders(partition string) []string {
	i, ok := slices.BinarySearch(m.partitions, partition)
	if !ok {
		return nil
	}
	out := make([]string, len(m.holders[i]))
	for j, r := range m.holders[i] {
		out[j] = m.domain.Replicas[r].Name
	}
	return out
}
