#!/usr/bin/env bash
# Runs promtool, Prometheus's own checker, to validate /metrics in the tests.
# Debian ships it in the prometheus package, which would also install and
# start a Prometheus server; only the binary is wanted, so the package is
# downloaded and unpacked under build/tools instead of installed.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/build/tools/prometheus

if command -v promtool >/dev/null 2>&1; then
	exec promtool "$@"
fi
if [ ! -x "$dir/usr/bin/promtool" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	fetch() { (cd "$tmp" && apt-get download -q prometheus >/dev/null 2>&1); }
	if ! fetch; then
		apt-get update -q >/dev/null
		fetch
	fi
	mkdir -p "$dir"
	dpkg-deb -x "$tmp"/prometheus_*.deb "$dir"
fi
exec "$dir/usr/bin/promtool" "$@"
