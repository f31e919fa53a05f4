package explain

import (
	"fmt"
	"strings"

	"poise.dev/poise/pkg/topology"
)

// Visibility origins: what set the rule in force.
const (
	// OriginSpec: the object's own spec.exportTo.
	OriginSpec = "spec.exportTo"
	// OriginDefault: the control plane's default for objects without one
	// (serve --default-export-to, "*" unless set).
	OriginDefault = "default"
)

// Audience is the xDS client a report judges readability for (explain
// --client-namespace, --client-anonymous): a client whose identity proves
// Namespace, or an anonymous one, which reads only what is exported to
// every namespace.
type Audience struct {
	Namespace string `json:"namespace,omitempty"`
	Anonymous bool   `json:"anonymous,omitempty"`
}

func (a Audience) String() string {
	if a.Anonymous {
		return "an anonymous client"
	}
	return "a client of namespace " + a.Namespace
}

// Access is whether the report's audience may read an object, and why.
type Access struct {
	Allowed bool   `json:"allowed"`
	Why     string `json:"why"`
}

// SpatialDomainVisibility is who may read a SpatialDomain's clusters and
// endpoints, and whether the report's audience may.
type SpatialDomainVisibility struct {
	Namespace  string     `json:"namespace"`
	Name       string     `json:"name"`
	Visibility Visibility `json:"visibility"`
	Access     *Access    `json:"access,omitempty"`
}

// VisibilityOptions say how ResolveVisibility reads the rules.
type VisibilityOptions struct {
	// Default is the rule of the objects that set no spec.exportTo, as
	// serve's --default-export-to gives it (convert.ExportTo with no own
	// namespace); not Set is "*", serve's default.
	Default topology.Export
	// Audience, when set, is the client readability is judged for.
	Audience *Audience
}

// ResolveVisibility resolves every upstream's visibility in rep as a
// control plane with o.Default does: the rule in force (its own
// spec.exportTo, else the default, "." resolved to its namespace) and
// where it comes from; with an audience, whether that client may read each
// upstream, and every SpatialDomain of s (those named in rep only when
// rep's upstreams were chosen by name). Build and BuildFor do none of
// this: a report without it shows only the rules upstreams set.
func ResolveVisibility(rep *Report, s *topology.Snapshot, o VisibilityOptions) {
	def := o.Default
	if !def.Set {
		def = topology.ExportAll
	}
	rep.DefaultExportTo = def.String()
	rep.Audience = o.Audience
	ns := ""
	if o.Audience != nil && !o.Audience.Anonymous {
		ns = o.Audience.Namespace
	}
	for i := range rep.Upstreams {
		u := &rep.Upstreams[i]
		st := s.Upstream(topology.Key{Namespace: u.Namespace, Name: u.Name})
		if st == nil {
			continue
		}
		up := &st.Upstream
		u.Visibility = resolved(up.ExportOf(def), up.ExportTo.Set, up.Key.Namespace)
		if o.Audience != nil {
			u.Access = accessOf(*o.Audience, up.VisibleTo(ns, def), *u.Visibility)
		}
	}
	if o.Audience == nil {
		return
	}
	rep.SpatialDomains = []SpatialDomainVisibility{}
	for _, d := range s.Spatial() {
		dom := &d.Domain
		exp := dom.ExportTo
		if !exp.Set {
			exp = def
		}
		v := resolved(exp, dom.ExportTo.Set, dom.Key.Namespace)
		rep.SpatialDomains = append(rep.SpatialDomains, SpatialDomainVisibility{Namespace: dom.Key.Namespace, Name: dom.Key.Name,
			Visibility: *v, Access: accessOf(*o.Audience, dom.VisibleTo(ns, def), *v)})
	}
}

// resolved is the visibility of an object of namespace own under e (set),
// with "." resolved to own.
func resolved(e topology.Export, own bool, namespace string) *Visibility {
	origin := OriginDefault
	if own {
		origin = OriginSpec
	}
	v := &Visibility{All: e.All, Namespaces: []string{}, Origin: origin}
	if e.All {
		return v
	}
	names := e.Namespaces()
	if e.Own {
		names = append(names, namespace)
	}
	// the same canonical form as an object's own rule: sorted, each once
	v.Namespaces = topology.NewExport(names, namespace).Namespaces()
	if v.Namespaces == nil {
		v.Namespaces = []string{}
	}
	return v
}

// accessOf says why audience a may read (allowed) an object of visibility
// v, or may not.
func accessOf(a Audience, allowed bool, v Visibility) *Access {
	switch {
	case v.All:
		return &Access{Allowed: allowed, Why: "exported to every namespace"}
	case allowed:
		return &Access{Allowed: true, Why: fmt.Sprintf("%s is among the namespaces it is exported to (%s)", a.Namespace, strings.Join(v.Namespaces, ", "))}
	case len(v.Namespaces) == 0:
		return &Access{Why: "exported to no namespace"}
	case a.Anonymous:
		return &Access{Why: fmt.Sprintf("exported to %s only; an anonymous client reads only what is exported to every namespace", strings.Join(v.Namespaces, ", "))}
	}
	return &Access{Why: fmt.Sprintf("exported to %s only", strings.Join(v.Namespaces, ", "))}
}

// writeAudience says, below the report's first line, how visibility was
// resolved and, with an audience, how much of the report it may read.
func writeAudience(tw *textWriter, rep Report) {
	switch {
	case rep.Audience != nil:
		readable := 0
		for _, u := range rep.Upstreams {
			if u.Access != nil && u.Access.Allowed {
				readable++
			}
		}
		domains := 0
		for _, d := range rep.SpatialDomains {
			if d.Access != nil && d.Access.Allowed {
				domains++
			}
		}
		tw.printf("Visibility for %s (objects without spec.exportTo: --default-export-to %s): may read %d of %d upstream(s), %d of %d SpatialDomain(s)\n",
			rep.Audience, rep.DefaultExportTo, readable, len(rep.Upstreams), domains, len(rep.SpatialDomains))
	case rep.DefaultExportTo != "":
		tw.printf("Visibility of objects without spec.exportTo: --default-export-to %s\n", rep.DefaultExportTo)
	}
}

// writeAccess says whether aud may read what (it, or a domain's clusters
// and endpoints), and why.
func writeAccess(tw *textWriter, aud *Audience, a *Access, what string) {
	if a == nil || aud == nil {
		return
	}
	may := "may read"
	if !a.Allowed {
		may = "may NOT read"
	}
	tw.printf("  %s %s %s: %s\n", aud, may, what, a.Why)
}

// writeSpatialDomains lists who may read each SpatialDomain, and whether
// the report's audience may.
func writeSpatialDomains(tw *textWriter, rep Report) {
	for _, d := range rep.SpatialDomains {
		tw.printf("\nSpatialDomain %s/%s\n", d.Namespace, d.Name)
		writeVisibility(tw, &d.Visibility)
		writeAccess(tw, rep.Audience, d.Access, "its clusters and endpoints")
	}
}
