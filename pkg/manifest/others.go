package manifest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Others counts the documents of kinds that are not Poise's — the
// Namespaces, Deployments and Services that `kubectl apply -f` takes from
// the same directory — by kind. They are skipped, not decoded further.
type Others map[string]int

// maxKindLength bounds a kind as it is shown; Kubernetes kinds are far shorter.
const maxKindLength = 63

// maxOtherKinds bounds the kinds Others tells apart; documents of further
// kinds are counted under otherKinds.
const maxOtherKinds = 256

const otherKinds = "(other kinds)"

func (o *Others) add(kind string) {
	if len(kind) > maxKindLength {
		kind = kind[:maxKindLength] + "..."
	}
	if *o == nil {
		*o = Others{}
	}
	if _, known := (*o)[kind]; !known && len(*o) >= maxOtherKinds {
		kind = otherKinds
	}
	(*o)[kind]++
}

// Total is how many documents were skipped.
func (o Others) Total() int {
	n := 0
	for _, c := range o {
		n += c
	}
	return n
}

// shownKinds is how many kinds String names before it counts the rest.
const shownKinds = 10

// String says what was skipped, most frequent kind first (then by name), in
// one bounded line: "18 objects of other kinds (Deployment 7, Service 8,
// ...)".
func (o Others) String() string {
	type kc struct {
		kind string
		n    int
	}
	kinds := make([]kc, 0, len(o))
	for k, n := range o {
		kinds = append(kinds, kc{k, n})
	}
	slices.SortFunc(kinds, func(a, b kc) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return strings.Compare(a.kind, b.kind)
	})
	total := o.Total()
	noun := "objects"
	if total == 1 {
		noun = "object"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s of other kinds (", total, noun)
	for i, k := range kinds {
		if i == shownKinds {
			fmt.Fprintf(&b, ", and %d more kinds", len(kinds)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k.kind, k.n)
	}
	b.WriteString(")")
	return b.String()
}
