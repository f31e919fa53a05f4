package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"net/url"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/hashring"
	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/signals/outlier"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/server"
)

// Sources are what the admin port reads; each is called per request.
type Sources struct {
	// Ready reports whether the plane is ready (the first snapshot
	// published, and not stopping), and why not.
	Ready func() (bool, string)
	// Snapshot is the current topology snapshot.
	Snapshot func() *topology.Snapshot
	// Clients lists the connected xDS clients.
	Clients func() []server.Client
	// Warnings, when set, lists what /readyz adds below "ok": conditions
	// that do not stop serving but need an operator (a refused change).
	Warnings func() []string
	// Serving, when set, lists what each stream of a node is served now
	// (/debug/config).
	Serving func(node string, limit int, match func(string) bool) []server.ClientServing
	// Loads, when set, is the store of the clients' load reports
	// (/debug/loads).
	Loads *loadreport.Store
	// GenerationSince, when set, says when each endpoint generation was
	// first published (/debug/explain's generationSince).
	GenerationSince explain.GenerationSince
	// Outliers, when set, is an upstream's last fleet outlier evaluation
	// (/debug/loads), where this replica decides.
	Outliers func(topology.Key) (outlier.Status, bool)
	// Clusters, when set, lists the remote clusters and their sync state
	// (/debug/clusters).
	Clusters func() any
	// CRDs, when set, lists the cluster's CRDs against those the binary
	// was built with (/debug/crds).
	CRDs func() any
	// Metrics, when set, is what /metrics serves.
	Metrics prometheus.Gatherer
	// Version is the version the process runs (what controlplane version
	// says) and Instance its instance id: /debug/version.
	Version, Instance string
}

// HealthHandler serves what probes and scrapers need and nothing else:
// /healthz, /readyz and /metrics. It can be exposed where the debug
// endpoints (every endpoint address, profiles) must not be.
func HealthHandler(s Sources) http.Handler {
	mux := newRoutes()
	addHealth(mux, s)
	return mux.mux
}

// Handler returns the admin mux: the health endpoints, explain, the
// traffic map, the connected clients and pprof.
func Handler(s Sources) http.Handler {
	mux := newRoutes()
	addHealth(mux, s)
	addDebug(mux, s)
	addMap(mux, s)
	return mux.mux
}

func addHealth(mux *routes, s Sources) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := s.Ready(); !ok {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
		if s.Warnings != nil {
			for _, warning := range s.Warnings() {
				fmt.Fprintln(w, "warning: "+warning)
			}
		}
	})
	if s.Metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.Metrics, promhttp.HandlerOpts{}))
	}
}

func addDebug(mux *routes, s Sources) {
	mux.HandleFunc("GET /debug/explain", func(w http.ResponseWriter, r *http.Request) {
		snap := s.Snapshot()
		var keys []topology.Key
		if q := r.URL.Query().Get("upstream"); q != "" {
			k, err := topology.ParseKey(q)
			if err != nil {
				writeJSONError(w, http.StatusBadRequest, err.Error())
				return
			}
			if snap.Upstream(k) == nil {
				writeJSONError(w, http.StatusNotFound, fmt.Sprintf("upstream %s not found in revision %d%s", k, snap.Revision,
					explain.DidYouMean(explain.SuggestUpstream(snap, k))))
				return
			}
			keys = append(keys, k)
		}
		opts, err := classQuery(r.URL.Query())
		if err != nil {
			writeJSONError(w, http.StatusBadRequest, err.Error())
			return
		}
		if opts == nil {
			rep := explain.Build(snap, keys...)
			rep.SetGenerationSince(s.GenerationSince)
			writeJSON(w, rep)
			return
		}
		rep, err := explain.BuildFor(snap, *opts, keys...)
		if de := (*explain.DemandError)(nil); errors.As(err, &de) {
			writeJSONError(w, http.StatusBadRequest, "demand: "+err.Error())
			return
		} else if err != nil {
			// the served topology gives clients of this locality more
			// priorities than a proxy takes: the request is fine, the topology is not
			writeJSONError(w, http.StatusUnprocessableEntity, err.Error())
			return
		}
		rep.SetGenerationSince(s.GenerationSince)
		writeJSON(w, rep)
	})
	// The live counterpart of `controlplane explain --key`.
	mux.HandleFunc("GET /debug/explain-key", func(w http.ResponseWriter, r *http.Request) {
		snap := s.Snapshot()
		q := r.URL.Query()
		k, err := topology.ParseKey(q.Get("upstream"))
		if err != nil {
			writeJSONError(w, http.StatusBadRequest, "upstream: "+err.Error())
			return
		}
		if snap.Upstream(k) == nil {
			writeJSONError(w, http.StatusNotFound, fmt.Sprintf("upstream %s not found in revision %d%s", k, snap.Revision,
				explain.DidYouMean(explain.SuggestUpstream(snap, k))))
			return
		}
		kq := explain.KeyQuery{Keys: q["key"], Headers: q["header"], Cookies: q["cookie"], Query: q["query"], SourceIP: q.Get("source-ip")}
		if c := q.Get("grpc-ring-cap"); c != "" {
			if kq.RingCap, err = strconv.ParseUint(c, 10, 64); err != nil || kq.RingCap > hashring.MaxRingSize {
				writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("grpc-ring-cap %q: want 0 to %d", c, hashring.MaxRingSize))
				return
			}
		}
		rep, _, err := explain.ExplainKeys(snap, k, kq)
		if ke := (*explain.KeyError)(nil); errors.As(err, &ke) {
			writeJSONError(w, http.StatusBadRequest, err.Error())
			return
		} else if err != nil {
			writeJSONError(w, http.StatusUnprocessableEntity, err.Error())
			return
		}
		writeJSON(w, rep)
	})
	// The live counterpart of `controlplane explain-route`: the same Go reference on the
	// map and health the published Lua carries.
	mux.HandleFunc("GET /debug/explain-route", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("domain") == "" || q.Get("product") == "" {
			writeJSONError(w, http.StatusBadRequest, "domain and product are required")
			return
		}
		snap := s.Snapshot()
		st, err := explain.FindDomain(snap, q.Get("domain"))
		if err != nil {
			writeJSONError(w, http.StatusNotFound, fmt.Sprintf("domain %s in revision %d: %v", q.Get("domain"), snap.Revision, err))
			return
		}
		rep, err := explain.ExplainRoute(st, partitionmap.Request{Product: q.Get("product"), BBox: q.Get("bbox"), CRS: q.Get("crs"),
			Path: q.Get("path"), RequestID: q.Get("request-id")})
		if err != nil {
			writeJSONError(w, http.StatusNotFound, err.Error())
			return
		}
		if s.Loads != nil {
			// what the domain's clients reported: the live map's own figures
			var load *loadreport.SpatialLoad
			if l, ok := s.Loads.SpatialDomain(st.Domain.Key.String(), time.Now()); ok {
				load = &l
			}
			explain.AddLoads(rep, st, load, s.Loads.Window())
		}
		writeJSON(w, rep)
	})
	mux.HandleFunc("GET /debug/clients", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"clients": s.Clients()})
	})
	mux.HandleFunc("GET /debug/clusters", listing("clusters", s.Clusters))
	// Kubernetes mode: how the cluster's CRDs stand to the binary's
	// (package crdschema)
	mux.HandleFunc("GET /debug/crds", listing("crds", s.CRDs))
	mux.HandleFunc("GET /debug/version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, Version{Version: s.Version, Instance: s.Instance, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH})
	})
	addConfig(mux, s)
	addLoads(mux, s)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// listing serves {"<key>": list()}, and an empty list without list (the
// files source has no remote clusters and no CRDs).
func listing(key string, list func() any) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		var items any = []any{}
		if list != nil {
			items = list()
		}
		writeJSON(w, map[string]any{key: items})
	}
}

// Version is what /debug/version says of the process: the version it runs
// (what controlplane version says), its instance id (the prefix of the xDS
// versions it publishes), its Go release and platform.
type Version struct {
	Version   string `json:"version"`
	Instance  string `json:"instance"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// classQuery reads from=REGION/ZONE[/SUBZONE] and demand=REGION/ZONE=N,...,
// bounded as the explain command's flags; nil options without from. The
// demand given divides a Balanced upstream only where the snapshot applies
// none of its clients'.
func classQuery(q url.Values) (*explain.ClassOptions, error) {
	for _, name := range []string{"from", "demand"} {
		if n := len(q[name]); n > 1 {
			return nil, fmt.Errorf("%s is given %d times, at most once", name, n)
		}
	}
	_, hasDemand := q["demand"]
	if _, ok := q["from"]; !ok {
		if hasDemand {
			return nil, errors.New("demand needs from=REGION/ZONE: the demand divides the split for the clients of one zone")
		}
		return nil, nil
	}
	f, err := explain.ParseFrom(q.Get("from"))
	if err != nil {
		return nil, fmt.Errorf("from %w", err)
	}
	opts := &explain.ClassOptions{From: f}
	if hasDemand {
		if opts.Demand, err = explain.ParseDemand(q.Get("demand")); err != nil {
			return nil, fmt.Errorf("demand %w", err)
		}
	}
	return opts, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
