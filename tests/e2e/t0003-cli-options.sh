#!/usr/bin/env bash
# t0003-cli-options.sh — the one option parser (cli/options.c) every command
# goes through: the value forms, bundles, prefixes, "--", the usage errors, and
# that --help, --list-options (the completion) and the parser read one table.
. tests/e2e/lib.sh

W=$T_TMP/w
mkdir -p "$W/ctx" && printf 'FROM scratch\nARG A=1\n' >"$W/Dockerfile"
plan() { "$KILN" dockerfile plan "$@"; }

# Value forms: --name VALUE, --name=VALUE, a unique prefix of the name.
for form in "--target 0" "--target=0" "--tar 0" "--tar=0"; do
	# shellcheck disable=SC2086
	expect_exit 0 "value form '$form'" plan $form "$W/Dockerfile"
done
expect_exit 0 "--build-arg K=V is taken" plan --build-arg A=2 "$W/Dockerfile"
expect_grep "...and lands in the plan" '"2"' "$T_TMP/out"

# Usage errors name what is wrong; exit 2.
expect_exit 2 "unknown long option" plan --bogus "$W/Dockerfile"
expect_grep "...is named" 'kiln dockerfile plan: unknown option --bogus' "$T_TMP/err"
expect_exit 2 "unknown short option" plan -Z "$W/Dockerfile"
expect_grep "...is named" 'unknown option -Z' "$T_TMP/err"
expect_exit 2 "missing value" plan "$W/Dockerfile" --target
expect_exit 2 "missing value at the end" plan --target
expect_grep "...says so" 'option --target needs a value' "$T_TMP/err"
expect_exit 2 "a flag given a value" "$KILN" run --time=yes t -- true
expect_grep "...says so" 'option --time takes no value' "$T_TMP/err"
expect_exit 2 "ambiguous prefix" "$KILN" build --r x
expect_grep "...says so" 'ambiguous option --r' "$T_TMP/err"
expect_grep "usage errors print the options" '^  --target STAGE' "$T_TMP/err"
expect_exit 2 "a number out of range" "$KILN" sandbox pool -n 65 t
expect_grep "...names the range" "--size wants a number from 0 to 64, not '65'" "$T_TMP/err"
expect_exit 2 "not a number" "$KILN" sandbox pool --size=x t
expect_exit 2 "short option with its value attached, out of range" "$KILN" sandbox pool -n99 t
expect_grep "...read as -n 99" "not '99'" "$T_TMP/err"

# Options end at the first operand (so "kiln run T -- CMD --flag" passes
# --flag to CMD), or at "--".
expect_exit 2 "options end at the first operand" plan "$W/Dockerfile" --target 0
expect_grep "...the rest are operands" "unexpected argument '--target'" "$T_TMP/err"
expect_exit 1 "\"--\" ends the options" plan -- --target
expect_grep "...and what follows is an operand (a file name)" "^kiln: .*--target" "$T_TMP/err"
# kiln rootfs takes its IMAGE between options (permuted).
expect_exit 2 "rootfs: IMAGE among the options, then a second one" "$KILN" rootfs oci:a -o x.ext4 oci:b
expect_grep "...the second is refused" "unexpected argument 'oci:b'" "$T_TMP/err"

# Help: exit 0, on stdout, and it lists exactly the options the parser takes.
# (In a scratch directory: a parser that took --help as a value would run the
# command there.)
cd "$W" || exit 1
bad=
while IFS=$'\t' read -r cmd _; do
	if subs=$("$KILN" "$cmd" --list-commands 2>/dev/null); then
		words=$(cut -f1 <<<"$subs" | sed "s/^/$cmd /")
	else
		words=$cmd
	fi
	while read -r -a w; do
		help=$("$KILN" "${w[@]}" --help | sed -n '/^Options:$/,$p' | grep -oE -- '^  (-[a-zA-Z], )?--[a-z][a-z0-9-]*' |
			grep -oE -- '--[a-z0-9-]+' | sort)
		list=$("$KILN" "${w[@]}" --list-options | sort)
		[ -n "$list" ] && [ "$help" = "$list" ] || bad="$bad ${w[*]}"
		# every listed option is one the parser knows; with a value attached
		# (a flag refuses it) and --help after it, nothing runs
		for o in $list; do
			[ "$o" = --help ] && continue
			"$KILN" "${w[@]}" "$o=x" --help >/dev/null 2>"$T_TMP/e" </dev/null
			grep -q "unknown option" "$T_TMP/e" && bad="$bad ${w[*]}:$o"
		done
	done <<<"$words"
done < <("$KILN" --list-commands)
expect_eq "--help and --list-options list the same options, all known to the parser" "${bad:-all agree}" "all agree"
expect_exit 0 "kiln help CMD prints the command's options too" "$KILN" help build
expect_grep "...from its table" '^  --no-cache' "$T_TMP/out"
