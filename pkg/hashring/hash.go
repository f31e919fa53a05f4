package hashring

import (
	"math/bits"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// xxHash64 is XXH64 of s with a seed, as Envoy's HashUtil::xxHash64.
func xxHash64(s string, seed uint64) uint64 {
	if seed == 0 {
		return xxhash.Sum64String(s)
	}
	d := xxhash.NewWithSeed(seed)
	d.WriteString(s)
	return d.Sum64()
}

// xxHash64Chain is Envoy's HashUtil::xxHash64 over a span of strings: each
// string is hashed with the previous hash as its seed, starting from 0.
func xxHash64Chain(values []string) uint64 {
	var seed uint64
	for _, v := range values {
		seed = xxHash64(v, seed)
	}
	return seed
}

// stdHashSeed is the seed Envoy's ring hash gives MurmurHash2
// (MurmurHash::STD_HASH_SEED, libstdc++'s std::hash seed).
const stdHashSeed = 0xc70f6907

// murmurHash2 is the 64-bit MurmurHash2 of libstdc++'s _Hash_bytes, which
// Envoy's MurmurHash::murmurHash2 reproduces: little-endian 8-byte words,
// then the 1 to 7 trailing bytes as one little-endian word.
func murmurHash2[T ~string | ~[]byte](s T, seed uint64) uint64 {
	const mul = 0xc6a4a7935bd1e995
	shiftMix := func(v uint64) uint64 { return v ^ (v >> 47) }
	n := uint64(len(s))
	h := seed ^ (n * mul)
	i := 0
	for ; i+8 <= len(s); i += 8 {
		h ^= shiftMix(le64(s[i:i+8])*mul) * mul
		h *= mul
	}
	if rest := s[i:]; len(rest) > 0 {
		var w uint64
		for j := len(rest) - 1; j >= 0; j-- {
			w = w<<8 | uint64(rest[j])
		}
		h ^= w
		h *= mul
	}
	h = shiftMix(h) * mul
	return shiftMix(h)
}

// RequestHash is the hash a client computes for one header hash policy from
// the values the request carries for that header (after the policy's regex
// rewrite, which the caller applies). With no value the policy yields no
// hash, and ok is false: if no policy yields one, every client picks at
// random.
//
//   - Envoy (both load balancers): the values sorted bytewise, then hashed
//     each with the previous hash as the xxHash64 seed (Http::HeaderHashMethod).
//   - grpc-go and grpc-js: the values joined with "," and hashed with
//     xxHash64, seed 0.
func RequestHash(c Client, values ...string) (hash uint64, ok bool) {
	if len(values) == 0 {
		return 0, false
	}
	switch c {
	case EnvoyRingHash, EnvoyMaglev:
		if !slices.IsSorted(values) {
			values = slices.Sorted(slices.Values(values))
		}
		return xxHash64Chain(values), true
	case GRPCGo, GRPCJS:
		if len(values) == 1 {
			return xxhash.Sum64String(values[0]), true
		}
		return xxhash.Sum64String(strings.Join(values, ",")), true
	}
	return 0, false
}

// Combine folds the hashes of the policies that yielded one, in policy
// order, as all four clients do: the running hash rotated left by one bit,
// then xored with the next (the first is taken as it is). A terminal policy
// that yielded a hash ends the list; that is the caller's to apply.
func Combine(hashes ...uint64) uint64 {
	var h uint64
	for _, x := range hashes {
		h = bits.RotateLeft64(h, 1) ^ x
	}
	return h
}

// le64 reads 8 bytes of s as a little-endian word.
func le64[T ~string | ~[]byte](s T) uint64 {
	var w uint64
	for j := 7; j >= 0; j-- {
		w = w<<8 | uint64(s[j])
	}
	return w
}
