package identity

import (
	"errors"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reason says why a client was refused, in a word fit for a metric label:
// the set is fixed (see Reasons).
type Reason string

const (
	// ReasonNoCredentials: the client presented nothing and anonymous
	// clients are not allowed.
	ReasonNoCredentials Reason = "no-credentials"
	// ReasonMalformedCredentials: the authorization metadata is not exactly
	// one "Bearer TOKEN" of bounded length.
	ReasonMalformedCredentials Reason = "malformed-credentials"
	// ReasonBadToken: TokenReview refused the token (invalid, revoked, its
	// pod gone, or not meant for this audience).
	ReasonBadToken Reason = "bad-token"
	// ReasonTokenReviewFailed: the apiserver could not be asked; the client
	// may retry.
	ReasonTokenReviewFailed Reason = "token-review-failed"
	// ReasonTokenReviewThrottled: the client's address caused too many
	// refused TokenReviews recently, so its new tokens are refused
	// unreviewed for a while; the client may retry later.
	ReasonTokenReviewThrottled Reason = "token-review-throttled"
	// ReasonNotServiceAccount: the token is valid but is not a service
	// account's.
	ReasonNotServiceAccount Reason = "not-service-account"
	// ReasonExpired: the token or certificate has expired.
	ReasonExpired Reason = "expired"
	// ReasonUnverifiedCertificate: a client certificate was presented but
	// the TLS handshake did not verify it.
	ReasonUnverifiedCertificate Reason = "unverified-certificate"
	// ReasonNoSPIFFEID: the client certificate has no spiffe:// URI SAN.
	ReasonNoSPIFFEID Reason = "no-spiffe-id"
	// ReasonSeveralSPIFFEIDs: the client certificate has more than one.
	ReasonSeveralSPIFFEIDs Reason = "several-spiffe-ids"
	// ReasonBadSPIFFEID: the SPIFFE ID is not
	// spiffe://TRUST-DOMAIN/ns/NAMESPACE/sa/SERVICE-ACCOUNT.
	ReasonBadSPIFFEID Reason = "bad-spiffe-id"
	// ReasonUntrustedDomain: the SPIFFE ID is of another trust domain.
	ReasonUntrustedDomain Reason = "untrusted-domain"
	// ReasonConflictingCredentials: a certificate and a token prove
	// different service accounts.
	ReasonConflictingCredentials Reason = "conflicting-credentials"
	// ReasonClaimMismatch: the node claims a namespace or service account
	// other than its identity's.
	ReasonClaimMismatch Reason = "claim-mismatch"
)

// Reasons is every Reason, for metrics that register their labels up front.
func Reasons() []Reason {
	return []Reason{
		ReasonNoCredentials, ReasonMalformedCredentials, ReasonBadToken, ReasonTokenReviewFailed, ReasonTokenReviewThrottled,
		ReasonNotServiceAccount, ReasonExpired, ReasonUnverifiedCertificate, ReasonNoSPIFFEID,
		ReasonSeveralSPIFFEIDs, ReasonBadSPIFFEID, ReasonUntrustedDomain, ReasonConflictingCredentials,
		ReasonClaimMismatch,
	}
}

// Error is a refusal. Detail is bounded and safe to send to the client (it
// never holds a credential); Err, when set, is the underlying cause, for
// logs only.
type Error struct {
	Reason Reason
	Detail string
	Err    error
}

func (e *Error) Error() string {
	s := "identity: " + string(e.Reason)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Code is the gRPC code the refusal ends an RPC with: PermissionDenied for a
// claim the identity does not back, Unavailable when the apiserver could
// not be asked, Unauthenticated otherwise (a client refused unreviewed
// for its address's refusals too: it has not proved who it is).
func (e *Error) Code() codes.Code {
	switch e.Reason {
	case ReasonClaimMismatch:
		return codes.PermissionDenied
	case ReasonTokenReviewFailed:
		return codes.Unavailable
	default:
		return codes.Unauthenticated
	}
}

// GRPCStatus lets a handler return the error as is: grpc-go sends this
// status, without the cause.
func (e *Error) GRPCStatus() *status.Status {
	msg := "identity: " + string(e.Reason)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return status.New(e.Code(), msg)
}

// ReasonOf is the Reason of an identity error anywhere in err's chain, or
// "" when there is none.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

func refuse(r Reason, detail string) *Error { return &Error{Reason: r, Detail: detail} }

// quote quotes a value taken from the client, cut to a length fit for an
// error message.
func quote(s string) string { return strconv.Quote(clip(s, 64)) }
