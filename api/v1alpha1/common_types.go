package v1alpha1

// Condition types shared by the kinds of this package.
const (
	// ConditionAccepted is True when the object is valid on its own and consistent
	// with the rest of its upstream's topology.
	ConditionAccepted = "Accepted"
	// ConditionProgrammed is True when the object's current generation has been
	// published to the xDS cache.
	ConditionProgrammed = "Programmed"
	// ConditionResolvedRefs is True when every object the object names exists: an
	// Upstream's Service, the Upstreams of a SpatialDomain's replicas, the
	// endpoints of its Upstream in a Locality's priority and locality.
	ConditionResolvedRefs = "ResolvedRefs"
	// ConditionDegraded is True when an Upstream's traffic does not go where
	// its configuration says: no capacity, drops, panic or spill. Its reason
	// is the most severe of these (NoCapacity, Dropping, Panic, Spilling);
	// False with reason Healthy otherwise.
	ConditionDegraded = "Degraded"
)

// Condition reasons. Each names something a person can act on.
const (
	// ReasonAccepted: the object was accepted (Accepted=True).
	ReasonAccepted = "Accepted"
	// ReasonInvalid: the object fails validation that the CRD schema cannot express.
	ReasonInvalid = "Invalid"
	// ReasonInconsistentTopology: objects of one (upstream, priority, locality) group
	// contradict each other, for example by advertising different locality weights.
	ReasonInconsistentTopology = "InconsistentTopology"
	// ReasonDuplicateEndpoint: one address:port appears twice in an upstream.
	ReasonDuplicateEndpoint = "DuplicateEndpoint"
	// ReasonInvalidWeight: a weight is 0 or above 4294967295.
	ReasonInvalidWeight = "InvalidWeight"
	// ReasonInvalidPriority: a priority is above 127.
	ReasonInvalidPriority = "InvalidPriority"
	// ReasonWeightOverflow: a checked sum or product of weights overflows, or the
	// endpoint weights of one locality sum above 4294967295.
	ReasonWeightOverflow = "WeightOverflow"
	// ReasonAddressNotAllowed: an endpoint address cannot be published: it is not
	// an IP address, or is unspecified, link-local, multicast or broadcast, or is
	// loopback and the Upstream does not set spec.addressPolicy.allowLoopback.
	ReasonAddressNotAllowed = "AddressNotAllowed"
	// ReasonUpstreamNotFound: the referenced Upstream does not exist in the namespace.
	ReasonUpstreamNotFound = "UpstreamNotFound"
	// ReasonMatchesNoEndpoints: ResolvedRefs=False because no endpoints of a
	// Locality's Upstream are in its priority and locality, so the weight it
	// gives applies to nothing (a mistyped zone, or endpoints yet to come).
	ReasonMatchesNoEndpoints = "MatchesNoEndpoints"
	// ReasonLocalityNotFound: no Locality matches an EndpointSet's group, so the group
	// gets priority 0 and locality weight 1.
	ReasonLocalityNotFound = "LocalityNotFound"
	// ReasonProgrammed: the object is published (Programmed=True).
	ReasonProgrammed = "Programmed"
	// ReasonPending: the object is not yet published (Programmed=False or Unknown).
	ReasonPending = "Pending"
	// ReasonConflicted: an older object of the same kind already claims what
	// this one claims (a Locality of the same upstream, priority and locality
	// with another weight); the oldest wins, by creationTimestamp, then name.
	ReasonConflicted = "Conflicted"
	// ReasonRefsNotResolved: Programmed=False because a referenced object
	// does not exist or does not match (see ResolvedRefs).
	ReasonRefsNotResolved = "RefsNotResolved"
	// Degraded reasons, most severe first.
	// ReasonNoCapacity: no endpoint can take traffic.
	ReasonNoCapacity = "NoCapacity"
	// ReasonDropping: FailClosed drops part or all of the traffic.
	ReasonDropping = "Dropping"
	// ReasonPanic: a priority that receives traffic is in panic and routes to
	// every Ready endpoint regardless of health.
	ReasonPanic = "Panic"
	// ReasonSpilling: traffic reaches a priority above 0, or a locality gets
	// less than its configured share of its priority.
	ReasonSpilling = "Spilling"
	// ReasonHealthy: Degraded=False.
	ReasonHealthy = "Healthy"
	// ReasonUnknownDomain: a Partition's spec.domain names no SpatialDomain in its
	// namespace.
	ReasonUnknownDomain = "UnknownDomain"
	// ReasonUnknownReplica: a Partition names a replica its SpatialDomain does not
	// list in spec.replicas.
	ReasonUnknownReplica = "UnknownReplica"
)

// Limits shared by the schema markers and by code that builds objects without an
// apiserver. The markers must repeat these literals; crd_test.go checks they agree.
const (
	// MaxPriority is the highest priority a Locality or EndpointSet may have.
	MaxPriority int32 = 127
	// MinWeight is the lowest locality or endpoint weight.
	MinWeight int64 = 1
	// MaxWeight is the highest locality or endpoint weight, 2^32-1.
	MaxWeight int64 = 4294967295
	// MaxEndpointsPerSet is the most endpoints one EndpointSet may list.
	MaxEndpointsPerSet = 5000
	// Millionths is 100 % in the unit of every share, health, load and
	// availability in status.
	Millionths int64 = 1_000_000
)

// LocalityID identifies a locality inside one upstream and priority. Every field is
// optional; an empty field matches only an empty field.
type LocalityID struct {
	// region is the locality's region, for example a cloud region.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Region string `json:"region,omitempty"`

	// zone is the locality's zone inside its region.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Zone string `json:"zone,omitempty"`

	// subZone is the locality's sub-zone inside its zone, for example a rack.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	SubZone string `json:"subZone,omitempty"`
}
