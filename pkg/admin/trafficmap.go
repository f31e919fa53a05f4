package admin

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/trafficmap"
	"poise.dev/poise/pkg/xds/xdsname"
)

// maxPage bounds the page parameter before it is compared with the count.
const maxPage = 1 << 20

// addMap serves the traffic map: /map (the page), /map/fragment (what its
// script swaps in), /map/version (what it polls) and the embedded assets.
// They read the same report as /debug/explain, on the same port.
func addMap(mux *routes, s Sources) {
	mux.HandleFunc("GET /map", func(w http.ResponseWriter, r *http.Request) {
		v, code := mapView(s, r.URL.Query())
		writeMap(w, code, func() error { return trafficmap.WritePage(w, v) })
	})
	mux.HandleFunc("GET /map/fragment", func(w http.ResponseWriter, r *http.Request) {
		v, code := mapView(s, r.URL.Query())
		writeMap(w, code, func() error { return trafficmap.WriteFragment(w, v) })
	})
	// The version is what the page's script polls every second: the
	// revision, which moves with everything drawn, the demand a Balanced
	// class is divided by included. It costs no report.
	mux.HandleFunc("GET /map/version", func(w http.ResponseWriter, r *http.Request) {
		snap := s.Snapshot()
		q := r.URL.Query()
		_, _, _, err := mapPage(snap, q)
		_, cerr := classQuery(q)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err = errors.Join(err, cerr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		keys, _, _, _ := mapPage(snap, q)
		fmt.Fprintln(w, mapVersion(snap, s.Loads, keys, time.Now()))
	})
	mux.HandleFunc("GET /map/assets/{name}", func(w http.ResponseWriter, r *http.Request) {
		b, typ, ok := trafficmap.Asset(r.PathValue("name"))
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", typ)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(b)
	})
}

// mapPolicy keeps the page to its own origin: no inline script or style,
// no frames, no other hosts.
const mapPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

func writeMap(w http.ResponseWriter, code int, render func() error) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", mapPolicy)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = render() // the templates are fixed and checked by tests; a write error is the client gone
}

// mapPage reads page=N and returns the keys of that page's upstreams,
// the page (clamped to the last) and the number of pages.
func mapPage(snap *topology.Snapshot, q url.Values) ([]topology.Key, int, int, error) {
	page := 1
	if n := len(q["page"]); n > 1 {
		return nil, 0, 0, fmt.Errorf("page is given %d times, at most once", n)
	} else if n == 1 {
		p, err := strconv.Atoi(q.Get("page"))
		if err != nil || p < 1 || p > maxPage {
			return nil, 0, 0, fmt.Errorf("page %q: want an integer 1..%d", q.Get("page"), maxPage)
		}
		page = p
	}
	all := snap.Upstreams()
	pages := max(1, (len(all)+trafficmap.PerPage-1)/trafficmap.PerPage)
	page = min(page, pages)
	first := (page - 1) * trafficmap.PerPage
	var keys []topology.Key
	for _, u := range all[first:min(first+trafficmap.PerPage, len(all))] {
		keys = append(keys, u.Upstream.Key)
	}
	return keys, page, pages, nil
}

// mapView builds one page of the map and the status to send it with.
func mapView(s Sources, q url.Values) (trafficmap.View, int) {
	snap := s.Snapshot()
	v := trafficmap.View{Query: q, Total: snap.NumUpstreams(), Page: 1, Pages: 1,
		Report: explain.Report{Revision: snap.Revision}}
	keys, page, pages, err := mapPage(snap, q)
	if err != nil {
		v.Error = err.Error()
		return v, http.StatusBadRequest
	}
	v.Page, v.Pages, v.First = page, pages, (page-1)*trafficmap.PerPage
	opts, err := classQuery(q)
	if err != nil {
		v.Error = err.Error()
		return v, http.StatusBadRequest
	}
	now := time.Now()
	v.Version = mapVersion(snap, s.Loads, keys, now)
	if len(keys) == 0 {
		return v, http.StatusOK // explain.Build with no keys would explain every upstream
	}
	if opts == nil {
		v.Report = explain.Build(snap, keys...)
		v.Report.Orphans = nil
		v.Observed = observed(snap, s.Loads, keys, "", now)
		return v, http.StatusOK
	}
	rep, err := explain.BuildFor(snap, *opts, keys...)
	if de := (*explain.DemandError)(nil); errors.As(err, &de) {
		v.Error = "demand: " + err.Error()
		return v, http.StatusBadRequest
	} else if err != nil {
		v.Error = err.Error()
		return v, http.StatusUnprocessableEntity
	}
	rep.Orphans = nil
	v.Report = rep
	v.Observed = observed(snap, s.Loads, keys, opts.From.Region+"/"+opts.From.Zone, now)
	return v, http.StatusOK
}

// mapVersion is what the page polls to know it must be drawn again: the
// revision, and, where an upstream of the page has its load reported, the
// load-report bucket, which moves what its clients reported.
func mapVersion(snap *topology.Snapshot, loads *loadreport.Store, keys []topology.Key, now time.Time) string {
	v := strconv.FormatUint(snap.Revision, 10)
	if loads == nil {
		return v
	}
	for _, k := range keys {
		if u := snap.Upstream(k); u != nil && u.Upstream.LoadReportInterval > 0 {
			bucket := loads.Window() / loadreport.Buckets
			return v + "." + strconv.FormatInt(now.UnixNano()/int64(bucket), 10)
		}
	}
	return v
}

// observed is, for each upstream of keys whose clients report their load,
// the requests they reported to each endpoint over the store's window:
// every reporter's, or with class (REGION/ZONE) only those of its zone,
// whose split the page draws.
func observed(snap *topology.Snapshot, loads *loadreport.Store, keys []topology.Key, class string, now time.Time) map[string]*trafficmap.Observed {
	if loads == nil {
		return nil
	}
	out := map[string]*trafficmap.Observed{}
	for _, k := range keys {
		if u := snap.Upstream(k); u == nil || u.Upstream.LoadReportInterval == 0 {
			continue
		}
		eps := loads.Cluster(xdsname.Cluster(k), now)
		if eps == nil {
			continue // not in the store's catalog yet
		}
		o := &trafficmap.Observed{Window: loads.Window(), Class: class, Issued: map[string]uint64{}}
		for _, e := range eps {
			issued := e.Issued
			if class != "" {
				issued = 0
				if i := slices.IndexFunc(e.Classes, func(c loadreport.ClassLoad) bool { return c.Class == class }); i >= 0 {
					issued = e.Classes[i].Issued
				}
			}
			o.Issued[net.JoinHostPort(e.Address, strconv.FormatUint(uint64(e.Port), 10))] = issued
		}
		out[k.String()] = o
	}
	return out
}
