package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/test/golden"
)

// tenantsDir holds two tenants with every kind of exportTo rule.
const tenantsDir = "testdata/tenants"

// TestExplainVisibilityGolden: explain says, per upstream and
// SpatialDomain, whether a client of a namespace (or an anonymous one) may
// read it and why, resolving objects without spec.exportTo by
// --default-export-to as serve does.
func TestExplainVisibilityGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"explain-client-tenant-b", []string{"--client-namespace", "tenant-b"}},
		{"explain-client-anonymous-json", []string{"--client-anonymous", "-o", "json"}},
		{"explain-default-export-own", []string{"--default-export-to", ".", "--client-namespace", "tenant-b", "--upstream", "tenant-a/plain"}},
		{"explain-default-export-named", []string{"--default-export-to", ".,tenant-c", "--upstream", "tenant-a/plain"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(append([]string{"explain", "-f", tenantsDir}, tc.args...)...)
			if code != exitOK || stderr != "" {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr)
			}
			golden.Check(t, tc.name, stdout)
		})
	}
}

// TestExplainVisibility: what a client of tenant-b may read of each
// upstream is what exportTo says; the JSON decodes into explain.Report
// and prints the same text; without the flags nothing is resolved.
func TestExplainVisibility(t *testing.T) {
	t.Parallel()
	args := []string{"explain", "-f", tenantsDir, "--client-namespace", "tenant-b"}
	code, stdout, stderr := runCLI(append(args, "-o", "json")...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	var rep explain.Report
	if err := dec.Decode(&rep); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"tenant-a/private": false, "tenant-a/shared": true, "tenant-a/partner": true, "tenant-a/plain": true, "tenant-b/ledger": true}
	for _, u := range rep.Upstreams {
		k := u.Namespace + "/" + u.Name
		if u.Access == nil || u.Access.Allowed != want[k] || u.Visibility == nil {
			t.Errorf("%s: access %+v visibility %+v, want allowed %v", k, u.Access, u.Visibility, want[k])
		}
	}
	if p := rep.Upstreams[2]; p.Name != "private" || p.Access.Why != "exported to tenant-a only" {
		t.Errorf("tenant-a/private: %+v", p.Access)
	}
	if len(rep.SpatialDomains) != 1 || rep.SpatialDomains[0].Access.Allowed || rep.Audience == nil || rep.Audience.Namespace != "tenant-b" {
		t.Errorf("spatial domains %+v, audience %+v", rep.SpatialDomains, rep.Audience)
	}
	_, text, _ := runCLI(args...)
	var buf bytes.Buffer
	if err := explain.WriteText(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if buf.String() != text {
		t.Errorf("text from the decoded JSON differs:\n%s", golden.Diff(text, buf.String()))
	}

	// no flag: the report is the one without visibility resolved
	_, plain, _ := runCLI("explain", "-f", tenantsDir, "-o", "json")
	for _, absent := range []string{`"access"`, `"audience"`, `"spatialDomains"`, `"defaultExportTo"`} {
		if strings.Contains(plain, absent) {
			t.Errorf("explain without the visibility flags has %s", absent)
		}
	}
	// only the four upstreams that set spec.exportTo show a visibility
	if n := strings.Count(plain, `"visibility"`); n != 4 {
		t.Errorf("explain without the visibility flags shows %d visibilities, want 4 (plain sets none)", n)
	}
}

// TestExplainVisibilityFlags: a bad flag is exit 2 with the flag named;
// --default-export-to is refused as serve refuses it.
func TestExplainVisibilityFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--client-namespace", "tenant-b", "--client-anonymous"}, "give one client"},
		{[]string{"--client-namespace", ""}, `--client-namespace "": want a namespace name; for a client of no proven namespace use --client-anonymous`},
		{[]string{"--client-namespace", "Tenant_B"}, `--client-namespace "Tenant_B": not a namespace name`},
		{[]string{"--default-export-to", "*,a"}, `--default-export-to "*,a": Invalid value: ["*","a"]: '*' (every namespace) stands alone`},
		{[]string{"--default-export-to", ""}, `--default-export-to "": Invalid value: []: must hold at least one item`},
		{[]string{"--default-export-to", "a,a"}, `--default-export-to "a,a": Duplicate value: "a"`},
	} {
		code, _, stderr := runCLI(append([]string{"explain", "-f", tenantsDir}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
		// serve says the same of the same --default-export-to
		if tc.args[0] == "--default-export-to" {
			code, _, serr := runCLI("serve", "-f", tenantsDir, "--default-export-to", tc.args[1], "--admin-address", "127.0.0.1:0", "--xds-address", "127.0.0.1:0")
			if code != exitUsage || !strings.Contains(serr, tc.want) {
				t.Errorf("serve %v: exit %d, stderr %q; want %q as explain says", tc.args, code, serr, tc.want)
			}
		}
	}
}
