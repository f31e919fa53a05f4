package convert

import (
	"fmt"
	"regexp"
	"slices"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
)

var (
	// region is the schema pattern of a replica's region and of an allowed region.
	region = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)
	// pathPrefix is the schema pattern of a product's path prefix.
	pathPrefix = regexp.MustCompile(`^/[A-Za-z0-9._~!$&'()*+,;=:@/%-]*$`)
)

// firstIndex remembers at which list index each non-empty value was first seen.
type firstIndex map[string]int

// seen records v at index i, or reports the earlier index of a repeated v.
func (f firstIndex) seen(v string, i int) (earlier int, dup bool) {
	if j, ok := f[v]; ok {
		return j, true
	}
	if v != "" {
		f[v] = i
	}
	return 0, false
}

// SpatialDomain validates and converts a SpatialDomain, applying the CRD defaults.
// Every name, upstream and region also passes partitionmap.ValidIdentifier, as they
// are written into the generated Lua.
func SpatialDomain(in *v1alpha1.SpatialDomain) (topology.SpatialDomain, field.ErrorList) {
	d := in.DeepCopy()
	d.Default()
	s := d.Spec
	sp := field.NewPath("spec")
	errs := validateMeta(d.ObjectMeta)
	errs = identifier(errs, 0, field.NewPath("metadata", "name"), d.Name)

	grid := int64(*s.GridDegrees)
	errs = inRange(errs, sp.Child("gridDegrees"), grid, 1, int64(v1alpha1.MaxGridDegrees))
	if grid >= 1 && grid <= int64(v1alpha1.MaxGridDegrees) && 180%grid != 0 {
		errs = append(errs, field.Invalid(sp.Child("gridDegrees"), grid,
			"gridDegrees must divide 180 (1, 2, 3, 4, 5, 6, 9, 10, 12, 15, 18, 20, 30, 36, 45, 60, 90 or 180)"))
	}
	errs = inRange(errs, sp.Child("maxCells"), int64(*s.MaxCells), 1, int64(v1alpha1.MaxMaxCells))
	capPercent := partitionmap.NoCap
	if s.LocalityCapPercent != nil {
		errs = inRange(errs, sp.Child("localityCapPercent"), int64(*s.LocalityCapPercent), 0, int64(v1alpha1.MaxLocalityCapPercent))
		capPercent = int(*s.LocalityCapPercent)
	}

	out := partitionmap.Domain{
		Name:       d.Name,
		GridDeg:    int(grid),
		MaxCells:   int(*s.MaxCells),
		CapPercent: capPercent,
	}

	rp := sp.Child("replicas")
	errs = listSize(errs, rp, len(s.Replicas), v1alpha1.MaxSpatialReplicas)
	replicaAt := firstIndex{}
	for i, r := range s.Replicas {
		p := rp.Index(i)
		errs = validateLabel(errs, p.Child("name"), r.Name, "a replica name")
		n := len(errs)
		errs = validateUpstreamRef(errs, p.Child("upstream"), r.Upstream)
		errs = identifier(errs, n, p.Child("upstream"), r.Upstream)
		errs = validateRegion(errs, p.Child("region"), r.Region)
		if j, dup := replicaAt.seen(r.Name, i); dup {
			errs = append(errs, field.Duplicate(p, fmt.Sprintf("replica name %q (also replicas[%d])", r.Name, j)))
		}
		out.Replicas = append(out.Replicas, partitionmap.Replica{Name: r.Name, Upstream: r.Upstream, Region: r.Region})
	}

	pp := sp.Child("products")
	errs = listSize(errs, pp, len(s.Products), v1alpha1.MaxSpatialProducts)
	productAt, prefixAt := firstIndex{}, firstIndex{}
	for i, pr := range s.Products {
		p := pp.Index(i)
		errs = validateLabel(errs, p.Child("name"), pr.Name, "a product name")
		errs = validatePathPrefix(errs, p.Child("pathPrefix"), pr.PathPrefix)
		ap := p.Child("allowedRegions")
		errs = listSize(errs, ap, len(pr.AllowedRegions), v1alpha1.MaxAllowedRegions)
		regionAt := firstIndex{}
		for k, r := range pr.AllowedRegions {
			errs = validateRegion(errs, ap.Index(k), r)
			if j, dup := regionAt.seen(r, k); dup {
				errs = append(errs, field.Duplicate(ap.Index(k), fmt.Sprintf("region %q (also allowedRegions[%d])", r, j)))
			}
		}
		if j, dup := productAt.seen(pr.Name, i); dup {
			errs = append(errs, field.Duplicate(p, fmt.Sprintf("product name %q (also products[%d])", pr.Name, j)))
		}
		if j, dup := prefixAt.seen(pr.PathPrefix, i); dup {
			errs = append(errs, field.Duplicate(p.Child("pathPrefix"),
				fmt.Sprintf("each product needs its own pathPrefix: %q is also the pathPrefix of products[%d]", pr.PathPrefix, j)))
		}
		out.Products = append(out.Products, partitionmap.Product{
			Name: pr.Name, PathPrefix: pr.PathPrefix, AllowedRegions: slices.Clone(pr.AllowedRegions),
		})
	}

	var lri time.Duration
	if lr := s.LoadReporting; lr != nil {
		// Default() has set the interval
		if lri = lr.Interval.Duration; lri < time.Second || lri > time.Minute {
			errs = append(errs, field.Invalid(sp.Child("loadReporting", "interval"), lri.String(), "must be from 1s to 60s"))
		}
	}
	exp, expErrs := ExportTo(sp.Child("exportTo"), s.ExportTo, Key(d.Namespace, d.Name).Namespace)
	errs = append(errs, expErrs...)

	if len(errs) > 0 {
		return topology.SpatialDomain{}, errs
	}
	return topology.SpatialDomain{Key: Key(d.Namespace, d.Name), Domain: out, LoadReportInterval: lri, ExportTo: exp}, nil
}

// Partition validates and converts a Partition. Whether its domain and replicas
// exist is for the topology to judge, not for the object alone.
func Partition(in *v1alpha1.Partition) (topology.Partition, field.ErrorList) {
	pt := in.DeepCopy()
	pt.Default()
	s := pt.Spec
	sp := field.NewPath("spec")
	errs := validateMeta(pt.ObjectMeta)

	dp := sp.Child("domain")
	switch {
	case s.Domain == "":
		errs = append(errs, field.Required(dp, "names the SpatialDomain in the same namespace"))
	case len(s.Domain) > 253 || !dnsSubdomain.MatchString(s.Domain) || !partitionmap.ValidIdentifier(s.Domain):
		errs = append(errs, field.Invalid(dp, s.Domain, "must be a SpatialDomain name (lowercase RFC 1123 subdomain)"))
	}

	ep := sp.Child("extent")
	e := s.Extent
	// In positive form, so NaN fails every check.
	inLon := func(errs field.ErrorList, name string, v float64) field.ErrorList {
		if !(v >= -180 && v <= 180) {
			errs = append(errs, field.Invalid(ep.Child(name), v, "must be a longitude between -180 and 180"))
		}
		return errs
	}
	inLat := func(errs field.ErrorList, name string, v float64) field.ErrorList {
		if !(v >= -90 && v <= 90) {
			errs = append(errs, field.Invalid(ep.Child(name), v, "must be a latitude between -90 and 90"))
		}
		return errs
	}
	n := len(errs)
	errs = inLon(errs, "west", e.West)
	errs = inLat(errs, "south", e.South)
	errs = inLon(errs, "east", e.East)
	errs = inLat(errs, "north", e.North)
	if len(errs) == n && !(e.South <= e.North) {
		errs = append(errs, field.Invalid(ep.Child("south"), e.South,
			"south must not be greater than north (west may be greater than east: the extent then crosses the antimeridian)"))
	}

	rp := sp.Child("replicas")
	errs = listSize(errs, rp, len(s.Replicas), v1alpha1.MaxSpatialReplicas)
	replicaAt := firstIndex{}
	for i, r := range s.Replicas {
		errs = validateLabel(errs, rp.Index(i), r, "a replica name of the domain")
		if j, dup := replicaAt.seen(r, i); dup {
			errs = append(errs, field.Duplicate(rp.Index(i), fmt.Sprintf("replica %q (also replicas[%d])", r, j)))
		}
	}

	if len(errs) > 0 {
		return topology.Partition{}, errs
	}
	return topology.Partition{
		Key:      Key(pt.Namespace, pt.Name),
		Domain:   s.Domain,
		Extent:   partitionmap.BBox{West: e.West, South: e.South, East: e.East, North: e.North},
		Replicas: slices.Clone(s.Replicas),
	}, nil
}

// identifier is the final guard on a value written into the generated Lua: when the
// checks since errs had before items found nothing, v must still pass
// partitionmap.ValidIdentifier.
func identifier(errs field.ErrorList, before int, p *field.Path, v string) field.ErrorList {
	if len(errs) == before && !partitionmap.ValidIdentifier(v) {
		return append(errs, field.Invalid(p, v, "must be an identifier: letters, digits, '.', '_', ':' and '-'"))
	}
	return errs
}

// listSize checks a required list's length: at least one item, at most most.
func listSize(errs field.ErrorList, p *field.Path, n, most int) field.ErrorList {
	switch {
	case n == 0:
		return append(errs, field.Required(p, "needs at least one item"))
	case n > most:
		return append(errs, field.TooMany(p, n, most))
	}
	return errs
}

// validateLabel checks a name that is a lowercase RFC 1123 label and an identifier.
func validateLabel(errs field.ErrorList, p *field.Path, v, what string) field.ErrorList {
	switch {
	case v == "":
		return append(errs, field.Required(p, what))
	case len(v) > 63 || !dnsLabel.MatchString(v) || !partitionmap.ValidIdentifier(v):
		return append(errs, field.Invalid(p, v, "must be "+what+" (lowercase RFC 1123 label)"))
	}
	return errs
}

// validateRegion checks a region: 1 to 63 of [A-Za-z0-9._:-], an identifier.
func validateRegion(errs field.ErrorList, p *field.Path, v string) field.ErrorList {
	switch {
	case v == "":
		return append(errs, field.Required(p, "a region"))
	case len(v) > v1alpha1.MaxRegionLength:
		return append(errs, field.TooLong(p, v, v1alpha1.MaxRegionLength))
	case !region.MatchString(v) || !partitionmap.ValidIdentifier(v):
		return append(errs, field.Invalid(p, v, "a region holds only letters, digits, '.', '_', ':' and '-'"))
	}
	return errs
}

// validatePathPrefix checks a product's path prefix against the schema.
func validatePathPrefix(errs field.ErrorList, p *field.Path, v string) field.ErrorList {
	switch {
	case v == "":
		return append(errs, field.Required(p, "a path prefix starting with '/'"))
	// The schema's maxLength counts characters; the pattern allows only ASCII, so
	// any longer string fails one of the two either way.
	case utf8.RuneCountInString(v) > v1alpha1.MaxPathPrefixLength:
		return append(errs, field.TooLong(p, v, v1alpha1.MaxPathPrefixLength))
	case !pathPrefix.MatchString(v):
		return append(errs, field.Invalid(p, v, "must start with '/' and hold only letters, digits and . _ ~ ! $ & ' ( ) * + , ; = : @ / % -"))
	}
	return errs
}
