package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"poise.dev/poise/pkg/crdschema"
)

// replicaCRD is one CRD that one replica finds other than its binary's.
type replicaCRD struct {
	Replica string
	CRD     crdschema.Status
}

// writeCRDs reports, after the rest of status, each CRD a replica finds
// other than the one its binary was built with (/debug/crds, Kubernetes
// mode): in text a table; in JSON, whose output stays the list of streams,
// a warning on stderr for each CRD that prunes fields the binary knows or
// is missing. A replica in files mode lists no CRD; one that did not answer
// was reported already.
func writeCRDs(ctx context.Context, o statusOptions, stdout, stderr io.Writer) {
	var rows []replicaCRD
	for _, addr := range o.addresses {
		var body struct {
			CRDs []crdschema.Status `json:"crds"`
		}
		if err := getAdmin(ctx, addr, "/debug/crds", o.timeout, &body); err != nil {
			continue
		}
		for _, s := range body.CRDs {
			if s.State != crdschema.Current {
				rows = append(rows, replicaCRD{Replica: addr, CRD: s})
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	if o.output == "json" {
		for _, r := range rows {
			if w := r.CRD.Warning(); w != "" {
				fmt.Fprintf(stderr, "warning: replica %s: %s\n", r.Replica, w)
			}
		}
		return
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CRD\tREPLICA\tSTATE\tINSTALLED\tBINARY\tSINCE\tWHAT IT MEANS")
	for _, r := range rows {
		c := r.CRD
		since := "-" // not read yet
		if !c.Since.IsZero() {
			since = c.Since.UTC().Format(time.RFC3339)
		}
		fmt.Fprintln(tw, strings.Join([]string{c.Name, r.Replica, string(c.State), orDash(c.InstalledVersion), c.BinaryVersion,
			since, crdMeaning(c)}, "\t"))
	}
	_ = tw.Flush()
}

// crdMeaning is what a CRD's state does, in a few words.
func crdMeaning(c crdschema.Status) string {
	switch c.State {
	case crdschema.Outdated:
		return "the apiserver prunes " + crdschema.Fields(c.PrunedFields, c.PrunedMore) + ": upgrade the CRDs"
	case crdschema.NotInstalled:
		return "nothing of its kind can be read: install the CRDs"
	case crdschema.Newer:
		return "this binary ignores " + crdschema.Fields(c.UnknownFields, c.UnknownMore)
	case crdschema.Compatible:
		return "same fields, other validation or descriptions"
	case crdschema.Unknown:
		return "cannot be read: " + oneLine(c.Error, 120)
	}
	return "-"
}
