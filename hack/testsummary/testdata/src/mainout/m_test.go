package mainout

import (
	"fmt"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	fmt.Println("mainout: built the helper binary")
	os.Exit(m.Run())
}

func TestFine(t *testing.T) {}
