package server

import (
	"context"
	"math"
	"strconv"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"poise.dev/poise/pkg/affinity"
)

// DemandWeightKey is the node metadata field a client declares its demand
// weight in, for the Balanced affinity mode.
const DemandWeightKey = "poise.dev/demand-weight"

// DemandWeight is the demand a node declares: the integer in its metadata
// DemandWeightKey (a number or a string of digits, 1..affinity.MaxDemandWeight),
// else 1; ok is false when the field is there but not such an integer.
func DemandWeight(n *core.Node) (weight uint64, ok bool) {
	v, has := n.GetMetadata().GetFields()[DemandWeightKey]
	if !has {
		return 1, true
	}
	var w float64
	switch x := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		w = x.NumberValue
	case *structpb.Value_StringValue:
		if len(x.StringValue) > 7 {
			return 1, false
		}
		i, err := strconv.ParseUint(x.StringValue, 10, 64)
		if err != nil {
			return 1, false
		}
		w = float64(i)
	default:
		return 1, false
	}
	if w != math.Trunc(w) || w < 1 || w > affinity.MaxDemandWeight {
		return 1, false
	}
	return uint64(w), true
}

// demandCap is the demand weight the client of ctx may claim at most, and
// the workload instance it is: 0 (no cap) and "" when anonymous, else what
// its identity is granted, at least 1.
func (x *xdsServer) demandCap(ctx context.Context) (max uint64, instance string) {
	id, ok := IdentityFrom(ctx)
	if !ok || id.Anonymous() {
		return 0, ""
	}
	if x.demandGrant != nil {
		if g := x.demandGrant(id); g > 0 {
			return g, id.Instance
		}
	}
	return 1, id.Instance
}

// weighDemand is what a node of a client granted max (0: not capped)
// counts for in a Balanced upstream's demand: its claim, within max, so a
// client cannot move a zone's traffic by claiming more than it is.
func weighDemand(max uint64) func(*core.Node) uint64 {
	return func(n *core.Node) uint64 {
		w, _ := DemandWeight(n)
		if max > 0 {
			w = min(w, max)
		}
		return w
	}
}
