package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"poise.dev/poise/pkg/loadgen"
)

func TestLoadWorkerEnv(t *testing.T) {
	for _, tc := range []struct {
		env     []string
		cpus, n int
		want    string
	}{
		{[]string{"A=1"}, 2, 8, "GOMAXPROCS=1"},
		{[]string{"A=1"}, 16, 4, "GOMAXPROCS=4"},
		{[]string{"A=1"}, 4, 3, "GOMAXPROCS=1"},
		{[]string{"GOMAXPROCS=7"}, 2, 8, "GOMAXPROCS=7"},
	} {
		got := workerEnv(tc.env, tc.cpus, tc.n)
		if !slices.Contains(got, tc.want) || !slices.Contains(got, tc.env[0]) {
			t.Errorf("workerEnv(%v, %d cpus, %d workers) = %v, want %s in it", tc.env, tc.cpus, tc.n, got, tc.want)
		}
		if n := len(got); n > len(tc.env)+1 {
			t.Errorf("workerEnv(%v) = %v: more than one variable added", tc.env, got)
		}
	}
}

// TestLoadClustersFile: the names a kube load's parent hands its workers
// come back in order; a file of too many or too long names, or none, is
// refused with its flag named.
func TestLoadClustersFile(t *testing.T) {
	names := []string{"shop/web", "shop/api", "pay/svc-0001"}
	path, err := saveClusters(names)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	got, err := readClusters(path)
	if err != nil || !slices.Equal(got, names) {
		t.Fatalf("read back %v, %v; want %v", got, err, names)
	}
	dir := t.TempDir()
	for name, body := range map[string]string{
		"empty":    "\n\n",
		"too long": strings.Repeat("x", maxClusterName+2) + "\n",
		"too many": strings.Repeat("a/b\n", loadgen.MaxUpstreams+1),
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readClusters(p); err == nil || !strings.Contains(err.Error(), "--clusters-file") {
			t.Errorf("%s: %v, want an error naming --clusters-file", name, err)
		}
	}
}
