package partitionmap

import (
	"net/url"
	"strconv"
	"strings"
)

// Reasons carried by a *BBoxError; the 400 reason is "bad_bbox:" + Reason.
const (
	ReasonArity     = "arity"     // not 4 or 6 comma-separated fields
	ReasonNumber    = "number"    // a field is not a strict decimal number
	ReasonCRS       = "crs"       // unsupported CRS
	ReasonRange     = "range"     // lon outside [-180,180] or lat outside [-90,90] (NaN included)
	ReasonOrder     = "order"     // south > north
	ReasonDuplicate = "duplicate" // the bbox (or bbox-crs) query parameter is repeated
	ReasonLength    = "length"    // raw string longer than MaxBBoxLen
)

// ReasonNoBBox is the fallback reason when a request carries no bbox at all. It is not an
// error: BBoxFromRequest reports it as ok == false with a nil error.
const ReasonNoBBox = "no_bbox"

const (
	// MaxBBoxLen caps the raw bbox string (6 numbers of MaxNumberLen plus 5 commas fit).
	MaxBBoxLen = 256
	// MaxNumberLen caps one number of the bbox.
	MaxNumberLen = 32
)

// Names of the request inputs (spec "Decision" step 1).
const (
	HeaderBBox = "x-spatial-bbox"
	HeaderCRS  = "x-spatial-crs"
	QueryBBox  = "bbox"
	QueryCRS   = "bbox-crs"
)

// BBoxError is a rejected bbox; it maps to a 400 with reason "bad_bbox:<Reason>".
type BBoxError struct {
	Reason string
}

func (e *BBoxError) Error() string { return "bad_bbox:" + e.Reason }

func bad(reason string) error { return &BBoxError{Reason: reason} }

// BBox is a box in CRS84 (lon, lat) degrees. West > East means the box crosses the
// antimeridian; South <= North always holds for a parsed box.
type BBox struct {
	West, South, East, North float64
}

// CrossesAntimeridian reports whether the box wraps across lon ±180.
func (b BBox) CrossesAntimeridian() bool { return b.West > b.East }

// validate checks ranges in positive form, so NaN never passes, then the lat order.
func (b BBox) validate() error {
	if !(b.West >= -180 && b.West <= 180 && b.East >= -180 && b.East <= 180 &&
		b.South >= -90 && b.South <= 90 && b.North >= -90 && b.North <= 90) {
		return bad(ReasonRange)
	}
	if !(b.South <= b.North) {
		return bad(ReasonOrder)
	}
	return nil
}

type axisOrder int

const (
	lonLat axisOrder = iota
	latLon
)

// crsNames maps the accepted CRS spellings, lowercased, to their axis order. The empty
// string is the OGC default, CRS84. The generated Lua carries the same table.
var crsNames = map[string]axisOrder{
	"":      lonLat,
	"crs84": lonLat, "ogc:crs84": lonLat, "crs84h": lonLat, "ogc:crs84h": lonLat,
	"http://www.opengis.net/def/crs/ogc/1.3/crs84":  lonLat,
	"https://www.opengis.net/def/crs/ogc/1.3/crs84": lonLat,
	"http://www.opengis.net/def/crs/ogc/0/crs84h":   lonLat,
	"https://www.opengis.net/def/crs/ogc/0/crs84h":  lonLat,
	"urn:ogc:def:crs:ogc:1.3:crs84":                 lonLat,
	"urn:ogc:def:crs:ogc::crs84":                    lonLat,
	"epsg:4326":                                     latLon,
	"http://www.opengis.net/def/crs/epsg/0/4326":    latLon,
	"https://www.opengis.net/def/crs/epsg/0/4326":   latLon,
	"urn:ogc:def:crs:epsg::4326":                    latLon,
}

// crsOrder looks a CRS up case-insensitively in ASCII only, as Lua's string.lower does:
// Unicode case folding (the Kelvin sign folds to "k") must not make Go accept what the
// Lua refuses.
func crsOrder(crs string) (axisOrder, bool) {
	var buf [64]byte
	if len(crs) > len(buf) {
		return 0, false
	}
	for i := 0; i < len(crs); i++ {
		c := crs[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	o, ok := crsNames[string(buf[:len(crs)])]
	return o, ok
}

// strictNumber parses s only if it matches ^[+-]?(\d+\.?\d*|\.\d+)$ and is at most
// MaxNumberLen bytes: no blanks, exponent, hex, inf, nan or underscores.
func strictNumber(s string) (float64, bool) {
	if len(s) == 0 || len(s) > MaxNumberLen {
		return 0, false
	}
	i := 0
	if s[0] == '+' || s[0] == '-' {
		i = 1
	}
	intDigits, fracDigits, dot := 0, 0, false
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			if dot {
				fracDigits++
			} else {
				intDigits++
			}
		case c == '.' && !dot:
			dot = true
		default:
			return 0, false
		}
	}
	if intDigits+fracDigits == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// ParseBBox parses an OGC API Features bbox value (already percent-decoded) in the given
// CRS and returns it in CRS84 lon/lat. Four numbers are minx,miny,maxx,maxy; six are
// minx,miny,minz,maxx,maxy,maxz and the third axis is dropped. For EPSG:4326 the values
// are lat,lon and are swapped. The CRS is checked before the numbers.
func ParseBBox(raw string, crs string) (BBox, error) {
	order, ok := crsOrder(crs)
	if !ok {
		return BBox{}, bad(ReasonCRS)
	}
	if len(raw) > MaxBBoxLen {
		return BBox{}, bad(ReasonLength)
	}
	commas := strings.Count(raw, ",")
	if commas != 3 && commas != 5 {
		return BBox{}, bad(ReasonArity)
	}
	var v [6]float64
	n := 0
	for rest, more := raw, true; more; n++ {
		var field string
		field, rest, more = strings.Cut(rest, ",")
		f, ok := strictNumber(field)
		if !ok {
			return BBox{}, bad(ReasonNumber)
		}
		v[n] = f
	}
	var a1, a2, b1, b2 float64
	switch n {
	case 4:
		a1, a2, b1, b2 = v[0], v[1], v[2], v[3]
	case 6:
		a1, a2, b1, b2 = v[0], v[1], v[3], v[4]
	default:
		return BBox{}, bad(ReasonArity)
	}
	b := BBox{West: a1, South: a2, East: b1, North: b2}
	if order == latLon {
		b = BBox{West: a2, South: a1, East: b2, North: b1}
	}
	if err := b.validate(); err != nil {
		return BBox{}, err
	}
	return b, nil
}

// BBoxFromRequest takes the bbox from the x-spatial-bbox header value if non-empty,
// else from the bbox query parameter. The CRS is the x-spatial-crs header value if
// non-empty, else the bbox-crs query parameter, else CRS84. ok is false (with a nil
// error) when there is no bbox at all: the caller falls back with ReasonNoBBox. A
// repeated bbox or bbox-crs query parameter, when it is the one used, is rejected.
func BBoxFromRequest(header string, query url.Values, crsHeader string) (BBox, bool, error) {
	q := queryBBox{bbox: query[QueryBBox], crs: query[QueryCRS]}
	return bboxFrom(header, crsHeader, q)
}

// queryBBox is what a request's query says about the bbox: every value of bbox and of
// bbox-crs, decoded.
type queryBBox struct {
	bbox, crs []string
}

func bboxFrom(header, crsHeader string, q queryBBox) (BBox, bool, error) {
	raw := header
	if raw == "" {
		switch len(q.bbox) {
		case 0:
			return BBox{}, false, nil
		case 1:
			raw = q.bbox[0]
		default:
			return BBox{}, false, bad(ReasonDuplicate)
		}
	}
	crs := crsHeader
	if crs == "" {
		switch len(q.crs) {
		case 0:
		case 1:
			crs = q.crs[0]
		default:
			return BBox{}, false, bad(ReasonDuplicate)
		}
	}
	b, err := ParseBBox(raw, crs)
	if err != nil {
		return BBox{}, false, err
	}
	return b, true, nil
}
