package admin

import (
	"fmt"
	"net/http"
	"time"

	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/signals/outlier"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/xdsname"
)

// /debug/loads bounds: an upstream may have thousands of endpoints and its
// reporters thousands of localities, so one answer lists at most this many
// endpoints, and of each at most this many reporter classes; the rest are
// counted in more and moreClasses.
const (
	maxLoadEndpoints = 500
	maxLoadClasses   = 32
)

// Loads is the answer of /debug/loads: what clients reported of one
// cluster over the store's window.
type Loads struct {
	Cluster   string         `json:"cluster"`
	Window    string         `json:"window"`
	Endpoints []LoadEndpoint `json:"endpoints"`
	// More counts the endpoints past maxLoadEndpoints, left out.
	More int `json:"more,omitempty"`
	// Drops is what the store has dropped since it began, of every cluster.
	Drops loadreport.Drops `json:"drops"`
	// Outlier is the upstream's last fleet outlier evaluation, when it has
	// spec.outlierDetection and this replica decides: the trusted and
	// untrusted reporters, and the ejections in force (at most
	// maxLoadEndpoints; MoreEjections counts the rest).
	Outlier       *outlier.Status `json:"outlier,omitempty"`
	MoreEjections int             `json:"moreEjections,omitempty"`
}

// LoadEndpoint is one endpoint's totals over the window and the number of
// distinct clients that reported on it.
type LoadEndpoint struct {
	loadreport.EndpointLoad
	MoreClasses int `json:"moreClasses,omitempty"`
}

// addLoads serves GET /debug/loads?cluster=NS/NAME: the load the clients
// of an upstream with spec.loadReporting reported, per endpoint in
// canonical order, summed over reporters.
func addLoads(mux *routes, s Sources) {
	mux.HandleFunc("GET /debug/loads", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if len(q["cluster"]) != 1 || len(q.Get("cluster")) > maxConfigParam {
			writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("cluster=NS/NAME is required, once and at most %d bytes", maxConfigParam))
			return
		}
		k, err := topology.ParseKey(q.Get("cluster"))
		if err != nil {
			writeJSONError(w, http.StatusBadRequest, err.Error())
			return
		}
		if s.Loads == nil {
			writeJSONError(w, http.StatusNotFound, "this server keeps no load reports")
			return
		}
		name := xdsname.Cluster(k)
		eps := s.Loads.Cluster(name, time.Now())
		if eps == nil {
			writeJSONError(w, http.StatusNotFound, fmt.Sprintf("cluster %s is not published with loadReporting", name))
			return
		}
		out := Loads{Cluster: name, Window: s.Loads.Window().String(), Drops: s.Loads.Drops(), Endpoints: []LoadEndpoint{}}
		if len(eps) > maxLoadEndpoints {
			out.More = len(eps) - maxLoadEndpoints
			eps = eps[:maxLoadEndpoints]
		}
		for _, e := range eps {
			le := LoadEndpoint{EndpointLoad: e}
			if len(e.Classes) > maxLoadClasses {
				le.MoreClasses = len(e.Classes) - maxLoadClasses
				le.Classes = e.Classes[:maxLoadClasses]
			}
			out.Endpoints = append(out.Endpoints, le)
		}
		if s.Outliers != nil {
			if st, ok := s.Outliers(k); ok {
				if len(st.Ejections) > maxLoadEndpoints {
					out.MoreEjections = len(st.Ejections) - maxLoadEndpoints
					st.Ejections = st.Ejections[:maxLoadEndpoints]
				}
				out.Outlier = &st
			}
		}
		writeJSON(w, out)
	})
}
