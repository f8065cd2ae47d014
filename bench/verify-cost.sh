#!/usr/bin/env bash
# bench/verify-cost.sh — what verification costs a lazy `kiln run` (issue
# #31's goal: within 10 ms of an unverified one).  One template, pushed to a
# `kiln serve` on loopback signed (team/app:v1) and unsigned (team/plain:v1);
# each round, in alternating order, a fresh KILN_HOME runs each lazily:
#   unverified  kiln run REG/team/plain:v1 -- true   (no policy)
#   verified    kiln run REG/team/app:v1 -- true     ($KILN_POLICY naming the key:
#               signatures fetched and checked before the pull, a trust record written)
# then, in the same homes, the second run of each (the template local now;
# verified = answered by its trust record).  Medians of ROUNDS (default 9), ms.
# Usage: [ROUNDS=9] bench/verify-cost.sh
set -u
cd "$(dirname "$0")/.."
KILN=$PWD/bin/kiln
ROUNDS=${ROUNDS:-9}
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null || exit 1
export SOURCE_DATE_EPOCH=1700000000
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-verify.XXXXXX")
export KILN_HOME=$work/builder
srv=
homes=
cleanup() {
	for h in $homes; do
		KILN_HOME=$h "$KILN" sandbox gc >/dev/null 2>&1
		KILN_HOME=$h "$KILN" chunkfs stop >/dev/null 2>&1
	done
	[ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
[ -n "${BENCH_KEEP:-}" ] && trap - EXIT
echo "commit $(git rev-parse --short HEAD); load at start: $(cut -d' ' -f1-3 /proc/loadavg)"

B=$work/bb
umoci init --layout "$B" >/dev/null && umoci new --image "$B:base" >/dev/null &&
	umoci unpack --image "$B:base" "$work/bbb" >/dev/null || { echo "umoci failed"; exit 1; }
R=$work/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
umoci repack --image "$B:base" "$work/bbb" >/dev/null
mkdir -p "$work/ctx" && echo app >"$work/ctx/app.txt"
printf 'FROM oci:%s:base\nCOPY app.txt /app/app.txt\n' "$B" >"$work/ctx/Dockerfile"
"$KILN" build -t app:v1 --start-cmd true --memory 128 "$work/ctx" >/dev/null 2>&1 || { echo "template build failed"; exit 1; }

"$KILN" serve --addr 127.0.0.1:0 --data "$work/reg" 2>"$work/serve.log" &
srv=$!
for _ in $(seq 100); do grep -q listening "$work/serve.log" && break; sleep 0.05; done
REG=$(grep -o '127.0.0.1:[0-9]*' "$work/serve.log" | head -1)
(cd "$work" && "$KILN" key generate team >/dev/null) || exit 1
"$KILN" push --sign "$work/team.key" app:v1 "$REG/team/app:v1" >/dev/null 2>&1 || { echo "push --sign failed"; exit 1; }
"$KILN" push app:v1 "$REG/team/plain:v1" >/dev/null 2>&1 || { echo "push failed"; exit 1; }
echo "{\"scopes\": {\"$REG/team\": {\"keys\": [\"$work/team.pub\"]}}}" >"$work/policy.json"

# one timed run: prints ms; KIND plain|app, HOME
run1() {
	local t0 t1 pol=
	[ "$1" = app ] && pol=$work/policy.json
	t0=$(date +%s%N)
	KILN_HOME=$2 KILN_POLICY=$pol "$KILN" run "$REG/team/$1:v1" -- true >/dev/null 2>"$work/run.err" ||
		{ echo "kiln run $1 failed: $(tail -1 "$work/run.err")" >&2; exit 1; }
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 100000)) | sed 's/\(.\)$/.\1/'
	# what kiln itself says verification took (signatures fetched and checked, record written)
	sed -n 's/.*(verified, \([0-9.]*\) ms).*/\1/p' "$work/run.err" >>"$work/self"
}
: >"$work/u1"; : >"$work/v1"; : >"$work/u2"; : >"$work/v2"; : >"$work/self"
for i in $(seq "$ROUNDS"); do
	hu=$work/hu$i hv=$work/hv$i
	homes="$homes $hu $hv"
	if [ $((i % 2)) -eq 1 ]; then
		run1 plain "$hu" >>"$work/u1" && run1 app "$hv" >>"$work/v1"
		run1 plain "$hu" >>"$work/u2" && run1 app "$hv" >>"$work/v2"
	else
		run1 app "$hv" >>"$work/v1" && run1 plain "$hu" >>"$work/u1"
		run1 app "$hv" >>"$work/v2" && run1 plain "$hu" >>"$work/u2"
	fi
	for h in $hu $hv; do
		KILN_HOME=$h "$KILN" sandbox gc >/dev/null 2>&1
		KILN_HOME=$h "$KILN" chunkfs stop >/dev/null 2>&1
	done
done
med() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '%-34s %10s %10s %10s %10s\n' "lazy kiln run, median of $ROUNDS (ms)" unverified verified difference paired
for p in 1 2; do
	u=$(med "$work/u$p") v=$(med "$work/v$p")
	# the median of each round's own difference: the load moves both runs of a round alike
	paste "$work/v$p" "$work/u$p" | awk '{ printf "%.1f\n", $1 - $2 }' >"$work/d$p"
	printf '%-34s %10s %10s %10s %10s\n' "$([ $p = 1 ] && echo "first (pull + verify)" || echo "second (local, trust record)")" \
		"$u" "$v" "$(awk -v a="$v" -v b="$u" 'BEGIN { printf "%+.1f", a - b }')" "$(med "$work/d$p")"
done
echo "verification itself, as kiln reports it (median ms): $(med "$work/self")"
echo "all runs (ms): unverified first $(tr '\n' ' ' <"$work/u1"); verified first $(tr '\n' ' ' <"$work/v1")"
echo "  second: unverified $(tr '\n' ' ' <"$work/u2"); verified $(tr '\n' ' ' <"$work/v2")"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
