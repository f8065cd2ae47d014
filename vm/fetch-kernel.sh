#!/usr/bin/env bash
# fetch-kernel.sh DEST — put the guest kernel kiln boots into DEST.
# KILN_GUEST_KERNEL picks which (docs/vm.md has the measurements):
#   minimal (default)  built from Debian's linux-source by vm/build-kernel.sh
#   cloud              Debian's linux-image-cloud-amd64, downloaded (never
#                      installed on the host) and unpacked, as below
# Idempotent: a DEST that already holds the current kernel is left alone.
# Layout of the cloud kernel (build-kernel.sh writes the same, without modules):
#   DEST/release              the kernel release, e.g. 6.1.0-57-cloud-amd64
#   DEST/root/boot/vmlinuz-R  the kernel;  DEST/root/lib/modules/R  its modules
#   DEST/root/boot/vmlinux-R  the same kernel decompressed (ELF): QEMU enters it
#                             through PVH, so a TCG guest does not decompress itself
set -euo pipefail

# extract_vmlinux BZIMAGE CONFIG OUT: find the compressed payload by its magic
# (the codec named in the kernel's config) and decompress it to an ELF.
extract_vmlinux() {
	local img=$1 config=$2 out=$3 magic tool off
	case $(sed -n 's/^CONFIG_KERNEL_\(GZIP\|XZ\|ZSTD\|LZ4\|LZMA\|BZIP2\|LZO\)=y$/\1/p' "$config") in
	LZ4) magic='\x02\x21\x4c\x18' tool='lz4 -dc' ;;
	GZIP) magic='\x1f\x8b\x08' tool='gzip -dc' ;;
	XZ) magic='\xfd7zXZ\x00' tool='xz -dc' ;;
	ZSTD) magic='\x28\xb5\x2f\xfd' tool='zstd -dc' ;;
	*) return 1 ;;
	esac
	for off in $(LC_ALL=C grep -abo "$(printf "$magic")" "$img" | head -5 | cut -d: -f1); do
		tail -c +$((off + 1)) "$img" | $tool >"$out.tmp" 2>/dev/null || true
		if [ "$(head -c 4 "$out.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
			mv "$out.tmp" "$out"
			return 0
		fi
	done
	rm -f "$out.tmp"
	return 1
}
dest=${1:?usage: fetch-kernel.sh DEST}
case ${KILN_GUEST_KERNEL:-minimal} in
minimal) exec "$(dirname "$0")/build-kernel.sh" "$dest" ;;
cloud) ;;
*)
	echo "fetch-kernel: KILN_GUEST_KERNEL=$KILN_GUEST_KERNEL: expected minimal or cloud" >&2
	exit 2
	;;
esac
meta=${KILN_KERNEL_PACKAGE:-linux-image-cloud-amd64}

# The metapackage names the versioned image package it depends on.
pkg=$(apt-cache depends "$meta" 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -1)
if [ -z "$pkg" ]; then
	echo "fetch-kernel: cannot resolve $meta (run 'apt-get update'?)" >&2
	exit 1
fi
release=${pkg#linux-image-}
if [ -f "$dest/release" ] && [ "$(cat "$dest/release")" = "$release" ] &&
	[ -f "$dest/root/boot/vmlinuz-$release" ]; then
	boot=$dest/root/boot
	[ -f "$boot/vmlinux-$release" ] ||
		extract_vmlinux "$boot/vmlinuz-$release" "$boot/config-$release" "$boot/vmlinux-$release" || true
	exit 0
fi

mkdir -p "$dest"
work=$(mktemp -d "$dest/.fetch.XXXXXX")
chmod 755 "$work" # apt-get download drops privileges to _apt
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >/dev/null)
deb=$(ls "$work"/*.deb)
dpkg-deb -x "$deb" "$work/root"
if [ ! -f "$work/root/boot/vmlinuz-$release" ] || [ ! -d "$work/root/lib/modules/$release" ]; then
	echo "fetch-kernel: $pkg does not contain boot/vmlinuz-$release and its modules" >&2
	exit 1
fi
# Debian generates modules.dep at install time; kiln reads it to pull each
# module's dependencies into the initramfs.
depmod -b "$work/root" "$release"
boot=$work/root/boot
extract_vmlinux "$boot/vmlinuz-$release" "$boot/config-$release" "$boot/vmlinux-$release" ||
	echo "fetch-kernel: could not extract vmlinux; guests will boot the bzImage" >&2
rm -rf "$dest/root.old"
[ -d "$dest/root" ] && mv "$dest/root" "$dest/root.old"
mv "$work/root" "$dest/root"
rm -rf "$dest/root.old"
echo "$release" >"$dest/release.tmp" && mv "$dest/release.tmp" "$dest/release"
rm -f "$dest/inputs" # the minimal kernel's marker, if DEST held it before
echo "fetch-kernel: $release in $dest" >&2
