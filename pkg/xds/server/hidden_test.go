package server_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"poise.dev/poise/pkg/xds/server"
)

// TestWithheldShown: /debug/clients says, per client, what it asked for
// and may not read, with the rule that hides it and its audience; what is
// not published at all is listed apart; a wildcard counts what is withheld
// of its type; the names are bounded; an exportTo change moves the list.
func TestWithheldShown(t *testing.T) {
	t.Parallel()
	w := newVisibilityWorld(t)
	v := w.pub.Version(w.pub.LastRevision())

	b := w.sotwIn(as("b"), envoyNode("envoy-b"))
	b.subscribe(CDS)
	b.ack(b.expect(CDS, v, sorted(cl(ledgerKey), cl(webKey))...))
	b.subscribe(EDS, cl(payKey), cl(ledgerKey), "nowhere/none")
	b.ack(b.expect(EDS, v, cl(ledgerKey)))

	got := w.client("envoy-b")
	if got.Audience != "b" || got.Withheld == nil {
		t.Fatalf("envoy-b: audience %q, withheld %+v", got.Audience, got.Withheld)
	}
	wh := got.Withheld
	wantHidden := []server.HiddenResource{{NamedResource: server.NamedResource{Type: "EDS", Name: cl(payKey)},
		ExportedTo: []string{"a"}, Why: "exported to a only"}}
	if !slices.EqualFunc(wh.Hidden, wantHidden, func(x, y server.HiddenResource) bool {
		return x.NamedResource == y.NamedResource && slices.Equal(x.ExportedTo, y.ExportedTo) && x.Why == y.Why
	}) || wh.HiddenMore != 0 {
		t.Errorf("hidden from b: %+v (+%d), want %+v", wh.Hidden, wh.HiddenMore, wantHidden)
	}
	if want := []server.NamedResource{{Type: "EDS", Name: "nowhere/none"}}; !slices.Equal(wh.Unpublished, want) {
		t.Errorf("unpublished: %+v, want %+v", wh.Unpublished, want)
	}
	if len(wh.Wildcard) != 1 || wh.Wildcard["CDS"] != 1 {
		t.Errorf("b's wildcard CDS withholds %v, want CDS: 1 (a's)", wh.Wildcard)
	}
	js, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"withheld":{`, `"hidden":[{"type":"EDS","name":"` + cl(payKey) + `","exportedTo":["a"],"why":"exported to a only"}]`,
		`"unpublished":[{"type":"EDS","name":"nowhere/none"}]`, `"wildcard":{"CDS":1}`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("/debug/clients JSON lacks %s:\n%s", want, js)
		}
	}

	// an anonymous gRPC client asking for a's listener by name
	anon := w.sotw(grpcNode("grpc-anonymous"))
	anon.subscribe(LDS, listenerOf(payKey), listenerOf(webKey))
	anon.expect(LDS, v, listenerOf(webKey))
	ah := w.client("grpc-anonymous")
	if ah.Audience != "anonymous" || ah.Withheld == nil || len(ah.Withheld.Hidden) != 1 ||
		ah.Withheld.Hidden[0].Why != "exported to a only; an anonymous client reads only what is exported to every namespace" {
		t.Errorf("anonymous: audience %q, withheld %+v", ah.Audience, ah.Withheld)
	}

	// exported to b too: nothing of a's is withheld from b any more
	v = w.exportTo(payKey, ".", "b")
	b.expect(CDS, v, sorted(cl(payKey), cl(ledgerKey), cl(webKey))...)
	if wh := w.client("envoy-b").Withheld; wh == nil || len(wh.Hidden) != 0 || len(wh.Wildcard) != 0 || len(wh.Unpublished) != 1 {
		t.Errorf("once a/pay is exported to b, b is withheld %+v; want only the unpublished name", wh)
	}

	// bounded: 40 names of which nothing is published
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf("nowhere/n%02d", i))
	}
	bulk := w.sotwIn(as("b"), envoyNode("envoy-bulk"))
	bulk.subscribe(CDS, many...)
	bulk.expect(CDS, v)
	if wh := w.client("envoy-bulk").Withheld; wh == nil || len(wh.Unpublished) != server.MaxWithheldNames || wh.UnpublishedMore != 40-server.MaxWithheldNames ||
		wh.Unpublished[0].Name != "nowhere/n00" {
		t.Errorf("40 unpublished names: %+v", wh)
	}
	// a client that is sent all it asks for shows nothing withheld
	a := w.sotwIn(as("a"), envoyNode("envoy-a"))
	a.subscribe(CDS, cl(payKey), cl(webKey))
	a.expect(CDS, v, sorted(cl(payKey), cl(webKey))...)
	if wh := w.client("envoy-a").Withheld; wh != nil {
		t.Errorf("envoy-a, sent every cluster it names, is withheld %+v", wh)
	}
}
