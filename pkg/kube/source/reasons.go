package source

import (
	"errors"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/weights"
)

// reasonOf maps a topology problem to the status reason a person sees.
func reasonOf(err error) string {
	switch {
	case errors.Is(err, weights.ErrInconsistentTopology):
		return v1alpha1.ReasonInconsistentTopology
	case errors.Is(err, weights.ErrDuplicateEndpoint):
		return v1alpha1.ReasonDuplicateEndpoint
	case errors.Is(err, weights.ErrWeightOverflow):
		return v1alpha1.ReasonWeightOverflow
	case errors.Is(err, weights.ErrInvalidWeight):
		return v1alpha1.ReasonInvalidWeight
	case errors.Is(err, weights.ErrInvalidPriority):
		return v1alpha1.ReasonInvalidPriority
	case errors.Is(err, topology.ErrAddressNotAllowed):
		return v1alpha1.ReasonAddressNotAllowed
	}
	return v1alpha1.ReasonInvalid
}
