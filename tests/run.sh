#!/usr/bin/env bash
# run.sh — run test programs and scripts, count their TAP-style result lines
# ("ok - NAME", "not ok - NAME: why", and "ok - NAME # skip WHY" for a check
# that could not run here) and close with "N passed, N failed, N skipped".
# A program that exits non-zero without reporting a failure counts as one
# failure, so a crash can never pass silently; one that reports nothing at
# all fails too.  Scripts that say "# run.sh: alongside" in their first lines
# (long tests that mostly wait on one TCG guest) run one after another in a
# second lane, started first, beside the others, which run one at a time
# (KILN_TEST_ALONGSIDE=0: all in one lane).  tests/README.md says how to write
# and run tests.
set -u
pass=0 fail=0 skip=0
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-run.XXXXXX")

# leftovers MARK [prefix]: "PID CMDLINE" of each live process whose environment holds
# KILN_TEST_MARK=MARK (with "prefix": a mark that begins with MARK, for all tests in one scan)
leftovers() {
	local env pid match=(-qxF "KILN_TEST_MARK=$1")
	[ "${2:-}" = prefix ] && match=(-qF "KILN_TEST_MARK=$1")
	for env in /proc/[0-9]*/environ; do
		pid=${env#/proc/}
		pid=${pid%/environ}
		[ "$pid" = "$$" ] && continue
		if { tr '\0' '\n' <"$env"; } 2>/dev/null | grep "${match[@]}"; then
			echo "$pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)"
		fi
	done
}

# run_one I TEST: run it into $work/I.log; then $work/I.done holds "RC SECONDS".
# Every process the test starts inherits its mark (QEMU too: kiln passes its environment on),
# so what is still running after the test ends is found by it, whatever its parent is now,
# and a test beside it is never blamed for it.  A test run in the background gets SIGINT and
# SIGQUIT back (bash ignores them in background jobs), so it behaves as in the foreground.
run_one() {
	local i=$1 t=$2 log=$work/$1.log start rc left mark
	mark="kiln-test-$$-$(basename "$t")"
	start=$(date +%s)
	if [[ $t == *.sh ]]; then
		KILN_TEST_MARK=$mark env --default-signal=INT,QUIT bash "$t" >"$log" 2>&1
	else
		KILN_TEST_MARK=$mark env --default-signal=INT,QUIT "$t" >"$log" 2>&1
	fi
	rc=$?
	left=$(leftovers "$mark")
	# a process the test's trap just killed may still be on its way out
	[ -n "$left" ] && sleep 2 && left=$(leftovers "$mark")
	if [ -n "$left" ]; then
		printf '#   %s\n' "$left" >>"$log"
		echo "not ok - $(basename "$t") left processes running (killed now)" >>"$log"
		kill -9 $(echo "$left" | cut -d' ' -f1) 2>/dev/null
	fi
	echo "$rc $(($(date +%s) - start))" >"$work/$i.done.tmp" && mv "$work/$i.done.tmp" "$work/$i.done"
}

# report I NAME [NOTE]: print test I's output and its counts, and add them up.
failed_names=()
report() {
	local i=$1 name=$2 log=$work/$1.log rc secs s p f
	read -r rc secs <"$work/$i.done"
	echo "# === $name${3:+ ($3)}"
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
	echo "# $name: $p passed, $f failed, $s skipped (${secs}s)"
	pass=$((pass + p))
	fail=$((fail + f))
	skip=$((skip + s))
	rm -f "$log" "$work/$i.done"
}

# The tests that run beside the others (only when there are others).
tests=("$@")
beside=() # (indexed: reported in order)
lane=()
if [ "${KILN_TEST_ALONGSIDE:-1}" != 0 ] && [ ${#tests[@]} -gt 1 ]; then
	for i in "${!tests[@]}"; do
		t=${tests[$i]}
		if [[ $t == *.sh ]] && head -n 30 "$t" 2>/dev/null | grep -qx '# run\.sh: alongside'; then
			beside[$i]=1
			lane+=("$i")
		fi
	done
fi
# ^C or a kill: stop every test still running (by its mark), then go.
on_signal() {
	local left
	left=$(leftovers "kiln-test-$$-" prefix)
	[ -n "$left" ] && kill -TERM $(echo "$left" | cut -d' ' -f1) 2>/dev/null
	wait
	rm -rf "$work"
	exit 130
}
trap on_signal INT TERM
# The marked tests run one after another in a second lane, started first.
if [ ${#lane[@]} -gt 0 ]; then
	echo "# beside the others, one after another: $(for i in "${lane[@]}"; do basename "${tests[$i]}"; done | tr '\n' ' ')"
	(for i in "${lane[@]}"; do run_one "$i" "${tests[$i]}"; done) &
	lane_pid=$!
fi
# report_done: report the second lane's tests that have finished
report_done() {
	local i
	for i in "${!beside[@]}"; do
		[ -e "$work/$i.done" ] || continue
		report "$i" "$(basename "${tests[$i]}")" "ran beside the others"
		unset "beside[$i]"
	done
}
for i in "${!tests[@]}"; do
	[ -n "${beside[$i]:-}" ] && continue
	# (in the background too, so that a signal's trap runs at once, not when the test ends)
	run_one "$i" "${tests[$i]}" &
	wait $!
	report "$i" "$(basename "${tests[$i]}")"
	report_done
done
[ -n "${lane_pid:-}" ] && wait "$lane_pid"
report_done
rm -rf "$work"
[ ${#failed_names[@]} -gt 0 ] && echo "# failing: ${failed_names[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
