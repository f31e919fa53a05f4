package admin

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"

	"poise.dev/poise/pkg/suggest"
)

// route is one path of the admin port: what it serves and the query
// parameters it takes.
type route struct {
	path string
	// params are the query parameters it takes; with strict, any other is
	// refused with 400, naming it (a misspelt parameter would otherwise be
	// ignored, and the answer read as the one asked for).
	params []string
	strict bool
	// about is its line in GET /; "" leaves it out (a part of another).
	about string
}

// endpoints are every path the admin and metrics ports may serve, in the
// order GET / lists them. A path is registered only through routes, which
// refuses one that is not here: the index cannot miss one.
var endpoints = []route{
	{path: "/", params: []string{"format"}, strict: true, about: "this list (?format=json, or Accept: application/json: as JSON)"},
	{path: "/healthz", about: "the process is up"},
	{path: "/readyz", about: "the first snapshot is published and the plane is not stopping (503 from SIGTERM on); below ok, a warning: line per condition that needs an operator"},
	{path: "/metrics", about: "Prometheus metrics"},
	{path: "/debug/explain", params: []string{"upstream", "from", "demand"}, strict: true,
		about: "the derivation of every upstream, as controlplane explain -o json (?upstream=NS/NAME, &from=REGION/ZONE[/SUBZONE], &demand=REGION/ZONE=N,...)"},
	{path: "/debug/explain-key", params: []string{"upstream", "key", "header", "cookie", "query", "source-ip", "grpc-ring-cap"}, strict: true,
		about: "where requests go in each client of a keyed upstream, as controlplane explain --key -o json (?upstream=NS/NAME&key=V..., or &header=NAME=V, &cookie=, &query=, &source-ip=; &grpc-ring-cap=N)"},
	{path: "/debug/explain-route", params: []string{"domain", "product", "bbox", "crs", "path", "request-id"}, strict: true,
		about: "how a spatial request is routed, as controlplane explain-route -o json (?domain=D&product=P, &bbox, &crs, &path, &request-id)"},
	{path: "/debug/clients", strict: true, about: "every connected xDS client: kind, class, identity, per type its state, versions and last NACK"},
	{path: "/debug/config", params: []string{"node", "resource"}, strict: true,
		about: "what every stream of one client is served now, decoded, as controlplane proxy-config -o json (?node=ID, &resource=NAME)"},
	{path: "/debug/clusters", strict: true, about: "the remote clusters and their sync state"},
	{path: "/debug/crds", strict: true, about: "the cluster's Poise CRDs against the schemas this binary was built with: outdated ones and the fields they would prune"},
	{path: "/debug/loads", params: []string{"cluster"}, strict: true,
		about: "what the clients of an upstream with spec.loadReporting reported over the window (?cluster=NS/NAME)"},
	{path: "/debug/version", strict: true, about: "the version this replica runs (controlplane version) and its instance"},
	{path: "/map", about: "the traffic map: every upstream drawn as priority → locality → endpoint"},
	{path: "/map/fragment"},
	{path: "/map/version"},
	{path: "/map/assets/{name}"},
	{path: "/debug/pprof/", about: "Go profiles"},
	{path: "/debug/pprof/cmdline"},
	{path: "/debug/pprof/profile"},
	{path: "/debug/pprof/symbol"},
	{path: "/debug/pprof/trace"},
}

// routes registers the admin port's handlers, each by an endpoint of the
// table, and keeps those it registered for GET /.
type routes struct {
	mux    *http.ServeMux
	served []route
}

func newRoutes() *routes {
	r := &routes{mux: http.NewServeMux()}
	r.HandleFunc("GET /{$}", r.index)
	return r
}

// HandleFunc registers h for pattern ("GET /path" or "/path"), whose path
// must be in the endpoint table; a strict endpoint's query is checked first.
func (r *routes) HandleFunc(pattern string, h http.HandlerFunc) {
	r.Handle(pattern, h)
}

// Handle is HandleFunc for an http.Handler.
func (r *routes) Handle(pattern string, h http.Handler) {
	path := pattern[strings.IndexByte(pattern, ' ')+1:]
	if path == "/{$}" {
		path = "/"
	}
	i := slices.IndexFunc(endpoints, func(e route) bool { return e.path == path })
	if i < 0 {
		panic("admin: " + pattern + " is registered without an entry in the endpoint table")
	}
	e := endpoints[i]
	if e.strict {
		next := h
		h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			q, err := url.ParseQuery(req.URL.RawQuery)
			if err == nil {
				err = checkParams(q, e.params)
			}
			if err != nil {
				if e.path == "/" {
					http.Error(w, err.Error(), http.StatusBadRequest)
				} else {
					writeJSONError(w, http.StatusBadRequest, err.Error())
				}
				return
			}
			next.ServeHTTP(w, req)
		})
	}
	r.mux.Handle(pattern, h)
	r.served = append(r.served, e)
}

// maxShownParam bounds what an error quotes of a parameter's name.
const maxShownParam = 64

// checkParams refuses the first parameter of q (in name order) that is not
// one of allowed, naming it and what it may have meant.
func checkParams(q url.Values, allowed []string) error {
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if slices.Contains(allowed, name) {
			continue
		}
		shown := name
		if len(shown) > maxShownParam {
			shown = shown[:maxShownParam] + "…"
		}
		msg := fmt.Sprintf("unknown query parameter %q", shown)
		if s, ok := suggest.Closest(name, allowed); ok {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		if len(allowed) == 0 {
			return fmt.Errorf("%s: this endpoint takes none", msg)
		}
		return fmt.Errorf("%s: this endpoint takes %s", msg, strings.Join(allowed, ", "))
	}
	return nil
}

// listed is one line of GET /, and its JSON.
type listed struct {
	Path   string   `json:"path"`
	Params []string `json:"params"`
	About  string   `json:"about"`
}

// index serves GET /: the endpoints this port serves, one a line with
// what each is, or as JSON.
func (r *routes) index(w http.ResponseWriter, req *http.Request) {
	var out []listed
	for _, e := range endpoints {
		if e.about == "" || !slices.ContainsFunc(r.served, func(s route) bool { return s.path == e.path }) {
			continue
		}
		out = append(out, listed{Path: e.path, Params: append([]string{}, e.params...), About: e.about})
	}
	format := req.URL.Query().Get("format")
	if format != "" && format != "json" && format != "text" {
		http.Error(w, fmt.Sprintf("format %q: want text or json", format), http.StatusBadRequest)
		return
	}
	if format == "json" || (format == "" && strings.Contains(req.Header.Get("Accept"), "application/json")) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"endpoints": out})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, l := range out {
		fmt.Fprintf(tw, "%s\t%s\n", l.Path, l.About)
	}
	_ = tw.Flush()
}
