package crdschema

import (
	"fmt"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// State is how a CRD in the cluster stands to the binary's.
type State string

const (
	// Current: the installed CRD carries the binary's schema version.
	Current State = "Current"
	// Compatible: another version, with the same fields (validation,
	// defaults or descriptions differ); nothing is pruned.
	Compatible State = "Compatible"
	// Newer: the installed schema has fields the binary does not know
	// and lacks none it knows; the binary ignores the extra fields.
	Newer State = "Newer"
	// Outdated: the installed schema lacks fields the binary knows: the
	// apiserver prunes them from every object written.
	Outdated State = "Outdated"
	// NotInstalled: the cluster has no such CRD.
	NotInstalled State = "NotInstalled"
	// Unknown: the CRD could not be read yet.
	Unknown State = "Unknown"
)

// Bad reports whether the state needs an operator: a CRD that prunes
// fields the binary knows, or none at all.
func (s State) Bad() bool { return s == Outdated || s == NotInstalled }

// Status is one CRD as the cluster holds it, against the binary's.
type Status struct {
	// Name is the CRD's name (upstreams.poise.dev).
	Name  string `json:"name"`
	State State  `json:"state"`
	// BinaryVersion is the schema version this binary was built with;
	// InstalledVersion the annotation of the CRD in the cluster ("" when it
	// has none: installed before CRDs carried one, or not installed).
	BinaryVersion    string `json:"binaryVersion"`
	InstalledVersion string `json:"installedVersion,omitempty"`
	// PrunedFields are the fields the binary knows that the cluster prunes
	// (at most MaxFields; PrunedMore counts the rest); UnknownFields those
	// the cluster has that the binary ignores.
	PrunedFields  []string `json:"prunedFields,omitempty"`
	PrunedMore    int      `json:"prunedMore,omitempty"`
	UnknownFields []string `json:"unknownFields,omitempty"`
	UnknownMore   int      `json:"unknownMore,omitempty"`
	// Error is why the CRD could not be read, while it cannot.
	Error string `json:"error,omitempty"`
	// Since is when the CRD came to this state.
	Since time.Time `json:"since"`
}

// Check is the status of one CRD the binary knows, given what the cluster
// holds under its name (nil: none).
func Check(binary, installed *apiextensionsv1.CustomResourceDefinition) Status {
	s := Status{Name: binary.Name, BinaryVersion: binary.Annotations[Annotation]}
	if installed == nil {
		s.State = NotInstalled
		return s
	}
	s.InstalledVersion = installed.Annotations[Annotation]
	d := Compare(binary, installed)
	s.PrunedFields, s.PrunedMore, s.UnknownFields, s.UnknownMore = d.Pruned, d.PrunedMore, d.Unknown, d.UnknownMore
	switch {
	case d.PrunedCount() > 0:
		s.State = Outdated
	case d.UnknownCount() > 0:
		s.State = Newer
	case s.InstalledVersion == s.BinaryVersion:
		s.State = Current
	default:
		s.State = Compatible
	}
	return s
}

// same reports whether two statuses say the same (not counting Since).
func (s Status) same(o Status) bool {
	return s.State == o.State && s.InstalledVersion == o.InstalledVersion && s.Error == o.Error &&
		slices.Equal(s.PrunedFields, o.PrunedFields) && s.PrunedMore == o.PrunedMore &&
		slices.Equal(s.UnknownFields, o.UnknownFields) && s.UnknownMore == o.UnknownMore
}

// installedName is the installed version for people: "unversioned" when
// the CRD carries no annotation.
func (s Status) installedName() string {
	if s.InstalledVersion == "" {
		return "unversioned"
	}
	return s.InstalledVersion
}

// maxListed bounds the fields one warning or log line names.
const maxListed = 20

// Fields lists fields for a line: at most maxListed, then "and N more".
func Fields(fields []string, more int) string {
	if len(fields) > maxListed {
		more += len(fields) - maxListed
		fields = fields[:maxListed]
	}
	out := strings.Join(fields, ", ")
	if more > 0 {
		out += fmt.Sprintf(" and %d more", more)
	}
	return out
}

// Warning is the /readyz warning of a status that needs an operator ("" for
// one that does not): what the cluster holds, what it does, and what to do.
func (s Status) Warning() string {
	switch s.State {
	case Outdated:
		return fmt.Sprintf("CRD %s is older than this binary's (installed %s, binary %s): the apiserver prunes %s from every object written, "+
			"and this replica serves without them; upgrade the CRDs (docs/helm.md, Upgrading)",
			s.Name, s.installedName(), s.BinaryVersion, Fields(s.PrunedFields, s.PrunedMore))
	case NotInstalled:
		return fmt.Sprintf("CRD %s is not installed (binary %s): no object of its kind can be read; install the CRDs (docs/helm.md, Upgrading)",
			s.Name, s.BinaryVersion)
	case Unknown:
		return fmt.Sprintf("CRD %s cannot be read (%s): whether the cluster prunes fields this binary knows is unknown", s.Name, s.Error)
	}
	return ""
}
