package topology

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrAddressNotAllowed is the sentinel of every AddressError: an endpoint
// address that EDS cannot carry, or that its upstream does not allow.
var ErrAddressNotAllowed = errors.New("AddressNotAllowed")

// AddressClass is what an endpoint address is, as far as publishing it in
// EDS goes. EDS carries IP addresses only (a DNS name needs a STRICT_DNS or
// LOGICAL_DNS cluster, which Poise does not build); of those, the ranges
// Kubernetes refuses in EndpointSlices are refused, loopback only unless its
// upstream opts in.
type AddressClass uint8

const (
	// AddressUnicast: an IP address EDS can carry (CEL's isGlobalUnicast(),
	// which includes the private ranges).
	AddressUnicast AddressClass = iota
	// AddressLoopback: 127.0.0.0/8 or ::1, allowed only when the upstream sets
	// spec.addressPolicy.allowLoopback (local development).
	AddressLoopback
	// AddressNotIP: a DNS name or anything else that is not an IP address.
	AddressNotIP
	// AddressUnspecified: 0.0.0.0 or ::.
	AddressUnspecified
	// AddressLinkLocal: 169.254.0.0/16 or fe80::/10, which hold cloud
	// metadata services (169.254.169.254).
	AddressLinkLocal
	// AddressMulticast: 224.0.0.0/4 or ff00::/8.
	AddressMulticast
	// AddressBroadcast: 255.255.255.255.
	AddressBroadcast
)

// ClassifyAddress says what an endpoint address is. An IP address is
// written as CEL's isIP() takes it: no zone, not IPv4-mapped.
func ClassifyAddress(s string) AddressClass {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil || a.Zone() != "" || a.Is4In6():
		return AddressNotIP
	case a.IsGlobalUnicast():
		return AddressUnicast
	case a.IsLoopback():
		return AddressLoopback
	case a.IsUnspecified():
		return AddressUnspecified
	case a.IsLinkLocalUnicast():
		return AddressLinkLocal
	case a.IsMulticast():
		return AddressMulticast
	}
	return AddressBroadcast // the one IP address left that is none of the above
}

// Refusal says why an address of class c cannot be published, or "" when it
// can (loopback can when allowLoopback).
func (c AddressClass) Refusal(allowLoopback bool) string {
	switch c {
	case AddressUnicast:
		return ""
	case AddressLoopback:
		if allowLoopback {
			return ""
		}
		return "is a loopback address (127.0.0.0/8, ::1), which reaches each client's own host; allow it for local development with spec.addressPolicy.allowLoopback: true on the Upstream"
	case AddressNotIP:
		return "is not an IP address: EDS carries IP addresses only, and Envoy rejects a DNS name in a ClusterLoadAssignment; resolve the name and list its addresses"
	case AddressUnspecified:
		return "is the unspecified address (0.0.0.0, ::), which names no host"
	case AddressLinkLocal:
		return "is a link-local address (169.254.0.0/16, fe80::/10), the range of cloud metadata services; it is never allowed"
	case AddressMulticast:
		return "is a multicast address (224.0.0.0/4, ff00::/8), not one host"
	}
	return "is the broadcast address, not one host"
}

// AddressError: an endpoint of a set has an address its upstream cannot
// publish. It matches ErrAddressNotAllowed.
type AddressError struct {
	Set      ObjectRef
	Index    int // in the set's endpoints
	Address  string
	Class    AddressClass
	Upstream Key
}

// Field is the endpoint's address field when the set is an EndpointSet
// object, "" when it was imported.
func (e *AddressError) Field() string {
	if e.Set.Kind != KindEndpointSet {
		return ""
	}
	return fmt.Sprintf("spec.endpoints[%d].address", e.Index)
}

func (e *AddressError) Error() string {
	where := e.Set.String()
	if f := e.Field(); f != "" {
		where += " " + f
	}
	msg := fmt.Sprintf("%s: %s: %q %s", ErrAddressNotAllowed, where, e.Address, e.Class.Refusal(false))
	if e.Class == AddressLoopback {
		msg += " " + e.Upstream.String()
	}
	return msg
}

func (e *AddressError) Is(target error) bool { return target == ErrAddressNotAllowed }

// addressCheck is what an endpoint set holds that an upstream may refuse:
// the first endpoint of each kind, 1-based so that 0 means none.
type addressCheck struct {
	refused  int // an address no upstream can publish
	loopback int // a loopback address, published only where allowed
}

// checkAddresses classifies every endpoint of a set once, when a batch
// takes it, so resolving an upstream costs one look per set.
func checkAddresses(eps []Endpoint) addressCheck {
	var c addressCheck
	for i := range eps {
		switch ClassifyAddress(eps[i].Address) {
		case AddressUnicast:
		case AddressLoopback:
			if c.loopback == 0 {
				c.loopback = i + 1
			}
		default:
			if c.refused == 0 {
				c.refused = i + 1
			}
		}
		if c.refused != 0 {
			break
		}
	}
	return c
}

// addressProblem refuses a set whose addresses upstream u cannot publish.
func addressProblem(u Upstream, s *EndpointSet) *Problem {
	i := s.addresses.refused
	if i == 0 && !u.AllowLoopback {
		i = s.addresses.loopback
	}
	if i == 0 {
		return nil
	}
	a := s.Endpoints[i-1].Address
	ref := ObjectRef{s.Kind, s.Key}
	return &Problem{Upstream: u.Key, Objects: []ObjectRef{ref},
		Err: &AddressError{Set: ref, Index: i - 1, Address: a, Class: ClassifyAddress(a), Upstream: u.Key}}
}
