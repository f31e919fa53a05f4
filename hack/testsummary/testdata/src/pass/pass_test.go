package pass

import "testing"

func TestAdd(t *testing.T) { t.Log("a passing test's log is not printed") }

func TestTable(t *testing.T) {
	for _, name := range []string{"one", "two"} {
		t.Run(name, func(t *testing.T) { t.Parallel(); t.Log("subtest", name) })
	}
}
