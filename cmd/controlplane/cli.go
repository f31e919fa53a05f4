package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/pkg/controlplane"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/hashring"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/topology"
)

// version is set at build time with -ldflags "-X main.version=..."; when
// it is not, the build information says (see buildVersion).
var version = "dev"

const (
	exitOK      = 0
	exitInvalid = 1 // the input is wrong
	exitUsage   = 2 // the command line is wrong
)

// exitCode ends a command that has said why on stderr with that code.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// command wraps a command body that returns an exit code as cobra's RunE.
// A body that refuses its command line (exitUsage) has said why; the usage
// hint follows, as it does cobra's own refusals.
func command(c *cobra.Command, body func(cmd *cobra.Command, args []string) int) *cobra.Command {
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if code := body(cmd, args); code != exitOK {
			if code == exitUsage {
				fmt.Fprintln(cmd.ErrOrStderr(), usageHint(cmd))
			}
			return exitCode(code)
		}
		return nil
	}
	return c
}

// usageHint is the line that ends a refused command line.
func usageHint(cmd *cobra.Command) string {
	return fmt.Sprintf("Run '%s --help' for usage.", cmd.CommandPath())
}

// requireFiles refuses a command line that gives no manifests: -f is
// required where no other flag says where the topology comes from.
func requireFiles(files paths, stderr io.Writer) bool {
	if len(files) == 0 {
		fmt.Fprintln(stderr, "error: -f PATH is required (a manifest file or directory)")
		return false
	}
	return true
}

// helpCommand is help [COMMAND]: a command's help, and for a command that
// does not exist a refusal (exit 2) that names the ones meant.
func helpCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND]",
		Short: "Help about any command",
		Long:  "help COMMAND prints a command's help, as COMMAND --help does.",
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				name := strings.Join(args, " ")
				msg := fmt.Sprintf("help %q: no such command", name)
				if s := root.SuggestionsFor(args[len(args)-1]); len(s) > 0 {
					msg += "; did you mean " + strings.Join(s, " or ") + "?"
				}
				return errors.New(msg)
			}
			return target.Help()
		},
	}
}

// noArgs refuses positional arguments: manifests are given with -f.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q (manifests are given with -f)", args[0])
	}
	return nil
}

// newRoot is the controlplane command and its subcommands, writing to
// stdout and stderr.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	info := buildVersion()
	root := &cobra.Command{
		Use:   "controlplane",
		Short: "Poise: a Kubernetes-native Envoy xDS control plane",
		Long: `controlplane serves Upstream, Locality and EndpointSet objects (from manifest
files or the cluster) to Envoy and gRPC over xDS, and explains, offline, the
priority → locality → endpoint derivation it publishes.`,
		Version:       info.Version,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetVersionTemplate(info.text())
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetHelpCommand(helpCommand(root))
	root.SetFlagErrorFunc(flagError)
	// the flags' help wrapped, not one line of up to 400 characters a flag
	root.SetUsageTemplate(strings.ReplaceAll(root.UsageTemplate(), ".FlagUsages", fmt.Sprintf(".FlagUsagesWrapped %d", helpWidth(stdout))))
	root.AddCommand(newServeCmd(stdout, stderr), newExplainCmd(stdout, stderr), newExplainRouteCmd(stdout, stderr),
		newValidateCmd(stdout, stderr), newVersionCmd(stdout, stderr, info), newStatusCmd(stdout, stderr), newProxyConfigCmd(stdout, stderr),
		newCreateRemoteSecretCmd(stdout, stderr), newLoadCmd(stdout, stderr))
	// cobra's completion command, which without this prints its help for
	// a shell it does not know
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil && c.Name() == "completion" {
		c.RunE = func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("completion needs a shell: bash, zsh, fish or powershell")
			}
			return fmt.Errorf("completion %q: want bash, zsh, fish or powershell", args[0])
		}
	}
	return root
}

func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	if len(args) == 0 {
		// with no command: the usage, on stderr, as a usage error
		root.SetOut(stderr)
		root.Usage()
		return exitUsage
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	// cobra's own errors: an unknown command or flag, a bad flag value
	fmt.Fprintf(stderr, "error: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
	return exitUsage
}

// paths collects repeated -f flags; each may also be a comma-separated list.
type paths []string

func (p *paths) String() string { return strings.Join(*p, ",") }
func (p *paths) Type() string   { return "path" }
func (p *paths) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s != "" {
			*p = append(*p, s)
		}
	}
	return nil
}

// fileFlag adds -f/--file to fs.
func fileFlag(fs *pflag.FlagSet, p *paths, usage string) {
	fs.VarP(p, "file", "f", usage)
}

// load reads manifests into a fresh Directory and returns its snapshot,
// printing every problem with the file and document it came from.
func load(files paths, stderr io.Writer) (*topology.Snapshot, *manifest.Set, bool) {
	if len(files) == 0 {
		fmt.Fprintln(stderr, "error: -f PATH is required (a manifest file or directory)")
		return nil, nil, false
	}
	set, err := manifest.Load(files...)
	if err != nil {
		fmt.Fprintf(stderr, "error: invalid manifests:\n%s\n", indent(err.Error()))
		return nil, nil, false
	}
	for _, w := range set.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	notes(files, set, stderr)
	// The manifests are the whole truth, as serve -f holds them: a name no
	// object defines is a mistake.
	dir := topology.NewDirectory()
	_ = dir.RequireComplete() // refused only once a revision is held; this directory holds none
	snap, err := dir.Apply(set.Batch)
	if err != nil {
		references, others := describeProblems(set, set.Locate(err))
		if references != "" {
			fmt.Fprintf(stderr, "error: invalid manifests:\n%s\n", indent(references))
		}
		if others != "" {
			fmt.Fprintf(stderr, "error: the topology is rejected:\n%s\n", indent(others))
		}
		return nil, nil, false
	}
	return snap, set, true
}

// maxNamedObjects bounds the objects a note names.
const maxNamedObjects = 5

// notes says, one line each, what the manifests hold besides Poise objects
// (skipped, as kubectl's other kinds are not ours to read) and which objects
// are read in namespace default for want of one.
func notes(files paths, set *manifest.Set, stderr io.Writer) {
	if set.Others.Total() > 0 {
		fmt.Fprintf(stderr, "note: skipped %s in %s\n", set.Others, strings.Join(files, ", "))
	}
	var bare []string
	n := 0
	for _, o := range set.Objects {
		if !o.NoNamespace {
			continue
		}
		if n++; n <= maxNamedObjects {
			bare = append(bare, fmt.Sprintf("%s (%s document %d)", o, o.File, o.Document))
		}
	}
	if n == 0 {
		return
	}
	if n > maxNamedObjects {
		bare = append(bare, fmt.Sprintf("and %d more", n-maxNamedObjects))
	}
	fmt.Fprintf(stderr, "note: %d object(s) set no metadata.namespace and are read in namespace default, "+
		"where kubectl apply puts them only when its context names no other: %s\n", n, strings.Join(bare, ", "))
}

// describeProblems prints the problems of a rejected batch: a reference
// that does not resolve as a manifest error is printed, one line with the
// file, document, object and field (references); any other problem with
// the objects it involves (others).
func describeProblems(set *manifest.Set, err error) (references, others string) {
	var be *topology.BatchError
	if !errors.As(err, &be) {
		return "", err.Error()
	}
	// references in file and document order, as a manifest's other
	// problems are printed
	type reference struct {
		at   int // the object's place in the set; past the end when unknown
		line string
	}
	var refs []reference
	var rest strings.Builder
	var place map[topology.ObjectRef]int // built at the first reference
	for _, p := range be.Problems {
		switch {
		case p.Field != "" && len(p.Objects) > 0:
			if place == nil {
				place = make(map[topology.ObjectRef]int, len(set.Objects))
				for i, o := range set.Objects {
					if _, dup := place[o.Ref()]; !dup {
						place[o.Ref()] = i
					}
				}
			}
			at, ok := place[p.Objects[0]]
			if !ok {
				refs = append(refs, reference{len(set.Objects), p.Error()})
				continue
			}
			o := set.Objects[at]
			e := manifest.Error{File: o.File, Document: o.Document, Object: p.Objects[0].String(), Field: p.Field, Detail: fmt.Sprint(p.Err) + p.SeeAlso()}
			refs = append(refs, reference{at, e.Error()})
		case len(p.Objects) == 0:
			refs = append(refs, reference{len(set.Objects) + 1, p.Error()})
		default:
			fmt.Fprintf(&rest, "upstream %s: %v\n", p.Upstream, p.Err)
			for i := range p.Objects {
				fmt.Fprintf(&rest, "  involves %s\n", p.Involved(i))
			}
		}
	}
	slices.SortStableFunc(refs, func(a, b reference) int { return cmp.Compare(a.at, b.at) })
	lines := make([]string, len(refs))
	for i, r := range refs {
		lines[i] = r.line
	}
	return strings.Join(lines, "\n"), strings.TrimRight(rest.String(), "\n")
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

func newValidateCmd(stdout, stderr io.Writer) *cobra.Command {
	var files paths
	c := &cobra.Command{
		Use:   "validate -f PATH...",
		Short: "Check manifests as the control plane would, without serving",
		Args:  noArgs,
	}
	fileFlag(c.Flags(), &files, "manifest file or directory (repeatable, or comma-separated)")
	return command(c, func(*cobra.Command, []string) int {
		if !requireFiles(files, stderr) {
			return exitUsage
		}
		return runValidate(files, stdout, stderr)
	})
}

func runValidate(files paths, stdout, stderr io.Writer) int {
	snap, set, ok := load(files, stderr)
	if !ok {
		return exitInvalid
	}
	endpoints := 0
	for _, u := range snap.Upstreams() {
		endpoints += len(u.Endpoints)
	}
	fmt.Fprintf(stdout, "valid: %d object(s), %d upstream(s), %d endpoint(s)\n", len(set.Objects), len(snap.Upstreams()), endpoints)
	if n := len(snap.Spatial()); n > 0 {
		fmt.Fprintf(stdout, "spatial: %d domain(s)\n", n)
	}
	for _, p := range snap.SpatialProblems() {
		fmt.Fprintf(stdout, "warning: %s (%s): %s: %s\n", p.Object, set.Where(p.Object), p.Field, p.Message)
	}
	return exitOK
}

func newExplainCmd(stdout, stderr io.Writer) *cobra.Command {
	var o explainOptions
	c := &cobra.Command{
		Use:   "explain -f PATH...",
		Short: "Show the whole priority → locality → endpoint derivation",
		Long: `explain shows the whole priority → locality → endpoint derivation of each
upstream in the manifests, and with --from what clients in that locality
receive under the upstream's localityAffinity.`,
		Example: `  controlplane explain -f examples --upstream shop/checkout
  controlplane explain -f examples -o json --simulate 20000 --seed 7
  controlplane explain -f examples --from eu-west/a --demand eu-west/a=3,eu-west/b=1
  controlplane explain -f examples --upstream shop/carts --key 42 --header x-user=7
  controlplane explain -f examples --upstream shop/carts --keys users.txt --grpc-ring-cap 65536`,
		Args: noArgs,
	}
	fs := c.Flags()
	fileFlag(fs, &o.files, "manifest file or directory (repeatable, or comma-separated)")
	fs.StringVar(&o.only, "upstream", "", "explain only this upstream (NAMESPACE/NAME, or NAME in namespace default)")
	fs.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	fs.Uint64Var(&o.simulate, "simulate", 0, fmt.Sprintf("draw N picks with the seeded picker and show observed counts, 0 (none) to %d", maxSimulate))
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the simulated picks: any integer 0 to 18446744073709551615")
	fs.StringVar(&o.from, "from", "", "explain also what clients in this locality receive (REGION/ZONE[/SUBZONE])")
	fs.StringVar(&o.demand, "demand", "", "the demand of each client zone for Balanced upstreams (REGION/ZONE=N,..., N in 1..1000000)")
	fs.StringVar(&o.source, "source", "files", "where the topology comes from: files (-f) or kubernetes (a live cluster, read once)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "explain what is in this cluster now (implies --source=kubernetes; default with --source=kubernetes: $KUBECONFIG, else the pod's service account, else ~/.kube/config)")
	fs.StringVar(&o.namespace, "namespace", "", "with --source=kubernetes, read only this namespace (empty: all)")
	visibilityFlags(fs, &o.visibility)
	keyFlags(fs, &o.keys)
	return command(c, func(cmd *cobra.Command, _ []string) int {
		return runExplain(cmd.Context(), cmd.Flags(), o, stdout, stderr)
	})
}

// maxSimulate bounds explain --simulate: a billion picks take a minute.
const maxSimulate = 1_000_000_000

type explainOptions struct {
	files                      paths
	only, output, from, demand string
	simulate, seed             uint64
	// a live cluster instead of files
	source, kubeconfig, namespace string
	visibility                    visibilityOptions
	keys                          keyOptions
}

func runExplain(ctx context.Context, fs *pflag.FlagSet, o explainOptions, stdout, stderr io.Writer) int {
	files, only, output, simulate, seed, from, demand := o.files, &o.only, &o.output, &o.simulate, &o.seed, &o.from, &o.demand
	if !checkOutput(*output, stderr) {
		return exitUsage
	}
	if *simulate > maxSimulate {
		fmt.Fprintf(stderr, "error: --simulate %d: want 0 to %d picks\n", *simulate, maxSimulate)
		return exitUsage
	}
	if o.keys.ringCap > hashring.MaxRingSize {
		fmt.Fprintf(stderr, "error: --grpc-ring-cap %d: at most %d\n", o.keys.ringCap, hashring.MaxRingSize)
		return exitUsage
	}
	class, ok := classFlags(fs, *from, *demand, stderr)
	if !ok {
		return exitUsage
	}
	vis, ok := o.visibility.read(fs, stderr)
	if !ok {
		return exitUsage
	}
	live := o.source == "kubernetes" || fs.Changed("kubeconfig")
	switch {
	case o.source != "files" && o.source != "kubernetes":
		fmt.Fprintf(stderr, "error: --source %q: want files or kubernetes\n", o.source)
		return exitUsage
	case live && len(files) > 0:
		fmt.Fprintln(stderr, "error: -f is for --source=files; --kubeconfig and --source=kubernetes read the topology from a cluster")
		return exitUsage
	case !live && fs.Changed("namespace"):
		fmt.Fprintln(stderr, "error: --namespace is for --source=kubernetes")
		return exitUsage
	case !live && !requireFiles(files, stderr):
		return exitUsage
	}
	var snap *topology.Snapshot
	if live {
		var code int
		if snap, code = loadLive(ctx, o.kubeconfig, o.namespace, stderr); snap == nil {
			return code
		}
	} else if snap, _, ok = load(files, stderr); !ok {
		return exitInvalid
	}
	keyed := o.keys.any(fs)
	if keyed && (*only == "" || fs.Changed("from") || fs.Changed("demand") || fs.Changed("simulate")) {
		fmt.Fprintln(stderr, "error: --key, --keys, --header, --cookie, --query, --source-ip and --grpc-ring-cap explain the requests of one --upstream, as every client receives it (not with --from, --demand or --simulate)")
		return exitUsage
	}
	var keys []topology.Key
	if *only != "" {
		k, err := topology.ParseKey(*only)
		if err != nil {
			fmt.Fprintf(stderr, "error: --upstream: %v\n", err)
			return exitUsage
		}
		if snap.Upstream(k) == nil {
			where := "in the manifests"
			if live {
				where = "in the cluster"
			}
			fmt.Fprintf(stderr, "error: --upstream %s: no such upstream %s%s\n", k, where, explain.DidYouMean(explain.SuggestUpstream(snap, k)))
			return exitInvalid
		}
		keys = append(keys, k)
		if keyed {
			return runExplainKeys(snap, k, o.keys, *output, stdout, stderr)
		}
	}
	var rep explain.Report
	if class == nil {
		rep = explain.Build(snap, keys...)
	} else {
		var err error
		if rep, err = explain.BuildFor(snap, *class, keys...); err != nil {
			if de := (*explain.DemandError)(nil); errors.As(err, &de) {
				fmt.Fprintf(stderr, "error: --demand %s: %v\n", *demand, err)
				return exitUsage
			}
			// the manifests give clients of this locality a topology a proxy cannot take
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitInvalid
		}
	}
	if vis != nil {
		explain.ResolveVisibility(&rep, snap, *vis)
	}
	if *simulate > 0 {
		for i := range rep.Upstreams {
			x := &rep.Upstreams[i]
			explain.Simulate(x, snap.Upstream(topology.Key{Namespace: x.Namespace, Name: x.Name}), *simulate, *seed)
		}
	}
	return writeReport(*output, stdout, stderr, rep, func() error { return explain.WriteText(stdout, rep) })
}

// classFlags reads --from and --demand; nil options when --from is not
// given. An empty flag that was given is refused rather than ignored.
func classFlags(fs *pflag.FlagSet, from, demand string, stderr io.Writer) (*explain.ClassOptions, bool) {
	if !fs.Changed("from") {
		if fs.Changed("demand") {
			fmt.Fprintln(stderr, "error: --demand needs --from REGION/ZONE: the demand divides the split for the clients of one zone")
			return nil, false
		}
		return nil, true
	}
	f, err := explain.ParseFrom(from)
	if err != nil {
		fmt.Fprintf(stderr, "error: --from %v\n", err)
		return nil, false
	}
	opts := &explain.ClassOptions{From: f}
	if fs.Changed("demand") {
		if opts.Demand, err = explain.ParseDemand(demand); err != nil {
			fmt.Fprintf(stderr, "error: --demand %v\n", err)
			return nil, false
		}
	}
	return opts, true
}

// checkOutput checks the -o of a command that prints a report: text or json.
func checkOutput(output string, stderr io.Writer) bool {
	if output != "text" && output != "json" {
		fmt.Fprintf(stderr, "error: -o %q: want text or json\n", output)
		return false
	}
	return true
}

// writeReport writes a report as indented JSON (format "json") or with its text writer.
func writeReport(format string, stdout, stderr io.Writer, rep any, text func() error) int {
	var err error
	if format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = text()
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitInvalid
	}
	return exitOK
}

// maxLiveNotes bounds the objects a live explain lists as set aside.
const maxLiveNotes = 20

// loadLive reads the topology that is in a cluster now, once, as a replica
// of `serve --source=kubernetes` would build it; objects a replica would set
// aside are listed on stderr with why. Without a snapshot, the exit code
// says whose fault it is: a kubeconfig that cannot be read or found is the
// command line's (exitUsage), a cluster that does not answer the input's.
func loadLive(ctx context.Context, kubeconfig, namespace string, stderr io.Writer) (*topology.Snapshot, int) {
	rc, from, _, err := controlplane.KubeClientConfig(kubeconfig)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return nil, exitUsage
	}
	scheme, err := source.Scheme()
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return nil, exitInvalid
	}
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(stderr, "error: kubernetes client (%s): %v\n", from, err)
		return nil, exitInvalid
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	snap, rejected, err := source.Live(ctx, c, namespace, nil)
	if err != nil {
		fmt.Fprintf(stderr, "error: reading the cluster at %s (configuration from %s): %v\n", rc.Host, from, err)
		return nil, exitInvalid
	}
	fmt.Fprintf(stderr, "note: the topology of the cluster at %s (configuration from %s), read now\n", rc.Host, from)
	for _, u := range snap.Upstreams() {
		if u.Upstream.Service != nil {
			// remote clusters are read through Secrets a replica holds the
			// credentials of; this command reads one cluster
			fmt.Fprintln(stderr, "note: a Service import here is this cluster's endpoints only; a replica also imports the remote clusters' (docs/multicluster.md): ask it, /debug/explain")
			break
		}
	}
	refs := slices.SortedFunc(maps.Keys(rejected), func(a, b topology.ObjectRef) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), a.Key.Compare(b.Key))
	})
	for i, ref := range refs {
		if i == maxLiveNotes {
			fmt.Fprintf(stderr, "note: and %d more objects set aside\n", len(refs)-i)
			break
		}
		r := rejected[ref]
		fmt.Fprintf(stderr, "note: %s is set aside (%s): %s\n", ref, r.Reason, r.Message)
	}
	return snap, exitOK
}
