package partitionmap

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// grid builds the expected cell list for x in [x0,x1] (each range inclusive) and y in [y0,y1].
func grid(xs [][2]int, y0, y1 int) []Cell {
	var out []Cell
	for _, r := range xs {
		for x := r[0]; x <= r[1]; x++ {
			for y := y0; y <= y1; y++ {
				out = append(out, Cell{x, y})
			}
		}
	}
	return out
}

func TestCells(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		b      BBox
		g, max int
		want   []Cell
		reason string
	}{
		{name: "inside one cell", b: BBox{1, 1, 2, 2}, g: 5, max: 10, want: []Cell{{0, 0}}},
		{name: "spans two in x", b: BBox{4, 1, 6, 2}, g: 5, max: 10, want: []Cell{{0, 0}, {1, 0}}},
		{name: "negative side", b: BBox{-6, -1, -4, 1}, g: 5, max: 10, want: grid([][2]int{{-2, -1}}, -1, 0)},
		{name: "max on edge excludes next", b: BBox{2, 2, 10, 10}, g: 5, max: 10, want: grid([][2]int{{0, 1}}, 0, 1)},
		{name: "min on edge", b: BBox{5, 5, 6, 6}, g: 5, max: 10, want: []Cell{{1, 1}}},
		{name: "exact cell", b: BBox{5, 5, 10, 10}, g: 5, max: 10, want: []Cell{{1, 1}}},
		{name: "just past edge", b: BBox{2, 2, math.Nextafter(10, 11), 3}, g: 5, max: 10, want: grid([][2]int{{0, 2}}, 0, 0)},
		{name: "just below edge", b: BBox{2, 2, math.Nextafter(10, 0), 3}, g: 5, max: 10, want: grid([][2]int{{0, 1}}, 0, 0)},
		{name: "negative edges", b: BBox{-10, -10, -5, -5}, g: 5, max: 10, want: []Cell{{-2, -2}}},
		{name: "point on edge", b: BBox{10, 10, 10, 10}, g: 5, max: 10, want: []Cell{{2, 2}}},
		{name: "point at origin", b: BBox{0, 0, 0, 0}, g: 5, max: 10, want: []Cell{{0, 0}}},
		{name: "negative zero point", b: BBox{math.Copysign(0, -1), math.Copysign(0, -1), 0, 0}, g: 5, max: 10, want: []Cell{{0, 0}}},
		{name: "vertical line on edge", b: BBox{10, 1, 10, 9}, g: 5, max: 10, want: []Cell{{2, 0}, {2, 1}}},
		{name: "horizontal line on edge", b: BBox{1, 10, 9, 10}, g: 5, max: 10, want: []Cell{{0, 2}, {1, 2}}},
		{name: "point inside", b: BBox{7.5, -7.5, 7.5, -7.5}, g: 5, max: 1, want: []Cell{{1, -2}}},
		{name: "east edge 180", b: BBox{170, 0, 180, 1}, g: 5, max: 10, want: grid([][2]int{{34, 35}}, 0, 0)},
		{name: "point at 180,90 clamped", b: BBox{180, 90, 180, 90}, g: 5, max: 10, want: []Cell{{35, 17}}},
		{name: "point at -180,-90", b: BBox{-180, -90, -180, -90}, g: 5, max: 10, want: []Cell{{-36, -18}}},
		{name: "north pole band", b: BBox{-180, 85, 180, 90}, g: 5, max: 100, want: grid([][2]int{{-36, 35}}, 17, 17)},
		{name: "south pole band", b: BBox{-180, -90, 180, -85}, g: 5, max: 100, want: grid([][2]int{{-36, 35}}, -18, -18)},
		{name: "lat line at 90", b: BBox{0, 90, 9, 90}, g: 5, max: 10, want: []Cell{{0, 17}, {1, 17}}},
		{name: "antimeridian", b: BBox{170, -10, -170, 10}, g: 5, max: 100, want: grid([][2]int{{-36, -35}, {34, 35}}, -2, 1)},
		{name: "antimeridian off edge", b: BBox{172, 1, -172, 2}, g: 5, max: 100, want: grid([][2]int{{-36, -35}, {34, 35}}, 0, 0)},
		{name: "antimeridian line 180/-180", b: BBox{180, 1, -180, 2}, g: 5, max: 100, want: []Cell{{-36, 0}, {35, 0}}},
		{name: "antimeridian west 180", b: BBox{180, 1, -172, 2}, g: 5, max: 100, want: []Cell{{-36, 0}, {-35, 0}, {35, 0}}},
		{name: "antimeridian east on -175 edge", b: BBox{175, 1, -175, 2}, g: 5, max: 100, want: []Cell{{-36, 0}, {35, 0}}},
		{name: "antimeridian nearly world same column", b: BBox{12, 0, 11, 1}, g: 5, max: 100, want: grid([][2]int{{-36, 35}}, 0, 0)},
		{name: "antimeridian 340 wide", b: BBox{10, 0, -10, 1}, g: 5, max: 100, want: grid([][2]int{{-36, -3}, {2, 35}}, 0, 0)},
		{name: "antimeridian adjacent columns", b: BBox{10, 0, 9, 1}, g: 5, max: 100, want: grid([][2]int{{-36, 35}}, 0, 0)},
		{name: "grid 90", b: BBox{-180, -90, 180, 90}, g: 90, max: 8, want: grid([][2]int{{-2, 1}}, -1, 0)},
		{name: "grid 180", b: BBox{-1, -1, 1, 1}, g: 180, max: 8, want: grid([][2]int{{-1, 0}}, -1, 0)},
		{name: "grid 1", b: BBox{0.5, 0.5, 2, 2}, g: 1, max: 8, want: grid([][2]int{{0, 1}}, 0, 1)},
		{name: "exactly max", b: BBox{0, 0, 10, 10}, g: 5, max: 4, want: grid([][2]int{{0, 1}}, 0, 1)},
		{name: "one over max", b: BBox{0, 0, 10, 10.5}, g: 5, max: 5, reason: ReasonTooManyCells},
		{name: "huge box", b: BBox{-180, -90, 180, 90}, g: 5, max: 256, reason: ReasonTooManyCells},
		{name: "world fits when allowed", b: BBox{-180, -90, 180, 90}, g: 5, max: 2592, want: grid([][2]int{{-36, 35}}, -18, 17)},
		{name: "huge antimeridian box", b: BBox{1, -90, 0, 90}, g: 1, max: 256, reason: ReasonTooManyCells},
		{name: "grid 7 does not divide 180", b: BBox{0, 0, 1, 1}, g: 7, max: 10, reason: ReasonBadGrid},
		{name: "grid 0", b: BBox{0, 0, 1, 1}, g: 0, max: 10, reason: ReasonBadGrid},
		{name: "grid negative", b: BBox{0, 0, 1, 1}, g: -5, max: 10, reason: ReasonBadGrid},
		{name: "grid 360", b: BBox{0, 0, 1, 1}, g: 360, max: 10, reason: ReasonBadGrid},
		{name: "max 0", b: BBox{0, 0, 1, 1}, g: 5, max: 0, reason: ReasonBadGrid},
		{name: "out of range box", b: BBox{0, 0, 181, 1}, g: 5, max: 10, reason: ReasonRange},
		{name: "inverted lat box", b: BBox{0, 5, 1, 1}, g: 5, max: 10, reason: ReasonOrder},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Cells(tc.b, tc.g, tc.max)
			if r := reasonOf(err); r != tc.reason {
				t.Fatalf("Cells(%+v,%d,%d) reason %q (%v), want %q", tc.b, tc.g, tc.max, r, err, tc.reason)
			}
			if err != nil {
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Cells(%+v,%d) =\n %v\nwant\n %v", tc.b, tc.g, got, tc.want)
			}
			if n, err := CountCells(tc.b, tc.g); err != nil || n != len(got) {
				t.Fatalf("CountCells = %d, %v; want %d", n, err, len(got))
			}
		})
	}
}

func TestCellsFromParsedBBox(t *testing.T) {
	t.Parallel()
	// The EPSG:4326 request must touch the same cells as the CRS84 one.
	a, err := ParseBBox("170,-10,-170,10", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseBBox("-10,170,10,-170", "EPSG:4326")
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := Cells(a, 5, 100)
	cb, _ := Cells(b, 5, 100)
	if len(ca) != 16 || !slices.Equal(ca, cb) {
		t.Fatalf("CRS84 %v vs EPSG:4326 %v", ca, cb)
	}
}

func TestAppendCellsReusesDst(t *testing.T) {
	dst := make([]Cell, 0, 64)
	dst = append(dst, Cell{99, 99})
	out, err := AppendCells(dst, BBox{0, 0, 10, 10}, 5, 10)
	if err != nil {
		t.Fatal(err)
	}
	if &out[0] != &dst[0] || len(out) != 5 || out[0] != (Cell{99, 99}) {
		t.Fatalf("did not append in place: %v", out)
	}
	out2, err := AppendCells(out[:1], BBox{-180, -90, 180, 90}, 5, 10)
	if reasonOf(err) != ReasonTooManyCells || len(out2) != 1 {
		t.Fatalf("error path changed dst: %v %v", out2, err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		out, _ = AppendCells(out[:0], BBox{170, -10, -170, 10}, 5, 100)
	})
	if allocs != 0 {
		t.Fatalf("AppendCells with room allocated %v times", allocs)
	}
}

// Every multiple of the grid and its float neighbours: one consistent edge rule.
func TestCellsEdgeNeighbours(t *testing.T) {
	t.Parallel()
	const g = 5
	for k := -36; k <= 36; k++ {
		e := float64(k * g)
		for _, x := range []float64{math.Nextafter(e, -1000), e, math.Nextafter(e, 1000)} {
			if !(x >= -180 && x <= 180) {
				continue
			}
			// A point belongs to the cell whose half-open interval holds it, clamped.
			c, err := Cells(BBox{x, 0, x, 0}, g, 10)
			if err != nil || len(c) != 1 {
				t.Fatalf("point %v: %v %v", x, c, err)
			}
			start := float64(c[0].X * g)
			if !(start <= x && (x < start+g || c[0].X == 35)) {
				t.Fatalf("point %v: column starts at %v", x, start)
			}
			// A non-degenerate box ending at x: its last column is the one whose
			// half-open interval contains the end, i.e. X*g < x <= (X+1)*g.
			if x > -179 {
				c, err = Cells(BBox{-179, 0, x, 0}, g, 100)
				if err != nil {
					t.Fatal(err)
				}
				last := float64(c[len(c)-1].X * g)
				if !(last < x && x <= last+g) {
					t.Fatalf("box [-179,%v]: last column starts at %v", x, last)
				}
			}
		}
	}
}

func ExampleCells() {
	b, _ := ParseBBox("170,-10,-170,10", "")
	cells, _ := Cells(b, 5, 256)
	for _, c := range cells[:3] {
		fmt.Printf("%d:%d ", c.X*5, c.Y*5)
	}
	fmt.Println(len(cells))
	// Output: -180:-10 -180:-5 -180:0 16
}
