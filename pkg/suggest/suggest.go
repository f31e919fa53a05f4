package suggest

// MaxDistance is the most edits (insertions, deletions, substitutions and
// transpositions of adjacent bytes) a suggestion may be away from what was
// written: one slip of the finger, or two.
const MaxDistance = 2

// MaxLength bounds the names compared: a longer one (or a candidate longer
// than it) gets no suggestion, so a comparison costs at most
// MaxLength × MaxLength steps.
const MaxLength = 128

// Distance is the optimal string alignment distance between a and b: the
// fewest insertions, deletions, substitutions and transpositions of
// adjacent bytes that turn one into the other, each substring edited at
// most once. It returns limit+1 as soon as the distance is known to be
// above limit, and for strings longer than MaxLength.
func Distance(a, b string, limit int) int {
	if len(a) > MaxLength || len(b) > MaxLength {
		return limit + 1
	}
	if d := len(a) - len(b); d > limit || -d > limit {
		return limit + 1
	}
	// three rows of the dynamic programme: two back, one back, this one
	var rows [3][MaxLength + 1]int
	prev2, prev, cur := &rows[0], &rows[1], &rows[2]
	for j := 0; j <= len(b); j++ {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		best := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			v := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				v = min(v, prev2[j-2]+1)
			}
			cur[j] = v
			best = min(best, v)
		}
		if best > limit {
			return limit + 1
		}
		prev2, prev, cur = prev, cur, prev2
	}
	if prev[len(b)] > limit {
		return limit + 1
	}
	return prev[len(b)]
}

// Closest returns the candidate nearest to name, at most MaxDistance edits
// away and nearer than every other candidate, or false: a tie between two
// candidates suggests neither, and name itself is never suggested. A
// distance of more than half of name's length is no suggestion either ("ab"
// is not a slip of "xy").
func Closest(name string, candidates []string) (string, bool) {
	best, bestDist, tie := "", MaxDistance+1, false
	for _, c := range candidates {
		if c == name {
			continue
		}
		d := Distance(name, c, MaxDistance)
		switch {
		case d < bestDist:
			best, bestDist, tie = c, d, false
		case d == bestDist && c != best:
			tie = true
		}
	}
	if bestDist > MaxDistance || tie || 2*bestDist > len(name) {
		return "", false
	}
	return best, true
}

// SameName reports whether candidate is name in another namespace: the
// parts after the last '/' are equal ("shop/checkout" for "checkout" or
// for "web/checkout"), the whole is not.
func SameName(name, candidate string) bool {
	return name != candidate && base(name) == base(candidate)
}

func base(name string) string {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			return name[i+1:]
		}
	}
	return name
}

// Names returns what name most likely meant among candidates: the ones of
// the same name in other namespaces (at most limit, in candidates' order),
// else the closest (Closest), else none.
func Names(name string, candidates []string, limit int) []string {
	var same []string
	for _, c := range candidates {
		if len(same) < limit && SameName(name, c) {
			same = append(same, c)
		}
	}
	if len(same) > 0 {
		return same
	}
	if c, ok := Closest(name, candidates); ok {
		return []string{c}
	}
	return nil
}
