#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd that the envtest suites run
# against, from the Go module proxy (there is no other download here), into a
# per-user cache outside the clone keyed by version, and links them into the
# gitignored bin/k8s. A fresh clone on the same machine reuses the cache.
#
# Prints the directory to use as KUBEBUILDER_ASSETS. The cache is under
# POISE_CACHE (default ~/.cache/poise). With --built it builds nothing and
# exits 0 when both are built already, 1 when not.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${POISE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/poise}/test-binaries/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}
mkdir -p "$cache"
if [ "${1:-}" = --built ]; then
  [ -x "$cache/kube-apiserver" ] && [ -x "$cache/etcd" ]
  exit
fi

log() { printf 'test-binaries: %s\n' "$*" >&2; }
took() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
# quiet COMMAND...: runs it with its output (a few hundred "go: downloading"
# lines on a first build) kept aside, and shows that output if it fails.
quiet() {
  local out rc=0
  out=$(mktemp)
  "$@" >"$out" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then cat "$out" >&2; fi
  rm -f "$out"
  return "$rc"
}

build_apiserver() {
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  local start=$SECONDS
  log "building kube-apiserver ${K8S_VERSION} from source into $cache (once per machine: downloads its modules and compiles them; with etcd about 10 min on two cores)"
  cd "$work"
  cat > go.mod <<GOMOD
module poise.dev/test-binaries/kube-apiserver

go 1.26
GOMOD
  # kubernetes' own go.mod points its staging modules at ./staging; the
  # published module needs each replaced by its released version.
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  {
    echo "require k8s.io/kubernetes ${K8S_VERSION}"
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9.-]*\) => ./staging/src/k8s.io/.*#\t\1 => \1 '"${STAGING_VERSION}"'#p' "$gomod"
    echo ")"
  } >> go.mod
  cat > main.go <<'MAIN'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }
MAIN
  quiet go mod tidy
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  CGO_ENABLED=0 quiet go build -trimpath -ldflags "-s -w \
    -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} \
    -X k8s.io/component-base/version.gitMajor=1 \
    -X k8s.io/component-base/version.gitMinor=${minor} \
    -X k8s.io/component-base/version.gitTreeState=clean \
    -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION} \
    -X k8s.io/client-go/pkg/version.gitMajor=1 \
    -X k8s.io/client-go/pkg/version.gitMinor=${minor}" \
    -o "$cache/kube-apiserver.tmp" .
  mv "$cache/kube-apiserver.tmp" "$cache/kube-apiserver"
  log "built kube-apiserver ${K8S_VERSION} in $(took $((SECONDS - start)))"
}

build_etcd() {
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  local start=$SECONDS
  log "building etcd ${ETCD_VERSION} from source (once per machine)"
  cd "$work"
  cat > go.mod <<GOMOD
module poise.dev/test-binaries/etcd

go 1.26
GOMOD
  cat > main.go <<'MAIN'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
MAIN
  quiet go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
  quiet go mod tidy
  CGO_ENABLED=0 quiet go build -trimpath -ldflags "-s -w" -o "$cache/etcd.tmp" .
  mv "$cache/etcd.tmp" "$cache/etcd"
  log "built etcd ${ETCD_VERSION} in $(took $((SECONDS - start)))"
}

[ -x "$cache/kube-apiserver" ] || (build_apiserver)
[ -x "$cache/etcd" ] || (build_etcd)

mkdir -p "$root/bin/k8s"
ln -sf "$cache/kube-apiserver" "$root/bin/k8s/kube-apiserver"
ln -sf "$cache/etcd" "$root/bin/k8s/etcd"
"$root/bin/k8s/kube-apiserver" --version >&2
echo "$root/bin/k8s"
