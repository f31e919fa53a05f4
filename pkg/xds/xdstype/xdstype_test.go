package xdstype_test

import (
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"poise.dev/poise/pkg/xds/xdstype"
)

// Every row is whole and names one type: its index finds it again, and its
// service is a per-type discovery service (SotW and Delta streams, Fetch).
func TestTableRowsAreWhole(t *testing.T) {
	urls, shorts := map[string]bool{}, map[string]bool{}
	for i, typ := range xdstype.All() {
		if typ.URL == "" || typ.Short == "" || typ.Service == nil {
			t.Fatalf("row %d is not whole: %+v", i, typ)
		}
		if urls[typ.URL] || shorts[typ.Short] {
			t.Fatalf("row %d repeats %s or %s", i, typ.URL, typ.Short)
		}
		urls[typ.URL], shorts[typ.Short] = true, true
		if got := xdstype.Index(typ.URL); got != i {
			t.Errorf("Index(%s) = %d, want %d", typ.URL, got, i)
		}
		if got := xdstype.Short(typ.URL); got != typ.Short {
			t.Errorf("Short(%s) = %s, want %s", typ.URL, got, typ.Short)
		}
		if xdstype.At(i) != typ || xdstype.URLs()[i] != typ.URL || xdstype.Shorts()[i] != typ.Short {
			t.Errorf("row %d read differently by At, URLs or Shorts", i)
		}
		var streams []string
		sotw, delta := 0, 0
		for _, sd := range typ.Service.Streams {
			if !sd.ServerStreams || !sd.ClientStreams {
				t.Errorf("%s: %s is not bidirectional", typ.Short, sd.StreamName)
			}
			switch {
			case strings.HasPrefix(sd.StreamName, "Stream"):
				sotw++
			case strings.HasPrefix(sd.StreamName, "Delta"):
				delta++
			}
			streams = append(streams, sd.StreamName)
		}
		if len(streams) != 2 || sotw != 1 || delta != 1 {
			t.Errorf("%s: service %s has streams %v, want a SotW and a Delta one", typ.Short, typ.Service.ServiceName, streams)
		}
		if len(typ.Service.Methods) != 1 || !strings.HasPrefix(typ.Service.Methods[0].MethodName, "Fetch") {
			t.Errorf("%s: service %s has methods %v, want one Fetch", typ.Short, typ.Service.ServiceName, typ.Service.Methods)
		}
	}
	if xdstype.Index("type.googleapis.com/unknown") != -1 || xdstype.Short("x") != "x" {
		t.Error("an unknown type URL is found")
	}
}

// Changes reach a client in index order, which must make before it breaks.
func TestOrderMakesBeforeBreak(t *testing.T) {
	for _, p := range [][2]string{{resource.ClusterType, resource.EndpointType}, {resource.ListenerType, resource.RouteType}} {
		if a, b := xdstype.Index(p[0]), xdstype.Index(p[1]); a < 0 || b < 0 || a > b {
			t.Errorf("%s (%d) must come before %s (%d)", xdstype.Short(p[0]), a, xdstype.Short(p[1]), b)
		}
	}
}
