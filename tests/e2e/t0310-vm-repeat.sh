#!/usr/bin/env bash
# t0310-vm-repeat.sh — boot the same rootfs 10 times in a row: every boot must
# reach init's ready marker (a hang shows up as a timeout).  Under TCG half of
# the boots once hung on TSC calibration (docs/vm.md); this keeps it fixed.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
n=${KILN_VM_BOOTS:-10}
fails=0
times=()
for i in $(seq 1 "$n"); do
	if $KILN vm boot --no-agent --timeout 120 "$T_TMP/root.ext4" >"$T_TMP/out" 2>"$T_TMP/err"; then
		times+=("$(sed -n 's/^kiln: VM booted in \([0-9]*\) ms.*/\1/p' "$T_TMP/err")")
	else
		fails=$((fails + 1))
		echo "# boot $i failed:"
		tail -5 "$T_TMP/err" | sed 's/^/#   /'
	fi
done
expect_eq "$n boots in a row, none hung or failed" "$fails" "0"
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
echo "# boot to init's marker (ms): median $(echo "$sorted" | sed -n "$(( (${#times[@]} + 1) / 2 ))p"), max $(echo "$sorted" | tail -1)"
expect_eq "nothing left behind" "$(ls -A "$TMPDIR")" ""
