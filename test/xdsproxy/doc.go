// Package xdsproxy stands between xDS clients and one replica: it forwards
// ADS streams (SotW and Delta) message by message, records every response
// and every ACK or NACK into a history (test/history) as the client saw
// them, and injects the faults the resilience scenarios need — a cut now,
// a cut in the middle of a push, responses held back.
package xdsproxy
