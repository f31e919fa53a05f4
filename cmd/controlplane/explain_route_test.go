package main

import (
	"encoding/json"
	"strings"
	"testing"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/golden"
)

const spatialExamples = "../../examples/spatial"

// spatialNote is what commands say on stderr of examples/spatial: its
// Namespace is not theirs.
const spatialNote = "note: skipped 1 object of other kinds (Namespace 1) in " + spatialExamples + "\n"

func TestExplainRouteGolden(t *testing.T) {
	t.Parallel()
	base := []string{"explain-route", "-f", spatialExamples, "--domain", "cadastre"}
	tests := []struct {
		name   string
		args   []string
		status int
		reason string
	}{
		{"route-locality", []string{"--product", "parcels", "--bbox", "8,48,9,49"}, 200, "locality"},
		{"route-epsg4326", []string{"--product", "parcels", "--bbox", "48,8,49,9", "--crs", "EPSG:4326"}, 200, "locality"},
		// New England is held only by us-east, which parcels may not use: a lawful,
		// distant replica of the pool serves it.
		{"route-lawful-distant", []string{"--product", "parcels", "--bbox", "-72,42,-71,43"}, 200, "no_partition"},
		{"route-451", []string{"--product", "mining-claims", "--bbox", "-80,45,-79,46"}, 451, "residency"},
		{"route-503", []string{"--product", "historic-maps", "--bbox", "12,41,13,42"}, 503, "unhealthy"},
		{"route-400", []string{"--product", "parcels", "--bbox", "0x8,48,9,49"}, 400, "bad_bbox:number"},
		{"route-query", []string{"--product", "buildings", "--path", "/collections/buildings/items?bbox=175%2C52%2C-170%2C55"}, 200, "locality"},
		{"route-too-many-cells", []string{"--product", "parcels", "--bbox", "-180,-90,180,90"}, 200, "too_many_cells"},
		{"route-no-bbox", []string{"--product", "buildings"}, 200, "no_bbox"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(append(base, tc.args...)...)
			if code != exitOK || stderr != spatialNote {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr)
			}
			golden.Check(t, tc.name, stdout)
			code, js, stderr := runCLI(append(append(base, tc.args...), "-o", "json")...)
			if code != exitOK || stderr != spatialNote {
				t.Fatalf("json: exit %d, stderr:\n%s", code, stderr)
			}
			var rep explain.RouteReport
			if err := json.Unmarshal([]byte(js), &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Result.Status != tc.status || rep.Result.Reason != tc.reason {
				t.Errorf("json result %+v, want %d %s", rep.Result, tc.status, tc.reason)
			}
			if rep.MapVersion == "" || !strings.HasPrefix(rep.DataVersion, rep.MapVersion+"-h") || !strings.Contains(stdout, rep.DataVersion) {
				t.Errorf("versions: map %q data %q; text must print the data version", rep.MapVersion, rep.DataVersion)
			}
		})
	}
}

func TestExplainRouteErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"explain-route", "-f", spatialExamples, "--product", "parcels"}, exitUsage, "--domain and --product are required"},
		{[]string{"explain-route", "-f", spatialExamples, "--domain", "roads", "--product", "parcels"}, exitInvalid, "no SpatialDomain of that name"},
		{[]string{"explain-route", "-f", spatialExamples, "--domain", "other/cadastre", "--product", "parcels"}, exitInvalid, "no such SpatialDomain"},
		{[]string{"explain-route", "-f", spatialExamples, "--domain", "cadastre", "--product", "parcels", "-o", "yaml"}, exitUsage, `-o "yaml"`},
		{[]string{"explain-route", "--domain", "cadastre", "--product", "parcels"}, exitUsage, "-f PATH is required"},
		{[]string{"explain-route", "-f", spatialExamples, "--domain", "cadastr", "--product", "parcels"}, exitInvalid,
			"--domain cadastr: no SpatialDomain of that name; did you mean cadastre?"},
		{[]string{"explain-route", "-f", spatialExamples, "--domain", "geo/cadastr", "--product", "parcels"}, exitInvalid,
			"--domain geo/cadastr: no such SpatialDomain; did you mean geo/cadastre?"},
		{[]string{"explain-route", "-f", spatialExamples, "--domain", "other/cadastre", "--product", "parcels"}, exitInvalid,
			"no such SpatialDomain; did you mean geo/cadastre?"},
	}
	for _, tc := range tests {
		code, _, stderr := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d stderr %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
		checkNoCrash(t, stderr)
	}
}
