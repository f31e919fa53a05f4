package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"

	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/topology"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const (
	exitOK      = 0
	exitInvalid = 1 // the input is wrong
	exitUsage   = 2 // the command line is wrong
)

const usage = `usage: controlplane <command> [flags]

commands:
  serve     -f PATH... [--xds-address ADDR] [--admin-address ADDR] [--tls-cert F --tls-key F [--tls-client-ca F]]
            serve the manifests over xDS (ADS) and watch them for changes
  serve     --source=kubernetes [--kubeconfig F] [--namespace NS] [--leader-election-namespace NS] ...
            serve Upstream, Locality and EndpointSet objects (and imported Services) from the cluster
  explain   -f PATH... [--upstream NS/NAME] [-o text|json] [--simulate N --seed S]
            [--from REGION/ZONE[/SUBZONE] [--demand REGION/ZONE=N,...]]
            show the whole priority → locality → endpoint derivation, and with --from
            what clients in that locality receive under the upstream's localityAffinity
  explain-route -f PATH... --domain D --product P [--bbox B] [--crs C] [--path P] [--request-id ID] [-o text|json]
            show how a spatial request is routed: residency, health, locality, result
  validate  -f PATH...   check manifests as the control plane would, without serving
  version   print the version
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "explain":
		return runExplain(args[1:], stdout, stderr)
	case "explain-route":
		return runExplainRoute(args[1:], stdout, stderr)
	case "validate":
		return runValidate(args[1:], stdout, stderr)
	case "serve":
		return runServe(args[1:], stdout, stderr)
	case "version":
		fmt.Fprintf(stdout, "controlplane %s (%s)\n", version, runtime.Version())
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

// paths collects repeated -f flags; each may also be a comma-separated list.
type paths []string

func (p *paths) String() string { return strings.Join(*p, ",") }
func (p *paths) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s != "" {
			*p = append(*p, s)
		}
	}
	return nil
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
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
	snap, err := topology.NewDirectory().Apply(set.Batch)
	if err != nil {
		fmt.Fprintf(stderr, "error: the topology is rejected:\n%s\n", indent(describeProblems(set.Locate(err))))
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

// describeProblems prints one line per problem of a rejected batch.
func describeProblems(err error) string {
	var be *topology.BatchError
	if !errors.As(err, &be) {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range be.Problems {
		fmt.Fprintf(&b, "upstream %s: %v\n", p.Upstream, p.Err)
		for i := range p.Objects {
			fmt.Fprintf(&b, "  involves %s\n", p.Involved(i))
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("validate", stderr)
	var files paths
	fs.Var(&files, "f", "manifest file or directory (repeatable)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
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
	for _, o := range snap.Orphans() {
		what := "an upstream"
		if o.Kind == topology.KindPartition {
			what = "a SpatialDomain"
		}
		fmt.Fprintf(stdout, "warning: %s (%s) names %s that does not exist; it is ignored until it does\n", o, set.Where(o), what)
	}
	for _, p := range snap.SpatialProblems() {
		fmt.Fprintf(stdout, "warning: %s (%s): %s: %s\n", p.Object, set.Where(p.Object), p.Field, p.Message)
	}
	return exitOK
}

func runExplain(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("explain", stderr)
	var files paths
	fs.Var(&files, "f", "manifest file or directory (repeatable)")
	only := fs.String("upstream", "", "explain only this upstream (NAMESPACE/NAME, or NAME in namespace default)")
	output := fs.String("o", "text", "output format: text or json")
	simulate := fs.Uint64("simulate", 0, "draw N picks with the seeded picker and show observed counts")
	seed := fs.Uint64("seed", 1, "seed of the simulated picks")
	from := fs.String("from", "", "explain also what clients in this locality receive (REGION/ZONE[/SUBZONE])")
	demand := fs.String("demand", "", "the demand of each client zone for Balanced upstreams (REGION/ZONE=N,..., N in 1..1000000)")
	if !parseReportFlags(fs, args, output, stderr) {
		return exitUsage
	}
	const maxSimulate = 1_000_000_000
	if *simulate > maxSimulate {
		fmt.Fprintf(stderr, "error: --simulate %d: at most %d picks\n", *simulate, maxSimulate)
		return exitUsage
	}
	class, ok := classFlags(fs, *from, *demand, stderr)
	if !ok {
		return exitUsage
	}
	snap, _, ok := load(files, stderr)
	if !ok {
		return exitInvalid
	}
	var keys []topology.Key
	if *only != "" {
		k, err := topology.ParseKey(*only)
		if err != nil {
			fmt.Fprintf(stderr, "error: --upstream: %v\n", err)
			return exitUsage
		}
		if snap.Upstream(k) == nil {
			fmt.Fprintf(stderr, "error: --upstream %s: no such upstream in the manifests\n", k)
			return exitInvalid
		}
		keys = append(keys, k)
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
func classFlags(fs *flag.FlagSet, from, demand string, stderr io.Writer) (*explain.ClassOptions, bool) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["from"] {
		if set["demand"] {
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
	if set["demand"] {
		if opts.Demand, err = explain.ParseDemand(demand); err != nil {
			fmt.Fprintf(stderr, "error: --demand %v\n", err)
			return nil, false
		}
	}
	return opts, true
}

// parseReportFlags parses the flags of a command that prints a report: no arguments
// besides flags, and -o text or json. It reports usage errors on stderr.
func parseReportFlags(fs *flag.FlagSet, args []string, output *string, stderr io.Writer) bool {
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "error: unexpected argument %q (manifests are given with -f)\n", fs.Arg(0))
		return false
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "error: -o %q: want text or json\n", *output)
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
