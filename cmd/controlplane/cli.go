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
  explain   -f PATH... [--upstream NS/NAME] [-o text|json] [--simulate N --seed S]
            show the whole priority → locality → endpoint derivation
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
	case "validate":
		return runValidate(args[1:], stdout, stderr)
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
	snap, err := topology.NewDirectory().Apply(set.Batch)
	if err != nil {
		fmt.Fprintf(stderr, "error: the topology is rejected:\n%s\n", indent(describeBatchError(err, set)))
		return nil, nil, false
	}
	return snap, set, true
}

// describeBatchError names, for each problem, the files that hold the objects involved.
func describeBatchError(err error, set *manifest.Set) string {
	var be *topology.BatchError
	if !errors.As(err, &be) {
		return err.Error()
	}
	where := map[string]manifest.Object{}
	for _, o := range set.Objects {
		where[o.String()] = o
	}
	var b strings.Builder
	for _, p := range be.Problems {
		fmt.Fprintf(&b, "upstream %s: %v\n", p.Upstream, p.Err)
		for _, ref := range p.Objects {
			if o, ok := where[ref.String()]; ok {
				fmt.Fprintf(&b, "  involves %s (%s document %d)\n", ref, o.File, o.Document)
			} else {
				fmt.Fprintf(&b, "  involves %s\n", ref)
			}
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
	for _, o := range snap.Orphans() {
		fmt.Fprintf(stdout, "warning: %s names an upstream that does not exist; it is ignored until it does\n", o)
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
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "error: unexpected argument %q (manifests are given with -f)\n", fs.Arg(0))
		return exitUsage
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "error: -o %q: want text or json\n", *output)
		return exitUsage
	}
	const maxSimulate = 1_000_000_000
	if *simulate > maxSimulate {
		fmt.Fprintf(stderr, "error: --simulate %d: at most %d picks\n", *simulate, maxSimulate)
		return exitUsage
	}
	snap, _, ok := load(files, stderr)
	if !ok {
		return exitInvalid
	}
	var keys []topology.Key
	if *only != "" {
		k, err := parseKey(*only)
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
	rep := explain.Build(snap, keys...)
	if *simulate > 0 {
		for i := range rep.Upstreams {
			x := &rep.Upstreams[i]
			explain.Simulate(x, snap.Upstream(topology.Key{Namespace: x.Namespace, Name: x.Name}), *simulate, *seed)
		}
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitInvalid
		}
		return exitOK
	}
	if err := explain.WriteText(stdout, rep); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitInvalid
	}
	return exitOK
}

func parseKey(s string) (topology.Key, error) {
	ns, name, found := strings.Cut(s, "/")
	if !found {
		return topology.Key{Namespace: "default", Name: s}, nil
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return topology.Key{}, fmt.Errorf("%q: want NAMESPACE/NAME", s)
	}
	return topology.Key{Namespace: ns, Name: name}, nil
}
