package trafficmap

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io"
	"net/url"

	"poise.dev/poise/pkg/explain"
)

//go:embed assets
var assets embed.FS

// templates escape every name they print (object names, addresses and
// zones are user input) through html/template's contextual escaping.
var templates = template.Must(template.ParseFS(assets, "assets/*.tmpl"))

// View is one page of the map.
type View struct {
	// Report holds the upstreams of this page only, with From set when the
	// page is for the clients of one locality.
	Report explain.Report
	// Version changes whenever what the page draws may change; the page's
	// script polls it and fetches a new fragment when it differs.
	Version string
	// Page is 1-based; Pages ≥ 1; Total is the number of upstreams in the
	// snapshot; First is the index of the page's first upstream.
	Page, Pages, Total, First int
	// Query is the query string the page was asked with, less page, so the
	// page links and the script keep the selected locality.
	Query url.Values
	// Error, when set, is drawn instead of the map: the query was refused.
	Error string
	// Observed is, by upstream (NAMESPACE/NAME), what its clients reported
	// they sent, when they report their load: drawn beside the computed
	// shares.
	Observed map[string]*Observed
}

// data is what the templates read: the view laid out.
type data struct {
	View
	From      string
	Zones     []string
	Upstreams []Upstream
	Prev      string
	Next      string
	Range     string
	PerPage   int
	// Reasons is the key of the reasons an endpoint is not eligible.
	Reasons []ReasonKey
	// Spills is the key of the grades of a spill.
	Spills []SpillKey
}

func (v View) data() data {
	d := data{View: v, Zones: zones(v.Report), PerPage: PerPage, Reasons: reasonKeys(), Spills: spillKeys()}
	if v.Report.From != nil {
		d.From = v.Report.From.String()
	}
	reasons := reasonsByName()
	for _, u := range v.Report.Upstreams {
		d.Upstreams = append(d.Upstreams, layoutUpstream(u, v.Report.From, reasons, v.Observed[u.Namespace+"/"+u.Name]))
	}
	if v.Total > 0 {
		d.Range = fmt.Sprintf("upstreams %d–%d of %d", v.First+1, v.First+len(v.Report.Upstreams), v.Total)
	}
	if v.Page > 1 {
		d.Prev = v.link(v.Page - 1)
	}
	if v.Page < v.Pages {
		d.Next = v.link(v.Page + 1)
	}
	return d
}

// link is the relative address of another page, with the same query.
func (v View) link(page int) string {
	q := url.Values{}
	for k, vs := range v.Query {
		if k != "page" {
			q[k] = vs
		}
	}
	if page > 1 {
		q.Set("page", fmt.Sprint(page))
	}
	if len(q) == 0 {
		return "map"
	}
	return "map?" + q.Encode() // Encode sorts the keys: the same query, the same bytes
}

// WritePage writes the whole HTML document: the legend, the map and the
// script that keeps it live.
func WritePage(w io.Writer, v View) error { return execute(w, "page", v) }

// WriteFragment writes the part of the page the script replaces when the
// version changes: the locality selector, the notes and the diagrams.
func WriteFragment(w io.Writer, v View) error { return execute(w, "fragment", v) }

// execute renders into a buffer first, so a template error never leaves
// half a page on the wire.
func execute(w io.Writer, name string, v View) error {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, v.data()); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// Asset returns an embedded static file (map.css, map.js) and its type.
func Asset(name string) ([]byte, string, bool) {
	types := map[string]string{"map.css": "text/css; charset=utf-8", "map.js": "text/javascript; charset=utf-8"}
	typ, ok := types[name]
	if !ok {
		return nil, "", false
	}
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		return nil, "", false
	}
	return b, typ, true
}
