#!/usr/bin/env bash
# make test: every package of PKGS under the race detector, in one go test
# run, with the envtest apiserver, etcd and helm built once. test/e2e runs
# beside it as a second go test run, without -race in its own process: that
# process holds only gRPC clients, backends and the harness, which spend
# its time in 20,000-RPC splits, while the control plane it tests runs as
# a binary of its own, built with -race (cpbinary.RaceEnv), so the race
# detector watches the plane there too. Its output follows the rest.
# pkg/weights' timing test, meaningless under -race, then runs without it.
#
# First it installs what the tests need beyond Go (hack/test-deps.sh, as
# .ci/run does): what it installs is then required, so its tests fail
# rather than skip without it. Both go test runs write -json events,
# which hack/testsummary prints as go test prints them without -v and, at
# the end, reads for every test that was skipped: each is listed with its
# reason and the command that would run it, and make test fails for them
# unless POISE_ALLOW_SKIPS=1.
#
# usage: hack/test.sh OUTPUT_DIR PACKAGE_PATTERN...
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1
shift
GO=${GO:-go}

rm -rf "$out" && mkdir -p "$out" || exit 1

# What it could not install, the summary lists as skipped.
require=$(bash hack/test-deps.sh) || true
for v in $require; do export "${v?}"; done

# A machine's first run builds kube-apiserver, etcd and helm from source
# (hack/test-binaries.sh, hack/helm.sh) while it compiles the packages the
# tests import, with -race (test/e2e's without), for go test to find in the
# build cache: on two cores that took 16.7 min where one after the other
# took 21.1 (docs/testing.md). Later runs find them built and skip this.
first_run=
if ! bash hack/test-binaries.sh --built; then
	first_run=1
	echo "== first run on this machine: the Go modules download, then kube-apiserver, etcd and helm build from source while the test packages' dependencies compile (together about 17 min on two cores)"
fi

pkgs=$($GO list "$@") || exit 1
e2e=poise.dev/poise/test/e2e
rest=$(grep -vx "$e2e" <<<"$pkgs" || true)

prebuild_pid=
if [ -n "$first_run" ]; then
	(
		start=$SECONDS
		fmt='{{if and (not .ForTest) (ne .Name "main")}}{{.ImportPath}}{{end}}'
		if [ -n "$rest" ]; then
			# shellcheck disable=SC2086 # one package path per word
			deps=$($GO list -deps -test -f "$fmt" $rest) &&
				bash hack/progress.sh "compiling the test packages' dependencies (-race)" $GO build -race $deps || exit
		fi
		if grep -qx "$e2e" <<<"$pkgs"; then
			# shellcheck disable=SC2086 # one package path per word
			deps=$($GO list -deps -test -f "$fmt" "$e2e") &&
				bash hack/progress.sh "compiling test/e2e's dependencies" $GO build $deps || exit
		fi
		echo "== compiled the test packages' dependencies in $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s"
	) &
	prebuild_pid=$!
fi
bash hack/helm.sh >"$out/helm" &
helm_pid=$!
assets=$(bash hack/test-binaries.sh) || exit 1
wait "$helm_pid" || exit 1
export KUBEBUILDER_ASSETS="$assets" HELM="$(cat "$out/helm")"
# A failure here is go test's to report, with the package it is in.
if [ -n "$prebuild_pid" ]; then wait "$prebuild_pid"; fi

summary=$out/testsummary
$GO build -o "$summary" ./hack/testsummary || exit 1
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
	POISE_CONTROLPLANE_RACE=1 $GO test -json -count=1 -timeout 30m "$e2e" >"$out/e2e.json" 2>"$out/e2e.stderr" &
	e2e_pid=$!
fi
rc=0
# fail RC: the exit code to end with, the first failure's.
fail() { if [ "$rc" -eq 0 ]; then rc=$1; fi; }
if [ -n "$rest" ]; then
	echo "== go test -race: $(wc -w <<<"$rest") packages$([ -z "$e2e_pid" ] || echo "; test/e2e runs beside them, its result after theirs")"
	# shellcheck disable=SC2086 # one package path per word
	$GO test -json -race -count=1 -timeout 30m -artifacts -outputdir "$out" $rest |
		"$summary" render -o "$out/race.json"
	st=("${PIPESTATUS[@]}")
	[ "${st[0]}" -eq 0 ] || fail "${st[0]}"
	[ "${st[1]}" -eq 0 ] || fail "${st[1]}"
fi
if [ -n "$e2e_pid" ]; then
	e2e_rc=0
	wait "$e2e_pid" || e2e_rc=$?
	echo "== $e2e (its control plane built with -race; see hack/test.sh)"
	cat "$out/e2e.stderr"
	"$summary" render <"$out/e2e.json" || fail 1
	[ "$e2e_rc" -eq 0 ] || fail "$e2e_rc"
fi
weights=poise.dev/poise/pkg/weights
if grep -qx "$weights" <<<"$pkgs"; then
	echo "== $weights: TestComputeScalesNLogN without -race (timing ratios mean nothing under it)"
	$GO test -json -count=1 -run '^TestComputeScalesNLogN$' "$weights" | "$summary" render -o "$out/norace.json"
	st=("${PIPESTATUS[@]}")
	[ "${st[0]}" -eq 0 ] || fail "${st[0]}"
	[ "${st[1]}" -eq 0 ] || fail "${st[1]}"
fi

# Every test skipped in all of the runs, and the counts; exits 1 for a
# skip unless POISE_ALLOW_SKIPS=1.
"$summary" summary "$out"/*.json || fail 1
exit "$rc"
