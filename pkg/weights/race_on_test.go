//go:build race

package weights

// raceEnabled: the race detector slows code unevenly, so timing ratios are meaningless.
const raceEnabled = true
