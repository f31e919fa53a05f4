package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"poise.dev/poise/pkg/partitionmap"
	"poise.dev/poise/pkg/weights"
)

// shop is the walkthrough's shape in namespace shop: Upstream checkout, two
// Localities of eu-west at priority 0, and an endpoint set in each.
func shop() Batch {
	var b Batch
	b.PutUpstream(shopUpstream("shop", "checkout"))
	for i, zone := range []string{"eu-west-1a", "eu-west-1b"} {
		b.PutLocality(shopLocality("checkout-"+zone, "checkout", 0, zone, uint64(3-i)))
		b.PutEndpointSet(shopSet("checkout-"+zone, "checkout", zone))
	}
	return b
}

func shopUpstream(ns, name string) Upstream {
	return Upstream{Key: Key{ns, name}, Policy: weights.DefaultPolicy(), HealthAdjustment: ControlPlane}
}

func shopLocality(name, up string, prio uint32, zone string, w uint64) Locality {
	return Locality{Key: Key{"shop", name}, Upstream: up, Priority: prio, Locality: weights.Locality{Region: "eu-west", Zone: zone}, Weight: w}
}

func shopSet(name, up, zone string) EndpointSet {
	return EndpointSet{Key: Key{"shop", name}, Upstream: up, Locality: weights.Locality{Region: "eu-west", Zone: zone},
		Endpoints: []Endpoint{{Address: testAddress(name, 0), Port: 80, Weight: 1}}}
}

func completeDirectory(t *testing.T, b Batch) *Directory {
	t.Helper()
	d := NewDirectory()
	if err := d.RequireComplete(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, d, b)
	return d
}

// TestCompleteRefusesWhatNamesNothing: with completeness required, each
// one-character mistake is refused, naming the object, the field at fault,
// the reason and what was likely meant; the snapshot stays. A Directory
// that does not require it (the Kubernetes source's) takes the same batch
// and lists the orphans, as before.
func TestCompleteRefusesWhatNamesNothing(t *testing.T) {
	withService := shopUpstream("shop", "checkout")
	withService.Service = &ServiceRef{Name: "checkout", Port: "grpc"}
	tests := []struct {
		name   string
		change func(b *Batch)
		reason error
		want   []string // Problem.Error() of each problem, in order
	}{
		{
			name:   "an endpoint set names a mistyped upstream",
			change: func(b *Batch) { b.PutEndpointSet(shopSet("checkout-eu-west-1b", "checkuot", "eu-west-1b")) },
			reason: ErrUpstreamNotFound,
			want: []string{
				"EndpointSet shop/checkout-eu-west-1b: spec.upstream: no Upstream shop/checkuot (did you mean checkout?)",
				`Locality shop/checkout-eu-west-1b: spec.upstream: matches no endpoints of Upstream shop/checkout: no endpoint set is in priority 0, locality region "eu-west" zone "eu-west-1b" (EndpointSet shop/checkout-eu-west-1b is in that locality, and names Upstream checkuot)`,
			},
		},
		{
			name: "an Upstream loses its namespace",
			change: func(b *Batch) {
				b.DeleteUpstream(Key{"shop", "checkout"})
				b.PutUpstream(shopUpstream("default", "checkout"))
			},
			reason: ErrUpstreamNotFound,
			want: []string{
				"EndpointSet shop/checkout-eu-west-1a: spec.upstream: no Upstream shop/checkout (an Upstream default/checkout exists: did it lose its metadata.namespace?)",
				"EndpointSet shop/checkout-eu-west-1b: spec.upstream: no Upstream shop/checkout (an Upstream default/checkout exists: did it lose its metadata.namespace?)",
				"Locality shop/checkout-eu-west-1a: spec.upstream: no Upstream shop/checkout (an Upstream default/checkout exists: did it lose its metadata.namespace?)",
				"Locality shop/checkout-eu-west-1b: spec.upstream: no Upstream shop/checkout (an Upstream default/checkout exists: did it lose its metadata.namespace?)",
			},
		},
		{
			name: "a Locality loses its namespace",
			change: func(b *Batch) {
				b.DeleteLocality(Key{"shop", "checkout-eu-west-1a"})
				l := shopLocality("checkout-eu-west-1a", "checkout", 0, "eu-west-1a", 3)
				l.Key.Namespace = "default"
				b.PutLocality(l)
			},
			reason: ErrUpstreamNotFound,
			want: []string{
				"Locality default/checkout-eu-west-1a: spec.upstream: no Upstream default/checkout (an Upstream shop/checkout exists: did this Locality lose its metadata.namespace?)",
			},
		},
		{
			name: "a Locality's zone is mistyped",
			change: func(b *Batch) {
				b.PutLocality(shopLocality("checkout-eu-west-1a", "checkout", 0, "eu-west-la", 3))
			},
			reason: ErrLocalityMatchesNothing,
			want: []string{
				`Locality shop/checkout-eu-west-1a: spec.zone: matches no endpoints of Upstream shop/checkout: no endpoint set is in priority 0, locality region "eu-west" zone "eu-west-la" (did you mean zone "eu-west-1a"? EndpointSet shop/checkout-eu-west-1a is there, and no Locality object places it)`,
			},
		},
		{
			name: "a Locality at another priority than its endpoint set",
			change: func(b *Batch) {
				s := shopSet("checkout-eu-west-1a", "checkout", "eu-west-1a")
				one := uint32(1)
				s.Priority = &one
				b.PutEndpointSet(s)
			},
			reason: ErrLocalityMatchesNothing,
			want: []string{
				`Locality shop/checkout-eu-west-1a: spec.priority: matches no endpoints of Upstream shop/checkout: no endpoint set is in priority 0, locality region "eu-west" zone "eu-west-1a" (EndpointSet shop/checkout-eu-west-1a is in that locality at priority 1)`,
			},
		},
		{
			name: "a Locality in a region with no endpoints",
			change: func(b *Batch) {
				b.PutLocality(Locality{Key: Key{"shop", "us"}, Upstream: "checkout", Locality: weights.Locality{Region: "us-east"}, Weight: 1})
			},
			reason: ErrLocalityMatchesNothing,
			want: []string{
				`Locality shop/us: spec.region: matches no endpoints of Upstream shop/checkout: no endpoint set is in priority 0, locality region "us-east"`,
			},
		},
		{
			name:   "the Upstream is removed",
			change: func(b *Batch) { b.DeleteUpstream(Key{"shop", "checkout"}) },
			reason: ErrUpstreamNotFound,
			want: []string{
				"EndpointSet shop/checkout-eu-west-1a: spec.upstream: no Upstream shop/checkout",
				"EndpointSet shop/checkout-eu-west-1b: spec.upstream: no Upstream shop/checkout",
				"Locality shop/checkout-eu-west-1a: spec.upstream: no Upstream shop/checkout",
				"Locality shop/checkout-eu-west-1b: spec.upstream: no Upstream shop/checkout",
			},
		},
		{
			name: "a SpatialDomain replica names a missing Upstream; a Partition a missing domain and a missing replica",
			change: func(b *Batch) {
				b.PutSpatialDomain(SpatialDomain{Key: Key{"shop", "cadastre"}, Domain: partitionmap.Domain{Name: "cadastre", GridDeg: 10, MaxCells: 100,
					Replicas: []partitionmap.Replica{{Name: "eu-1", Upstream: "checkout", Region: "eu"}, {Name: "us-1", Upstream: "checkout-us", Region: "us"}}}})
				b.PutPartition(Partition{Key: Key{"shop", "alps"}, Domain: "cadastre", Replicas: []string{"eu-1", "eu-2"}})
				b.PutPartition(Partition{Key: Key{"shop", "stray"}, Domain: "cadastr", Replicas: []string{"eu-1"}})
			},
			reason: ErrUpstreamNotFound,
			want: []string{
				"Partition shop/stray: spec.domain: no SpatialDomain shop/cadastr (did you mean cadastre?)",
				"SpatialDomain shop/cadastre: spec.replicas[1].upstream: no Upstream shop/checkout-us",
				`Partition shop/alps: spec.replicas[1]: SpatialDomain shop/cadastre has no replica "eu-2" (did you mean eu-1?)`,
			},
		},
	}
	checked := 0
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := completeDirectory(t, shop())
			good := d.Current()
			var b Batch
			tc.change(&b)
			_, err := d.Apply(b)
			var be *BatchError
			if !errors.As(err, &be) {
				t.Fatalf("Apply: %v, want a BatchError", err)
			}
			if !errors.Is(err, tc.reason) {
				t.Errorf("error is not %v: %v", tc.reason, err)
			}
			var got []string
			for _, p := range be.Problems {
				got = append(got, p.Error())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if d.Current() != good {
				t.Error("a refused batch changed the snapshot")
			}

			// as the Kubernetes source's Directory, which does not require it
			lax := NewDirectory()
			mustApply(t, lax, shop())
			if _, err := lax.Apply(b); err != nil && !errors.Is(err, ErrUpstreamNotFound) && !errors.Is(err, ErrLocalityMatchesNothing) {
				return // a refusal for its own reasons, which the test does not make
			} else if err != nil {
				t.Errorf("a Directory that does not require completeness refused: %v", err)
			}
			// it says of each Locality that matches nothing what files say
			// (but of one whose set names a missing upstream: it does not hold
			// that set), and nothing of the others
			for _, p := range be.Problems {
				if !errors.Is(p, ErrLocalityMatchesNothing) || p.Field == "spec.upstream" {
					continue
				}
				u := lax.Current().Upstream(p.Upstream)
				if got, ok := u.UnmatchedLocality(p.Objects[0].Key); !ok || got.Error() != p.Error() {
					t.Errorf("UnmatchedLocality(%s) = %v, %v; want %v", p.Objects[0].Key, ok, got, p)
				}
				checked++
				for _, g := range u.Groups {
					for _, lk := range g.LocalityObjects {
						if _, ok := u.UnmatchedLocality(lk); ok != (len(g.Sets) == 0) {
							t.Errorf("UnmatchedLocality(%s) = %v with %d sets in its group", lk, ok, len(g.Sets))
						}
					}
				}
			}
		})
	}
	if checked != 3 {
		t.Errorf("%d Localities matching nothing compared with a Directory that does not require completeness, want 3", checked)
	}
	if _, ok := completeDirectory(t, shop()).Current().Upstream(Key{"shop", "checkout"}).UnmatchedLocality(Key{"shop", "nope"}); ok {
		t.Error("UnmatchedLocality of a Locality not in the topology")
	}

	// Localities of an Upstream that imports a Service place the endpoints
	// a source imports, which a source of files does not see.
	var b Batch
	b.PutUpstream(withService)
	b.PutLocality(shopLocality("checkout-eu-west-1a", "checkout", 0, "eu-west-1a", 3))
	completeDirectory(t, b)
}

// TestDanglingDoesNotApply: Dangling says what a batch would leave naming
// nothing, and the Directory is unchanged.
func TestDanglingDoesNotApply(t *testing.T) {
	d := completeDirectory(t, shop())
	before := d.Current()
	var b Batch
	b.DeleteUpstream(Key{"shop", "checkout"})
	b.DeleteEndpointSet(Key{"shop", "checkout-eu-west-1b"})
	b.PutLocality(shopLocality("extra", "payments", 0, "eu-west-1a", 1))
	got := d.Dangling(b)
	up := ObjectRef{KindUpstream, Key{"shop", "checkout"}}
	want := []Dangling{
		{ObjectRef{KindEndpointSet, Key{"shop", "checkout-eu-west-1a"}}, "spec.upstream", up},
		{ObjectRef{KindLocality, Key{"shop", "checkout-eu-west-1a"}}, "spec.upstream", up},
		{ObjectRef{KindLocality, Key{"shop", "checkout-eu-west-1b"}}, "spec.upstream", up},
		{ObjectRef{KindLocality, Key{"shop", "extra"}}, "spec.upstream", ObjectRef{KindUpstream, Key{"shop", "payments"}}},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Dangling:\n%v\nwant\n%v", got, want)
	}
	if d.Current() != before {
		t.Error("Dangling changed the snapshot")
	}
	if _, err := d.Apply(b); err == nil {
		t.Error("the batch applied")
	}
}

func TestRequireCompleteOnAUsedDirectory(t *testing.T) {
	d := NewDirectory()
	mustApply(t, d, shop())
	if err := d.RequireComplete(); err == nil {
		t.Fatal("a Directory that already holds a topology took the requirement")
	}
	c := completeDirectory(t, shop())
	if err := c.RequireComplete(); err != nil {
		t.Fatalf("again: %v", err)
	}
}

// TestReferenceProblemsAreBounded: a batch that leaves thousands of objects
// naming nothing is refused with the first problems and a count of the rest.
func TestReferenceProblemsAreBounded(t *testing.T) {
	d := completeDirectory(t, Batch{})
	var b Batch
	for i := range 3 * maxReferenceProblems {
		b.PutLocality(shopLocality(fmt.Sprintf("l%03d", i), "nowhere", 0, "a", 1))
	}
	_, err := d.Apply(b)
	var be *BatchError
	if !errors.As(err, &be) || len(be.Problems) != maxReferenceProblems+1 {
		t.Fatalf("%d problems, want %d", len(be.Problems), maxReferenceProblems+1)
	}
	if last := be.Problems[maxReferenceProblems].Error(); last != fmt.Sprintf("and %d more objects naming what does not exist or matching nothing", 2*maxReferenceProblems) {
		t.Errorf("last problem %q", last)
	}
}

// TestCompleteIncrementalMatchesFull: after any sequence of random batches,
// a complete Directory refuses exactly the batches whose result a fresh
// complete Directory refuses as one batch, with the same problems: checking
// only what each batch changes finds what checking everything finds.
func TestCompleteIncrementalMatchesFull(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 1))
	ns := func() string { return []string{"shop", "shop", "default"}[rng.IntN(3)] }
	zone := func() string { return []string{"a", "b", "c"}[rng.IntN(3)] }
	type world struct {
		ups  map[Key]Upstream
		locs map[Key]Locality
		sets map[Key]EndpointSet
		doms map[Key]SpatialDomain
		pars map[Key]Partition
	}
	full := func(w world) Batch {
		var b Batch
		for _, u := range w.ups {
			b.PutUpstream(u)
		}
		for _, l := range w.locs {
			b.PutLocality(l)
		}
		for _, s := range w.sets {
			b.PutEndpointSet(s)
		}
		for _, dm := range w.doms {
			b.PutSpatialDomain(dm)
		}
		for _, p := range w.pars {
			b.PutPartition(p)
		}
		return b
	}
	clone := func(w world) world {
		return world{cloneMap(w.ups), cloneMap(w.locs), cloneMap(w.sets), cloneMap(w.doms), cloneMap(w.pars)}
	}
	applied, refused := 0, 0
	for run := range 40 {
		d := NewDirectory()
		if err := d.RequireComplete(); err != nil {
			t.Fatal(err)
		}
		w := world{map[Key]Upstream{}, map[Key]Locality{}, map[Key]EndpointSet{}, map[Key]SpatialDomain{}, map[Key]Partition{}}
		for step := range 30 {
			next := clone(w)
			var b Batch
			for range 1 + rng.IntN(3) {
				switch rng.IntN(9) {
				case 0, 1:
					k := Key{ns(), []string{"u", "v"}[rng.IntN(2)]}
					if _, ok := next.ups[k]; ok && rng.IntN(2) == 0 {
						delete(next.ups, k)
						b.DeleteUpstream(k)
					} else {
						u := shopUpstream(k.Namespace, k.Name)
						if rng.IntN(4) == 0 {
							u.Service = &ServiceRef{Name: k.Name, Port: "http"}
						}
						next.ups[k] = u
						b.PutUpstream(u)
					}
				case 2, 3:
					k := Key{ns(), fmt.Sprintf("l%d", rng.IntN(4))}
					if _, ok := next.locs[k]; ok && rng.IntN(3) == 0 {
						delete(next.locs, k)
						b.DeleteLocality(k)
					} else {
						l := Locality{Key: k, Upstream: []string{"u", "v"}[rng.IntN(2)], Priority: uint32(rng.IntN(2)),
							Locality: weights.Locality{Region: "r", Zone: zone()}, Weight: 1}
						next.locs[k] = l
						b.PutLocality(l)
					}
				case 4, 5, 6:
					k := Key{ns(), fmt.Sprintf("s%d", rng.IntN(4))}
					if _, ok := next.sets[k]; ok && rng.IntN(3) == 0 {
						delete(next.sets, k)
						b.DeleteEndpointSet(k)
					} else {
						s := EndpointSet{Key: k, Upstream: []string{"u", "v"}[rng.IntN(2)], Locality: weights.Locality{Region: "r", Zone: zone()},
							Endpoints: []Endpoint{{Address: testAddress(k.String(), 0), Port: 80, Weight: 1}}}
						if rng.IntN(4) == 0 {
							p := uint32(rng.IntN(2))
							s.Priority = &p
						}
						next.sets[k] = s
						b.PutEndpointSet(s)
					}
				case 7:
					k := Key{"shop", []string{"d", "e"}[rng.IntN(2)]}
					if _, ok := next.doms[k]; ok && rng.IntN(2) == 0 {
						delete(next.doms, k)
						b.DeleteSpatialDomain(k)
					} else {
						dm := SpatialDomain{Key: k, Domain: partitionmap.Domain{Name: k.Name, GridDeg: 10, MaxCells: 100,
							Replicas: []partitionmap.Replica{{Name: []string{"a", "b"}[rng.IntN(2)], Upstream: []string{"u", "v"}[rng.IntN(2)], Region: "r"}}}}
						next.doms[k] = dm
						b.PutSpatialDomain(dm)
					}
				default:
					k := Key{"shop", []string{"p", "q"}[rng.IntN(2)]}
					if _, ok := next.pars[k]; ok && rng.IntN(2) == 0 {
						delete(next.pars, k)
						b.DeletePartition(k)
					} else {
						p := Partition{Key: k, Domain: []string{"d", "e"}[rng.IntN(2)], Replicas: []string{[]string{"a", "b"}[rng.IntN(2)]},
							Extent: partitionmap.BBox{West: 0, South: 0, East: 10, North: 10}}
						next.pars[k] = p
						b.PutPartition(p)
					}
				}
			}
			_, err := d.Apply(b)
			ref := NewDirectory()
			if err := ref.RequireComplete(); err != nil {
				t.Fatal(err)
			}
			_, refErr := ref.Apply(full(next))
			if (err == nil) != (refErr == nil) || err != nil && err.Error() != refErr.Error() {
				t.Fatalf("run %d step %d: the batch gives\n%v\nthe whole topology gives\n%v", run, step, err, refErr)
			}
			if err == nil {
				w = next
				applied++
			} else {
				refused++
			}
		}
	}
	t.Logf("%d batches applied, %d refused", applied, refused)
	if applied < 100 || refused < 100 {
		t.Errorf("%d applied, %d refused: the random topologies do not exercise both", applied, refused)
	}
}

func cloneMap[V any](m map[Key]V) map[Key]V {
	out := make(map[Key]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
