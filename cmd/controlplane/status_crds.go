package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"poise.dev/poise/pkg/kube/crdschema"
)

// replicaCRD is one CRD that one replica finds other than its binary's.
type replicaCRD struct {
	Replica string           `json:"replica"`
	CRD     crdschema.Status `json:"crd"`
}

// crdsOf is what a replica says of the cluster's CRDs (/debug/crds,
// Kubernetes mode): those other than its binary's. A replica in files mode
// lists none; one older than this command has no such endpoint.
func crdsOf(ctx context.Context, r replica, timeout time.Duration) ([]replicaCRD, error) {
	var body struct {
		CRDs []crdschema.Status `json:"crds"`
	}
	if err := getAdmin(ctx, r, "/debug/crds", timeout, &body); err != nil {
		if ae := (*adminError)(nil); errors.As(err, &ae) && ae.status == "404 Not Found" {
			return nil, nil
		}
		return nil, err
	}
	var rows []replicaCRD
	for _, s := range body.CRDs {
		if s.State != crdschema.Current {
			rows = append(rows, replicaCRD{Replica: r.Name, CRD: s})
		}
	}
	return rows, nil
}

// writeCRDs reports, after the rest of status, each CRD a replica finds
// other than the one its binary was built with: in text a table; with JSON
// (which lists them under "crds"), a warning on stderr for each CRD that
// prunes fields the binary knows or is missing.
func writeCRDs(rows []replicaCRD, output string, stdout, stderr io.Writer) {
	if len(rows) == 0 {
		return
	}
	if output == "json" {
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
