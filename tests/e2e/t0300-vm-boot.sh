#!/usr/bin/env bash
# t0300-vm-boot.sh — boot a busybox rootfs in a QEMU microVM: init's ready
# marker, the base image never written, clear errors (bad image, no kernel,
# timeout), and every file and process gone after exit, SIGTERM and SIGINT.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
img=$T_TMP/root.ext4
sum=$(sha256sum <"$img")

expect_exit 0 "boot to init's ready marker" $KILN vm boot --no-agent --console --timeout 180 "$img"
expect_grep "kiln reports the boot" '^kiln: VM booted in [0-9]+ ms \((tcg|kvm)' "$T_TMP/err"
expect_grep "console log has the marker" '^kiln-init: ready [0-9.]+' "$T_TMP/err"
d=$(vm_dir_of "$T_TMP/err")
expect_eq "VM directory removed" "$(ls -A "$TMPDIR")" ""
expect_eq "guest RAM file removed" "$(ls /dev/shm | grep -c "^$(basename "$d").mem$")" "0"

expect_exit 0 "boot with the disk writable, 2 vCPUs, 192 MiB" \
	$KILN vm boot --no-agent --writable --cpus 2 --memory 192 --timeout 180 "$img"
expect_eq "base image never written" "$(sha256sum <"$img")" "$sum"

# A disk that is not ext4: init fails, kiln says so at once with the console.
head -c 4M /dev/zero >"$T_TMP/zero.img"
expect_exit 1 "a bad rootfs fails the boot" $KILN vm boot --no-agent --timeout 180 "$T_TMP/zero.img"
expect_grep "init's failure is reported" 'guest init failed.*|FAILED: mount /dev/vda' "$T_TMP/err"
expect_eq "nothing left after a failed boot" "$(ls -A "$TMPDIR")" ""

# kiln.scratch=1 without a scratch disk: init waits 10 s for it, so the guest
# cannot be ready within 1 s however fast the kernel boots.
expect_exit 1 "a boot that cannot finish in time" $KILN vm boot --no-agent --timeout 1 --append kiln.scratch=1 "$img"
expect_grep "the timeout is reported" 'did not reach init.s ready marker within 1000 ms' "$T_TMP/err"
expect_eq "nothing left after a timeout" "$(ls -A "$TMPDIR")" ""

expect_exit 1 "a missing rootfs" $KILN vm boot --no-agent "$T_TMP/nope.ext4"
expect_grep "names the rootfs" 'rootfs .*nope.ext4: No such file' "$T_TMP/err"
expect_exit 1 "a directory is no rootfs" $KILN vm boot --no-agent "$T_TMP"
expect_grep "says it is not an image" 'is not a disk image file' "$T_TMP/err"
expect_exit 1 "no kernel" env KILN_KERNEL_DIR="$T_TMP/nokernel" $KILN vm boot --no-agent "$img"
expect_grep "says how to fetch the kernel" 'no guest kernel in .*nokernel.*fetch' "$T_TMP/err"
expect_exit 2 "usage: no rootfs" $KILN vm boot
expect_exit 2 "usage: bad --cpus" $KILN vm boot --cpus zero "$img"
expect_exit 0 "kiln vm kernel" $KILN vm kernel
expect_grep "kernel release shown" '^release  [0-9]+\.[0-9]+' "$T_TMP/out"
expect_grep "the extracted ELF is what boots (PVH)" '^boots    .*/vmlinux-' "$T_TMP/out"

# Interrupted kiln: QEMU and all files go, for SIGTERM once booted and for
# SIGINT in the middle of the boot.
for sig in TERM INT; do
	$KILN vm boot --no-agent --wait --timeout 180 "$img" >"$T_TMP/sig.out" 2>&1 &
	kpid=$!
	for _ in $(seq 1 1800); do
		if [ "$sig" = INT ]; then ls "$TMPDIR"/kiln-vm.*/console.log >/dev/null 2>&1 && break
		else grep -q 'VM booted' "$T_TMP/sig.out" && break; fi
		sleep 0.1
	done
	qpid=$(ps -o pid= --ppid "$kpid" | tr -d ' ')
	d=$(ls -d "$TMPDIR"/kiln-vm.* 2>/dev/null | head -1)
	kill -s "$sig" "$kpid"
	wait "$kpid"
	rc=$?
	expect_eq "SIG$sig ends kiln by that signal" "$rc" "$((128 + $(kill -l "$sig")))"
	if [ -n "$qpid" ] && ! kill -0 "$qpid" 2>/dev/null; then ok "SIG$sig: QEMU is gone"
	else not_ok "SIG$sig: QEMU is gone (pid '$qpid')"; fi
	expect_eq "SIG$sig: VM directory removed" "$(ls -A "$TMPDIR")" ""
	expect_eq "SIG$sig: guest RAM file removed" "$(ls /dev/shm | grep -c "^$(basename "$d").mem$")" "0"
done
expect_eq "base image still never written" "$(sha256sum <"$img")" "$sum"
