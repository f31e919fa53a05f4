package partitionmap

import (
	"errors"
	"math"
	"net/url"
	"testing"
)

func reasonOf(err error) string {
	var be *BBoxError
	if errors.As(err, &be) {
		return be.Reason
	}
	var ce *CellsError
	if errors.As(err, &ce) {
		return ce.Reason
	}
	if err != nil {
		return "untyped:" + err.Error()
	}
	return ""
}

func TestParseBBox(t *testing.T) {
	t.Parallel()
	const epsgURI = "http://www.opengis.net/def/crs/EPSG/0/4326"
	tests := []struct {
		name, raw, crs string
		want           BBox
		reason         string
	}{
		{name: "basic", raw: "1,2,3,4", want: BBox{1, 2, 3, 4}},
		{name: "decimals and signs", raw: "-1.5,+0.25,3.,.5", want: BBox{-1.5, 0.25, 3, 0.5}},
		{name: "plus fraction", raw: "+1.5,0,2,1", want: BBox{1.5, 0, 2, 1}},
		{name: "negative zero", raw: "-0,-0,0,0", want: BBox{0, 0, 0, 0}},
		{name: "full world", raw: "-180,-90,180,90", want: BBox{-180, -90, 180, 90}},
		{name: "six numbers drop z", raw: "1,2,-100,3,4,900", want: BBox{1, 2, 3, 4}},
		{name: "six numbers bad z", raw: "1,2,x,3,4,5", reason: ReasonNumber},
		{name: "antimeridian", raw: "170,-10,-170,10", want: BBox{170, -10, -170, 10}},
		{name: "nz eez", raw: "160.6,-55.95,-170,-25.89", want: BBox{160.6, -55.95, -170, -25.89}},
		{name: "point", raw: "5,5,5,5", want: BBox{5, 5, 5, 5}},
		{name: "crs84 explicit", raw: "1,2,3,4", crs: "CRS84", want: BBox{1, 2, 3, 4}},
		{name: "crs84 uri", raw: "1,2,3,4", crs: "http://www.opengis.net/def/crs/OGC/1.3/CRS84", want: BBox{1, 2, 3, 4}},
		{name: "crs84h uri", raw: "1,2,0,3,4,0", crs: "http://www.opengis.net/def/crs/OGC/0/CRS84h", want: BBox{1, 2, 3, 4}},
		{name: "crs84 urn", raw: "1,2,3,4", crs: "urn:ogc:def:crs:OGC:1.3:CRS84", want: BBox{1, 2, 3, 4}},
		{name: "epsg short swap", raw: "2,1,4,3", crs: "EPSG:4326", want: BBox{1, 2, 3, 4}},
		{name: "epsg uri swap", raw: "-10,170,10,-170", crs: epsgURI, want: BBox{170, -10, -170, 10}},
		{name: "epsg https uri", raw: "2,1,4,3", crs: "https://www.opengis.net/def/crs/EPSG/0/4326", want: BBox{1, 2, 3, 4}},
		{name: "epsg urn", raw: "2,1,4,3", crs: "urn:ogc:def:crs:EPSG::4326", want: BBox{1, 2, 3, 4}},
		{name: "epsg six swap", raw: "2,1,0,4,3,0", crs: "EPSG:4326", want: BBox{1, 2, 3, 4}},
		// lat 100 is fine as lon in CRS84, out of range once swapped.
		{name: "epsg range after swap", raw: "100,0,100,0", crs: "EPSG:4326", reason: ReasonRange},
		{name: "crs84 same values ok", raw: "100,0,100,0", want: BBox{100, 0, 100, 0}},
		{name: "epsg 3857", raw: "1,2,3,4", crs: "EPSG:3857", reason: ReasonCRS},
		{name: "3857 uri", raw: "1,2,3,4", crs: "http://www.opengis.net/def/crs/EPSG/0/3857", reason: ReasonCRS},
		{name: "crs with blank", raw: "1,2,3,4", crs: " CRS84", reason: ReasonCRS},
		{name: "crs checked first", raw: "x", crs: "EPSG:3857", reason: ReasonCRS},
		{name: "empty", raw: "", reason: ReasonArity},
		{name: "three", raw: "1,2,3", reason: ReasonArity},
		{name: "five", raw: "1,2,3,4,5", reason: ReasonArity},
		{name: "seven", raw: "1,2,3,4,5,6,7", reason: ReasonArity},
		{name: "trailing comma", raw: "1,2,3,", reason: ReasonNumber},
		{name: "empty field", raw: "1,,3,4", reason: ReasonNumber},
		{name: "exponent", raw: "1e3,0,0,0", reason: ReasonNumber},
		{name: "upper exponent", raw: "1E1,0,20,1", reason: ReasonNumber},
		{name: "hex", raw: "0x10,0,20,1", reason: ReasonNumber},
		{name: "hex float", raw: "0x1p4,0,20,1", reason: ReasonNumber},
		{name: "leading blank", raw: " 1,2,3,4", reason: ReasonNumber},
		{name: "inner blank", raw: "1, 2,3,4", reason: ReasonNumber},
		{name: "trailing blank", raw: "1,2,3,4 ", reason: ReasonNumber},
		{name: "tab", raw: "1,2,3,\t4", reason: ReasonNumber},
		{name: "inf", raw: "inf,0,1,1", reason: ReasonNumber},
		{name: "Infinity", raw: "-Infinity,0,1,1", reason: ReasonNumber},
		{name: "nan", raw: "NaN,0,1,1", reason: ReasonNumber},
		{name: "nan lower", raw: "0,nan,1,1", reason: ReasonNumber},
		{name: "underscore", raw: "1_0,0,20,1", reason: ReasonNumber},
		{name: "sign only", raw: "-,0,1,1", reason: ReasonNumber},
		{name: "dot only", raw: ".,0,1,1", reason: ReasonNumber},
		{name: "two dots", raw: "1.2.3,0,1,1", reason: ReasonNumber},
		{name: "two signs", raw: "+-1,0,1,1", reason: ReasonNumber},
		{name: "percent encoded comma left", raw: "1%2C2,3,4,5", reason: ReasonNumber},
		{name: "number too long", raw: "1.00000000000000000000000000000000,0,2,1", reason: ReasonNumber},
		{name: "raw too long", raw: "1,2,3,4" + string(make([]byte, MaxBBoxLen)), reason: ReasonLength},
		{name: "lon over", raw: "-180.0001,0,1,1", reason: ReasonRange},
		{name: "lon over east", raw: "0,0,180.5,1", reason: ReasonRange},
		{name: "lat over", raw: "0,-90.5,1,1", reason: ReasonRange},
		{name: "lat over north", raw: "0,0,1,91", reason: ReasonRange},
		{name: "3857 metres as degrees", raw: "-20037508.34,-20048966.1,20037508.34,20048966.1", reason: ReasonRange},
		{name: "huge", raw: "99999999999999999999999999999999,0,1,1", reason: ReasonRange},
		{name: "south over north", raw: "0,10,1,5", reason: ReasonOrder},
		{name: "west over east ok", raw: "10,0,-10,5", want: BBox{10, 0, -10, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseBBox(tc.raw, tc.crs)
			if r := reasonOf(err); r != tc.reason {
				t.Fatalf("ParseBBox(%q,%q) reason %q (%v), want %q", tc.raw, tc.crs, r, err, tc.reason)
			}
			if err != nil {
				if want := "bad_bbox:" + tc.reason; err.Error() != want {
					t.Fatalf("error string %q, want %q", err.Error(), want)
				}
				return
			}
			if got != tc.want {
				t.Fatalf("ParseBBox(%q,%q) = %+v, want %+v", tc.raw, tc.crs, got, tc.want)
			}
		})
	}
}

// NaN must never pass validation, whichever field carries it (positive-form checks).
func TestValidateNaN(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	for i, b := range []BBox{
		{nan, 0, 1, 1}, {0, nan, 1, 1}, {0, 0, nan, 1}, {0, 0, 1, nan}, {nan, nan, nan, nan},
		{math.Inf(-1), 0, 1, 1}, {0, 0, math.Inf(1), 1},
	} {
		if r := reasonOf(b.validate()); r != ReasonRange {
			t.Errorf("case %d %+v: reason %q, want range", i, b, r)
		}
		if _, err := Cells(b, 5, 1000); reasonOf(err) != ReasonRange {
			t.Errorf("case %d: Cells accepted %+v: %v", i, b, err)
		}
		if _, err := CountCells(b, 5); reasonOf(err) != ReasonRange {
			t.Errorf("case %d: CountCells accepted %+v: %v", i, b, err)
		}
	}
}

func TestBBoxFromRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		header    string
		query     string
		crsHeader string
		want      BBox
		ok        bool
		reason    string
	}{
		{name: "none", query: "", ok: false},
		{name: "none with other params", query: "limit=10&bbox-crs=EPSG:4326&bbox-crs=CRS84", ok: false},
		{name: "header", header: "1,2,3,4", want: BBox{1, 2, 3, 4}, ok: true},
		{name: "query", query: "bbox=1,2,3,4", want: BBox{1, 2, 3, 4}, ok: true},
		{name: "query percent encoded", query: "bbox=1%2C2%2C3%2C4", want: BBox{1, 2, 3, 4}, ok: true},
		{name: "header wins over query", header: "1,2,3,4", query: "bbox=5,6,7,8", want: BBox{1, 2, 3, 4}, ok: true},
		{name: "header wins over duplicated query", header: "1,2,3,4", query: "bbox=5,6,7,8&bbox=9,9,9,9", want: BBox{1, 2, 3, 4}, ok: true},
		{name: "duplicate bbox", query: "bbox=1,2,3,4&bbox=1,2,3,4", reason: ReasonDuplicate},
		{name: "empty query bbox", query: "bbox=", reason: ReasonArity},
		{name: "query crs swap", query: "bbox=2,1,4,3&bbox-crs=EPSG:4326", want: BBox{1, 2, 3, 4}, ok: true},
		{name: "crs header swap", header: "2,1,4,3", crsHeader: "EPSG:4326", want: BBox{1, 2, 3, 4}, ok: true},
		{name: "crs header wins", query: "bbox=2,1,4,3&bbox-crs=CRS84", crsHeader: "EPSG:4326", want: BBox{1, 2, 3, 4}, ok: true},
		{name: "header bbox query crs", header: "2,1,4,3", query: "bbox-crs=EPSG:4326", want: BBox{1, 2, 3, 4}, ok: true},
		{name: "duplicate crs", query: "bbox=1,2,3,4&bbox-crs=CRS84&bbox-crs=CRS84", reason: ReasonDuplicate},
		{name: "unsupported crs", query: "bbox=1,2,3,4&bbox-crs=EPSG:3857", reason: ReasonCRS},
		{name: "bad number", header: "1,2,3,0x4", reason: ReasonNumber},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			got, ok, err := BBoxFromRequest(tc.header, q, tc.crsHeader)
			if r := reasonOf(err); r != tc.reason {
				t.Fatalf("reason %q (%v), want %q", r, err, tc.reason)
			}
			if ok != tc.ok || got != tc.want {
				t.Fatalf("got %+v ok=%v, want %+v ok=%v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
