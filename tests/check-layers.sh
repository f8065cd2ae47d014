#!/usr/bin/env bash
# check-layers.sh — dependencies point down the stack only: every
# `#include "FOLDER/..."` in a stage folder must name a folder that stage may
# use (the graph below, also in docs/ARCHITECTURE.md).  Usage: [ROOT] (default .).
set -u
ROOT=${1:-.}

# What each folder may include besides itself (common/ is included as "kiln.h").
declare -A ALLOWED=(
	[common]=""
	[oci]="common"
	[dockerfile-parser]="common"
	[rootfs]="common"
	[guest]="common"
	[vm]="common guest"
	[snapshots]="common vm guest"
	[regclient]="common oci"
	[registry]="common oci regclient"
	[sign]="common oci regclient"
	[distrib]="common oci regclient guest vm snapshots"
	[builder]="common oci regclient dockerfile-parser rootfs guest vm snapshots"
	[service]="common oci regclient dockerfile-parser rootfs guest vm snapshots registry sign distrib builder runtime"
	[remote]="common oci regclient dockerfile-parser rootfs guest vm snapshots builder"
	[runtime]="common guest vm snapshots"
	[cli]="common oci regclient registry sign distrib dockerfile-parser rootfs guest vm snapshots builder service remote runtime"
)

bad=0
for dir in "${!ALLOWED[@]}"; do
	[ -d "$ROOT/$dir" ] || continue
	while IFS= read -r -d '' f; do
		rel=${f#"$ROOT"/}
		while IFS=: read -r line inc; do
			dep=${inc%%/*}
			[ "$dep" = "$dir" ] && continue
			[ -n "${ALLOWED[$dep]+x}" ] || continue # a system or build/gen header
			case " ${ALLOWED[$dir]} " in *" $dep "*) continue ;; esac
			echo "$rel:$line: includes \"$inc\": $dir/ may use only: ${ALLOWED[$dir]:-nothing}"
			bad=1
		done < <(grep -n -o '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*"' "$f" |
			sed -E 's/^([0-9]+):.*"([^"]*)"/\1:\2/')
	done < <(find "$ROOT/$dir" \( -name '*.c' -o -name '*.h' \) -print0)
done
exit $bad
