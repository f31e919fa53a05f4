// Package controlplane assembles one control-plane process: a source (manifest
// files or the Kubernetes API) feeding the topology Directory, the publisher
// and xDS server that carry it to clients, and the admin port. The
// controlplane command and the end-to-end suites run it the same way.
package controlplane
