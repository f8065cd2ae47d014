#!/usr/bin/env bash
# bench/build.sh — kiln build versus buildah bud (vfs, chroot) in the same run:
# FROM a busybox oci: base + COPY of 300 small files, and + COPY of a 100 MiB
# file, each without and with a RUN (kiln: in its builder microVM, TCG here),
# and the small case with three RUNs (one builder VM serves all three);
# each uncached (--no-cache on both) and as a cached rebuild (kiln's step
# cache; buildah --layers); the big case also with kiln's zstd and
# uncompressed layers (buildah's vfs storage keeps layers uncompressed).
# Medians of RUNS runs.  Needs root, buildah, umoci.
# Usage: bench/build.sh   (env: RUNS=5 BENCH_DIR=/var/tmp/kiln-bench-build)
set -euo pipefail
KILN=${KILN:-$PWD/bin/kiln}
RUNS=${RUNS:-5}
W=${BENCH_DIR:-/var/tmp/kiln-bench-build}
rm -rf "$W" && mkdir -p "$W/small" "$W/big"
export KILN_HOME=$W/kiln-home
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null
BR=(buildah --storage-driver vfs --root "$W/broot" --runroot "$W/brun")
trap '"${BR[@]}" rm -a >/dev/null 2>&1 || true; "${BR[@]}" rmi -a -f >/dev/null 2>&1 || true' EXIT

# the base: busybox in an OCI layout (lowercase path: buildah needs it)
B=$W/bb
umoci init --layout "$B" >/dev/null
umoci new --image "$B:base" >/dev/null
umoci unpack --image "$B:base" "$W/bbb" >/dev/null
mkdir -p "$W/bbb/rootfs/bin" "$W/bbb/rootfs/tmp" "$W/bbb/rootfs/proc" "$W/bbb/rootfs/sys" "$W/bbb/rootfs/dev" "$W/bbb/rootfs/run"
cp /bin/busybox "$W/bbb/rootfs/bin/"
for a in sh ls wc cat; do ln -s busybox "$W/bbb/rootfs/bin/$a"; done
umoci repack --image "$B:base" "$W/bbb" >/dev/null
for i in $(seq 300); do head -c $((RANDOM % 8192)) /dev/urandom >"$W/small/f$i"; done
head -c 100M /dev/urandom >"$W/big/blob"
printf 'FROM oci:%s:base\nCOPY . /app/\n' "$B" >"$W/small/Dockerfile"
printf 'FROM oci:%s:base\nCOPY blob /data/blob\n' "$B" >"$W/big/Dockerfile"
mkdir -p "$W/small-run" "$W/big-run" "$W/small-3run"
cp "$W"/small/f* "$W/small-run/" && ln "$W/big/blob" "$W/big-run/blob" && cp "$W"/small/f* "$W/small-3run/"
printf 'FROM oci:%s:base\nCOPY . /app/\nRUN ls /app | wc -l > /count\n' "$B" >"$W/small-run/Dockerfile"
printf 'FROM oci:%s:base\nCOPY blob /data/blob\nRUN wc -c /data/blob > /size\n' "$B" >"$W/big-run/Dockerfile"
printf 'FROM oci:%s:base\nCOPY . /app/\nRUN ls /app | wc -l > /count\nRUN echo two > /two\nRUN cat /count /two > /both\n' \
	"$B" >"$W/small-3run/Dockerfile"

secs() { /usr/bin/time -f '%e' -o "$W/t" "$@" >/dev/null 2>"$W/err" || { cat "$W/err" >&2; exit 1; }; cat "$W/t"; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
run() { # NAME CMD... → median of RUNS
	local name=$1 i
	shift
	for i in $(seq "$RUNS"); do secs "$@"; done | median
}

printf '| case | kiln | buildah | kiln/buildah |\n|---|---|---|---|\n'
for c in ${CASES:-small big small-run big-run small-3run}; do
	k=$(run kiln "$KILN" build --no-cache -f "$W/$c/Dockerfile" "$W/$c")
	b=$(run buildah "${BR[@]}" bud --isolation chroot --no-cache -f "$W/$c/Dockerfile" "$W/$c")
	printf '| %s uncached | %.2f s | %.2f s | %.2f |\n' "$c" "$k" "$b" "$(echo "$k / $b" | bc -l)"
	if [ "$c" = big ]; then
		for comp in zstd none; do
			k2=$(run kiln "$KILN" build --no-cache --compression $comp -f "$W/$c/Dockerfile" "$W/$c")
			printf '| %s uncached, kiln --compression %s | %.2f s | %.2f s | %.2f |\n' "$c" "$comp" "$k2" "$b" \
				"$(echo "$k2 / $b" | bc -l)"
		done
	fi
	"$KILN" build -f "$W/$c/Dockerfile" "$W/$c" >/dev/null 2>&1
	"${BR[@]}" bud --isolation chroot --layers -f "$W/$c/Dockerfile" "$W/$c" >/dev/null 2>&1
	k=$(run kiln "$KILN" build -f "$W/$c/Dockerfile" "$W/$c")
	b=$(run buildah "${BR[@]}" bud --isolation chroot --layers -f "$W/$c/Dockerfile" "$W/$c")
	printf '| %s cached rebuild | %.2f s | %.2f s | %.2f |\n' "$c" "$k" "$b" "$(echo "$k / $b" | bc -l)"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# the time split of each uncached RUN step (KILN_LOG=info prints it)
for c in small-run big-run small-3run; do
	KILN_LOG=info "$KILN" build --no-cache -f "$W/$c/Dockerfile" "$W/$c" 2>&1 >/dev/null | grep -o 'run: .*' |
		sed "s/^/$c: /"
done
