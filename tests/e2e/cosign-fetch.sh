#!/usr/bin/env bash
# cosign-fetch.sh [DIR] — fetch Debian trixie's cosign (the reference
# implementation of the signature format kiln writes) into a private cache,
# for t0881 and t0882.  apt itself downloads it, through a private sources list, lists
# and cache, so the InRelease's signature (debian-archive-keyring's trixie
# key) and the .deb's hash in the signed Packages index are checked; the
# package is only unpacked (dpkg-deb -x) into DIR, never installed.
# Prints the cosign binary's path; exit 1 (with the reason on stderr) if not.
set -u
VER=2.5.0
DIR=${1:-${KILN_COSIGN_CACHE:-$HOME/.cache/kiln/cosign-$VER}}
BIN=$DIR/root/usr/bin/cosign
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg  # holds trixie's archive keys
[ -r "$KEYRING" ] || { echo "cosign-fetch: no $KEYRING to check trixie's InRelease" >&2; exit 1; }
APT=$DIR/apt
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/etc/preferences.d" || exit 1
printf 'deb [signed-by=%s] http://deb.debian.org/debian trixie main\n' "$KEYRING" >"$APT/sources.list"
opts=(-o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/nonexistent
	-o "Dir::Etc::Preferences=$APT/etc/preferences" -o "Dir::Etc::PreferencesParts=$APT/etc/preferences.d"
	-o "Dir::State::Lists=$APT/lists" -o "Dir::State::Status=$APT/status" -o "Dir::Cache=$APT/cache"
	-o "APT::Sandbox::User=$(id -un)" -o Acquire::Languages=none -o APT::Architecture=amd64 -o Debug::NoLocking=1 -q)
: >"$APT/status"
if ! apt-get "${opts[@]}" update >"$APT/update.log" 2>&1 || grep -qE '^(W|E):' "$APT/update.log"; then
	echo "cosign-fetch: apt-get update of trixie failed: $(grep -E '^(W|E):' "$APT/update.log" | head -2)" >&2
	exit 1
fi
cand=$(apt-cache "${opts[@]}" policy cosign 2>/dev/null | sed -n 's/^ *Candidate: //p')
case $cand in
$VER-*) ;;
*) echo "cosign-fetch: trixie's cosign is '$cand', not $VER" >&2; exit 1 ;;
esac
# apt-get download checks the .deb against the hash in the signed index
if ! (cd "$DIR" && apt-get "${opts[@]}" download "cosign=$cand") >"$APT/download.log" 2>&1; then
	echo "cosign-fetch: apt-get download cosign failed: $(tail -1 "$APT/download.log")" >&2
	exit 1
fi
deb=$(ls "$DIR"/cosign_*.deb | head -1)
rm -rf "$DIR/root.tmp" && dpkg-deb -x "$deb" "$DIR/root.tmp" && mv "$DIR/root.tmp" "$DIR/root" || exit 1
rm -f "$deb"
"$BIN" version >/dev/null 2>&1 || { echo "cosign-fetch: $BIN does not run here" >&2; exit 1; }
echo "$BIN"
