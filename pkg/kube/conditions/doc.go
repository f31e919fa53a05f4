// Package conditions is the Kubernetes side's vocabulary: the condition
// types and reasons the source finds and the status writer, check writer
// and outlier decider write (beside those of v1alpha1), why an object was
// refused, and the bounds every message is cut to. It imports nothing of
// the project, so the reader and the writers share it without depending on
// each other.
package conditions
