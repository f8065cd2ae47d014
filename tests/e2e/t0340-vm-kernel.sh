#!/usr/bin/env bash
# t0340-vm-kernel.sh — the guest kernel and the accelerator: what the default
# kernel gives the guest, a kernel directory lacking a driver refused by name,
# and a /dev/kvm that comes from kvm_pvm (as on these hosts) refused so that
# the VM runs under TCG.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
img=$T_TMP/root.ext4

# What the guest gets from the kernel kiln boots by default (the minimal one
# from vm/build-kernel.sh, or the cloud kernel with KILN_GUEST_KERNEL=cloud):
# the release in the kernel directory, 2 vCPUs, the file systems init and
# builds use, ptys, SysV IPC, and the host's wall clock.
rel=$(cat "$KILN_KERNEL_DIR/release")
expect_exit 0 "kiln vm kernel names the release" $KILN vm kernel
expect_grep "the release of KILN_KERNEL_DIR" "$rel" "$T_TMP/out"
expect_exit 0 "a command in the default kernel" $KILN vm run --cpus 2 --timeout 180 "$img" -- sh -c '
	uname -r
	grep -c ^processor /proc/cpuinfo
	for f in ext4 overlay tmpfs devtmpfs devpts proc sysfs; do grep -qw $f /proc/filesystems || echo "no $f"; done
	[ -c /dev/ptmx ] && [ -d /dev/pts ] && echo ptys
	[ -e /proc/sysvipc/shm ] && echo sysvipc
	date -u +%s'
host_now=$(date -u +%s)
expect_eq "uname -r is the kernel directory's release" "$(sed -n 1p "$T_TMP/out")" "$rel"
expect_eq "2 vCPUs" "$(sed -n 2p "$T_TMP/out")" "2"
expect_eq "ext4, overlay, tmpfs, devtmpfs, devpts, proc, sysfs; ptys; SysV IPC" \
	"$(sed -n '3,4p' "$T_TMP/out" | tr '\n' ' ')" "ptys sysvipc "
guest_now=$(sed -n 5p "$T_TMP/out")
expect_eq "the guest's clock is the host's (within 30 s)" \
	"$([ -n "$guest_now" ] && [ $((host_now - guest_now)) -lt 30 ] && [ $((guest_now - host_now)) -lt 30 ] && echo yes)" yes

# A kernel directory in build-kernel.sh's layout whose modules.builtin lacks a
# driver kiln needs must be refused by name, not half-booted.
mk=$T_TMP/kmin
mkdir -p "$mk/root/boot" "$mk/root/lib/modules/x-kiln/"
echo x-kiln >"$mk/release"
: >"$mk/root/lib/modules/x-kiln/modules.dep"
printf 'kernel/fs/overlayfs/overlay.ko\n' >"$mk/root/lib/modules/x-kiln/modules.builtin"
echo "not a kernel" >"$mk/root/boot/vmlinuz-x-kiln"
expect_exit 1 "a kernel missing a driver kiln needs is refused" \
	$KILN vm boot --no-agent --kernel-dir "$mk" "$img"
expect_grep "naming the driver" 'x-kiln has no module virtio_mmio' "$T_TMP/err"
expect_eq "nothing left behind" "$(ls -A "$TMPDIR")" ""

expect_exit 2 "fetch-kernel.sh refuses an unknown KILN_GUEST_KERNEL" \
	env KILN_GUEST_KERNEL=custom vm/fetch-kernel.sh "$T_TMP/k"
expect_grep "naming the choices" 'expected minimal or cloud' "$T_TMP/err"
expect_exit 1 "build-kernel.sh without Debian's kernel source" \
	env KILN_KERNEL_SOURCE="$T_TMP/none.tar.xz" vm/build-kernel.sh "$T_TMP/kbuild"
expect_grep "says which package to install" 'linux-source-6.1' "$T_TMP/err"

# KVM: these hosts have a /dev/kvm from kvm_pvm, which answers the KVM API but
# cannot run an ordinary guest.  kiln must pick TCG there, and say why.
if [ -e /dev/kvm ] && [ -d /sys/module/kvm_pvm ] && [ ! -d /sys/module/kvm_intel ] &&
	[ ! -d /sys/module/kvm_amd ]; then
	expect_exit 0 "boot on a kvm_pvm host" env -u KILN_ACCEL KILN_LOG=debug \
		$KILN vm boot --no-agent --timeout 180 "$img"
	expect_grep "runs under TCG" '^kiln: VM booted in [0-9]+ ms \(tcg' "$T_TMP/err"
	expect_grep "and says why KVM was not used" 'KVM not used: no kvm_intel or kvm_amd module' "$T_TMP/err"
else
	skip "TCG chosen on a kvm_pvm host" "no kvm_pvm-only /dev/kvm on this host (the refusal is unit-tested in test_vm_kernel)"
fi
