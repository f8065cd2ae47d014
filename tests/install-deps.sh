#!/usr/bin/env bash
# install-deps.sh — install the Debian packages listed in deps files
# (deps/*.txt: one per stage, so stages add packages without conflicts).
# Skips apt entirely when everything is already installed, so repeated
# `make test` runs stay fast; otherwise updates the lists once and installs.
set -euo pipefail
mapfile -t pkgs < <(cat "$@" | sed 's/#.*//' | grep -v '^[[:space:]]*$' | sort -u)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "kiln: missing packages: ${missing[*]} (run 'make deps' as root)" >&2
	exit 1
fi
echo "kiln: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
