#!/usr/bin/env bash
# bench/vm.sh [N] — boot a busybox rootfs N times in a row (default 100) with
# `kiln vm boot --no-agent` (or with the agent when bin/kiln-agent exists and
# BOOT_AGENT=1) and report hangs/failures, median and p95 boot time (QEMU start
# to init's ready marker, as kiln measures it), the guest's uptime at the
# marker, and wall time per `kiln vm boot`.
# Peers:
#  - BOOT_KERNELS="DIR1 DIR2 ..." boots each kernel directory in turn (A B A B
#    ..., so both see the same load) and reports each; default: the cloud
#    kernel in $KILN_KERNEL_DIR (build/kernel).  BOOT_MEM=1 also reports, per
#    kernel, guest memory after boot (/proc/meminfo through the agent), QEMU's
#    Pss/RSS, the guest RAM it touched, and the initramfs kiln wrote.
#  - BOOT_PEER=1 adds N/10 boots of the first kernel without kiln's clock fix
#    (tsc_early_khz overridden to 0), counting how many hang in 30 s.
# BOOT_RUN=K also times K runs of the whole `kiln vm run ROOTFS -- true`.
set -u
cd "$(dirname "$0")/.."
n=${1:-100}
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
read -r -a kernels <<<"${BOOT_KERNELS:-$KILN_KERNEL_DIR}"
for k in "${kernels[@]}"; do
	[ -f "$k/release" ] || vm/fetch-kernel.sh "$k" || exit 1
done
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-boot.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/root/bin" "$work/root/etc" "$work/vms"
cp /bin/busybox "$work/root/bin/busybox"
for a in $(/bin/busybox --list); do
	[ "$a" = busybox ] || ln -s busybox "$work/root/bin/$a"
done
mke2fs -q -F -t ext4 -d "$work/root" "$work/root.ext4" 32M >/dev/null
agent=--no-agent
[ "${BOOT_AGENT:-0}" = 1 ] && agent=
load() { cut -d' ' -f1 /proc/loadavg; }
medp95() { # FILE -> "median p95"
	sort -n "$1" | awk '{v[NR]=$1} END {if (NR==0) {print "- -"; exit}
		m=v[int((NR+1)/2)]; p=v[int(NR*0.95+0.999)]; print m, p}'
}
range() { sort -n "$1" | awk 'NR==1{a=$1} END{print a "–" $1}'; }
echo "load before: $(load)"
: >"$work/load"
for j in "${!kernels[@]}"; do
	: >"$work/fails.$j"
	for f in boot wall agent up run; do : >"$work/$f.$j"; done
done
for i in $(seq 1 "$n"); do
	for j in "${!kernels[@]}"; do
		t0=$(date +%s%N)
		if bin/kiln vm boot $agent --console --timeout 120 --kernel-dir "${kernels[$j]}" "$work/root.ext4" \
			2>"$work/err"; then
			t1=$(date +%s%N)
			sed -n 's/^kiln: VM booted in \([0-9]*\) ms.*/\1/p' "$work/err" >>"$work/boot.$j"
			sed -n 's/^kiln: agent ready \([0-9]*\) ms.*/\1/p' "$work/err" >>"$work/agent.$j"
			sed -n 's/.*kiln-init: ready \([0-9.]*\).*/\1/p' "$work/err" |
				awk '{printf "%d\n", $1 * 1000}' >>"$work/up.$j"
			echo $(((t1 - t0) / 1000000)) >>"$work/wall.$j"
		else
			echo x >>"$work/fails.$j"
			echo "boot $i of ${kernels[$j]} failed: $(grep -m1 kiln: "$work/err")" >&2
		fi
		load >>"$work/load"
	done
done
if [ "${BOOT_RUN:-0}" -gt 0 ]; then
	# The whole `kiln vm run ROOTFS -- true`: boot, agent, exec, QMP quit, cleanup.
	for i in $(seq 1 "$BOOT_RUN"); do
		for j in "${!kernels[@]}"; do
			t0=$(date +%s%N)
			bin/kiln vm run --timeout 120 --kernel-dir "${kernels[$j]}" "$work/root.ext4" -- true 2>/dev/null &&
				echo $((($(date +%s%N) - t0) / 1000000)) >>"$work/run.$j"
			load >>"$work/load"
		done
	done
fi
for j in "${!kernels[@]}"; do
	k=${kernels[$j]}
	echo "== kernel $(cat "$k/release") ($k)"
	read -r bmed bp95 < <(medp95 "$work/boot.$j")
	read -r umed up95 < <(medp95 "$work/up.$j")
	read -r wmed wp95 < <(medp95 "$work/wall.$j")
	echo "boots: $n, failed or hung: $(wc -l <"$work/fails.$j")"
	echo "boot to init's ready marker: median ${bmed} ms, p95 ${bp95} ms"
	echo "guest uptime at the marker:  median ${umed} ms, p95 ${up95} ms"
	[ -s "$work/agent.$j" ] && read -r amed ap95 < <(medp95 "$work/agent.$j") &&
		echo "boot to the agent's HELLO:   median ${amed} ms, p95 ${ap95} ms"
	echo "kiln vm boot wall time:      median ${wmed} ms, p95 ${wp95} ms"
	if [ -s "$work/run.$j" ]; then
		read -r rmed rp95 < <(medp95 "$work/run.$j")
		echo "kiln vm run ROOTFS -- true:  median ${rmed} ms, p95 ${rp95} ms ($(wc -l <"$work/run.$j") of $BOOT_RUN ok)"
	fi
	if [ "${BOOT_MEM:-0}" = 1 ]; then
		# One VM kept up by a sleeping command: read the guest's meminfo it
		# printed, then QEMU's memory and the VM's files on the host.
		TMPDIR=$work/vms bin/kiln vm run --timeout 120 --kernel-dir "$k" "$work/root.ext4" -- \
			sh -c 'cat /proc/meminfo; sleep 30' >"$work/meminfo" 2>/dev/null &
		kpid=$!
		for _ in $(seq 1 600); do
			grep -q '^MemAvailable' "$work/meminfo" 2>/dev/null && break
			sleep 0.2
		done
		sleep 1
		qpid=$(pgrep -P "$kpid" qemu-system)
		if [ -n "$qpid" ] && [ -r "/proc/$qpid/smaps_rollup" ]; then
			awk '/^(Rss|Pss):/ {printf "%s %d MiB  ", $1, $2 / 1024}' "/proc/$qpid/smaps_rollup"
			mem=$(tr '\0' '\n' <"/proc/$qpid/cmdline" | sed -n 's/.*mem-path=\([^,]*\).*/\1/p')
			[ -n "$mem" ] && printf 'guest RAM touched %d MiB  ' $(($(du -k "$mem" | cut -f1) / 1024))
			printf 'initramfs %d KiB\n' $(($(stat -c %s "$work"/vms/kiln-vm.*/initramfs.cpio 2>/dev/null || echo 0) / 1024))
		fi
		awk '/^(MemTotal|MemFree|MemAvailable|Buffers|Cached|Shmem|Slab):/ {v[$1]=$2}
			END {printf "guest: MemTotal %d MiB, used (Total-Free-Buffers-Cached) %d MiB, MemAvailable %d MiB, Slab %d MiB\n",
				v["MemTotal:"]/1024, (v["MemTotal:"]-v["MemFree:"]-v["Buffers:"]-v["Cached:"])/1024,
				v["MemAvailable:"]/1024, v["Slab:"]/1024}' "$work/meminfo"
		kill "$kpid" 2>/dev/null
		wait "$kpid" 2>/dev/null
	fi
done
echo "load during the run: $(range "$work/load")"
if [ "${BOOT_PEER:-0}" = 1 ]; then
	peer=$((n / 10 > 0 ? n / 10 : 1))
	hung=0
	k=${kernels[0]}
	for i in $(seq 1 "$peer"); do
		# The same kernel with the init kiln writes, but no tsc_early_khz.
		bin/kiln vm boot --no-agent --timeout 30 --kernel-dir "$k" --append "tsc_early_khz=0 tsc=unstable" \
			"$work/root.ext4" 2>/dev/null || hung=$((hung + 1))
	done
	echo "peer (no TSC rate given, kernel $(cat "$k/release")): $hung of $peer boots hung"
fi
