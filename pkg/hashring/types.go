package hashring

import (
	"errors"
	"fmt"
)

// Client is the client whose construction a table reproduces. The clients
// differ in how they weight, order and name endpoints, so a prediction holds
// for one client only.
type Client int

const (
	// EnvoyRingHash is Envoy's RING_HASH load balancer (ketama ring).
	EnvoyRingHash Client = iota + 1
	// EnvoyMaglev is Envoy's MAGLEV load balancer (its compact and original
	// tables fill the same slots with the same hosts).
	EnvoyMaglev
	// GRPCGo is grpc-go's ring_hash balancer, as pinned in go.mod (v1.85.0),
	// under its xDS resolver.
	GRPCGo
	// GRPCJS is @grpc/grpc-js-xds's ring_hash balancer.
	GRPCJS
)

// Clients lists every client, in a fixed order.
var Clients = [...]Client{EnvoyRingHash, EnvoyMaglev, GRPCGo, GRPCJS}

func (c Client) String() string {
	switch c {
	case EnvoyRingHash:
		return "envoy-ring-hash"
	case EnvoyMaglev:
		return "envoy-maglev"
	case GRPCGo:
		return "grpc-go"
	case GRPCJS:
		return "grpc-js"
	}
	return fmt.Sprintf("Client(%d)", int(c))
}

func (c Client) valid() bool { return c >= EnvoyRingHash && c <= GRPCJS }

// HashFunction is the function Envoy's ring hash places entries with. The
// other clients always use xxHash64.
type HashFunction int

const (
	// XXHash is xxHash64 with seed 0, every client's default.
	XXHash HashFunction = iota
	// MurmurHash2 is Envoy's 64-bit MurmurHash2 (libstdc++'s std::hash
	// variant, seed 0xc70f6907); Envoy's ring hash only.
	MurmurHash2
)

// Locality is an EDS locality.
type Locality struct{ Region, Zone, SubZone string }

// less is Envoy's LocalityLess: (region, zone, sub_zone), bytewise.
func (l Locality) less(m Locality) bool {
	if l.Region != m.Region {
		return l.Region < m.Region
	}
	if l.Zone != m.Zone {
		return l.Zone < m.Zone
	}
	return l.SubZone < m.SubZone
}

// Endpoint is one LbEndpoint of one priority, in the order the
// ClusterLoadAssignment lists it.
type Endpoint struct {
	// Address is "ip:port" ("[v6]:port") as the client renders it: Envoy's
	// key when there is no hash key, grpc-go's likewise, grpc-js's always.
	Address string
	// Hostname is Envoy's key when Config.UseHostname is set and there is no
	// hash key.
	Hostname string
	// HashKey is the endpoint's envoy.lb hash_key metadata, "" if none.
	// Envoy and grpc-go place the endpoint by it; grpc-js ignores it.
	HashKey string
	// Weight is the endpoint's load_balancing_weight, at least 1.
	Weight uint32
	// Locality and LocalityWeight are its LocalityLbEndpoints' locality
	// and load_balancing_weight (0: unset). Every endpoint of one locality
	// carries the same weight.
	Locality       Locality
	LocalityWeight uint32
	// Healthy is true when the client counts the endpoint healthy: EDS
	// health_status HEALTHY or UNKNOWN (and, for Envoy, no active check or
	// ejection of its own against it).
	Healthy bool
}

// Config is the client's configuration of the load balancer. Zero values
// are the clients' own defaults.
type Config struct {
	// MinRingSize and MaxRingSize are minimum_ring_size and
	// maximum_ring_size (Envoy ring hash, grpc-go, grpc-js); 0 is unset.
	MinRingSize, MaxRingSize uint64
	// RingSizeCap is the gRPC clients' own cap on both: grpc-go's
	// GRPC_RING_HASH_CAP, grpc-js's grpc.lb.ring_size_cap channel option;
	// 0 is their default, 4096.
	RingSizeCap uint64
	// HashFunction is Envoy's ring hash hash_function.
	HashFunction HashFunction
	// TableSize is Envoy Maglev's table_size (a prime); 0 is 65537.
	TableSize uint64
	// LocalityWeighted is Envoy's locality_weighted_lb_config: weights are
	// endpoint weight × locality weight, each normalised in its locality.
	LocalityWeighted bool
	// LocalLocality is Envoy's node locality, nil if the node has none: with
	// locality weighting, its locality comes first.
	LocalLocality *Locality
	// UseHostname is Envoy's use_hostname_for_hashing.
	UseHostname bool
	// Panic is true when Envoy has this priority in panic: every endpoint is
	// placed, healthy or not.
	Panic bool
	// GRPCGoLegacyWeights is grpc-go with
	// GRPC_EXPERIMENTAL_PF_WEIGHTED_SHUFFLING=false: an endpoint's weight is
	// locality weight × endpoint weight as a uint32, not the normalised
	// fixed-point product.
	GRPCGoLegacyWeights bool
	// FusedMultiplyAdd reproduces a client built to fuse the ring
	// builder's running target += scale × weight into one rounding (Go on
	// arm64 does; clang may where the target has FMA). The default is the
	// unfused x86-64 arithmetic. Envoy ring hash and grpc-go only.
	FusedMultiplyAdd bool
}

// Bounds on every input, so a table costs a bounded time and memory.
const (
	// MaxEndpoints is the most endpoints one table places.
	MaxEndpoints = 1 << 20
	// MaxKeyLen is the longest address, hostname or hash key, in bytes.
	MaxKeyLen = 1024
	// MaxRingSize is every ring client's own limit on its ring size fields.
	MaxRingSize = 8 << 20
	// MaxTableSize is Envoy's limit on Maglev's table_size.
	MaxTableSize = 5000011
	// DefaultMinRingSize, DefaultMaxRingSize, DefaultRingSizeCap and
	// DefaultTableSize are the clients' defaults.
	DefaultMinRingSize = 1024
	DefaultMaxRingSize = 8 << 20
	DefaultRingSizeCap = 4096
	DefaultTableSize   = 65537
)

// Errors Build returns, each wrapped in a *FieldError naming the field.
var (
	// ErrBound: an input is over a bound of the client's or this package's.
	ErrBound = errors.New("over its bound")
	// ErrInvalid: the client would refuse the input.
	ErrInvalid = errors.New("invalid")
	// ErrWeightOverflow: the client's own weight arithmetic would overflow,
	// so its structure is not meaningful.
	ErrWeightOverflow = errors.New("weights overflow the client's arithmetic")
	// ErrTie: two placed endpoints share a key or a hash, and the client's
	// order between them is unspecified (an unstable sort).
	ErrTie = errors.New("tie the client breaks unpredictably")
	// ErrUnsupported: the client has no such feature.
	ErrUnsupported = errors.New("not supported by this client")
)

// FieldError is a refusal of Build: which field, and why.
type FieldError struct {
	Client Client
	Field  string // e.g. "Config.TableSize", "Endpoints[3].Weight"
	Detail string
	Err    error // one of the Err* values above
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("hashring: %s: %s: %s: %s", e.Client, e.Field, e.Err, e.Detail)
}

func (e *FieldError) Unwrap() error { return e.Err }

func refuse(c Client, field string, err error, format string, args ...any) error {
	return &FieldError{Client: c, Field: field, Detail: fmt.Sprintf(format, args...), Err: err}
}
