package xdscache

// AudienceCensus is what the cache keeps per audience, over every view and
// type: what must not grow with the namespaces of the clients it serves.
type AudienceCensus struct {
	// Groups are the groups of watches, one per zone and audience with a
	// watch: they go with their last watch.
	Groups int
	// Lists are the visible lists kept for groups to share: one per
	// audience class (what it may read) at most.
	Lists int
	// Variants are the audience variants, and VariantNamespaces the
	// namespaces they name: what the publications say, not the clients.
	Variants, VariantNamespaces int
}

// AudienceCensus counts the cache's per-audience state.
func (c *Cache) AudienceCensus() AudienceCensus {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n AudienceCensus
	for _, v := range c.views {
		for _, ts := range v.types {
			for _, auds := range ts.zones {
				n.Groups += len(auds)
			}
			for _, lists := range ts.lists {
				n.Lists += len(lists)
			}
			for _, av := range ts.audiences {
				n.Variants += len(av.sent)
				n.VariantNamespaces += len(av.byNS)
			}
		}
	}
	return n
}

// OnSignal calls f with each stream an Apply wakes, in the order it wakes
// them (nil: none).
func (c *Cache) OnSignal(f func(*Stream)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onSignal = f
}
