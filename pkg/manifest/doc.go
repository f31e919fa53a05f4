// Package manifest reads the multi-document YAML files that `kubectl apply
// -f` takes and turns the poise.dev/v1alpha1 objects in them into one
// topology batch. Unknown kinds and unknown fields are errors; every error
// names the file, the document, the object and the field.
package manifest
