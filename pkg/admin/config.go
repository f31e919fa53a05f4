package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/suggest"
	"poise.dev/poise/pkg/xds/server"
)

// /debug/config bounds: what one request may name, and how many resources
// of each type it returns (a query naming one resource needs no more).
const (
	maxConfigParam     = 512
	maxConfigResources = 100
)

// ConfigStream is one stream of a node in /debug/config: what it is served
// now, each resource decoded to its proto JSON.
type ConfigStream struct {
	server.ClientServing
	Types map[string]ConfigType `json:"types"`
}

// ConfigType is what a stream is served of one xDS type: the version its
// view is at, the one the client last ACKed and how it stands (SYNCED,
// STALE, NACKED, NOT SENT); the resources, and of them those the client
// has not ACKed in their current content (notAcked) and those whose last
// response it NACKed, with its error (rejected).
type ConfigType struct {
	Version      string            `json:"version"`
	AckedVersion string            `json:"ackedVersion"`
	State        string            `json:"state"`
	Resources    []json.RawMessage `json:"resources"`
	More         int               `json:"more,omitempty"`
	NotAcked     []string          `json:"notAcked,omitempty"`
	Rejected     map[string]string `json:"rejected,omitempty"`
}

// Why /debug/config answers 404 (ConfigError.Missing): no stream of that
// node id here, or no resource of that name served to it.
const (
	MissingNode     = "node"
	MissingResource = "resource"
)

// ConfigError is /debug/config's answer when it has nothing to show.
type ConfigError struct {
	Error   string `json:"error"`
	Missing string `json:"missing,omitempty"`
}

// addConfig serves GET /debug/config?node=ID[&resource=NAME]: what every
// stream of that node is served now (its class's variants included), the
// counterpart of Envoy's config dump for `controlplane proxy-config`.
func addConfig(mux *routes, s Sources) {
	mux.HandleFunc("GET /debug/config", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		for _, name := range []string{"node", "resource"} {
			if len(q[name]) > 1 || len(q.Get(name)) > maxConfigParam {
				writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("%s: at most once and %d bytes", name, maxConfigParam))
				return
			}
		}
		node, only := q.Get("node"), q.Get("resource")
		if node == "" {
			writeJSONError(w, http.StatusBadRequest, "node=ID is required: the xDS node id of the client (see /debug/clients)")
			return
		}
		if s.Serving == nil {
			writeJSONError(w, http.StatusNotFound, "this server keeps no xDS clients")
			return
		}
		var match func(string) bool
		var near []string // the names a slip away from only, for a did-you-mean
		if only != "" {
			match = func(name string) bool {
				if name == only {
					return true
				}
				if len(near) < maxConfigResources && (suggest.SameName(only, name) || suggest.Distance(only, name, suggest.MaxDistance) <= suggest.MaxDistance) {
					near = append(near, name)
				}
				return false
			}
		}
		out := []ConfigStream{}
		found := false
		for _, cs := range s.Serving(node, maxConfigResources, match) {
			st := ConfigStream{ClientServing: cs, Types: map[string]ConfigType{}}
			for typ, served := range cs.Types {
				ct := ConfigType{Version: served.Version, AckedVersion: served.AckedVersion, State: served.State, More: served.More,
					Resources: []json.RawMessage{}}
				for _, e := range served.Entries {
					b, err := decodeAny(e.Any)
					if err != nil {
						writeJSONError(w, http.StatusInternalServerError, fmt.Sprintf("%s %s: %v", typ, e.Name, err))
						return
					}
					ct.Resources = append(ct.Resources, b)
					if served.NotAcked[e.Name] {
						ct.NotAcked = append(ct.NotAcked, e.Name)
					}
					if why, ok := served.Rejected[e.Name]; ok {
						if ct.Rejected == nil {
							ct.Rejected = map[string]string{}
						}
						ct.Rejected[e.Name] = why
					}
				}
				found = found || len(ct.Resources) > 0
				st.Types[typ] = ct
			}
			out = append(out, st)
		}
		switch {
		case len(out) == 0:
			var ids []string
			if s.Clients != nil {
				for _, c := range s.Clients() {
					ids = append(ids, c.NodeID)
				}
			}
			var did []string
			if id, ok := suggest.Closest(node, ids); ok {
				did = []string{id}
			}
			writeConfigError(w, MissingNode, fmt.Sprintf("no xDS client with node id %q is connected to this replica%s", node, explain.DidYouMean(did)))
			return
		case only != "" && !found:
			slices.Sort(near)
			did := suggest.Names(only, slices.Compact(near), 3)
			writeConfigError(w, MissingResource, fmt.Sprintf("no resource named %q is served to node %q%s", only, node, explain.DidYouMean(did)))
			return
		}
		writeJSON(w, map[string]any{"node": node, "streams": out})
	})
}

func writeConfigError(w http.ResponseWriter, missing, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_ = json.NewEncoder(w).Encode(ConfigError{Error: msg, Missing: missing})
}

// decodeAny is a resource as proto JSON, with its @type.
func decodeAny(a *anypb.Any) (json.RawMessage, error) {
	return protojson.MarshalOptions{}.Marshal(a)
}
