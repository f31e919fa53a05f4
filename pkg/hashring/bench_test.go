package hashring

import (
	"fmt"
	"testing"
)

// BenchmarkPick is one pick per op on a 100-endpoint table of each client
// with its default sizes; run with -benchtime=1000000x for a million picks.
func BenchmarkPick(b *testing.B) {
	eps := make([]Endpoint, 100)
	for i := range eps {
		eps[i] = Endpoint{Address: fmt.Sprintf("10.1.%d.%d:9090", i/50, i), Weight: uint32(1 + i%7), Locality: Locality{Zone: fmt.Sprint("z", i/50)}, LocalityWeight: 1, Healthy: true}
	}
	for _, c := range Clients {
		tab, err := Build(c, Config{}, eps)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.String(), func(b *testing.B) {
			b.ReportAllocs()
			h := uint64(0x9e3779b97f4a7c15)
			sink := 0
			for b.Loop() {
				h = h*6364136223846793005 + 1442695040888963407
				e, _ := tab.Pick(h)
				sink += e
			}
			if sink < 0 {
				b.Fatal(sink)
			}
		})
	}
}

// BenchmarkBuild is one build of each client's 100-endpoint table.
func BenchmarkBuild(b *testing.B) {
	eps := make([]Endpoint, 100)
	for i := range eps {
		eps[i] = Endpoint{Address: fmt.Sprintf("10.1.%d.%d:9090", i/50, i), Weight: uint32(1 + i%7), Locality: Locality{Zone: fmt.Sprint("z", i/50)}, LocalityWeight: 1, Healthy: true}
	}
	for _, c := range Clients {
		b.Run(c.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(c, Config{}, eps); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
