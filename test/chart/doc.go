// Package chart holds the tests of the Helm chart in charts/poise: helm lint,
// golden renderings of `helm template` for the default and a customized set
// of values (regenerated with `go test ./test/chart -update`), and checks of
// what the rendered objects grant and how the pods run. TestInstall runs the
// real `helm install` of both into the real kube-apiserver and etcd of the
// envtest suites (KUBEBUILDER_ASSETS) with no CRDs preinstalled (the CRD
// chart charts/poise-crds first, as docs/helm.md says), checks every
// object and CRD on the server, and validates the walkthrough in
// examples/kubernetes and the kind suite's values there (server-side apply,
// dry run). It then upgrades the default release as the walkthrough does (the
// chart's generated CA and serving certificate must stay) and runs a real
// replica with the installed arguments, Secret and ServiceAccount, which
// serves the walkthrough's Envoy over TLS with its projected token (a grpc-go
// client doing what the Envoy bootstrap says). TestCRDChartUpgrades takes a
// cluster's CRDs from the old chart's crds/ through adoption by the CRD
// chart and helm upgrade, checking that a field added since is kept. The
// helm binary is the one hack/helm.sh builds; `make test` passes it in HELM
// and the apiserver in KUBEBUILDER_ASSETS.
package chart
