package main

import (
	"path/filepath"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"poise.dev/poise/test/adstest"
)

// deadKubeconfig writes a kubeconfig whose context "dead" is a cluster no
// one listens for: a command that reads it gets that far, and fails there.
func deadKubeconfig(t *testing.T) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["dead"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", InsecureSkipTLSVerify: true}
	cfg.AuthInfos["dead"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["dead"] = &clientcmdapi.Context{Cluster: "dead", AuthInfo: "dead"}
	cfg.CurrentContext = "dead"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExitCodes holds every command to docs/cli.md: 0 done (--help too), 1
// the input is wrong, 2 the command line is wrong, with the error and
// "Run 'controlplane COMMAND --help' for usage." on stderr and nothing on
// stdout. Every command has rows for each code it can give, and the test
// fails on a command with none.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	a := startPlane(t)
	client := adstest.Dial(t, a.XDS, &core.Node{Id: "envoy-exit", Cluster: "test", UserAgentName: "envoy"})
	client.ACK(client.Ask(resource.ClusterType))
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	invalid := write(t, dir, "invalid.yaml", upstream("web")+"---\n"+
		endpointSet("web-a", "web", "a", "[{address: 10.0.0.1, port: 80, weight: 0}]"))
	dead := deadKubeconfig(t)
	empty := write(t, dir, "empty-kubeconfig", "apiVersion: v1\nkind: Config\n")
	serve := []string{"serve", "--xds-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0"}
	rows := map[string][]struct {
		args []string
		code int
		want string // in stderr
	}{
		"serve": {
			{[]string{"serve", "--help"}, exitOK, ""},
			{append(serve, "-f", missing), exitInvalid, "nothing to serve"},
			{serve, exitUsage, "-f PATH is required"},
			{append(serve, "-f", examples, "--nope"), exitUsage, "unknown flag --nope"},
			{append(serve, "-f", examples, "extra.yaml"), exitUsage, `unexpected argument "extra.yaml"`},
			{append(serve, "-f", examples, "--drain-period", "1000000h"), exitUsage, "--drain-period 1000000h0m0s: want 0s to 10m0s"},
		},
		"explain": {
			{[]string{"explain", "-f", examples}, exitOK, ""},
			{[]string{"explain", "-f", missing}, exitInvalid, "no such file"},
			{[]string{"explain", "-f", invalid}, exitInvalid, "spec.endpoints[0].weight"},
			{[]string{"explain", "-f", examples, "--upstream", "checkout"}, exitInvalid, "did you mean shop/checkout?"},
			{[]string{"explain"}, exitUsage, "-f PATH is required"},
			{[]string{"explain", "-f", examples, "-o", "yaml"}, exitUsage, `-o "yaml"`},
			{[]string{"explain", "-f", examples, "--simulate", "1000000001"}, exitUsage, "--simulate 1000000001: want 0 to 1000000000 picks"},
			// a kubeconfig that cannot be read is the command line's fault; a cluster that does not answer is not
			{[]string{"explain", "--kubeconfig", missing}, exitUsage, "kubeconfig from --kubeconfig " + missing},
			{[]string{"explain", "--kubeconfig", empty}, exitUsage, "--kubeconfig " + empty + ": no cluster, user or current context in it"},
			{[]string{"explain", "--kubeconfig", dead}, exitInvalid, "reading the cluster at https://127.0.0.1:1"},
		},
		"explain-route": {
			{[]string{"explain-route", "-f", spatialExamples, "--domain", "cadastre", "--product", "parcels"}, exitOK, ""},
			{[]string{"explain-route", "-f", spatialExamples, "--domain", "roads", "--product", "parcels"}, exitInvalid, "no SpatialDomain of that name"},
			{[]string{"explain-route", "--domain", "cadastre", "--product", "parcels"}, exitUsage, "-f PATH is required"},
			{[]string{"explain-route", "-f", spatialExamples, "--domain", "cadastre"}, exitUsage, "--domain and --product are required"},
		},
		"validate": {
			{[]string{"validate", "-f", examples}, exitOK, ""},
			{[]string{"validate", "-f", invalid}, exitInvalid, "invalid manifests"},
			{[]string{"validate"}, exitUsage, "-f PATH is required"},
			{[]string{"validate", "-f", examples, "extra.yaml"}, exitUsage, `unexpected argument "extra.yaml"`},
		},
		"status": {
			{[]string{"status", "--admin-address", a.Admin}, exitOK, ""},
			{[]string{"status", "--admin-address", "127.0.0.1:1"}, exitInvalid, "replica 127.0.0.1:1:"},
			{[]string{"status", "--kubeconfig", dead}, exitInvalid, "listing the pods"},
			{[]string{"status", "--kubeconfig", missing}, exitUsage, "--kubeconfig:"},
			{[]string{"status", "--kubeconfig", empty}, exitUsage, "--kubeconfig " + empty + ": no cluster, user or current context in it"},
			{[]string{"status", "--kubeconfig", dead, "--context", "nope"}, exitUsage, `--context "nope": no such context in the kubeconfig (it has: dead)`},
			{[]string{"status", "--admin-address", a.Admin, "-n", "poise-system"}, exitUsage, "give one or the other"},
			{[]string{"status", "--release", "a", "--selector", "b=c"}, exitUsage, "--release and --selector"},
			{[]string{"status", "--selector", "a b"}, exitUsage, `--selector "a b"`},
			{[]string{"status", "extra"}, exitUsage, `unknown command "extra"`},
		},
		"proxy-config": {
			{[]string{"proxy-config", "envoy-exit", "--admin-address", a.Admin}, exitOK, ""},
			{[]string{"proxy-config", "nobody", "--admin-address", a.Admin}, exitInvalid, `node "nobody" is connected to none of the replicas asked`},
			{[]string{"proxy-config", "envoy-exit", "--admin-address", a.Admin, "--resource", "shop/nope"}, exitInvalid, `no resource named "shop/nope"`},
			{[]string{"proxy-config", "--admin-address", a.Admin}, exitUsage, "accepts 1 arg(s), received 0"},
			{[]string{"proxy-config", "envoy-exit", "--admin-address", a.Admin, "--type", "secrets"}, exitUsage, `--type "secrets": want all, clusters, endpoints, listeners, routes`},
		},
		"create-remote-secret": {
			{[]string{"create-remote-secret", "--rbac-only"}, exitOK, ""},
			{[]string{"create-remote-secret", "--kubeconfig", dead, "--context", "dead", "--name", "east"}, exitInvalid, "127.0.0.1:1"},
			{[]string{"create-remote-secret", "--name", "east"}, exitUsage, "--context CTX is required"},
			{[]string{"create-remote-secret", "--kubeconfig", dead, "--context", "nope", "--name", "east"}, exitUsage, `--context "nope": no such context`},
		},
		"version": {
			{[]string{"version"}, exitOK, ""},
			{[]string{"version", "-o", "yaml"}, exitUsage, `-o "yaml"`},
			{[]string{"version", "extra"}, exitUsage, `unknown command "extra"`},
		},
		"completion": {
			{[]string{"completion", "bash"}, exitOK, ""},
			{[]string{"completion", "tcsh"}, exitUsage, `unknown command "tcsh" for "controlplane completion"`},
			{[]string{"completion"}, exitUsage, "completion needs a shell"},
		},
		"load": {
			{[]string{"load", "--tree", filepath.Join(dir, "tree"), "--upstreams", "3", "--generate-only"}, exitOK, ""},
			{[]string{"load", "--tree", filepath.Join(invalid, "tree"), "--generate-only"}, exitInvalid, "--tree " + filepath.Join(invalid, "tree")},
			{[]string{"load", "--xds-address", "127.0.0.1:1", "--sample", missing}, exitInvalid, "--sample " + missing},
			{[]string{"load"}, exitUsage, "--xds-address HOST:PORT is required"},
			{[]string{"load", "--xds-address", "127.0.0.1:1", "--churn", "files"}, exitUsage, "--churn files needs --tree DIR"},
			{[]string{"load", "--xds-address", "127.0.0.1:1", "--grpc-clusters", "5-1"}, exitUsage, `--grpc-clusters "5-1": want N or MIN-MAX`},
			{[]string{"load", "--xds-address", "127.0.0.1:1", "--churn", "files", "--tree", dir, "--phase", "hot:warm:1:1s"}, exitUsage,
				`--phase "hot:warm:1:1s": selection "warm"`},
			{[]string{"load", "--xds-address", "127.0.0.1:1", "--phase", "hot:hot:1:1s"}, exitUsage, "--phase changes clusters: give --churn files or --churn kube"},
			{[]string{"load", "--xds-address", "127.0.0.1:1", "--profile-dir", dir}, exitUsage, "--profile-dir needs --admin-address"},
		},
		"help": {
			{[]string{"help", "serve"}, exitOK, ""},
			{[]string{"help"}, exitOK, ""},
			{[]string{"help", "nope"}, exitUsage, `help "nope": no such command`},
			{[]string{"help", "statsu"}, exitUsage, `help "statsu": no such command; did you mean status?`},
			{[]string{"help", "serve", "extra"}, exitUsage, `help "serve extra": no such command`},
		},
	}
	// input is what a command reads besides its command line: those that
	// read some can fail on it (exit 1)
	noInput := map[string]bool{"version": true, "completion": true, "help": true}

	root := newRoot(nil, nil)
	root.InitDefaultHelpCmd()
	commands := map[string]bool{}
	for _, c := range root.Commands() {
		name := c.Name()
		commands[name] = true
		codes := map[int]bool{}
		for _, r := range rows[name] {
			codes[r.code] = true
		}
		if !codes[exitOK] || !codes[exitUsage] || (!noInput[name] && !codes[exitInvalid]) {
			t.Errorf("command %s: rows for exit codes %v; want 0, 2 and, if it reads input, 1", name, codes)
		}
	}
	for name, rs := range rows {
		if !commands[name] {
			t.Errorf("rows for %s, which is no command", name)
		}
		for _, r := range rs {
			checkExit(t, r.args, r.code, r.want)
		}
	}
	// no command at all, and an unknown one
	checkExit(t, []string{"statsu"}, exitUsage, `unknown command "statsu" for "controlplane"`)
	if code, stdout, stderr := runCLI(); code != exitUsage || stdout != "" || !strings.Contains(stderr, "Usage:") {
		t.Errorf("no command: exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
}

// checkExit runs args and holds the result to the conventions of code.
func checkExit(t *testing.T, args []string, code int, want string) {
	t.Helper()
	got, stdout, stderr := runCLI(args...)
	if got != code {
		t.Errorf("%v: exit %d, want %d; stderr:\n%s", args, got, code, stderr)
	}
	if want != "" && !strings.Contains(stderr, want) {
		t.Errorf("%v: stderr lacks %q:\n%s", args, want, stderr)
	}
	hint := "Run 'controlplane "
	switch code {
	case exitOK:
		if stdout == "" {
			t.Errorf("%v: nothing on stdout", args)
		}
	case exitUsage:
		lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
		if stdout != "" || !strings.HasPrefix(stderr, "error: ") || !strings.HasPrefix(lines[len(lines)-1], hint) ||
			!strings.HasSuffix(lines[len(lines)-1], " --help' for usage.") {
			t.Errorf("%v: stdout %q, stderr:\n%s\nwant nothing on stdout, and on stderr the error then the usage hint", args, stdout, stderr)
		}
	case exitInvalid:
		if strings.Contains(stderr, hint) || !strings.Contains(stderr, "error: ") {
			t.Errorf("%v: stderr:\n%s\nwant the error and no usage hint: the command line is right", args, stderr)
		}
	}
	checkNoCrash(t, stderr)
}
