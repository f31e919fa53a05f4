package files

import (
	"fmt"
	"strings"
	"time"

	"poise.dev/poise/pkg/topology"
)

// shrink is a file that takes most of its objects out of the topology.
type shrink struct {
	file     string
	lost, of int // objects taken out, of those it defined
	// orphaned: objects it leaves naming an Upstream or a SpatialDomain
	// that no file defines, counted with lost
	orphaned int
}

func (k shrink) String() string {
	if k.orphaned == 0 {
		return fmt.Sprintf("%s would take %d of its %d objects away", k.file, k.lost, k.of)
	}
	orphans := fmt.Sprintf("%d objects naming an Upstream or SpatialDomain no file defines", k.orphaned)
	if k.orphaned == 1 {
		orphans = "1 object naming an Upstream or SpatialDomain no file defines"
	}
	if k.lost == 0 {
		return fmt.Sprintf("%s would leave %s", k.file, orphans)
	}
	return fmt.Sprintf("%s would take %d of its %d objects away and leave %s", k.file, k.lost, k.of, orphans)
}

// heldBack applies the settle rule: it returns the pending files that take at
// least half of the objects they define out of the topology, and at least
// one, and have not shown that content for Settle yet, with how long until
// the last of them has. Any of them holds back the whole change, so the
// files are applied as one state or not at all. The objects b, the change's
// batch, leaves naming an Upstream or a SpatialDomain that no file defines
// are taken out too: by the file that loses what they name, or else their
// own.
func (s *Source) heldBack(pending []*file, c *fileDelta, b topology.Batch, now time.Time) (held []shrink, wait time.Duration) {
	settle := s.settleTime()
	if settle <= 0 {
		return nil, 0
	}
	var lost, orphaned map[string]int
	for ref, d := range c.dropped {
		if c.added[ref] == nil { // not moved to, or edited in, a file
			if lost == nil {
				lost = map[string]int{}
			}
			lost[d.File]++
		}
	}
	for _, dg := range s.Dir.Dangling(b) {
		var file string
		switch {
		case c.dropped[dg.Target] != nil && c.added[dg.Target] == nil:
			file = c.dropped[dg.Target].File
		case len(c.added[dg.Object]) > 0:
			file = c.added[dg.Object][0].File
		default:
			continue
		}
		if orphaned == nil {
			orphaned = map[string]int{}
		}
		orphaned[file]++
	}
	for _, f := range pending {
		var before int
		if f.applied != nil {
			before = len(f.applied.Documents)
		}
		n := lost[f.name] + orphaned[f.name]
		if n == 0 || 2*n < before {
			f.shrunk, f.shrunkTo = time.Time{}, nil
			continue
		}
		if f.shrunk.IsZero() || f.shrunkTo != f.disk {
			f.shrunk, f.shrunkTo = now, f.disk // this content's clock starts now
		}
		if left := settle - now.Sub(f.shrunk); left > 0 {
			held = append(held, shrink{file: f.name, lost: lost[f.name], of: before, orphaned: orphaned[f.name]})
			wait = max(wait, left)
		}
	}
	return held, wait
}

func (s *Source) settleTime() time.Duration {
	if s.Settle == 0 {
		return DefaultSettle
	}
	return s.Settle
}

func heldText(held []shrink) string {
	parts := make([]string, len(held))
	for i, k := range held {
		parts[i] = k.String()
	}
	return strings.Join(parts, "; ")
}
