package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"poise.dev/poise/pkg/loadgen"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "benchscale:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	sizes, clients []int // endpoints, clients
	sizeNames      []string
	delta          bool
	edsNames       int
	subscribeAll   bool
	singleFlips    int
	singleGap      time.Duration
	flipTimeout    time.Duration
	rate           float64
	duration       time.Duration
	drain          time.Duration
	idleMax        time.Duration
	startupTimeout time.Duration
	serveArgs      []string
	binary         string
	build          bool
	jsonPath       string
	workdir        string
	keep           bool
	heapProfiles   string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("benchscale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizes := fs.String("sizes", "100k", "comma-separated topology sizes in endpoints (20 per upstream): 100k, 1M, or a number")
	clients := fs.String("clients", "100", "comma-separated numbers of ADS clients; every size runs with every count")
	fs.BoolVar(&o.delta, "delta", false, "clients speak Delta xDS instead of SotW")
	fs.IntVar(&o.edsNames, "eds-names", 5000, "EDS names each client subscribes to when the topology has more (a window holding every flipped upstream)")
	fs.BoolVar(&o.subscribeAll, "subscribe-all", false, "every client subscribes to every EDS name, whatever the size")
	fs.IntVar(&o.singleFlips, "single-flips", 20, "single flips, each awaited before the next")
	fs.DurationVar(&o.singleGap, "single-gap", 300*time.Millisecond, "pause after each single flip is delivered (or times out)")
	fs.DurationVar(&o.flipTimeout, "flip-timeout", 2*time.Minute, "how long a single flip may take to reach every client")
	fs.Float64Var(&o.rate, "rate", 1000, "flips per second in the sustained phase")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "length of the sustained phase (0 skips it)")
	fs.DurationVar(&o.drain, "drain", 30*time.Second, "after the sustained phase, how long to wait for its flips to arrive")
	fs.DurationVar(&o.idleMax, "idle", 10*time.Second, "longest quiet interval over which the server's idle CPU is measured")
	fs.DurationVar(&o.startupTimeout, "startup-timeout", 15*time.Minute, "how long the server and every client may take to start")
	serveArgs := fs.String("serve-args", "", "extra arguments for `controlplane serve`, space-separated (e.g. \"--debounce 20ms\")")
	fs.StringVar(&o.binary, "binary", "bin/controlplane", "the controlplane binary")
	fs.BoolVar(&o.build, "build", true, "build -binary from ./cmd/controlplane of this module first")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&o.workdir, "workdir", defaultWorkdir(), "where the manifest directories are generated")
	fs.BoolVar(&o.keep, "keep", false, "keep the generated manifests and server logs")
	fs.StringVar(&o.heapProfiles, "heap-profiles", "", "keep the server's heap profiles taken after start-up and at the end as PREFIX-N.pb.gz")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := parseSize(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		o.sizes = append(o.sizes, n)
		o.sizeNames = append(o.sizeNames, strings.TrimSpace(s))
	}
	for _, s := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-clients %q: want positive numbers", *clients)
		}
		o.clients = append(o.clients, n)
	}
	o.serveArgs = strings.Fields(*serveArgs)
	if o.edsNames < 1 || o.rate < 0 || o.singleFlips < 0 {
		return nil, errors.New("-eds-names must be positive, -rate and -single-flips not negative")
	}
	return o, nil
}

// defaultWorkdir is /dev/shm when it is a writable directory, else the
// system temp dir. A flip renames a new file over the old one; on ext4 that
// first has the new file's data written out (auto_da_alloc), about 2 ms here
// against 0.1 ms on tmpfs, and the bench measures the control plane, not
// the disk.
func defaultWorkdir() string {
	const shm = "/dev/shm"
	if d, err := os.MkdirTemp(shm, "benchscale-probe-"); err == nil {
		os.Remove(d)
		return shm
	}
	return os.TempDir()
}

// parseSize reads a number of endpoints: "100k", "1M" or digits; a whole
// number of 20-endpoint upstreams.
func parseSize(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1000, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "M"):
		mult, s = 1000000, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n*mult%20 != 0 {
		return 0, fmt.Errorf("size %q: want a number of endpoints divisible by 20 (100k, 1M, 1000)", s)
	}
	return n * mult, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.build {
		fmt.Fprintf(stdout, "# building %s\n", o.binary)
		if err := buildBinary(o.binary); err != nil {
			return err
		}
	}
	if abs, err := filepath.Abs(o.binary); err == nil {
		o.binary = abs
	}
	var results []*result
	var failed error
	for si, endpoints := range o.sizes {
		rs, err := runSize(o, o.sizeNames[si], endpoints, stdout)
		results = append(results, rs...)
		if err != nil {
			failed = err
			break
		}
	}
	printSummary(stdout, results)
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "# results written to %s\n", o.jsonPath)
	}
	return failed
}

// buildBinary builds ./cmd/controlplane of the module the working directory
// is in, with extra go build arguments.
func buildBinary(out string, extra ...string) error {
	mod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(mod)))
	if abs, err := filepath.Abs(out); err == nil {
		out = abs
	}
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, extra...), "./cmd/controlplane")...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/controlplane: %w\n%s", err, b)
	}
	return nil
}

// runSize generates one topology and runs it with every client count.
func runSize(o *options, name string, endpoints int, stdout io.Writer) ([]*result, error) {
	root, err := os.MkdirTemp(o.workdir, "benchscale-")
	if err != nil {
		return nil, err
	}
	if o.keep {
		fmt.Fprintf(stdout, "# keeping %s\n", root)
	} else {
		defer os.RemoveAll(root)
	}
	n := endpoints / 20
	start := time.Now()
	t, err := loadgen.Generate(root, n)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	gen := time.Since(start)
	var out []*result
	for _, c := range o.clients {
		r := &result{Size: name, Upstreams: n, Endpoints: endpoints, Clients: c, Protocol: "sotw", ServeArgs: o.serveArgs,
			GenerateSeconds: gen.Seconds()}
		if o.delta {
			r.Protocol = "delta"
		}
		out = append(out, r)
		err := runConfig(o, t, r, filepath.Join(root, fmt.Sprintf("server-%d.log", c)), stdout)
		if err != nil {
			r.Error = err.Error()
		}
		printResult(stdout, r)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
