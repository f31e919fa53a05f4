package topology

import (
	"fmt"
	"strings"
)

// Problem is one reason a batch was rejected: the upstream it broke, every
// object involved, and the cause, which matches a pkg/weights sentinel
// (weights.ErrInconsistentTopology, ErrDuplicateEndpoint, ...) via errors.Is.
type Problem struct {
	Upstream Key
	Objects  []ObjectRef
	// Locations, when a source knows them, say where each object is defined
	// ("file document 3"), index for index with Objects; "" when unknown.
	Locations []string
	// Field, when set, is the field of Objects[0] at fault (a reference that
	// does not resolve); the other objects are those it likely meant.
	Field string
	Err   error
}

// Involved names object i with its location when known.
func (p Problem) Involved(i int) string {
	if i < len(p.Locations) && p.Locations[i] != "" {
		return p.Objects[i].String() + " (" + p.Locations[i] + ")"
	}
	return p.Objects[i].String()
}

func (p Problem) Error() string {
	if len(p.Objects) == 0 {
		return p.Err.Error()
	}
	if p.Field != "" {
		return p.Involved(0) + ": " + p.Field + ": " + p.Err.Error() + p.SeeAlso()
	}
	names := make([]string, len(p.Objects))
	for i := range p.Objects {
		names[i] = p.Involved(i)
	}
	return fmt.Sprintf("upstream %s: %v (objects: %s)", p.Upstream, p.Err, strings.Join(names, ", "))
}

func (p Problem) Unwrap() error { return p.Err }

// SeeAlso names, with their locations, the objects of a problem with a
// Field besides the one at fault: " (see Upstream default/checkout (f
// document 1))", or "" when it has none or no location is known.
func (p Problem) SeeAlso() string {
	var located []string
	for i := 1; i < len(p.Objects); i++ {
		if i < len(p.Locations) && p.Locations[i] != "" {
			located = append(located, p.Involved(i))
		}
	}
	if len(located) == 0 {
		return ""
	}
	return " (see " + strings.Join(located, ", ") + ")"
}

// BatchError rejects a whole batch; the previous snapshot stays current.
type BatchError struct {
	Problems []Problem
}

func (e *BatchError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Error()
	}
	return "batch rejected: " + strings.Join(msgs, "; ")
}

// Unwrap lets errors.Is and errors.As see every problem.
func (e *BatchError) Unwrap() []error {
	out := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p
	}
	return out
}

// Involves reports whether an object is named by any problem.
func (e *BatchError) Involves(ref ObjectRef) bool {
	for _, p := range e.Problems {
		for _, o := range p.Objects {
			if o == ref {
				return true
			}
		}
	}
	return false
}
