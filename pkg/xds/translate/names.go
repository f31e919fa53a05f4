package translate

// The names of clusters are in pkg/xds/xdsname, which the load reports share.

import "poise.dev/poise/pkg/topology"

// RouteName is the RDS name of an upstream's route configuration.
func RouteName(k topology.Key) string { return k.Namespace + "/" + k.Name }

// ListenerName is the LDS name of an upstream's API listener, which is what
// a gRPC client dials: xds:///name.namespace.
func ListenerName(k topology.Key) string { return k.Name + "." + k.Namespace }

// PrioritySuffix marks a locality flattened into EDS priority 0 from a later
// source priority whose (region, zone, subZone) is already taken there:
// its sub_zone becomes "<subZone>~p<priority>", repeated until the name is
// free (a source sub_zone may itself end in "~p1"). Envoy would merge equal
// entries and gRPC would reject them; the suffix keeps them distinct.
const PrioritySuffix = "~p"
