package explain

import (
	"bytes"
	"reflect"
	"testing"

	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
)

// TestAffinityShowsModeAndOrigin: the report names the mode in force and
// what set it, an explicit None included, so a reader can tell an Upstream
// that chose None from one that a Service's preference did not reach.
func TestAffinityShowsModeAndOrigin(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *topology.Affinity
		want Affinity
		text string
	}{
		{"nothing sets it", nil,
			Affinity{Mode: "None", FailoverRegions: []string{}, Origin: AffinityDefault},
			"  locality affinity: None (default: nothing sets a mode; every client receives this split)\n"},
		{"explicit None", &topology.Affinity{Mode: affinity.None, Origin: topology.OriginLocalityAffinity},
			Affinity{Mode: "None", FailoverRegions: []string{}, Origin: "spec.localityAffinity"},
			"  locality affinity: None (from spec.localityAffinity)\n"},
		{"spec with failover", &topology.Affinity{Mode: affinity.PreferSameRegion, FailoverRegions: []string{"us", "ap"}, Origin: topology.OriginLocalityAffinity},
			Affinity{Mode: "PreferSameRegion", FailoverRegions: []string{"us", "ap"}, Origin: "spec.localityAffinity"},
			"  locality affinity: PreferSameRegion, failover regions us, ap (from spec.localityAffinity)\n"},
		{"Service", &topology.Affinity{Mode: affinity.PreferSameZone, Origin: "Service shop/checkout trafficDistribution PreferClose"},
			Affinity{Mode: "PreferSameZone", FailoverRegions: []string{}, Origin: "Service shop/checkout trafficDistribution PreferClose"},
			"  locality affinity: PreferSameZone (from Service shop/checkout trafficDistribution PreferClose)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := affinityOf(&topology.Upstream{Affinity: tc.in})
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("affinity %+v, want %+v", got, tc.want)
			}
			var buf bytes.Buffer
			writeAffinity(&textWriter{w: &buf}, got)
			if buf.String() != tc.text {
				t.Errorf("text %q, want %q", buf.String(), tc.text)
			}
		})
	}
}
