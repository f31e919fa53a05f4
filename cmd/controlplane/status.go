package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"poise.dev/poise/pkg/admin"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/xdstype"
)

func newStatusCmd(stdout, stderr io.Writer) *cobra.Command {
	var o statusOptions
	c := &cobra.Command{
		Use:   "status [--admin-address HOST:PORT... | -n NAMESPACE]",
		Short: "List every xDS client of every replica and whether it is in sync, per type",
		Long: `status asks each replica of the control plane whom it serves. With no flag it
asks 127.0.0.1:19000, where serve listens; --admin-address names replicas; with
-n, --kubeconfig, --context, --release or --selector it finds every running pod
of the release in the cluster and reaches each pod's admin port (which listens
on the pod's loopback) through the apiserver's port-forward, as kubectl
port-forward does.

It lists each replica's version, then every connected xDS stream: its node,
kind, identity and locality class (and the zone its node claims, when its
identity placed it elsewhere), and per type it asked for where it stands
against what the replica serves it now: SYNCED (it ACKed the last response and
nothing in its scope waits), STALE (a response waits for its ACK, or a change
waits to be sent), NACKED (it rejected the last response and keeps what it
had) or NOT SENT; then its last NACK, what it asked for and is not sent, and
each replica's remote clusters.`,
		Example: `  # the replica of make run (controlplane serve -f examples)
  controlplane status
  # every pod of Deployment poise in namespace poise-system
  # (helm install poise charts/poise -n poise-system)
  controlplane status -n poise-system
  controlplane status --admin-address 127.0.0.1:19000,127.0.0.1:19010 -o json`,
		Args: cobra.NoArgs,
	}
	fs := c.Flags()
	bindReplicaFlags(fs, &o.replicaFlags)
	fs.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	return command(c, func(cmd *cobra.Command, _ []string) int {
		return runStatus(cmd.Context(), cmd.Flags(), o, stdout, stderr)
	})
}

type statusOptions struct {
	replicaFlags
	output string
}

// replicaClient is one stream of one replica, as status -o json lists it.
type replicaClient struct {
	Replica string        `json:"replica"`
	Client  server.Client `json:"client"`
}

// replicaVersion is the version one replica runs.
type replicaVersion struct {
	Replica string `json:"replica"`
	admin.Version
	Clients int `json:"clients"`
}

// statusReport is status -o json.
type statusReport struct {
	Replicas []replicaVersion `json:"replicas"`
	Clients  []replicaClient  `json:"clients"`
	Clusters []replicaCluster `json:"clusters"`
	// CRDs are the CRDs a replica finds other than its binary's.
	CRDs []replicaCRD `json:"crds"`
}

// checkReplicaFlags checks what status and proxy-config share: the output
// format and the flags that say which replicas to ask, and whether those
// are found in a cluster.
func checkReplicaFlags(output string, f *replicaFlags, fs *pflag.FlagSet, stderr io.Writer) (inCluster, ok bool) {
	if !checkOutput(output, stderr) {
		return false, false
	}
	inCluster, err := f.check(fs)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return false, false
	}
	return inCluster, true
}

// openReplicas checks the flags status and proxy-config share and finds
// the replicas they name; a code other than exitOK ends the command, having
// said why, and stop ends the port-forwards to the replicas.
func openReplicas(ctx context.Context, fs *pflag.FlagSet, f *replicaFlags, output string, stderr io.Writer) (replicas []replica, stop func(), code int) {
	inCluster, ok := checkReplicaFlags(output, f, fs, stderr)
	if !ok {
		return nil, nil, exitUsage
	}
	replicas, stop, err := f.replicas(ctx, inCluster, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return nil, nil, exitFor(err)
	}
	return replicas, stop, exitOK
}

// replicaAnswer is what one replica answered status.
type replicaAnswer struct {
	version  admin.Version
	clients  []server.Client
	clusters []source.ClusterStatus
	crds     []replicaCRD
	err      error
}

func askReplica(ctx context.Context, r replica, timeout time.Duration) replicaAnswer {
	var a replicaAnswer
	var clients struct {
		Clients []server.Client `json:"clients"`
	}
	var clusters struct {
		Clusters []source.ClusterStatus `json:"clusters"`
	}
	if a.err = getAdmin(ctx, r, "/debug/clients", timeout, &clients); a.err != nil {
		return a
	}
	if a.err = getAdmin(ctx, r, "/debug/clusters", timeout, &clusters); a.err != nil {
		return a
	}
	if err := getAdmin(ctx, r, "/debug/version", timeout, &a.version); err != nil {
		var ae *adminError
		if !errors.As(err, &ae) || ae.status != "404 Not Found" {
			a.err = err
			return a
		}
		a.version.Version = "unknown (no /debug/version: older than this command)"
	}
	a.clients, a.clusters = clients.Clients, clusters.Clusters
	a.crds, a.err = crdsOf(ctx, r, timeout)
	return a
}

func runStatus(ctx context.Context, fs *pflag.FlagSet, o statusOptions, stdout, stderr io.Writer) int {
	replicas, stop, code := openReplicas(ctx, fs, &o.replicaFlags, o.output, stderr)
	if code != exitOK {
		return code
	}
	defer stop()
	answers := make([]replicaAnswer, len(replicas))
	var wg sync.WaitGroup
	for i, r := range replicas {
		wg.Go(func() { answers[i] = askReplica(ctx, r, o.timeout) })
	}
	wg.Wait()
	rep := statusReport{Replicas: []replicaVersion{}, Clients: []replicaClient{}, Clusters: []replicaCluster{}, CRDs: []replicaCRD{}}
	for i, a := range answers {
		name := replicas[i].Name
		if a.err != nil {
			fmt.Fprintf(stderr, "error: replica %s: %v\n", name, a.err)
			code = exitInvalid
			continue
		}
		rep.Replicas = append(rep.Replicas, replicaVersion{Replica: name, Version: a.version, Clients: len(a.clients)})
		for _, c := range a.clients {
			rep.Clients = append(rep.Clients, replicaClient{Replica: name, Client: c})
		}
		for _, c := range a.clusters {
			rep.Clusters = append(rep.Clusters, replicaCluster{Replica: name, Cluster: c})
		}
		rep.CRDs = append(rep.CRDs, a.crds...)
	}
	sort.SliceStable(rep.Clients, func(i, j int) bool {
		a, b := rep.Clients[i], rep.Clients[j]
		if a.Client.NodeID != b.Client.NodeID {
			return a.Client.NodeID < b.Client.NodeID
		}
		if a.Replica != b.Replica {
			return a.Replica < b.Replica
		}
		return a.Client.Stream < b.Client.Stream
	})
	sortClusters(rep.Clusters)
	if c := writeReport(o.output, stdout, stderr, rep, func() error { return writeStatusText(stdout, rep) }); c != exitOK {
		return c
	}
	writeCRDs(rep.CRDs, o.output, stdout, stderr)
	return code
}

// replicaCluster is one remote cluster as one replica sees it.
type replicaCluster struct {
	Replica string               `json:"replica"`
	Cluster source.ClusterStatus `json:"cluster"`
}

// sortClusters orders remote clusters by name, then replica.
func sortClusters(cs []replicaCluster) {
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.Cluster.Name != b.Cluster.Name {
			return a.Cluster.Name < b.Cluster.Name
		}
		return a.Replica < b.Replica
	})
}

// writeStatusText writes the replicas, their clients (and what those are
// withheld) and their remote clusters, each a table.
func writeStatusText(w io.Writer, rep statusReport) error {
	if len(rep.Replicas) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REPLICA\tVERSION\tINSTANCE\tCLIENTS")
		for _, r := range rep.Replicas {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", r.Replica, orDash(r.Version.Version), orDash(r.Instance), r.Clients)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	rows, clusters := rep.Clients, slices.Clone(rep.Clusters)
	sortClusters(clusters)
	if err := writeClientsText(w, rows); err != nil {
		return err
	}
	if err := writeWithheldText(w, rows); err != nil || len(clusters) == 0 {
		return err
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tREPLICA\tSECRET\tSTATE\tSINCE\tLAST SYNC\tERROR")
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, r := range clusters {
		c := r.Cluster
		fmt.Fprintln(tw, strings.Join([]string{c.Name, r.Replica, c.Secret, string(c.State), at(c.Since), at(c.LastSync), orDash(oneLine(c.Error, 120))}, "\t"))
	}
	return tw.Flush()
}

func writeClientsText(w io.Writer, rows []replicaClient) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	types := xdstype.Shorts() // a column each, in the order they are sent
	fmt.Fprintln(tw, "NODE\tREPLICA\tKIND\tAUDIENCE\tPRINCIPAL\tCLASS\t"+strings.Join(types, "\t")+"\tLAST NACK")
	for _, r := range rows {
		c := r.Client
		class := orDash(c.Class)
		if c.ClaimedZone != "" {
			// the identity placed it elsewhere than its node claims
			class += " (claimed " + c.ClaimedZone + ")"
		}
		cols := append(append([]string{orDash(c.NodeID), r.Replica, c.Kind}, identityCols(c)...), class)
		var last *server.NACK
		var lastType string
		for _, t := range types {
			ts := c.Types[t]
			cols = append(cols, typeCell(ts))
			if ts != nil && ts.LastNACK != nil && (last == nil || ts.LastNACK.At.After(last.At)) {
				last, lastType = ts.LastNACK, t
			}
		}
		nack := "-"
		if last != nil {
			nack = fmt.Sprintf("%s %s %s: %s", lastType, last.Version, last.At.UTC().Format(time.RFC3339), oneLine(last.Error, 80))
		}
		fmt.Fprintln(tw, strings.Join(append(cols, nack), "\t"))
	}
	return tw.Flush()
}

// typeCell is where a client stands on one type: SYNCED, STALE with the
// version it ACKed and the one its view is at, NACKED, NOT SENT, or "-"
// for a type it did not ask for.
func typeCell(ts *server.TypeState) string {
	switch {
	case ts == nil:
		return "-"
	case ts.State == server.Stale:
		return fmt.Sprintf("STALE (acked %s, now %s)", orDash(ts.LastAckedVersion), orDash(ts.CurrentVersion))
	case ts.State != "":
		return ts.State
	}
	// a replica that says no state: what it ACKed, and what it sent
	v := orDash(ts.LastAckedVersion)
	if ts.LastSentVersion != "" && ts.LastSentVersion != ts.LastAckedVersion {
		v += " (sent " + ts.LastSentVersion + ")"
	}
	return v
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine is s on one line, cut to at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
