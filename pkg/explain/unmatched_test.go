package explain

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// TestUnmatchedLocalitiesAreShown: a Locality object whose zone matches no
// endpoint set (a zone typo'd eu-west-la, in a topology read from a cluster,
// where it may wait for endpoints to come) is named in the text and the
// JSON with its priority, locality and weight, so a person finds the zone
// that is nowhere else in the report.
func TestUnmatchedLocalitiesAreShown(t *testing.T) {
	up := topology.Upstream{Key: topology.Key{Namespace: "shop", Name: "checkout"}, Policy: weights.DefaultPolicy(), HealthAdjustment: topology.ControlPlane}
	var b topology.Batch
	b.PutUpstream(up)
	for _, z := range []struct {
		name, locality, set, address string
		weight                       uint64
	}{{"checkout-eu-west-1a", "eu-west-la", "eu-west-1a", "10.0.0.1", 3}, {"checkout-eu-west-1b", "eu-west-1b", "eu-west-1b", "10.0.0.2", 2}} {
		b.PutLocality(topology.Locality{Key: topology.Key{Namespace: "shop", Name: z.name}, Upstream: "checkout",
			Locality: weights.Locality{Region: "eu-west", Zone: z.locality}, Weight: z.weight})
		b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "shop", Name: z.name}, Upstream: "checkout",
			Locality: weights.Locality{Region: "eu-west", Zone: z.set}, Endpoints: []topology.Endpoint{{Address: z.address, Port: 80, Weight: 1}}})
	}
	snap, err := topology.NewDirectory().Apply(b) // as the Kubernetes source's, which lets it wait
	if err != nil {
		t.Fatal(err)
	}
	rep := Build(snap)
	want := []UnmatchedLocality{{Locality: "Locality shop/checkout-eu-west-1a", Region: "eu-west", Zone: "eu-west-la", LocalityWeight: 3}}
	if got := rep.Upstreams[0].UnmatchedLocalities; !slices.Equal(got, want) {
		t.Fatalf("unmatched localities %+v, want %+v", got, want)
	}
	var text bytes.Buffer
	if err := WriteText(&text, rep); err != nil {
		t.Fatal(err)
	}
	if line := `    priority 0, region="eu-west" zone="eu-west-la" subZone="": weight 3 (Locality shop/checkout-eu-west-1a)`; !strings.Contains(text.String(), "match no endpoints") ||
		!strings.Contains(text.String(), line+"\n") {
		t.Errorf("the text lacks %q:\n%s", line, text.String())
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"unmatchedLocalities":[{"locality":"Locality shop/checkout-eu-west-1a","priority":0,"region":"eu-west","zone":"eu-west-la","subZone":"","localityWeight":3}]`; !strings.Contains(string(js), want) {
		t.Errorf("the JSON lacks %s:\n%s", want, js)
	}
	// the matched Locality and the set without one are not listed
	if strings.Count(text.String(), "eu-west-la") != 1 {
		t.Errorf("eu-west-la is named %d times:\n%s", strings.Count(text.String(), "eu-west-la"), text.String())
	}
}
