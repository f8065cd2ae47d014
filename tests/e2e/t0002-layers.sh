#!/usr/bin/env bash
# t0002-layers.sh — `make check-layers`: the tree's includes point down the
# stack (no exceptions), the check refuses an upward include, and kiln
# serve's folders link alone, without any VM code.
. tests/e2e/lib.sh

expect_exit 0 "the tree's includes follow the layer graph" tests/check-layers.sh .

STAGES="common oci dockerfile-parser rootfs guest vm snapshots regclient registry distrib builder service cli"
# A copy of the stage folders with one include pointing up the stack.
F=$T_TMP/tree
mkdir -p "$F"
for d in $STAGES; do cp -r "$d" "$F/"; done
printf '#include "builder/builder.h"\n' >>"$F/rootfs/layer.c"
expect_exit 1 "an upward include (rootfs -> builder) fails the check" tests/check-layers.sh "$F"
expect_grep "...naming the file, the line and what the folder may use" \
	'^rootfs/layer.c:[0-9]+: includes "builder/builder.h": rootfs/ may use only: common$' "$T_TMP/out"

# The server may not reach the template store (that is distrib/'s job).
rm -rf "$F"; mkdir -p "$F"
for d in $STAGES; do cp -r "$d" "$F/"; done
printf '#include "snapshots/snapshots.h"\n' >>"$F/registry/router.c"
expect_exit 1 "the server including snapshots/ fails the check" tests/check-layers.sh "$F"
expect_grep "...naming what registry/ may use" \
	'^registry/router.c:[0-9]+: includes "snapshots/snapshots.h": registry/ may use only: common oci regclient$' "$T_TMP/out"

# kiln serve's closure: the server's folders as object files, linked alone.
expect_exit 0 "the server's folders link alone (no VM, snapshot or builder code) and serve" \
	make -s build/serve-only check-layers
