package replica

import (
	"testing"

	"poise.dev/poise/pkg/kube/status"
)

// A status writer given no budget writes within that of the default options.
func TestDefaultBudgetIsThatOfTheDefaultOptions(t *testing.T) {
	t.Parallel()
	if got, want := status.DefaultBudget(), (Options{}).StatusBudgetOf(); got != want {
		t.Fatalf("status.DefaultBudget() = %+v, Options{}.StatusBudgetOf() = %+v", got, want)
	}
}
