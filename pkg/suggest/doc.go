// Package suggest finds the name a person most likely meant when they wrote
// one that does not exist — a field, an apiVersion, an object's name — by
// Damerau-Levenshtein distance (optimal string alignment), bounded in the
// length it compares and the distance it accepts, so every "did you mean"
// costs little and never guesses wildly.
package suggest
