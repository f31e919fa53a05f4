package kube_test

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsjson "sigs.k8s.io/json"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/convert"
)

// difference is where pkg/convert and the apiserver judge an admission case
// differently, and why. Each case not listed in differences is refused by
// both naming the same field (the bad objects) or accepted by both (the
// objects at the bounds).
type difference struct {
	// convertField: both refuse the object, and convert names this field
	// inside the one the apiserver names. A CEL rule written on an object
	// reports that object; convert reports the field it found wrong.
	convertField string
	// onlyCEL: the apiserver refuses the object and convert accepts it.
	onlyCEL string
	// onlyConvert: convert refuses an object the apiserver accepts.
	onlyConvert string
}

// differences, by the case's name in badObjects or goodObjects.
var differences = map[string]difference{
	"failoverRegions under Balanced":                          {convertField: "spec.localityAffinity.failoverRegions"},
	"failoverRegions under None":                              {convertField: "spec.localityAffinity.failoverRegions"},
	"Balanced under healthAdjustment Proxy":                   {convertField: "spec.localityAffinity.mode"},
	"healthCheck HTTP without http":                           {convertField: "spec.healthCheck.http"},
	"healthCheck TCP with grpc":                               {convertField: "spec.healthCheck.grpc"},
	"healthCheck timeout above a short interval":              {convertField: "spec.healthCheck.timeout"},
	"outlierDetection without loadReporting":                  {convertField: "spec.loadReporting"},
	"outlierDetection maxEjectionTime below the default base": {convertField: "spec.outlierDetection.maxEjectionTime"},
	"duplicate pathPrefix":                                    {convertField: "spec.products[1].pathPrefix"},
	// the apiserver's list-map key check names the item, convert its key
	"cluster imported twice": {convertField: "spec.endpointsFrom.clusters[1].name"},
}

// TestAdmissionMatchesConvert holds pkg/convert, which repeats the CRDs'
// schema and CEL rules in Go for manifest files, equal to the real
// apiserver: every bad object of the admission suite is refused by both,
// naming the same field, and every object at its bounds is accepted by both.
func TestAdmissionMatchesConvert(t *testing.T) {
	ns := namespace(t)
	listed := map[string]bool{}
	for _, tc := range badObjects(ns) {
		listed[tc.name] = true
		diff := differences[tc.name]
		t.Run(tc.name, func(t *testing.T) {
			conv := convertFields(t, tc.obj)
			api := apiserverFields(k8s.Create(t.Context(), tc.obj))
			if !slices.Equal(api, []string{tc.field}) {
				t.Fatalf("the apiserver names %q, the admission suite %s", api, tc.field)
			}
			switch {
			case diff.onlyCEL != "":
				if len(conv) > 0 {
					t.Errorf("convert refuses it at %q, yet differences says only CEL does (%s)", conv, diff.onlyCEL)
				}
			case len(conv) == 0:
				t.Errorf("the apiserver refuses it at %s, convert accepts it", tc.field)
			case diff.convertField != "":
				if !within(diff.convertField, tc.field) {
					t.Fatalf("differences: %s is not a field inside %s", diff.convertField, tc.field)
				}
				if !slices.Equal(conv, []string{diff.convertField}) {
					t.Errorf("convert names %q, differences says %s (inside the apiserver's %s)", conv, diff.convertField, tc.field)
				}
			case !slices.Equal(conv, api):
				t.Errorf("convert names %q, the apiserver %q", conv, api)
			}
		})
	}
	for _, tc := range goodObjects(ns) {
		listed[tc.name] = true
		diff := differences[tc.name]
		t.Run("accepts "+tc.name, func(t *testing.T) {
			conv := convertFields(t, tc.obj)
			if err := k8s.Create(t.Context(), tc.obj); err != nil {
				t.Fatalf("the apiserver refuses it: %v", err)
			}
			switch {
			case diff.onlyConvert != "" && len(conv) == 0:
				t.Errorf("convert accepts it, yet differences says it refuses it (%s)", diff.onlyConvert)
			case diff.onlyConvert == "" && len(conv) > 0:
				t.Errorf("the apiserver accepts it, convert refuses it at %q", conv)
			}
		})
	}
	for _, name := range slices.Sorted(maps.Keys(differences)) {
		if !listed[name] {
			t.Errorf("differences lists %q, which is no case of the admission suite", name)
		}
	}
}

// within reports whether path is a field inside parent.
func within(path, parent string) bool {
	rest, ok := strings.CutPrefix(path, parent)
	return ok && (strings.HasPrefix(rest, ".") || strings.HasPrefix(rest, "["))
}

// convertFields runs obj through pkg/convert as the files mode does: from
// the JSON the apiserver receives (a manifest's YAML becomes the same JSON),
// decoded strictly. It returns the fields convert's errors name, sorted and
// each once. An object left for the apiserver to name (generateName) is
// given a name first.
func convertFields(t *testing.T, obj client.Object) []string {
	t.Helper()
	js, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var errs field.ErrorList
	switch obj.(type) {
	case *v1alpha1.Upstream:
		errs = convertJSON(t, js, convert.Upstream)
	case *v1alpha1.Locality:
		errs = convertJSON(t, js, convert.Locality)
	case *v1alpha1.EndpointSet:
		errs = convertJSON(t, js, convert.EndpointSet)
	case *v1alpha1.SpatialDomain:
		errs = convertJSON(t, js, convert.SpatialDomain)
	case *v1alpha1.Partition:
		errs = convertJSON(t, js, convert.Partition)
	default:
		t.Fatalf("no conversion for %T", obj)
	}
	var fields []string
	for _, e := range errs {
		fields = append(fields, e.Field)
	}
	return sortedOnce(fields)
}

func convertJSON[T any, PT interface {
	*T
	client.Object
}, O any](t *testing.T, js []byte, conv func(PT) (O, field.ErrorList)) field.ErrorList {
	t.Helper()
	obj := PT(new(T))
	strict, err := sigsjson.UnmarshalStrict(js, obj)
	if err != nil || len(strict) > 0 {
		t.Fatalf("decoding %s: %v %v", js, err, strict)
	}
	if obj.GetName() == "" {
		obj.SetName(obj.GetGenerateName() + "x")
	}
	_, errs := conv(obj)
	return errs
}

// apiserverFields returns the fields an Invalid error's causes name, sorted
// and each once. The cause without a field that says the CEL rules were not
// run (the schema already failed) names nothing.
func apiserverFields(err error) []string {
	var status *apierrors.StatusError
	if !errors.As(err, &status) || !apierrors.IsInvalid(err) || status.ErrStatus.Details == nil {
		return nil
	}
	var fields []string
	for _, c := range status.ErrStatus.Details.Causes {
		if c.Field != "" && c.Field != "<nil>" {
			fields = append(fields, c.Field)
		}
	}
	return sortedOnce(fields)
}

func sortedOnce(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
