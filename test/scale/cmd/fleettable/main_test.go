package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"poise.dev/poise/pkg/loadgen"
)

// TestTable: three runs' figures, each row's min and lower median; a
// figure no run has is left out, one a run lacks is a dash.
func TestTable(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for i, sync := range []float64{30, 10, 20} {
		r := loadgen.Report{Clients: 100, SyncSeconds: sync,
			Phases: []loadgen.PhaseReport{{Name: "hot", Changes: 5, Convergence: loadgen.Dist{P99Us: int64(1000 * (i + 1))},
				Plane: &loadgen.PhasePlane{PerChangeMs: 200}}}}
		if i != 1 {
			r.Phases = append(r.Phases, loadgen.PhaseReport{Name: "tail", Plane: &loadgen.PhasePlane{PerChangeMs: 2 * float64(i+1)}})
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, "r"+string(rune('0'+i))+".json")
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	var out bytes.Buffer
	if err := run(files, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| start: every client synced (s) | 30.0 | 10.0 | 20.0 | 10.0 | 20.0 |",
		"| hot: convergence p99 (ms) | 1 | 2 | 3 | 1 | 2 |",
		"| tail: plane CPU per change (ms) | 2.00 | — | 6.00 | 2.00 | 2.00 |",
		"| tail CPU per change / hot's (%) | 1.00 | — | 3.00 | 1.00 | 1.00 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no line %q in:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "| plane RSS after") || strings.Contains(out.String(), "reconnect → first response") {
		t.Errorf("rows no report has are printed:\n%s", out.String())
	}
	if err := run([]string{filepath.Join(dir, "missing.json")}, &out); err == nil {
		t.Error("a missing report: no error")
	}
}
