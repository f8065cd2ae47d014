#!/usr/bin/env bash
# bench/vm.sh [N] — boot a busybox rootfs N times in a row (default 100) with
# `kiln vm boot --no-agent` (or with the agent when bin/kiln-agent exists and
# BOOT_AGENT=1) and report hangs/failures, median and p95 boot time (QEMU start
# to init's ready marker, as kiln measures it) and wall time per `kiln vm boot`.
# Peer: the same boots without kiln's clock fix (BOOT_PEER=1 adds N/10 boots
# with tsc_early_khz overridden to 0, counting how many hang in 30 s).
# BOOT_RUN=K also times K runs of the whole `kiln vm run ROOTFS -- true`.
set -u
cd "$(dirname "$0")/.."
n=${1:-100}
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-boot.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/root/bin" "$work/root/etc"
cp /bin/busybox "$work/root/bin/busybox"
for a in $(/bin/busybox --list); do
	[ "$a" = busybox ] || ln -s busybox "$work/root/bin/$a"
done
mke2fs -q -F -t ext4 -d "$work/root" "$work/root.ext4" 32M >/dev/null
agent=--no-agent
[ "${BOOT_AGENT:-0}" = 1 ] && agent=
fails=0
: >"$work/boot.ms"
: >"$work/wall.ms"
: >"$work/agent.ms"
for i in $(seq 1 "$n"); do
	t0=$(date +%s%N)
	if bin/kiln vm boot $agent --timeout 120 "$work/root.ext4" 2>"$work/err"; then
		t1=$(date +%s%N)
		sed -n 's/^kiln: VM booted in \([0-9]*\) ms.*/\1/p' "$work/err" >>"$work/boot.ms"
		sed -n 's/^kiln: agent ready \([0-9]*\) ms.*/\1/p' "$work/err" >>"$work/agent.ms"
		echo $(((t1 - t0) / 1000000)) >>"$work/wall.ms"
	else
		fails=$((fails + 1))
		echo "boot $i failed: $(grep -m1 kiln: "$work/err")" >&2
	fi
done
stat() { # FILE -> "median p95"
	sort -n "$1" | awk '{v[NR]=$1} END {if (NR==0) {print "- -"; exit}
		m=v[int((NR+1)/2)]; p=v[int(NR*0.95+0.999)]; print m, p}'
}
read -r bmed bp95 < <(stat "$work/boot.ms")
read -r wmed wp95 < <(stat "$work/wall.ms")
echo "boots: $n, failed or hung: $fails"
echo "boot to init's ready marker: median ${bmed} ms, p95 ${bp95} ms"
[ -s "$work/agent.ms" ] && read -r amed ap95 < <(stat "$work/agent.ms") &&
	echo "boot to the agent's HELLO:   median ${amed} ms, p95 ${ap95} ms"
echo "kiln vm boot wall time:      median ${wmed} ms, p95 ${wp95} ms"
if [ "${BOOT_RUN:-0}" -gt 0 ]; then
	# The whole `kiln vm run ROOTFS -- true`: boot, agent, exec, QMP quit, cleanup.
	: >"$work/run.ms"
	for i in $(seq 1 "$BOOT_RUN"); do
		t0=$(date +%s%N)
		bin/kiln vm run --timeout 120 "$work/root.ext4" -- true 2>/dev/null && echo $((($(date +%s%N) - t0) / 1000000)) >>"$work/run.ms"
	done
	read -r rmed rp95 < <(stat "$work/run.ms")
	echo "kiln vm run ROOTFS -- true:  median ${rmed} ms, p95 ${rp95} ms ($(wc -l <"$work/run.ms") of $BOOT_RUN ok)"
fi
if [ "${BOOT_PEER:-0}" = 1 ]; then
	peer=$((n / 10 > 0 ? n / 10 : 1))
	hung=0
	k=$(cat "$KILN_KERNEL_DIR/release")
	for i in $(seq 1 "$peer"); do
		# The same kernel with the init kiln writes, but no tsc_early_khz.
		bin/kiln vm boot --no-agent --timeout 30 --append "tsc_early_khz=0 tsc=unstable" "$work/root.ext4" \
			2>/dev/null || hung=$((hung + 1))
	done
	echo "peer (no TSC rate given, kernel $k): $hung of $peer boots hung"
fi
