package controlplane

import (
	"maps"
	"testing"

	"poise.dev/poise/pkg/loadreport"
)

func TestClassRequests(t *testing.T) {
	if got, ok := classRequests(nil); ok || got != nil {
		t.Errorf("a cluster the store does not know: %v %v", got, ok)
	}
	if got, ok := classRequests([]loadreport.EndpointLoad{}); !ok || len(got) != 0 {
		t.Errorf("a known cluster without endpoints: %v %v", got, ok)
	}
	cl := func(class string, issued uint64) loadreport.ClassLoad {
		return loadreport.ClassLoad{Class: class, Load: loadreport.Load{Issued: issued, Successes: 1}}
	}
	got, ok := classRequests([]loadreport.EndpointLoad{
		{Classes: []loadreport.ClassLoad{cl("eu/a", 30), cl("eu/b", 10), cl("", 5)}},
		{},
		{Classes: []loadreport.ClassLoad{cl("eu/a", 270), cl("eu/b", 1<<64-5)}},
	})
	want := map[string]uint64{"eu/a": 300, "eu/b": 1<<64 - 1, "": 5}
	if !ok || !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
