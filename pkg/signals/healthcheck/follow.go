package healthcheck

import (
	"context"
	"slices"

	"poise.dev/poise/pkg/topology"
)

// checked is what the Checker was last given for one upstream.
type checked struct {
	hc      *topology.HealthCheck
	targets []Target
}

// Follow gives the Checker each upstream's check and endpoints as the
// Directory changes, until ctx ends. Only upstreams that changed are looked
// at, and the Checker is called only when their check or endpoints did: a
// verdict moves its upstream's revision, and must not come back as a Set.
func Follow(ctx context.Context, dir *topology.Directory, c *Checker) {
	given := map[topology.Key]checked{}
	var seen *topology.Snapshot
	for {
		// Changed before Current: a snapshot published between them still
		// wakes the next wait.
		changed := dir.Changed()
		snap := dir.Current()
		var keys []topology.Key
		ok := false
		if seen != nil {
			keys, ok = snap.ChangedSince(seen.Revision)
		}
		if !ok { // first, or too far behind: every upstream, and every one given
			keys = nil // never append to ChangedSince's list: the snapshot keeps it
			for _, u := range snap.Upstreams() {
				keys = append(keys, u.Upstream.Key)
			}
			for k := range given {
				keys = append(keys, k)
			}
			slices.SortFunc(keys, topology.Key.Compare)
			keys = slices.Compact(keys)
		}
		for _, k := range keys {
			var want checked
			if u := snap.Upstream(k); u != nil && u.Upstream.HealthCheck != nil {
				want.hc = u.Upstream.HealthCheck
				for i, e := range u.Endpoints {
					want.targets = append(want.targets, Target{Address: e.Address, Port: e.Port, Generation: u.Origins[i].Generation})
				}
			}
			old, had := given[k]
			if !had && want.hc == nil {
				continue
			}
			if had && old.hc.Equal(want.hc) && slices.Equal(old.targets, want.targets) {
				continue
			}
			c.Set(k, want.hc, want.targets)
			if want.hc == nil {
				delete(given, k)
			} else {
				given[k] = want
			}
		}
		seen = snap
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}
