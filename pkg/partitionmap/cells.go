package partitionmap

import (
	"math"
	"slices"
)

// Reasons carried by a *CellsError.
const (
	ReasonTooManyCells = "too_many_cells" // the box touches more than maxCells cells: fall back
	ReasonBadGrid      = "bad_grid"       // grid size not a positive divisor of 180, or maxCells < 1
)

// CellsError reports why a box was not mapped onto cells. too_many_cells is a fallback
// reason (the request is valid), not a 400.
type CellsError struct {
	Reason string
}

func (e *CellsError) Error() string { return e.Reason }

// Cell is one grid cell by integer index: it covers lon [X*G, (X+1)*G) and
// lat [Y*G, (Y+1)*G) for grid size G, with X in [-180/G, 180/G-1] and Y in
// [-ceil(90/G), ceil(90/G)-1] (see IndexBounds). Its readable key is
// fmt.Sprintf("%d:%d", X*G, Y*G).
type Cell struct {
	X, Y int
}

// axisRange returns the inclusive cell index range touched by [lo, hi] on an axis of
// half-extent limit (180 or 90), for lo <= hi. It is the one rule shared with the Lua,
// exact for every float input (k*G is exact for the small integers involved, so the
// one-step corrections below absorb the rounding of lo/G and hi/G):
//   - k0 is the largest k with k*G <= lo (the cell containing lo);
//   - if hi > lo, k1 is the largest k with k*G < hi: a box edge exactly on a cell edge
//     does not touch the next cell;
//   - if hi == lo (degenerate on this axis), k1 = k0: the cell starting at the edge;
//   - both are clamped to IndexBounds, which puts lon 180 and lat 90 in the last cell.
func axisRange(lo, hi float64, g, limit int) (k0, k1 int) {
	gf := float64(g)
	f0 := math.Floor(lo / gf)
	if f0*gf > lo {
		f0--
	} else if (f0+1)*gf <= lo {
		f0++
	}
	f1 := f0
	if hi > lo {
		f1 = math.Floor(hi / gf)
		if f1*gf >= hi {
			f1--
		} else if (f1+1)*gf < hi {
			f1++
		}
	}
	lo0, hi0 := axisBounds(g, limit)
	minK, maxK := float64(lo0), float64(hi0)
	f0 = math.Max(minK, math.Min(maxK, f0))
	f1 = math.Max(minK, math.Min(maxK, f1))
	return int(f0), int(f1)
}

// axisBounds is the index range of an axis of half-extent limit: cells are aligned on
// multiples of g, so a grid that divides 180 but not 90 (e.g. 20) has a last lat row
// that only partly lies inside [-90, 90].
func axisBounds(g, limit int) (lo, hi int) {
	n := (limit + g - 1) / g
	return -n, n - 1
}

// IndexBounds returns the inclusive X and Y index ranges of a grid of gridDeg degrees.
func IndexBounds(gridDeg int) (xMin, xMax, yMin, yMax int) {
	xMin, xMax = axisBounds(gridDeg, 180)
	yMin, yMax = axisBounds(gridDeg, 90)
	return
}

type span struct{ lo, hi int }

// spans returns the x ranges (at most two, ascending, disjoint) and the y range.
func spans(b BBox, g int) (xs [2]span, nx int, y span) {
	y.lo, y.hi = axisRange(b.South, b.North, g, 90)
	if !b.CrossesAntimeridian() {
		xs[0].lo, xs[0].hi = axisRange(b.West, b.East, g, 180)
		return xs, 1, y
	}
	// West > East: [-180, East] and [West, 180].
	w0, w1 := axisRange(-180, b.East, g, 180)
	e0, e1 := axisRange(b.West, 180, g, 180)
	if w1 >= e0 { // both ends in the same column: the box covers every column
		xs[0] = span{w0, e1}
		return xs, 1, y
	}
	xs[0], xs[1] = span{w0, w1}, span{e0, e1}
	return xs, 2, y
}

func checkGrid(g, maxCells int) error {
	if g <= 0 || g > 180 || 180%g != 0 || maxCells < 1 {
		return &CellsError{Reason: ReasonBadGrid}
	}
	return nil
}

// CountCells returns how many cells b touches, in O(1), without listing them.
func CountCells(b BBox, gridDeg int) (int, error) {
	if err := checkGrid(gridDeg, 1); err != nil {
		return 0, err
	}
	if err := b.validate(); err != nil {
		return 0, err
	}
	xs, nx, y := spans(b, gridDeg)
	w := 0
	for _, s := range xs[:nx] {
		w += s.hi - s.lo + 1
	}
	return w * (y.hi - y.lo + 1), nil
}

// Cells returns the cells touched by b on a grid of gridDeg degrees (a divisor of 180),
// ordered by X then Y. More than maxCells cells gives a *CellsError too_many_cells.
func Cells(b BBox, gridDeg int, maxCells int) ([]Cell, error) {
	return AppendCells(nil, b, gridDeg, maxCells)
}

// AppendCells is Cells appending to dst; on error dst is returned unchanged. The count
// is checked before anything is appended, so a huge box costs O(1).
func AppendCells(dst []Cell, b BBox, gridDeg int, maxCells int) ([]Cell, error) {
	if err := checkGrid(gridDeg, maxCells); err != nil {
		return dst, err
	}
	if err := b.validate(); err != nil {
		return dst, err
	}
	xs, nx, y := spans(b, gridDeg)
	w := 0
	for _, s := range xs[:nx] {
		w += s.hi - s.lo + 1
	}
	n := w * (y.hi - y.lo + 1)
	if n > maxCells {
		return dst, &CellsError{Reason: ReasonTooManyCells}
	}
	dst = slices.Grow(dst, n)
	for _, s := range xs[:nx] {
		for kx := s.lo; kx <= s.hi; kx++ {
			for ky := y.lo; ky <= y.hi; ky++ {
				dst = append(dst, Cell{X: kx, Y: ky})
			}
		}
	}
	return dst, nil
}
