package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/suggest"
	"poise.dev/poise/pkg/topology"
)

// What the general path says of a document that does not decode, in the
// shape of every other problem: the field path, then what is wrong with it.

// yamlLine is a YAML decoder's "line N" in a message.
var yamlLine = regexp.MustCompile(`\bline (\d+)\b`)

// fileLines rewrites the line numbers of a YAML decoder's message about a
// document into lines of the file, the document's first line being the
// file's line first, and drops the decoder's "yaml: " prefix.
func fileLines(msg string, first int) string {
	msg = strings.TrimPrefix(msg, "yaml: ")
	return yamlLine.ReplaceAllStringFunc(msg, func(s string) string {
		n, err := strconv.Atoi(strings.TrimPrefix(s, "line "))
		if err != nil {
			return s
		}
		return "line " + strconv.Itoa(n+first-1)
	})
}

// fieldProblem is one problem a walk of a document against its API type
// finds.
type fieldProblem struct {
	field, detail string
}

// decodeWalk walks a document's JSON against the Go type it decodes into,
// finding what a strict decoder stops at the first of: every key no field
// has, and every value of a JSON type its field cannot take.
type decodeWalk struct {
	unknown []string // field paths
	wrong   []fieldProblem
	// noUnknown: keys without a field are not problems (a type that reads
	// only some fields of the document).
	noUnknown bool
}

// walkDocument walks js, a document as JSON, against t.
func walkDocument(js []byte, t reflect.Type, noUnknown bool) (unknown []string, wrong []fieldProblem) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, nil
	}
	w := &decodeWalk{noUnknown: noUnknown}
	w.value(v, t, "")
	return w.unknown, w.wrong
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func (w *decodeWalk) value(v any, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return // null leaves a field as it is, as JSON does
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		raw, err := json.Marshal(v)
		if err != nil {
			return
		}
		if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
			var te *json.UnmarshalTypeError
			if _, known := textTypes[t]; known || errors.As(err, &te) {
				w.wrongType(path, t, v)
			} else {
				w.wrong = append(w.wrong, fieldProblem{path, err.Error()})
			}
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			w.wrongType(path, t, v)
			return
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(m) {
			ft, known := fields[k]
			if !known {
				if !w.noUnknown {
					w.unknown = append(w.unknown, join(path, k))
				}
				continue
			}
			w.value(m[k], ft, join(path, k))
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			w.wrongType(path, t, v)
			return
		}
		for _, k := range sortedKeys(m) {
			w.value(m[k], t.Elem(), path+"["+k+"]")
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 { // []byte: base64 text
			if _, ok := v.(string); !ok {
				w.wrongType(path, t, v)
			}
			return
		}
		items, ok := v.([]any)
		if !ok {
			w.wrongType(path, t, v)
			return
		}
		for i, item := range items {
			w.value(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			w.wrongType(path, t, v)
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			w.wrongType(path, t, v)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n, ok := v.(json.Number); !ok {
			w.wrongType(path, t, v)
		} else if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err != nil {
			w.wrongType(path, t, v)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n, ok := v.(json.Number); !ok {
			w.wrongType(path, t, v)
		} else if _, err := strconv.ParseUint(string(n), 10, t.Bits()); err != nil {
			w.wrongType(path, t, v)
		}
	case reflect.Float32, reflect.Float64:
		if _, ok := v.(json.Number); !ok {
			w.wrongType(path, t, v)
		}
	}
}

// wrongType notes a value of a JSON type the field's Go type cannot take.
func (w *decodeWalk) wrongType(path string, t reflect.Type, v any) {
	w.wrong = append(w.wrong, fieldProblem{path, fmt.Sprintf("want %s, got %s%s", wanted(t, v), got(v), typeHint(t, v))})
}

// textTypes are the types that read themselves, as a person writing YAML
// names what they take.
var textTypes = map[reflect.Type]string{
	reflect.TypeFor[metav1.Duration]():    `a duration such as "5s" or "1m30s"`,
	reflect.TypeFor[metav1.Time]():        "a time (RFC 3339)",
	reflect.TypeFor[metav1.MicroTime]():   "a time (RFC 3339)",
	reflect.TypeFor[intstr.IntOrString](): "an integer or a string",
}

// wanted says what a field of type t takes, as a person writing YAML reads
// it; v is the value it got: the range of an integer field is named when
// the value is an integer out of it.
func wanted(t reflect.Type, v any) string {
	if what, ok := textTypes[t]; ok {
		return what
	}
	n, isNumber := v.(json.Number)
	integral := isNumber && isDigits(bytes.TrimPrefix([]byte(n), []byte("-")))
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "a mapping"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if !integral {
			return "an integer"
		}
		bits := t.Bits()
		return fmt.Sprintf("an integer from %d to %d", -(int64(1) << (bits - 1)), int64(1)<<(bits-1)-1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if !integral {
			return "an integer"
		}
		return fmt.Sprintf("an integer from 0 to %d", uint64(1)<<t.Bits()-1)
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a " + t.String()
}

// maxShownValue bounds a string value quoted in a message.
const maxShownValue = 64

// got says what a JSON value is.
func got(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > maxShownValue {
			x = strings.ToValidUTF8(x[:maxShownValue], "") + "…"
		}
		return "string " + strconv.Quote(x)
	case json.Number:
		s := string(x)
		if len(s) > maxShownValue {
			s = s[:maxShownValue] + "…"
		}
		return "number " + s
	case bool:
		return "boolean " + strconv.FormatBool(x)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("%T", v)
}

// typeHint says how the most common slips come about: a number quoted into
// a string, or YAML reading a bare word or number as something other than
// the string it was meant to be.
func typeHint(t reflect.Type, v any) string {
	switch x := v.(type) {
	case string:
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
			if _, err := strconv.ParseFloat(x, 64); err == nil {
				return " (the quotes make it a string: remove them)"
			}
		case reflect.Bool:
			if _, err := strconv.ParseBool(x); err == nil {
				return " (the quotes make it a string: remove them)"
			}
		}
	case json.Number:
		if t.Kind() == reflect.String {
			return fmt.Sprintf(" (YAML reads it as a number: quote it, %q)", string(x))
		}
	case bool:
		if t.Kind() == reflect.String {
			return " (YAML reads yes, no, on, off, true and false as booleans: quote the value)"
		}
	}
	return ""
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// jsonFields are the JSON names of a struct's fields and their types, as
// encoding/json reads them: an embedded struct without a name of its own
// (`json:",inline"`) lends its fields; a field tagged "-" has none.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	var add func(t reflect.Type, depth int)
	add = func(t reflect.Type, depth int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			ft := f.Type
			if f.Anonymous && name == "" {
				for ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct && depth < 8 {
					add(ft, depth+1)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if _, shadowed := out[name]; !shadowed || depth == 0 {
				out[name] = ft
			}
		}
	}
	add(t, 0)
	return out
}

// unknownField is the detail of a key no field has, with the field it most
// likely meant among fields, the fields beside it.
func unknownField(key string, fields map[string]reflect.Type) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	slices.Sort(names)
	if near, ok := suggest.Closest(key, names); ok {
		return fmt.Sprintf("unknown field (did you mean %s?)", near)
	}
	return "unknown field"
}

// unknownFieldAt is the detail of the unknown field at path in a document
// of type root, as a strict decoder names it ("spec.endpoints[0].weigth"),
// with the field it most likely meant, named by its whole path.
func unknownFieldAt(root reflect.Type, path string) string {
	segments := strings.Split(path, ".")
	t := root
	for _, s := range segments[:len(segments)-1] {
		name, _, _ := strings.Cut(s, "[")
		ft, ok := jsonFields(t)[name]
		if !ok {
			return "unknown field"
		}
		t = elemStruct(ft)
		if t == nil {
			return "unknown field"
		}
	}
	last := segments[len(segments)-1]
	detail := unknownField(last, jsonFields(t))
	if near, ok := strings.CutPrefix(detail, "unknown field (did you mean "); ok && len(segments) > 1 {
		return "unknown field (did you mean " + strings.Join(segments[:len(segments)-1], ".") + "." + near
	}
	return detail
}

// elemStruct is the struct a field of type t holds, through pointers,
// slices and maps, or nil.
func elemStruct(t reflect.Type) reflect.Type {
	for {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			t = t.Elem()
		case reflect.Struct:
			return t
		default:
			return nil
		}
	}
}

// poiseKinds are the kinds of the poise.dev group.
var poiseKinds = []string{topology.KindUpstream, topology.KindLocality, topology.KindEndpointSet, topology.KindSpatialDomain, topology.KindPartition}

// mistypedGroup reports whether a document of a Poise kind whose apiVersion
// is of another group is most likely a Poise object with its group mistyped
// ("poise.io", "poise.dve", "piose.dev"), not another project's kind of the
// same name: the group's first label is "poise", or it is within a couple
// of edits of poise.dev.
func mistypedGroup(apiVersion, kind string) bool {
	if !slices.Contains(poiseKinds, kind) {
		return false
	}
	group, _, versioned := strings.Cut(apiVersion, "/")
	if !versioned || group == v1alpha1.GroupVersion.Group {
		return false
	}
	first, _, _ := strings.Cut(group, ".")
	return first == "poise" || suggest.Distance(group, v1alpha1.GroupVersion.Group, suggest.MaxDistance) <= suggest.MaxDistance
}

// unknownKind is the detail of a kind of the poise.dev group Poise does not
// have, with the kind it most likely meant.
func unknownKind(kind string) string {
	detail := fmt.Sprintf("unknown kind %q: want Upstream, Locality, EndpointSet, SpatialDomain or Partition", kind)
	if near, ok := suggest.Closest(kind, poiseKinds); ok {
		detail += " (did you mean " + near + "?)"
	} else if i := slices.IndexFunc(poiseKinds, func(k string) bool { return strings.EqualFold(k, kind) }); i >= 0 {
		detail += " (did you mean " + poiseKinds[i] + "?)"
	}
	return detail
}
