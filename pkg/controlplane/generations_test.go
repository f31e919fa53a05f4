package controlplane

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"poise.dev/poise/pkg/admin"
	"poise.dev/poise/pkg/explain"
	"poise.dev/poise/pkg/topology"
)

// TestGenerationSinceOnTheAdminPort: /debug/explain shows when each
// endpoint's generation was first published. A publication that keeps the
// generation keeps its time; a new generation at the same address starts at
// its own publication; endpoints without a generation show none, and an
// upstream removed is forgotten.
func TestGenerationSinceOnTheAdminPort(t *testing.T) {
	t.Parallel()
	up := topology.Key{Namespace: "shop", Name: "api"}
	files := t.TempDir()
	dir := topology.NewDirectory()
	t0 := time.Unix(1_800_000_000, 0).UTC()
	now := t0
	clock := newGenerationClock(func() time.Time { return now })
	h := admin.Handler(admin.Sources{Snapshot: dir.Current, GenerationSince: clock.Since})
	since := func(step string) map[string]*time.Time {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/explain?upstream=shop/api", nil))
		if rec.Code != 200 {
			t.Fatalf("%s: /debug/explain: %d %s", step, rec.Code, rec.Body)
		}
		var rep explain.Report
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		out := map[string]*time.Time{}
		for _, p := range rep.Upstreams[0].Priorities {
			for _, l := range p.Localities {
				for _, e := range l.Endpoints {
					out[e.Address] = e.GenerationSince
				}
			}
		}
		return out
	}
	publish := func(path string) {
		t.Helper()
		old := dir.Current().Upstream(up)
		clock.Published(old, applyManifest(t, dir, path).Upstream(up))
	}

	publish(generationManifest(t, files, "vm-7"))
	got := since("vm-7")
	if got["10.1.0.2"] == nil || !got["10.1.0.2"].Equal(t0) {
		t.Fatalf("vm-7: 10.1.0.2 since %v, want %v", got["10.1.0.2"], t0)
	}
	for _, a := range []string{"10.1.0.1", "10.1.0.3", "10.1.0.4"} {
		if got[a] != nil {
			t.Errorf("%s has no generation but shows one since %v", a, got[a])
		}
	}

	now = t0.Add(time.Minute)
	publish(generationManifest(t, files, "vm-7")) // the same generation, published again
	if got := since("vm-7 again"); !got["10.1.0.2"].Equal(t0) {
		t.Errorf("vm-7 republished: since %v, want its first publication %v", got["10.1.0.2"], t0)
	}

	now = t0.Add(2 * time.Minute)
	publish(generationManifest(t, files, "vm-8"))
	if got := since("vm-8"); got["10.1.0.2"] == nil || !got["10.1.0.2"].Equal(now) {
		t.Errorf("vm-8: since %v, want its publication %v", got["10.1.0.2"], now)
	}
	if _, ok := clock.Since(up, "10.1.0.2", 80, "vm-7"); ok {
		t.Error("the clock still holds vm-7 after vm-8 replaced it")
	}

	clock.Published(dir.Current().Upstream(up), nil)
	if _, ok := clock.Since(up, "10.1.0.2", 80, "vm-8"); ok || len(clock.ups) != 0 {
		t.Errorf("the removed upstream is remembered: %v", clock.ups)
	}
}
