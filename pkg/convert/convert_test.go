package convert_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/affinity"
	"poise.dev/poise/pkg/convert"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

func meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "shop"}
}

func validUpstream() *v1alpha1.Upstream {
	return &v1alpha1.Upstream{ObjectMeta: meta("checkout")}
}

func validLocality() *v1alpha1.Locality {
	return &v1alpha1.Locality{
		ObjectMeta: meta("checkout-eu"),
		Spec:       v1alpha1.LocalitySpec{Upstream: "checkout", LocalityID: v1alpha1.LocalityID{Region: "eu-west"}},
	}
}

func validEndpointSet() *v1alpha1.EndpointSet {
	return &v1alpha1.EndpointSet{
		ObjectMeta: meta("checkout-eu"),
		Spec: v1alpha1.EndpointSetSpec{
			Upstream: "checkout",
			Locality: v1alpha1.LocalityID{Region: "eu-west", Zone: "eu-west-1a"},
			Endpoints: []v1alpha1.Endpoint{
				{Address: "10.0.0.1", Port: 8080},
				{Address: "10.0.0.2", Port: 8080},
				{Address: "2001:db8::9", Port: 9090},
			},
		},
	}
}

func withService(name string, port intstr.IntOrString) func(*v1alpha1.Upstream) {
	return func(u *v1alpha1.Upstream) {
		u.Spec.EndpointsFrom = &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: name, Port: port}}
	}
}

// withCheck sets spec.healthCheck of the given type, then lets f change it.
func withCheck(typ v1alpha1.HealthCheckType, f func(*v1alpha1.HealthCheck)) func(*v1alpha1.Upstream) {
	return func(u *v1alpha1.Upstream) {
		h := &v1alpha1.HealthCheck{Type: typ}
		if typ == v1alpha1.HealthCheckHTTP {
			h.HTTP = &v1alpha1.HTTPHealthCheck{Path: "/healthz"}
		}
		if f != nil {
			f(h)
		}
		u.Spec.HealthCheck = h
	}
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// fields returns the field paths of an error list.
func fields(errs field.ErrorList) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Field
	}
	return out
}

func TestUpstreamInvalid(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*v1alpha1.Upstream)
		want   []string
	}{
		{"empty name", func(u *v1alpha1.Upstream) { u.Name = "" }, []string{"metadata.name"}},
		{"uppercase name", func(u *v1alpha1.Upstream) { u.Name = "Checkout" }, []string{"metadata.name"}},
		{"underscore name", func(u *v1alpha1.Upstream) { u.Name = "check_out" }, []string{"metadata.name"}},
		{"name too long", func(u *v1alpha1.Upstream) { u.Name = strings.Repeat("a", 254) }, []string{"metadata.name"}},
		{"uppercase namespace", func(u *v1alpha1.Upstream) { u.Namespace = "Shop" }, []string{"metadata.namespace"}},
		{"namespace with slash", func(u *v1alpha1.Upstream) { u.Namespace = "a/b" }, []string{"metadata.namespace"}},
		{"namespace with dot", func(u *v1alpha1.Upstream) { u.Namespace = "shop.eu" }, []string{"metadata.namespace"}},
		{"namespace too long", func(u *v1alpha1.Upstream) { u.Namespace = strings.Repeat("n", 64) }, []string{"metadata.namespace"}},
		{"opf 0", func(u *v1alpha1.Upstream) { u.Spec.OverprovisioningFactor = new(int32(0)) }, []string{"spec.overprovisioningFactor"}},
		{"opf 1001", func(u *v1alpha1.Upstream) { u.Spec.OverprovisioningFactor = new(int32(1001)) }, []string{"spec.overprovisioningFactor"}},
		{"opf negative", func(u *v1alpha1.Upstream) { u.Spec.OverprovisioningFactor = new(int32(-140)) }, []string{"spec.overprovisioningFactor"}},
		{"threshold 101", func(u *v1alpha1.Upstream) { u.Spec.PanicThreshold = new(int32(101)) }, []string{"spec.panicThreshold"}},
		{"threshold negative", func(u *v1alpha1.Upstream) { u.Spec.PanicThreshold = new(int32(-1)) }, []string{"spec.panicThreshold"}},
		{"panic mode", func(u *v1alpha1.Upstream) { u.Spec.PanicMode = "useAll" }, []string{"spec.panicMode"}},
		{"draining capacity", func(u *v1alpha1.Upstream) { u.Spec.DrainingCapacity = "Maybe" }, []string{"spec.drainingCapacity"}},
		{"health adjustment", func(u *v1alpha1.Upstream) { u.Spec.HealthAdjustment = "Envoy" }, []string{"spec.healthAdjustment"}},
		{"load balancing", func(u *v1alpha1.Upstream) { u.Spec.LoadBalancing = "WeightedRoundRobin" }, []string{"spec.loadBalancing"}},
		{"protocol", func(u *v1alpha1.Upstream) { u.Spec.Protocol = "HTTP3" }, []string{"spec.protocol"}},
		{"connect timeout 0", func(u *v1alpha1.Upstream) { u.Spec.ConnectTimeout = &metav1.Duration{} }, []string{"spec.connectTimeout"}},
		{"connect timeout negative", func(u *v1alpha1.Upstream) { u.Spec.ConnectTimeout = &metav1.Duration{Duration: -time.Second} }, []string{"spec.connectTimeout"}},
		{"connect timeout above 1h", func(u *v1alpha1.Upstream) {
			u.Spec.ConnectTimeout = &metav1.Duration{Duration: time.Hour + time.Nanosecond}
		}, []string{"spec.connectTimeout"}},
		{"load report interval below 1s", withLoadReporting(999 * time.Millisecond), []string{"spec.loadReporting.interval"}},
		{"load report interval above 60s", withLoadReporting(time.Minute + time.Nanosecond), []string{"spec.loadReporting.interval"}},
		{"load report interval negative", withLoadReporting(-time.Second), []string{"spec.loadReporting.interval"}},
		{"service name empty", withService("", intstr.FromInt32(80)), []string{"spec.endpointsFrom.service.name"}},
		{"service name uppercase", withService("Web", intstr.FromInt32(80)), []string{"spec.endpointsFrom.service.name"}},
		{"service name too long", withService(strings.Repeat("a", 64), intstr.FromInt32(80)), []string{"spec.endpointsFrom.service.name"}},
		{"service name with dot", withService("web.shop", intstr.FromInt32(80)), []string{"spec.endpointsFrom.service.name"}},
		{"service port 0", withService("web", intstr.FromInt32(0)), []string{"spec.endpointsFrom.service.port"}},
		{"service port 65536", withService("web", intstr.FromInt32(65536)), []string{"spec.endpointsFrom.service.port"}},
		{"service port name empty", withService("web", intstr.FromString("")), []string{"spec.endpointsFrom.service.port"}},
		{"service port name uppercase", withService("web", intstr.FromString("HTTP")), []string{"spec.endpointsFrom.service.port"}},
		{"service port name too long", withService("web", intstr.FromString("abcdefghijklmnop")), []string{"spec.endpointsFrom.service.port"}},
		// The CRD's CEL rule wants at least one letter and no "--" in a port name.
		{"service port name digits only", withService("web", intstr.FromString("8080")), []string{"spec.endpointsFrom.service.port"}},
		{"service port name double hyphen", withService("web", intstr.FromString("grpc--web")), []string{"spec.endpointsFrom.service.port"}},
		{"hashKeyFrom not in the enum", func(u *v1alpha1.Upstream) {
			withService("web", intstr.FromInt32(80))(u)
			u.Spec.EndpointsFrom.HashKeyFrom = "PodUID"
		}, []string{"spec.endpointsFrom.hashKeyFrom"}},
		{"affinity mode", withAffinity("SameZone"), []string{"spec.localityAffinity.mode"}},
		{"failover regions without a PreferSame mode", withAffinity("Balanced", "us"), []string{"spec.localityAffinity.failoverRegions"}},
		{"failover regions without a mode", withAffinity("", "us"), []string{"spec.localityAffinity.failoverRegions"}},
		{"failover region twice", withAffinity("PreferSameZone", "us", "ap", "us"), []string{"spec.localityAffinity.failoverRegions[2]"}},
		{"failover region empty", withAffinity("PreferSameRegion", ""), []string{"spec.localityAffinity.failoverRegions[0]"}},
		{"Balanced under Proxy", func(u *v1alpha1.Upstream) {
			withAffinity("Balanced")(u)
			u.Spec.HealthAdjustment = v1alpha1.HealthAdjustmentProxy
		}, []string{"spec.localityAffinity.mode"}},
		{"failover region too long", withAffinity("PreferSameRegion", strings.Repeat("r", 129)), []string{"spec.localityAffinity.failoverRegions[0]"}},
		{"17 failover regions", withAffinity("PreferSameRegion", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q"), []string{"spec.localityAffinity.failoverRegions"}},
		{"check type", withCheck("UDP", nil), []string{"spec.healthCheck.type"}},
		{"HTTP check without http", withCheck(v1alpha1.HealthCheckHTTP, func(h *v1alpha1.HealthCheck) { h.HTTP = nil }), []string{"spec.healthCheck.http"}},
		{"TCP check with http", withCheck(v1alpha1.HealthCheckTCP, func(h *v1alpha1.HealthCheck) {
			h.HTTP = &v1alpha1.HTTPHealthCheck{Path: "/"}
		}), []string{"spec.healthCheck.http"}},
		{"HTTP check with grpc", withCheck(v1alpha1.HealthCheckHTTP, func(h *v1alpha1.HealthCheck) { h.GRPC = &v1alpha1.GRPCHealthCheck{} }), []string{"spec.healthCheck.grpc"}},
		{"grpc service too long", withCheck(v1alpha1.HealthCheckGRPC, func(h *v1alpha1.HealthCheck) {
			h.GRPC = &v1alpha1.GRPCHealthCheck{Service: strings.Repeat("s", 254)}
		}), []string{"spec.healthCheck.grpc.service"}},
		{"path without slash", withCheck(v1alpha1.HealthCheckHTTP, func(h *v1alpha1.HealthCheck) { h.HTTP.Path = "healthz" }), []string{"spec.healthCheck.http.path"}},
		{"path with space", withCheck(v1alpha1.HealthCheckHTTP, func(h *v1alpha1.HealthCheck) { h.HTTP.Path = "/a b" }), []string{"spec.healthCheck.http.path"}},
		{"host with space", withCheck(v1alpha1.HealthCheckHTTP, func(h *v1alpha1.HealthCheck) { h.HTTP.Host = "a b" }), []string{"spec.healthCheck.http.host"}},
		{"status range reversed", withCheck(v1alpha1.HealthCheckHTTP, func(h *v1alpha1.HealthCheck) {
			h.HTTP.ExpectedStatuses = []v1alpha1.StatusRange{{Start: 299, End: 200}}
		}), []string{"spec.healthCheck.http.expectedStatuses[0]"}},
		{"status 600", withCheck(v1alpha1.HealthCheckHTTP, func(h *v1alpha1.HealthCheck) {
			h.HTTP.ExpectedStatuses = []v1alpha1.StatusRange{{Start: 200, End: 600}}
		}), []string{"spec.healthCheck.http.expectedStatuses[0].end"}},
		{"9 status ranges", withCheck(v1alpha1.HealthCheckHTTP, func(h *v1alpha1.HealthCheck) {
			h.HTTP.ExpectedStatuses = make([]v1alpha1.StatusRange, 9)
			for i := range h.HTTP.ExpectedStatuses {
				h.HTTP.ExpectedStatuses[i] = v1alpha1.StatusRange{Start: 200, End: 200}
			}
		}), []string{"spec.healthCheck.http.expectedStatuses"}},
		{"check port 0", withCheck(v1alpha1.HealthCheckTCP, func(h *v1alpha1.HealthCheck) { h.Port = new(int32(0)) }), []string{"spec.healthCheck.port"}},
		{"interval below 1s", withCheck(v1alpha1.HealthCheckTCP, func(h *v1alpha1.HealthCheck) {
			h.Interval, h.Timeout = dur(999*time.Millisecond), dur(time.Millisecond)
		}), []string{"spec.healthCheck.interval"}},
		{"interval above 5m", withCheck(v1alpha1.HealthCheckTCP, func(h *v1alpha1.HealthCheck) { h.Interval = dur(5*time.Minute + 1) }), []string{"spec.healthCheck.interval"}},
		{"timeout 0", withCheck(v1alpha1.HealthCheckTCP, func(h *v1alpha1.HealthCheck) { h.Timeout = dur(0) }), []string{"spec.healthCheck.timeout"}},
		{"timeout equal to interval", withCheck(v1alpha1.HealthCheckTCP, func(h *v1alpha1.HealthCheck) {
			h.Interval, h.Timeout = dur(time.Second), dur(time.Second)
		}), []string{"spec.healthCheck.timeout"}},
		{"default timeout above a short interval", withCheck(v1alpha1.HealthCheckTCP, func(h *v1alpha1.HealthCheck) { h.Interval = dur(time.Second) }), []string{"spec.healthCheck.timeout"}},
		{"healthy threshold 0", withCheck(v1alpha1.HealthCheckTCP, func(h *v1alpha1.HealthCheck) { h.HealthyThreshold = new(int32(0)) }), []string{"spec.healthCheck.healthyThreshold"}},
		{"unhealthy threshold 11", withCheck(v1alpha1.HealthCheckTCP, func(h *v1alpha1.HealthCheck) { h.UnhealthyThreshold = new(int32(11)) }), []string{"spec.healthCheck.unhealthyThreshold"}},
		{"jitter 51", withCheck(v1alpha1.HealthCheckTCP, func(h *v1alpha1.HealthCheck) { h.JitterPercent = new(int32(51)) }), []string{"spec.healthCheck.jitterPercent"}},
		{"every error is reported", func(u *v1alpha1.Upstream) {
			u.Name = ""
			u.Spec.OverprovisioningFactor = new(int32(0))
			u.Spec.PanicThreshold = new(int32(200))
			u.Spec.Protocol = "SPDY"
			u.Spec.ConnectTimeout = &metav1.Duration{Duration: 2 * time.Hour}
		}, []string{"metadata.name", "spec.overprovisioningFactor", "spec.panicThreshold", "spec.protocol", "spec.connectTimeout"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := validUpstream()
			tc.mutate(in)
			before := in.DeepCopy()
			got, errs := convert.Upstream(in)
			if !reflect.DeepEqual(fields(errs), tc.want) {
				t.Fatalf("error fields = %q, want %q (errors: %v)", fields(errs), tc.want, errs)
			}
			if !reflect.DeepEqual(got, topology.Upstream{}) {
				t.Errorf("invalid object converted to %+v, want the zero value", got)
			}
			if !reflect.DeepEqual(in, before) {
				t.Errorf("Upstream modified its input")
			}
		})
	}
}

func TestUpstreamValidBoundaries(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*v1alpha1.Upstream)
	}{
		{"opf 1", func(u *v1alpha1.Upstream) { u.Spec.OverprovisioningFactor = new(int32(1)) }},
		{"opf 1000", func(u *v1alpha1.Upstream) { u.Spec.OverprovisioningFactor = new(int32(1000)) }},
		{"threshold 0", func(u *v1alpha1.Upstream) { u.Spec.PanicThreshold = new(int32(0)) }},
		{"threshold 100", func(u *v1alpha1.Upstream) { u.Spec.PanicThreshold = new(int32(100)) }},
		{"connect timeout 1h", func(u *v1alpha1.Upstream) { u.Spec.ConnectTimeout = &metav1.Duration{Duration: time.Hour} }},
		{"connect timeout 1ns", func(u *v1alpha1.Upstream) { u.Spec.ConnectTimeout = &metav1.Duration{Duration: 1} }},
		{"load report interval 1s", withLoadReporting(time.Second)},
		{"load report interval 60s", withLoadReporting(time.Minute)},
		{"service port 1", withService("web", intstr.FromInt32(1))},
		{"service port 65535", withService("web", intstr.FromInt32(65535))},
		{"service port name", withService("web", intstr.FromString("grpc-web"))},
		{"service port name 15 chars", withService("web", intstr.FromString("abcdefghijklmno"))},
		{"TCP check", withCheck(v1alpha1.HealthCheckTCP, nil)},
		{"GRPC check without grpc", withCheck(v1alpha1.HealthCheckGRPC, nil)},
		{"check at the bounds", withCheck(v1alpha1.HealthCheckGRPC, func(h *v1alpha1.HealthCheck) {
			h.GRPC = &v1alpha1.GRPCHealthCheck{Service: strings.Repeat("s", 253)}
			h.Port, h.Interval, h.Timeout = new(int32(65535)), dur(5*time.Minute), dur(5*time.Minute-1)
			h.HealthyThreshold, h.UnhealthyThreshold, h.JitterPercent = new(int32(10)), new(int32(1)), new(int32(50))
		})},
		{"check at the low bounds", withCheck(v1alpha1.HealthCheckHTTP, func(h *v1alpha1.HealthCheck) {
			h.HTTP.Path, h.HTTP.ExpectedStatuses = "/", []v1alpha1.StatusRange{{Start: 100, End: 100}, {Start: 599, End: 599}}
			h.Port, h.Interval, h.Timeout = new(int32(1)), dur(time.Second), dur(1)
			h.HealthyThreshold, h.UnhealthyThreshold, h.JitterPercent = new(int32(1)), new(int32(10)), new(int32(0))
		})},
		{"dotted name", func(u *v1alpha1.Upstream) { u.Name = "checkout.v2" }},
		{"name of 253", func(u *v1alpha1.Upstream) { u.Name = strings.Repeat("a", 253) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := validUpstream()
			tc.mutate(in)
			if _, errs := convert.Upstream(in); len(errs) > 0 {
				t.Fatalf("unexpected errors: %v", errs)
			}
		})
	}
}

func TestUpstreamDefaults(t *testing.T) {
	got, errs := convert.Upstream(&v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "checkout"}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := topology.Upstream{
		Key: topology.Key{Namespace: "default", Name: "checkout"},
		Policy: weights.Policy{
			OverprovisioningFactor: 140,
			PanicThreshold:         50,
			PanicMode:              weights.UseAll,
			DrainingCapacity:       weights.ExcludeDraining,
		},
		HealthAdjustment: topology.ControlPlane,
		LoadBalancing:    "RoundRobin",
		ConnectTimeout:   5 * time.Second,
		Protocol:         "HTTP2",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
}

func TestHealthCheckDefaults(t *testing.T) {
	in := validUpstream()
	withCheck(v1alpha1.HealthCheckHTTP, nil)(in)
	got, errs := convert.Upstream(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := &topology.HealthCheck{
		Type: "HTTP", HTTPPath: "/healthz", ExpectedStatuses: []topology.StatusRange{{Start: 200, End: 200}},
		Interval: 10 * time.Second, Timeout: 2 * time.Second, HealthyThreshold: 2, UnhealthyThreshold: 3, JitterPercent: 10,
	}
	if !reflect.DeepEqual(got.HealthCheck, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got.HealthCheck, want)
	}
	if in.Spec.HealthCheck.Interval != nil {
		t.Errorf("Upstream defaulted its input")
	}
}

func TestHealthCheckSetFields(t *testing.T) {
	in := validUpstream()
	withCheck(v1alpha1.HealthCheckGRPC, func(h *v1alpha1.HealthCheck) {
		h.GRPC = &v1alpha1.GRPCHealthCheck{Service: "shop.Checkout"}
		h.Port, h.Interval, h.Timeout = new(int32(9090)), dur(3*time.Second), dur(500*time.Millisecond)
		h.HealthyThreshold, h.UnhealthyThreshold, h.JitterPercent = new(int32(1)), new(int32(2)), new(int32(0))
	})(in)
	got, errs := convert.Upstream(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := &topology.HealthCheck{
		Type: "GRPC", GRPCService: "shop.Checkout", Port: 9090,
		Interval: 3 * time.Second, Timeout: 500 * time.Millisecond, HealthyThreshold: 1, UnhealthyThreshold: 2,
	}
	if !reflect.DeepEqual(got.HealthCheck, want) {
		t.Errorf("fields:\n got %+v\nwant %+v", got.HealthCheck, want)
	}
}

func withLoadReporting(d time.Duration) func(*v1alpha1.Upstream) {
	return func(u *v1alpha1.Upstream) {
		u.Spec.LoadReporting = &v1alpha1.LoadReporting{Interval: &metav1.Duration{Duration: d}}
	}
}

// TestUpstreamLoadReporting: without loadReporting nothing is reported (a
// zero interval); an empty loadReporting takes the 10 s default; a set
// interval is kept.
func TestUpstreamLoadReporting(t *testing.T) {
	for _, tc := range []struct {
		name string
		lr   *v1alpha1.LoadReporting
		want time.Duration
	}{
		{"absent", nil, 0},
		{"empty", &v1alpha1.LoadReporting{}, 10 * time.Second},
		{"set", &v1alpha1.LoadReporting{Interval: &metav1.Duration{Duration: 3 * time.Second}}, 3 * time.Second},
	} {
		in := validUpstream()
		in.Spec.LoadReporting = tc.lr
		got, errs := convert.Upstream(in)
		if len(errs) > 0 {
			t.Fatalf("%s: %v", tc.name, errs)
		}
		if got.LoadReportInterval != tc.want {
			t.Errorf("%s: interval %v, want %v", tc.name, got.LoadReportInterval, tc.want)
		}
	}
}

func TestUpstreamSetFields(t *testing.T) {
	in := &v1alpha1.Upstream{
		ObjectMeta: meta("catalog"),
		Spec: v1alpha1.UpstreamSpec{
			OverprovisioningFactor: new(int32(100)),
			PanicThreshold:         new(int32(0)),
			PanicMode:              v1alpha1.PanicModeFailClosed,
			DrainingCapacity:       v1alpha1.DrainingCapacityInclude,
			HealthAdjustment:       v1alpha1.HealthAdjustmentProxy,
			LoadBalancing:          v1alpha1.LoadBalancingMaglev,
			ConnectTimeout:         &metav1.Duration{Duration: 250 * time.Millisecond},
			Protocol:               v1alpha1.ProtocolTCP,
			EndpointsFrom:          &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: "catalog", Port: intstr.FromString("http")}},
			AddressPolicy:          &v1alpha1.AddressPolicy{AllowLoopback: true},
		},
	}
	got, errs := convert.Upstream(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := topology.Upstream{
		Key: topology.Key{Namespace: "shop", Name: "catalog"},
		Policy: weights.Policy{
			OverprovisioningFactor: 100,
			PanicThreshold:         0,
			PanicMode:              weights.FailClosed,
			DrainingCapacity:       weights.IncludeDraining,
		},
		HealthAdjustment: topology.Proxy,
		LoadBalancing:    "Maglev",
		ConnectTimeout:   250 * time.Millisecond,
		Protocol:         "TCP",
		AllowLoopback:    true,
		Service:          &topology.ServiceRef{Name: "catalog", Port: "http"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
	// A numeric port keeps its number.
	in.Spec.EndpointsFrom.Service.Port = intstr.FromInt32(8443)
	got, errs = convert.Upstream(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if got.Service == nil || got.Service.Port != "8443" {
		t.Errorf("service = %+v, want port 8443", got.Service)
	}
}

func TestLocalityInvalid(t *testing.T) {
	long := strings.Repeat("r", 129)
	tests := []struct {
		name   string
		mutate func(*v1alpha1.Locality)
		want   []string
	}{
		{"empty name", func(l *v1alpha1.Locality) { l.Name = "" }, []string{"metadata.name"}},
		{"name with slash", func(l *v1alpha1.Locality) { l.Name = "a/b" }, []string{"metadata.name"}},
		{"bad namespace", func(l *v1alpha1.Locality) { l.Namespace = "-shop" }, []string{"metadata.namespace"}},
		{"no upstream", func(l *v1alpha1.Locality) { l.Spec.Upstream = "" }, []string{"spec.upstream"}},
		{"bad upstream", func(l *v1alpha1.Locality) { l.Spec.Upstream = "Checkout" }, []string{"spec.upstream"}},
		{"priority 128", func(l *v1alpha1.Locality) { l.Spec.Priority = new(int32(128)) }, []string{"spec.priority"}},
		{"priority negative", func(l *v1alpha1.Locality) { l.Spec.Priority = new(int32(-1)) }, []string{"spec.priority"}},
		{"weight 0", func(l *v1alpha1.Locality) { l.Spec.Weight = new(int64(0)) }, []string{"spec.weight"}},
		{"weight 2^32", func(l *v1alpha1.Locality) { l.Spec.Weight = new(int64(1 << 32)) }, []string{"spec.weight"}},
		{"region too long", func(l *v1alpha1.Locality) { l.Spec.Region = long }, []string{"spec.region"}},
		{"zone too long", func(l *v1alpha1.Locality) { l.Spec.Zone = long }, []string{"spec.zone"}},
		{"subZone too long", func(l *v1alpha1.Locality) { l.Spec.SubZone = long }, []string{"spec.subZone"}},
		{"region of 129 characters", func(l *v1alpha1.Locality) { l.Spec.Region = strings.Repeat("ü", 129) }, []string{"spec.region"}},
		{"every error is reported", func(l *v1alpha1.Locality) {
			l.Spec.Upstream = ""
			l.Spec.Priority = new(int32(500))
			l.Spec.Weight = new(int64(-3))
		}, []string{"spec.upstream", "spec.priority", "spec.weight"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := validLocality()
			tc.mutate(in)
			got, errs := convert.Locality(in)
			if !reflect.DeepEqual(fields(errs), tc.want) {
				t.Fatalf("error fields = %q, want %q (errors: %v)", fields(errs), tc.want, errs)
			}
			if !reflect.DeepEqual(got, topology.Locality{}) {
				t.Errorf("invalid object converted to %+v, want the zero value", got)
			}
		})
	}
}

func TestLocalityDefaultsAndValues(t *testing.T) {
	got, errs := convert.Locality(&v1alpha1.Locality{
		ObjectMeta: metav1.ObjectMeta{Name: "l"},
		Spec:       v1alpha1.LocalitySpec{Upstream: "u"},
	})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := topology.Locality{Key: topology.Key{Namespace: "default", Name: "l"}, Upstream: "u", Priority: 0, Weight: 1}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults: got %+v, want %+v", got, want)
	}

	in := validLocality()
	in.Spec.Priority = new(int32(127))
	in.Spec.Weight = new(int64(v1alpha1.MaxWeight))
	// maxLength counts characters, as the apiserver does: 128 two-byte runes fit.
	in.Spec.LocalityID = v1alpha1.LocalityID{Region: "eu-west", Zone: strings.Repeat("ü", 128), SubZone: strings.Repeat("s", 128)}
	got, errs = convert.Locality(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want = topology.Locality{
		Key: topology.Key{Namespace: "shop", Name: "checkout-eu"}, Upstream: "checkout", Priority: 127,
		Locality: weights.Locality{Region: "eu-west", Zone: strings.Repeat("ü", 128), SubZone: strings.Repeat("s", 128)},
		Weight:   4294967295,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestEndpointSetInvalid(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*v1alpha1.EndpointSet)
		want   []string
	}{
		{"empty name", func(s *v1alpha1.EndpointSet) { s.Name = "" }, []string{"metadata.name"}},
		{"bad namespace", func(s *v1alpha1.EndpointSet) { s.Namespace = "shop_eu" }, []string{"metadata.namespace"}},
		{"no upstream", func(s *v1alpha1.EndpointSet) { s.Spec.Upstream = "" }, []string{"spec.upstream"}},
		{"region too long", func(s *v1alpha1.EndpointSet) { s.Spec.Locality.Region = strings.Repeat("x", 129) }, []string{"spec.locality.region"}},
		{"priority 128", func(s *v1alpha1.EndpointSet) { s.Spec.Priority = new(int32(128)) }, []string{"spec.priority"}},
		{"priority negative", func(s *v1alpha1.EndpointSet) { s.Spec.Priority = new(int32(-1)) }, []string{"spec.priority"}},
		{"endpoint weight 0", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[1].Weight = new(int64(0)) }, []string{"spec.endpoints[1].weight"}},
		{"endpoint weight 2^32", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[1].Weight = new(int64(1 << 32)) }, []string{"spec.endpoints[1].weight"}},
		{"endpoint port 0", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[0].Port = 0 }, []string{"spec.endpoints[0].port"}},
		{"endpoint port 65536", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[2].Port = 65536 }, []string{"spec.endpoints[2].port"}},
		{"empty address", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[2].Address = "" }, []string{"spec.endpoints[2].address"}},
		{"uppercase DNS address", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[2].Address = "Backend.example.com" }, []string{"spec.endpoints[2].address"}},
		{"DNS name", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[2].Address = "vm1.example.internal" }, []string{"spec.endpoints[2].address"}},
		{"address with port", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[0].Address = "10.0.0.1:80" }, []string{"spec.endpoints[0].address"}},
		{"address too long", func(s *v1alpha1.EndpointSet) {
			s.Spec.Endpoints[0].Address = strings.Repeat("a.", 127)
		}, []string{"spec.endpoints[0].address"}},
		// CEL isIP() rejects zones and IPv4-mapped IPv6 addresses.
		{"IPv6 with zone", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[0].Address = "fe80::1%eth0" }, []string{"spec.endpoints[0].address"}},
		{"IPv4-mapped IPv6", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[0].Address = "::ffff:10.0.0.1" }, []string{"spec.endpoints[0].address"}},
		{"admin state", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[1].AdminState = "Drained" }, []string{"spec.endpoints[1].adminState"}},
		{"duplicate endpoint", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[1].Address = "10.0.0.1" }, []string{"spec.endpoints[1]"}},
		{"too many endpoints", func(s *v1alpha1.EndpointSet) {
			s.Spec.Endpoints = make([]v1alpha1.Endpoint, v1alpha1.MaxEndpointsPerSet+1)
			for i := range s.Spec.Endpoints {
				s.Spec.Endpoints[i] = v1alpha1.Endpoint{Address: "10.0.0.1", Port: int32(i + 1)}
			}
		}, []string{"spec.endpoints"}},
		{"health for an unknown endpoint", func(s *v1alpha1.EndpointSet) {
			s.Status.Health = []v1alpha1.EndpointHealth{{Address: "10.9.9.9", Port: 8080, Probe: v1alpha1.ProbeHealthy}}
		}, []string{"status.health[0]"}},
		{"health for a known address on another port", func(s *v1alpha1.EndpointSet) {
			s.Status.Health = []v1alpha1.EndpointHealth{{Address: "10.0.0.1", Port: 8080}, {Address: "10.0.0.1", Port: 8081}}
		}, []string{"status.health[1]"}},
		{"duplicate health", func(s *v1alpha1.EndpointSet) {
			s.Status.Health = []v1alpha1.EndpointHealth{{Address: "10.0.0.2", Port: 8080}, {Address: "10.0.0.2", Port: 8080, Probe: v1alpha1.ProbeUnhealthy}}
		}, []string{"status.health[1]"}},
		{"probe state", func(s *v1alpha1.EndpointSet) {
			s.Status.Health = []v1alpha1.EndpointHealth{{Address: "10.0.0.2", Port: 8080, Probe: "Sick"}}
		}, []string{"status.health[0].probe"}},
		{"circuit state", func(s *v1alpha1.EndpointSet) {
			s.Status.Health = []v1alpha1.EndpointHealth{{Address: "10.0.0.2", Port: 8080}, {Address: "10.0.0.1", Port: 8080, Circuit: "HalfOpen"}}
		}, []string{"status.health[1].circuit"}},
		{"hashKey with a space", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[1].HashKey = "db 1" }, []string{"spec.endpoints[1].hashKey"}},
		{"hashKey ending in a hyphen", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[1].HashKey = "db-" }, []string{"spec.endpoints[1].hashKey"}},
		{"hashKey of 254", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[1].HashKey = strings.Repeat("k", 254) }, []string{"spec.endpoints[1].hashKey"}},
		{"generation with a slash", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[2].Generation = "a/b" }, []string{"spec.endpoints[2].generation"}},
		{"generation of 129", func(s *v1alpha1.EndpointSet) { s.Spec.Endpoints[2].Generation = strings.Repeat("g", 129) }, []string{"spec.endpoints[2].generation"}},
		{"every error is reported", func(s *v1alpha1.EndpointSet) {
			s.Spec.Endpoints[0].Port = -1
			s.Spec.Endpoints[1].Weight = new(int64(0))
			s.Spec.Endpoints[2].AdminState = "Gone"
			s.Status.Health = []v1alpha1.EndpointHealth{{Address: "nowhere", Port: 1}}
		}, []string{"spec.endpoints[0].port", "spec.endpoints[1].weight", "spec.endpoints[2].adminState", "status.health[0]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := validEndpointSet()
			tc.mutate(in)
			before := in.DeepCopy()
			got, errs := convert.EndpointSet(in)
			if !reflect.DeepEqual(fields(errs), tc.want) {
				t.Fatalf("error fields = %q, want %q (errors: %v)", fields(errs), tc.want, errs)
			}
			if !reflect.DeepEqual(got, topology.EndpointSet{}) {
				t.Errorf("invalid object converted to %+v, want the zero value", got)
			}
			if !reflect.DeepEqual(in, before) {
				t.Errorf("EndpointSet modified its input")
			}
		})
	}
}

// TestEndpointSetRefusedAddresses: what EDS cannot carry (a DNS name) and
// the ranges Kubernetes refuses in EndpointSlices are refused with the field
// and the reason; loopback passes here, as the CRD lets it, and is for the
// topology to refuse unless the Upstream allows it.
func TestEndpointSetRefusedAddresses(t *testing.T) {
	for _, tc := range []struct{ address, says string }{
		{"vm1.example.internal", "EDS carries IP addresses only"},
		{"backend", "EDS carries IP addresses only"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"224.0.0.1", "multicast"},
		{"239.1.2.3", "multicast"},
		{"ff02::1", "multicast"},
		{"255.255.255.255", "broadcast"},
	} {
		t.Run(tc.address, func(t *testing.T) {
			in := validEndpointSet()
			in.Spec.Endpoints[1].Address = tc.address
			_, errs := convert.EndpointSet(in)
			if len(errs) != 1 || errs[0].Field != "spec.endpoints[1].address" || !strings.Contains(errs[0].Error(), tc.says) {
				t.Fatalf("address %q: got %v, want one error on spec.endpoints[1].address saying %q", tc.address, errs, tc.says)
			}
		})
	}
}

func TestEndpointSetValidAddresses(t *testing.T) {
	for _, a := range []string{"10.0.0.1", "2001:db8::1", "192.168.1.1", "100.64.0.1", "fd00::1", "::1", "127.0.0.1", "127.255.255.254"} {
		t.Run(a, func(t *testing.T) {
			in := validEndpointSet()
			in.Spec.Endpoints[2].Address = a
			if _, errs := convert.EndpointSet(in); len(errs) > 0 {
				t.Fatalf("address %q: %v", a, errs)
			}
		})
	}
}

func TestEndpointSetDefaults(t *testing.T) {
	in := &v1alpha1.EndpointSet{
		ObjectMeta: metav1.ObjectMeta{Name: "s"},
		Spec: v1alpha1.EndpointSetSpec{
			Upstream:  "u",
			Endpoints: []v1alpha1.Endpoint{{Address: "10.0.0.1", Port: 80}},
		},
	}
	got, errs := convert.EndpointSet(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := topology.EndpointSet{
		Key: topology.Key{Namespace: "default", Name: "s"}, Kind: topology.KindEndpointSet, Upstream: "u",
		Endpoints: []topology.Endpoint{{Address: "10.0.0.1", Port: 80, Weight: 1, Admin: weights.Ready}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
	if got.Priority != nil {
		t.Errorf("priority = %d, want none (it comes from a Locality)", *got.Priority)
	}
	if in.Spec.Endpoints[0].Weight != nil || in.Spec.Endpoints[0].AdminState != "" {
		t.Errorf("EndpointSet defaulted its input: %+v", in.Spec.Endpoints[0])
	}
	// An empty set is valid.
	if _, errs := convert.EndpointSet(&v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: v1alpha1.EndpointSetSpec{Upstream: "u"}}); len(errs) > 0 {
		t.Errorf("empty set: %v", errs)
	}
}

func TestEndpointSetValues(t *testing.T) {
	in := validEndpointSet()
	in.Spec.Priority = new(int32(3))
	in.Spec.Endpoints[0].Weight = new(int64(v1alpha1.MaxWeight))
	in.Spec.Endpoints[1].AdminState = v1alpha1.AdminStateDraining
	in.Spec.Endpoints[2].AdminState = v1alpha1.AdminStateUnavailable
	got, errs := convert.EndpointSet(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if got.Priority == nil || *got.Priority != 3 {
		t.Errorf("priority = %v, want 3", got.Priority)
	}
	if got.Locality != (weights.Locality{Region: "eu-west", Zone: "eu-west-1a"}) {
		t.Errorf("locality = %+v", got.Locality)
	}
	wantEP := []topology.Endpoint{
		{Address: "10.0.0.1", Port: 8080, Weight: 4294967295, Admin: weights.Ready},
		{Address: "10.0.0.2", Port: 8080, Weight: 1, Admin: weights.Draining},
		{Address: "2001:db8::9", Port: 9090, Weight: 1, Admin: weights.Unavailable},
	}
	if !reflect.DeepEqual(got.Endpoints, wantEP) {
		t.Errorf("endpoints:\n got %+v\nwant %+v", got.Endpoints, wantEP)
	}
	// Mutating the input afterwards must not change the result.
	*in.Spec.Priority = 9
	if *got.Priority != 3 {
		t.Errorf("result shares the input's priority pointer")
	}
}

func TestEndpointSetHealthFromStatus(t *testing.T) {
	in := validEndpointSet()
	in.Status.Health = []v1alpha1.EndpointHealth{
		// Out of spec order on purpose: health is matched by address and port.
		{Address: "2001:db8::9", Port: 9090, OutlierEjected: true},
		{Address: "10.0.0.2", Port: 8080, Probe: v1alpha1.ProbeUnhealthy, Circuit: v1alpha1.CircuitOpen},
		{Address: "10.0.0.1", Port: 8080, Probe: v1alpha1.ProbeHealthy},
	}
	got, errs := convert.EndpointSet(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	const origin = "EndpointSet shop/checkout-eu status"
	want := []topology.Health{
		{Probe: weights.ProbeHealthy, ProbeOrigin: origin, Circuit: weights.CircuitClosed, CircuitOrigin: origin, OutlierOrigin: origin},
		{Probe: weights.ProbeUnhealthy, ProbeOrigin: origin, Circuit: weights.CircuitOpen, CircuitOrigin: origin, OutlierOrigin: origin},
		{Probe: weights.ProbeUnknown, ProbeOrigin: origin, Circuit: weights.CircuitClosed, CircuitOrigin: origin, Ejected: true, OutlierOrigin: origin},
	}
	for i, e := range got.Endpoints {
		if !reflect.DeepEqual(e.Health, want[i]) {
			t.Errorf("endpoint %d (%s:%d) health:\n got %+v\nwant %+v", i, e.Address, e.Port, e.Health, want[i])
		}
		// Health never changes the admin state.
		if e.Admin != weights.Ready {
			t.Errorf("endpoint %d admin = %v, want Ready", i, e.Admin)
		}
	}

	// An endpoint without a health entry keeps the zero Health: no origin.
	in.Status.Health = in.Status.Health[1:2]
	got, errs = convert.EndpointSet(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if got.Endpoints[0].Health != (topology.Health{}) || got.Endpoints[2].Health != (topology.Health{}) {
		t.Errorf("endpoints without status health: %+v, %+v, want zero", got.Endpoints[0].Health, got.Endpoints[2].Health)
	}
	if got.Endpoints[1].Health.Probe != weights.ProbeUnhealthy || got.Endpoints[1].Health.ProbeOrigin != origin {
		t.Errorf("endpoint 1 health = %+v", got.Endpoints[1].Health)
	}
}

func TestKey(t *testing.T) {
	if got := convert.Key("", "a"); got != (topology.Key{Namespace: "default", Name: "a"}) {
		t.Errorf("Key(\"\", a) = %v", got)
	}
	if got := convert.Key("ns", "a"); got != (topology.Key{Namespace: "ns", Name: "a"}) {
		t.Errorf("Key(ns, a) = %v", got)
	}
}

func withAffinity(mode string, failover ...string) func(*v1alpha1.Upstream) {
	return func(u *v1alpha1.Upstream) {
		u.Spec.LocalityAffinity = &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityMode(mode), FailoverRegions: failover}
	}
}

func TestUpstreamAffinity(t *testing.T) {
	for _, c := range []struct {
		name string
		in   *v1alpha1.LocalityAffinity
		want *topology.Affinity
	}{
		// absent: nothing asks for a mode, so an imported Service's
		// trafficDistribution may decide (pkg/kube/source)
		{"absent", nil, nil},
		// present: the Upstream sets its mode, None included, and that
		// stays visible so a Service's preference cannot override it
		{"explicit None is kept", &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityNone},
			&topology.Affinity{Mode: affinity.None, Origin: topology.OriginLocalityAffinity}},
		{"empty mode is an explicit None", &v1alpha1.LocalityAffinity{},
			&topology.Affinity{Mode: affinity.None, Origin: topology.OriginLocalityAffinity}},
		{"PreferSameZone with failover", &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityPreferSameZone, FailoverRegions: []string{"us", "ap"}},
			&topology.Affinity{Mode: affinity.PreferSameZone, FailoverRegions: []string{"us", "ap"}, Origin: topology.OriginLocalityAffinity}},
		{"PreferSameRegion", &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityPreferSameRegion},
			&topology.Affinity{Mode: affinity.PreferSameRegion, Origin: topology.OriginLocalityAffinity}},
		{"Balanced", &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityBalanced},
			&topology.Affinity{Mode: affinity.Balanced, Origin: topology.OriginLocalityAffinity}},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := validUpstream()
			u.Spec.LocalityAffinity = c.in
			got, errs := convert.Upstream(u)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if !reflect.DeepEqual(got.Affinity, c.want) {
				t.Errorf("affinity %+v, want %+v", got.Affinity, c.want)
			}
			if c.want != nil && got.ModeOf() != c.want.Mode {
				t.Errorf("ModeOf %v, want %v", got.ModeOf(), c.want.Mode)
			}
		})
	}
}

// withOutlier sets spec.loadReporting and spec.outlierDetection, then lets f
// change the detection.
func withOutlier(f func(*v1alpha1.OutlierDetection)) func(*v1alpha1.Upstream) {
	return func(u *v1alpha1.Upstream) {
		u.Spec.LoadReporting = &v1alpha1.LoadReporting{}
		o := &v1alpha1.OutlierDetection{}
		if f != nil {
			f(o)
		}
		u.Spec.OutlierDetection = o
	}
}

// TestOutlierDetection: an empty outlierDetection takes the documented
// defaults, set fields are kept, and every bound is refused naming its field.
func TestOutlierDetection(t *testing.T) {
	in := validUpstream()
	withOutlier(nil)(in)
	got, errs := convert.Upstream(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := &topology.OutlierDetection{ErrorPercent: 20, MinRequestVolume: 100, MinReporters: 3,
		BaseEjectionTime: 30 * time.Second, MaxEjectionTime: 300 * time.Second, MaxEjectionPercent: 10}
	if !reflect.DeepEqual(got.OutlierDetection, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got.OutlierDetection, want)
	}
	if in.Spec.OutlierDetection.ErrorPercent != nil {
		t.Errorf("Upstream defaulted its input")
	}
	in = validUpstream()
	withOutlier(func(o *v1alpha1.OutlierDetection) {
		o.ErrorPercent, o.MinRequestVolume, o.MinReporters = new(int32(100)), new(int32(1_000_000_000)), new(int32(1))
		o.BaseEjectionTime, o.MaxEjectionTime, o.MaxEjectionPercent = dur(time.Second), dur(time.Second), new(int32(0))
	})(in)
	if got, errs = convert.Upstream(in); len(errs) > 0 {
		t.Fatal(errs)
	}
	want = &topology.OutlierDetection{ErrorPercent: 100, MinRequestVolume: 1_000_000_000, MinReporters: 1,
		BaseEjectionTime: time.Second, MaxEjectionTime: time.Second}
	if !reflect.DeepEqual(got.OutlierDetection, want) {
		t.Errorf("set fields:\n got %+v\nwant %+v", got.OutlierDetection, want)
	}

	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.Upstream)
		want   []string
	}{
		{"without loadReporting", func(u *v1alpha1.Upstream) {
			withOutlier(nil)(u)
			u.Spec.LoadReporting = nil
		}, []string{"spec.loadReporting"}},
		{"errorPercent 0", withOutlier(func(o *v1alpha1.OutlierDetection) { o.ErrorPercent = new(int32(0)) }), []string{"spec.outlierDetection.errorPercent"}},
		{"errorPercent 101", withOutlier(func(o *v1alpha1.OutlierDetection) { o.ErrorPercent = new(int32(101)) }), []string{"spec.outlierDetection.errorPercent"}},
		{"minRequestVolume 0", withOutlier(func(o *v1alpha1.OutlierDetection) { o.MinRequestVolume = new(int32(0)) }), []string{"spec.outlierDetection.minRequestVolume"}},
		{"minRequestVolume above 1e9", withOutlier(func(o *v1alpha1.OutlierDetection) { o.MinRequestVolume = new(int32(1_000_000_001)) }), []string{"spec.outlierDetection.minRequestVolume"}},
		{"minReporters 1001", withOutlier(func(o *v1alpha1.OutlierDetection) { o.MinReporters = new(int32(1001)) }), []string{"spec.outlierDetection.minReporters"}},
		{"maxEjectionPercent -1", withOutlier(func(o *v1alpha1.OutlierDetection) { o.MaxEjectionPercent = new(int32(-1)) }), []string{"spec.outlierDetection.maxEjectionPercent"}},
		{"base below 1s", withOutlier(func(o *v1alpha1.OutlierDetection) { o.BaseEjectionTime = dur(999 * time.Millisecond) }), []string{"spec.outlierDetection.baseEjectionTime"}},
		{"base above 1h", withOutlier(func(o *v1alpha1.OutlierDetection) {
			o.BaseEjectionTime, o.MaxEjectionTime = dur(time.Hour+1), dur(2*time.Hour)
		}), []string{"spec.outlierDetection.baseEjectionTime"}},
		{"max below base", withOutlier(func(o *v1alpha1.OutlierDetection) { o.BaseEjectionTime = dur(10 * time.Minute) }), []string{"spec.outlierDetection.maxEjectionTime"}},
		{"max above 24h", withOutlier(func(o *v1alpha1.OutlierDetection) { o.MaxEjectionTime = dur(24*time.Hour + 1) }), []string{"spec.outlierDetection.maxEjectionTime"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := validUpstream()
			tc.mutate(in)
			_, errs := convert.Upstream(in)
			if !reflect.DeepEqual(fields(errs), tc.want) {
				t.Fatalf("error fields = %q, want %q (errors: %v)", fields(errs), tc.want, errs)
			}
		})
	}
}

// An endpoint's hashKey and generation at their bounds are carried to the
// topology as they are; an endpoint without them has neither.
func TestEndpointSetHashKeyAndGeneration(t *testing.T) {
	in := validEndpointSet()
	in.Spec.Endpoints[0].HashKey = "db-0.db.shop.svc:6379/" + strings.Repeat("k", 253-len("db-0.db.shop.svc:6379/"))
	in.Spec.Endpoints[0].Generation = "3f9c2d4e-5b6a-4c7d-8e9f-0a1b2c3d4e5f"
	in.Spec.Endpoints[1].Generation = strings.Repeat("g", 128)
	got, errs := convert.EndpointSet(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if e := got.Endpoints[0]; e.HashKey != in.Spec.Endpoints[0].HashKey || e.Generation != in.Spec.Endpoints[0].Generation {
		t.Errorf("endpoint 0 = %+v", e)
	}
	if e := got.Endpoints[1]; e.HashKey != "" || len(e.Generation) != 128 {
		t.Errorf("endpoint 1 = %+v", e)
	}
	if e := got.Endpoints[2]; e.HashKey != "" || e.Generation != "" {
		t.Errorf("endpoint 2 = %+v, want neither", e)
	}
}
