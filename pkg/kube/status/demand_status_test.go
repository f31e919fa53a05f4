package status

import (
	"testing"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// TestClientZonesDemandSource: under Balanced, status.clientZonesDemand
// says whether clientZones[].demand counts the connected clients or their
// load reports' request shares; without applied demand it is absent.
func TestClientZonesDemandSource(t *testing.T) {
	key := topology.Key{Namespace: "ns", Name: "web"}
	var b topology.Batch
	b.PutUpstream(topology.Upstream{Key: key, Policy: weights.DefaultPolicy(), HealthAdjustment: topology.ControlPlane,
		LoadBalancing: "RoundRobin", Protocol: "HTTP2", Affinity: &topology.Affinity{Mode: affinity.Balanced}})
	for i, zone := range []string{"a", "b"} {
		b.PutEndpointSet(topology.EndpointSet{Key: topology.Key{Namespace: "ns", Name: "web-" + zone}, Upstream: "web",
			Locality:  weights.Locality{Region: "eu", Zone: zone},
			Endpoints: []topology.Endpoint{{Address: "10.0.0." + string(rune('1'+i)), Port: 80, Weight: 1}}})
	}
	d := topology.NewDirectory()
	if _, err := d.Apply(b); err != nil {
		t.Fatal(err)
	}
	u := v1alpha1.Upstream{}
	u.Name, u.Namespace = key.Name, key.Namespace
	shares := []affinity.Demand{{Zone: affinity.Zone{Region: "eu", Zone: "a"}, Weight: 750}, {Zone: affinity.Zone{Region: "eu", Zone: "b"}, Weight: 250}}
	for _, tc := range []struct {
		name      string
		demand    []affinity.Demand
		fromLoads bool
		want      string
		local     [2]int64
	}{
		{"no demand applied", nil, false, "", [2]int64{500_000, 500_000}},
		{"the connected clients", shares, false, v1alpha1.DemandFromClients, [2]int64{666_667, 1_000_000}},
		{"load reports", shares, true, v1alpha1.DemandFromLoadReports, [2]int64{666_667, 1_000_000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// the demand signal applies the demand; the state carries it
			var b topology.Batch
			b.PutDemand(key, topology.AppliedDemand{Zones: tc.demand, LoadReports: tc.fromLoads})
			snap, err := d.Apply(b)
			if err != nil {
				t.Fatal(err)
			}
			st := upstreamStatus(&u, snap.Upstream(key), nil, nil, true, "")
			if st.ClientZonesDemand != tc.want || len(st.ClientZones) != 2 ||
				st.ClientZones[0].LocalMillionths != tc.local[0] || st.ClientZones[1].LocalMillionths != tc.local[1] {
				t.Errorf("clientZonesDemand %q, clientZones %+v", st.ClientZonesDemand, st.ClientZones)
			}
			if tc.demand != nil && (st.ClientZones[0].Demand != 750 || st.ClientZones[1].Demand != 250) {
				t.Errorf("demand %+v", st.ClientZones)
			}
		})
	}
}
