#!/usr/bin/env bash
# build-kernel.sh DEST — build kiln's minimal guest kernel from Debian's
# linux-source package: `make tinyconfig` + vm/kernel.config, everything built
# in, no modules.  DEST gets the layout vm/fetch-kernel.sh writes, so
# KILN_KERNEL_DIR=DEST boots it:
#   DEST/release                6.1.N-kiln-<hash of config and source version>
#   DEST/root/boot/vmlinux-R    the ELF QEMU enters through PVH
#   DEST/root/boot/vmlinuz-R    the bzImage (used only if vmlinux is missing)
#   DEST/root/lib/modules/R/    an empty modules.dep and modules.builtin, so
#                               kiln finds every driver it asks for built in
# Idempotent: a DEST built from the same inputs is left alone.  A finished
# kernel is also kept in $KILN_KERNEL_CACHE (default ~/.cache/kiln/kernel;
# empty: no cache), so other checkouts on the machine copy it instead of
# building; concurrent builds wait for each other there (flock).  Needs the
# packages linux-source-6.1 bc bison flex libelf-dev libssl-dev lz4 (and gcc,
# make).  JOBS=N (default 2) parallel jobs; the build runs under nice.  The
# source is unpacked in $TMPDIR (1.3 GB) and removed afterwards.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: build-kernel.sh DEST}
frag=$here/kernel.config
jobs=${JOBS:-2}
tarball=${KILN_KERNEL_SOURCE:-$(ls /usr/src/linux-source-*.tar.* 2>/dev/null | sort -V | tail -1)}
if [ -z "$tarball" ] || [ ! -f "$tarball" ]; then
	echo "build-kernel: no /usr/src/linux-source-*.tar.* (apt-get install linux-source-6.1)" >&2
	exit 1
fi
# The release names its inputs (config, source package), so a changed config
# is a different kernel: snapshots record the kernel they were taken with.
pkg=$(dpkg -S "$tarball" 2>/dev/null | cut -d: -f1)
srcver=$(dpkg-query -W -f '${Version}' "$pkg" 2>/dev/null || stat -c %s "$tarball")
inputs=$( (cat "$frag"; basename "$tarball"; echo "$srcver") | sha256sum | cut -c1-8)
if [ -f "$dest/inputs" ] && [ "$(cat "$dest/inputs")" = "$inputs" ] && [ -f "$dest/release" ] &&
	[ -f "$dest/root/boot/vmlinux-$(cat "$dest/release")" ]; then
	exit 0
fi

mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

# install DIR: make DIR/root (with DIR/release) DEST's kernel, atomically
# enough that a reader sees either the old or the new release file.
root=
install() {
	local rel
	rel=$(cat "$1/release")
	root=$(mktemp -d "$dest/.new.XXXXXX")
	chmod 755 "$root"
	cp -a "$1/root/." "$root/"
	rm -rf "$dest/root.old"
	[ -d "$dest/root" ] && mv "$dest/root" "$dest/root.old"
	mv "$root" "$dest/root"
	root=
	rm -rf "$dest/root.old"
	echo "$rel" >"$dest/release.tmp" && mv "$dest/release.tmp" "$dest/release"
	echo "$inputs" >"$dest/inputs"
}
cache=${KILN_KERNEL_CACHE-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/kiln/kernel}
if [ -n "$cache" ] && mkdir -p "$cache" 2>/dev/null; then
	exec 9>"$cache/.lock"
	flock 9
	if [ -f "$cache/$inputs/release" ]; then
		install "$cache/$inputs"
		exit 0
	fi
else
	cache=
fi

# The tree (1.3 GB unpacked) goes to $TMPDIR: inside build/ kiln's Makefile
# would read the kernel's dependency files as its own.
# KILN_KERNEL_BUILD_DIR keeps the tree for incremental rebuilds while
# working on vm/kernel.config.
echo "build-kernel: building the guest kernel from $tarball ($srcver) into $dest;" \
	"about 530 CPU-seconds" >&2
t0=$(date +%s)
if [ -n "${KILN_KERNEL_BUILD_DIR:-}" ]; then
	src=$KILN_KERNEL_BUILD_DIR
	mkdir -p "$src"
	[ -f "$src/Makefile" ] || tar -xf "$tarball" -C "$src" --strip-components=1
	trap 'rm -rf ${root:+"$root"}' EXIT
else
	src=$(mktemp -d "${TMPDIR:-/tmp}/kiln-kernel.XXXXXX")
	trap 'rm -rf "$src" ${root:+"$root"}' EXIT
	tar -xf "$tarball" -C "$src" --strip-components=1
fi
t1=$(date +%s)

# Reproducible: no host, user, date or build count in the image.
export KBUILD_BUILD_TIMESTAMP='1970-01-01 00:00:00 UTC' KBUILD_BUILD_USER=kiln KBUILD_BUILD_HOST=kiln \
	KBUILD_BUILD_VERSION=1 LOCALVERSION=-$inputs
kmake() { nice -n 10 make -C "$src" -s "$@"; }
kmake tinyconfig >/dev/null
(cd "$src" && scripts/kconfig/merge_config.sh -m -O . .config "$frag" >/dev/null)
kmake olddefconfig >/dev/null
# Kconfig silently drops a symbol whose dependencies are not met: insist.
missing=
while IFS= read -r line; do
	case $line in
	CONFIG_*=*) grep -qxF -- "$line" "$src/.config" || missing="$missing $line" ;;
	"# CONFIG_"*" is not set")
		sym=${line#\# }
		sym=${sym%% *}
		! grep -q "^$sym=" "$src/.config" || missing="$missing $sym=n" ;;
	esac
done <"$frag"
if [ -n "$missing" ]; then
	echo "build-kernel: vm/kernel.config not honoured by Kconfig:$missing" >&2
	exit 1
fi
kmake -j"$jobs" bzImage
t2=$(date +%s)

release=$(kmake kernelrelease)
out=$src/kiln-out
rm -rf "$out"
mkdir -p "$out/root/boot" "$out/root/lib/modules/$release"
cp "$src/vmlinux" "$out/root/boot/vmlinux-$release"
cp "$src/arch/x86/boot/bzImage" "$out/root/boot/vmlinuz-$release"
cp "$src/.config" "$out/root/boot/config-$release"
: >"$out/root/lib/modules/$release/modules.dep"
cp "$src/modules.builtin" "$out/root/lib/modules/$release/modules.builtin"
echo "$release" >"$out/release"
install "$out"
if [ -n "$cache" ]; then
	rm -rf "$cache/$inputs.tmp"
	cp -a "$out" "$cache/$inputs.tmp" && mv "$cache/$inputs.tmp" "$cache/$inputs"
fi
echo "build-kernel: $release in $dest (unpack $((t1 - t0)) s, configure+build $((t2 - t1)) s," \
	"-j$jobs, load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
