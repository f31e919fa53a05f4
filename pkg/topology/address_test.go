package topology

import (
	"errors"
	"strings"
	"testing"
)

func TestClassifyAddress(t *testing.T) {
	for _, tc := range []struct {
		address string
		want    AddressClass
	}{
		{"10.0.0.1", AddressUnicast},
		{"192.168.1.1", AddressUnicast},
		{"100.64.0.1", AddressUnicast},
		{"2001:db8::1", AddressUnicast},
		{"fd00::1", AddressUnicast},
		{"127.0.0.1", AddressLoopback},
		{"127.1.2.3", AddressLoopback},
		{"::1", AddressLoopback},
		{"vm1.example.internal", AddressNotIP},
		{"backend", AddressNotIP},
		{"", AddressNotIP},
		{"10.0.0.1:80", AddressNotIP},
		{"fe80::1%eth0", AddressNotIP},
		{"::ffff:10.0.0.1", AddressNotIP},
		{"0.0.0.0", AddressUnspecified},
		{"::", AddressUnspecified},
		{"169.254.169.254", AddressLinkLocal},
		{"fe80::1", AddressLinkLocal},
		{"224.0.0.1", AddressMulticast},
		{"239.1.2.3", AddressMulticast},
		{"ff02::1", AddressMulticast},
		{"255.255.255.255", AddressBroadcast},
	} {
		if got := ClassifyAddress(tc.address); got != tc.want {
			t.Errorf("ClassifyAddress(%q) = %d, want %d", tc.address, got, tc.want)
		}
	}
}

func withAddress(s EndpointSet, i int, a string) EndpointSet {
	s.Endpoints[i].Address = a
	return s
}

// TestLoopbackNeedsTheUpstreamsOptIn: a loopback address is refused unless
// its upstream allows it; the refusal names the set and field, keeps the last
// good snapshot, and taking the opt-in away again is refused as well.
func TestLoopbackNeedsTheUpstreamsOptIn(t *testing.T) {
	d := NewDirectory()
	var b Batch
	b.PutUpstream(upstream("api"))
	b.PutEndpointSet(set("a", "api", "r1", 2, 0))
	good := mustApply(t, d, b)

	var bad Batch
	bad.PutEndpointSet(withAddress(set("a", "api", "r1", 2, 0), 1, "127.0.0.1"))
	snap, err := d.Apply(bad)
	var ae *AddressError
	if !errors.Is(err, ErrAddressNotAllowed) || !errors.As(err, &ae) {
		t.Fatalf("loopback without the opt-in: got %v, want an AddressError", err)
	}
	if snap != good || d.Current() != good {
		t.Fatal("a refused batch replaced the last good snapshot")
	}
	if ae.Set != (ObjectRef{KindEndpointSet, Key{"default", "a"}}) || ae.Field() != "spec.endpoints[1].address" || ae.Class != AddressLoopback {
		t.Errorf("refusal = %+v, field %q", ae, ae.Field())
	}
	for _, want := range []string{"EndpointSet default/a spec.endpoints[1].address", `"127.0.0.1"`, "spec.addressPolicy.allowLoopback", "default/api"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}

	// With the opt-in the same set is published.
	allow := upstream("api")
	allow.AllowLoopback = true
	var opt Batch
	opt.PutUpstream(allow)
	opt.PutEndpointSet(withAddress(set("a", "api", "r1", 2, 0), 1, "127.0.0.1"))
	next := mustApply(t, d, opt)
	if got := next.Upstream(Key{"default", "api"}).Endpoints[1].Address; got != "127.0.0.1" {
		t.Fatalf("endpoint 1 = %s, want 127.0.0.1", got)
	}

	// Taking the opt-in away while a set still lists loopback is refused.
	var revoke Batch
	revoke.PutUpstream(upstream("api"))
	if _, err := d.Apply(revoke); !errors.Is(err, ErrAddressNotAllowed) {
		t.Fatalf("revoking the opt-in: got %v, want AddressNotAllowed", err)
	}
	if d.Current() != next {
		t.Fatal("a refused batch replaced the last good snapshot")
	}
}

// TestNeverPublishedAddresses: whatever a source hands over, an address EDS
// cannot carry or a refused range is never published, opt-in or not, and an
// imported set is named without a field of its own.
func TestNeverPublishedAddresses(t *testing.T) {
	for _, a := range []string{"vm1.example.internal", "169.254.169.254", "fe80::1", "0.0.0.0", "::", "239.1.2.3", "ff02::1", "255.255.255.255"} {
		t.Run(a, func(t *testing.T) {
			d := NewDirectory()
			u := upstream("api")
			u.AllowLoopback = true
			var b Batch
			b.PutUpstream(u)
			s := withAddress(set("a", "api", "r1", 2, 0), 0, a)
			s.Kind = "Service"
			b.PutEndpointSet(s)
			_, err := d.Apply(b)
			var ae *AddressError
			if !errors.As(err, &ae) || ae.Address != a || ae.Field() != "" {
				t.Fatalf("got %v, want an AddressError for %s", err, a)
			}
			if !strings.Contains(err.Error(), "Service default/a: \""+a+"\"") {
				t.Errorf("message %q does not name the imported set and address", err)
			}
			if d.Current().Revision != 0 {
				t.Fatal("a refused batch was published")
			}
		})
	}
}
