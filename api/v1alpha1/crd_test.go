package v1alpha1

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// crdDir holds the CRDs that `make generate` writes from this package.
const crdDir = "../../config/crd"

func loadCRD(t *testing.T, file string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(crdDir, file))
	if err != nil {
		t.Fatalf("read CRD (run `make generate`): %v", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return &crd
}

// schemaAt walks a dotted path from the root of the v1alpha1 schema; "[]" steps
// into the items of a list, as in "spec.endpoints[].weight".
func schemaAt(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition, path string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil {
		t.Fatalf("%s: want exactly one version with a schema", crd.Name)
	}
	s := *crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, part := range strings.Split(path, ".") {
		name, list := strings.CutSuffix(part, "[]")
		p, ok := s.Properties[name]
		if !ok {
			t.Fatalf("%s: no property %q on the way to %q", crd.Name, name, path)
		}
		s = p
		if list {
			if s.Items == nil || s.Items.Schema == nil {
				t.Fatalf("%s: %q is not a list", crd.Name, name)
			}
			s = *s.Items.Schema
		}
	}
	return s
}

func TestCRDNames(t *testing.T) {
	for _, tc := range []struct {
		file, kind, plural, shortName string
	}{
		{"poise.dev_upstreams.yaml", "Upstream", "upstreams", "ups"},
		{"poise.dev_localities.yaml", "Locality", "localities", "loc"},
		{"poise.dev_endpointsets.yaml", "EndpointSet", "endpointsets", "eps"},
		{"poise.dev_spatialdomains.yaml", "SpatialDomain", "spatialdomains", "sdom"},
		{"poise.dev_partitions.yaml", "Partition", "partitions", "part"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			crd := loadCRD(t, tc.file)
			if got, want := crd.Name, tc.plural+"."+GroupVersion.Group; got != want {
				t.Errorf("name = %q, want %q", got, want)
			}
			if crd.Spec.Group != GroupVersion.Group || crd.Spec.Names.Kind != tc.kind || crd.Spec.Names.ListKind != tc.kind+"List" {
				t.Errorf("group/kind = %s/%s (list %s), want %s/%s", crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Names.ListKind, GroupVersion.Group, tc.kind)
			}
			if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
				t.Errorf("scope = %s, want Namespaced", crd.Spec.Scope)
			}
			if !slices.Equal(crd.Spec.Names.ShortNames, []string{tc.shortName}) {
				t.Errorf("shortNames = %v, want [%s]", crd.Spec.Names.ShortNames, tc.shortName)
			}
			if !slices.Contains(crd.Spec.Names.Categories, "poise") {
				t.Errorf("categories = %v, want poise", crd.Spec.Names.Categories)
			}
			v := crd.Spec.Versions[0]
			if v.Name != GroupVersion.Version || !v.Served || !v.Storage {
				t.Errorf("version %s served=%v storage=%v, want %s served and stored", v.Name, v.Served, v.Storage, GroupVersion.Version)
			}
			if v.Subresources == nil || v.Subresources.Status == nil {
				t.Errorf("no status subresource")
			}
			if len(v.AdditionalPrinterColumns) == 0 {
				t.Errorf("no printer columns")
			}
		})
	}
}

// TestCRDDefaults checks that each schema default is the documented value and that
// the Go Default() methods produce the same value for objects read without an
// apiserver.
func TestCRDDefaults(t *testing.T) {
	ups := &Upstream{Spec: UpstreamSpec{LoadReporting: &LoadReporting{}, OutlierDetection: &OutlierDetection{}}}
	ups.Default()
	loc := &Locality{}
	loc.Default()
	eps := &EndpointSet{Spec: EndpointSetSpec{Endpoints: []Endpoint{{}}}, Status: EndpointSetStatus{Health: []EndpointHealth{{}}}}
	eps.Default()
	sd := &SpatialDomain{Spec: SpatialDomainSpec{LoadReporting: &LoadReporting{}}}
	sd.Default()

	const (
		upstreams      = "poise.dev_upstreams.yaml"
		localities     = "poise.dev_localities.yaml"
		endpointsets   = "poise.dev_endpointsets.yaml"
		spatialdomains = "poise.dev_spatialdomains.yaml"
	)
	for _, tc := range []struct {
		file, path string
		want       string // the default as compact JSON
		goDefault  any    // what Default() sets
	}{
		{upstreams, "spec", `{}`, nil},
		{upstreams, "spec.overprovisioningFactor", `140`, ups.Spec.OverprovisioningFactor},
		{upstreams, "spec.panicThreshold", `50`, ups.Spec.PanicThreshold},
		{upstreams, "spec.panicMode", `"UseAll"`, ups.Spec.PanicMode},
		{upstreams, "spec.drainingCapacity", `"Exclude"`, ups.Spec.DrainingCapacity},
		{upstreams, "spec.healthAdjustment", `"ControlPlane"`, ups.Spec.HealthAdjustment},
		{upstreams, "spec.loadBalancing", `"RoundRobin"`, ups.Spec.LoadBalancing},
		{upstreams, "spec.connectTimeout", `"5s"`, ups.Spec.ConnectTimeout},
		{upstreams, "spec.protocol", `"HTTP2"`, ups.Spec.Protocol},
		{upstreams, "spec.loadReporting.interval", `"10s"`, ups.Spec.LoadReporting.Interval},
		{upstreams, "spec.outlierDetection.errorPercent", `20`, ups.Spec.OutlierDetection.ErrorPercent},
		{upstreams, "spec.outlierDetection.minRequestVolume", `100`, ups.Spec.OutlierDetection.MinRequestVolume},
		{upstreams, "spec.outlierDetection.minReporters", `3`, ups.Spec.OutlierDetection.MinReporters},
		{upstreams, "spec.outlierDetection.baseEjectionTime", `"30s"`, ups.Spec.OutlierDetection.BaseEjectionTime},
		{upstreams, "spec.outlierDetection.maxEjectionTime", `"5m0s"`, ups.Spec.OutlierDetection.MaxEjectionTime},
		{upstreams, "spec.outlierDetection.maxEjectionPercent", `10`, ups.Spec.OutlierDetection.MaxEjectionPercent},
		{localities, "spec.priority", `0`, loc.Spec.Priority},
		{localities, "spec.weight", `1`, loc.Spec.Weight},
		{endpointsets, "spec.locality", `{}`, nil},
		{endpointsets, "spec.endpoints[].weight", `1`, eps.Spec.Endpoints[0].Weight},
		{endpointsets, "spec.endpoints[].adminState", `"Ready"`, eps.Spec.Endpoints[0].AdminState},
		{endpointsets, "status.health[].probe", `"Unknown"`, eps.Status.Health[0].Probe},
		{endpointsets, "status.health[].circuit", `"Closed"`, eps.Status.Health[0].Circuit},
		{spatialdomains, "spec.gridDegrees", `5`, sd.Spec.GridDegrees},
		{spatialdomains, "spec.maxCells", `256`, sd.Spec.MaxCells},
		{spatialdomains, "spec.loadReporting.interval", `"10s"`, sd.Spec.LoadReporting.Interval},
	} {
		t.Run(tc.file+"/"+tc.path, func(t *testing.T) {
			s := schemaAt(t, loadCRD(t, tc.file), tc.path)
			if s.Default == nil {
				t.Fatalf("no default, want %s", tc.want)
			}
			if got := string(s.Default.Raw); got != tc.want {
				t.Errorf("schema default = %s, want %s", got, tc.want)
			}
			if tc.goDefault == nil {
				return
			}
			b, err := json.Marshal(tc.goDefault)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("Default() sets %s, want %s (keep the Default* constants and the kubebuilder:default markers in step)", b, tc.want)
			}
		})
	}
}

func TestCRDBounds(t *testing.T) {
	for _, tc := range []struct {
		file, path string
		min, max   float64
	}{
		{"poise.dev_upstreams.yaml", "spec.overprovisioningFactor", 1, 1000},
		{"poise.dev_upstreams.yaml", "spec.outlierDetection.errorPercent", 1, 100},
		{"poise.dev_upstreams.yaml", "spec.outlierDetection.minRequestVolume", 1, float64(MaxOutlierMinRequestVolume)},
		{"poise.dev_upstreams.yaml", "spec.outlierDetection.minReporters", 1, float64(MaxOutlierMinReporters)},
		{"poise.dev_upstreams.yaml", "spec.outlierDetection.maxEjectionPercent", 0, 100},
		{"poise.dev_upstreams.yaml", "spec.panicThreshold", 0, 100},
		{"poise.dev_localities.yaml", "spec.priority", 0, float64(MaxPriority)},
		{"poise.dev_localities.yaml", "spec.weight", float64(MinWeight), 4294967295},
		{"poise.dev_endpointsets.yaml", "spec.priority", 0, float64(MaxPriority)},
		{"poise.dev_endpointsets.yaml", "spec.endpoints[].weight", float64(MinWeight), 4294967295},
		{"poise.dev_endpointsets.yaml", "spec.endpoints[].port", 1, 65535},
		{"poise.dev_spatialdomains.yaml", "spec.gridDegrees", 1, float64(MaxGridDegrees)},
		{"poise.dev_spatialdomains.yaml", "spec.maxCells", 1, float64(MaxMaxCells)},
		{"poise.dev_spatialdomains.yaml", "spec.localityCapPercent", 0, float64(MaxLocalityCapPercent)},
		{"poise.dev_partitions.yaml", "spec.extent.west", -180, 180},
		{"poise.dev_partitions.yaml", "spec.extent.east", -180, 180},
		{"poise.dev_partitions.yaml", "spec.extent.south", -90, 90},
		{"poise.dev_partitions.yaml", "spec.extent.north", -90, 90},
	} {
		t.Run(tc.file+"/"+tc.path, func(t *testing.T) {
			s := schemaAt(t, loadCRD(t, tc.file), tc.path)
			if s.Minimum == nil || *s.Minimum != tc.min {
				t.Errorf("minimum = %v, want %v", s.Minimum, tc.min)
			}
			if s.Maximum == nil || *s.Maximum != tc.max {
				t.Errorf("maximum = %v, want %v", s.Maximum, tc.max)
			}
		})
	}
	if MaxWeight != 4294967295 || MaxPriority != 127 {
		t.Errorf("MaxWeight = %d, MaxPriority = %d; the schema says 4294967295 and 127", MaxWeight, MaxPriority)
	}
	s := schemaAt(t, loadCRD(t, "poise.dev_endpointsets.yaml"), "spec")
	if e := s.Properties["endpoints"]; e.MaxItems == nil || *e.MaxItems != MaxEndpointsPerSet {
		t.Errorf("spec.endpoints maxItems = %v, want %d", e.MaxItems, MaxEndpointsPerSet)
	}
	if MaxGridDegrees != 180 || MaxMaxCells != 65536 || MaxLocalityCapPercent != 100 {
		t.Errorf("MaxGridDegrees = %d, MaxMaxCells = %d, MaxLocalityCapPercent = %d; the schema says 180, 65536 and 100",
			MaxGridDegrees, MaxMaxCells, MaxLocalityCapPercent)
	}
}

// TestCRDSpatialLimits checks the list sizes and string limits of SpatialDomain and
// Partition against the constants that code building objects without an apiserver
// uses.
func TestCRDSpatialLimits(t *testing.T) {
	const (
		domains    = "poise.dev_spatialdomains.yaml"
		partitions = "poise.dev_partitions.yaml"
	)
	regionPattern := `^[A-Za-z0-9._:-]+$`
	dnsLabel := `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	for _, tc := range []struct {
		file, path         string
		minItems, maxItems int64 // 0: not a list
		maxLength          int64 // 0: not checked
		pattern            string
	}{
		{domains, "spec.replicas", 1, MaxSpatialReplicas, 0, ""},
		{domains, "spec.replicas[].name", 0, 0, 63, dnsLabel},
		{domains, "spec.replicas[].upstream", 0, 0, 253, ""},
		{domains, "spec.replicas[].region", 0, 0, MaxRegionLength, regionPattern},
		{domains, "spec.products", 1, MaxSpatialProducts, 0, ""},
		{domains, "spec.products[].name", 0, 0, 63, dnsLabel},
		{domains, "spec.products[].pathPrefix", 0, 0, MaxPathPrefixLength, `^/[A-Za-z0-9._~!$&'()*+,;=:@/%-]*$`},
		{domains, "spec.products[].allowedRegions", 1, MaxAllowedRegions, 0, ""},
		{domains, "spec.products[].allowedRegions[]", 0, 0, MaxRegionLength, regionPattern},
		{partitions, "spec.replicas", 1, MaxSpatialReplicas, 0, ""},
		{partitions, "spec.replicas[]", 0, 0, 63, dnsLabel},
		{partitions, "spec.domain", 0, 0, 253, ""},
	} {
		t.Run(tc.file+"/"+tc.path, func(t *testing.T) {
			s := schemaAt(t, loadCRD(t, tc.file), tc.path)
			if tc.maxItems > 0 {
				if s.MinItems == nil || *s.MinItems != tc.minItems || s.MaxItems == nil || *s.MaxItems != tc.maxItems {
					t.Errorf("items = %v..%v, want %d..%d", s.MinItems, s.MaxItems, tc.minItems, tc.maxItems)
				}
			}
			if tc.maxLength > 0 {
				if s.MaxLength == nil || *s.MaxLength != tc.maxLength {
					t.Errorf("maxLength = %v, want %d", s.MaxLength, tc.maxLength)
				}
				if s.MinLength == nil || *s.MinLength != 1 {
					t.Errorf("minLength = %v, want 1", s.MinLength)
				}
			}
			if tc.pattern != "" && s.Pattern != tc.pattern {
				t.Errorf("pattern = %q, want %q", s.Pattern, tc.pattern)
			}
		})
	}
	// localityCapPercent has no default: absent means no cap.
	if s := schemaAt(t, loadCRD(t, domains), "spec.localityCapPercent"); s.Default != nil {
		t.Errorf("spec.localityCapPercent defaults to %s; absent must mean no cap", s.Default.Raw)
	}
}

// TestCRDListSets checks the scalar lists the apiserver keeps duplicate-free.
func TestCRDListSets(t *testing.T) {
	for _, tc := range []struct{ file, path string }{
		{"poise.dev_spatialdomains.yaml", "spec.products[].allowedRegions"},
		{"poise.dev_partitions.yaml", "spec.replicas"},
	} {
		t.Run(tc.file+"/"+tc.path, func(t *testing.T) {
			s := schemaAt(t, loadCRD(t, tc.file), tc.path)
			if s.XListType == nil || *s.XListType != "set" {
				t.Errorf("x-kubernetes-list-type = %v, want set", s.XListType)
			}
		})
	}
}

// TestCRDListMaps checks the lists the apiserver keeps duplicate-free by key.
func TestCRDListMaps(t *testing.T) {
	for _, tc := range []struct {
		file, path string
		keys       []string
	}{
		{"poise.dev_endpointsets.yaml", "spec.endpoints", []string{"address", "port"}},
		{"poise.dev_endpointsets.yaml", "status.health", []string{"address", "port"}},
		{"poise.dev_upstreams.yaml", "status.conditions", []string{"type"}},
		{"poise.dev_localities.yaml", "status.conditions", []string{"type"}},
		{"poise.dev_endpointsets.yaml", "status.conditions", []string{"type"}},
		{"poise.dev_spatialdomains.yaml", "spec.replicas", []string{"name"}},
		{"poise.dev_spatialdomains.yaml", "spec.products", []string{"name"}},
		{"poise.dev_spatialdomains.yaml", "status.replicas", []string{"name"}},
		{"poise.dev_spatialdomains.yaml", "status.conditions", []string{"type"}},
		{"poise.dev_partitions.yaml", "status.conditions", []string{"type"}},
	} {
		t.Run(tc.file+"/"+tc.path, func(t *testing.T) {
			s := schemaAt(t, loadCRD(t, tc.file), tc.path)
			if s.XListType == nil || *s.XListType != "map" {
				t.Errorf("x-kubernetes-list-type = %v, want map", s.XListType)
			}
			if !slices.Equal(s.XListMapKeys, tc.keys) {
				t.Errorf("x-kubernetes-list-map-keys = %v, want %v", s.XListMapKeys, tc.keys)
			}
			// A map key must be required (or defaulted) in every item.
			for _, k := range tc.keys {
				if !slices.Contains(s.Items.Schema.Required, k) {
					t.Errorf("list map key %q is not required", k)
				}
			}
		})
	}
}

// TestCRDValidationRules checks that the CEL rules are in place. Their behaviour is
// exercised against a real apiserver by the envtest suites.
func TestCRDValidationRules(t *testing.T) {
	for _, tc := range []struct {
		file, path, ruleHas string
	}{
		{"poise.dev_upstreams.yaml", "spec.connectTimeout", "duration(self)"},
		{"poise.dev_upstreams.yaml", "spec.loadReporting.interval", "duration('60s')"},
		{"poise.dev_upstreams.yaml", "spec", "has(self.loadReporting)"},
		{"poise.dev_upstreams.yaml", "spec.outlierDetection", "duration(self.maxEjectionTime) >= duration(self.baseEjectionTime)"},
		{"poise.dev_upstreams.yaml", "spec.outlierDetection.baseEjectionTime", "duration('1h')"},
		{"poise.dev_upstreams.yaml", "spec.outlierDetection.maxEjectionTime", "duration('24h')"},
		{"poise.dev_upstreams.yaml", "spec.endpointsFrom.service.port", "type(self) == int"},
		{"poise.dev_endpointsets.yaml", "spec.endpoints[].address", "isIP(self)"},
		{"poise.dev_spatialdomains.yaml", "spec.gridDegrees", "180 % self == 0"},
		{"poise.dev_spatialdomains.yaml", "spec.products", "q.pathPrefix == p.pathPrefix"},
		{"poise.dev_partitions.yaml", "spec.extent", "self.south <= self.north"},
	} {
		t.Run(tc.file+"/"+tc.path, func(t *testing.T) {
			s := schemaAt(t, loadCRD(t, tc.file), tc.path)
			for _, r := range s.XValidations {
				if strings.Contains(r.Rule, tc.ruleHas) {
					if r.Message == "" {
						t.Errorf("rule %q has no message", r.Rule)
					}
					return
				}
			}
			t.Errorf("no x-kubernetes-validations rule containing %q in %v", tc.ruleHas, s.XValidations)
		})
	}
}
