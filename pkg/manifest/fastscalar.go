package manifest

import "strconv"

// The fast path reads the parsed tree's scalars into Go fields as the
// general path's YAML 1.1 resolution and JSON decoding would, and declines a
// scalar whose reading it is unsure of.

// isNull reports whether a node is YAML's null: no value, or a plain ~ or
// null.
func (p *fastParser) isNull(n int32) bool {
	switch p.nodes[n].kind {
	case fastNull:
		return true
	case fastPlain:
		switch string(p.bytes(n)) {
		case "~", "null", "Null", "NULL":
			return true
		}
	}
	return false
}

// yamlWords are the plain scalars YAML 1.1 (and so the general path) reads
// as something other than a string, among those plainOK lets through and
// that do not start with a digit or '-'.
var yamlWords = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true,
	"n": true, "N": true, "no": true, "No": true, "NO": true,
	"true": true, "True": true, "TRUE": true, "false": true, "False": true, "FALSE": true,
	"on": true, "On": true, "ON": true, "off": true, "Off": true, "OFF": true,
	"null": true, "Null": true, "NULL": true,
}

// str decodes a node into a string field: a quoted scalar, or a plain one
// YAML reads as a string; null leaves it empty, as JSON's null does.
func (p *fastParser) str(n int32) (string, bool) {
	switch {
	case p.isNull(n):
		return "", true
	case p.nodes[n].kind == fastQuoted:
		return p.text(n), true
	case p.nodes[n].kind != fastPlain:
		return "", false
	}
	s := p.doc[p.nodes[n].start:p.nodes[n].end]
	if c := s[0]; c >= '0' && c <= '9' || c == '-' {
		if !plainIsString(s) {
			return "", false
		}
	} else if yamlWords[string(s)] {
		return "", false
	}
	return string(s), true
}

// plainIsString reports whether YAML (go-yaml v2's resolve, which the
// general path uses) reads a plain scalar starting with a digit or '-' as a
// string: not a timestamp, an integer in any base or a float. It answers
// false when unsure.
func plainIsString(s []byte) bool {
	dots := 0
	for _, c := range s {
		if c == '.' {
			dots++
		} else if c < '0' || c > '9' {
			dots = -1 << 10
		}
	}
	if dots >= 2 {
		return true // digits and two dots or more (an IPv4 address): no number has that
	}
	if len(s) >= 5 && s[4] == '-' && isDigits(s[:4]) {
		return false // perhaps a timestamp
	}
	str := string(s)
	if _, err := strconv.ParseInt(str, 0, 64); err == nil {
		return false
	}
	if _, err := strconv.ParseUint(str, 0, 64); err == nil {
		return false
	}
	if isYAMLFloat(s) {
		return false
	}
	if len(s) > 2 && (s[0] == '0' && s[1] == 'b' || s[0] == '-' && s[1] == '0') {
		return false // perhaps binary
	}
	return true
}

func isDigits(s []byte) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(s) > 0
}

// isYAMLFloat reports whether s matches go-yaml v2's float syntax,
// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, which ParseFloat then
// always accepts (an overflow is ±Inf, not an error, once the syntax matched;
// either way the general path does not read a string).
func isYAMLFloat(s []byte) bool {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	digits := func() int {
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - j
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	} else {
		if digits() == 0 {
			return false
		}
		if i < len(s) && s[i] == '.' {
			i++
			digits()
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// integer decodes a plain decimal integer within [lo, hi]: what YAML reads
// as an integer and JSON then decodes into the field unchanged.
func (p *fastParser) integer(n int32, lo, hi int64) (int64, bool) {
	if p.nodes[n].kind != fastPlain {
		return 0, false
	}
	s := p.doc[p.nodes[n].start:p.nodes[n].end]
	digits := s
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if !isDigits(digits) || len(digits) > 1 && digits[0] == '0' || len(digits) > 18 || string(s) == "-0" {
		return 0, false
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, false
	}
	return v, true
}

func (p *fastParser) int32Ptr(n int32, dst **int32) bool {
	if p.isNull(n) {
		*dst = nil
		return true
	}
	v, ok := p.integer(n, -1<<31, 1<<31-1)
	if ok {
		x := int32(v)
		*dst = &x
	}
	return ok
}

func (p *fastParser) int64Ptr(n int32, dst **int64) bool {
	if p.isNull(n) {
		*dst = nil
		return true
	}
	v, ok := p.integer(n, -1<<62, 1<<62)
	if ok {
		*dst = &v
	}
	return ok
}

func (p *fastParser) int32Val(n int32, dst *int32) bool {
	if p.isNull(n) {
		return true
	}
	v, ok := p.integer(n, -1<<31, 1<<31-1)
	*dst = int32(v)
	return ok
}

func (p *fastParser) int64Val(n int32, dst *int64) bool {
	if p.isNull(n) {
		return true
	}
	v, ok := p.integer(n, -1<<62, 1<<62)
	*dst = v
	return ok
}

func (p *fastParser) boolVal(n int32, dst *bool) bool {
	if p.isNull(n) {
		return true
	}
	if p.nodes[n].kind != fastPlain {
		return false
	}
	switch string(p.bytes(n)) {
	case "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON":
		*dst = true
	case "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF":
		*dst = false
	default:
		return false
	}
	return true
}

// strField decodes a node into a string-kinded field.
func strField[T ~string](p *fastParser, n int32, dst *T) bool {
	s, ok := p.str(n)
	*dst = T(s)
	return ok
}
