#!/usr/bin/env bash
# `make run`: ledgerd on 127.0.0.1:8080 over an embedded PostgreSQL 15 kept
# under ./var/ (created on the first run), or over LEDGER_DATABASE_URL when
# that is set. Ctrl-C stops ledgerd, which drains its calls, then the cluster.
# LEDGER_LISTEN picks another address; LEDGER_RUN_DIR another place than
# ./var/ for the cluster and the token.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
var=${LEDGER_RUN_DIR:-$root/var}
ledgerd=${LEDGERD:-$root/build/ledgerd}
pgbin=/usr/lib/postgresql/15/bin
pgdir=$var/pg
export LEDGER_LISTEN=${LEDGER_LISTEN:-127.0.0.1:8080}

say() { printf 'ledgerd: %s\n' "$*" >&2; }

mkdir -p "$var"

# PostgreSQL refuses to run as root: as root the cluster belongs to the
# postgres user, otherwise to whoever runs this.
if [ "$(id -u)" -eq 0 ]; then
	pguser=postgres
	as_pg() { runuser -u postgres -- "$@"; }
else
	pguser=$(id -un)
	as_pg() { "$@"; }
fi

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The postgres user must be able to reach ./var/pg: give the directories
# above it the search bit (not the read bit) where it is missing.
reachable_by_postgres() {
	[ "$pguser" != postgres ] && return 0
	as_pg test -x "$var" && return 0
	local d=$var
	while [ "$d" != / ]; do
		if ! as_pg test -x "$d"; then
			say "giving others search permission on $d so that the postgres user reaches $var"
			chmod o+x "$d"
		fi
		d=$(dirname "$d")
	done
}

start_cluster() {
	reachable_by_postgres
	if [ ! -f "$pgdir/data/PG_VERSION" ]; then
		say "creating the embedded PostgreSQL cluster in $pgdir"
		rm -rf "$pgdir" "$var/dev-token"
		mkdir -p "$pgdir"
		[ "$pguser" = postgres ] && chown postgres: "$pgdir"
		as_pg "$pgbin/initdb" -D "$pgdir/data" -U "$pguser" -A trust -E UTF8 \
			--locale=C.UTF-8 >"$pgdir/initdb.log"
	fi
	port=$(free_port)
	# setsid: Ctrl-C reaches ledgerd, which drains; the cluster is stopped after it.
	as_pg setsid "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/server.log" -w -s \
		-o "-p $port -k $pgdir -c listen_addresses=127.0.0.1" start
	trap stop_cluster EXIT
	if ! as_pg "$pgbin/psql" -h "$pgdir" -p "$port" -U "$pguser" -d postgres -Atqc \
		"SELECT 1 FROM pg_database WHERE datname = 'ledger'" | grep -q 1; then
		as_pg "$pgbin/createdb" -h "$pgdir" -p "$port" -U "$pguser" ledger
	fi
	export LEDGER_DATABASE_URL="host='$pgdir' port=$port user=$pguser dbname=ledger"
	say "embedded PostgreSQL on 127.0.0.1:$port and $pgdir/.s.PGSQL.$port"
}

stop_cluster() {
	as_pg "$pgbin/pg_ctl" -D "$pgdir/data" -m fast -w -s stop || true
	say "embedded PostgreSQL stopped"
}

# What an earlier make run left running (its make killed hard, say): said,
# with what to do, rather than a bare "could not start server" below.
left_running() {
	local pid
	if [ -s "$var/ledgerd.pid" ] && pid=$(cat "$var/ledgerd.pid") && kill -0 "$pid" 2>/dev/null &&
		grep -q ledgerd "/proc/$pid/cmdline" 2>/dev/null; then
		say "the ledgerd of an earlier make run is still running (pid $pid); stop it first:"
		say "    kill $pid"
		return 0
	fi
	if [ -z "${LEDGER_DATABASE_URL:-}" ] && [ -s "$pgdir/data/postmaster.pid" ] &&
		pid=$(head -n 1 "$pgdir/data/postmaster.pid") && kill -0 "$pid" 2>/dev/null; then
		say "the embedded PostgreSQL of an earlier make run is still running (pid $pid); stop it first:"
		say "    $([ "$pguser" = postgres ] && printf 'runuser -u postgres -- ')$pgbin/pg_ctl -D $pgdir/data -m fast stop"
		return 0
	fi
	return 1
}
if left_running; then
	exit 1
fi

if [ -z "${LEDGER_DATABASE_URL:-}" ]; then
	start_cluster
	embedded=1
else
	say "using LEDGER_DATABASE_URL"
	embedded=0
fi

"$ledgerd" migrate >&2

# One development token, kept in var/dev-token and stored again in whatever
# database this run uses (--from-env succeeds when it is there already), so
# restarting never mints another while the old one stays valid.
token=""
if [ -s "$var/dev-token" ] && LEDGER_DEV_TOKEN=$(cat "$var/dev-token") \
	"$ledgerd" token create --tenant dev --role admin --from-env LEDGER_DEV_TOKEN 2>/dev/null; then
	token=$(cat "$var/dev-token")
fi
if [ -z "$token" ]; then
	"$ledgerd" token create --tenant dev --role admin >"$var/dev-token.new"
	mv "$var/dev-token.new" "$var/dev-token"
	token=$(cat "$var/dev-token")
fi
printf '%s\n' "$LEDGER_DATABASE_URL" >"$var/database-url"

cat >&2 <<EOF
ledgerd: development admin token (tenant "dev", saved in $var/dev-token):

    $token

ledgerd: the database (saved in $var/database-url), for ledgerd's own commands while this runs:

    LEDGER_DATABASE_URL="$LEDGER_DATABASE_URL"
    e.g. LEDGER_DATABASE_URL="\$(cat $var/database-url)" build/ledgerd token create --tenant dev --role agent

ledgerd: listening on http://$LEDGER_LISTEN (another address: LEDGER_LISTEN=127.0.0.1:8081 make run); try:
    curl -s -X POST -H "Authorization: Bearer \$(cat $var/dev-token)" \\
      -d '{"claim_id":"7f3c9a0b1d2e4f5a6b7c8d9e0f1a2b3c","tool":"send_email","args":{"to":"ana@example.com"}}' \\
      http://$LEDGER_LISTEN/v1/requests/req-1/tool-calls/call_01/claim

ledgerd: the incident-review page (paste the token above): http://$LEDGER_LISTEN/ui/

EOF
# make passes a SIGTERM (a kill of make's PID, as a shell's kill %1 sends)
# to this shell alone, and a shell waits for its foreground command before
# it runs a trap: so ledgerd runs in the background and each signal is
# passed on as SIGTERM (Ctrl-C's SIGINT too). ledgerd drains, then the EXIT
# trap stops the cluster.
"$ledgerd" serve &
ledgerd_pid=$!
printf '%s\n' "$ledgerd_pid" >"$var/ledgerd.pid"
trap 'kill -TERM "$ledgerd_pid" 2>/dev/null || true' TERM INT HUP
status=0
wait "$ledgerd_pid" || status=$?
# A trapped signal ends the wait early: wait again for ledgerd's drain.
while kill -0 "$ledgerd_pid" 2>/dev/null; do
	status=0
	wait "$ledgerd_pid" || status=$?
done
rm -f "$var/ledgerd.pid"
exit "$status"
