#!/usr/bin/env bash
# tests/fuzz/run.sh: runs one libFuzzer target of build/fuzz/ for make fuzz
# and make fuzz-smoke, or shrinks its checked-in corpus. The checked-in
# corpus is only read while fuzzing: new inputs go to build/fuzz/corpus/T/
# (a smoke run's to build/fuzz/smoke/T/, emptied first), a crash, leak or
# sanitizer report to build/fuzz/crashes/T/, the whole log to build/fuzz/logs/T.log.
#
# Usage: run.sh [--smoke] TARGET SECONDS
#        run.sh --merge TARGET   (the smallest subset of the corpus and of
#                                 build/fuzz/corpus/T with the same coverage
#                                 becomes tests/fuzz/corpus/T; seeds named
#                                 regress-* always stay)
set -euo pipefail

mode=fuzz
case "${1:-}" in
--smoke | --merge)
	mode=${1#--}
	shift
	;;
esac
t=${1:?usage: run.sh [--smoke] TARGET SECONDS | --merge TARGET}
bin=build/fuzz/fuzz_$t
seeds=tests/fuzz/corpus/$t
dict=tests/fuzz/$t.dict
crashes=build/fuzz/crashes/$t
log=build/fuzz/logs/$t.log
[ -x "$bin" ] || { echo "run.sh: $bin is not built (make $bin)" >&2; exit 2; }
mkdir -p "$seeds" "$crashes" build/fuzz/logs

# Any report stops the run with a non-zero status; leaks are reports too.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:allocator_may_return_null=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
args=(-artifact_prefix="$crashes/" -print_final_stats=1 -timeout=25 -rss_limit_mb=2048)
[ -f "$dict" ] && args+=(-dict="$dict")

if [ "$mode" = merge ]; then
	out=$(mktemp -d build/fuzz/merge.XXXXXX)
	mkdir -p "build/fuzz/corpus/$t"
	"$bin" "${args[@]}" -merge=1 "$out" "$seeds" "build/fuzz/corpus/$t" >"$log" 2>&1 ||
		{ tail -n 30 "$log"; rm -rf "$out"; exit 1; }
	# libFuzzer names what it keeps by its SHA-1: a seed kept keeps its own name.
	for f in "$seeds"/*; do
		[ -f "$f" ] || continue
		h=$(sha1sum <"$f" | cut -c1-40)
		if [ -e "$out/$h" ]; then
			rm "$out/$h"
		elif [[ $(basename "$f") != regress-* ]]; then
			rm "$f"
		fi
	done
	cp "$out"/* "$seeds"/ 2>/dev/null || true
	rm -rf "$out"
	echo "fuzz $t: corpus merged: $(find "$seeds" -type f | wc -l) inputs in $seeds"
	exit 0
fi

secs=${2:?usage: run.sh [--smoke] TARGET SECONDS}
if [ "$mode" = smoke ]; then
	work=build/fuzz/smoke/$t
	rm -rf "$work"
else
	work=build/fuzz/corpus/$t
fi
mkdir -p "$work"

start=$(date +%s)
stamp=$(mktemp build/fuzz/start.XXXXXX)
trap 'rm -f "$stamp"' EXIT
if ! "$bin" "${args[@]}" -max_total_time="$secs" "$work" "$seeds" >"$log" 2>&1; then
	echo "fuzz $t: FAILED (the input is in $crashes/, the log in $log):" >&2
	grep -E -A 30 '^(==[0-9]+==ERROR|fuzz_[a-z_]+: |.*runtime error:|.*deadly signal|.*-timeout)' \
		"$log" | head -n 60 >&2 || tail -n 40 "$log" >&2
	exit 1
fi
# libFuzzer's last status line (#runs DONE cov: ... ft: ... corp: ...) and its final stats.
last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -n 1; }
field() { sed -n "s/.* $1: *\\([^ ]*\\).*/\\1/p" <<<"$last"; }
echo "fuzz $t: $(stat number_of_executed_units) runs in $(($(date +%s) - start)) s" \
	"($(stat average_exec_per_sec) exec/s), cov: $(field cov) ft: $(field ft)," \
	"corpus: $(find "$work" -type f | wc -l) new + $(find "$seeds" -type f | wc -l) seeds," \
	"crashes: $(find "$crashes" -type f -newer "$stamp" | wc -l)"
