// Package affinity decides, for one client locality, which topology the
// priority → locality → endpoint math of package weights runs on
// (PreferSameZone, PreferSameRegion: proximity ranks folded into effective
// priorities) or how its result is divided again by client zone (Balanced:
// each zone keeps what capacity allows and the global split stays exact).
// It is pure integer math over weights' types; the math itself never changes.
package affinity
