#!/usr/bin/env bash
# run.sh — run test programs and scripts, count their TAP-style result lines
# ("ok - NAME", "not ok - NAME: why", and "ok - NAME # skip WHY" for a check
# that could not run here) and close with "N passed, N failed, N skipped".
# A program that exits non-zero without reporting a failure counts as one
# failure, so a crash can never pass silently; one that reports nothing at
# all fails too.  tests/README.md says how to write and run tests.
set -u
pass=0 fail=0 skip=0

# leftovers MARK: "PID CMDLINE" of each live process whose environment holds KILN_TEST_MARK=MARK
leftovers() {
	local env pid
	for env in /proc/[0-9]*/environ; do
		pid=${env#/proc/}
		pid=${pid%/environ}
		[ "$pid" = "$$" ] && continue
		if { tr '\0' '\n' <"$env"; } 2>/dev/null | grep -qxF "KILN_TEST_MARK=$1"; then
			echo "$pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)"
		fi
	done
}
failed_names=()
for t in "$@"; do
	name=$(basename "$t")
	echo "# === $name"
	log=$(mktemp)
	start=$(date +%s)
	# Every process the test starts inherits this mark (QEMU too: kiln passes its environment on),
	# so what is still running after the test ends is found by it, whatever its parent is now.
	mark="kiln-test-$$-$name"
	if [[ $t == *.sh ]]; then
		KILN_TEST_MARK=$mark bash "$t" >"$log" 2>&1
	else
		KILN_TEST_MARK=$mark "$t" >"$log" 2>&1
	fi
	rc=$?
	left=$(leftovers "$mark")
	# a process the test's trap just killed may still be on its way out
	[ -n "$left" ] && sleep 2 && left=$(leftovers "$mark")
	if [ -n "$left" ]; then
		printf '#   %s\n' "$left" >>"$log"
		echo "not ok - $name left processes running (killed now)" >>"$log"
		kill -9 $(echo "$left" | cut -d' ' -f1) 2>/dev/null
	fi
	cat "$log"
	# TAP's SKIP directive: "# skip" (any case) after the description
	s=$(grep -Eci '^ok .*# *skip( |$)' "$log")
	p=$(( $(grep -c '^ok ' "$log") - s ))
	f=$(grep -c '^not ok ' "$log")
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "not ok - $name exited with status $rc"
		f=1
	fi
	if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ]; then
		echo "not ok - $name reported no results"
		f=1
	fi
	[ "$f" -gt 0 ] && failed_names+=("$name")
	echo "# $name: $p passed, $f failed, $s skipped ($(( $(date +%s) - start ))s)"
	pass=$((pass + p))
	fail=$((fail + f))
	skip=$((skip + s))
	rm -f "$log"
done
[ ${#failed_names[@]} -gt 0 ] && echo "# failing: ${failed_names[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
