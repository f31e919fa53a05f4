#!/usr/bin/env bash
# Prints the path of a kind binary for the kind end-to-end suite (make e2e-kind).
#
# KIND=/path/to/kind wins; then a `kind` on PATH; otherwise kind is built from
# the Go module proxy (sigs.k8s.io/kind, no other download) into a per-user
# cache keyed by version, once per machine, and linked to the gitignored
# bin/kind. kind itself needs a running Docker engine (or podman/nerdctl,
# see KIND_EXPERIMENTAL_PROVIDER); this script does not.
set -euo pipefail

KIND_VERSION=${KIND_VERSION:-v0.33.0}

root=$(cd "$(dirname "$0")/.." && pwd)
log() { printf 'kind: %s\n' "$*" >&2; }

if [ -n "${KIND:-}" ]; then
  [ -x "$KIND" ] || { log "KIND=$KIND is not an executable"; exit 1; }
  echo "$KIND"
  exit 0
fi
if command -v kind >/dev/null 2>&1; then
  command -v kind
  exit 0
fi

cache=${POISE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/poise}/tools/kind-${KIND_VERSION}
mkdir -p "$cache"

build_kind() {
  local tmp
  tmp=$(mktemp -d "$cache/.build.XXXXXX")
  trap 'rm -rf "$tmp"' RETURN
  log "building kind ${KIND_VERSION} from the Go module proxy (first time on this machine: about a minute)"
  GOBIN="$tmp" GOFLAGS=-mod=mod CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kind@${KIND_VERSION}" >&2
  mv "$tmp/kind" "$cache/kind"
}

[ -x "$cache/kind" ] || (build_kind)

mkdir -p "$root/bin"
ln -sf "$cache/kind" "$root/bin/kind"
"$root/bin/kind" version >&2
echo "$root/bin/kind"
