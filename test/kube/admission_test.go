package kube_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
)

func upstreamWith(ns string, f func(*v1alpha1.UpstreamSpec)) *v1alpha1.Upstream {
	u := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{GenerateName: "u-", Namespace: ns}}
	f(&u.Spec)
	return u
}

func localityWith(ns string, f func(*v1alpha1.LocalitySpec)) *v1alpha1.Locality {
	l := &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{GenerateName: "l-", Namespace: ns}, Spec: v1alpha1.LocalitySpec{Upstream: "echo"}}
	f(&l.Spec)
	return l
}

func endpointSetWith(ns string, f func(*v1alpha1.EndpointSetSpec)) *v1alpha1.EndpointSet {
	s := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{GenerateName: "s-", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{
		Upstream: "echo",
		Endpoints: []v1alpha1.Endpoint{
			{Address: "10.0.0.1", Port: 8080},
		},
	}}
	f(&s.Spec)
	return s
}

func domainWith(ns string, f func(*v1alpha1.SpatialDomainSpec)) *v1alpha1.SpatialDomain {
	d := &v1alpha1.SpatialDomain{ObjectMeta: metav1.ObjectMeta{GenerateName: "d-", Namespace: ns}, Spec: v1alpha1.SpatialDomainSpec{
		Replicas: []v1alpha1.SpatialReplica{
			{Name: "eu-1", Upstream: "cadastre-eu", Region: "eu-west"},
			{Name: "us-1", Upstream: "cadastre-us", Region: "us-east"},
		},
		Products: []v1alpha1.SpatialProduct{
			{Name: "parcels", PathPrefix: "/parcels", AllowedRegions: []string{"eu-west", "us-east"}},
			{Name: "owners", PathPrefix: "/owners", AllowedRegions: []string{"eu-west"}},
		},
	}}
	f(&d.Spec)
	return d
}

func partitionWith(ns string, f func(*v1alpha1.PartitionSpec)) *v1alpha1.Partition {
	p := &v1alpha1.Partition{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns}, Spec: v1alpha1.PartitionSpec{
		Domain:   "cadastre",
		Extent:   v1alpha1.PartitionExtent{West: -10, South: 35, East: 30, North: 70},
		Replicas: []string{"eu-1"},
	}}
	f(&p.Spec)
	return p
}

// TestAdmission: the CRD schema and CEL rules turn bad objects away at the
// real apiserver, naming the field, and the apiserver applies the defaults.
func TestAdmission(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	for _, tc := range badObjects(ns) {
		t.Run(tc.name, func(t *testing.T) {
			err := k8s.Create(t.Context(), tc.obj)
			if err == nil {
				t.Fatalf("the apiserver accepted %s %s", tc.obj.GetObjectKind().GroupVersionKind().Kind, tc.obj.GetName())
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.also) {
				t.Fatalf("the rejection does not name %s (and say %q):\n%v", tc.field, tc.also, err)
			}
			t.Logf("rejected: %v", err)
		})
	}

	// the boundaries themselves are accepted
	for _, tc := range goodObjects(ns) {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			if err := k8s.Create(t.Context(), tc.obj); err != nil {
				t.Fatalf("rejected: %v", err)
			}
		})
	}

	t.Run("defaults", func(t *testing.T) {
		u := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: ns}}
		if err := k8s.Create(t.Context(), u); err != nil {
			t.Fatal(err)
		}
		var got v1alpha1.Upstream
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(u), &got); err != nil {
			t.Fatal(err)
		}
		s := got.Spec
		for _, c := range []struct {
			field     string
			got, want any
		}{
			{"overprovisioningFactor", deref(s.OverprovisioningFactor), v1alpha1.DefaultOverprovisioningFactor},
			{"panicThreshold", deref(s.PanicThreshold), v1alpha1.DefaultPanicThreshold},
			{"panicMode", s.PanicMode, v1alpha1.PanicModeUseAll},
			{"drainingCapacity", s.DrainingCapacity, v1alpha1.DrainingCapacityExclude},
			{"healthAdjustment", s.HealthAdjustment, v1alpha1.HealthAdjustmentControlPlane},
			{"loadBalancing", s.LoadBalancing, v1alpha1.LoadBalancingRoundRobin},
			{"protocol", s.Protocol, v1alpha1.ProtocolHTTP2},
			{"connectTimeout", deref(s.ConnectTimeout).Duration, 5 * time.Second},
		} {
			if c.got != c.want {
				t.Errorf("Upstream spec.%s defaulted to %v, want %v", c.field, c.got, c.want)
			}
		}
		// the Go defaults (for objects read without an apiserver) agree
		var local v1alpha1.Upstream
		local.Default()
		if local.Spec.OverprovisioningFactor == nil || *local.Spec.OverprovisioningFactor != *s.OverprovisioningFactor ||
			local.Spec.ConnectTimeout.Duration != s.ConnectTimeout.Duration || local.Spec.PanicMode != s.PanicMode {
			t.Errorf("Upstream.Default() gives %+v, the apiserver %+v", local.Spec, s)
		}

		// spec.healthCheck's defaults, the apiserver's and Go's
		hc := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "checked", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
			HealthCheck: &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP, HTTP: &v1alpha1.HTTPHealthCheck{Path: "/healthz"}}}}
		want := hc.Spec.HealthCheck.DeepCopy()
		want.Default()
		if err := k8s.Create(t.Context(), hc); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(hc), &got); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got.Spec.HealthCheck, want) {
			t.Errorf("spec.healthCheck defaulted by the apiserver to %+v, by HealthCheck.Default() to %+v", got.Spec.HealthCheck, want)
		}

		// spec.outlierDetection's defaults, the apiserver's and Go's
		od := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "ejecting", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
			LoadReporting: &v1alpha1.LoadReporting{}, OutlierDetection: &v1alpha1.OutlierDetection{}}}
		wantOD := od.Spec.OutlierDetection.DeepCopy()
		wantOD.Default()
		if err := k8s.Create(t.Context(), od); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(od), &got); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got.Spec.OutlierDetection, wantOD) {
			t.Errorf("spec.outlierDetection defaulted by the apiserver to %+v, by OutlierDetection.Default() to %+v", got.Spec.OutlierDetection, wantOD)
		}

		// spec.retries's defaults, the apiserver's and Go's
		rp := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: "retrying", Namespace: ns}, Spec: v1alpha1.UpstreamSpec{
			Retries: &v1alpha1.RetryPolicy{RetryOn: []v1alpha1.RetryCondition{v1alpha1.RetryOnUnavailable},
				Backoff: &v1alpha1.RetryBackoff{}, Budget: &v1alpha1.RetryBudget{}}}}
		wantRP := rp.Spec.Retries.DeepCopy()
		wantRP.Default()
		if stored := storedSpec(t, rp).Retries; !equality.Semantic.DeepEqual(stored, wantRP) {
			t.Errorf("spec.retries defaulted by the apiserver to %+v, by RetryPolicy.Default() to %+v", stored, wantRP)
		}

		l := &v1alpha1.Locality{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns}, Spec: v1alpha1.LocalitySpec{Upstream: "empty"}}
		if err := k8s.Create(t.Context(), l); err != nil {
			t.Fatal(err)
		}
		if deref(l.Spec.Priority) != 0 || deref(l.Spec.Weight) != 1 {
			t.Errorf("Locality defaults: priority %v weight %v, want 0 and 1", l.Spec.Priority, l.Spec.Weight)
		}

		es := &v1alpha1.EndpointSet{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns}, Spec: v1alpha1.EndpointSetSpec{
			Upstream: "empty", Endpoints: []v1alpha1.Endpoint{{Address: "10.0.0.1", Port: 8080}},
		}}
		if err := k8s.Create(t.Context(), es); err != nil {
			t.Fatal(err)
		}
		var gotES v1alpha1.EndpointSet
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(es), &gotES); err != nil {
			t.Fatal(err)
		}
		ep := gotES.Spec.Endpoints[0]
		if deref(ep.Weight) != 1 || ep.AdminState != v1alpha1.AdminStateReady {
			t.Errorf("endpoint defaults: weight %v adminState %q, want 1 and Ready", ep.Weight, ep.AdminState)
		}
		if gotES.Spec.Priority != nil {
			t.Errorf("EndpointSet spec.priority defaulted to %d; it must stay unset so the Locality decides", *gotES.Spec.Priority)
		}

		d := domainWith(ns, func(*v1alpha1.SpatialDomainSpec) {})
		if err := k8s.Create(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		var gotD v1alpha1.SpatialDomain
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(d), &gotD); err != nil {
			t.Fatal(err)
		}
		var localD v1alpha1.SpatialDomain
		localD.Default()
		if deref(gotD.Spec.GridDegrees) != v1alpha1.DefaultGridDegrees || deref(gotD.Spec.MaxCells) != v1alpha1.DefaultMaxCells ||
			*localD.Spec.GridDegrees != *gotD.Spec.GridDegrees || *localD.Spec.MaxCells != *gotD.Spec.MaxCells {
			t.Errorf("SpatialDomain defaults: gridDegrees %v maxCells %v, want %d and %d (Default() gives %d and %d)",
				gotD.Spec.GridDegrees, gotD.Spec.MaxCells, v1alpha1.DefaultGridDegrees, v1alpha1.DefaultMaxCells,
				*localD.Spec.GridDegrees, *localD.Spec.MaxCells)
		}
		if gotD.Spec.LocalityCapPercent != nil {
			t.Errorf("SpatialDomain spec.localityCapPercent defaulted to %d; absent must stay absent (no cap)", *gotD.Spec.LocalityCapPercent)
		}
	})
}

// serviceOn imports Service echo on port.
func serviceOn(port intstr.IntOrString) *v1alpha1.EndpointsFrom {
	return &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: "echo", Port: port}}
}

// importing imports Service echo from the clusters cs.
func importing(ns string, cs ...v1alpha1.ClusterImport) *v1alpha1.Upstream {
	return upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
		s.EndpointsFrom = serviceOn(intstr.FromInt32(80))
		s.EndpointsFrom.Clusters = cs
	})
}

// httpCheckWith is an Upstream with an HTTP health check, changed by f.
func httpCheckWith(ns string, f func(*v1alpha1.HealthCheck)) *v1alpha1.Upstream {
	return upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
		s.HealthCheck = &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP, HTTP: &v1alpha1.HTTPHealthCheck{Path: "/healthz"}}
		f(s.HealthCheck)
	})
}

// outlierWith is an Upstream with load reporting and outlier detection, changed by f.
func outlierWith(ns string, f func(*v1alpha1.OutlierDetection)) *v1alpha1.Upstream {
	return upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
		s.LoadReporting = &v1alpha1.LoadReporting{}
		s.OutlierDetection = &v1alpha1.OutlierDetection{}
		f(s.OutlierDetection)
	})
}

// storedSpec creates u and returns its spec as the apiserver stored it.
func storedSpec(t *testing.T, u *v1alpha1.Upstream) v1alpha1.UpstreamSpec {
	t.Helper()
	if err := k8s.Create(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.Upstream
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(u), &got); err != nil {
		t.Fatal(err)
	}
	return got.Spec
}

// badObject is an object the CRD schema or a CEL rule refuses.
type badObject struct {
	name  string
	obj   client.Object
	field string // the apiserver's message must name it
	also  string // and say this
}

// badObjects are the admission suite's refusals, in namespace ns.
func badObjects(ns string) []badObject {
	return []badObject{
		{"overprovisioningFactor 0", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.OverprovisioningFactor = new(int32(0)) }), "spec.overprovisioningFactor", "greater than or equal to 1"},
		{"overprovisioningFactor 1001", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.OverprovisioningFactor = new(int32(1001)) }), "spec.overprovisioningFactor", "less than or equal to 1000"},
		{"panicThreshold 101", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.PanicThreshold = new(int32(101)) }), "spec.panicThreshold", "less than or equal to 100"},
		{"panicMode not in the enum", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.PanicMode = "Sometimes" }), "spec.panicMode", `"UseAll"`},
		{"connectTimeout 0s", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.ConnectTimeout = &metav1.Duration{} }), "spec.connectTimeout", "above 0s and at most 1h"},
		{"connectTimeout 2h", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.ConnectTimeout = &metav1.Duration{Duration: 2 * time.Hour} }), "spec.connectTimeout", "above 0s and at most 1h"},
		{"service port 0", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.EndpointsFrom = serviceOn(intstr.FromInt32(0)) }), "spec.endpointsFrom.service.port", "1-65535"},
		{"service port 70000", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.EndpointsFrom = serviceOn(intstr.FromInt32(70000)) }), "spec.endpointsFrom.service.port", "1-65535"},
		{`service port "8080" (a string of digits)`, upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.EndpointsFrom = serviceOn(intstr.FromString("8080")) }), "spec.endpointsFrom.service.port", "at least one letter"},
		{"localityAffinity mode not in the enum", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.LocalityAffinity = &v1alpha1.LocalityAffinity{Mode: "SameZone"}
		}), "spec.localityAffinity.mode", `"PreferSameZone"`},
		{"failoverRegions under Balanced", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.LocalityAffinity = &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityBalanced, FailoverRegions: []string{"us"}}
		}), "spec.localityAffinity", "PreferSameZone and PreferSameRegion only"},
		{"failoverRegions twice the same", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.LocalityAffinity = &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityPreferSameZone, FailoverRegions: []string{"us", "us"}}
		}), "spec.localityAffinity.failoverRegions[1]", "Duplicate value"},
		{"Balanced under healthAdjustment Proxy", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.LocalityAffinity = &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityBalanced}
			s.HealthAdjustment = v1alpha1.HealthAdjustmentProxy
		}), "spec", "Balanced needs healthAdjustment ControlPlane"},
		{`exportTo "*" with another item`, upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.ExportTo = []string{".", "*"} }), "spec.exportTo", "stands alone"},
		{"exportTo twice the same", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.ExportTo = []string{"a", "b", "a"} }), "spec.exportTo[2]", "Duplicate value"},
		{"exportTo an invalid namespace name", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.ExportTo = []string{".", "Tenant_A"} }), "spec.exportTo[1]", "should match"},
		{"exportTo a namespace name of 64", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.ExportTo = []string{strings.Repeat("n", 64)} }), "spec.exportTo[0]", "63"},
		{"exportTo 65 items", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.ExportTo = namespaceNames(65) }), "spec.exportTo", "at most 64 items"},
		{"healthCheck HTTP without http", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.HealthCheck = &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP}
		}), "spec.healthCheck", "http is required with type HTTP"},
		{"healthCheck TCP with grpc", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.HealthCheck = &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckTCP, GRPC: &v1alpha1.GRPCHealthCheck{}}
		}), "spec.healthCheck", "grpc goes with type GRPC only"},
		{"healthCheck timeout above a short interval", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.HealthCheck = &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckTCP, Interval: &metav1.Duration{Duration: time.Second}}
		}), "spec.healthCheck", "timeout must be below interval"},
		{"healthCheck interval 6m", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.HealthCheck = &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckTCP, Interval: &metav1.Duration{Duration: 6 * time.Minute}}
		}), "spec.healthCheck.interval", "from 1s to 5m"},
		{"healthCheck status range reversed", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.HealthCheck = &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP, HTTP: &v1alpha1.HTTPHealthCheck{
				Path: "/healthz", ExpectedStatuses: []v1alpha1.StatusRange{{Start: 299, End: 200}}}}
		}), "spec.healthCheck.http.expectedStatuses[0]", "start must not be above end"},
		{"healthCheck path without slash", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.HealthCheck = &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP, HTTP: &v1alpha1.HTTPHealthCheck{Path: "healthz"}}
		}), "spec.healthCheck.http.path", "should match"},
		{"requestAffinity under RoundRobin", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.RequestAffinity = &v1alpha1.RequestAffinity{Keys: []v1alpha1.RequestKey{{SourceIP: &v1alpha1.SourceIPKey{}}}}
		}), "spec", "requestAffinity needs loadBalancing RingHash or Maglev"},
		{"requestAffinity key with two sources", ringHashWith(ns, v1alpha1.RequestKey{
			SourceIP: &v1alpha1.SourceIPKey{}, Header: &v1alpha1.HeaderKey{Name: "x-user"}}), "spec.requestAffinity.keys[0]", "exactly one of header"},
		{"requestAffinity key with no source", ringHashWith(ns, v1alpha1.RequestKey{}), "spec.requestAffinity.keys[0]", "exactly one of header"},
		{"requestAffinity binary header", ringHashWith(ns, v1alpha1.RequestKey{Header: &v1alpha1.HeaderKey{Name: "x-user-bin"}}),
			"spec.requestAffinity.keys[0].header.name", "gRPC clients do not hash"},
		{"requestAffinity upper-case header", ringHashWith(ns, v1alpha1.RequestKey{Header: &v1alpha1.HeaderKey{Name: "X-User"}}),
			"spec.requestAffinity.keys[0].header.name", "should match"},
		{"requestAffinity cookie path without ttl", ringHashWith(ns, v1alpha1.RequestKey{Cookie: &v1alpha1.CookieKey{Name: "session", Path: "/"}}),
			"spec.requestAffinity.keys[0].cookie", "needs ttl"},
		{"requestAffinity cookie ttl above a year", ringHashWith(ns, v1alpha1.RequestKey{Cookie: &v1alpha1.CookieKey{Name: "session",
			TTL: &metav1.Duration{Duration: 8761 * time.Hour}}}), "spec.requestAffinity.keys[0].cookie.ttl", "between 0s and 8760h"},
		{"requestAffinity cookie ttl below 0s", ringHashWith(ns, v1alpha1.RequestKey{Cookie: &v1alpha1.CookieKey{Name: "session",
			TTL: &metav1.Duration{Duration: -time.Second}}}), "spec.requestAffinity.keys[0].cookie.ttl", "between 0s and 8760h"},
		{"requestAffinity nine keys", ringHashWith(ns, slices.Repeat([]v1alpha1.RequestKey{{SourceIP: &v1alpha1.SourceIPKey{}}}, 9)...),
			"spec.requestAffinity.keys", "must have at most 8 items"},
		{"outlierDetection without loadReporting", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.OutlierDetection = &v1alpha1.OutlierDetection{}
		}), "spec", "outlierDetection needs loadReporting"},
		{"outlierDetection maxEjectionTime below the default base", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.LoadReporting = &v1alpha1.LoadReporting{}
			s.OutlierDetection = &v1alpha1.OutlierDetection{MaxEjectionTime: &metav1.Duration{Duration: 10 * time.Second}}
		}), "spec.outlierDetection", "maxEjectionTime must not be below baseEjectionTime"},
		{"outlierDetection errorPercent 0", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.LoadReporting = &v1alpha1.LoadReporting{}
			s.OutlierDetection = &v1alpha1.OutlierDetection{ErrorPercent: new(int32(0))}
		}), "spec.outlierDetection.errorPercent", "greater than or equal to 1"},
		{"locality weight 0", localityWith(ns, func(s *v1alpha1.LocalitySpec) { s.Weight = new(int64(0)) }), "spec.weight", "greater than or equal to 1"},
		{"locality weight 4294967296", localityWith(ns, func(s *v1alpha1.LocalitySpec) { s.Weight = new(int64(4294967296)) }), "spec.weight", "less than or equal to 4294967295"},
		{"locality priority 128", localityWith(ns, func(s *v1alpha1.LocalitySpec) { s.Priority = new(int32(128)) }), "spec.priority", "less than or equal to 127"},
		{"locality upstream Bad_Name", localityWith(ns, func(s *v1alpha1.LocalitySpec) { s.Upstream = "Bad_Name" }), "spec.upstream", "should match"},
		{"endpoint set upstream Bad_Name", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Upstream = "Bad_Name" }), "spec.upstream", "should match"},
		{"endpoint set priority 128", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Priority = new(int32(128)) }), "spec.priority", "less than or equal to 127"},
		{"endpoint port 0", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Port = 0 }), "spec.endpoints[0].port", "greater than or equal to 1"},
		{"endpoint weight 0", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Weight = new(int64(0)) }), "spec.endpoints[0].weight", "greater than or equal to 1"},
		{"endpoint adminState not in the enum", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].AdminState = "Maintenance" }), "spec.endpoints[0].adminState", `"Draining"`},
		{"endpoint hashKey with a space", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].HashKey = "db 1" }), "spec.endpoints[0].hashKey", "should match"},
		{"endpoint hashKey of 254", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].HashKey = strings.Repeat("k", 254) }), "spec.endpoints[0].hashKey", "253"},
		{"endpoint generation with a slash", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Generation = "a/b" }), "spec.endpoints[0].generation", "should match"},
		{"endpoint generation of 129", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Generation = strings.Repeat("g", 129) }), "spec.endpoints[0].generation", "128"},
		{"hashKeyFrom not in the enum", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.EndpointsFrom = serviceOn(intstr.FromInt32(80))
			s.EndpointsFrom.HashKeyFrom = "PodUID"
		}), "spec.endpointsFrom.hashKeyFrom", `"PodName"`},
		{"duplicate address and port in one set", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) {
			s.Endpoints = append(s.Endpoints, v1alpha1.Endpoint{Address: "10.0.0.1", Port: 8080, Weight: new(int64(2))})
		}), "spec.endpoints[1]", "Duplicate value"},
		{`address "10.0.0.1:80"`, endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Address = "10.0.0.1:80" }), "spec.endpoints[0].address", "must be an IP address"},
		// EDS carries IP addresses only; the ranges Kubernetes refuses in
		// EndpointSlices are refused too (loopback is for the Upstream to allow).
		{"address vm1.example.internal", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Address = "vm1.example.internal" }), "spec.endpoints[0].address", "EDS carries IP addresses only"},
		{"address 169.254.169.254 (cloud metadata)", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Address = "169.254.169.254" }), "spec.endpoints[0].address", "link-local"},
		{"address fe80::1", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Address = "fe80::1" }), "spec.endpoints[0].address", "link-local"},
		{"address 0.0.0.0", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Address = "0.0.0.0" }), "spec.endpoints[0].address", "unspecified"},
		{"address ::", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Address = "::" }), "spec.endpoints[0].address", "unspecified"},
		{"address 239.1.2.3", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Address = "239.1.2.3" }), "spec.endpoints[0].address", "multicast"},
		{"address ff02::1", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Address = "ff02::1" }), "spec.endpoints[0].address", "multicast"},
		{"address 255.255.255.255", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Address = "255.255.255.255" }), "spec.endpoints[0].address", "broadcast"},
		{`domain exportTo "*" with another item`, domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.ExportTo = []string{"*", "ui"} }), "spec.exportTo", "stands alone"},
		{"domain exportTo twice the same", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.ExportTo = []string{".", "."} }), "spec.exportTo[1]", "Duplicate value"},
		{"domain exportTo an invalid namespace name", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.ExportTo = []string{"ui.eu"} }), "spec.exportTo[0]", "should match"},
		{"domain exportTo 65 items", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.ExportTo = namespaceNames(65) }), "spec.exportTo", "at most 64 items"},
		{"domain loadReporting interval 61s", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) {
			s.LoadReporting = &v1alpha1.LoadReporting{Interval: &metav1.Duration{Duration: 61 * time.Second}}
		}), "spec.loadReporting.interval", "from 1s to 60s"},
		{"gridDegrees 7", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.GridDegrees = new(int32(7)) }), "spec.gridDegrees", "gridDegrees must divide 180"},
		{"gridDegrees 360", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.GridDegrees = new(int32(360)) }), "spec.gridDegrees", "less than or equal to 180"},
		{"maxCells 0", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.MaxCells = new(int32(0)) }), "spec.maxCells", "greater than or equal to 1"},
		{"maxCells 65537", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.MaxCells = new(int32(65537)) }), "spec.maxCells", "less than or equal to 65536"},
		{"localityCapPercent 101", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.LocalityCapPercent = new(int32(101)) }), "spec.localityCapPercent", "less than or equal to 100"},
		{"duplicate replica names", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Replicas[1].Name = "eu-1" }), "spec.replicas[1]", "Duplicate value"},
		{"no replicas", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Replicas = []v1alpha1.SpatialReplica{} }), "spec.replicas", "at least 1 items"},
		{"replica name with a dot", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Replicas[0].Name = "eu.1" }), "spec.replicas[0].name", "should match"},
		{"replica upstream Bad_Name", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Replicas[0].Upstream = "Bad_Name" }), "spec.replicas[0].upstream", "should match"},
		{"region with a space", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Replicas[0].Region = "eu west" }), "spec.replicas[0].region", "should match"},
		{`region with a quote`, domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Replicas[0].Region = `eu"west` }), "spec.replicas[0].region", "should match"},
		{"region of 64", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Replicas[0].Region = strings.Repeat("r", 64) }), "spec.replicas[0].region", "may not be more than 63"},
		{"duplicate product names", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Products[1].Name = "parcels" }), "spec.products[1]", "Duplicate value"},
		{"duplicate pathPrefix", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Products[1].PathPrefix = "/parcels" }), "spec.products", "each product needs its own pathPrefix"},
		{"pathPrefix without a leading slash", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Products[0].PathPrefix = "parcels" }), "spec.products[0].pathPrefix", "should match"},
		{"pathPrefix with a query", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Products[0].PathPrefix = "/parcels?x=1" }), "spec.products[0].pathPrefix", "should match"},
		{"empty allowedRegions", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Products[0].AllowedRegions = []string{} }), "spec.products[0].allowedRegions", "at least 1 items"},
		{"allowed region with bad characters", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Products[0].AllowedRegions[1] = "us/east" }), "spec.products[0].allowedRegions[1]", "should match"},
		{"duplicate allowed region", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Products[0].AllowedRegions[1] = "eu-west" }), "spec.products[0].allowedRegions[1]", "Duplicate value"},
		{"partition domain Bad_Name", partitionWith(ns, func(s *v1alpha1.PartitionSpec) { s.Domain = "Bad_Name" }), "spec.domain", "should match"},
		{"extent west 181", partitionWith(ns, func(s *v1alpha1.PartitionSpec) { s.Extent.West = 181 }), "spec.extent.west", "less than or equal to 180"},
		{"extent east -180.5", partitionWith(ns, func(s *v1alpha1.PartitionSpec) { s.Extent.East = -180.5 }), "spec.extent.east", "greater than or equal to -180"},
		{"extent north 90.25", partitionWith(ns, func(s *v1alpha1.PartitionSpec) { s.Extent.North = 90.25 }), "spec.extent.north", "less than or equal to 90"},
		{"extent south > north", partitionWith(ns, func(s *v1alpha1.PartitionSpec) { s.Extent.South, s.Extent.North = 70, 35.5 }), "spec.extent.south", "south must not be greater than north"},
		{"empty partition replicas", partitionWith(ns, func(s *v1alpha1.PartitionSpec) { s.Replicas = []string{} }), "spec.replicas", "at least 1 items"},
		{"duplicate partition replicas", partitionWith(ns, func(s *v1alpha1.PartitionSpec) { s.Replicas = []string{"eu-1", "eu-1"} }), "spec.replicas[1]", "Duplicate value"},
		{"partition replica US-1", partitionWith(ns, func(s *v1alpha1.PartitionSpec) { s.Replicas = []string{"US-1"} }), "spec.replicas[0]", "should match"},
		{"service name Bad_Name", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.EndpointsFrom = serviceOn(intstr.FromInt32(80))
			s.EndpointsFrom.Service.Name = "Bad_Name"
		}), "spec.endpointsFrom.service.name", "should match"},
		{"service port name of 16", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.EndpointsFrom = serviceOn(intstr.FromString("abcdefghijklmnop")) }), "spec.endpointsFrom.service.port", "at most 15"},
		{"cluster imported twice", importing(ns, v1alpha1.ClusterImport{Name: "eu-1"}, v1alpha1.ClusterImport{Name: "eu-1"}), "spec.endpointsFrom.clusters[1]", "Duplicate value"},
		{"cluster weight 0", importing(ns, v1alpha1.ClusterImport{Name: "eu-1", Weight: new(int64(0))}), "spec.endpointsFrom.clusters[0].weight", "greater than or equal to 1"},
		{"cluster priority 128", importing(ns, v1alpha1.ClusterImport{Name: "eu-1", Priority: new(int32(128))}), "spec.endpointsFrom.clusters[0].priority", "less than or equal to 127"},
		{"17 failoverRegions", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.LocalityAffinity = &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityPreferSameZone}
			for i := range 17 {
				s.LocalityAffinity.FailoverRegions = append(s.LocalityAffinity.FailoverRegions, fmt.Sprintf("r%d", i))
			}
		}), "spec.localityAffinity.failoverRegions", "must have at most 16 items"},
		{"empty failover region", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.LocalityAffinity = &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityPreferSameZone, FailoverRegions: []string{""}}
		}), "spec.localityAffinity.failoverRegions[0]", "at least 1 chars long"},
		{"failoverRegions under None", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.LocalityAffinity = &v1alpha1.LocalityAffinity{Mode: v1alpha1.LocalityAffinityNone, FailoverRegions: []string{"us"}}
		}), "spec.localityAffinity", "PreferSameZone and PreferSameRegion only"},
		{"loadReporting interval 500ms", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.LoadReporting = &v1alpha1.LoadReporting{Interval: &metav1.Duration{Duration: 500 * time.Millisecond}}
		}), "spec.loadReporting.interval", "from 1s to 60s"},
		{"outlierDetection minRequestVolume 0", outlierWith(ns, func(o *v1alpha1.OutlierDetection) { o.MinRequestVolume = new(int32(0)) }), "spec.outlierDetection.minRequestVolume", "greater than or equal to 1"},
		{"outlierDetection maxEjectionPercent 101", outlierWith(ns, func(o *v1alpha1.OutlierDetection) { o.MaxEjectionPercent = new(int32(101)) }), "spec.outlierDetection.maxEjectionPercent", "less than or equal to 100"},
		{"outlierDetection baseEjectionTime 2h", outlierWith(ns, func(o *v1alpha1.OutlierDetection) {
			o.BaseEjectionTime, o.MaxEjectionTime = &metav1.Duration{Duration: 2 * time.Hour}, &metav1.Duration{Duration: 3 * time.Hour}
		}), "spec.outlierDetection.baseEjectionTime", "from 1s to 1h"},
		{"outlierDetection maxEjectionTime 25h", outlierWith(ns, func(o *v1alpha1.OutlierDetection) { o.MaxEjectionTime = &metav1.Duration{Duration: 25 * time.Hour} }), "spec.outlierDetection.maxEjectionTime", "from 1s to 24h"},
		{"healthCheck port 65536", httpCheckWith(ns, func(h *v1alpha1.HealthCheck) { h.Port = new(int32(65536)) }), "spec.healthCheck.port", "less than or equal to 65535"},
		{"healthCheck timeout 0s", httpCheckWith(ns, func(h *v1alpha1.HealthCheck) { h.Timeout = &metav1.Duration{} }), "spec.healthCheck.timeout", "timeout must be above 0s"},
		{"healthCheck host with a space", httpCheckWith(ns, func(h *v1alpha1.HealthCheck) { h.HTTP.Host = "a b" }), "spec.healthCheck.http.host", "should match"},
		{"healthCheck status from 99", httpCheckWith(ns, func(h *v1alpha1.HealthCheck) {
			h.HTTP.ExpectedStatuses = []v1alpha1.StatusRange{{Start: 99, End: 200}}
		}), "spec.healthCheck.http.expectedStatuses[0].start", "greater than or equal to 100"},
		{"healthCheck 9 status ranges", httpCheckWith(ns, func(h *v1alpha1.HealthCheck) {
			h.HTTP.ExpectedStatuses = slices.Repeat([]v1alpha1.StatusRange{{Start: 200, End: 200}}, 9)
		}), "spec.healthCheck.http.expectedStatuses", "must have at most 8 items"},
		{"drainingCapacity not in the enum", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.DrainingCapacity = "Maybe" }), "spec.drainingCapacity", `"Include"`},
		{"protocol not in the enum", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.Protocol = "HTTP3" }), "spec.protocol", `"HTTP2"`},
		{"loadBalancing not in the enum", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.LoadBalancing = "Best" }), "spec.loadBalancing", `"Maglev"`},
		{"locality region of 129", localityWith(ns, func(s *v1alpha1.LocalitySpec) { s.Region = strings.Repeat("r", 129) }), "spec.region", "may not be more than 128"},
		{`address "010.0.0.1" (a leading zero)`, endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Address = "010.0.0.1" }), "spec.endpoints[0].address", "must be an IP address"},
		{`address "::ffff:10.0.0.1" (IPv4-mapped)`, endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) { s.Endpoints[0].Address = "::ffff:10.0.0.1" }), "spec.endpoints[0].address", "must be an IP address"},
		{"product name Bad_Name", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.Products[0].Name = "Bad_Name" }), "spec.products[0].name", "should match"},
		{"extent south -90.5", partitionWith(ns, func(s *v1alpha1.PartitionSpec) { s.Extent.South = -90.5 }), "spec.extent.south", "greater than or equal to -90"},
		{"retries with protocol TCP", retriesWith(ns, func(r *v1alpha1.RetryPolicy) {}, v1alpha1.ProtocolTCP), "spec", "retries need protocol HTTP1, HTTP2 or GRPC"},
		{"retries condition not in the enum", retriesWith(ns, func(r *v1alpha1.RetryPolicy) { r.RetryOn = []v1alpha1.RetryCondition{"Sometimes"} }), "spec.retries.retryOn[0]", `"Unavailable"`},
		{"retries numRetries 5", retriesWith(ns, func(r *v1alpha1.RetryPolicy) { r.NumRetries = new(int32(5)) }), "spec.retries.numRetries", "less than or equal to 4"},
		{"retries perTryTimeout 0.5ms", retriesWith(ns, func(r *v1alpha1.RetryPolicy) { r.PerTryTimeout = &metav1.Duration{Duration: 500 * time.Microsecond} }),
			"spec.retries.perTryTimeout", "perTryTimeout must be from 1ms to 1h"},
		{"retries baseInterval 0s", retriesWith(ns, func(r *v1alpha1.RetryPolicy) { r.Backoff = &v1alpha1.RetryBackoff{BaseInterval: &metav1.Duration{}} }),
			"spec.retries.backoff.baseInterval", "baseInterval must be from 1ms to 10s"},
		{"retries maxInterval 6m", retriesWith(ns, func(r *v1alpha1.RetryPolicy) {
			r.Backoff = &v1alpha1.RetryBackoff{MaxInterval: &metav1.Duration{Duration: 6 * time.Minute}}
		}), "spec.retries.backoff.maxInterval", "maxInterval must be from 1ms to 5m"},
		{"retries maxInterval below baseInterval", retriesWith(ns, func(r *v1alpha1.RetryPolicy) {
			r.Backoff = &v1alpha1.RetryBackoff{BaseInterval: &metav1.Duration{Duration: 100 * time.Millisecond}, MaxInterval: &metav1.Duration{Duration: 99 * time.Millisecond}}
		}), "spec.retries.backoff", "maxInterval must not be below baseInterval"},
		{"retries budget percent 0", retriesWith(ns, func(r *v1alpha1.RetryPolicy) { r.Budget = &v1alpha1.RetryBudget{Percent: new(int32(0))} }),
			"spec.retries.budget.percent", "greater than or equal to 1"},
	}
}

// retriesWith is an Upstream of protocol p (GRPC when none is given) with
// spec.retries on Unavailable, changed by f.
func retriesWith(ns string, f func(*v1alpha1.RetryPolicy), p ...v1alpha1.Protocol) *v1alpha1.Upstream {
	return upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
		s.Protocol = v1alpha1.ProtocolGRPC
		if len(p) > 0 {
			s.Protocol = p[0]
		}
		s.Retries = &v1alpha1.RetryPolicy{RetryOn: []v1alpha1.RetryCondition{v1alpha1.RetryOnUnavailable}}
		f(s.Retries)
	})
}

// goodObject is an object at the bounds of the rules.
type goodObject struct {
	name string
	obj  client.Object
}

// goodObjects are objects at the bounds of the rules, which the apiserver
// accepts, in namespace ns.
func goodObjects(ns string) []goodObject {
	return []goodObject{
		{"overprovisioningFactor 1, panicThreshold 0, connectTimeout 1h", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.OverprovisioningFactor, s.PanicThreshold, s.ConnectTimeout = new(int32(1)), new(int32(0)), &metav1.Duration{Duration: time.Hour}
		})},
		{"overprovisioningFactor 1000, panicThreshold 100, service port 65535", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.OverprovisioningFactor, s.PanicThreshold, s.EndpointsFrom = new(int32(1000)), new(int32(100)), serviceOn(intstr.FromInt32(65535))
		})},
		{"named service port", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.EndpointsFrom = serviceOn(intstr.FromString("grpc-web")) })},
		{"requestAffinity with every source, at its bounds", ringHashWith(ns,
			v1alpha1.RequestKey{Header: &v1alpha1.HeaderKey{Name: strings.Repeat("h", v1alpha1.MaxRequestKeyName),
				Rewrite: &v1alpha1.KeyRewrite{Pattern: `^\s*(bearer|Bearer)\s+`}}},
			v1alpha1.RequestKey{Header: &v1alpha1.HeaderKey{Name: ":authority"}},
			v1alpha1.RequestKey{Cookie: &v1alpha1.CookieKey{Name: "session", TTL: &metav1.Duration{Duration: 8760 * time.Hour}, Path: "/shop"}},
			v1alpha1.RequestKey{Cookie: &v1alpha1.CookieKey{Name: "pinned", TTL: &metav1.Duration{}}},
			v1alpha1.RequestKey{Cookie: &v1alpha1.CookieKey{Name: "given"}},
			v1alpha1.RequestKey{SourceIP: &v1alpha1.SourceIPKey{}},
			v1alpha1.RequestKey{QueryParameter: &v1alpha1.QueryParameterKey{Name: "user"}},
			v1alpha1.RequestKey{Header: &v1alpha1.HeaderKey{Name: "x-tenant", Rewrite: &v1alpha1.KeyRewrite{Pattern: "-prod$", Substitution: "-p"}}},
		)},
		{"requestAffinity under Maglev", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.LoadBalancing = v1alpha1.LoadBalancingMaglev
			s.RequestAffinity = &v1alpha1.RequestAffinity{Keys: []v1alpha1.RequestKey{{SourceIP: &v1alpha1.SourceIPKey{}}}}
		})},
		{"healthCheck at its bounds", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.HealthCheck = &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP, HTTP: &v1alpha1.HTTPHealthCheck{
				Path: "/", Host: "a", ExpectedStatuses: []v1alpha1.StatusRange{{Start: 100, End: 599}}},
				Port: new(int32(65535)), Interval: &metav1.Duration{Duration: 5 * time.Minute}, Timeout: &metav1.Duration{Duration: 5*time.Minute - time.Millisecond},
				HealthyThreshold: new(int32(10)), UnhealthyThreshold: new(int32(1)), JitterPercent: new(int32(50))}
		})},
		{"healthCheck GRPC with a 1s interval", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.HealthCheck = &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckGRPC, GRPC: &v1alpha1.GRPCHealthCheck{Service: "shop.Checkout"},
				Interval: &metav1.Duration{Duration: time.Second}, Timeout: &metav1.Duration{Duration: 999 * time.Millisecond}}
		})},
		{"outlierDetection at its bounds", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.LoadReporting = &v1alpha1.LoadReporting{}
			s.OutlierDetection = &v1alpha1.OutlierDetection{ErrorPercent: new(int32(100)), MinRequestVolume: new(int32(1_000_000_000)),
				MinReporters: new(int32(1000)), BaseEjectionTime: &metav1.Duration{Duration: time.Hour},
				MaxEjectionTime: &metav1.Duration{Duration: 24 * time.Hour}, MaxEjectionPercent: new(int32(0))}
		})},
		{"locality weight 4294967295, priority 127", localityWith(ns, func(s *v1alpha1.LocalitySpec) { s.Weight, s.Priority = new(int64(4294967295)), new(int32(127)) })},
		{"endpoint hashKey of 253 and generation of 128", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) {
			s.Endpoints[0].HashKey = "db-0.db:6379/" + strings.Repeat("k", 253-len("db-0.db:6379/"))
			s.Endpoints[0].Generation = strings.Repeat("g", 127) + "1"
		})},
		{"hashKeyFrom PodName", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.EndpointsFrom = serviceOn(intstr.FromInt32(80))
			s.EndpointsFrom.HashKeyFrom = v1alpha1.HashKeyFromPodName
		})},
		{"endpoint weight 4294967295, port 65535, IPv6", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) {
			s.Endpoints[0] = v1alpha1.Endpoint{Address: "2001:db8::1", Port: 65535, Weight: new(int64(4294967295))}
		})},
		{"loopback and private addresses (the Upstream decides on loopback)", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) {
			s.Endpoints = []v1alpha1.Endpoint{{Address: "127.0.0.1", Port: 80}, {Address: "::1", Port: 80}, {Address: "192.168.1.1", Port: 80}, {Address: "fd00::1", Port: 80}, {Address: "100.64.0.1", Port: 80}}
		})},
		{"retries at their upper bounds", retriesWith(ns, func(r *v1alpha1.RetryPolicy) {
			r.RetryOn = []v1alpha1.RetryCondition{"ConnectFailure", "Reset", "HTTP5xx", "Cancelled", "DeadlineExceeded", "Internal", "ResourceExhausted", "Unavailable"}
			r.NumRetries, r.PerTryTimeout = new(int32(4)), &metav1.Duration{Duration: time.Hour}
			r.Backoff = &v1alpha1.RetryBackoff{BaseInterval: &metav1.Duration{Duration: 10 * time.Second}, MaxInterval: &metav1.Duration{Duration: 5 * time.Minute}}
			r.Budget = &v1alpha1.RetryBudget{Percent: new(int32(100)), MinConcurrency: new(int32(10000))}
		})},
		{"retries at their lower bounds", retriesWith(ns, func(r *v1alpha1.RetryPolicy) {
			r.RetryOn, r.NumRetries, r.PerTryTimeout = []v1alpha1.RetryCondition{"ConnectFailure"}, new(int32(1)), &metav1.Duration{Duration: time.Millisecond}
			r.Backoff = &v1alpha1.RetryBackoff{BaseInterval: &metav1.Duration{Duration: time.Millisecond}, MaxInterval: &metav1.Duration{Duration: time.Millisecond}}
			r.Budget = &v1alpha1.RetryBudget{Percent: new(int32(1)), MinConcurrency: new(int32(0))}
		}, v1alpha1.ProtocolHTTP1)},
		{"addressPolicy.allowLoopback", upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.AddressPolicy = &v1alpha1.AddressPolicy{AllowLoopback: true} })},
		{`exportTo "*"`, upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) { s.ExportTo = []string{"*"} })},
		{`exportTo ".", its own namespace by name and 62 more, one of 63 characters`, upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
			s.ExportTo = append([]string{".", ns, strings.Repeat("n", 63)}, namespaceNames(61)...)
		})},
		{"same address on two ports", endpointSetWith(ns, func(s *v1alpha1.EndpointSetSpec) {
			s.Endpoints = append(s.Endpoints, v1alpha1.Endpoint{Address: "10.0.0.1", Port: 8081})
		})},
		{"gridDegrees 180, maxCells 65536, localityCapPercent 0", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) {
			s.GridDegrees, s.MaxCells, s.LocalityCapPercent = new(int32(180)), new(int32(65536)), new(int32(0))
		})},
		{"gridDegrees 1, maxCells 1, localityCapPercent 100", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) {
			s.GridDegrees, s.MaxCells, s.LocalityCapPercent = new(int32(1)), new(int32(1)), new(int32(100))
		})},
		{"region and pathPrefix with every allowed character", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) {
			s.Replicas[0].Region = "EU.west_1:a-B"
			s.Products[0].PathPrefix = "/aZ09._~!$&'()*+,;=:@/%-"
			s.Products[0].AllowedRegions = []string{"EU.west_1:a-B"}
		})},
		{"domain exportTo its own namespace and another", domainWith(ns, func(s *v1alpha1.SpatialDomainSpec) { s.ExportTo = []string{".", "ui"} })},
		{"antimeridian extent: west 170, east -170", partitionWith(ns, func(s *v1alpha1.PartitionSpec) {
			s.Extent = v1alpha1.PartitionExtent{West: 170, South: -20, East: -170, North: 10.5}
		})},
		{"the whole world", partitionWith(ns, func(s *v1alpha1.PartitionSpec) {
			s.Extent = v1alpha1.PartitionExtent{West: -180, South: -90, East: 180, North: 90}
		})},
		{"a point: south = north, west = east", partitionWith(ns, func(s *v1alpha1.PartitionSpec) {
			s.Extent = v1alpha1.PartitionExtent{West: 7.5, South: 47.25, East: 7.5, North: 47.25}
		})},
	}
}

// namespaceNames are n distinct namespace names.
func namespaceNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("tenant-%d", i)
	}
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// ringHashWith is a RingHash Upstream whose requestAffinity has these keys.
func ringHashWith(ns string, keys ...v1alpha1.RequestKey) client.Object {
	return upstreamWith(ns, func(s *v1alpha1.UpstreamSpec) {
		s.LoadBalancing = v1alpha1.LoadBalancingRingHash
		s.RequestAffinity = &v1alpha1.RequestAffinity{Keys: keys}
	})
}
