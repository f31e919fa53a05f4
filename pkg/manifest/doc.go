// Package manifest reads the multi-document YAML files that `kubectl apply
// -f` takes and turns the poise.dev/v1alpha1 objects in them into one
// topology batch. Documents of other API groups (the Namespaces, Services
// and Deployments applied from the same directory) are counted and skipped;
// an unknown kind or version of the poise.dev group and unknown fields are
// errors, every problem of a document is reported, and every error names
// the file, the document, the object and the field.
package manifest
