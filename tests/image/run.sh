#!/usr/bin/env bash
# make image-test: builds docker/Dockerfile for real and runs the image it
# makes against a real PostgreSQL 15. There is no Docker engine on the
# project's machines: podman builds and runs the image (with runc), on a
# Debian base made here with debootstrap, in a container store of its own
# under build/image/. What it checks, step by step: docker/README.md.
set -Eeuo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/image/mounts.sh
. "$root/tests/image/mounts.sh"
state=$root/build/image
# This run's logs, kept for a look after it; its tokens are removed at exit.
work=$state/work
lock=$state/lock
# podman's state of running containers, which a reboot must forget: on the
# machine's /run, one folder per work tree. Short, too: podman refuses a
# runroot longer than 50 characters in the cleanup command it hands to
# conmon, and each container's exit then waits 20 s for a cleanup that
# never comes.
volatile=/run/ledgerd-image-$(printf '%s' "$state" | sha256sum | cut -c1-12)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# A base older than this is made again, so its packages do not fall far behind.
base_max_age_days=30
# Bump when what make_base() puts in the base changes: the cached tarball
# is then made again.
base_recipe=1
base_tar=$state/base/debian-bookworm-slim-$base_recipe.tar
base_image=docker.io/library/debian:bookworm-slim
run_id=$$
image=localhost/ledgerd-image-test:$run_id
ledgerd_ctr=ledgerd-image-test-$run_id
gateway_ctr=ledgerd-image-test-gateway-$run_id
deb_ctr=ledgerd-image-test-deb-$run_id
# The Debian packages make deb builds, each installed and purged again.
deb_packages="ledgerd ledger-gateway ledger-mcp libledger-client1 libledger-client-dev"
pgbin=/usr/lib/postgresql/15/bin

step_no=0
step_name=
step_start=0
pgdir=
pg_started=0
bg_pid=
podman_driver=
started=$(date +%s)

say() { printf 'image-test: %s\n' "$*"; }

step() {
	step_no=$((step_no + 1))
	step_name=$*
	step_start=$(date +%s)
	say "[$step_no] $step_name"
}

# Closes the current step with how long it took.
ok() {
	say "    ok ($(($(date +%s) - step_start)) s)${1:+: $1}"
}

fail() {
	say "FAILED at step $step_no ($step_name): $*" >&2
	exit 1
}

# The last lines of a log, to show with a failure.
show_log() {
	[ -f "$1" ] || return 0
	say "--- last lines of $1" >&2
	tail -n "${2:-30}" "$1" | sed 's/^/    /' >&2
}

on_error() {
	local status=$? line=$1
	say "FAILED at step $step_no ($step_name): a command exited $status (tests/image/run.sh:$line)" >&2
}

# Empties the store. It is this script's alone (build/image/storage-*):
# whatever is in it was made by this run or by one killed before it could
# clean up, the base image and the build's working containers included.
# Fails when something is left.
remove_all() {
	podman ps -a --external --format '{{.ID}}' 2>/dev/null | xargs -r podman rm -f -t 0 >/dev/null 2>&1
	podman volume rm -a -f >/dev/null 2>&1
	podman network prune -f >/dev/null 2>&1
	podman rmi -a -f >/dev/null 2>&1
	[ -z "$(podman ps -a --external -q 2>/dev/null)" ] && [ -z "$(podman images -q 2>/dev/null)" ]
}

# KEEP_IMAGE=1: the image that passed, tagged localhost/ledgerd:VERSION and
# saved as build/ledgerd-image.tar (a docker-archive), for a user with no
# registry: podman load -i (or docker load -i) it, then run the tag.
keep_image() {
	local version tag out=$root/build/ledgerd-image.tar
	version=$(cat "$root/VERSION")
	tag=localhost/ledgerd:$version
	podman tag "$image" "$tag" &&
		podman save --format docker-archive -o "$out.tmp" "$tag" >"$work/save.log" 2>&1 &&
		mv "$out.tmp" "$out" || { rm -f "$out.tmp"; return 1; }
	say "kept the image: $out, tagged $tag"
	say "    podman load -i $out (or docker load -i), then run $tag as docker/README.md shows"
}

cleanup() {
	local status=$? left=0
	trap - EXIT
	set +e
	if [ -n "$bg_pid" ]; then
		kill -TERM "$bg_pid" 2>/dev/null
		wait "$bg_pid" 2>/dev/null
	fi
	if [ "$status" -eq 0 ] && [ "${KEEP_IMAGE:-0}" = 1 ] && ! keep_image; then
		say "cleanup: KEEP_IMAGE=1, but the image could not be saved" >&2
		status=1
	fi
	if [ -n "${CONTAINERS_CONF:-}" ]; then
		if remove_all; then
			# Empty now: nothing in it is worth keeping, and a store made
			# afresh by the next run never disagrees with its paths (as it
			# would after the work tree was moved).
			rm -rf "$volatile" "$state/storage-$podman_driver"
		else
			say "cleanup: containers or images are left in $state (podman ps -a --external, podman images)" >&2
			status=1
			left=1
		fi
	fi
	rm -f "$work"/*.token
	# A base made by a run that failed or was stopped leaves nothing mounted.
	if [ -d "$state/base/tmp" ] && ! unmount_under "$state/base/tmp"; then
		status=1
	fi
	[ "$(cat "$lock" 2>/dev/null)" = $$ ] && rm -f "$lock"
	if [ "$pg_started" = 1 ]; then
		runuser -u postgres -- "$pgbin/pg_ctl" -D "$pgdir/data" -m immediate -w -s stop >/dev/null 2>&1
	fi
	[ -n "$pgdir" ] && rm -rf "$pgdir" "$state/postgres-dir"
	if [ "$status" -eq 0 ]; then
		say "passed in $(($(date +%s) - started)) s; nothing left running"
	elif [ "$left" = 0 ]; then
		say "failed after $(($(date +%s) - started)) s; its containers, images and database are removed" >&2
	fi
	exit "$status"
}

# Runs "$@" with its output in the file $1, in the background: a signal to
# this script is then acted on at once, not once a long command has ended.
long() {
	local log=$1 status=0
	shift
	"$@" >"$log" 2>&1 &
	bg_pid=$!
	wait "$bg_pid" || status=$?
	bg_pid=
	return "$status"
}

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# podman with its configuration and store under build/image/, never the
# machine's own (/etc/containers, /var/lib/containers).
configure_podman() {
	local nofile nproc pid_max driver
	mkdir -p "$volatile" "$state/net"
	# Overlay where the kernel mounts it on this file system, else vfs (a full
	# copy per layer: slower, and works anywhere). Each has its own store,
	# since a store belongs to the driver that made it.
	local p=$state/probe
	driver=vfs
	rm -rf "$p"
	mkdir -p "$p/lower" "$p/upper" "$p/work" "$p/merged"
	if mount -t overlay overlay -o "lowerdir=$p/lower,upperdir=$p/upper,workdir=$p/work" "$p/merged" \
		2>/dev/null; then
		umount "$p/merged"
		driver=overlay
	fi
	rm -rf "$p"
	# A container may not have more than this machine gives: podman's
	# default (1048576 open files) is above the hard limit here, and runc
	# fails to set it. podman also lowers its own process limit to
	# kernel.pid_max, and a container cannot be given more than podman has.
	nofile=$(ulimit -Sn)
	nproc=$(ulimit -Su)
	pid_max=$(cat /proc/sys/kernel/pid_max)
	[ "$nofile" = unlimited ] && nofile=$(ulimit -Hn)
	[ "$nofile" = unlimited ] && nofile=1048576
	if [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; then
		nproc=$pid_max
	fi
	cat >"$state/containers.conf" <<-EOF
		# Written by tests/image/run.sh for make image-test; not the machine's.
		[containers]
		default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

		[engine]
		runtime = "runc"
		# No systemd to hand cgroups or events to.
		cgroup_manager = "cgroupfs"
		events_logger = "file"
		events_logfile_path = "$state/events.log"
		tmp_dir = "$volatile/libpod"

		[network]
		network_config_dir = "$state/net"
	EOF
	cat >"$state/storage.conf" <<-EOF
		# Written by tests/image/run.sh for make image-test; not the machine's.
		[storage]
		driver = "$driver"
		graphroot = "$state/storage-$driver"
		runroot = "$volatile/storage-$driver"
	EOF
	podman_driver=$driver
	export CONTAINERS_CONF=$state/containers.conf
	export CONTAINERS_STORAGE_CONF=$state/storage.conf
	if ! podman info >"$state/podman-info.log" 2>&1; then
		show_log "$state/podman-info.log"
		fail "podman does not start"
	fi
	podman_ulimits="nofile=$nofile nproc=$nproc"
}

# debian:bookworm-slim, made here: Debian 12's minimal base, with what the
# slim images leave out (documentation, manual pages, translations) left out
# of every later install too, and the package lists and downloads removed.
make_base() {
	local tmp=$state/base/tmp
	rm -rf "$tmp"
	mkdir -p "$tmp"
	if ! long "$state/base/debootstrap.log" \
		timeout 900 debootstrap --variant=minbase bookworm "$tmp/root" "$mirror"; then
		show_log "$state/base/debootstrap.log"
		fail "debootstrap could not make Debian bookworm from $mirror"
	fi
	local r=$tmp/root
	# What debootstrap left mounted in the root (its /proc): never archived.
	unmount_under "$r" || fail "debootstrap left mounts in $r that will not go"
	rm -f "$r/etc/apt/sources.list"
	cat >"$r/etc/apt/sources.list.d/debian.sources" <<-EOF
		Types: deb
		URIs: ${mirror}
		Suites: bookworm bookworm-updates
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

		Types: deb
		URIs: ${mirror}-security
		Suites: bookworm-security
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
	EOF
	cat >"$r/etc/dpkg/dpkg.cfg.d/slim" <<-EOF
		# A container reads no manual: keep only the licences.
		path-exclude /usr/share/doc/*
		path-include /usr/share/doc/*/copyright
		path-exclude /usr/share/man/*
		path-exclude /usr/share/info/*
		path-exclude /usr/share/groff/*
		path-exclude /usr/share/lintian/*
		path-exclude /usr/share/locale/*
	EOF
	echo 'Acquire::Languages "none";' >"$r/etc/apt/apt.conf.d/no-translations"
	find "$r/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete
	find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
	rm -rf "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/usr/share/locale/* \
		"$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin "$r"/var/cache/apt/archives/*.deb \
		"$r"/var/log/*.log "$r"/var/log/apt/*
	# The engine gives each container its own.
	rm -f "$r/etc/hostname" "$r/etc/resolv.conf"
	tar --numeric-owner -C "$r" -cf "$base_tar.tmp" .
	mv "$base_tar.tmp" "$base_tar"
	rm -rf "$tmp"
	# The build's package downloads were of the old base's day: start afresh.
	rm -rf "$state/apt"
	mkdir -p "$state/apt"
}

start_postgres() {
	local port password
	pgdir=$(mktemp -d /tmp/ledgerd-image-test.XXXXXX)
	chown postgres: "$pgdir"
	# So that the next run stops it if this one is killed before its cleanup.
	printf '%s\n' "$pgdir" >"$state/postgres-dir"
	password=$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')
	printf '%s\n' "$password" >"$pgdir/password"
	chown postgres: "$pgdir/password"
	runuser -u postgres -- "$pgbin/initdb" -D "$pgdir/data" -U ledger --pwfile="$pgdir/password" \
		-A scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$pgdir/initdb.log" 2>&1 ||
		{ show_log "$pgdir/initdb.log"; fail "initdb failed"; }
	port=$(free_port)
	runuser -u postgres -- "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/server.log" -w -s \
		-o "-p $port -k $pgdir -c listen_addresses=127.0.0.1 -c fsync=off" start ||
		{ show_log "$pgdir/server.log"; fail "PostgreSQL did not start"; }
	pg_started=1
	PGPASSWORD=$password runuser -u postgres -- \
		"$pgbin/createdb" -h 127.0.0.1 -p "$port" -U ledger ledger || fail "createdb ledger failed"
	database_url="postgresql://ledger:$password@127.0.0.1:$port/ledger"
	pg_port=$port
}

# A one-shot ledgerd command in a container of the image; its output in $1.
ledgerd_once() {
	local out=$1
	shift
	podman run --rm --network host -e LEDGER_DATABASE_URL="$database_url" "$image" "$@" \
		>"$out" 2>"$out.err"
}

# A command in the container the .debs are installed in; its output in $1.
in_deb() {
	local out=$1
	shift
	podman exec -e LEDGER_DATABASE_URL="$deb_url" "$deb_ctr" "$@" >"$out" 2>"$out.err"
}

# curl against the served ledgerd: the status in $status, the headers in
# $work/headers, the body in $body.
http() {
	local method=$1 path=$2 data=${3:-}
	local args=(-sS --max-time 10 -o "$work/body" -D "$work/headers" -w '%{http_code}'
		-X "$method" -H "Authorization: Bearer $agent_token" -H 'Content-Type: application/json')
	[ -n "$data" ] && args+=(-d "$data")
	status=$(curl "${args[@]}" "http://127.0.0.1:$ledgerd_port$path") || fail "$method $path: no answer"
	body=$(cat "$work/body")
}

header() {
	tr -d '\r' <"$work/headers" | sed -n "s/^$1: *//Ip" | tail -n 1
}

expect_status() {
	[ "$status" = "$1" ] || fail "$2: status $status, expected $1: $body"
}

expect_body() {
	case $body in
	*"$1"*) ;;
	*) fail "$2: $1 is not in the answer: $body" ;;
	esac
}

# Waits up to $2 seconds for GET $1 to answer 200.
wait_200() {
	local url=$1 deadline=$(($(date +%s) + $2))
	while [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url" || true)" != 200 ]; do
		[ "$(date +%s)" -lt "$deadline" ] || return 1
		sleep 0.2
	done
}

# Stops container $1 with SIGTERM and fails unless it ended by itself, with
# exit status 0, in under 10 s (podman stop would SIGKILL it at 10 s).
stop_within_10s() {
	local ctr=$1 t0 t1 ms code signal
	# What podman stop sends: the image's STOPSIGNAL, none here, so SIGTERM.
	signal=$(podman inspect --format '{{.Config.StopSignal}}' "$ctr")
	case $signal in
	15 | SIGTERM | TERM) ;;
	*) fail "$ctr would be stopped with signal $signal, not SIGTERM" ;;
	esac
	t0=$(date +%s%N)
	if ! podman stop -t 10 "$ctr" >"$work/stop.log" 2>&1; then
		show_log "$work/stop.log"
		fail "podman stop $ctr failed"
	fi
	t1=$(date +%s%N)
	ms=$(((t1 - t0) / 1000000))
	code=$(podman inspect --format '{{.State.ExitCode}}' "$ctr")
	podman logs "$ctr" >"$work/$ctr.log" 2>&1 || true
	[ "$ms" -lt 10000 ] || fail "$ctr took $ms ms to stop: SIGTERM did not end it"
	[ "$code" = 0 ] || { show_log "$work/$ctr.log" 10; fail "$ctr exited $code after SIGTERM, not 0"; }
	stop_ms=$ms
}

# ---------------------------------------------------------------------------

if [ "$(id -u)" -ne 0 ]; then
	say "run as root: podman runs rootful here, and debootstrap needs root" >&2
	exit 1
fi
for tool in podman runc debootstrap curl python3 "$pgbin/initdb"; do
	command -v "$tool" >/dev/null || { say "$tool is missing: run scripts/deps.sh image" >&2; exit 1; }
done
mkdir -p "$state/base" "$state/apt"
# One run at a time in a work tree: they share its store. The lock is a
# file naming its run, not a held descriptor, which the database and the
# containers would inherit and keep after a run that was killed.
if ! (set -C; echo $$ >"$lock") 2>/dev/null; then
	holder=$(cat "$lock" 2>/dev/null || true)
	if [ -n "$holder" ] && tr '\0' ' ' <"/proc/$holder/cmdline" 2>/dev/null | grep -q 'tests/image/run.sh'; then
		say "another make image-test (pid $holder) runs in $root" >&2
		exit 1
	fi
	echo $$ >"$lock"
fi
rm -rf "$work"
mkdir -p "$work"
trap 'on_error $LINENO' ERR
trap cleanup EXIT
trap 'say "interrupted at step $step_no ($step_name)" >&2; exit 130' INT
trap 'say "terminated at step $step_no ($step_name)" >&2; exit 143' TERM

step "podman: its configuration and store under build/image/"
configure_podman
ok "runc, $podman_driver storage, ulimits $podman_ulimits"
# What a run killed before its cleanup left here.
leftovers=$(($(podman ps -a --external -q | wc -l) + $(podman images -q | wc -l)))
remove_all || fail "the store holds containers or images that podman cannot remove"
[ "$leftovers" -eq 0 ] || say "    removed $leftovers containers and images an earlier run left"
if [ -f "$state/postgres-dir" ]; then
	old=$(cat "$state/postgres-dir")
	case $old in
	/tmp/ledgerd-image-test.*)
		if [ -f "$old/data/postmaster.pid" ]; then
			runuser -u postgres -- "$pgbin/pg_ctl" -D "$old/data" -m immediate -w -s stop >/dev/null 2>&1 || true
			say "    stopped the PostgreSQL an earlier run left in $old"
		fi
		rm -rf "$old"
		;;
	esac
	rm -f "$state/postgres-dir"
fi

step "the base image $base_image"
if [ -f "$base_tar" ] && [ -z "$(find "$base_tar" -mtime +"$base_max_age_days")" ]; then
	how="from the cached $(basename "$base_tar")"
else
	say "    debootstrap: Debian bookworm, minimal, from $mirror (once; cached in build/image/base/)"
	make_base
	how="made with debootstrap"
fi
podman import --change 'CMD ["bash"]' \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	"$base_tar" "$base_image" >"$work/import.log" 2>&1 ||
	{ show_log "$work/import.log"; fail "podman import $base_tar failed"; }
ok "$how"

step "PostgreSQL 15 on the host's loopback"
# On the host, not in a container: no registry here serves postgres:15, the
# host has Debian's PostgreSQL 15 already (the one every other suite runs
# on), and with host networking the containers reach it on 127.0.0.1
# without a bridge or firewall rules on this machine.
start_postgres
ok "127.0.0.1:$pg_port, password authentication"

step "podman build docker/Dockerfile (the ledgerd stage)"
# --format docker keeps the HEALTHCHECK (OCI images have none); the host's
# network serves the build's apt-get; downloaded packages are kept in
# build/image/apt for the next run, outside the image's layers.
if ! long "$work/build.log" timeout 1200 podman build --format docker --network host --pull=never \
	--build-arg "VERSION=$(cat "$root/VERSION")" \
	--ignorefile "$root/docker/Dockerfile.dockerignore" -f "$root/docker/Dockerfile" \
	--target ledgerd -v "$state/apt:/var/cache/apt/archives" -t "$image" "$root"; then
	show_log "$work/build.log" 40
	fail "podman build failed (the whole log: build/image/work/build.log)"
fi
healthcheck=$(podman image inspect --format '{{.Config.Healthcheck.Test}}' "$image")
case $healthcheck in
*ledgerd-healthcheck*) ;;
*) fail "the image has no HEALTHCHECK running ledgerd-healthcheck: $healthcheck" ;;
esac
ok "$(podman image inspect --format '{{.Size}}' "$image" | awk '{ printf "%d MB", $1 / 1000000 }')"

step "the version: ledgerd --version, in a container, and the image's label"
ledgerd_once "$work/version.out" --version ||
	{ show_log "$work/version.out.err"; fail "ledgerd --version failed"; }
want=$(cat "$root/VERSION")
label=$(podman image inspect --format '{{index .Config.Labels "org.opencontainers.image.version"}}' "$image")
case $(cat "$work/version.out") in
"ledgerd $want "*) ;;
*) fail "ledgerd --version said $(cat "$work/version.out"), VERSION says $want" ;;
esac
[ "$label" = "$want" ] || fail "the image's version label is '$label', VERSION says $want"
ok "$want"

step "ledgerd migrate, in a container"
ledgerd_once "$work/migrate.out" migrate ||
	{ show_log "$work/migrate.out.err"; fail "ledgerd migrate failed"; }
ok

step "ledgerd token create, in a container"
ledgerd_once "$work/agent.token" token create --tenant image-test --role agent ||
	{ show_log "$work/agent.token.err"; fail "ledgerd token create failed"; }
agent_token=$(cat "$work/agent.token")
ledgerd_once "$work/router.token" token create --tenant image-test --role router ||
	{ show_log "$work/router.token.err"; fail "ledgerd token create failed"; }
router_token=$(cat "$work/router.token")
if [ -z "$agent_token" ] || [ -z "$router_token" ]; then
	fail "token create printed no token"
fi
ok "an agent and a router token"

step "ledgerd serve, in a container, on a LEDGER_LISTEN port that is not 8080"
ledgerd_port=$(free_port)
# The image's health check stays; only its timer goes, which podman would
# hand to systemd, and there is none here: this script runs the check itself.
podman run -d --name "$ledgerd_ctr" --network host -e LEDGER_DATABASE_URL="$database_url" \
	-e LEDGER_LISTEN="127.0.0.1:$ledgerd_port" --health-interval disable "$image" >/dev/null 2>"$work/serve.err" ||
	{ show_log "$work/serve.err"; fail "podman run failed"; }
if ! wait_200 "http://127.0.0.1:$ledgerd_port/readyz" 30; then
	podman logs "$ledgerd_ctr" >"$work/serve.log" 2>&1 || true
	show_log "$work/serve.log"
	fail "ledgerd did not become ready on 127.0.0.1:$ledgerd_port within 30 s"
fi
ok "ready on 127.0.0.1:$ledgerd_port"

step "a claim, its completion, and a replay of the claim over HTTP"
call=/v1/requests/req-image-$run_id/tool-calls/call_01
http POST "$call/claim" '{"claim_id":"7f3c9a0b1d2e4f5a6b7c8d9e0f1a2b3c","tool":"send_email","args":{"to":"ana@example.com"}}'
expect_status 201 "claim"
expect_body '"status":"claimed"' "claim"
fencing=$(printf '%s' "$body" | sed -n 's/.*"fencing_token":\([0-9][0-9]*\).*/\1/p')
[ -n "$fencing" ] || fail "claim: no fencing_token in $body"
http POST "$call/complete" "{\"fencing_token\":$fencing,\"outcome\":\"succeeded\",\"result\":{\"message_id\":\"m-829\"}}"
expect_status 200 "complete"
expect_body '"status":"completed"' "complete"
http POST "$call/claim" '{"claim_id":"c2d4e6f8a0b1c3d5e7f9a1b3c5d7e9f0","tool":"send_email","args":{"to":"ana@example.com"}}'
expect_status 200 "replayed claim"
[ "$(header Idempotent-Replayed)" = true ] || fail "replayed claim: no Idempotent-Replayed: true header"
expect_body '"message_id":"m-829"' "replayed claim"
ok "201 claimed, 200 completed, 200 replayed with Idempotent-Replayed: true"

step "the image's health check, on LEDGER_LISTEN's port"
if ! podman healthcheck run "$ledgerd_ctr" >"$work/health.out" 2>&1; then
	show_log "$work/health.out"
	fail "podman healthcheck run: unhealthy while ledgerd serves on 127.0.0.1:$ledgerd_port"
fi
# And it looks where LEDGER_LISTEN says, not at a port it knows: pointed at
# a port where nothing listens, it must say unhealthy.
if podman exec -e LEDGER_LISTEN="127.0.0.1:$(free_port)" "$ledgerd_ctr" ledgerd-healthcheck >/dev/null 2>&1; then
	fail "ledgerd-healthcheck says healthy for a port where nothing listens"
fi
ok "healthy on $ledgerd_port; unhealthy on a port where nothing listens"

step "ledgerd runs as a non-root user"
pid=$(podman inspect --format '{{.State.Pid}}' "$ledgerd_ctr")
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
if [ -z "$uid" ] || [ "$uid" -eq 0 ]; then
	fail "ledgerd (pid $pid on the host) runs as uid ${uid:-unknown}"
fi
inside=$(podman exec "$ledgerd_ctr" id -u)
[ "$inside" = "$uid" ] || fail "uid $inside in the container, $uid on the host"
ok "uid $uid, in the container and on the host"

step "ledger-gateway from the same image, then SIGTERM"
# It must stop by itself too (tests/docker counts on it: no init in compose).
gateway_port=$(free_port)
# The image's health check is ledgerd's, not the gateway's: as in compose, not used.
podman run -d --name "$gateway_ctr" --network host --entrypoint ledger-gateway --no-healthcheck \
	-e GATEWAY_LISTEN="127.0.0.1:$gateway_port" -e LEDGER_URL="http://127.0.0.1:$ledgerd_port" \
	-e LEDGER_TOKEN="$router_token" -e GATEWAY_REPLICAS="replica-1=http://127.0.0.1:$(free_port)" \
	"$image" >/dev/null 2>"$work/gateway.err" || { show_log "$work/gateway.err"; fail "podman run gateway failed"; }
if ! wait_200 "http://127.0.0.1:$gateway_port/healthz" 15; then
	podman logs "$gateway_ctr" >"$work/gateway.log" 2>&1 || true
	show_log "$work/gateway.log"
	fail "the gateway did not answer /healthz on 127.0.0.1:$gateway_port within 15 s"
fi
stop_within_10s "$gateway_ctr"
ok "stopped in $stop_ms ms, exit status 0"

step "podman stop ledgerd (SIGTERM)"
stop_within_10s "$ledgerd_ctr"
grep -q '"SIGTERM: draining' "$work/$ledgerd_ctr.log" || fail "ledgerd did not log its SIGTERM drain"
ok "drained and stopped in $stop_ms ms, exit status 0"

step "make deb: Debian 12's packages of the commit, checked by lintian"
if ! long "$work/deb.log" make -C "$root" --no-print-directory deb; then
	show_log "$work/deb.log" 40
	fail "make deb failed (the whole log: build/image/work/deb.log)"
fi
arch=$(dpkg --print-architecture)
for p in $deb_packages; do
	[ -f "$root/build/deb/${p}_${want}_$arch.deb" ] || fail "make deb made no $p package of version $want"
done
ok "$(find "$root/build/deb" -maxdepth 1 -name '*.deb' | wc -l) packages, lintian: $(grep -c '^W: ' "$root/build/deb/lintian.txt" || true) warnings, no errors"

step "apt-get install ./*.deb in a fresh container of the base image"
# The base alone: the packages bring their dependencies through apt-get,
# from the same mirror the image's build uses (and its kept downloads).
podman run -d --name "$deb_ctr" --network host -v "$root/build/deb:/debs:ro" \
	-v "$state/apt:/var/cache/apt/archives" "$base_image" sleep infinity >/dev/null 2>"$work/deb-run.err" ||
	{ show_log "$work/deb-run.err"; fail "podman run $base_image failed"; }
if ! long "$work/deb-install.log" podman exec -e DEBIAN_FRONTEND=noninteractive "$deb_ctr" \
	sh -c 'cd /debs && apt-get update -q && apt-get install -y -q ./*.deb'; then
	show_log "$work/deb-install.log"
	fail "apt-get install of the packages failed"
fi
podman exec "$deb_ctr" sh -c 'ldconfig -p | grep -q "libledger_client.so.1 "' ||
	fail "the loader does not find libledger_client.so.1"
# Installed, never enabled: ledgerd.env names no database of the operator's yet.
if podman exec "$deb_ctr" sh -c 'ls /etc/systemd/system/*.wants/ledger* 2>/dev/null' | grep -q .; then
	fail "installing the packages enabled a unit"
fi
ok "the loader finds libledger_client.so.1; no unit enabled"

step "the installed ledgerd: --version, migrate and token create in a database of its own"
PGPASSWORD=$(cat "$pgdir/password") runuser -u postgres -- \
	"$pgbin/createdb" -h 127.0.0.1 -p "$pg_port" -U ledger ledger_deb || fail "createdb ledger_deb failed"
deb_url="postgresql://ledger:$(cat "$pgdir/password")@127.0.0.1:$pg_port/ledger_deb"
in_deb "$work/deb-version.out" ledgerd --version || { show_log "$work/deb-version.out.err"; fail "ledgerd --version failed"; }
case $(cat "$work/deb-version.out") in
"ledgerd $want "*) ;;
*) fail "the package's ledgerd --version said $(cat "$work/deb-version.out"), VERSION says $want" ;;
esac
in_deb "$work/deb-migrate.out" ledgerd migrate || { show_log "$work/deb-migrate.out.err"; fail "ledgerd migrate failed"; }
in_deb "$work/deb-agent.token" ledgerd token create --tenant deb-test --role agent ||
	{ show_log "$work/deb-agent.token.err"; fail "ledgerd token create failed"; }
agent_token=$(cat "$work/deb-agent.token")
[ -n "$agent_token" ] || fail "token create printed no token"
ok "$want, migrated, an agent token"

step "the installed ledgerd serves: a claim, its completion, and a replay"
ledgerd_port=$(free_port)
podman exec -d -e LEDGER_DATABASE_URL="$deb_url" -e LEDGER_LISTEN="127.0.0.1:$ledgerd_port" "$deb_ctr" \
	sh -c 'echo $$ >/run/ledgerd.pid; exec ledgerd serve >/run/ledgerd.log 2>&1' >/dev/null ||
	fail "podman exec ledgerd serve failed"
if ! wait_200 "http://127.0.0.1:$ledgerd_port/readyz" 30; then
	podman exec "$deb_ctr" cat /run/ledgerd.log >"$work/deb-serve.log" 2>&1 || true
	show_log "$work/deb-serve.log"
	fail "the installed ledgerd did not become ready on 127.0.0.1:$ledgerd_port within 30 s"
fi
call=/v1/requests/req-deb-$run_id/tool-calls/call_01
http POST "$call/claim" '{"claim_id":"0a1b2c3d4e5f60718293a4b5c6d7e8f9","tool":"send_email","args":{"to":"ana@example.com"}}'
expect_status 201 "claim"
fencing=$(printf '%s' "$body" | sed -n 's/.*"fencing_token":\([0-9][0-9]*\).*/\1/p')
[ -n "$fencing" ] || fail "claim: no fencing_token in $body"
http POST "$call/complete" "{\"fencing_token\":$fencing,\"outcome\":\"succeeded\",\"result\":{\"message_id\":\"m-830\"}}"
expect_status 200 "complete"
http POST "$call/claim" '{"claim_id":"9f8e7d6c5b4a39281706f5e4d3c2b1a0","tool":"send_email","args":{"to":"ana@example.com"}}'
expect_status 200 "replayed claim"
[ "$(header Idempotent-Replayed)" = true ] || fail "replayed claim: no Idempotent-Replayed: true header"
expect_body '"message_id":"m-830"' "replayed claim"
podman exec "$deb_ctr" sh -c 'pid=$(cat /run/ledgerd.pid); kill -TERM "$pid";
	i=0; while kill -0 "$pid" 2>/dev/null; do i=$((i + 1)); [ "$i" -lt 100 ] || exit 1; sleep 0.1; done' ||
	fail "the installed ledgerd did not stop within 10 s of SIGTERM"
ok "201 claimed, 200 completed, 200 replayed; stopped by SIGTERM"

step "apt-get remove --purge: the packages leave nothing behind"
# shellcheck disable=SC2086 # one word a package
if ! long "$work/deb-purge.log" podman exec -e DEBIAN_FRONTEND=noninteractive "$deb_ctr" \
	apt-get remove --purge -y -q $deb_packages; then
	show_log "$work/deb-purge.log"
	fail "apt-get remove --purge failed"
fi
remains=$(podman exec "$deb_ctr" sh -c 'ls -d /usr/bin/ledger* /etc/ledgerd /lib/systemd/system/ledger* \
	/usr/lib/*/libledger_client* /usr/include/ledger_client.h 2>/dev/null' || true)
[ -z "$remains" ] || fail "left after the purge: $remains"
podman rm -f -t 0 "$deb_ctr" >/dev/null 2>&1 || fail "podman rm $deb_ctr failed"
ok "programs, library, units and /etc/ledgerd gone"
