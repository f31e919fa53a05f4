package publish

import (
	"strings"
	"testing"

	"poise.dev/poise/pkg/xds/xdscache"
)

func TestLuaClustersPublished(t *testing.T) {
	have := map[string]*xdscache.Entry{"spatial:ns:d:a": {}, "spatial-pool:ns:d:p": {}}
	if err := luaClustersPublished([]string{"spatial:ns:d:a", "spatial-pool:ns:d:p"}, have); err != nil {
		t.Fatal(err)
	}
	err := luaClustersPublished([]string{"spatial:ns:d:a", "spatial:ns:d:b"}, have)
	if err == nil || !strings.Contains(err.Error(), `"spatial:ns:d:b"`) {
		t.Fatalf("a missing cluster: %v", err)
	}
}
