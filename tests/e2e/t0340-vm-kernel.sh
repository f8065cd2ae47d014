#!/usr/bin/env bash
# t0340-vm-kernel.sh — choosing the guest kernel and the accelerator: a kernel
# directory built by vm/build-kernel.sh is bootable through KILN_KERNEL_DIR and
# is never overwritten by vm/fetch-kernel.sh; a /dev/kvm that comes from
# kvm_pvm (as on these hosts) is refused and the VM runs under TCG.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
img=$T_TMP/root.ext4

# A kernel directory in build-kernel.sh's layout (here a copy of the cloud
# kernel's ELF, to keep the test fast): no modules at all, only
# modules.builtin naming the drivers kiln asks for.  fetch-kernel.sh must
# leave it alone; kiln must boot it with an initramfs that loads nothing.
mk=$T_TMP/kmin
rel=$(cat "$KILN_KERNEL_DIR/release")
mkdir -p "$mk/root/boot" "$mk/root/lib/modules/x-kiln/"
echo x-kiln >"$mk/release"
echo 0123abcd >"$mk/inputs"
: >"$mk/root/lib/modules/x-kiln/modules.dep"
printf 'kernel/fs/overlayfs/overlay.ko\n' >"$mk/root/lib/modules/x-kiln/modules.builtin"
cp "$KILN_KERNEL_DIR/root/boot/vmlinuz-$rel" "$mk/root/boot/vmlinuz-x-kiln"
sum=$(cat "$mk"/release "$mk"/inputs | sha256sum)
expect_exit 0 "fetch-kernel.sh accepts a directory build-kernel.sh filled" vm/fetch-kernel.sh "$mk"
expect_eq "and leaves it as it was" "$(cat "$mk"/release "$mk"/inputs | sha256sum)" "$sum"
expect_eq "no cloud kernel written into it" "$(ls "$mk/root/boot")" "vmlinuz-x-kiln"
expect_exit 0 "kiln vm kernel shows the chosen directory" env KILN_KERNEL_DIR="$mk" $KILN vm kernel
expect_grep "with its release" 'x-kiln' "$T_TMP/out"
# The cloud kernel has virtio_mmio etc. as modules, so this directory (which
# claims only overlay is built in) must be refused by name, not half-booted.
expect_exit 1 "a kernel missing a driver kiln needs is refused" \
	$KILN vm boot --no-agent --kernel-dir "$mk" "$img"
expect_grep "naming the driver" 'x-kiln has no module virtio_mmio' "$T_TMP/err"
expect_eq "nothing left behind" "$(ls -A "$TMPDIR")" ""

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
	ok "# SKIP no kvm_pvm-only /dev/kvm on this host (the refusal is unit-tested in test_vm_kernel)"
fi
