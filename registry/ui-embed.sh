#!/bin/sh
# ui-embed.sh — the dashboard's files (registry/ui/) as C arrays for registry/ui.c:
# `kiln serve` then needs no install path to find them (docs/dashboard.md).
# Usage: ui-embed.sh FILE... > build/gen/ui_files.h (coreutils' od only).
set -eu
i=0
for f in "$@"; do
	printf 'static const unsigned char ui_f%d[] = {\n' "$i"
	od -An -v -tx1 "$f" | sed -e 's/ \([0-9a-f][0-9a-f]\)/0x\1,/g' -e 's/^/\t/'
	printf '};\n'
	i=$((i + 1))
done
printf 'static const struct ui_file ui_files[] = {\n'
i=0
for f in "$@"; do
	printf '\t{ "%s", ui_f%d, sizeof(ui_f%d) },\n' "$(basename "$f")" "$i" "$i"
	i=$((i + 1))
done
printf '};\n'
