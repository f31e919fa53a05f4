package hang

import (
	"testing"
	"time"
)

func TestQuick(t *testing.T) { t.Log("passes before the hang") }

func TestHang(t *testing.T) {
	t.Log("waiting for something that never comes")
	time.Sleep(time.Minute)
}
