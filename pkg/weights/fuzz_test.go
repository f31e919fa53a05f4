package weights

import (
	"fmt"
	"reflect"
	"testing"
)

// fuzzReader hands out bytes, then zeros once the input is exhausted.
type fuzzReader struct {
	b []byte
	i int
}

func (r *fuzzReader) next() byte {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (r *fuzzReader) left() int { return len(r.b) - r.i }

// decodeFuzz turns arbitrary bytes into a Policy and endpoints. Values lean
// towards the valid range (so the math gets exercised) but every invalid
// kind is reachable: opf 0 or > 1000, threshold > 100, undeclared enum values,
// weights 0 / MaxWeight / MaxWeight+1 / 2⁶³, priorities 120..135, duplicate
// address:port, inconsistent locality weights and locality sums > MaxWeight.
func decodeFuzz(data []byte) (Policy, []Endpoint) {
	r := &fuzzReader{b: data}
	var p Policy
	b, lo, hi := r.next(), r.next(), r.next()
	raw := uint32(lo) | uint32(hi)<<8
	if b&1 == 0 {
		p.OverprovisioningFactor = 1 + raw%1000
	} else {
		p.OverprovisioningFactor = raw // 0..65535
	}
	if th := r.next(); th&0x80 == 0 {
		p.PanicThreshold = uint32(th) % 101
	} else {
		p.PanicThreshold = uint32(th) // 128..255: invalid
	}
	p.PanicMode = PanicMode(b >> 1 % 3)
	p.DrainingCapacity = DrainingCapacity(b >> 3 % 3)

	regions := []string{"eu", "us", "us-east"}
	zones := []string{"", "a", "a1"}
	var eps []Endpoint
	for r.left() >= 5 && len(eps) < 512 {
		addr, prio, loc, weight, state := r.next(), r.next(), r.next(), r.next(), r.next()
		e := Endpoint{
			Address: fmt.Sprintf("10.0.0.%d", addr%64),
			Port:    uint32(addr >> 6),
			Locality: Locality{
				Region: regions[loc%3], Zone: zones[loc/3%3], SubZone: zones[loc/9%3],
			},
		}
		if prio < 0xf0 {
			e.Priority = uint32(prio % 4)
		} else {
			e.Priority = 120 + uint32(prio-0xf0) // 120..135
		}
		switch sel := loc / 27; sel { // 0..9
		case 7:
			e.LocalityWeight = 0
		case 8:
			e.LocalityWeight = MaxWeight
		case 9:
			e.LocalityWeight = MaxWeight + 1
		default: // one weight per (priority, locality) group: consistent
			e.LocalityWeight = []uint64{1, 3, 1000, MaxWeight}[(e.Priority+uint32(loc%27))%4]
		}
		switch weight {
		case 0:
			e.Weight = 0
		case 1:
			e.Weight = MaxWeight
		case 2:
			e.Weight = MaxWeight + 1
		case 3:
			e.Weight = 1 << 63
		case 4:
			e.Weight = MaxWeight/2 + 1 // two of them overflow a locality
		default:
			e.Weight = uint64(weight-4) * uint64(weight-4)
		}
		e.Admin = AdminState(state % 4)
		e.Probe = ProbeHealth(state / 4 % 4)
		e.Circuit = CircuitState(state / 16 % 3)
		e.Ejected = state/48%2 == 1
		e.Scope = Scope(state / 96 % 3)
		eps = append(eps, e)
	}
	return p, eps
}

// fuzzCalc is reused across fuzz inputs (each worker calls the target
// sequentially), so the fuzzer also hunts for scratch-state leaks.
var fuzzCalc = NewCalculator()

func FuzzCompute(f *testing.F) {
	// Policy bytes: flags, opf lo, opf hi, threshold; then 5 bytes an endpoint.
	f.Add([]byte{0, 139, 0, 50, 1, 0, 0, 5, 0, 2, 0, 0, 5, 4, 3, 0, 1, 5, 0})
	f.Add([]byte{2, 139, 0, 50, 1, 0, 0, 5, 4, 2, 0, 0, 5, 4, 3, 0, 0, 5, 4, 4, 0, 0, 5, 4}) // FailClosed, mostly unhealthy
	f.Add([]byte{0, 99, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 5, 0})                                 // weight 0
	f.Add([]byte{0, 139, 0, 50, 1, 0, 0, 1, 0, 2, 0, 0, 1, 0})                               // MaxWeight ×2 in one locality
	f.Add([]byte{0, 139, 0, 50, 1, 250, 0, 5, 0})                                            // priority 130
	f.Add([]byte{0, 139, 0, 50, 1, 0, 0, 5, 0, 1, 0, 0, 6, 0})                               // duplicate address:port
	f.Add([]byte{0, 139, 0, 50, 1, 0, 0, 5, 0, 2, 0, 216, 5, 0})                             // inconsistent locality weight
	f.Add([]byte{1, 0, 0, 50, 1, 0, 0, 5, 0})                                                // opf 0
	f.Add([]byte{0, 139, 0, 200, 1, 0, 0, 5, 0})                                             // threshold 200
	f.Add([]byte{8, 139, 0, 50, 1, 0, 0, 5, 3, 2, 1, 1, 9, 1})                               // Include draining, Unavailable
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		p, eps := decodeFuzz(data)
		r, err := Compute(p, eps)
		if cerr := checkError(p, eps, err); cerr != nil {
			t.Fatalf("%v\npolicy %+v endpoints %+v", cerr, p, eps)
		}
		if verr := Validate(p, eps); fmt.Sprint(verr) != fmt.Sprint(err) {
			t.Fatalf("Validate %v, Compute %v", verr, err)
		}
		reused, rerr := fuzzCalc.Compute(p, eps)
		if fmt.Sprint(rerr) != fmt.Sprint(err) {
			t.Fatalf("reused Calculator error %v, fresh %v", rerr, err)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(reused.Clone(), r.Clone()) {
			t.Fatalf("reused Calculator differs from a fresh one")
		}
		if ierr := checkInvariants(p, eps, r); ierr != nil {
			t.Fatalf("%v\npolicy %+v endpoints %+v\nresult %+v", ierr, p, eps, r)
		}
		if enumsInRange(p, eps) {
			if want := specModel(p, eps); !reflect.DeepEqual(r.Clone(), want.Clone()) {
				t.Fatalf("differs from the spec model:\n got %+v\nwant %+v", r, want)
			}
		}
		pk := Seeded(r, eps, uint64(len(data)))
		for range 16 {
			x := pk.Pick()
			if !x.Dropped && (x.Endpoint < 0 || x.Endpoint >= len(r.Endpoints) || !r.Endpoints[x.Endpoint].Selectable) {
				t.Fatalf("pick %+v of a non-selectable endpoint", x)
			}
		}
	})
}
