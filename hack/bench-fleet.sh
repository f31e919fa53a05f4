#!/usr/bin/env bash
# make bench-fleet: one replica under a fleet, measured with the tool users
# size their own fleets with (controlplane load, docs/performance.md "Size
# your fleet"). It writes a tree of UPSTREAMS upstreams (20 endpoints each)
# under /dev/shm (or TMPDIR), serves it with bin/controlplane, connects
# ENVOY Envoy-like clients (ENVOY_CLUSTERS clusters each) and GRPC gRPC-like
# clients (GRPC_CLUSTERS each, STREAMS_PER_CONNECTION to a connection), half
# of each kind over Delta, spread over PROCS load processes, then flips
# endpoints RATE times a second for DURATION. It repeats RUNS times and
# keeps each run's report (text, JSON and the convergence plot) under
# bin/bench-fleet/. With STORM=1 the replica is killed (SIGKILL) STORM_AFTER
# seconds after every client synced and started again at once on the same
# address: every client reconnects together, a storm; the report then
# counts the reconnects, the time to each one's first answer and what was
# sent again (the plane's CPU is not read across the restart).
# A benchmark, not a test: make test runs the same tool at 200 clients
# (test/scale).
set -euo pipefail

UPSTREAMS=${UPSTREAMS:-5000}
ENVOY=${ENVOY:-5000}
GRPC=${GRPC:-20000}
ENVOY_CLUSTERS=${ENVOY_CLUSTERS:-50-500}
GRPC_CLUSTERS=${GRPC_CLUSTERS:-1-5}
STREAMS_PER_CONNECTION=${STREAMS_PER_CONNECTION:-2}
PROCS=${PROCS:-8}
RATE=${RATE:-2}
DURATION=${DURATION:-30s}
RUNS=${RUNS:-3}
SERVE_ARGS=${SERVE_ARGS:-}
STORM=${STORM:-0}
STORM_AFTER=${STORM_AFTER:-5}
BIN=${BIN:-bin}

cp=$BIN/controlplane
out=$BIN/bench-fleet
mkdir -p "$out"
base=/dev/shm
[ -w "$base" ] || base=${TMPDIR:-/tmp}
tree=$(mktemp -d "$base/poise-fleet.XXXXXX")
trap 'rm -rf "$tree"' EXIT

"$cp" load --tree "$tree" --upstreams "$UPSTREAMS" --generate-only
xds=127.0.0.1:18700 admin=127.0.0.1:18701
start_plane() {
	# shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
	"$cp" serve -f "$tree/manifests" --xds-address "$xds" --admin-address "$admin" \
		--xds-max-streams 100000 $SERVE_ARGS >>"$out/serve-$run.log" 2>&1 &
	pid=$!
	for _ in $(seq 1 600); do
		curl -fsS "http://$admin/readyz" >/dev/null 2>&1 && return 0
		kill -0 "$pid" 2>/dev/null || { cat "$out/serve-$run.log"; exit 1; }
		sleep 0.1
	done
}
for run in $(seq 1 "$RUNS"); do
	: >"$out/serve-$run.log"
	start_plane
	echo "== run $run of $RUNS: $UPSTREAMS upstreams, $ENVOY Envoy-like and $GRPC gRPC-like clients" >&2
	rm -f "$out/load-$run.log" # a run before this one's says "synced" already
	planeflag=(--pid "$pid")
	[ "$STORM" = 1 ] && planeflag=()
	"$cp" load --xds-address "$xds" "${planeflag[@]}" --churn files --tree "$tree" --upstreams "$UPSTREAMS" \
		--envoy "$ENVOY" --envoy-clusters "$ENVOY_CLUSTERS" --grpc "$GRPC" --grpc-clusters "$GRPC_CLUSTERS" \
		--streams-per-connection "$STREAMS_PER_CONNECTION" --procs "$PROCS" --rate "$RATE" --duration "$DURATION" \
		--plot "$out/convergence-$run.svg" -o json >"$out/report-$run.json" 2>"$out/load-$run.log" &
	load=$!
	if [ "$STORM" = 1 ]; then
		until grep -q 'msg=synced' "$out/load-$run.log" 2>/dev/null; do
			kill -0 "$load" 2>/dev/null || break
			sleep 0.2
		done
		sleep "$STORM_AFTER"
		echo "   storm: the replica killed and started again" >&2
		kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
		start_plane
	fi
	rc=0
	wait "$load" || rc=$?
	kill -INT "$pid"; wait "$pid" || true
	[ "$rc" = 0 ] || { cat "$out/load-$run.log" >&2; echo "bench-fleet: run $run failed ($rc)" >&2; exit "$rc"; }
	echo "   report: $out/report-$run.json, plot: $out/convergence-$run.svg" >&2
done
