package translate_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/topology/topologytest"
	"poise.dev/poise/pkg/xds/translate"
)

// BenchmarkAppendEndpoints encodes one upstream of the 100k-endpoint
// fixture (20 endpoints over 3 localities) in each rendering.
func BenchmarkAppendEndpoints(b *testing.B) {
	snap, err := topology.NewDirectory().Apply(topologytest.Batch(1))
	if err != nil {
		b.Fatal(err)
	}
	u := snap.Upstreams()[0]
	for r := range translate.NumRenderings {
		b.Run(r.String(), func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				if buf, err = translate.AppendEndpoints(buf[:0], u, r); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(buf)), "bytes")
		})
	}
}

// BenchmarkMarshalEndpoints is the same CLA marshalled by protobuf-go from its
// message, for comparison.
func BenchmarkMarshalEndpoints(b *testing.B) {
	snap, err := topology.NewDirectory().Apply(topologytest.Batch(1))
	if err != nil {
		b.Fatal(err)
	}
	u := snap.Upstreams()[0]
	for r := range translate.NumRenderings {
		cla, err := translate.Endpoints(u, r)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(r.String(), func(b *testing.B) {
			var buf []byte
			opts := proto.MarshalOptions{Deterministic: true}
			b.ReportAllocs()
			for b.Loop() {
				if buf, err = opts.MarshalAppend(buf[:0], cla); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
