#!/usr/bin/env bash
# Installs what make test's tests need beyond Go, with apt-get: Debian's
# luajit (the spatial routing tests run the generated Lua under it),
# chromium and fonts-dejavu-core (the traffic map's test, test/browser,
# drives headless chromium; the fonts make its screenshots legible and the
# same from run to run), iproute2 (the Kubernetes resilience scenarios put
# replicas in network namespaces joined by veth links, with ip(8)).
# make test (hack/test.sh) and .ci/run both run it.
#
# As root it installs what is missing; otherwise through sudo when sudo
# needs no password; otherwise it says it cannot. POISE_NO_INSTALL=1 makes it
# install nothing. It exits 0 when everything is there at the end and 1
# when something is missing, naming it; then make test goes on, and the
# tests that needed it are skipped and listed at its end.
#
# On standard output it prints, for what is there, the variable that makes
# its tests fail rather than skip without it (POISE_REQUIRE_LUAJIT=1,
# POISE_REQUIRE_CHROMIUM=1), one a line, for make test to export; all else
# goes to standard error.
set -uo pipefail

log() { printf 'test-deps: %s\n' "$*" >&2; }

# have NAME: an executable NAME on PATH (bash's command -v alone also
# names a file that is not executable).
have() {
	local p
	p=$(command -v "$1" 2>/dev/null) && [ -f "$p" ] && [ -x "$p" ]
}

missing() {
	local m=()
	have luajit || m+=(luajit)
	have chromium || m+=(chromium)
	[ -d /usr/share/fonts/truetype/dejavu ] || m+=(fonts-dejavu-core)
	have ip || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || m+=(iproute2)
	echo "${m[*]}"
}

# require prints the variables for what is there.
require() {
	if have luajit; then echo POISE_REQUIRE_LUAJIT=1; fi
	if have chromium; then echo POISE_REQUIRE_CHROMIUM=1; fi
}

need=$(missing)
if [ -z "$need" ]; then
	log "luajit, chromium, fonts-dejavu-core and iproute2 are installed"
	require
	exit 0
fi

cannot() {
	log "cannot install $need: $*"
	log "the tests that need them will be skipped, and listed at the end; to install them: apt-get install $need (as root)"
	require
	exit 1
}

if [ "${POISE_NO_INSTALL:-}" = 1 ]; then
	cannot "POISE_NO_INSTALL=1"
fi
if ! command -v apt-get >/dev/null 2>&1; then
	cannot "there is no apt-get on this machine"
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo=(sudo -n)
	else
		cannot "not root, and sudo is missing or asks for a password"
	fi
fi

start=$SECONDS
log "installing $need with apt-get (once per machine; chromium takes a minute or two)"
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086 # one package per word
install() { "${sudo[@]}" apt-get install -y -q -o DPkg::Lock::Timeout=300 $need >&2; }
install || { "${sudo[@]}" apt-get update -q >&2 && install; }

need=$(missing)
if [ -n "$need" ]; then
	cannot "apt-get did not install them (see its output above)"
fi
log "installed in $((SECONDS - start))s"
require
