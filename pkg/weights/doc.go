// Package weights computes the priority → locality → endpoint shares of one
// upstream with the exact integer rules of docs/weights.md: eligibility,
// health-adjusted priority load with panic, health-adjusted locality weights
// and endpoint shares, all in millionths. It is pure, stdlib-only and, with a
// reused Calculator, allocates nothing after warm-up.
package weights
