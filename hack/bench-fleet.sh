#!/usr/bin/env bash
# make bench-fleet: one replica under a fleet, measured with the tool users
# size their own fleets with (controlplane load, docs/performance.md "Size
# your fleet"). It writes a tree of UPSTREAMS upstreams (20 endpoints each)
# under /dev/shm (or TMPDIR), serves it with bin/controlplane, connects
# ENVOY Envoy-like clients (ENVOY_CLUSTERS clusters each) and GRPC gRPC-like
# clients (GRPC_CLUSTERS each, STREAMS_PER_CONNECTION to a connection), half
# of each kind over Delta, spread over PROCS load processes, waits SETTLE,
# reads the replica's live heap and its idle CPU over IDLE, then runs
# PHASES on the same fleet (controlplane load --phase), each awaiting its
# deliveries for up to DRAIN: by default single flips of the cluster every
# client uses (one every 4 s), flips of the clusters 1 % of the clients use,
# and 200 changes a second over every cluster for 5 minutes. It repeats
# RUNS times and keeps each run's report (JSON, the convergence plot) under
# bin/bench-fleet/, then prints the table of every run's figures with their
# min and median (test/scale/cmd/fleettable). PROFILE=1 also keeps the
# replica's heap profile after the start and a CPU profile of each phase.
# With STORM=1 the replica is killed (SIGKILL) STORM_AFTER seconds after
# every client synced and started again at once on the same address: every
# client reconnects together, a storm; the report then counts the
# reconnects, the time to each one's first answer and what was sent again,
# while STORM_PHASES keep flipping the hot cluster past the storm (the
# plane's CPU is not read across the restart).
# ANCHOR Envoy-like clients (0: none) are then, in each run and on the same
# tree, run against go-control-plane's own server over LinearCaches
# (bin/gcpanchor, docs/performance.md "The anchor") mirroring the replica,
# with ANCHOR_PHASES: the anchor serves CDS and EDS in one rendering, so it
# has nothing for gRPC-like clients. Its table follows the replica's.
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
PHASES=${PHASES:-hot:hot:0.25:40s tail:share=1:20:20s churn:all:200:5m}
STORM_PHASES=${STORM_PHASES:-storm:hot:0.1:100s}
SETTLE=${SETTLE:-20s}
IDLE=${IDLE:-10s}
DRAIN=${DRAIN:-60s}
PROFILE=${PROFILE:-0}
RUNS=${RUNS:-3}
SERVE_ARGS=${SERVE_ARGS:-}
STORM=${STORM:-0}
STORM_AFTER=${STORM_AFTER:-5}
ANCHOR=${ANCHOR:-10000}
ANCHOR_PHASES=${ANCHOR_PHASES:-hot:hot:0.25:40s tail:share=1:20:20s churn:all:5:30s}
ANCHOR_PROCS=${ANCHOR_PROCS:-4}
BIN=${BIN:-bin}
GO=${GO:-go}

cp=$BIN/controlplane
anchor=$BIN/gcpanchor
out=$BIN/bench-fleet
mkdir -p "$out"
[ "$STORM" = 1 ] && ANCHOR=0
[ "$ANCHOR" = 0 ] || "$GO" build -o "$anchor" ./test/scale/cmd/gcpanchor
base=/dev/shm
[ -w "$base" ] || base=${TMPDIR:-/tmp}
tree=$(mktemp -d "$base/poise-fleet.XXXXXX")
pid= apid=
cleanup() {
	for p in $pid $apid; do kill -INT "$p" 2>/dev/null || true; done
	wait || true
	rm -rf "$tree"
}
trap cleanup EXIT

"$cp" load --tree "$tree" --upstreams "$UPSTREAMS" --generate-only
xds=127.0.0.1:18700 admin=127.0.0.1:18701 axds=127.0.0.1:18702 aadmin=127.0.0.1:18703
# shellcheck source=hack/waitready.sh
. "$(dirname "$0")/waitready.sh"
# run_anchor RUN: the anchor mirroring the replica, under ANCHOR Envoy-like
# clients with ANCHOR_PHASES.
run_anchor() {
	"$anchor" --mirror "$xds" --xds-address "$axds" --admin-address "$aadmin" >"$out/anchor-serve-$1.log" 2>&1 &
	apid=$!
	waitready "http://$aadmin" "$apid" "$out/anchor-serve-$1.log"
	echo "   anchor: go-control-plane's LinearCache under $ANCHOR Envoy-like clients" >&2
	local aphases=() arc=0
	for p in $ANCHOR_PHASES; do aphases+=(--phase "$p"); done
	"$cp" load --xds-address "$axds" --pid "$apid" --churn files --tree "$tree" --upstreams "$UPSTREAMS" \
		--envoy "$ANCHOR" --envoy-clusters "$ENVOY_CLUSTERS" --grpc 0 --procs "$ANCHOR_PROCS" "${aphases[@]}" \
		--settle "$SETTLE" --idle "$IDLE" --drain "$DRAIN" \
		--plot "$out/anchor-convergence-$1.svg" -o json >"$out/anchor-report-$1.json" 2>"$out/anchor-load-$1.log" || arc=$?
	kill -INT "$apid"; wait "$apid" || true
	apid=
	if [ "$arc" != 0 ]; then
		# the anchor at its limit (a start past --sync-timeout) is a
		# figure, not the benchmark's failure: the table says so
		rm -f "$out/anchor-report-$1.json"
		tail -n 1 "$out/anchor-load-$1.log" >"$out/anchor-failed-$1.txt"
		echo "   anchor: run $1 failed ($arc): $(cat "$out/anchor-failed-$1.txt")" >&2
		return 0
	fi
	echo "   anchor report: $out/anchor-report-$1.json" >&2
}
start_plane() {
	# shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
	"$cp" serve -f "$tree/manifests" --xds-address "$xds" --admin-address "$admin" \
		--xds-max-streams 100000 $SERVE_ARGS >>"$out/serve-$run.log" 2>&1 &
	pid=$!
	waitready "http://$admin" "$pid" "$out/serve-$run.log"
}
for run in $(seq 1 "$RUNS"); do
	: >"$out/serve-$run.log"
	rm -f "$out/anchor-report-$run.json" "$out/anchor-failed-$run.txt"
	start_plane
	echo "== run $run of $RUNS: $UPSTREAMS upstreams, $ENVOY Envoy-like and $GRPC gRPC-like clients" >&2
	rm -f "$out/load-$run.log" # a run before this one's says "synced" already
	planeflag=(--pid "$pid" --admin-address "$admin")
	phases=$PHASES
	if [ "$STORM" = 1 ]; then
		planeflag=()
		phases=$STORM_PHASES
	fi
	phaseflags=()
	for p in $phases; do phaseflags+=(--phase "$p"); done
	profileflag=()
	if [ "$PROFILE" = 1 ] && [ "$STORM" != 1 ]; then
		mkdir -p "$out/profiles-$run"
		profileflag=(--profile-dir "$out/profiles-$run")
	fi
	"$cp" load --xds-address "$xds" "${planeflag[@]}" --churn files --tree "$tree" --upstreams "$UPSTREAMS" \
		--envoy "$ENVOY" --envoy-clusters "$ENVOY_CLUSTERS" --grpc "$GRPC" --grpc-clusters "$GRPC_CLUSTERS" \
		--streams-per-connection "$STREAMS_PER_CONNECTION" --procs "$PROCS" "${phaseflags[@]}" "${profileflag[@]}" \
		--settle "$SETTLE" --idle "$IDLE" --drain "$DRAIN" \
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
	if [ "$rc" != 0 ]; then
		kill -INT "$pid"; wait "$pid" || true
		cat "$out/load-$run.log" >&2; echo "bench-fleet: run $run failed ($rc)" >&2; exit "$rc"
	fi
	echo "   report: $out/report-$run.json, plot: $out/convergence-$run.svg" >&2
	[ "$ANCHOR" = 0 ] || run_anchor "$run"
	kill -INT "$pid"; wait "$pid" || true
	pid=
done
reports=() areports=()
for run in $(seq 1 "$RUNS"); do
	reports+=("$out/report-$run.json")
	[ ! -f "$out/anchor-report-$run.json" ] || areports+=("$out/anchor-report-$run.json")
done
{
	echo "## The replica: $ENVOY Envoy-like and $GRPC gRPC-like clients"
	echo
	"$GO" run ./test/scale/cmd/fleettable "${reports[@]}"
	if [ "$ANCHOR" != 0 ]; then
		echo
		echo "## go-control-plane's LinearCache (the anchor), mirroring the replica: $ANCHOR Envoy-like clients"
		echo
		for run in $(seq 1 "$RUNS"); do
			[ ! -f "$out/anchor-failed-$run.txt" ] || echo "run $run of the anchor failed: $(cat "$out/anchor-failed-$run.txt")"
		done
		echo
		[ "${#areports[@]}" = 0 ] || "$GO" run ./test/scale/cmd/fleettable "${areports[@]}"
	fi
} | tee "$out/table.md"
