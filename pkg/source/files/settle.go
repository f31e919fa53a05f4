package files

import (
	"fmt"
	"strings"
	"time"
)

// shrink is a file that takes most of its objects out of the topology.
type shrink struct {
	file     string
	lost, of int // objects taken out, of those it defined
}

func (k shrink) String() string {
	return fmt.Sprintf("%s would take %d of its %d objects away", k.file, k.lost, k.of)
}

// heldBack applies the settle rule: it returns the pending files that take at
// least half of the objects they define out of the topology, and at least
// one, and have not shown that content for Settle yet, with how long until
// the last of them has. Any of them holds back the whole change, so the
// files are applied as one state or not at all.
func (s *Source) heldBack(pending []*file, c *fileDelta, now time.Time) (held []shrink, wait time.Duration) {
	settle := s.settleTime()
	if settle <= 0 {
		return nil, 0
	}
	var lost map[string]int
	for ref, d := range c.dropped {
		if c.added[ref] == nil { // not moved to, or edited in, a file
			if lost == nil {
				lost = map[string]int{}
			}
			lost[d.File]++
		}
	}
	for _, f := range pending {
		var before int
		if f.applied != nil {
			before = len(f.applied.Documents)
		}
		n := lost[f.name]
		if n == 0 || 2*n < before {
			f.shrunk, f.shrunkTo = time.Time{}, nil
			continue
		}
		if f.shrunk.IsZero() || f.shrunkTo != f.disk {
			f.shrunk, f.shrunkTo = now, f.disk // this content's clock starts now
		}
		if left := settle - now.Sub(f.shrunk); left > 0 {
			held = append(held, shrink{file: f.name, lost: n, of: before})
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
