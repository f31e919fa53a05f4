#!/usr/bin/env bash
# Builds helm from the Go module proxy (there is no other download here) into a
# per-user cache outside the clone keyed by version, and links it to the
# gitignored bin/helm. A fresh clone on the same machine reuses the cache.
#
# The ldflags set helm's own version and the Kubernetes version that
# `helm template` and `helm lint` assume (.Capabilities.KubeVersion); without
# them a source build reports v1.20.0.
#
# Prints the path of the helm binary (use it as HELM).
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
KUBE_MAJOR=${KUBE_MAJOR:-1}
KUBE_MINOR=${KUBE_MINOR:-37}

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${POISE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/poise}/tools/helm-${HELM_VERSION}-k8s-${KUBE_MAJOR}.${KUBE_MINOR}
mkdir -p "$cache"

log() { printf 'helm: %s\n' "$*" >&2; }
took() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

build_helm() {
  local tmp
  tmp=$(mktemp -d "$cache/.build.XXXXXX")
  trap 'rm -rf "$tmp"' RETURN
  local start=$SECONDS
  log "building helm ${HELM_VERSION} from the Go module proxy (once per machine: 2-6 min on two cores)"
  # go install with GOBIN into a temporary directory, then an atomic rename, so
  # an interrupted build never leaves a half-written binary in the cache.
  # GOFLAGS=-mod=mod keeps a caller's -mod=vendor or similar from interfering.
  # Its output (a hundred "go: downloading" lines) is shown if it fails.
  local out
  out=$(mktemp)
  GOBIN="$tmp" GOFLAGS=-mod=mod CGO_ENABLED=0 go install -trimpath -ldflags "-s -w \
    -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} \
    -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=${KUBE_MAJOR} \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${KUBE_MINOR} \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=${KUBE_MAJOR} \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${KUBE_MINOR}" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >"$out" 2>&1 || { cat "$out" >&2; rm -f "$out"; return 1; }
  rm -f "$out"
  mv "$tmp/helm" "$cache/helm"
  log "built helm ${HELM_VERSION} in $(took $((SECONDS - start)))"
}

[ -x "$cache/helm" ] || (build_helm)

mkdir -p "$root/bin"
ln -sf "$cache/helm" "$root/bin/helm"
"$root/bin/helm" version --short >&2
echo "$root/bin/helm"
