#!/usr/bin/env bash
# make test: every package of PKGS under the race detector, in one go test
# run, with the envtest apiserver, etcd and helm built once. test/e2e runs
# beside it as a second go test run, without -race in its own process: that
# process holds only gRPC clients, backends and the harness, which spend
# its time in 20,000-RPC splits, while the control plane it tests runs as
# a binary of its own, built with -race (cpbinary.RaceEnv), so the race
# detector watches the plane there too. Its output follows the rest.
#
# usage: hack/test.sh OUTPUT_DIR PACKAGE_PATTERN...
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1
shift
GO=${GO:-go}

rm -rf "$out" && mkdir -p "$out" || exit 1
assets=$(bash hack/test-binaries.sh) || exit 1
helm=$(bash hack/helm.sh) || exit 1
export KUBEBUILDER_ASSETS="$assets" HELM="$helm"

pkgs=$($GO list "$@") || exit 1
e2e=poise.dev/poise/test/e2e
rest=$(grep -vx "$e2e" <<<"$pkgs" || true)
# go test starts the packages in the order given, as many at a time as
# there are cores: the longest (test/kube, most of whose tests wait for an
# apiserver, a handover or a drain) goes first, so the others fill the
# machine beside it rather than it running alone at the end.
first=poise.dev/poise/test/kube
if grep -qx "$first" <<<"$rest"; then
	rest=$(printf '%s\n' "$first"; grep -vx "$first" <<<"$rest" || true)
fi

e2e_pid=
if grep -qx "$e2e" <<<"$pkgs"; then
	POISE_CONTROLPLANE_RACE=1 $GO test -count=1 -timeout 30m "$e2e" >"$out/e2e.log" 2>&1 &
	e2e_pid=$!
fi
rc=0
if [ -n "$rest" ]; then
	# shellcheck disable=SC2086 # one package path per word
	$GO test -race -count=1 -timeout 30m -artifacts -outputdir "$out" $rest || rc=$?
fi
if [ -n "$e2e_pid" ]; then
	e2e_rc=0
	wait "$e2e_pid" || e2e_rc=$?
	echo "== $e2e (its control plane built with -race; see hack/test.sh)"
	cat "$out/e2e.log"
	if [ "$e2e_rc" -ne 0 ] && [ "$rc" -eq 0 ]; then rc=$e2e_rc; fi
fi
exit "$rc"
