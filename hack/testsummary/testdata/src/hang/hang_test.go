package hang

import (
	"testing"
	"time"
)

func TestQuick(t *testing.T) { t.Log("passes before the hang") }

// TestHang is recorded under a short -timeout: its time must pass, so that
// the stream holds the timeout's panic the summary has to read.
func TestHang(t *testing.T) {
	t.Log("waiting for something that never comes")
	time.Sleep(time.Minute)
}
