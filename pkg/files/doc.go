// Package files is the manifest-file source: it loads the manifests under a
// set of paths into the topology Directory, then watches them and applies
// each burst of changes as one batch, once the files have been quiet for a
// moment (and at least every so often while they never are). A burst costs
// what it touched: only the files the events name are read, only their
// changed documents decoded, and the batch holds only the objects that
// changed. The files are the whole truth at once, so the Directory must stay
// complete: an object naming what no file defines is invalid too. An invalid
// change is refused with a logged, named reason and a metric, and the last
// good snapshot keeps serving.
package files
