package loadreport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"pgregory.net/rapid"
)

// shareOf is ⌊x × r / w⌋ in big integers: the oracle of scale.
func shareOf(x, r uint64, w *big.Int) uint64 {
	n := new(big.Int).Mul(new(big.Int).SetUint64(x), new(big.Int).SetUint64(r))
	return n.Quo(n, w).Uint64()
}

// bigWeight is the exact weight of stats: Σ max(issued, success + errors).
func bigWeight(stats ...[3]uint64) *big.Int {
	w := new(big.Int)
	for _, s := range stats {
		fin := new(big.Int).Add(new(big.Int).SetUint64(s[1]), new(big.Int).SetUint64(s[2]))
		if iss := new(big.Int).SetUint64(s[0]); iss.Cmp(fin) > 0 {
			fin = iss
		}
		w.Add(w, fin)
	}
	return w
}

// multi is one cluster's endpoint-granular stats, one per address (port
// 8080), counts as {issued, success, errors}.
func multi(cluster string, addrs []string, stats [][3]uint64) *endpoint.ClusterStats {
	cs := envoyStats(cluster, addrs[0], stats[0][0], stats[0][1], stats[0][2])
	for i := 1; i < len(addrs); i++ {
		cs.UpstreamLocalityStats[0].UpstreamEndpointStats = append(cs.UpstreamLocalityStats[0].UpstreamEndpointStats,
			envoyStats(cluster, addrs[i], stats[i][0], stats[i][1], stats[i][2]).UpstreamLocalityStats[0].UpstreamEndpointStats...)
	}
	return cs
}

// loadOf is one reporter's load on the endpoint at addr, zero without one.
func loadOf(r ClusterReports, id, addr string) Load {
	i := slices.Index(r.Endpoints, Endpoint{Address: addr, Port: 8080})
	for _, rep := range r.Reporters {
		if rep.ID == id && i >= 0 {
			return rep.Loads[i]
		}
	}
	return Load{}
}

// One reporter's flood is scaled down to the cap, every count by the same
// fraction rounded down, so its error ratio holds while its weight is cut;
// the room it used is gone for the rest of the window and comes back as the
// window slides; a reporter under the cap beside it is kept as sent.
func TestCapScalesAReporterDown(t *testing.T) {
	const maxReq = 1000
	s := storeOf(t, 1, Config{Bucket: time.Second, MaxRequests: maxReq})
	honest := s.Open(Reporter{ID: "honest"}, t0)
	flood := s.Open(Reporter{ID: "flood"}, t0)
	honest.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 400, 300, 100)), t0)
	sent := [][3]uint64{{0, 1_000_000_000_000, 0}, {300_000_000_000, 200_000_000_000, 100_000_000_000}}
	flood.Report(report(multi("bench/svc-0000", []string{"10.0.0.0", "10.0.0.1"}, sent)), t0)

	// 1.3 × 10^12 requests scaled to 1000: 769 successes on 10.0.0.0, and
	// 230 : 153 : 76 on 10.0.0.1
	w := bigWeight(sent...)
	r, _ := s.Reports("bench/svc-0000", t0)
	var kept uint64
	for i, addr := range []string{"10.0.0.0", "10.0.0.1"} {
		want := Load{shareOf(sent[i][0], maxReq, w), shareOf(sent[i][1], maxReq, w), shareOf(sent[i][2], maxReq, w)}
		if got := loadOf(r, "flood", addr); got != want {
			t.Errorf("flood on %s = %+v, want %+v: each count × %d / %v, rounded down", addr, got, want, maxReq, w)
		}
		kept += want.Weight()
	}
	if kept > maxReq || kept < maxReq-2 {
		t.Errorf("flood kept %d requests, want the cap %d less rounding", kept, maxReq)
	}
	if got := loadOf(r, "honest", "10.0.0.0"); got != (Load{400, 300, 100}) {
		t.Errorf("the honest reporter = %+v, want its report as sent", got)
	}
	cut := new(big.Int).Sub(w, new(big.Int).SetUint64(kept)).Uint64()
	if d := s.Drops(); d.Capped != cut || d.CappedReports != 1 {
		t.Errorf("drops = %+v, want %d requests cut in 1 report", d, cut)
	}

	// the window is full: a report 5 s later keeps only what is left
	flood.Report(report(envoyStats("bench/svc-0000", "10.0.0.2", 1000, 1000, 0)), t0.Add(5*time.Second))
	r, _ = s.Reports("bench/svc-0000", t0.Add(5*time.Second))
	if got := loadOf(r, "flood", "10.0.0.2"); got.Issued != maxReq-kept {
		t.Errorf("a report within the same window kept %+v, want the %d left", got, maxReq-kept)
	}
	// once the first bucket left the window, its room is back
	flood.Report(report(envoyStats("bench/svc-0000", "10.0.0.2", 900, 900, 0)), t0.Add(6*time.Second))
	r, _ = s.Reports("bench/svc-0000", t0.Add(6*time.Second))
	if got := loadOf(r, "flood", "10.0.0.2"); got.Issued != maxReq-kept+900 {
		t.Errorf("after the window slid: %+v, want %d", got, maxReq-kept+900)
	}
}

// The cap is per cluster: a reporter of two clusters may weigh up to it on
// each.
func TestCapIsPerCluster(t *testing.T) {
	s := storeOf(t, 2, Config{MaxRequests: 1000})
	st := s.Open(Reporter{ID: "n", Region: "eu", Zone: "a"}, t0)
	st.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 900, 900, 0), envoyStats("bench/svc-0001", "10.0.1.0", 900, 900, 0)), t0)
	for _, c := range []struct{ cluster, addr string }{{"bench/svc-0000", "10.0.0.0"}, {"bench/svc-0001", "10.0.1.0"}} {
		if e := at(t, s.Cluster(c.cluster, t0), c.addr); e.Issued != 900 {
			t.Errorf("%s: %+v, want its 900 kept", c.cluster, e)
		}
	}
	if d := s.Drops(); d.CappedReports != 0 {
		t.Errorf("drops = %+v, want nothing capped", d)
	}
}

// Issued requests weigh as much as finished ones: a report of requests
// issued and never finished cannot pass the cap either (demand reads
// issued requests).
func TestCapWeighsIssuedRequests(t *testing.T) {
	s := storeOf(t, 1, Config{MaxRequests: 1000})
	st := s.Open(Reporter{ID: "n", Region: "eu", Zone: "a"}, t0)
	st.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 1<<64-1, 0, 0), envoyStats("bench/svc-0000", "10.0.0.1", 10, 10, 0)), t0)
	var issued uint64
	for _, e := range s.Cluster("bench/svc-0000", t0) {
		issued += e.Issued
	}
	if issued > 1000 {
		t.Errorf("issued kept = %d, over the cap", issued)
	}
}

// The counts kept under the largest cap never saturate: a flood is
// scaled, not clipped, so its proportions hold even at 2^64.
func TestHugeCountsAreScaledNotSaturated(t *testing.T) {
	s := storeOf(t, 1, Config{MaxRequests: MaxMaxRequests})
	a := s.Open(Reporter{ID: "a"}, t0)
	a.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 1<<63, 1<<62, 1<<62)), t0)
	e := at(t, s.Cluster("bench/svc-0000", t0), "10.0.0.0")
	if e.Issued != MaxMaxRequests || e.Successes != MaxMaxRequests/2 || e.Errors != MaxMaxRequests/2 {
		t.Errorf("kept %+v, want the cap issued, half of it each successes and errors", e.Load)
	}
	a.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 1<<63, 1<<62, 1<<62)), t0)
	if e2 := at(t, s.Cluster("bench/svc-0000", t0), "10.0.0.0"); e2.Load != e.Load {
		t.Errorf("a second flood in the full window added to %+v: %+v", e.Load, e2.Load)
	}
}

// Capped reports are logged at most once every 10 s, with camelCase keys,
// the lines in between counted on the next.
func TestCappedReportsLogBounded(t *testing.T) {
	var buf bytes.Buffer
	s := storeOf(t, 1, Config{MaxRequests: 1000, Log: slog.New(slog.NewJSONHandler(&buf, nil))})
	st := s.Open(Reporter{ID: "cert:abc"}, t0)
	for i := range 5 {
		st.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 5000, 5000, 0)), t0.Add(time.Duration(i)*time.Second))
	}
	st.Report(report(envoyStats("bench/svc-0000", "10.0.0.0", 5000, 5000, 0)), t0.Add(10*time.Second))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines, want 2:\n%s", len(lines), buf.String())
	}
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if first["reporter"] != "cert:abc" || first["cluster"] != "bench/svc-0000" || first["reportedRequests"] != 5000.0 ||
		first["keptRequests"] != 1000.0 || first["maxRequests"] != 1000.0 || first["cappedNotLoggedSinceLastLine"] != 0.0 {
		t.Errorf("first line = %v", first)
	}
	if second["keptRequests"] != 0.0 || second["cappedNotLoggedSinceLastLine"] != 4.0 {
		t.Errorf("second line = %v, want nothing kept and the 4 capped reports in between counted", second)
	}
	if d := s.Drops(); d.CappedReports != 6 || d.Capped != 6*5000-1000 {
		t.Errorf("drops = %+v", d)
	}
}

// scale is ⌊x × r / w⌋ exactly, for every x ≤ w, whether w fits 64 bits or not.
func TestScale(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := u128{rapid.Uint64Range(0, 1<<19).Draw(rt, "w.hi"), rapid.Uint64().Draw(rt, "w.lo")}
		if w == (u128{}) {
			w.lo = 1
		}
		bw := new(big.Int).Lsh(new(big.Int).SetUint64(w.hi), 64)
		bw.Add(bw, new(big.Int).SetUint64(w.lo))
		x := rapid.Uint64().Draw(rt, "x")
		if w.hi == 0 {
			x = rapid.Uint64Range(0, w.lo).Draw(rt, "x ≤ w")
		}
		r := rapid.Uint64Range(0, MaxMaxRequests).Draw(rt, "r")
		if got, want := scale(x, r, w), shareOf(x, r, bw); got != want {
			rt.Fatalf("scale(%d, %d, %v) = %d, want %d", x, r, bw, got, want)
		}
	})
}

// capAddrs are the endpoints the property reports on: three of each
// cluster, and one the clusters do not have.
var capAddrs = map[string][]string{
	"bench/svc-0000": {"10.0.0.0", "10.0.0.1", "10.0.0.20", "10.9.9.9"},
	"bench/svc-0001": {"10.0.1.0", "10.0.1.5", "10.0.1.21", "10.9.9.9"},
}

// sentStat is one endpoint stat the property sent.
type sentStat struct {
	cluster, addr string
	counts        [3]uint64 // issued, success, errors
}

// The cap's properties, over random reports of three reporters on two
// clusters, small counts and floods up to 2^64 mixed, time moving by 0 to
// 3 buckets between reports:
//   - no reporter's weight (Σ Load.Weight over a cluster's endpoints)
//     passes the cap in any window, read at the report's time or later;
//   - a reporter never capped is counted exactly as sent: its window is the
//     sum of its reports in the window's buckets;
//   - a capped report is kept in proportion: every kept count x' of its
//     stats in one cluster is x × k rounded down for one k ≤ 1, so for any
//     two counts x, y of them |x'·y − y'·x| < max(x, y) (the error ratio
//     of an endpoint among them), and a report not capped is kept as sent.
func TestCapProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		maxReq := rapid.SampledFrom([]uint64{1, 1000, 5000, MaxMaxRequests}).Draw(rt, "cap")
		const bucket = time.Second
		s := storeOf(t, 2, Config{Bucket: bucket, MaxRequests: maxReq})
		ids := []string{"r0", "r1", "r2"}
		streams := map[string]*Stream{}
		for _, id := range ids {
			streams[id] = s.Open(Reporter{ID: id, Region: "eu", Zone: id}, t0)
		}
		type sent struct {
			epoch int64
			stats []sentStat
		}
		history := map[string][]sent{}
		capped := map[string]bool{}
		now := t0
		for range rapid.IntRange(1, 25).Draw(rt, "reports") {
			now = now.Add(time.Duration(rapid.IntRange(0, 3).Draw(rt, "buckets later")) * bucket)
			id := rapid.SampledFrom(ids).Draw(rt, "reporter")
			var stats []sentStat
			req := report()
			for _, cluster := range []string{"bench/svc-0000", "bench/svc-0001"} {
				if !rapid.Bool().Draw(rt, "reports "+cluster) {
					continue
				}
				var addrs []string
				var counts [][3]uint64
				for _, addr := range capAddrs[cluster] {
					if !rapid.Bool().Draw(rt, "endpoint") {
						continue
					}
					var c [3]uint64
					for f := range c {
						if rapid.IntRange(0, 9).Draw(rt, "flood") == 0 {
							c[f] = rapid.Uint64().Draw(rt, "huge")
						} else {
							c[f] = rapid.Uint64Range(0, 300).Draw(rt, "count")
						}
					}
					addrs, counts = append(addrs, addr), append(counts, c)
					if addr != "10.9.9.9" {
						stats = append(stats, sentStat{cluster, addr, c})
					}
				}
				if len(addrs) > 0 {
					req.ClusterStats = append(req.ClusterStats, multi(cluster, addrs, counts))
				}
			}
			before := map[string]ClusterReports{}
			for cluster := range capAddrs {
				before[cluster], _ = s.Reports(cluster, now)
			}
			cappedBefore := s.Drops().CappedReports
			streams[id].Report(req, now)
			wasCapped := s.Drops().CappedReports != cappedBefore
			capped[id] = capped[id] || wasCapped
			history[id] = append(history[id], sent{now.UnixNano() / int64(bucket), stats})

			// what this report kept, per cluster
			for cluster := range capAddrs {
				after, _ := s.Reports(cluster, now)
				var xs, kept []uint64
				for _, st := range stats {
					if st.cluster != cluster {
						continue
					}
					b, a := loadOf(before[cluster], id, st.addr), loadOf(after, id, st.addr)
					k := [3]uint64{a.Issued - b.Issued, a.Successes - b.Successes, a.Errors - b.Errors}
					if !wasCapped && k != st.counts {
						rt.Fatalf("%s on %s %s: kept %v of %v, not capped", id, cluster, st.addr, k, st.counts)
					}
					xs, kept = append(xs, st.counts[:]...), append(kept, k[:]...)
				}
				for i := range xs {
					for j := range xs {
						// |x'·y − y'·x| < max(x, y)
						l := new(big.Int).Mul(new(big.Int).SetUint64(kept[i]), new(big.Int).SetUint64(xs[j]))
						r := new(big.Int).Mul(new(big.Int).SetUint64(kept[j]), new(big.Int).SetUint64(xs[i]))
						bound := new(big.Int).SetUint64(max(xs[i], xs[j]))
						if d := l.Sub(l, r); d.Abs(d).Cmp(bound) >= 0 && bound.Sign() > 0 {
							rt.Fatalf("%s on %s: counts %v kept as %v, out of proportion at %d, %d", id, cluster, xs, kept, i, j)
						}
						if kept[i] > xs[i] {
							rt.Fatalf("%s on %s: kept %d of %d", id, cluster, kept[i], xs[i])
						}
					}
				}
			}

			// the window, read now and later
			for later := range int64(Buckets) {
				at := now.Add(time.Duration(later) * bucket)
				epoch := at.UnixNano() / int64(bucket)
				for cluster := range capAddrs {
					r, _ := s.Reports(cluster, at)
					for _, rep := range r.Reporters {
						var w uint64
						for _, l := range rep.Loads {
							w += l.Weight()
						}
						if w > maxReq {
							rt.Fatalf("%s weighs %d in %s's window at +%ds, over the cap %d", rep.ID, w, cluster, later, maxReq)
						}
					}
					for _, id := range ids {
						if capped[id] {
							continue
						}
						for _, addr := range capAddrs[cluster] {
							var want Load
							for _, h := range history[id] {
								if h.epoch <= epoch-Buckets || h.epoch > epoch {
									continue
								}
								for _, st := range h.stats {
									if st.cluster == cluster && st.addr == addr {
										want.plus(Load{st.counts[0], st.counts[1], st.counts[2]})
									}
								}
							}
							if got := loadOf(r, id, addr); got != want {
								rt.Fatalf("%s, never capped, on %s %s at +%ds: %+v, want %+v as sent", id, cluster, addr, later, got, want)
							}
						}
					}
				}
			}
		}
	})
}

func ExampleLoad_Weight() {
	fmt.Println(Load{Issued: 10, Successes: 6, Errors: 2}.Weight(), Load{Issued: 3, Successes: 6, Errors: 2}.Weight())
	// Output: 10 8
}
