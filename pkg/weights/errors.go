package weights

import (
	"errors"
	"fmt"
)

// Sentinel errors a caller can branch on with errors.Is; each concrete error
// below matches exactly one of them.
var (
	ErrInconsistentTopology = errors.New("InconsistentTopology")
	ErrDuplicateEndpoint    = errors.New("DuplicateEndpoint")
	ErrInvalidWeight        = errors.New("InvalidWeight")
	ErrInvalidPriority      = errors.New("InvalidPriority")
	ErrWeightOverflow       = errors.New("WeightOverflow")
	ErrInvalidPolicy        = errors.New("InvalidPolicy")
	ErrInvalidState         = errors.New("InvalidState")
)

// InconsistentTopologyError: endpoints of one (priority, locality) group
// advertise different locality weights. Indexes name the input endpoints.
type InconsistentTopologyError struct {
	Priority uint32
	Locality Locality
	Weights  [2]uint64
	Indexes  [2]int
}

func (e *InconsistentTopologyError) Error() string {
	return fmt.Sprintf("InconsistentTopology: priority %d locality %q advertises locality weights %d (endpoint #%d) and %d (endpoint #%d)",
		e.Priority, e.Locality.String(), e.Weights[0], e.Indexes[0], e.Weights[1], e.Indexes[1])
}
func (e *InconsistentTopologyError) Is(target error) bool { return target == ErrInconsistentTopology }

// DuplicateEndpointError: one address:port appears twice in an upstream.
type DuplicateEndpointError struct {
	Address string
	Port    uint32
	Indexes [2]int
}

func (e *DuplicateEndpointError) Error() string {
	return fmt.Sprintf("DuplicateEndpoint: %s appears twice (endpoints #%d and #%d)",
		hostPort(e.Address, e.Port), e.Indexes[0], e.Indexes[1])
}
func (e *DuplicateEndpointError) Is(target error) bool { return target == ErrDuplicateEndpoint }

// InvalidWeightError: an endpoint or locality weight is 0 or above MaxWeight.
type InvalidWeightError struct {
	Index int
	Field string // "weight" or "localityWeight"
	Value uint64
}

func (e *InvalidWeightError) Error() string {
	return fmt.Sprintf("InvalidWeight: endpoint #%d %s = %d, want 1..%d", e.Index, e.Field, e.Value, uint64(MaxWeight))
}
func (e *InvalidWeightError) Is(target error) bool { return target == ErrInvalidWeight }

// InvalidPriorityError: an endpoint priority is above MaxPriority.
type InvalidPriorityError struct {
	Index    int
	Priority uint32
}

func (e *InvalidPriorityError) Error() string {
	return fmt.Sprintf("InvalidPriority: endpoint #%d priority = %d, want 0..%d", e.Index, e.Priority, MaxPriority)
}
func (e *InvalidPriorityError) Is(target error) bool { return target == ErrInvalidPriority }

// WeightOverflowError: a checked sum or product overflowed, or the endpoint
// weights of one locality sum above MaxWeight.
type WeightOverflowError struct {
	What     string
	Priority uint32
	Locality Locality
}

func (e *WeightOverflowError) Error() string {
	return fmt.Sprintf("WeightOverflow: %s (priority %d locality %q)", e.What, e.Priority, e.Locality.String())
}
func (e *WeightOverflowError) Is(target error) bool { return target == ErrWeightOverflow }

// InvalidPolicyError: a policy knob is out of range.
type InvalidPolicyError struct {
	Field string
	Value uint32
	Want  string
}

func (e *InvalidPolicyError) Error() string {
	return fmt.Sprintf("InvalidPolicy: %s = %d, want %s", e.Field, e.Value, e.Want)
}
func (e *InvalidPolicyError) Is(target error) bool { return target == ErrInvalidPolicy }

func hostPort(addr string, port uint32) string {
	if len(addr) > 0 && containsColon(addr) {
		return fmt.Sprintf("[%s]:%d", addr, port)
	}
	return fmt.Sprintf("%s:%d", addr, port)
}

func containsColon(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return true
		}
	}
	return false
}

// InvalidStateError: an endpoint carries an admin state or health signal
// outside its declared values.
type InvalidStateError struct {
	Index   int
	Admin   AdminState
	Probe   ProbeHealth
	Circuit CircuitState
	Scope   Scope
}

func (e *InvalidStateError) Error() string {
	return fmt.Sprintf("InvalidState: endpoint #%d has admin %s, probe %s, circuit %s, scope %s",
		e.Index, e.Admin, e.Probe, e.Circuit, e.Scope)
}
func (e *InvalidStateError) Is(target error) bool { return target == ErrInvalidState }
