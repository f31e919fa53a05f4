#!/usr/bin/env bash
# make bench-fleet-kube: the sustained churn of make bench-fleet, but through
# a real kube-apiserver: test/scale/cmd/kubefleet starts kube-apiserver and
# etcd (envtest, KUBEBUILDER_ASSETS from hack/test-binaries.sh) holding
# UPSTREAMS Upstreams that import Services (one EndpointSlice of 20
# endpoints each), one replica serves them (--source=kubernetes), ENVOY and
# GRPC clients connect as in make bench-fleet, and controlplane load
# --churn kube updates the EndpointSlices at RATE a second for DURATION
# (PHASES), through the apiserver. RUNS runs, each on a fresh apiserver;
# reports under bin/bench-fleet-kube/ and the table of their figures.
set -euo pipefail

UPSTREAMS=${UPSTREAMS:-5000}
ENVOY=${ENVOY:-5000}
GRPC=${GRPC:-20000}
ENVOY_CLUSTERS=${ENVOY_CLUSTERS:-50-500}
GRPC_CLUSTERS=${GRPC_CLUSTERS:-1-5}
STREAMS_PER_CONNECTION=${STREAMS_PER_CONNECTION:-2}
PROCS=${PROCS:-8}
PHASES=${PHASES:-churn:all:200:5m}
SETTLE=${SETTLE:-10s}
IDLE=${IDLE:-10s}
DRAIN=${DRAIN:-60s}
RUNS=${RUNS:-3}
BIN=${BIN:-bin}
GO=${GO:-go}

cp=$BIN/controlplane
out=$BIN/bench-fleet-kube
mkdir -p "$out"
KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$(bash hack/test-binaries.sh)}
export KUBEBUILDER_ASSETS
"$GO" build -o "$BIN/kubefleet" ./test/scale/cmd/kubefleet
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

xds=127.0.0.1:18710 admin=127.0.0.1:18711
for run in $(seq 1 "$RUNS"); do
	kc=$work/kubeconfig-$run
	"$BIN/kubefleet" -upstreams "$UPSTREAMS" -out "$kc" >"$out/apiserver-$run.log" 2>&1 &
	api=$!
	pids=("$api")
	until grep -q '^ready' "$out/apiserver-$run.log"; do
		kill -0 "$api" 2>/dev/null || { cat "$out/apiserver-$run.log" >&2; exit 1; }
		sleep 0.5
	done
	cat "$out/apiserver-$run.log" >&2
	"$cp" serve --source=kubernetes --kubeconfig "$kc" --namespace bench --xds-address "$xds" --admin-address "$admin" \
		--xds-max-streams 100000 >"$out/serve-$run.log" 2>&1 &
	pid=$!
	pids+=("$pid")
	# ready once it serves every Upstream
	for _ in $(seq 1 1200); do
		curl -fsS "http://$admin/readyz" >/dev/null 2>&1 && break
		kill -0 "$pid" 2>/dev/null || { cat "$out/serve-$run.log" >&2; exit 1; }
		sleep 0.5
	done
	echo "== run $run of $RUNS: $UPSTREAMS Upstreams on a real apiserver, $ENVOY Envoy-like and $GRPC gRPC-like clients" >&2
	phaseflags=()
	for p in $PHASES; do phaseflags+=(--phase "$p"); done
	rc=0
	"$cp" load --xds-address "$xds" --pid "$pid" --admin-address "$admin" --churn kube --kubeconfig "$kc" --namespace bench \
		--envoy "$ENVOY" --envoy-clusters "$ENVOY_CLUSTERS" --grpc "$GRPC" --grpc-clusters "$GRPC_CLUSTERS" \
		--streams-per-connection "$STREAMS_PER_CONNECTION" --procs "$PROCS" "${phaseflags[@]}" \
		--settle "$SETTLE" --idle "$IDLE" --drain "$DRAIN" \
		--plot "$out/convergence-$run.svg" -o json >"$out/report-$run.json" 2>"$out/load-$run.log" || rc=$?
	kill -INT "$pid"; wait "$pid" || true
	kill -INT "$api"; wait "$api" || true
	pids=()
	[ "$rc" = 0 ] || { tail -20 "$out/load-$run.log" >&2; echo "bench-fleet-kube: run $run failed ($rc)" >&2; exit "$rc"; }
	echo "   report: $out/report-$run.json, plot: $out/convergence-$run.svg" >&2
done
reports=()
for run in $(seq 1 "$RUNS"); do reports+=("$out/report-$run.json"); done
"$GO" run ./test/scale/cmd/fleettable "${reports[@]}" | tee "$out/table.md"
