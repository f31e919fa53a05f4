package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"poise.dev/poise/pkg/admin"
	"poise.dev/poise/pkg/suggest"
	"poise.dev/poise/pkg/xds/xdstype"
)

// The views of proxy-config (--type), each an xDS type, in the order a
// client receives them.
var configViews = []struct {
	name  string
	short string
}{
	{"clusters", xdstype.At(xdstype.Clusters).Short},
	{"endpoints", xdstype.At(xdstype.Endpoints).Short},
	{"listeners", xdstype.At(xdstype.Listeners).Short},
	{"routes", xdstype.At(xdstype.Routes).Short},
}

func newProxyConfigCmd(stdout, stderr io.Writer) *cobra.Command {
	var o proxyConfigOptions
	c := &cobra.Command{
		Use:   "proxy-config NODE [--admin-address HOST:PORT... | -n NAMESPACE]",
		Short: "Show what one xDS client is served, decoded, and what it has not ACKed",
		Long: `proxy-config reads /debug/config?node=NODE of each replica (found as status
finds them: 127.0.0.1:19000, --admin-address, or the pods of the release in the
cluster that --namespace and the other cluster flags name) and prints, for every
stream of that node, what it is served now in its locality class (its zone's
variants in place of the base): the clusters; each ClusterLoadAssignment as rows
of priority, locality and weight, endpoint, health and weight; the listeners and
the routes. Per
type it says where the client stands (SYNCED, STALE, NACKED, NOT SENT, as
status does), and per resource whether the client holds it (ACKED), has not
ACKed its current content (NOT ACKED: not sent yet, or awaiting its answer),
or rejected it (NACKED, with the client's error). Replicas the node is not
connected to are named on stderr. --type shows one view; --resource NAME one
resource; without it, at most 100 resources of each type are shown.`,
		Example: `  controlplane proxy-config envoy-eu-1
  controlplane proxy-config envoy-eu-1 --type endpoints --resource shop/checkout
  # a client of Poise installed as Deployment poise in namespace poise-system
  controlplane proxy-config envoy-eu-1 -n poise-system --type listeners -o json`,
		Args: cobra.ExactArgs(1),
	}
	fs := c.Flags()
	bindReplicaFlags(fs, &o.replicaFlags)
	fs.StringVar(&o.view, "type", "all", "what to show: all, clusters, endpoints, listeners or routes")
	fs.StringVar(&o.resource, "resource", "", "show only the resource of this name (a cluster NAMESPACE/NAME, a listener, a route)")
	fs.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	return command(c, func(cmd *cobra.Command, args []string) int {
		return runProxyConfig(cmd.Context(), cmd.Flags(), args[0], o, stdout, stderr)
	})
}

type proxyConfigOptions struct {
	replicaFlags
	view, resource, output string
}

// replicaConfig is what one replica serves the node, as -o json lists it.
type replicaConfig struct {
	Replica string               `json:"replica"`
	Streams []admin.ConfigStream `json:"streams"`
}

// viewTypes are the short type names --type shows, or an error naming what
// it may have meant.
func viewTypes(view string) ([]string, error) {
	if view == "all" {
		var all []string
		for _, v := range configViews {
			all = append(all, v.short)
		}
		return all, nil
	}
	names := []string{"all"}
	for _, v := range configViews {
		if v.name == view {
			return []string{v.short}, nil
		}
		names = append(names, v.name)
	}
	msg := fmt.Sprintf("--type %q: want %s", view, strings.Join(names, ", "))
	if s, ok := suggest.Closest(view, names); ok {
		msg = fmt.Sprintf("--type %q: did you mean %s? (want %s)", view, s, strings.Join(names, ", "))
	}
	return nil, errors.New(msg)
}

func runProxyConfig(ctx context.Context, fs *pflag.FlagSet, node string, o proxyConfigOptions, stdout, stderr io.Writer) int {
	types, err := viewTypes(o.view)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitUsage
	}
	replicas, stop, code := openReplicas(ctx, fs, &o.replicaFlags, o.output, stderr)
	if code != exitOK {
		return code
	}
	defer stop()
	q := url.Values{"node": {node}}
	if o.resource != "" {
		q.Set("resource", o.resource)
	}
	errs := make([]error, len(replicas))
	bodies := make([]struct {
		Streams []admin.ConfigStream `json:"streams"`
	}, len(replicas))
	var wg sync.WaitGroup
	for i, r := range replicas {
		wg.Go(func() { errs[i] = getAdmin(ctx, r, "/debug/config?"+q.Encode(), o.timeout, &bodies[i]) })
	}
	wg.Wait()
	out := []replicaConfig{}
	var missingResource []string
	for i, r := range replicas {
		var ae *adminError
		switch {
		case errs[i] == nil:
			out = append(out, replicaConfig{Replica: r.Name, Streams: onlyTypes(bodies[i].Streams, types)})
		case errors.As(errs[i], &ae) && ae.missing == admin.MissingNode:
			// a node is connected to one replica at a time: the others say so
			fmt.Fprintf(stderr, "note: replica %s: %s\n", r.Name, ae.message)
		case errors.As(errs[i], &ae) && ae.missing == admin.MissingResource:
			missingResource = append(missingResource, fmt.Sprintf("replica %s: %s", r.Name, ae.message))
		default:
			fmt.Fprintf(stderr, "error: replica %s: %v\n", r.Name, errs[i])
			code = exitInvalid
		}
	}
	if len(out) == 0 {
		switch {
		case len(missingResource) > 0:
			for _, m := range missingResource {
				fmt.Fprintf(stderr, "error: %s\n", m)
			}
			if _, err := viewTypes(o.resource); err == nil {
				fmt.Fprintf(stderr, "note: --resource names a resource; for the %s view, --type %s\n", o.resource, o.resource)
			}
		case code == exitOK:
			fmt.Fprintf(stderr, "error: node %q is connected to none of the replicas asked\n", node)
		}
		return exitInvalid
	}
	if c := writeReport(o.output, stdout, stderr, out, func() error { return writeProxyConfigText(stdout, out) }); c != exitOK {
		return c
	}
	return code
}

// onlyTypes keeps, of each stream, the types shown.
func onlyTypes(streams []admin.ConfigStream, shorts []string) []admin.ConfigStream {
	for i := range streams {
		for t := range streams[i].Types {
			if !slices.Contains(shorts, t) {
				delete(streams[i].Types, t)
			}
		}
	}
	return streams
}

func writeProxyConfigText(w io.Writer, replicas []replicaConfig) error {
	for _, r := range replicas {
		for _, st := range r.Streams {
			class := orDash(st.Class)
			if st.ClassNote != "" {
				class += " (" + st.ClassNote + ")"
			}
			fmt.Fprintf(w, "NODE %s on %s (%s stream %d, %s, rendering %s, class %s)\n", st.NodeID, r.Replica, st.Protocol, st.Stream,
				st.Kind, st.Rendering, class)
			for _, v := range configViews {
				ct, ok := st.Types[v.short]
				if !ok {
					continue
				}
				if err := writeConfigType(w, v.name, ct); err != nil {
					return err
				}
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}

// configTable is how one type is printed: its header, and a resource's rows
// (each ends in the resource's state, which the caller adds).
type configTable struct {
	header string
	rows   func(raw json.RawMessage) (name string, rows [][]string, err error)
}

var configTables = map[string]configTable{
	"clusters": {"NAME\tLB POLICY\tDISCOVERY", func(raw json.RawMessage) (string, [][]string, error) {
		var c cluster.Cluster
		if err := decodeResource(raw, &c); err != nil {
			return "", nil, err
		}
		return c.GetName(), [][]string{{c.GetName(), c.GetLbPolicy().String(), c.GetType().String()}}, nil
	}},
	"endpoints": {"CLUSTER\tPRIORITY\tLOCALITY\tLOCALITY WEIGHT\tENDPOINT\tHEALTH\tWEIGHT", func(raw json.RawMessage) (string, [][]string, error) {
		var cla endpoint.ClusterLoadAssignment
		if err := decodeResource(raw, &cla); err != nil {
			return "", nil, err
		}
		return cla.GetClusterName(), claRows(&cla), nil
	}},
	"listeners": {"NAME\tADDRESS\tROUTE", func(raw json.RawMessage) (string, [][]string, error) {
		var l listener.Listener
		if err := decodeResource(raw, &l); err != nil {
			return "", nil, err
		}
		return l.GetName(), [][]string{{l.GetName(), listenerAddress(&l), listenerRoute(&l)}}, nil
	}},
	"routes": {"NAME\tVIRTUAL HOST\tDOMAINS\tMATCH\tCLUSTER", func(raw json.RawMessage) (string, [][]string, error) {
		var rc route.RouteConfiguration
		if err := decodeResource(raw, &rc); err != nil {
			return "", nil, err
		}
		return rc.GetName(), routeRows(&rc), nil
	}},
}

// writeConfigType writes one type a stream is served: where the client
// stands on it, then a table whose rows end in each resource's state, then
// the client's error for each resource it NACKed.
func writeConfigType(w io.Writer, view string, ct admin.ConfigType) error {
	fmt.Fprintf(w, "\n%s: %s (version %s, acked %s)\n", strings.ToUpper(view), orDash(ct.State), orDash(ct.Version), orDash(ct.AckedVersion))
	tbl := configTables[view]
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  %s\tSTATE\n", tbl.header)
	var nacked []string
	for _, raw := range ct.Resources {
		name, rows, err := tbl.rows(raw)
		if err != nil {
			return err
		}
		state := "ACKED"
		if why, ok := ct.Rejected[name]; ok {
			state = "NACKED"
			nacked = append(nacked, fmt.Sprintf("  NACKED %s: %s", name, oneLine(why, 200)))
		} else if slices.Contains(ct.NotAcked, name) {
			state = "NOT ACKED"
		}
		for _, row := range rows {
			fmt.Fprintf(tw, "  %s\t%s\n", strings.Join(row, "\t"), state)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range nacked {
		fmt.Fprintln(w, n)
	}
	more(w, ct.More)
	return nil
}

// claRows is one ClusterLoadAssignment as rows: each locality's priority
// and weight beside each of its endpoints, a drop as its own row.
func claRows(cla *endpoint.ClusterLoadAssignment) [][]string {
	var rows [][]string
	for _, d := range cla.GetPolicy().GetDropOverloads() {
		rows = append(rows, []string{cla.GetClusterName(), "-", "drop " + d.GetCategory(),
			fmt.Sprintf("%d/%s", d.GetDropPercentage().GetNumerator(), d.GetDropPercentage().GetDenominator()), "-", "-", "-"})
	}
	for _, l := range cla.GetEndpoints() {
		loc := l.GetLocality().GetRegion() + "/" + l.GetLocality().GetZone() + "/" + l.GetLocality().GetSubZone()
		for _, e := range l.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			rows = append(rows, []string{cla.GetClusterName(), strconv.FormatUint(uint64(l.GetPriority()), 10), loc,
				strconv.FormatUint(uint64(l.GetLoadBalancingWeight().GetValue()), 10),
				sa.GetAddress() + ":" + strconv.FormatUint(uint64(sa.GetPortValue()), 10),
				e.GetHealthStatus().String(), strconv.FormatUint(uint64(e.GetLoadBalancingWeight().GetValue()), 10)})
		}
	}
	return rows
}

// listenerAddress is where a listener binds, or "api" for a gRPC client's
// API listener, which binds nothing.
func listenerAddress(l *listener.Listener) string {
	if l.GetApiListener() != nil {
		return "api"
	}
	sa := l.GetAddress().GetSocketAddress()
	return sa.GetAddress() + ":" + strconv.FormatUint(uint64(sa.GetPortValue()), 10)
}

// listenerRoute is the route configuration a listener's HTTP connection
// manager uses: RDS NAME, or inline NAME.
func listenerRoute(l *listener.Listener) string {
	var anys []*anypb.Any
	if a := l.GetApiListener().GetApiListener(); a != nil {
		anys = append(anys, a)
	}
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			anys = append(anys, f.GetTypedConfig())
		}
	}
	for _, a := range anys {
		var m hcm.HttpConnectionManager
		if a.UnmarshalTo(&m) != nil {
			continue
		}
		if rds := m.GetRds(); rds != nil {
			return "RDS " + rds.GetRouteConfigName()
		}
		if rc := m.GetRouteConfig(); rc != nil {
			return "inline " + orDash(rc.GetName())
		}
	}
	return "-"
}

// routeRows are a route configuration's routes, one a row.
func routeRows(rc *route.RouteConfiguration) [][]string {
	var rows [][]string
	for _, vh := range rc.GetVirtualHosts() {
		domains := strings.Join(vh.GetDomains(), ",")
		for _, r := range vh.GetRoutes() {
			rows = append(rows, []string{rc.GetName(), vh.GetName(), oneLine(domains, 60), routeMatch(r.GetMatch()), routeCluster(r)})
		}
		if len(vh.GetRoutes()) == 0 {
			rows = append(rows, []string{rc.GetName(), vh.GetName(), oneLine(domains, 60), "-", "-"})
		}
	}
	if len(rows) == 0 {
		rows = append(rows, []string{rc.GetName(), "-", "-", "-", "-"})
	}
	return rows
}

func routeMatch(m *route.RouteMatch) string {
	switch {
	case m.GetPath() != "":
		return "path " + m.GetPath()
	case m.GetSafeRegex() != nil:
		return "regex " + oneLine(m.GetSafeRegex().GetRegex(), 60)
	case m.GetPathSeparatedPrefix() != "":
		return "prefix " + m.GetPathSeparatedPrefix()
	}
	return "prefix " + m.GetPrefix()
}

func routeCluster(r *route.Route) string {
	a := r.GetRoute()
	switch {
	case a == nil:
		if r.GetDirectResponse() != nil {
			return fmt.Sprintf("direct response %d", r.GetDirectResponse().GetStatus())
		}
		return "-"
	case a.GetCluster() != "":
		return a.GetCluster()
	case a.GetClusterHeader() != "":
		return "from header " + a.GetClusterHeader()
	case a.GetWeightedClusters() != nil:
		var parts []string
		for _, c := range a.GetWeightedClusters().GetClusters() {
			parts = append(parts, fmt.Sprintf("%s=%d", c.GetName(), c.GetWeight().GetValue()))
		}
		return oneLine(strings.Join(parts, ","), 120)
	}
	return "-"
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
