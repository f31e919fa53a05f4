package publish

import (
	"bytes"
	"maps"
	"slices"
	"strings"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdscache"
)

// variantKey is one client class of one view (rendering).
type variantKey struct {
	view  int
	class string
}

// classState is what the publisher keeps of client classes; p.mu guards it.
type classState struct {
	// classes are the client classes of the last snapshot published.
	classes *topology.ClientClasses
	// affine are the upstreams published with a mode other than None.
	affine map[topology.Key]struct{}
}

// follow keeps track of a published upstream's mode.
func (c *classState) follow(k topology.Key, mode affinity.Mode) {
	if mode == affinity.None {
		delete(c.affine, k)
	} else {
		c.affine[k] = struct{}{}
	}
}

// viewClasses is each view's classes, as the renderers index them.
func viewClasses(c *topology.ClientClasses) [translate.NumRenderings][]string {
	var out [translate.NumRenderings][]string
	for v := range out {
		out[v] = c.Of(v)
	}
	return out
}

// rerenderClasses renders, for every affinity upstream the publication
// did not change otherwise (changed), the variants of the classes that
// joined since the last publication and drops those of the classes that
// left: a class joining or leaving costs each affinity upstream that
// class's derivation only. It appends the changes to changes and returns
// the upstreams it rendered, with their new variants.
func (p *Publisher) rerenderClasses(s *topology.Snapshot, changed map[topology.Key]*published,
	changes []xdscache.Change) ([]xdscache.Change, map[topology.Key]*published) {
	classes := s.ClientClasses()
	prev, cur := viewClasses(p.cls.classes), viewClasses(classes)
	added, removed := classDiff(cur, prev), classDiff(prev, cur)
	var out map[topology.Key]*published
	for _, k := range slices.SortedFunc(maps.Keys(p.cls.affine), topology.Key.Compare) {
		pub := p.upstream[k]
		if _, done := changed[k]; done || pub == nil || s.Upstream(k) == nil {
			continue
		}
		next := *pub
		next.failed = maps.Clone(pub.failed)
		variants, err := p.renderAdded(&next, classes, added, removed)
		if err != nil {
			p.log.Error("client-class variants not rendered; those clients keep what they have", "upstream", k, "error", err)
			continue
		}
		changes = appendVariantChanges(changes, pub, variants)
		next.variants = variants
		if out == nil {
			out = map[topology.Key]*published{}
		}
		out[k] = &next
	}
	return changes, out
}

// classDiff lists, per view, the classes of a that b lacks.
func classDiff(a, b [translate.NumRenderings][]string) [translate.NumRenderings][]string {
	var out [translate.NumRenderings][]string
	for v := range a {
		for _, class := range a[v] {
			if _, found := slices.BinarySearch(b[v], class); !found {
				out[v] = append(out[v], class)
			}
		}
	}
	return out
}

// renderAdded is pub's variants after the classes removed left and those
// added joined: the others are kept as they are.
func (p *Publisher) renderAdded(pub *published, classes *topology.ClientClasses, added, removed [translate.NumRenderings][]string) (map[variantKey]*xdscache.Entry, error) {
	pub.forgetLeft(classes)
	fresh, err := p.renderClasses(pub, pub.state, &p.scratch, false, added)
	if err != nil {
		return nil, err
	}
	var out map[variantKey]*xdscache.Entry
	keep := func(k variantKey, e *xdscache.Entry) {
		if out == nil {
			out = map[variantKey]*xdscache.Entry{}
		}
		out[k] = e
	}
	for k, e := range pub.variants {
		if _, gone := slices.BinarySearch(removed[k.view], k.class); !gone {
			keep(k, e)
		}
	}
	for k, e := range fresh {
		keep(k, e)
	}
	return out, nil
}

// renderVariants renders, for an affinity upstream, the endpoints each
// client class of each view receives where they differ from the base's
// (pub.endpoints, already built for cur), divided under Balanced by the
// demand cur carries. A class whose derivation fails (too many effective
// priorities) receives the base and is logged once. force makes every
// variant a new entry, as a changed cluster needs.
func (p *Publisher) renderVariants(pub *published, cur *topology.UpstreamState, classes *topology.ClientClasses, scratch *[]byte, force bool) (map[variantKey]*xdscache.Entry, error) {
	pub.forgetLeft(classes)
	return p.renderClasses(pub, cur, scratch, force, viewClasses(classes))
}

// forgetLeft drops the failures of classes no client is in any more, so
// what pub keeps stays within the classes connected.
func (pub *published) forgetLeft(classes *topology.ClientClasses) {
	for class := range pub.failed {
		if !classes.Has(class) {
			delete(pub.failed, class)
		}
	}
}

// renderClasses is renderVariants for the given classes of each view only.
func (p *Publisher) renderClasses(pub *published, cur *topology.UpstreamState, scratch *[]byte, force bool,
	classes [translate.NumRenderings][]string) (map[variantKey]*xdscache.Entry, error) {
	if cur.Upstream.ModeOf() == affinity.None {
		return nil, nil
	}
	var out map[variantKey]*xdscache.Entry
	mode := cur.Upstream.ModeOf()
	derived := map[string]*topology.ClassState{}
	// under PreferSameRegion the zones of a region are one derivation and
	// share one encoding
	shared := map[variantKey]*xdscache.Entry{}
	for v := range translate.NumRenderings {
		for _, class := range classes[v] {
			from := topology.ClassZone(class)
			if mode == affinity.PreferSameRegion {
				from.Zone = ""
			}
			if e, ok := shared[variantKey{int(v), from.String()}]; ok {
				if e != nil {
					out[variantKey{int(v), class}] = e
				}
				continue
			}
			cs, ok := derived[from.String()]
			if !ok {
				var err error
				cs, err = cur.ForClass(from, cur.Demand.Zones)
				if err != nil {
					if !pub.failed[class] {
						p.log.Warn("a client class receives the base split", "upstream", cur.Upstream.Key, "class", class, "error", err)
					}
					pub.markFailed(class, true)
					cs = nil
				} else {
					pub.markFailed(class, false)
				}
				derived[from.String()] = cs
			}
			sharedKey := variantKey{int(v), from.String()}
			shared[sharedKey] = nil
			if cs == nil || cs.Base(cur) {
				continue
			}
			var err error
			if *scratch, err = translate.AppendEndpointsNamed((*scratch)[:0], pub.name, cs.State, v); err != nil {
				return nil, err
			}
			if bytes.Equal(pub.endpoints[v].Any.GetValue(), *scratch) {
				continue // the class receives what the base is
			}
			key := variantKey{int(v), class}
			var old *xdscache.Entry
			if !force {
				old = pub.variants[key]
			}
			if out == nil {
				out = map[variantKey]*xdscache.Entry{}
			}
			out[key] = entry(old, pub.name, resource.EndpointType, *scratch)
			shared[sharedKey] = out[key]
		}
	}
	return out, nil
}

func (pub *published) markFailed(class string, failed bool) {
	switch {
	case failed && pub.failed == nil:
		pub.failed = map[string]bool{class: true}
	case failed:
		pub.failed[class] = true
	default:
		delete(pub.failed, class)
	}
}

// appendVariantChanges appends the puts and deletes that take was's
// variants to next's, in a stable order.
func appendVariantChanges(changes []xdscache.Change, was *published, next map[variantKey]*xdscache.Entry) []xdscache.Change {
	var prev map[variantKey]*xdscache.Entry
	if was != nil {
		prev = was.variants
	}
	keys := slices.Collect(maps.Keys(next))
	for k := range prev {
		if _, ok := next[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b variantKey) int {
		if a.view != b.view {
			return a.view - b.view
		}
		return strings.Compare(a.class, b.class)
	})
	for _, k := range keys {
		e, old := next[k], prev[k]
		switch {
		case e == nil:
			changes = append(changes, xdscache.Change{View: k.view, TypeURL: resource.EndpointType, Name: old.Name, Zone: k.class})
		case e != old:
			changes = append(changes, xdscache.Change{View: k.view, TypeURL: resource.EndpointType, Name: e.Name, Zone: k.class, Entry: e})
		}
	}
	return changes
}
