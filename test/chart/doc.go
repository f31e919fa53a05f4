// Package chart holds the tests of the Helm chart in charts/poise: helm lint,
// golden renderings of `helm template` for the default and a customized set
// of values (regenerated with `go test ./test/chart -update`), and checks of
// what the rendered objects grant and how the pods run. The helm binary is
// the one hack/helm.sh builds; `make test` passes it in HELM.
package chart
