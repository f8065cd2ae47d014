#!/usr/bin/env bash
# check-serve-link.sh — kiln serve links no VM code: build/serve-only (the
# server's folders linked alone, Makefile) has no symbol of the VM, snapshot,
# guest, builder, rootfs, Dockerfile or distribution stages, and it serves.
set -u
BIN=${1:-build/serve-only}
bad=0
syms=$(nm "$BIN" | grep -E ' [TtDdBbRr] (vm|snap|guest|build|rootfs|df|dist)_' || true)
if [ -n "$syms" ]; then
	echo "$BIN: kiln serve's closure holds other stages' code:"
	echo "$syms" | head -20
	bad=1
fi
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
if ! out=$("$BIN" "$d" 2>&1) || ! grep -q '^serve-only: listening on port [1-9]' <<<"$out"; then
	echo "$BIN: the server alone did not start: $out"
	bad=1
fi
exit $bad
