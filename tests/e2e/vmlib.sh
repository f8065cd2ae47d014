# vmlib.sh — shared setup for the microVM tests (t03xx): the guest kernel in a
# cache shared across runs, a private TMPDIR (so leftovers are visible), and a
# small busybox ext4 rootfs made with mke2fs -d (with the mount points an
# image normally has).
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
export TMPDIR=$T_TMP/tmp
mkdir -p "$TMPDIR"

# vm_setup: fetch the kernel (idempotent) and build $T_TMP/root.ext4.
vm_setup() {
	if ! vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >"$T_TMP/fetch.log" 2>&1; then
		not_ok "guest kernel fetched into $KILN_KERNEL_DIR"
		sed 's/^/#   /' "$T_TMP/fetch.log"
		exit 0
	fi
	mkdir -p "$T_TMP/root/bin" "$T_TMP/root/etc" "$T_TMP/root/tmp" "$T_TMP/root/proc" "$T_TMP/root/sys" \
		"$T_TMP/root/dev" "$T_TMP/root/run"
	cp /bin/busybox "$T_TMP/root/bin/busybox"
	for a in $(/bin/busybox --list); do
		[ "$a" = busybox ] || ln -sf busybox "$T_TMP/root/bin/$a"
	done
	echo "kiln test rootfs" >"$T_TMP/root/etc/motd"
	mke2fs -q -F -t ext4 -d "$T_TMP/root" "$T_TMP/root.ext4" 32M >/dev/null
}

# vm_dir_of FILE: the VM directory named in kiln's "console DIR/console.log" line.
vm_dir_of() {
	sed -n 's/.*console \(.*\)\/console\.log$/\1/p' "$1" | head -1
}
