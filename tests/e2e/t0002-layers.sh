#!/usr/bin/env bash
# t0002-layers.sh — `make check-layers`: the tree's includes point down the
# stack, and the check refuses an upward include and a stale exception.
. tests/e2e/lib.sh

expect_exit 0 "the tree's includes follow the layer graph" tests/check-layers.sh .

# A copy of the stage folders with one include pointing up the stack.
F=$T_TMP/tree
mkdir -p "$F"
for d in common dockerfile-parser rootfs guest vm snapshots registry builder cli; do cp -r "$d" "$F/"; done
printf '#include "builder/builder.h"\n' >>"$F/rootfs/layer.c"
expect_exit 1 "an upward include (rootfs -> builder) fails the check" tests/check-layers.sh "$F"
expect_grep "...naming the file, the line and what the folder may use" \
	'^rootfs/layer.c:[0-9]+: includes "builder/builder.h": rootfs/ may use only: common$' "$T_TMP/out"

# An exception whose include went away must be removed from the list.
rm -rf "$F"; mkdir -p "$F"
for d in common dockerfile-parser rootfs guest vm snapshots registry builder cli; do cp -r "$d" "$F/"; done
sed -i '/#include "registry\//d' "$F/builder/remote.c"
expect_exit 1 "a stale exception fails the check" tests/check-layers.sh "$F"
expect_grep "...saying it is no longer needed" '^builder/remote.c: the exception for "registry/" is no longer needed' "$T_TMP/out"
