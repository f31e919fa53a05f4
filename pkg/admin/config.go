package admin

import (
	"encoding/json"
	"fmt"
	"net/http"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

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

// ConfigType is what a stream is served of one xDS type.
type ConfigType struct {
	Version   string            `json:"version"`
	Resources []json.RawMessage `json:"resources"`
	More      int               `json:"more,omitempty"`
}

// addConfig serves GET /debug/config?node=ID[&resource=NAME]: what every
// stream of that node is served now (its class's variants included), the
// counterpart of Envoy's config dump for `controlplane proxy-config`.
func addConfig(mux *http.ServeMux, s Sources) {
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
		if only != "" {
			match = func(name string) bool { return name == only }
		}
		out := []ConfigStream{}
		for _, cs := range s.Serving(node, maxConfigResources, match) {
			st := ConfigStream{ClientServing: cs, Types: map[string]ConfigType{}}
			for typ, served := range cs.Types {
				ct := ConfigType{Version: served.Version, More: served.More, Resources: []json.RawMessage{}}
				for _, e := range served.Entries {
					b, err := decodeAny(e.Any)
					if err != nil {
						writeJSONError(w, http.StatusInternalServerError, fmt.Sprintf("%s %s: %v", typ, e.Name, err))
						return
					}
					ct.Resources = append(ct.Resources, b)
				}
				st.Types[typ] = ct
			}
			out = append(out, st)
		}
		if len(out) == 0 {
			writeJSONError(w, http.StatusNotFound, fmt.Sprintf("no xDS client with node id %q is connected to this replica", node))
			return
		}
		writeJSON(w, map[string]any{"node": node, "streams": out})
	})
}

// decodeAny is a resource as proto JSON, with its @type.
func decodeAny(a *anypb.Any) (json.RawMessage, error) {
	return protojson.MarshalOptions{}.Marshal(a)
}
