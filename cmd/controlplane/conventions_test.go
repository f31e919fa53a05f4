package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHelp: --help, -h and help CMD print the command's help on stdout
// and exit 0, with double-dash long flags.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd   string
		flags []string // each must appear as help shows it
	}{
		{"serve", []string{"-f, --file path", "--xds-address string", "--admin-address string", "--log-format string", "--metrics-locality-gauges", "--drain-period duration"}},
		{"explain", []string{"-f, --file path", "-o, --output string", "--upstream string", "--simulate uint", "--from string", "--demand string"}},
		{"explain-route", []string{"-f, --file path", "--domain string", "--product string", "--request-id string", "-o, --output string"}},
		{"validate", []string{"-f, --file path"}},
		{"create-remote-secret", []string{"--context string", "--name string", "--kubeconfig string", "--namespace string", "--service-account string", "--server string", "--rbac-only", "--timeout duration"}},
		{"version", []string{"-o, --output string"}},
		// the help's example names the chart's namespace and Deployment
		{"status", []string{"--admin-address strings", "--kubeconfig string", "--context string", "-n, --namespace string", "--release string",
			"-l, --selector string", "--admin-port int", "--timeout duration", "controlplane status -n poise-system", "Deployment poise in namespace poise-system"}},
		{"proxy-config", []string{"--type string", "--resource string", "-n, --namespace string", "controlplane proxy-config envoy-eu-1 -n poise-system"}},
		{"completion", []string{"bash", "zsh", "fish", "powershell"}},
	} {
		for _, args := range [][]string{{tc.cmd, "--help"}, {tc.cmd, "-h"}, {"help", tc.cmd}} {
			code, stdout, stderr := runCLI(args...)
			if code != exitOK || stderr != "" {
				t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
			}
			if !strings.Contains(stdout, "Usage:\n  controlplane "+tc.cmd) {
				t.Errorf("%v: not %s's help:\n%s", args, tc.cmd, stdout)
			}
			for _, f := range tc.flags {
				if !strings.Contains(stdout, f) {
					t.Errorf("%v: help lacks %q:\n%s", args, f, stdout)
				}
			}
			for _, line := range strings.Split(stdout, "\n") {
				if l := strings.TrimSpace(line); len(l) > 2 && l[0] == '-' && l[1] != '-' && l[2] != ',' {
					t.Errorf("%v: single-dash long flag in help: %q", args, line)
				}
			}
		}
	}
	// the long forms of -f and -o, repeated and comma-separated, read the same
	_, a, _ := runCLI("explain", "--file", examples+"/catalog.yaml", "--file="+examples+"/checkout.yaml", "--output", "json")
	_, b, _ := runCLI("explain", "-f", examples+"/checkout.yaml,"+examples+"/catalog.yaml", "-o", "json")
	if a == "" || a != b {
		t.Errorf("--file/--output and -f/-o differ")
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	want := buildVersion()
	if !strings.HasPrefix(want.text(), "controlplane dev (go") {
		t.Errorf("a test binary's version: %q", want.text())
	}
	for _, args := range [][]string{{"--version"}, {"-v"}, {"version"}, {"version", "-o", "text"}} {
		if code, stdout, stderr := runCLI(args...); code != exitOK || stdout != want.text() || stderr != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", args, code, stdout, stderr, want.text())
		}
	}
	code, stdout, stderr := runCLI("version", "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	var got versionInfo
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Version != "dev" || got.GoVersion != runtime.Version() || got.Platform != runtime.GOOS+"/"+runtime.GOARCH || got.Module != "poise.dev/poise" {
		t.Errorf("version -o json = %+v", got)
	}
	if code, _, stderr := runCLI("version", "-o", "yaml"); code != exitUsage || !strings.Contains(stderr, `-o "yaml"`) {
		t.Errorf("version -o yaml: exit %d, stderr %q", code, stderr)
	}
	if code, _, _ := runCLI("version", "extra"); code != exitUsage {
		t.Errorf("version extra: exit %d", code)
	}
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	for shell, marker := range map[string]string{
		"bash":       "complete -o default -F __start_controlplane controlplane",
		"zsh":        "#compdef controlplane",
		"fish":       "complete -c controlplane",
		"powershell": "Register-ArgumentCompleter",
	} {
		code, stdout, stderr := runCLI("completion", shell)
		if code != exitOK || stderr != "" || !strings.Contains(stdout, marker) {
			t.Errorf("completion %s: exit %d, stderr %q, stdout lacks %q", shell, code, stderr, marker)
		}
	}
	if code, _, stderr := runCLI("completion", "tcsh"); code != exitUsage || !strings.Contains(stderr, "tcsh") {
		t.Errorf("completion tcsh: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI("completion"); code != exitUsage || !strings.Contains(stderr, "needs a shell") {
		t.Errorf("completion: exit %d, stderr %q", code, stderr)
	}
	// the completion of the command names, as the shell scripts ask it
	code, stdout, _ := runCLI("__complete", "expl")
	if code != exitOK || !strings.Contains(stdout, "explain\t") || !strings.Contains(stdout, "explain-route\t") {
		t.Errorf("__complete expl: exit %d:\n%s", code, stdout)
	}
}

// TestBinaryConventions runs the built command: version from -ldflags,
// help and usage exit codes, and the JSON banner of serve --log-format json.
func TestBinaryConventions(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t, "v9.8.7")
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
	}{
		{[]string{"--version"}, 0, "controlplane v9.8.7 (go"},
		{[]string{"version", "-o", "json"}, 0, `"version": "v9.8.7"`},
		{[]string{"serve", "--help"}, 0, "--xds-address string"},
		{[]string{"help", "serve"}, 0, "--xds-address string"},
		{[]string{"serve", "-xds-address", "x"}, 2, ""},
		{[]string{"serve", "--nope"}, 2, ""},
	} {
		cmd := exec.Command(bin, tc.args...)
		out, _ := cmd.Output()
		if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.Contains(string(out), tc.stdout) {
			t.Errorf("%v: exit %d (want %d), stdout lacks %q:\n%s", tc.args, code, tc.code, tc.stdout, out)
		}
	}

	cmd := exec.Command(bin, "serve", "-f", examples, "--log-format", "json", "--xds-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve after SIGTERM: %v", err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Error("serve did not end on SIGTERM")
		}
	}()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		t.Fatalf("no banner: %v", sc.Err())
	}
	var banner map[string]any
	if err := json.Unmarshal(sc.Bytes(), &banner); err != nil {
		t.Fatalf("banner is not one JSON object: %v\n%s", err, sc.Text())
	}
	if banner["msg"] != "poise control plane" || banner["version"] != "v9.8.7" || banner["level"] != "INFO" ||
		!strings.HasPrefix(banner["xds"].(string), "127.0.0.1:") || banner["source"] != "files" {
		t.Errorf("banner = %v", banner)
	}
	go func() {
		for sc.Scan() {
			t.Errorf("more on stdout after the banner: %s", sc.Text())
		}
	}()
}
