package testkit

import (
	"fmt"
	"os"
	"path/filepath"
)

// SkipEnvtest is the variable that switches the envtest suites off on purpose.
const SkipEnvtest = "POISE_SKIP_ENVTEST"

// EnvtestAssets finds the real kube-apiserver and etcd a suite runs against:
// the directory KUBEBUILDER_ASSETS names, holding both. skip is set, and
// assets empty, when SkipEnvtest=1 turns the suites off; a missing or
// incomplete directory is an error that says how to build it, because a
// suite that never ran is not a suite that passed. suite names the package
// in the message (e.g. "test/kube").
func EnvtestAssets(suite string) (assets, skip string, err error) {
	if os.Getenv(SkipEnvtest) == "1" {
		return "", SkipEnvtest + "=1: the envtest suites (real kube-apiserver and etcd) are switched off", nil
	}
	assets = os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return "", "", fmt.Errorf("%s: KUBEBUILDER_ASSETS is not set. These tests run a real kube-apiserver and etcd:\n"+
			"  run `make test`, or\n"+
			"  KUBEBUILDER_ASSETS=$(bash hack/test-binaries.sh) go test ./%s\n"+
			"(hack/test-binaries.sh builds them once per machine; %s=1 skips them on purpose)", suite, suite, SkipEnvtest)
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return "", "", fmt.Errorf("%s: KUBEBUILDER_ASSETS=%s has no %s (%v): run `bash hack/test-binaries.sh`", suite, assets, bin, err)
		}
	}
	return assets, "", nil
}
