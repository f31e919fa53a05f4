package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"poise.dev/poise/pkg/admin"
	"poise.dev/poise/pkg/xds/xdstype"
)

func newProxyConfigCmd(stdout, stderr io.Writer) *cobra.Command {
	var o proxyConfigOptions
	c := &cobra.Command{
		Use:   "proxy-config NODE --admin-address HOST:PORT...",
		Short: "Show the clusters and endpoints one xDS client is served, decoded, with its locality weights",
		Long: `proxy-config reads /debug/config?node=NODE of each replica's admin address and
prints, for every stream of that node, the clusters and ClusterLoadAssignments it
is served now (its locality class's variants included): per cluster, each
locality's priority and weight and its endpoints with their health and weight.
Replicas the node is not connected to are skipped. --resource NAME shows one
cluster only; without it, at most 100 resources of each type are shown.`,
		Example: `  controlplane proxy-config envoy-eu-1 --admin-address 127.0.0.1:19000
  controlplane proxy-config envoy-eu-1 --admin-address 127.0.0.1:19000 --resource shop/checkout -o json`,
		Args: cobra.ExactArgs(1),
	}
	fs := c.Flags()
	fs.StringSliceVar(&o.addresses, "admin-address", nil, "admin address of a replica, HOST:PORT (repeatable, or comma-separated)")
	fs.StringVar(&o.resource, "resource", "", "show only this cluster (NAMESPACE/NAME)")
	fs.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long each replica may take to answer")
	return command(c, func(cmd *cobra.Command, args []string) int {
		return runProxyConfig(cmd.Context(), args[0], o, stdout, stderr)
	})
}

type proxyConfigOptions struct {
	addresses        []string
	resource, output string
	timeout          time.Duration
}

// replicaConfig is what one replica serves the node, as -o json lists it.
type replicaConfig struct {
	Replica string               `json:"replica"`
	Streams []admin.ConfigStream `json:"streams"`
}

func runProxyConfig(ctx context.Context, node string, o proxyConfigOptions, stdout, stderr io.Writer) int {
	if !checkReplicaFlags(o.output, o.addresses, o.timeout, stderr) {
		return exitUsage
	}
	q := url.Values{"node": {node}}
	if o.resource != "" {
		q.Set("resource", o.resource)
	}
	var out []replicaConfig
	for _, addr := range o.addresses {
		var body struct {
			Streams []admin.ConfigStream `json:"streams"`
		}
		if err := getAdmin(ctx, addr, "/debug/config?"+q.Encode(), o.timeout, &body); err != nil {
			// a node is connected to one replica at a time: the others say so
			fmt.Fprintf(stderr, "note: replica %s: %v\n", addr, err)
			continue
		}
		out = append(out, replicaConfig{Replica: addr, Streams: body.Streams})
	}
	if len(out) == 0 {
		fmt.Fprintf(stderr, "error: node %q is connected to none of the replicas given\n", node)
		return exitInvalid
	}
	return writeReport(o.output, stdout, stderr, out, func() error { return writeProxyConfigText(stdout, out) })
}

func writeProxyConfigText(w io.Writer, replicas []replicaConfig) error {
	for _, r := range replicas {
		for _, st := range r.Streams {
			fmt.Fprintf(w, "NODE %s on %s (%s stream %d, %s, rendering %s, class %s)\n", st.NodeID, r.Replica, st.Protocol, st.Stream,
				st.Kind, st.Rendering, orDash(st.Class))
			if cds, ok := st.Types[xdstype.At(xdstype.Clusters).Short]; ok {
				fmt.Fprintf(w, "\nCLUSTERS (version %s)\n", cds.Version)
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "  NAME\tLB POLICY\tDISCOVERY")
				for _, raw := range cds.Resources {
					var c cluster.Cluster
					if err := decodeResource(raw, &c); err != nil {
						return err
					}
					fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.GetName(), c.GetLbPolicy(), c.GetType())
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				more(w, cds.More)
			}
			if eds, ok := st.Types[xdstype.At(xdstype.Endpoints).Short]; ok {
				fmt.Fprintf(w, "\nENDPOINTS (version %s)\n", eds.Version)
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "  CLUSTER\tPRIORITY\tLOCALITY\tLOCALITY WEIGHT\tENDPOINT\tHEALTH\tWEIGHT")
				for _, raw := range eds.Resources {
					var cla endpoint.ClusterLoadAssignment
					if err := decodeResource(raw, &cla); err != nil {
						return err
					}
					writeCLA(tw, &cla)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				more(w, eds.More)
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}

// writeCLA is one ClusterLoadAssignment as rows: each locality's priority
// and weight beside each of its endpoints.
func writeCLA(w io.Writer, cla *endpoint.ClusterLoadAssignment) {
	for _, d := range cla.GetPolicy().GetDropOverloads() {
		fmt.Fprintf(w, "  %s\t-\tdrop %s\t%d/%s\t-\t-\t-\n", cla.GetClusterName(), d.GetCategory(),
			d.GetDropPercentage().GetNumerator(), d.GetDropPercentage().GetDenominator())
	}
	for _, l := range cla.GetEndpoints() {
		loc := l.GetLocality().GetRegion() + "/" + l.GetLocality().GetZone() + "/" + l.GetLocality().GetSubZone()
		for _, e := range l.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			fmt.Fprintf(w, "  %s\t%d\t%s\t%d\t%s\t%s\t%d\n", cla.GetClusterName(), l.GetPriority(), loc,
				l.GetLoadBalancingWeight().GetValue(), sa.GetAddress()+":"+strconv.FormatUint(uint64(sa.GetPortValue()), 10),
				e.GetHealthStatus(), e.GetLoadBalancingWeight().GetValue())
		}
	}
}

func more(w io.Writer, n int) {
	if n > 0 {
		fmt.Fprintf(w, "  and %d more (name one with --resource)\n", n)
	}
}

// decodeResource reads one resource of /debug/config (proto JSON of an
// Any) into m.
func decodeResource(raw json.RawMessage, m proto.Message) error {
	var a anypb.Any
	if err := protojson.Unmarshal(raw, &a); err != nil {
		return err
	}
	return a.UnmarshalTo(m)
}
