#!/bin/sh
# The image's HEALTHCHECK: GET /healthz where ledgerd serves, read from
# LEDGER_LISTEN in the forms ledgerd takes (HOST:PORT, [V6]:PORT,
# unix:/path), so a container told to listen elsewhere is checked there and
# not on a fixed port. A wildcard address is reached through loopback.
# Exits 0 when healthy and 1 otherwise, the two codes a HEALTHCHECK may use.
set -u

listen=${LEDGER_LISTEN:-127.0.0.1:8080}

unhealthy() {
	echo "ledgerd-healthcheck: $*" >&2
	exit 1
}

case $listen in
unix:)
	unhealthy "LEDGER_LISTEN=$listen names no socket"
	;;
unix:*)
	curl -fsS -o /dev/null --max-time 2 --unix-socket "${listen#unix:}" \
		http://localhost/healthz || exit 1
	exit 0
	;;
\[*\]:*)
	host="${listen%\]:*}]"
	port=${listen##*\]:}
	;;
*:*)
	host=${listen%:*}
	port=${listen##*:}
	;;
*)
	unhealthy "LEDGER_LISTEN=$listen is not HOST:PORT, [V6]:PORT or unix:/path"
	;;
esac

case $port in
'' | *[!0-9]*) unhealthy "LEDGER_LISTEN=$listen: no port" ;;
esac
case $host in
'' | 0.0.0.0 | '*') host=127.0.0.1 ;;
'[::]') host='[::1]' ;;
esac

curl -fsS -o /dev/null --max-time 2 "http://$host:$port/healthz" || exit 1
