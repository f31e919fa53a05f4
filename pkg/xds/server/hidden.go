package server

import (
	"fmt"
	"strings"

	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdstype"
)

// MaxWithheldNames bounds the names /debug/clients lists as withheld from
// one client, of each kind (hidden, unpublished); the rest are counted.
const MaxWithheldNames = 32

// Withheld is what a client asks for and is not sent, and why, as
// /debug/clients shows it: computed from the stream's current
// subscriptions and what is published now, when the registry is listed.
type Withheld struct {
	// Hidden are names it subscribes to whose resource exists but its
	// audience may not read: exportTo does not name its namespace, or the
	// client is anonymous and the resource is not exported to "*".
	Hidden []HiddenResource `json:"hidden,omitempty"`
	// HiddenMore counts the hidden names past MaxWithheldNames.
	HiddenMore int `json:"hiddenMore,omitempty"`
	// Unpublished are names it subscribes to of which nothing is published
	// (for any client): absent, not hidden.
	Unpublished     []NamedResource `json:"unpublished,omitempty"`
	UnpublishedMore int             `json:"unpublishedMore,omitempty"`
	// Wildcard counts, by type (CDS, EDS, LDS, RDS) it subscribes to with a
	// wildcard, the resources of that type it may not read.
	Wildcard map[string]int `json:"wildcard,omitempty"`
}

// NamedResource is a resource by type (CDS, EDS, LDS, RDS) and name.
type NamedResource struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// HiddenResource is a resource a client asked for and may not read.
type HiddenResource struct {
	NamedResource
	// ExportedTo are the namespaces whose clients may read it, sorted; empty
	// for none.
	ExportedTo []string `json:"exportedTo"`
	// Why says it in words: "exported to tenant-a only".
	Why string `json:"why"`
}

// withheldOf is what st withholds from its client, nil when nothing; it
// holds the cache's lock once.
func withheldOf(st *xdscache.Stream) *Withheld {
	w := st.Withheld(MaxWithheldNames)
	if w.Empty() {
		return nil
	}
	aud := st.Audience()
	out := &Withheld{HiddenMore: w.HiddenMore, UnpublishedMore: w.UnpublishedMore}
	for _, n := range w.Hidden {
		ns := n.Visible.Namespaces()
		if ns == nil {
			ns = []string{}
		}
		out.Hidden = append(out.Hidden, HiddenResource{NamedResource: NamedResource{Type: xdstype.Short(n.TypeURL), Name: n.Name},
			ExportedTo: ns, Why: WhyHidden(ns, aud.IsAnonymous())})
	}
	for _, n := range w.Unpublished {
		out.Unpublished = append(out.Unpublished, NamedResource{Type: xdstype.Short(n.TypeURL), Name: n.Name})
	}
	if len(w.Wildcard) > 0 {
		out.Wildcard = make(map[string]int, len(w.Wildcard))
		for _, c := range w.Wildcard {
			out.Wildcard[xdstype.Short(c.TypeURL)] = c.Count
		}
	}
	return out
}

// WhyHidden says why a client may not read a resource exported to the
// namespaces exportedTo only: "exported to tenant-a only", with why that
// leaves an anonymous client out.
func WhyHidden(exportedTo []string, anonymous bool) string {
	why := "exported to no namespace"
	if len(exportedTo) > 0 {
		why = fmt.Sprintf("exported to %s only", strings.Join(exportedTo, ", "))
	}
	if anonymous {
		why += "; an anonymous client reads only what is exported to every namespace"
	}
	return why
}
