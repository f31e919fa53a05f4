package convert_test

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/convert"
	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/topology"
)

func validSpatialDomain() *v1alpha1.SpatialDomain {
	return &v1alpha1.SpatialDomain{
		ObjectMeta: meta("cadastre"),
		Spec: v1alpha1.SpatialDomainSpec{
			Replicas: []v1alpha1.SpatialReplica{
				{Name: "eu-1", Upstream: "cadastre-eu", Region: "eu-west"},
				{Name: "us-1", Upstream: "cadastre-us", Region: "us-east"},
			},
			Products: []v1alpha1.SpatialProduct{
				{Name: "parcels", PathPrefix: "/parcels", AllowedRegions: []string{"eu-west", "us-east"}},
				{Name: "owners", PathPrefix: "/owners", AllowedRegions: []string{"eu-west"}},
			},
		},
	}
}

func validPartition() *v1alpha1.Partition {
	return &v1alpha1.Partition{
		ObjectMeta: meta("europe"),
		Spec: v1alpha1.PartitionSpec{
			Domain:   "cadastre",
			Extent:   v1alpha1.PartitionExtent{West: -10, South: 35, East: 30, North: 70},
			Replicas: []string{"eu-1", "us-1"},
		},
	}
}

// The schema defaults are the reference implementation's.
func TestSpatialDefaultsMatchPartitionmap(t *testing.T) {
	if v1alpha1.DefaultGridDegrees != partitionmap.DefaultGridDeg || v1alpha1.DefaultMaxCells != partitionmap.DefaultMaxCells {
		t.Errorf("v1alpha1 defaults grid %d, maxCells %d; partitionmap %d, %d",
			v1alpha1.DefaultGridDegrees, v1alpha1.DefaultMaxCells, partitionmap.DefaultGridDeg, partitionmap.DefaultMaxCells)
	}
}

func TestSpatialDomainDefaultsAndValues(t *testing.T) {
	in := validSpatialDomain()
	in.Namespace = ""
	before := in.DeepCopy()
	got, errs := convert.SpatialDomain(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := topology.SpatialDomain{
		Key: topology.Key{Namespace: "default", Name: "cadastre"},
		Domain: partitionmap.Domain{
			Name: "cadastre", GridDeg: 5, MaxCells: 256, CapPercent: partitionmap.NoCap,
			Replicas: []partitionmap.Replica{
				{Name: "eu-1", Upstream: "cadastre-eu", Region: "eu-west"},
				{Name: "us-1", Upstream: "cadastre-us", Region: "us-east"},
			},
			Products: []partitionmap.Product{
				{Name: "parcels", PathPrefix: "/parcels", AllowedRegions: []string{"eu-west", "us-east"}},
				{Name: "owners", PathPrefix: "/owners", AllowedRegions: []string{"eu-west"}},
			},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
	if !reflect.DeepEqual(in, before) {
		t.Errorf("SpatialDomain modified (defaulted) its input")
	}
	// The result shares nothing with the input.
	in.Spec.Products[0].AllowedRegions[0] = "changed"
	if got.Domain.Products[0].AllowedRegions[0] != "eu-west" {
		t.Errorf("result shares the input's allowedRegions")
	}

	in = validSpatialDomain()
	in.Spec.GridDegrees = new(int32(180))
	in.Spec.MaxCells = new(int32(65536))
	in.Spec.LocalityCapPercent = new(int32(0))
	got, errs = convert.SpatialDomain(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if d := got.Domain; d.GridDeg != 180 || d.MaxCells != 65536 || d.CapPercent != 0 {
		t.Errorf("grid %d, maxCells %d, cap %d; want 180, 65536, 0", d.GridDeg, d.MaxCells, d.CapPercent)
	}
	in.Spec.LocalityCapPercent = new(int32(100))
	if got, _ = convert.SpatialDomain(in); got.Domain.CapPercent != 100 {
		t.Errorf("cap = %d, want 100", got.Domain.CapPercent)
	}
}

// TestSpatialDomainLoadReporting: without loadReporting the domain's clusters
// report nothing; with it, the interval defaults to 10s and must be 1s..60s.
func TestSpatialDomainLoadReporting(t *testing.T) {
	for _, tc := range []struct {
		name string
		lr   *v1alpha1.LoadReporting
		want time.Duration
		err  bool
	}{
		{"unset", nil, 0, false},
		{"empty", &v1alpha1.LoadReporting{}, 10 * time.Second, false},
		{"1s", &v1alpha1.LoadReporting{Interval: &metav1.Duration{Duration: time.Second}}, time.Second, false},
		{"60s", &v1alpha1.LoadReporting{Interval: &metav1.Duration{Duration: time.Minute}}, time.Minute, false},
		{"999ms", &v1alpha1.LoadReporting{Interval: &metav1.Duration{Duration: 999 * time.Millisecond}}, 0, true},
		{"61s", &v1alpha1.LoadReporting{Interval: &metav1.Duration{Duration: 61 * time.Second}}, 0, true},
	} {
		in := validSpatialDomain()
		in.Spec.LoadReporting = tc.lr
		got, errs := convert.SpatialDomain(in)
		if tc.err {
			if len(errs) != 1 || errs[0].Field != "spec.loadReporting.interval" {
				t.Errorf("%s: errors %v, want one on spec.loadReporting.interval", tc.name, errs)
			}
			continue
		}
		if len(errs) > 0 || got.LoadReportInterval != tc.want {
			t.Errorf("%s: interval %v, errors %v; want %v", tc.name, got.LoadReportInterval, errs, tc.want)
		}
	}
}

func TestSpatialDomainValidBoundaries(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*v1alpha1.SpatialDomain)
	}{
		{"as is", func(d *v1alpha1.SpatialDomain) {}},
		{"maxCells 1", func(d *v1alpha1.SpatialDomain) { d.Spec.MaxCells = new(int32(1)) }},
		{"region with every allowed character", func(d *v1alpha1.SpatialDomain) {
			d.Spec.Replicas[0].Region = "EU.west_1:a-B"
			d.Spec.Products[0].AllowedRegions = []string{"EU.west_1:a-B"}
		}},
		{"region of 63", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[0].Region = strings.Repeat("r", 63) }},
		{"replica name of 63", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[0].Name = strings.Repeat("n", 63) }},
		{"dotted upstream of 253", func(d *v1alpha1.SpatialDomain) {
			d.Spec.Replicas[0].Upstream = strings.Repeat(strings.Repeat("u", 62)+".", 4) + "u"
		}},
		{"pathPrefix /", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[0].PathPrefix = "/" }},
		{"pathPrefix with every allowed character", func(d *v1alpha1.SpatialDomain) {
			d.Spec.Products[0].PathPrefix = "/aZ09._~!$&'()*+,;=:@/%-"
		}},
		{"pathPrefix of 1024", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[0].PathPrefix = "/" + strings.Repeat("p", 1023) }},
		{"an allowed region no replica is in", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[1].AllowedRegions = []string{"ap-south"} }},
		{"64 replicas, 64 products, 32 allowed regions", func(d *v1alpha1.SpatialDomain) {
			d.Spec.Replicas, d.Spec.Products = nil, nil
			var regions []string
			for i := range 32 {
				regions = append(regions, "r"+string(rune('a'+i/26))+string(rune('a'+i%26)))
			}
			for i := range 64 {
				n := "x" + string(rune('a'+i/26)) + string(rune('a'+i%26))
				d.Spec.Replicas = append(d.Spec.Replicas, v1alpha1.SpatialReplica{Name: n, Upstream: n, Region: regions[i%32]})
				d.Spec.Products = append(d.Spec.Products, v1alpha1.SpatialProduct{Name: n, PathPrefix: "/" + n, AllowedRegions: regions})
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := validSpatialDomain()
			tc.mutate(in)
			if _, errs := convert.SpatialDomain(in); len(errs) > 0 {
				t.Fatalf("unexpected errors: %v", errs)
			}
		})
	}
	for g := int32(1); g <= 180; g++ {
		in := validSpatialDomain()
		in.Spec.GridDegrees = new(g)
		_, errs := convert.SpatialDomain(in)
		if divides := 180%g == 0; divides != (len(errs) == 0) {
			t.Errorf("gridDegrees %d: errors %v, want valid = %v", g, errs, divides)
		}
	}
}

func TestSpatialDomainInvalid(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*v1alpha1.SpatialDomain)
		want   []string
	}{
		{"empty name", func(d *v1alpha1.SpatialDomain) { d.Name = "" }, []string{"metadata.name"}},
		{"uppercase name", func(d *v1alpha1.SpatialDomain) { d.Name = "Cadastre" }, []string{"metadata.name"}},
		{"bad namespace", func(d *v1alpha1.SpatialDomain) { d.Namespace = "a_b" }, []string{"metadata.namespace"}},
		{"grid 0", func(d *v1alpha1.SpatialDomain) { d.Spec.GridDegrees = new(int32(0)) }, []string{"spec.gridDegrees"}},
		{"grid negative", func(d *v1alpha1.SpatialDomain) { d.Spec.GridDegrees = new(int32(-5)) }, []string{"spec.gridDegrees"}},
		{"grid 7 does not divide 180", func(d *v1alpha1.SpatialDomain) { d.Spec.GridDegrees = new(int32(7)) }, []string{"spec.gridDegrees"}},
		{"grid 181", func(d *v1alpha1.SpatialDomain) { d.Spec.GridDegrees = new(int32(181)) }, []string{"spec.gridDegrees"}},
		{"grid 360", func(d *v1alpha1.SpatialDomain) { d.Spec.GridDegrees = new(int32(360)) }, []string{"spec.gridDegrees"}},
		{"maxCells 0", func(d *v1alpha1.SpatialDomain) { d.Spec.MaxCells = new(int32(0)) }, []string{"spec.maxCells"}},
		{"maxCells 65537", func(d *v1alpha1.SpatialDomain) { d.Spec.MaxCells = new(int32(65537)) }, []string{"spec.maxCells"}},
		{"cap -1", func(d *v1alpha1.SpatialDomain) { d.Spec.LocalityCapPercent = new(int32(-1)) }, []string{"spec.localityCapPercent"}},
		{"cap 101", func(d *v1alpha1.SpatialDomain) { d.Spec.LocalityCapPercent = new(int32(101)) }, []string{"spec.localityCapPercent"}},
		{"no replicas", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas = nil }, []string{"spec.replicas"}},
		{"65 replicas", func(d *v1alpha1.SpatialDomain) {
			d.Spec.Replicas = nil
			for i := range 65 {
				n := "r" + string(rune('a'+i/26)) + string(rune('a'+i%26))
				d.Spec.Replicas = append(d.Spec.Replicas, v1alpha1.SpatialReplica{Name: n, Upstream: "u", Region: "eu"})
			}
		}, []string{"spec.replicas"}},
		{"replica name empty", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[1].Name = "" }, []string{"spec.replicas[1].name"}},
		{"replica name uppercase", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[1].Name = "US-1" }, []string{"spec.replicas[1].name"}},
		{"replica name with dot", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[1].Name = "us.1" }, []string{"spec.replicas[1].name"}},
		{"replica name of 64", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[1].Name = strings.Repeat("n", 64) }, []string{"spec.replicas[1].name"}},
		{"duplicate replica names", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[1].Name = "eu-1" }, []string{"spec.replicas[1]"}},
		{"replica upstream empty", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[0].Upstream = "" }, []string{"spec.replicas[0].upstream"}},
		{"replica upstream uppercase", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[0].Upstream = "Cadastre" }, []string{"spec.replicas[0].upstream"}},
		{"replica upstream of 254", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[0].Upstream = strings.Repeat("u", 254) }, []string{"spec.replicas[0].upstream"}},
		{"replica region empty", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[0].Region = "" }, []string{"spec.replicas[0].region"}},
		{"replica region with a space", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[0].Region = "eu west" }, []string{"spec.replicas[0].region"}},
		{"replica region with a quote", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[0].Region = `eu"]..os.exit()--` }, []string{"spec.replicas[0].region"}},
		{"replica region with a slash", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[0].Region = "eu/west" }, []string{"spec.replicas[0].region"}},
		{"replica region non-ASCII", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[0].Region = "eü" }, []string{"spec.replicas[0].region"}},
		{"replica region of 64", func(d *v1alpha1.SpatialDomain) { d.Spec.Replicas[0].Region = strings.Repeat("r", 64) }, []string{"spec.replicas[0].region"}},
		{"no products", func(d *v1alpha1.SpatialDomain) { d.Spec.Products = []v1alpha1.SpatialProduct{} }, []string{"spec.products"}},
		{"65 products", func(d *v1alpha1.SpatialDomain) {
			d.Spec.Products = nil
			for i := range 65 {
				n := "p" + string(rune('a'+i/26)) + string(rune('a'+i%26))
				d.Spec.Products = append(d.Spec.Products, v1alpha1.SpatialProduct{Name: n, PathPrefix: "/" + n, AllowedRegions: []string{"eu"}})
			}
		}, []string{"spec.products"}},
		{"product name empty", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[1].Name = "" }, []string{"spec.products[1].name"}},
		{"product name uppercase", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[1].Name = "Owners" }, []string{"spec.products[1].name"}},
		{"duplicate product names", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[1].Name = "parcels" }, []string{"spec.products[1]"}},
		{"pathPrefix empty", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[1].PathPrefix = "" }, []string{"spec.products[1].pathPrefix"}},
		{"pathPrefix without leading slash", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[1].PathPrefix = "owners" }, []string{"spec.products[1].pathPrefix"}},
		{"pathPrefix with a space", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[1].PathPrefix = "/own ers" }, []string{"spec.products[1].pathPrefix"}},
		{"pathPrefix with a query", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[1].PathPrefix = "/owners?x=1" }, []string{"spec.products[1].pathPrefix"}},
		{"pathPrefix with a fragment", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[1].PathPrefix = "/owners#x" }, []string{"spec.products[1].pathPrefix"}},
		{"pathPrefix non-ASCII", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[1].PathPrefix = "/eigentümer" }, []string{"spec.products[1].pathPrefix"}},
		{"pathPrefix of 1025", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[1].PathPrefix = "/" + strings.Repeat("p", 1024) }, []string{"spec.products[1].pathPrefix"}},
		{"duplicate pathPrefix", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[1].PathPrefix = "/parcels" }, []string{"spec.products[1].pathPrefix"}},
		{"no allowed regions", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[1].AllowedRegions = nil }, []string{"spec.products[1].allowedRegions"}},
		{"33 allowed regions", func(d *v1alpha1.SpatialDomain) {
			d.Spec.Products[1].AllowedRegions = nil
			for i := range 33 {
				d.Spec.Products[1].AllowedRegions = append(d.Spec.Products[1].AllowedRegions, "r"+string(rune('a'+i/26))+string(rune('a'+i%26)))
			}
		}, []string{"spec.products[1].allowedRegions"}},
		{"allowed region empty", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[0].AllowedRegions[1] = "" }, []string{"spec.products[0].allowedRegions[1]"}},
		{"allowed region bad characters", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[0].AllowedRegions[1] = "us east" }, []string{"spec.products[0].allowedRegions[1]"}},
		{"allowed region of 64", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[0].AllowedRegions[1] = strings.Repeat("r", 64) }, []string{"spec.products[0].allowedRegions[1]"}},
		{"duplicate allowed region", func(d *v1alpha1.SpatialDomain) { d.Spec.Products[0].AllowedRegions[1] = "eu-west" }, []string{"spec.products[0].allowedRegions[1]"}},
		{"every error is reported", func(d *v1alpha1.SpatialDomain) {
			d.Spec.GridDegrees = new(int32(7))
			d.Spec.MaxCells = new(int32(0))
			d.Spec.LocalityCapPercent = new(int32(101))
			d.Spec.Replicas[1].Name = "eu-1"
			d.Spec.Replicas[1].Region = "us east"
			d.Spec.Products[1].PathPrefix = "/parcels"
			d.Spec.Products[1].AllowedRegions = nil
		}, []string{"spec.gridDegrees", "spec.maxCells", "spec.localityCapPercent", "spec.replicas[1].region", "spec.replicas[1]",
			"spec.products[1].allowedRegions", "spec.products[1].pathPrefix"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := validSpatialDomain()
			tc.mutate(in)
			before := in.DeepCopy()
			got, errs := convert.SpatialDomain(in)
			if !reflect.DeepEqual(fields(errs), tc.want) {
				t.Fatalf("error fields = %q, want %q (errors: %v)", fields(errs), tc.want, errs)
			}
			if !reflect.DeepEqual(got, topology.SpatialDomain{}) {
				t.Errorf("invalid object converted to %+v, want the zero value", got)
			}
			if !reflect.DeepEqual(in, before) {
				t.Errorf("SpatialDomain modified its input")
			}
		})
	}
}

func TestSpatialDomainMessages(t *testing.T) {
	in := validSpatialDomain()
	in.Spec.GridDegrees = new(int32(7))
	in.Spec.Products[1].PathPrefix = "/parcels"
	_, errs := convert.SpatialDomain(in)
	msg := errs.ToAggregate().Error()
	for _, want := range []string{
		"spec.gridDegrees: Invalid value: 7: gridDegrees must divide 180",
		`spec.products[1].pathPrefix: Duplicate value: "each product needs its own pathPrefix: \"/parcels\" is also the pathPrefix of products[0]"`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

func TestPartitionValues(t *testing.T) {
	in := validPartition()
	got, errs := convert.Partition(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := topology.Partition{
		Key:      topology.Key{Namespace: "shop", Name: "europe"},
		Domain:   "cadastre",
		Extent:   partitionmap.BBox{West: -10, South: 35, East: 30, North: 70},
		Replicas: []string{"eu-1", "us-1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
	in.Spec.Replicas[0] = "changed"
	if got.Replicas[0] != "eu-1" {
		t.Errorf("result shares the input's replicas")
	}
	in = validPartition()
	in.Namespace = ""
	if got, _ := convert.Partition(in); got.Key != (topology.Key{Namespace: "default", Name: "europe"}) {
		t.Errorf("key = %v, want default/europe", got.Key)
	}
}

func TestPartitionValidBoundaries(t *testing.T) {
	ext := func(w, s, e, n float64) func(*v1alpha1.Partition) {
		return func(p *v1alpha1.Partition) {
			p.Spec.Extent = v1alpha1.PartitionExtent{West: w, South: s, East: e, North: n}
		}
	}
	tests := []struct {
		name   string
		mutate func(*v1alpha1.Partition)
	}{
		{"antimeridian: west 170, east -170", ext(170, -20, -170, 20)},
		{"the whole world", ext(-180, -90, 180, 90)},
		{"west 180, east -180", ext(180, 0, -180, 0)},
		{"a point", ext(7.5, 47.25, 7.5, 47.25)},
		{"south = north", ext(0, 10, 1, 10)},
		{"one replica", func(p *v1alpha1.Partition) { p.Spec.Replicas = []string{"eu-1"} }},
		{"64 replicas", func(p *v1alpha1.Partition) {
			p.Spec.Replicas = nil
			for i := range 64 {
				p.Spec.Replicas = append(p.Spec.Replicas, "r"+string(rune('a'+i/26))+string(rune('a'+i%26)))
			}
		}},
		{"dotted domain", func(p *v1alpha1.Partition) { p.Spec.Domain = "cadastre.v2" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := validPartition()
			tc.mutate(in)
			if _, errs := convert.Partition(in); len(errs) > 0 {
				t.Fatalf("unexpected errors: %v", errs)
			}
		})
	}
}

func TestPartitionInvalid(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name   string
		mutate func(*v1alpha1.Partition)
		want   []string
	}{
		{"empty name", func(p *v1alpha1.Partition) { p.Name = "" }, []string{"metadata.name"}},
		{"bad namespace", func(p *v1alpha1.Partition) { p.Namespace = "Shop" }, []string{"metadata.namespace"}},
		{"no domain", func(p *v1alpha1.Partition) { p.Spec.Domain = "" }, []string{"spec.domain"}},
		{"uppercase domain", func(p *v1alpha1.Partition) { p.Spec.Domain = "Cadastre" }, []string{"spec.domain"}},
		{"domain of 254", func(p *v1alpha1.Partition) { p.Spec.Domain = strings.Repeat("d", 254) }, []string{"spec.domain"}},
		{"west 181", func(p *v1alpha1.Partition) { p.Spec.Extent.West = 181 }, []string{"spec.extent.west"}},
		{"west -180.5", func(p *v1alpha1.Partition) { p.Spec.Extent.West = -180.5 }, []string{"spec.extent.west"}},
		{"east 180.000001", func(p *v1alpha1.Partition) { p.Spec.Extent.East = 180.000001 }, []string{"spec.extent.east"}},
		{"south -91", func(p *v1alpha1.Partition) { p.Spec.Extent.South = -91 }, []string{"spec.extent.south"}},
		{"north 90.5", func(p *v1alpha1.Partition) { p.Spec.Extent.North = 90.5 }, []string{"spec.extent.north"}},
		{"west NaN", func(p *v1alpha1.Partition) { p.Spec.Extent.West = nan }, []string{"spec.extent.west"}},
		{"south NaN", func(p *v1alpha1.Partition) { p.Spec.Extent.South = nan }, []string{"spec.extent.south"}},
		{"east NaN", func(p *v1alpha1.Partition) { p.Spec.Extent.East = nan }, []string{"spec.extent.east"}},
		{"north NaN", func(p *v1alpha1.Partition) { p.Spec.Extent.North = nan }, []string{"spec.extent.north"}},
		{"north +Inf", func(p *v1alpha1.Partition) { p.Spec.Extent.North = inf }, []string{"spec.extent.north"}},
		{"west -Inf", func(p *v1alpha1.Partition) { p.Spec.Extent.West = -inf }, []string{"spec.extent.west"}},
		{"south > north", func(p *v1alpha1.Partition) { p.Spec.Extent.South, p.Spec.Extent.North = 70, 35 }, []string{"spec.extent.south"}},
		{"no replicas", func(p *v1alpha1.Partition) { p.Spec.Replicas = nil }, []string{"spec.replicas"}},
		{"empty replicas", func(p *v1alpha1.Partition) { p.Spec.Replicas = []string{} }, []string{"spec.replicas"}},
		{"65 replicas", func(p *v1alpha1.Partition) {
			p.Spec.Replicas = nil
			for i := range 65 {
				p.Spec.Replicas = append(p.Spec.Replicas, "r"+string(rune('a'+i/26))+string(rune('a'+i%26)))
			}
		}, []string{"spec.replicas"}},
		{"empty replica name", func(p *v1alpha1.Partition) { p.Spec.Replicas[1] = "" }, []string{"spec.replicas[1]"}},
		{"uppercase replica name", func(p *v1alpha1.Partition) { p.Spec.Replicas[1] = "US-1" }, []string{"spec.replicas[1]"}},
		{"replica name with a quote", func(p *v1alpha1.Partition) { p.Spec.Replicas[1] = `us-1"` }, []string{"spec.replicas[1]"}},
		{"replica name of 64", func(p *v1alpha1.Partition) { p.Spec.Replicas[1] = strings.Repeat("r", 64) }, []string{"spec.replicas[1]"}},
		{"duplicate replica", func(p *v1alpha1.Partition) { p.Spec.Replicas[1] = "eu-1" }, []string{"spec.replicas[1]"}},
		{"every error is reported", func(p *v1alpha1.Partition) {
			p.Spec.Domain = ""
			p.Spec.Extent = v1alpha1.PartitionExtent{West: 181, South: 0, East: -181, North: 91}
			p.Spec.Replicas = nil
		}, []string{"spec.domain", "spec.extent.west", "spec.extent.east", "spec.extent.north", "spec.replicas"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := validPartition()
			tc.mutate(in)
			got, errs := convert.Partition(in)
			if !reflect.DeepEqual(fields(errs), tc.want) {
				t.Fatalf("error fields = %q, want %q (errors: %v)", fields(errs), tc.want, errs)
			}
			if !reflect.DeepEqual(got, topology.Partition{}) {
				t.Errorf("invalid object converted to %+v, want the zero value", got)
			}
		})
	}
}

func TestPartitionMessages(t *testing.T) {
	in := validPartition()
	in.Spec.Extent.South, in.Spec.Extent.North = 70, 35
	_, errs := convert.Partition(in)
	if msg := errs.ToAggregate().Error(); !strings.Contains(msg, "spec.extent.south: Invalid value: 70: south must not be greater than north") ||
		!strings.Contains(msg, "antimeridian") {
		t.Errorf("message %q", msg)
	}
	in = validPartition()
	in.Spec.Extent.West = 181
	_, errs = convert.Partition(in)
	if msg := errs.ToAggregate().Error(); !strings.Contains(msg, "spec.extent.west: Invalid value: 181: must be a longitude between -180 and 180") {
		t.Errorf("message %q", msg)
	}
}
