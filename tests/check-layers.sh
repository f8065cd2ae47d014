#!/usr/bin/env bash
# check-layers.sh — dependencies point down the stack only: every
# `#include "FOLDER/..."` in a stage folder must name a folder that stage may
# use (the graph below, also in docs/ARCHITECTURE.md).  Usage: [ROOT] (default .).
set -u
ROOT=${1:-.}

# What each folder may include besides itself (common/ is included as "kiln.h").
declare -A ALLOWED=(
	[common]=""
	[dockerfile-parser]="common"
	[rootfs]="common"
	[guest]="common"
	[vm]="common guest"
	[snapshots]="common vm guest"
	[registry]="common"
	[builder]="common dockerfile-parser rootfs guest vm snapshots"
	[service]="common dockerfile-parser rootfs guest vm snapshots registry builder"
	[cli]="common dockerfile-parser rootfs guest vm snapshots registry builder service"
)
# Files allowed one upward include until registry/ is split into the client,
# the server and template distribution (issue 13); each names why.
declare -A EXCEPTIONS=(
	[builder/base.c:registry]="FROM a registry uses the registry client, which lives in registry/"
	[builder/remote.c:registry]="pull/push of images use the registry client, which lives in registry/"
	[registry/tmpl.c:snapshots]="template distribution imports into the template store"
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
			[ -n "${EXCEPTIONS[$rel:$dep]+x}" ] && continue
			echo "$rel:$line: includes \"$inc\": $dir/ may use only: ${ALLOWED[$dir]:-nothing}"
			bad=1
		done < <(grep -n -o '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*"' "$f" |
			sed -E 's/^([0-9]+):.*"([^"]*)"/\1:\2/')
	done < <(find "$ROOT/$dir" \( -name '*.c' -o -name '*.h' \) -print0)
done
# An exception whose include is gone must be dropped, so the list only shrinks.
for key in "${!EXCEPTIONS[@]}"; do
	f=${key%:*} dep=${key##*:}
	if [ -f "$ROOT/$f" ] && ! grep -q "#include \"$dep/" "$ROOT/$f"; then
		echo "$f: the exception for \"$dep/\" is no longer needed: remove it from tests/check-layers.sh"
		bad=1
	fi
done
exit $bad
