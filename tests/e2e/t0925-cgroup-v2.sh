#!/usr/bin/env bash
# t0925-cgroup-v2.sh — kiln's cgroup v2 code on a real v2 hierarchy.  These
# hosts run cgroup v1 and kiln's own guest kernel has no cgroups, so this boots
# Debian's cloud kernel (vm/fetch-kernel.sh, cached in ~/.cache/kiln/kernel-cloud),
# mounts cgroup2 with cpu, memory, pids and io in the guest and runs
# build/tests/cgroup-probe there (tests/guest/cgroup_probe.c: vm/cgroup.c's slot
# and cgroup functions, as a jailed VM's start calls them, with processes in
# QEMU's place): kiln/vm-N under kiln's parent with the controllers enabled,
# the limits, a memory hog OOM-killed with its VM alone, a fork bomb stopped at
# pids.max, processes moved in, a busy cgroup never reused or removed, an
# empty one removed.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
PROBE=$PWD/build/tests/cgroup-probe
if [ "$(id -u)" != 0 ]; then
	skip "cgroup v2 tests" "they need root (the VM jail)"
	exit 0
fi
if [ ! -x "$PROBE" ] || f=$(stale_binary "$PROBE" vm common tests/guest); then
	not_ok "build/tests/cgroup-probe is built and newer than its sources (run make all)"
	exit 1
fi
vm_setup # the default kernel (for vm_setup's checks) and the busybox rootfs
cloud=${KILN_CGROUP_KERNEL_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/kiln/kernel-cloud}
mkdir -p "$cloud"
if (flock 9 && KILN_GUEST_KERNEL=cloud vm/fetch-kernel.sh "$cloud") 9>"$cloud.lock" >"$T_TMP/cloud.log" 2>&1; then
	ok "a kernel with cgroups: Debian's cloud kernel $(cat "$cloud/release")"
else
	not_ok "Debian's cloud kernel fetched into $cloud"
	sed 's/^/#   /' "$T_TMP/cloud.log"
	exit 1
fi
if grep -q '^CONFIG_MEMCG=y' "$cloud/root/boot/config-$(cat "$cloud/release")"; then
	ok "its config has the memory controller"
else not_ok "its config has the memory controller"; fi

cp "$PROBE" "$T_TMP/root/bin/cgroup-probe"
mke2fs -q -F -t ext4 -d "$T_TMP/root" "$T_TMP/cg.ext4" 32M >/dev/null
# 1 GiB of guest RAM: the hog (640 MiB) fits without a limit, so only
# memory.max (400 MiB) can stop it.
start=$(date +%s)
timeout 400 $KILN vm run --kernel-dir "$cloud" -m 1024 --cmd-timeout 300 "$T_TMP/cg.ext4" -- \
	sh -c 'mount -t cgroup2 none /sys/fs/cgroup && exec /bin/cgroup-probe' >"$T_TMP/probe.out" 2>"$T_TMP/probe.err"
rc=$?
# the probe's own checks, as they are
grep -E '^(not )?ok - ' "$T_TMP/probe.out" | sed 's/^\(not \)\{0,1\}ok - /&in the guest: /'
expect_eq "the probe ran to its end and passed (exit status)" "$rc" 0
if ! grep -q '^probe: done' "$T_TMP/probe.out"; then
	not_ok "the probe ran to its end"
	sed 's/^/#   stdout: /' "$T_TMP/probe.out" | tail -20
	sed 's/^/#   stderr: /' "$T_TMP/probe.err" | tail -20
else
	ok "the probe ran to its end ($(($(date +%s) - start)) s in the guest VM)"
fi
n=$(grep -cE '^ok - ' "$T_TMP/probe.out")
expect_eq "the probe made all its checks" "$n" 30
