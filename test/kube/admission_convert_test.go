package kube_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	sigsjson "sigs.k8s.io/json"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/config/crd"
	"poise.dev/poise/pkg/convert"
	"poise.dev/poise/pkg/kube/crdschema"
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
	"requestAffinity under RoundRobin":                        {convertField: "spec.requestAffinity"},
	"outlierDetection maxEjectionTime below the default base": {convertField: "spec.outlierDetection.maxEjectionTime"},
	"duplicate pathPrefix":                                    {convertField: "spec.products[1].pathPrefix"},
	"retries with protocol TCP":                               {convertField: "spec.retries"},
	"retries maxInterval below baseInterval":                  {convertField: "spec.retries.backoff.maxInterval"},
	// the apiserver's list-map key check names the item, convert its key
	"cluster imported twice": {convertField: "spec.endpointsFrom.clusters[1].name"},
}

// TestAdmissionMatchesConvert holds pkg/convert, which repeats the CRDs'
// schema and CEL rules in Go for manifest files, equal to the real
// apiserver: every bad object of the admission suite is refused by both,
// naming the same field, and every object at its bounds is accepted by both.
// Every CEL rule of the CRDs of config/crd has a bad object of its own: one
// the apiserver refuses with that rule's message, and convert refuses too,
// naming the same field.
func TestAdmissionMatchesConvert(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	rules := celRules(t)
	var mu sync.Mutex
	covered := map[celRule][]string{} // the cases that show each rule
	listed := map[string]bool{}
	bad, good := badObjects(ns), goodObjects(ns)
	for _, tc := range bad {
		listed[tc.name] = true
	}
	for _, tc := range good {
		listed[tc.name] = true
	}
	t.Run("cases", func(t *testing.T) {
		for _, tc := range bad {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				checkRefusal(t, tc, differences[tc.name], rules, func(r celRule) {
					mu.Lock()
					defer mu.Unlock()
					covered[r] = append(covered[r], tc.name)
				})
			})
		}
		for _, tc := range good {
			t.Run("accepts "+tc.name, func(t *testing.T) {
				t.Parallel()
				checkAcceptance(t, tc, differences[tc.name])
			})
		}
	})
	for _, name := range slices.Sorted(maps.Keys(differences)) {
		if !listed[name] {
			t.Errorf("differences lists %q, which is no case of the admission suite", name)
		}
	}
	uncovered := 0
	for _, r := range rules {
		if len(covered[r]) == 0 {
			uncovered++
			t.Errorf("no admission case shows the CEL rule of %s: none is refused by the apiserver with its message and by convert too, naming the same field", r)
		}
	}
	t.Logf("%d CEL rules in the CRDs of config/crd, %d without a case", len(rules), uncovered)
}

// checkRefusal checks that the apiserver and convert both refuse a bad
// object, naming the same field (or as diff says), and reports to cover
// each CEL rule the apiserver refused it with, when both did.
func checkRefusal(t *testing.T, tc badObject, diff difference, rules []celRule, cover func(celRule)) {
	conv := convertFields(t, tc.obj)
	causes := apiserverCauses(k8s.Create(t.Context(), tc.obj))
	api := causeFields(causes)
	if !slices.Equal(api, []string{tc.field}) {
		t.Fatalf("the apiserver names %q, the admission suite %s", api, tc.field)
	}
	switch {
	case diff.onlyCEL != "":
		if len(conv) > 0 {
			t.Errorf("convert refuses it at %q, yet differences says only CEL does (%s)", conv, diff.onlyCEL)
		}
		return // convert does not refuse it: it shows no rule
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
	if t.Failed() {
		return
	}
	gvk, err := apiutil.GVKForObject(tc.obj, k8s.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.kind == gvk.Kind && slices.ContainsFunc(causes, r.refused) {
			cover(r)
		}
	}
}

// checkAcceptance checks that the apiserver and convert both accept an
// object at the bounds (or as diff says).
func checkAcceptance(t *testing.T, tc goodObject, diff difference) {
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
}

// celRule is one x-kubernetes-validations rule of a CRD of config/crd.
type celRule struct {
	kind string
	// field is what the apiserver names when the rule refuses an object:
	// the path of the schema the rule is on, with its fieldPath; each
	// "[*]" stands for any list index or map key.
	field   string
	message string // what the apiserver says when it refuses
	rule    string
}

func (r celRule) String() string {
	return fmt.Sprintf("%s %s (%q, rule %s)", r.kind, r.field, r.message, r.rule)
}

// refused reports whether the apiserver refused an object with this rule.
func (r celRule) refused(c metav1.StatusCause) bool {
	pattern := strings.ReplaceAll(regexp.QuoteMeta(r.field), `\[\*\]`, `\[[^\]]+\]`)
	return regexp.MustCompile("^"+pattern+"$").MatchString(c.Field) && strings.Contains(c.Message, r.message)
}

// celRules are every CEL rule of every version of the CRDs of config/crd.
func celRules(t *testing.T) []celRule {
	t.Helper()
	crds, err := crdschema.Load(crd.Files, crd.Pattern)
	if err != nil {
		t.Fatal(err)
	}
	var rules []celRule
	for _, c := range crds {
		for _, v := range c.Spec.Versions {
			if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
				rules = appendRules(t, rules, c.Spec.Names.Kind, "", v.Schema.OpenAPIV3Schema)
			}
		}
	}
	if len(rules) == 0 {
		t.Fatal("no CEL rule in the CRDs of config/crd: the walk of their schemas is broken")
	}
	return rules
}

// appendRules appends the CEL rules of schema s, at path, and of every
// schema inside it.
func appendRules(t *testing.T, rules []celRule, kind, path string, s *apiextensionsv1.JSONSchemaProps) []celRule {
	for _, v := range s.XValidations {
		r := celRule{kind: kind, field: strings.TrimPrefix(path+v.FieldPath, "."), message: v.Message, rule: v.Rule}
		switch {
		case v.MessageExpression != "":
			t.Fatalf("%s: a messageExpression says what the test cannot know beforehand; give the rule a message", r)
		case r.message == "":
			r.message = "failed rule: " + v.Rule // what the apiserver says of a rule without a message
		}
		rules = append(rules, r)
	}
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		p := s.Properties[name]
		rules = appendRules(t, rules, kind, path+"."+name, &p)
	}
	if s.Items != nil {
		if s.Items.Schema != nil {
			rules = appendRules(t, rules, kind, path+"[*]", s.Items.Schema)
		}
		for i := range s.Items.JSONSchemas {
			rules = appendRules(t, rules, kind, path+"[*]", &s.Items.JSONSchemas[i])
		}
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		rules = appendRules(t, rules, kind, path+"[*]", s.AdditionalProperties.Schema)
	}
	for _, group := range [][]apiextensionsv1.JSONSchemaProps{s.AllOf, s.AnyOf, s.OneOf} {
		for i := range group {
			rules = appendRules(t, rules, kind, path, &group[i])
		}
	}
	if s.Not != nil {
		rules = appendRules(t, rules, kind, path, s.Not)
	}
	return rules
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

// apiserverCauses returns the causes of an Invalid error.
func apiserverCauses(err error) []metav1.StatusCause {
	var status *apierrors.StatusError
	if !errors.As(err, &status) || !apierrors.IsInvalid(err) || status.ErrStatus.Details == nil {
		return nil
	}
	return status.ErrStatus.Details.Causes
}

// causeFields returns the fields causes name, sorted and each once. The
// cause without a field that says the CEL rules were not run (the schema
// already failed) names nothing.
func causeFields(causes []metav1.StatusCause) []string {
	var fields []string
	for _, c := range causes {
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
