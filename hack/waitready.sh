#!/usr/bin/env bash
# Sourced by the bench scripts: waitready URL PID LOG waits up to a minute
# for URL/readyz to answer 200, printing LOG and failing at once if PID has
# exited meanwhile.
waitready() {
	for _ in $(seq 1 600); do
		curl -fsS "$1/readyz" >/dev/null 2>&1 && return 0
		kill -0 "$2" 2>/dev/null || { cat "$3"; exit 1; }
		sleep 0.1
	done
	echo "$(basename "$0"): $1 not ready" >&2
	exit 1
}
