package identity

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

func FuzzParseSPIFFEID(f *testing.F) {
	for _, s := range []string{
		"spiffe://cluster.local/ns/default/sa/pay",
		"spiffe://td/ns/a/sa/b.c",
		"spiffe://td/ns/a/sa/b/c",
		"spiffe://TD/ns/a/sa/b",
		"spiffe://td:8080/ns/a/sa/b",
		"spiffe://td/ns/a%2F/sa/b",
		"spiffe://td/ns//sa/b",
		"SPIFFE://td/ns/a/sa/b",
		"spiffe://td/ns/a/sa/b?x=1",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseSPIFFEID(s)
		if err != nil {
			if len(err.Error()) > 400 {
				t.Errorf("error of %d bytes", len(err.Error()))
			}
			return
		}
		if id.String() != s {
			t.Errorf("ParseSPIFFEID(%q) = %+v, which prints as %q", s, id, id.String())
		}
		if strings.ContainsAny(id.Namespace+id.ServiceAccount, "/:%?#") || id.TrustDomain == "" {
			t.Errorf("ParseSPIFFEID(%q) = %+v", s, id)
		}
	})
}

func FuzzJWTExpiry(f *testing.F) {
	enc := base64.RawURLEncoding.EncodeToString
	for _, p := range []string{`{"exp":1900000000}`, `{"exp":1.9e9}`, `{"exp":"1900000000"}`, `{"exp":-1}`, `{"exp":1e300}`, `{}`, `[`, `{"exp":null}`} {
		f.Add("h." + enc([]byte(p)) + ".s")
	}
	f.Add("a.b")
	f.Add("...")
	f.Fuzz(func(t *testing.T, token string) {
		exp, ok := jwtExpiry(token)
		if !ok {
			return
		}
		if exp.Unix() <= 0 || exp.Unix() >= maxExpiry || exp.Before(time.Unix(0, 0)) {
			t.Errorf("jwtExpiry(%q) = %v", token, exp)
		}
		if strings.Count(token, ".") != 2 {
			t.Errorf("jwtExpiry(%q) read a token that is not three parts", token)
		}
	})
}

func TestJWTExpiry(t *testing.T) {
	t.Parallel()
	enc := base64.RawURLEncoding.EncodeToString
	for _, tc := range []struct {
		payload string
		want    int64 // 0: none
	}{
		{`{"exp":1900000000}`, 1900000000},
		{`{"exp":1900000000.7}`, 1900000000},
		{`{"exp":"1900000000"}`, 0},
		{`{"exp":0}`, 0},
		{`{"exp":1e300}`, 0},
		{`{"iat":1}`, 0},
		{`not json`, 0},
	} {
		exp, ok := jwtExpiry("h." + enc([]byte(tc.payload)) + ".s")
		if ok != (tc.want != 0) || ok && exp.Unix() != tc.want {
			t.Errorf("%s: %v %v, want %d", tc.payload, exp, ok, tc.want)
		}
	}
}
