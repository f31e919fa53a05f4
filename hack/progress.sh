#!/usr/bin/env bash
# usage: hack/progress.sh WHAT COMMAND [ARG...]
#
# Runs COMMAND and, while it runs, says on standard error once a minute
# that WHAT is still going, so that a first build, which compiles for
# minutes without a word, is not taken for a hang. Exits as COMMAND does.
what=$1
shift
"$@" &
pid=$!
(
	# The sleep holds no output open (a caller reading this script's
	# output would wait for it) and dies with the ticker.
	s=
	trap 'kill $s 2>/dev/null; exit 0' TERM
	start=$SECONDS
	while :; do
		sleep 60 </dev/null >/dev/null 2>&1 &
		s=$!
		wait "$s"
		kill -0 "$pid" 2>/dev/null || exit 0
		printf '%s: still going (%d min)\n' "$what" $(((SECONDS - start) / 60)) >&2
	done
) &
ticker=$!
rc=0
wait "$pid" || rc=$?
kill "$ticker" 2>/dev/null
wait "$ticker" 2>/dev/null
exit "$rc"
