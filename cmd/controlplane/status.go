package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"poise.dev/poise/pkg/source/kube"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/xdstype"
)

// maxAdminResponse bounds what is read of one replica's admin answer.
const maxAdminResponse = 32 << 20

func newStatusCmd(stdout, stderr io.Writer) *cobra.Command {
	var o statusOptions
	c := &cobra.Command{
		Use:   "status --admin-address HOST:PORT...",
		Short: "List every xDS client of every replica (node, locality class, acked versions, last NACK), and each replica's remote clusters",
		Long: `status reads /debug/clients of each replica's admin address and lists every
connected xDS stream: its node, kind and locality class (and the zone its node
claims, when its identity placed it elsewhere), the version it last ACKed of
each type (and the one sent, when it has not ACKed it yet), and its last NACK. Below, in text, it lists each replica's remote clusters
(/debug/clusters, docs/multicluster.md): state, since when, last sync, error.
The admin port listens on loopback: reach a pod's with kubectl port-forward.`,
		Example: `  kubectl -n poise port-forward pod/poise-0 19000:19000 &
  controlplane status --admin-address 127.0.0.1:19000 --admin-address 127.0.0.1:19010`,
		Args: cobra.NoArgs,
	}
	fs := c.Flags()
	fs.StringSliceVar(&o.addresses, "admin-address", nil, "admin address of a replica, HOST:PORT (repeatable, or comma-separated)")
	fs.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long each replica may take to answer")
	return command(c, func(cmd *cobra.Command, _ []string) int { return runStatus(cmd.Context(), o, stdout, stderr) })
}

type statusOptions struct {
	addresses []string
	output    string
	timeout   time.Duration
}

// replicaClient is one stream of one replica, as status -o json lists it.
type replicaClient struct {
	Replica string        `json:"replica"`
	Client  server.Client `json:"client"`
}

// checkReplicaFlags checks what status and proxy-config share: the output
// format, at least one --admin-address, a positive --timeout.
func checkReplicaFlags(output string, addresses []string, timeout time.Duration, stderr io.Writer) bool {
	switch {
	case !checkOutput(output, stderr):
		return false
	case len(addresses) == 0:
		fmt.Fprintln(stderr, "error: --admin-address HOST:PORT is required (one per replica)")
		return false
	case timeout <= 0:
		fmt.Fprintln(stderr, "error: --timeout must be positive")
		return false
	}
	return true
}

func runStatus(ctx context.Context, o statusOptions, stdout, stderr io.Writer) int {
	if !checkReplicaFlags(o.output, o.addresses, o.timeout, stderr) {
		return exitUsage
	}
	code := exitOK
	var rows []replicaClient
	var clusters []replicaCluster
	for _, addr := range o.addresses {
		var body struct {
			Clients []server.Client `json:"clients"`
		}
		var cs struct {
			Clusters []kube.ClusterStatus `json:"clusters"`
		}
		err := getAdmin(ctx, addr, "/debug/clients", o.timeout, &body)
		if err == nil {
			err = getAdmin(ctx, addr, "/debug/clusters", o.timeout, &cs)
		}
		if err != nil {
			fmt.Fprintf(stderr, "error: replica %s: %v\n", addr, err)
			code = exitInvalid
			continue
		}
		for _, c := range body.Clients {
			rows = append(rows, replicaClient{Replica: addr, Client: c})
		}
		for _, c := range cs.Clusters {
			clusters = append(clusters, replicaCluster{Replica: addr, Cluster: c})
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Client.NodeID != b.Client.NodeID {
			return a.Client.NodeID < b.Client.NodeID
		}
		if a.Replica != b.Replica {
			return a.Replica < b.Replica
		}
		return a.Client.Stream < b.Client.Stream
	})
	if rows == nil {
		rows = []replicaClient{}
	}
	if c := writeReport(o.output, stdout, stderr, rows, func() error { return writeStatusText(stdout, rows, clusters) }); c != exitOK {
		return c
	}
	return code
}

// replicaCluster is one remote cluster as one replica sees it.
type replicaCluster struct {
	Replica string
	Cluster kube.ClusterStatus
}

func writeStatusText(w io.Writer, rows []replicaClient, clusters []replicaCluster) error {
	if err := writeClientsText(w, rows); err != nil {
		return err
	}
	if err := writeWithheldText(w, rows); err != nil || len(clusters) == 0 {
		return err
	}
	sort.SliceStable(clusters, func(i, j int) bool {
		a, b := clusters[i], clusters[j]
		if a.Cluster.Name != b.Cluster.Name {
			return a.Cluster.Name < b.Cluster.Name
		}
		return a.Replica < b.Replica
	})
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
			if ts == nil {
				cols = append(cols, "-")
				continue
			}
			v := orDash(ts.LastAckedVersion)
			if ts.LastSentVersion != "" && ts.LastSentVersion != ts.LastAckedVersion {
				v += " (sent " + ts.LastSentVersion + ")"
			}
			cols = append(cols, v)
			if ts.LastNACK != nil && (last == nil || ts.LastNACK.At.After(last.At)) {
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

// getAdmin GETs path of a replica's admin address and decodes its JSON
// into v, reading at most maxAdminResponse bytes.
func getAdmin(ctx context.Context, addr, path string, timeout time.Duration, v any) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminResponse+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if len(b) > maxAdminResponse {
		return fmt.Errorf("GET %s: the answer is over %d MiB", path, maxAdminResponse>>20)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, oneLine(string(b), 200))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}
