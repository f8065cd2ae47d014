#!/usr/bin/env bash
# fetch-kernel.sh DEST — download Debian's cloud kernel package (never install
# it on the host) and unpack it into DEST for kiln's microVMs.  Idempotent: a
# DEST that already holds the candidate version is left alone.  Layout:
#   DEST/release              the kernel release, e.g. 6.1.0-57-cloud-amd64
#   DEST/root/boot/vmlinuz-R  the kernel;  DEST/root/lib/modules/R  its modules
set -euo pipefail
dest=${1:?usage: fetch-kernel.sh DEST}
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
	exit 0
fi

mkdir -p "$dest"
work=$(mktemp -d "$dest/.fetch.XXXXXX")
chmod 755 "$work" # apt-get download drops privileges to _apt
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -q "$pkg" >/dev/null)
deb=$(ls "$work"/*.deb)
dpkg-deb -x "$deb" "$work/root"
if [ ! -f "$work/root/boot/vmlinuz-$release" ] || [ ! -d "$work/root/lib/modules/$release" ]; then
	echo "fetch-kernel: $pkg does not contain boot/vmlinuz-$release and its modules" >&2
	exit 1
fi
# Debian generates modules.dep at install time; kiln reads it to pull each
# module's dependencies into the initramfs.
depmod -b "$work/root" "$release"
rm -rf "$dest/root.old"
[ -d "$dest/root" ] && mv "$dest/root" "$dest/root.old"
mv "$work/root" "$dest/root"
rm -rf "$dest/root.old"
echo "$release" >"$dest/release.tmp" && mv "$dest/release.tmp" "$dest/release"
echo "fetch-kernel: $release in $dest" >&2
