#!/usr/bin/env bash
# debian-base.sh — a real Debian 12 base image with no Docker Hub: debootstrap
# --variant=minbase bookworm from the mirror apt already uses, packaged as an
# OCI layout by umoci, cached between runs.  Prints the reference (oci:DIR:bookworm).
#   usage: examples/debian-base.sh [CACHE_DIR]    (default ~/.cache/kiln/bases)
set -euo pipefail
CACHE=${1:-${KILN_BASE_CACHE:-$HOME/.cache/kiln/bases}}
LAYOUT=$CACHE/debian-bookworm
TAG=bookworm
mkdir -p "$CACHE"

# The mirror apt uses here (deb822 or one-line sources), so no other host is named.
mirror() {
	local m
	m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1)
	[ -n "$m" ] || m=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -v security | head -1)
	echo "${m:-http://deb.debian.org/debian}"
}

# Several tests or users may ask at once: one builds, the others wait for it.
exec 9>"$CACHE/.debian-bookworm.lock"
flock 9
if [ ! -f "$LAYOUT/index.json" ] || ! umoci stat --image "$LAYOUT:$TAG" >/dev/null 2>&1; then
	for t in debootstrap umoci; do
		command -v "$t" >/dev/null || { echo "debian-base: $t is missing (make deps installs it)" >&2; exit 1; }
	done
	[ "$(id -u)" -eq 0 ] || { echo "debian-base: debootstrap needs root" >&2; exit 1; }
	work=$(mktemp -d "$CACHE/.debian-work.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	umoci init --layout "$work/layout"
	umoci new --image "$work/layout:$TAG"
	umoci unpack --image "$work/layout:$TAG" "$work/bundle" >/dev/null
	debootstrap --variant=minbase bookworm "$work/bundle/rootfs" "$(mirror)" >"$work/debootstrap.log" 2>&1 || {
		tail -20 "$work/debootstrap.log" >&2
		echo "debian-base: debootstrap failed (log above)" >&2
		exit 1
	}
	# What an image should not carry: downloaded packages, package lists, logs.
	rm -rf "$work/bundle/rootfs/var/cache/apt/archives/"*.deb \
		"$work/bundle/rootfs/var/lib/apt/lists/"* "$work/bundle/rootfs/var/log/"*.log
	umoci repack --image "$work/layout:$TAG" "$work/bundle" >/dev/null
	umoci config --image "$work/layout:$TAG" \
		--config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		--config.cmd /bin/bash --os linux --architecture amd64 >/dev/null
	umoci gc --layout "$work/layout"
	rm -rf "$LAYOUT"
	mv "$work/layout" "$LAYOUT"
fi
echo "oci:$LAYOUT:$TAG"
