package xdscache_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/xds/xdscache"
	"poise.dev/poise/pkg/xds/xdstype"
)

// describeWithheld is a Withheld on one line, for comparisons.
func describeWithheld(w xdscache.Withheld) string {
	var parts []string
	for _, n := range w.Hidden {
		parts = append(parts, fmt.Sprintf("hidden %s %s (%s)", xdstype.Short(n.TypeURL), n.Name, n.Visible))
	}
	if w.HiddenMore > 0 {
		parts = append(parts, fmt.Sprintf("+%d hidden", w.HiddenMore))
	}
	for _, n := range w.Unpublished {
		parts = append(parts, fmt.Sprintf("unpublished %s %s", xdstype.Short(n.TypeURL), n.Name))
	}
	if w.UnpublishedMore > 0 {
		parts = append(parts, fmt.Sprintf("+%d unpublished", w.UnpublishedMore))
	}
	for _, c := range w.Wildcard {
		parts = append(parts, fmt.Sprintf("wildcard %s %d", xdstype.Short(c.TypeURL), c.Count))
	}
	return strings.Join(parts, "; ")
}

// TestWithheld: a stream's withheld names say which exist and its audience
// may not read (with who may) and which exist nowhere; a wildcard type
// counts what its audience may not read, the same before and after the
// audience's visible list is built; the list follows exportTo and is
// bounded; a closed stream withholds nothing.
func TestWithheld(t *testing.T) {
	c := newCache()
	put := func(version string, typeURL, name string, ns ...string) xdscache.Change {
		var e *xdscache.Entry
		if typeURL == resource.ClusterType {
			e = mustEntry(t, name, version, cluster(name, 1))
		} else {
			e = mustEntry(t, name, version, cla(name, 80))
		}
		if ns != nil {
			e = e.WithVisibility(xdscache.VisibleToNamespaces(ns...))
		}
		return change(0, typeURL, e)
	}
	var changes []xdscache.Change
	for _, typ := range []string{resource.ClusterType, EDS} {
		changes = append(changes, put("v1", typ, "a/own", "a"), put("v1", typ, "b/own", "b"), put("v1", typ, "open"),
			put("v1", typ, "a/to-b", "a", "b"), put("v1", typ, "nobody", []string{}...)) // exported to no namespace
	}
	c.Apply(xdscache.Update{Version: "v1", Changes: changes})

	sotw := func(aud xdscache.Audience, typeURL string, names ...string) *xdscache.Stream {
		s := c.NewStreamFor(false, aud)
		s.SetNode(envoy)
		if err := s.Sotw(xdscache.SotwRequest{TypeURL: typeURL, NamesHash: c.HashNames(names), Names: func() []string { return names }}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	b := xdscache.Audience{Namespace: "b"}
	sb := sotw(b, resource.ClusterType, "*")
	if err := sb.Sotw(xdscache.SotwRequest{TypeURL: EDS, NamesHash: c.HashNames([]string{"a/own", "b/own", "ghost", "nobody", "a/to-b"}),
		Names: func() []string { return []string{"a/own", "b/own", "ghost", "nobody", "a/to-b"} }}); err != nil {
		t.Fatal(err)
	}
	want := "hidden EDS a/own (a); hidden EDS nobody (); unpublished EDS ghost; wildcard CDS 2"
	if got := describeWithheld(sb.Withheld(32)); got != want {
		t.Errorf("b, before any response:\n got %s\nwant %s", got, want)
	}
	sb.Next(nil) // builds b's visible list of clusters
	if got := describeWithheld(sb.Withheld(32)); got != want {
		t.Errorf("b, once sent:\n got %s\nwant %s", got, want)
	}
	// one of two hidden names within a limit of one, and a count of the other
	if got, want := describeWithheld(sb.Withheld(1)), "hidden EDS a/own (a); +1 hidden; unpublished EDS ghost; wildcard CDS 2"; got != want {
		t.Errorf("b, limit 1:\n got %s\nwant %s", got, want)
	}

	anon := sotw(xdscache.Anonymous, resource.ClusterType, "*")
	if got, want := describeWithheld(anon.Withheld(32)), "wildcard CDS 4"; got != want {
		t.Errorf("anonymous wildcard: got %s, want %s", got, want)
	}

	// a Delta wildcard stream of a that also names b's resource and a name
	// nothing has
	da := c.NewStreamFor(true, xdscache.Audience{Namespace: "a"})
	da.SetNode(envoy)
	if err := da.Delta(xdscache.DeltaRequest{TypeURL: resource.EndpointType, Subscribe: []string{"*", "b/own", "gone"}}); err != nil {
		t.Fatal(err)
	}
	if got, want := describeWithheld(da.Withheld(32)), "hidden EDS b/own (b); unpublished EDS gone; wildcard EDS 2"; got != want {
		t.Errorf("a over Delta:\n got %s\nwant %s", got, want)
	}

	// a/own exported to b too: no longer withheld from b's stream
	c.Apply(xdscache.Update{Version: "v2", Changes: []xdscache.Change{put("v2", EDS, "a/own", "a", "b"), put("v2", resource.ClusterType, "a/own", "a", "b")}})
	if got, want := describeWithheld(sb.Withheld(32)), "hidden EDS nobody (); unpublished EDS ghost; wildcard CDS 1"; got != want {
		t.Errorf("b, once a/own is exported to it:\n got %s\nwant %s", got, want)
	}
	// nothing restricted of a type: nothing withheld of it
	open := sotw(b, resource.ListenerType, "*")
	if w := open.Withheld(32); !w.Empty() {
		t.Errorf("a wildcard of a type with no restricted resource: %s", describeWithheld(w))
	}
	sb.Close()
	if w := sb.Withheld(32); !w.Empty() {
		t.Errorf("a closed stream withholds %s", describeWithheld(w))
	}
}
