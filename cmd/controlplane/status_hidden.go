package main

import (
	"fmt"
	"io"
	"strings"

	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/xdstype"
)

// identityCols are a client's AUDIENCE (the namespace its identity proves,
// or anonymous: what it may read) and PRINCIPAL (NAMESPACE/SERVICE-ACCOUNT
// and how it was proven, or "-") columns of status.
func identityCols(c server.Client) []string {
	principal := "-"
	if id := c.Identity; id != nil {
		principal = id.Principal
		if id.Method != "" {
			principal += " (" + id.Method + ")"
		}
	}
	return []string{orDash(c.Audience), principal}
}

// writeWithheldText lists, below the clients, what each client asked for
// and is not sent, and why: a resource exported elsewhere (hidden), a name
// nothing is published under (not hidden: absent), and what a wildcard
// leaves out. Nothing is written when nothing is withheld. The replica is
// named only when there are several.
func writeWithheldText(w io.Writer, rows []replicaClient) error {
	replicas := map[string]bool{}
	for _, r := range rows {
		replicas[r.Replica] = true
	}
	var lines []string
	for _, r := range rows {
		c := r.Client
		wh := c.Withheld
		if wh == nil {
			continue
		}
		who := fmt.Sprintf("%s (%s)", orDash(c.NodeID), orDash(c.Audience))
		if len(replicas) > 1 {
			who += " on " + r.Replica
		}
		notFor := "not exported to " + c.Audience
		if c.Audience == "anonymous" || c.Audience == "" {
			notFor = `not exported to every namespace ("*"), all an anonymous client may read`
		}
		for _, t := range xdstype.Shorts() {
			if n := wh.Wildcard[t]; n > 0 {
				lines = append(lines, fmt.Sprintf("%s asked for every %s: %d withheld (%s)", who, t, n, notFor))
			}
		}
		for _, h := range wh.Hidden {
			lines = append(lines, fmt.Sprintf("%s asked for %s %s: %s", who, h.Type, h.Name, h.Why))
		}
		for _, u := range wh.Unpublished {
			lines = append(lines, fmt.Sprintf("%s asked for %s %s: not published (nothing has that name; not a matter of visibility)", who, u.Type, u.Name))
		}
		var more []string
		if wh.HiddenMore > 0 {
			more = append(more, fmt.Sprintf("%d more hidden", wh.HiddenMore))
		}
		if wh.UnpublishedMore > 0 {
			more = append(more, fmt.Sprintf("%d more unpublished", wh.UnpublishedMore))
		}
		if len(more) > 0 {
			lines = append(lines, fmt.Sprintf("%s: and %s names (a client's lists stop at %d names each)", who, strings.Join(more, " and "), server.MaxWithheldNames))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(w, "\nWithheld (asked for, not sent):\n  %s\n", strings.Join(lines, "\n  "))
	return err
}
