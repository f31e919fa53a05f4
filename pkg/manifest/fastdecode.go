package manifest

import (
	"bytes"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/convert"
	"poise.dev/poise/pkg/topology"
)

// The fast path decodes the documents Poise's own tools and most people
// write — block and single-line flow YAML of plain identifiers, numbers and
// simple strings, for the fields of Upstream, Locality and EndpointSet it
// knows — straight into the API object, without the generic YAML tree, the
// JSON text and the reflective decoding of the general path (decodeDocument).
// It decodes to exactly the object the general path would, or declines: on
// anything it does not know (another kind, an unknown field, a tab, an
// anchor, an escape, a multi-line scalar, a scalar YAML would read as a
// number where a string is wanted, ...) and on any problem at all, the
// document goes the general path, which says what is wrong. So the errors
// are always the general path's; the fast path only saves time.

// fastDecode decodes one document by the fast path, or reports false.
func (p *fastParser) fastDecode(file string, doc int, raw []byte) (Document, bool) {
	obj, ok := p.apiObject(raw)
	if !ok {
		return Document{}, false
	}
	var (
		value any
		key   topology.Key
		kind  string
		nerrs int
		ns    string
	)
	switch o := obj.(type) {
	case *v1alpha1.Upstream:
		u, ferrs := convert.Upstream(o)
		value, key, kind, nerrs, ns = u, u.Key, topology.KindUpstream, len(ferrs), o.Namespace
	case *v1alpha1.Locality:
		l, ferrs := convert.Locality(o)
		value, key, kind, nerrs, ns = l, l.Key, topology.KindLocality, len(ferrs), o.Namespace
	case *v1alpha1.EndpointSet:
		s, ferrs := convert.OwnedEndpointSet(o) // o is ours: no copy to default
		value, key, kind, nerrs, ns = s, s.Key, topology.KindEndpointSet, len(ferrs), o.Namespace
	}
	if nerrs > 0 {
		return Document{}, false // the general path says what is wrong
	}
	return Document{Object: Object{File: file, Document: doc, Kind: kind, Key: key, NoNamespace: ns == ""}, value: value}, true
}

// apiObject decodes a document into a *v1alpha1.Upstream, Locality or
// EndpointSet, or reports false.
func (p *fastParser) apiObject(raw []byte) (any, bool) {
	root, ok := p.parse(raw)
	if !ok {
		return nil, false
	}
	var apiVersion, kind string
	for k := p.nodes[root].first; k >= 0; k = p.nodes[p.nodes[k].next].next {
		switch string(p.bytes(k)) {
		case "apiVersion":
			apiVersion, ok = p.str(p.nodes[k].next)
		case "kind":
			kind, ok = p.str(p.nodes[k].next)
		}
		if !ok {
			return nil, false
		}
	}
	if apiVersion != v1alpha1.GroupVersion.String() {
		return nil, false
	}
	switch kind {
	case topology.KindUpstream:
		obj := &v1alpha1.Upstream{}
		return obj, p.object(root, &obj.TypeMeta, &obj.ObjectMeta, func(v int32) bool { return p.upstreamSpec(v, &obj.Spec) }, p.empty)
	case topology.KindLocality:
		obj := &v1alpha1.Locality{}
		return obj, p.object(root, &obj.TypeMeta, &obj.ObjectMeta, func(v int32) bool { return p.localitySpec(v, &obj.Spec) }, p.empty)
	case topology.KindEndpointSet:
		obj := &v1alpha1.EndpointSet{}
		return obj, p.object(root, &obj.TypeMeta, &obj.ObjectMeta, func(v int32) bool { return p.endpointSetSpec(v, &obj.Spec) },
			func(v int32) bool { return p.endpointSetStatus(v, &obj.Status) })
	}
	return nil, false
}

// fieldNames are the keys the fast path knows, so a key is named without
// copying it.
var fieldNames = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"apiVersion", "kind", "metadata", "name", "namespace", "spec", "status",
		"overprovisioningFactor", "panicThreshold", "panicMode", "drainingCapacity", "healthAdjustment", "loadBalancing",
		"protocol", "connectTimeout", "endpointsFrom", "service", "port", "upstream", "priority", "weight", "region",
		"zone", "subZone", "locality", "endpoints", "address", "adminState", "observedGeneration", "health", "probe",
		"circuit", "outlierEjected", "addressPolicy", "allowLoopback", "exportTo"} {
		m[k] = k
	}
	return m
}()

// fields calls fn with each key and value of a mapping; null is an empty
// mapping. A key given twice, or one fn does not know, declines.
func (p *fastParser) fields(n int32, fn func(key string, v int32) bool) bool {
	if p.isNull(n) {
		return true
	}
	if p.nodes[n].kind != fastMap {
		return false
	}
	for k := p.nodes[n].first; k >= 0; k = p.nodes[p.nodes[k].next].next {
		key, known := fieldNames[string(p.bytes(k))]
		if !known {
			return false
		}
		for o := p.nodes[n].first; o != k; o = p.nodes[p.nodes[o].next].next {
			if bytes.Equal(p.bytes(o), p.bytes(k)) {
				return false
			}
		}
		if !fn(key, p.nodes[k].next) {
			return false
		}
	}
	return true
}

// items decodes a sequence into a slice; null leaves it nil, [] makes it
// empty, as JSON does.
func items[T any](p *fastParser, n int32, dst *[]T, fn func(v int32, e *T) bool) bool {
	if p.isNull(n) {
		*dst = nil
		return true
	}
	if p.nodes[n].kind != fastSeq {
		return false
	}
	count := 0
	for c := p.nodes[n].first; c >= 0; c = p.nodes[c].next {
		count++
	}
	out := make([]T, count)
	i := 0
	for c := p.nodes[n].first; c >= 0; c = p.nodes[c].next {
		if !fn(c, &out[i]) {
			return false
		}
		i++
	}
	*dst = out
	return true
}

// empty accepts null or an empty mapping: a status the fast path need not
// read.
func (p *fastParser) empty(n int32) bool {
	return p.isNull(n) || p.nodes[n].kind == fastMap && p.nodes[n].first < 0
}

// object decodes a document's top level: apiVersion, kind, metadata (name
// and namespace), and spec and status through their functions.
func (p *fastParser) object(root int32, tm *metav1.TypeMeta, om *metav1.ObjectMeta, spec, status func(v int32) bool) bool {
	return p.fields(root, func(k string, v int32) bool {
		switch k {
		case "apiVersion":
			tm.APIVersion, _ = p.str(v)
			return true
		case "kind":
			tm.Kind, _ = p.str(v)
			return true
		case "metadata":
			return p.fields(v, func(k string, v int32) bool {
				switch k {
				case "name":
					return strField(p, v, &om.Name)
				case "namespace":
					return strField(p, v, &om.Namespace)
				}
				return false
			})
		case "spec":
			return spec(v)
		case "status":
			return status(v)
		}
		return false
	})
}

func (p *fastParser) localityID(k string, v int32, l *v1alpha1.LocalityID) (known, ok bool) {
	switch k {
	case "region":
		return true, strField(p, v, &l.Region)
	case "zone":
		return true, strField(p, v, &l.Zone)
	case "subZone":
		return true, strField(p, v, &l.SubZone)
	}
	return false, false
}

func (p *fastParser) upstreamSpec(n int32, s *v1alpha1.UpstreamSpec) bool {
	return p.fields(n, func(k string, v int32) bool {
		switch k {
		case "overprovisioningFactor":
			return p.int32Ptr(v, &s.OverprovisioningFactor)
		case "panicThreshold":
			return p.int32Ptr(v, &s.PanicThreshold)
		case "panicMode":
			return strField(p, v, &s.PanicMode)
		case "drainingCapacity":
			return strField(p, v, &s.DrainingCapacity)
		case "healthAdjustment":
			return strField(p, v, &s.HealthAdjustment)
		case "loadBalancing":
			return strField(p, v, &s.LoadBalancing)
		case "protocol":
			return strField(p, v, &s.Protocol)
		case "connectTimeout":
			return p.duration(v, &s.ConnectTimeout)
		case "endpointsFrom":
			return p.endpointsFrom(v, &s.EndpointsFrom)
		case "addressPolicy":
			return p.addressPolicy(v, &s.AddressPolicy)
		case "exportTo":
			return items(p, v, &s.ExportTo, func(v int32, e *string) bool { return strField(p, v, e) })
		}
		return false
	})
}

// duration decodes a metav1.Duration: a string time.ParseDuration reads.
func (p *fastParser) duration(n int32, dst **metav1.Duration) bool {
	if p.isNull(n) {
		*dst = nil
		return true
	}
	str, ok := p.str(n)
	if !ok {
		return false
	}
	d, err := time.ParseDuration(str)
	if err != nil {
		return false
	}
	*dst = &metav1.Duration{Duration: d}
	return true
}

func (p *fastParser) endpointsFrom(n int32, dst **v1alpha1.EndpointsFrom) bool {
	if p.isNull(n) {
		*dst = nil
		return true
	}
	from := &v1alpha1.EndpointsFrom{}
	*dst = from
	return p.fields(n, func(k string, v int32) bool {
		if k != "service" {
			return false
		}
		return p.fields(v, func(k string, v int32) bool {
			switch k {
			case "name":
				return strField(p, v, &from.Service.Name)
			case "port":
				return p.portRef(v, &from.Service.Port)
			}
			return false
		})
	})
}

func (p *fastParser) addressPolicy(n int32, dst **v1alpha1.AddressPolicy) bool {
	if p.isNull(n) {
		*dst = nil
		return true
	}
	ap := &v1alpha1.AddressPolicy{}
	*dst = ap
	return p.fields(n, func(k string, v int32) bool {
		return k == "allowLoopback" && p.boolVal(v, &ap.AllowLoopback)
	})
}

// portRef decodes an IntOrString: a decimal number is an int, a string a
// string.
func (p *fastParser) portRef(n int32, dst *intstr.IntOrString) bool {
	if p.nodes[n].kind == fastPlain {
		if v, ok := p.integer(n, -1<<31, 1<<31-1); ok {
			*dst = intstr.FromInt32(int32(v))
			return true
		}
	}
	if p.isNull(n) {
		return false
	}
	s, ok := p.str(n)
	if ok {
		*dst = intstr.FromString(s)
	}
	return ok
}

func (p *fastParser) localitySpec(n int32, s *v1alpha1.LocalitySpec) bool {
	return p.fields(n, func(k string, v int32) bool {
		switch k {
		case "upstream":
			return strField(p, v, &s.Upstream)
		case "priority":
			return p.int32Ptr(v, &s.Priority)
		case "weight":
			return p.int64Ptr(v, &s.Weight)
		}
		_, ok := p.localityID(k, v, &s.LocalityID)
		return ok
	})
}

func (p *fastParser) endpointSetSpec(n int32, s *v1alpha1.EndpointSetSpec) bool {
	return p.fields(n, func(k string, v int32) bool {
		switch k {
		case "upstream":
			return strField(p, v, &s.Upstream)
		case "locality":
			return p.fields(v, func(k string, v int32) bool {
				_, ok := p.localityID(k, v, &s.Locality)
				return ok
			})
		case "priority":
			return p.int32Ptr(v, &s.Priority)
		case "endpoints":
			return items(p, v, &s.Endpoints, func(v int32, e *v1alpha1.Endpoint) bool {
				return p.fields(v, func(k string, v int32) bool {
					switch k {
					case "address":
						return strField(p, v, &e.Address)
					case "port":
						return p.int32Val(v, &e.Port)
					case "weight":
						return p.int64Ptr(v, &e.Weight)
					case "adminState":
						return strField(p, v, &e.AdminState)
					}
					return false
				})
			})
		}
		return false
	})
}

func (p *fastParser) endpointSetStatus(n int32, s *v1alpha1.EndpointSetStatus) bool {
	return p.fields(n, func(k string, v int32) bool {
		switch k {
		case "observedGeneration":
			return p.int64Val(v, &s.ObservedGeneration)
		case "health":
			return items(p, v, &s.Health, func(v int32, h *v1alpha1.EndpointHealth) bool {
				return p.fields(v, func(k string, v int32) bool {
					switch k {
					case "address":
						return strField(p, v, &h.Address)
					case "port":
						return p.int32Val(v, &h.Port)
					case "probe":
						return strField(p, v, &h.Probe)
					case "circuit":
						return strField(p, v, &h.Circuit)
					case "outlierEjected":
						return p.boolVal(v, &h.OutlierEjected)
					}
					return false
				})
			})
		}
		return false
	})
}
