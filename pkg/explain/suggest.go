package explain

import (
	"strings"

	"poise.dev/poise/pkg/suggest"
	"poise.dev/poise/pkg/topology"
)

// maxSuggested bounds the names a "did you mean" offers.
const maxSuggested = 3

// SuggestUpstream is what someone who asked for the upstream k, which the
// snapshot does not hold, most likely meant: the upstreams of that name in
// other namespaces ("checkout", read in namespace default, for
// shop/checkout), else the one upstream a slip of the finger away.
func SuggestUpstream(snap *topology.Snapshot, k topology.Key) []string {
	all := snap.Upstreams()
	keys := make([]string, 0, len(all))
	for _, u := range all {
		keys = append(keys, u.Upstream.Key.String())
	}
	return suggest.Names(k.String(), keys, maxSuggested)
}

// suggestDomain is what someone who named a SpatialDomain name (NAME, or
// NAMESPACE/NAME when qualified) that resolves to none most likely meant.
func suggestDomain(snap *topology.Snapshot, name string, qualified bool) []string {
	var names []string
	for _, st := range snap.Spatial() {
		k := st.Domain.Key
		if qualified {
			names = append(names, k.String())
		} else {
			names = append(names, k.Name)
		}
	}
	if !qualified {
		if s, ok := suggest.Closest(name, names); ok {
			return []string{s}
		}
		return nil
	}
	return suggest.Names(name, names, maxSuggested)
}

// DidYouMean is "; did you mean X?" (or "X or Y", "X, Y or Z") for what
// a name most likely meant, or "" for nothing.
func DidYouMean(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return "; did you mean " + names[0] + "?"
	}
	return "; did you mean " + strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1] + "?"
}
