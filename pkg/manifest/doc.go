// Package manifest reads the multi-document YAML files that `kubectl apply
// -f` takes and turns the poise.dev/v1alpha1 objects in them into one
// topology batch. Documents of other API groups (the Namespaces, Services
// and Deployments applied from the same directory) are counted and skipped;
// an unknown kind or version of the poise.dev group, a Poise kind under a
// mistyped group and unknown fields are errors, every problem of a document
// is reported, and every error names the file, the document, the object and
// the field — a value of the wrong type too, and a syntax error the line of
// the file — with what was likely meant when a name is one slip away.
package manifest
