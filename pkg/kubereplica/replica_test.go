package kubereplica

import (
	"testing"

	"poise.dev/poise/pkg/kubestatus"
)

// A status writer given no budget writes within that of the default options.
func TestDefaultBudgetIsThatOfTheDefaultOptions(t *testing.T) {
	t.Parallel()
	if got, want := kubestatus.DefaultBudget(), (Options{}).StatusBudgetOf(); got != want {
		t.Fatalf("kubestatus.DefaultBudget() = %+v, Options{}.StatusBudgetOf() = %+v", got, want)
	}
}
