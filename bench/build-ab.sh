#!/usr/bin/env bash
# bench/build-ab.sh BEFORE AFTER — the same builds by two kiln binaries,
# interleaved run by run (before, after, after with KILN_UNCONFINED=1) so a
# shared host's load falls on every arm alike; medians of N runs each.
# Cases are bench/build.sh's small ones: 300 small files COPYed, with one RUN
# (a restored builder VM) and with three, uncached and cached.
# Usage: bench/build-ab.sh /path/to/old/kiln bin/kiln   (env: N=7 BENCH_DIR)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bench/build-ab.sh BEFORE-KILN AFTER-KILN" >&2; exit 2; }
N=${N:-7}
W=${BENCH_DIR:-/var/tmp/kiln-bench-build-ab}
declare -A BIN=([before]=$1 [after]=$2 [unconf]=$2)
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null
rm -rf "$W" && mkdir -p "$W/small" "$W/small-run" "$W/small-3run"

B=$W/bb
umoci init --layout "$B" >/dev/null
umoci new --image "$B:base" >/dev/null
umoci unpack --image "$B:base" "$W/bbb" >/dev/null
mkdir -p "$W"/bbb/rootfs/{bin,tmp,proc,sys,dev,run}
cp /bin/busybox "$W/bbb/rootfs/bin/"
for a in sh ls wc cat; do ln -s busybox "$W/bbb/rootfs/bin/$a"; done
umoci repack --image "$B:base" "$W/bbb" >/dev/null
for i in $(seq 300); do head -c $((RANDOM % 8192)) /dev/urandom >"$W/small/f$i"; done
cp "$W"/small/f* "$W/small-run/" && cp "$W"/small/f* "$W/small-3run/"
printf 'FROM oci:%s:base\nCOPY . /app/\n' "$B" >"$W/small/Dockerfile"
printf 'FROM oci:%s:base\nCOPY . /app/\nRUN ls /app | wc -l > /count\n' "$B" >"$W/small-run/Dockerfile"
printf 'FROM oci:%s:base\nCOPY . /app/\nRUN ls /app | wc -l > /count\nRUN echo two > /two\nRUN cat /count /two > /both\n' \
	"$B" >"$W/small-3run/Dockerfile"

build() { # SIDE FLAG CASE → seconds
	local s e
	s=$(date +%s%N)
	if [ "$1" = unconf ]; then
		KILN_UNCONFINED=1 KILN_HOME=$W/home-$1 "${BIN[$1]}" build $2 -f "$W/$3/Dockerfile" "$W/$3" >/dev/null 2>"$W/err"
	else
		KILN_HOME=$W/home-$1 "${BIN[$1]}" build $2 -f "$W/$3/Dockerfile" "$W/$3" >/dev/null 2>"$W/err"
	fi || { cat "$W/err" >&2; exit 1; }
	e=$(date +%s%N)
	echo "scale=3; ($e - $s) / 1000000000" | bc
}
median() { sort -n | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'; }

for side in before after unconf; do # warm each home: builder VM snapshot, cache
	for c in small small-run small-3run; do build $side "" $c >/dev/null; done
done
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| case | before | after | after unconfined | after/before |\n|---|---|---|---|---|\n'
for spec in "small uncached:small:--no-cache" "small cached:small:" "small-run uncached:small-run:--no-cache" \
	"small-run cached:small-run:" "small-3run uncached:small-3run:--no-cache"; do
	IFS=: read -r name c flag <<<"$spec"
	: >"$W/t.before"; : >"$W/t.after"; : >"$W/t.unconf"
	for i in $(seq "$N"); do
		for side in before after unconf; do build $side "$flag" "$c" >>"$W/t.$side"; done
	done
	b=$(median <"$W/t.before"); a=$(median <"$W/t.after"); u=$(median <"$W/t.unconf")
	printf '| %s | %s s | %s s | %s s | %.2f |\n' "$name" "$b" "$a" "$u" "$(echo "$a / $b" | bc -l)"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
