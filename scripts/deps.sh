#!/usr/bin/env bash
# Installs the Debian packages ledgerd needs to build, run and test, and
# nothing that is already there. Called by `make run` and `make test`, so a
# fresh Debian 12 machine needs no manual set-up. The list below is the one
# place the project names its system packages.
set -euo pipefail

# The libraries' headers and the build's tools, for gcc (make) and clang (make fuzz) alike.
# libc6-dev by name: gcc only recommends it, and installs here take no recommendations.
LIB_PKGS="make pkg-config libc6-dev libpq-dev libssl-dev libyaml-dev libcurl4-openssl-dev libjansson-dev"
BUILD_PKGS="gcc $LIB_PKGS"
RUN_PKGS="postgresql-15 python3"
# The HA engine: Patroni, its etcd client and etcd. tests/ha runs ledgerd's
# database on it; docker/patroni.Dockerfile builds the image of its nodes.
HA_PKGS="patroni python3-etcd etcd-server"
# pytest-xdist: make test runs its test files in parallel.
# python3-venv: tests/sdk/python/test_python_packaging.py installs sdk/python into a venv.
# openssl: tests/tlsutil.py makes the TLS tests' certificates with its command line.
# clang and its runtimes (libFuzzer, the sanitizers): make fuzz, and make test's fuzz-smoke.
# chromium: tests/ui drives the page at /ui/ in it, through playwright-core.
# python3-yaml: tests/ops reads the alert rules and their tests.
# pgbouncer: tests/ops runs ledgerd behind it, an instance of its own per test.
# jq: docs/operations.md scripts the token listing with it, and tests/docs runs that.
# groff-base, man-db: tests/integration/test_install.py renders the man pages with
# every warning on (groff -ww, man --warnings), as lintian does.
FUZZ_PKGS="clang libclang-rt-14-dev"
# tests/sdk/js/test_js_node18.py runs the TypeScript client on Debian's own
# Node 18 (downloaded and unpacked by tests/sdk/js/node18.py, not installed,
# so the nodejs above may be newer): it loads fetch (undici), acorn and
# cjs-module-lexer from /usr/share/nodejs, and links the shared libraries
# below; all leave the installed node alone.
NODE18_PKGS="node-undici node-acorn node-cjs-module-lexer libuv1 libc-ares2 libbrotli1 libicu72 libnghttp2-14"
TEST_PKGS="libcmocka-dev python3-pytest python3-pytest-xdist python3-yaml python3-venv jq groff-base man-db curl openssl valgrind nodejs chromium pgbouncer $HA_PKGS $FUZZ_PKGS $NODE18_PKGS"
DEV_PKGS="cppcheck clang-format"
BENCH_PKGS="wrk gnuplot-nox nodejs nginx"
# What the built programs need at run time and nothing to build them: the
# shared libraries of ledgerd, ledgerctl and gateway, and curl for a health
# check. The final stage of docker/Dockerfile installs exactly these.
RUNTIME_PKGS="libpq5 libssl3 libyaml-0-2 libcurl4 libjansson4 curl ca-certificates"
# make image-test: podman builds docker/Dockerfile with no Docker engine,
# runc runs its containers, debootstrap makes the Debian base image (its
# archive keyring checks what it fetches), catatonit is podman's --init.
IMAGE_PKGS="podman runc debootstrap debian-archive-keyring catatonit curl"
# make deb: debhelper builds the Debian packages, lintian checks them.
DEB_PKGS="debhelper dpkg-dev lintian"

want="$BUILD_PKGS $RUN_PKGS"
case "${1:-run}" in
	run) ;;
	demo) want="$want nodejs" ;;
	test) want="$want $TEST_PKGS" ;;
	build) want="$BUILD_PKGS" ;;
	fuzz) want="$LIB_PKGS $FUZZ_PKGS" ;;
	dev) want="$BUILD_PKGS $DEV_PKGS" ;;
	bench) want="$BUILD_PKGS $RUN_PKGS $BENCH_PKGS" ;;
	runtime) want="$RUNTIME_PKGS" ;;
	patroni) want="$RUN_PKGS $HA_PKGS" ;;
	image) want="$RUN_PKGS $IMAGE_PKGS" ;;
	deb) want="$BUILD_PKGS $DEB_PKGS" ;;
	*) echo "usage: $0 [build|run|demo|test|fuzz|dev|bench|runtime|patroni|image|deb]" >&2; exit 2 ;;
esac

# The tests check /metrics with promtool, fetched (not installed) on first use.
prefetch() {
	[ "${1:-run}" = test ] && "$(dirname "$0")/promtool.sh" --version >/dev/null
	return 0
}

missing=()
for p in $want; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# The tests' npm packages (the MCP SDK, the TypeScript client's frameworks)
# and the bench's (DBOS Transact)
# need npm: Debian ships it apart from nodejs, which other builds of nodejs
# (NodeSource's) include, so it is asked for only when the command is missing.
# make demo's engine is node-llama-cpp, from npm too.
if { [ "${1:-run}" = test ] || [ "${1:-run}" = bench ] || [ "${1:-run}" = demo ]; } &&
	! command -v npm >/dev/null; then
	missing+=(npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
	prefetch "${1:-run}"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "ledgerd: missing Debian packages: ${missing[*]}" >&2
	echo "ledgerd: run as root, or: sudo apt-get install ${missing[*]}" >&2
	exit 1
fi
echo "ledgerd: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Debian's nginx package starts a system service on port 80 from its
# postinst. make bench runs its own nginx (build/bench/, in the foreground),
# so while a fresh nginx installs, policy-rc.d refuses every service start
# (exit 101), unless the machine already has a policy of its own.
policy=
if [[ " ${missing[*]} " == *" nginx "* ]] && [ ! -e /usr/sbin/policy-rc.d ]; then
	policy=/usr/sbin/policy-rc.d
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	trap 'rm -f "$policy"' EXIT
fi
# Refresh the package lists only when an install from the current ones fails.
if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; then
	apt-get update -q >/dev/null
	apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's pgbouncer package enables (and, under systemd, starts) a system
# service on 127.0.0.1:6432. The tests run their own instances, so the
# service a fresh install brings is disabled and stopped; one that was
# installed before is left as its owner set it up.
if [[ " ${missing[*]} " == *" pgbouncer "* ]] && command -v systemctl >/dev/null; then
	if [ -d /run/systemd/system ]; then
		systemctl disable --now pgbouncer.service >/dev/null 2>&1 || true
	else
		systemctl disable pgbouncer.service >/dev/null 2>&1 || true
	fi
fi
# nginx's service, refused a start above, is not enabled either: no boot
# starts it.
if [[ " ${missing[*]} " == *" nginx "* ]]; then
	if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
		systemctl disable --now nginx.service >/dev/null 2>&1 || true
	else
		update-rc.d nginx disable >/dev/null 2>&1 || true
	fi
fi
prefetch "${1:-run}"
