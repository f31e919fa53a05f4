package partitionmap

import (
	"errors"
	"testing"
)

func FuzzParseBBox(f *testing.F) {
	for _, s := range [][2]string{
		{"1,2,3,4", ""}, {"170,-10,-170,10", ""}, {"-10,170,10,-170", "EPSG:4326"},
		{"1,2,0,3,4,0", "CRS84"}, {"-180,-90,180,90", ""}, {"180,90,180,90", ""},
		{"1e3,0,0,0", ""}, {"0x10,0,1,1", ""}, {"NaN,0,1,1", ""}, {"inf,0,1,1", ""},
		{" 1,2,3,4", ""}, {"", ""}, {"+1.5,.5,2.,3", ""}, {"1,2,3,4", "EPSG:3857"},
		{"10,0,-10,5", ""}, {"12,0,11,1", ""},
	} {
		f.Add(s[0], s[1])
	}
	grids := []int{1, 5, 15, 90, 180}
	f.Fuzz(func(t *testing.T, raw, crs string) {
		b, err := ParseBBox(raw, crs)
		if err != nil {
			var be *BBoxError
			if !errors.As(err, &be) || be.Reason == "" {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if !(b.West >= -180 && b.West <= 180 && b.East >= -180 && b.East <= 180 &&
			b.South >= -90 && b.South <= 90 && b.North >= -90 && b.North <= 90 && b.South <= b.North) {
			t.Fatalf("out of range box %+v from %q", b, raw)
		}
		for _, g := range grids {
			x0, x1, y0, y1 := IndexBounds(g)
			nx, ny := x1-x0+1, y1-y0+1
			cells, err := Cells(b, g, nx*ny)
			if err != nil {
				t.Fatalf("grid %d: %v", g, err)
			}
			if len(cells) == 0 || len(cells) > nx*ny {
				t.Fatalf("grid %d: %d cells", g, len(cells))
			}
			if n, _ := CountCells(b, g); n != len(cells) {
				t.Fatalf("grid %d: count %d != %d", g, n, len(cells))
			}
			for i, c := range cells {
				if !(c.X >= x0 && c.X <= x1 && c.Y >= y0 && c.Y <= y1) {
					t.Fatalf("grid %d: cell %+v out of bounds for %+v", g, c, b)
				}
				if i > 0 {
					p := cells[i-1]
					if !(p.X < c.X || (p.X == c.X && p.Y < c.Y)) {
						t.Fatalf("grid %d: cells not strictly ordered at %d: %v", g, i, cells)
					}
				}
			}
			if len(cells) > 1 {
				if _, err := Cells(b, g, len(cells)-1); err == nil {
					t.Fatalf("grid %d: maxCells not enforced", g)
				}
			}
		}
	})
}

// FuzzCells checks the geometric meaning of the edge rule on arbitrary valid boxes:
// every listed column/row intersects the box, and its neighbours outside the list do not.
func FuzzCells(f *testing.F) {
	f.Add(170.0, -10.0, -170.0, 10.0, uint8(1))
	f.Add(2.0, 2.0, 10.0, 10.0, uint8(1))
	f.Add(180.0, 90.0, 180.0, 90.0, uint8(0))
	f.Add(-180.0, -90.0, 180.0, 90.0, uint8(4))
	grids := []int{1, 5, 15, 20, 90, 180}
	f.Fuzz(func(t *testing.T, w, s, e, n float64, gi uint8) {
		g := grids[int(gi)%len(grids)]
		b := BBox{w, s, e, n}
		cells, err := Cells(b, g, 1<<20)
		if b.validate() != nil {
			if err == nil {
				t.Fatalf("invalid box %+v accepted", b)
			}
			return
		}
		if err != nil {
			t.Fatalf("%+v: %v", b, err)
		}
		_, _, y0, y1 := IndexBounds(g)
		gf := float64(g)
		for _, c := range cells {
			// Row touches [s, n] (half-open cell, closed box; clamped rows absorb 90).
			rs := float64(c.Y) * gf
			if !(rs <= n && (rs+gf > s || c.Y == y1) && c.Y >= y0) {
				t.Fatalf("g=%d row %d does not meet [%v,%v]", g, c.Y, s, n)
			}
			if n > s && !(rs < n) {
				t.Fatalf("g=%d row %d only touches the north edge %v", g, c.Y, n)
			}
		}
	})
}

// FuzzDecide: any request decides without panicking, deterministically, with a status
// and reason from the spec.
func FuzzDecide(f *testing.F) {
	d, parts := exampleDomain()
	d.CapPercent = 50
	m, _, err := Build(d, parts)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"8,48,9,49", "170,-10,-170,10", "1e5,2,3,4", "nan,0,0,0", ""} {
		f.Add("parcels", s, "", "/x?bbox="+s, "id", true)
	}
	f.Fuzz(func(t *testing.T, product, bbox, crs, path, id string, h0 bool) {
		h := []bool{h0, true, !h0}
		req := Request{Product: product, BBox: bbox, CRS: crs, Path: path, RequestID: id}
		a := m.Decide(req, h, nil)
		var tr Trace
		if b := m.Decide(req, h, &tr); a != b {
			t.Fatalf("%+v then %+v", a, b)
		}
		switch a.Status {
		case 200:
			if a.Pool == (a.Replica != "") {
				t.Fatalf("200 must name exactly one of pool or replica: %+v", a)
			}
		case 400, 404, 451, 503:
			if a.Pool || a.Replica != "" {
				t.Fatalf("a refusal names a target: %+v", a)
			}
		default:
			t.Fatalf("status %d", a.Status)
		}
	})
}
