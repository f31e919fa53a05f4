#!/usr/bin/env bash
# make bench-fleet-anchor: the go-control-plane anchor beside one replica on
# the same fixture (docs/performance.md, "The anchor: go-control-plane's
# LinearCache"). It writes a tree of UPSTREAMS upstreams, serves it with
# bin/controlplane, runs controlplane load against the replica, then starts
# bin/gcpanchor (go-control-plane's server over two LinearCaches) mirroring
# the replica and runs the same load against the anchor. Only Envoy-like
# clients: the anchor serves CDS and EDS, no LDS/RDS and no per-endpoint
# rendering for gRPC clients. The anchor's convergence includes the
# mirror's hop (replica → mirror → LinearCache → client). Reports, text and
# JSON, under bin/bench-fleet-anchor/.
set -euo pipefail

UPSTREAMS=${UPSTREAMS:-500}
ENVOY=${ENVOY:-500}
ENVOY_CLUSTERS=${ENVOY_CLUSTERS:-50-500}
PROCS=${PROCS:-1}
PHASES=${PHASES:-hot:hot:0.25:20s churn:all:20:30s}
DRAIN=${DRAIN:-60s}
BIN=${BIN:-bin}
GO=${GO:-go}

cp=$BIN/controlplane
anchor=$BIN/gcpanchor
out=$BIN/bench-fleet-anchor
mkdir -p "$out"
"$GO" build -o "$anchor" ./test/scale/cmd/gcpanchor
base=/dev/shm
[ -w "$base" ] || base=${TMPDIR:-/tmp}
tree=$(mktemp -d "$base/poise-anchor.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	wait || true
	rm -rf "$tree"
}
trap cleanup EXIT

# shellcheck source=hack/waitready.sh
. "$(dirname "$0")/waitready.sh"

"$cp" load --tree "$tree" --upstreams "$UPSTREAMS" --generate-only
xds=127.0.0.1:18740 admin=127.0.0.1:18741 axds=127.0.0.1:18742 aadmin=127.0.0.1:18743
"$cp" serve -f "$tree/manifests" --xds-address "$xds" --admin-address "$admin" >"$out/serve.log" 2>&1 &
replica=$!
pids+=("$replica")
waitready "http://$admin" "$replica" "$out/serve.log"

phaseflags=()
for p in $PHASES; do phaseflags+=(--phase "$p"); done
load() { # NAME XDS PID
	echo "== $1: $UPSTREAMS upstreams, $ENVOY Envoy-like clients, phases $PHASES" >&2
	"$cp" load --xds-address "$2" --pid "$3" --churn files --tree "$tree" --upstreams "$UPSTREAMS" \
		--envoy "$ENVOY" --envoy-clusters "$ENVOY_CLUSTERS" --grpc 0 --procs "$PROCS" "${phaseflags[@]}" \
		--settle 10s --idle 5s --drain "$DRAIN" -o json >"$out/$1.json"
}

load replica "$xds" "$replica"
"$anchor" --mirror "$xds" --xds-address "$axds" --admin-address "$aadmin" >"$out/anchor.log" 2>&1 &
apid=$!
pids+=("$apid")
waitready "http://$aadmin" "$apid" "$out/anchor.log"
load anchor "$axds" "$apid"
echo "== columns: run 1 the replica, run 2 the anchor" >&2
"$GO" run ./test/scale/cmd/fleettable "$out/replica.json" "$out/anchor.json" | tee "$out/table.md"
