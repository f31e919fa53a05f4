package explain

import (
	"slices"
	"testing"
	"time"

	"poise.dev/poise/pkg/signals/loadreport"
	"poise.dev/poise/pkg/topology"
)

func TestAddLoads(t *testing.T) {
	key := topology.Key{Namespace: "geo", Name: "maps"}
	share := 0.25
	maps := loadreport.SpatialLoad{Domain: "geo/maps", Requests: []loadreport.SpatialRequests{
		{ClientRegion: "eu-west", ReplicaRegion: "eu-west", Requests: 30}, {ClientRegion: "eu-west", ReplicaRegion: "us-east", Requests: 10}},
		Total: 40, CrossRegion: 10, CrossRegionShare: &share, Reporters: 2}
	other := loadreport.SpatialLoad{Domain: "geo/atlas", Total: 5}
	for _, tc := range []struct {
		name      string
		interval  time.Duration
		load      *loadreport.SpatialLoad
		reporting bool
		total     uint64
		step      string
	}{
		{"no loadReporting", 0, nil, false, 0,
			"loads: not reported (the SpatialDomain has no spec.loadReporting)"},
		{"nothing reported yet", 5 * time.Second, nil, true, 0,
			"loads: no requests reported in the last 30s"},
		{"another domain's loads", 5 * time.Second, &other, true, 0,
			"loads: no requests reported in the last 30s"},
		{"reported", 5 * time.Second, &maps, true, 40,
			"loads: last 30s, 2 client(s), 40 requests by client→replica region: eu-west→eu-west 30, eu-west→us-east 10; cross-region 25.0 % (10)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &RouteReport{Steps: []string{"result: 200"}}
			st := &topology.SpatialState{Domain: topology.SpatialDomain{Key: key, LoadReportInterval: tc.interval}}
			AddLoads(r, st, tc.load, 30*time.Second)
			if r.Loads == nil || r.Loads.Reporting != tc.reporting || r.Loads.Total != tc.total || r.Loads.Window != "30s" {
				t.Fatalf("loads = %+v", r.Loads)
			}
			if want := []string{"result: 200", tc.step}; !slices.Equal(r.Steps, want) {
				t.Errorf("steps:\n got %q\nwant %q", r.Steps, want)
			}
		})
	}
}
