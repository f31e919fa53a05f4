package source

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// TestVerdictsFromStatus: the leader's verdicts are read from status only
// while the spec asks for them; entries that cannot be an endpoint are
// skipped, addresses are canonical, and an empty origin still ejects.
func TestVerdictsFromStatus(t *testing.T) {
	t.Parallel()
	u := &v1alpha1.Upstream{Status: v1alpha1.UpstreamStatus{
		ActiveChecks: &v1alpha1.ActiveCheckStatus{Unhealthy: []v1alpha1.CheckedEndpoint{
			{Address: "10.0.0.1", Port: 80, Origin: "active check by a: 3 failures"},
			{Address: "not-an-ip", Port: 80, Origin: "x"},
			{Address: "10.0.0.2", Port: 0, Origin: "x"},
			{Address: "2001:db8:0::1", Port: 443},
		}},
		OutlierEjections: &v1alpha1.OutlierEjectionStatus{Ejected: []v1alpha1.EjectedEndpoint{
			{Address: "10.0.0.3", Port: 8080, Origin: "load reports: 4 clients", Until: metav1.NewTime(time.Now()), Count: 1},
			{Address: "10.0.0.4", Port: 70000},
		}},
	}}
	if CheckVerdicts(u) != nil || outlierVerdicts(u) != nil {
		t.Fatal("verdicts read without spec.healthCheck or spec.outlierDetection")
	}
	u.Spec.HealthCheck = &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckTCP}
	u.Spec.OutlierDetection = &v1alpha1.OutlierDetection{}
	wantChecks := []topology.CheckVerdict{
		{Address: "10.0.0.1", Port: 80, Probe: weights.ProbeUnhealthy, Origin: "active check by a: 3 failures"},
		{Address: "2001:db8::1", Port: 443, Probe: weights.ProbeUnhealthy, Origin: "active check"},
	}
	if got := CheckVerdicts(u); !reflect.DeepEqual(got, wantChecks) {
		t.Errorf("check verdicts %+v", got)
	}
	wantOutliers := []topology.OutlierVerdict{{Address: "10.0.0.3", Port: 8080, Ejected: true, Origin: "load reports: 4 clients"}}
	if got := outlierVerdicts(u); !reflect.DeepEqual(got, wantOutliers) {
		t.Errorf("outlier verdicts %+v", got)
	}
}
