package history

import (
	"crypto/sha256"
	"time"
)

// Hash identifies a resource's content: the SHA-256 of its serialized
// bytes (the Any's value, as it came over the wire).
type Hash [sha256.Size]byte

// HashOf is the Hash of a resource's bytes.
func HashOf(b []byte) Hash { return sha256.Sum256(b) }

// Contents are the resources of one type, by name.
type Contents map[string]Hash

// View is what one client class is published: per type URL, its resources.
type View map[string]Contents

// Publication is one revision of the truth as the plane published it: the
// view of each client class, and the version strings the replicas serve it
// under (each replica names a revision its own way). Revisions increase in
// the order of the History's Publications.
type Publication struct {
	Revision uint64
	Versions []string
	Views    map[string]View
	// At is when it was published: convergence is measured from the
	// latest one (or the heal, when later).
	At time.Time
}

// Kind is what an Event records.
type Kind int

const (
	// Response: the client received a response.
	Response Kind = iota
	// ACK and NACK: the client answered the response of Nonce.
	ACK
	NACK
	// Settled: the harness waited for what it did to reach the clients
	// (an event, not a time); every client must then rest on one
	// revision's view. It names no client.
	Settled
)

func (k Kind) String() string {
	switch k {
	case Response:
		return "response"
	case ACK:
		return "ACK"
	case NACK:
		return "NACK"
	case Settled:
		return "settled"
	}
	return "unknown"
}

// Event is one message of one client's stream, in the order the client saw
// it; a History's events are in the order they happened over all clients.
type Event struct {
	Client  string
	Replica string // the replica the stream was connected to
	Kind    Kind
	Type    string // the type URL
	Nonce   string
	// Version is a response's version (SotW version_info, Delta
	// system_version_info).
	Version string
	// Delta: the response updates Resources and removes Removed; otherwise
	// Resources are the type's whole state (SotW).
	Delta     bool
	Resources Contents
	Removed   []string
	// Wildcard: the client asked for the type's every resource (CDS, LDS),
	// so the state it holds must be the view's whole set; otherwise it
	// named the resources it holds (EDS, RDS).
	Wildcard bool
	At       time.Time
}

// Client is one recorded client: its class (which view it is published)
// and its identity.
type Client struct {
	ID    string
	Class string
}

// History is a run: the clients, what was published, and what each client
// received and answered.
type History struct {
	Clients      []Client
	Publications []Publication
	Events       []Event
}
