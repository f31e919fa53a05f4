// Package files is the manifest-file source: it loads the manifests under a
// set of paths into the topology Directory, then watches them and applies
// each change as one batch. An invalid change is refused with a logged,
// named reason and a metric, and the last good snapshot keeps serving.
package files
