#!/usr/bin/env bash
# t0630-sandbox-pause.sh — a sandbox saved and brought back, on one template:
# pause writes memory, device state and disk into the sandbox's directory and
# stops QEMU; exec and cp fail at once saying it is paused; resume brings back
# the same processes (a counter that goes on counting) and files (on the disk
# and in RAM), twice; commit makes a template of a running sandbox (which goes
# on), that template is pushed to a kiln serve on 127.0.0.1, pulled into
# another KILN_HOME and run there with the committed process and files.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
. tests/e2e/registry-lib.sh
vm_setup
SB="$KILN_HOME/sandboxes"
H2=$T_TMP/host2
cleanup() {
	$KILN sandbox kill $(ls "$SB" 2>/dev/null) >/dev/null 2>&1
	KILN_HOME=$H2 $KILN sandbox kill $(ls "$H2/sandboxes" 2>/dev/null) >/dev/null 2>&1
	reg_stop
	rm -rf "$T_TMP"
}
trap cleanup EXIT
expect_exit 0 "rootfs" $KILN rootfs --from-dir "$T_TMP/root" -o "$T_TMP/p.ext4" --free 16M
expect_exit 0 "template" $KILN snapshot -t pz:v1 "$T_TMP/p.ext4"
state() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))' "$SB/$1/state.json" "$2"; }

expect_exit 0 "create" $KILN sandbox create --timeout 10m pz:v1
a=$(cat "$T_TMP/out")
expect_exit 0 "a counter process (detached)" $KILN sandbox exec --detach "$a" -- \
	sh -c 'i=0; while :; do i=$((i+1)); echo $i >/tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done'
cpid=$(cat "$T_TMP/out")
expect_exit 0 "a file on the disk and one in RAM" $KILN sandbox exec "$a" -- \
	sh -c 'echo on-disk >/etc/mark; echo in-ram >/run/mark; sync; sleep 0.5; cat /tmp/count'
before=$(cat "$T_TMP/out")
qpid=$(state "$a" pid)
expect_exit 0 "pause" $KILN sandbox pause "$a"
expect_grep "...says how long it took" "paused in [0-9]+ ms" "$T_TMP/err"
pause_ms=$(sed -n 's/.*paused in \([0-9]*\) ms.*/\1/p' "$T_TMP/err")
for i in $(seq 20); do [ -s "/proc/$qpid/cmdline" ] || break; sleep 0.1; done
[ -s "/proc/$qpid/cmdline" ] && not_ok "...its QEMU still runs" || ok "...its QEMU is gone"
[ -f "$SB/$a/paused/memory" ] && [ -f "$SB/$a/paused/state" ] && [ -f "$SB/$a/paused/disk.qcow2" ] &&
	ok "...memory, device state and disk are in its directory" || not_ok "...paused files: $(ls "$SB/$a/paused")"
expect_exit 0 "ls" $KILN sandbox ls
expect_grep "...says paused" "^$a +paused " "$T_TMP/out"
t0=$(date +%s%N)
expect_exit 1 "exec on a paused sandbox fails" $KILN sandbox exec "$a" -- true
t1=$(date +%s%N)
expect_grep "...saying it is paused" "sandbox $a is paused" "$T_TMP/err"
[ $(( (t1 - t0) / 1000000 )) -lt 1000 ] && ok "...at once ($(( (t1 - t0) / 1000000 )) ms)" ||
	not_ok "...after $(( (t1 - t0) / 1000000 )) ms"
expect_exit 1 "cp on a paused sandbox fails" $KILN sandbox cp "$a:/etc/mark" "$T_TMP/x"
expect_grep "...saying it is paused" "sandbox $a is paused" "$T_TMP/err"
expect_exit 1 "pause twice" $KILN sandbox pause "$a"
expect_grep "...says it is paused already" "is paused, not running" "$T_TMP/err"
sleep 1
expect_exit 0 "resume" $KILN sandbox resume "$a"
expect_grep "...says how long it took" "resumed in [0-9]+ ms" "$T_TMP/err"
resume_ms=$(sed -n 's/.*resumed in \([0-9]*\) ms.*/\1/p' "$T_TMP/err")
expect_exit 0 "the counter survived and counts on" $KILN sandbox exec "$a" -- \
	sh -c "kill -0 $cpid && echo alive; c1=\$(cat /tmp/count); sleep 1; c2=\$(cat /tmp/count); echo \$c1 \$c2"
read -r alive < "$T_TMP/out"
read -r c1 c2 <<<"$(sed -n 2p "$T_TMP/out")"
expect_eq "...the same process" "$alive" "alive"
[ -n "$c1" ] && [ "$c1" -ge "$before" ] && [ "$c2" -gt "$c1" ] && ok "...from $before: $c1 then $c2" ||
	not_ok "...counter $before -> $c1 -> $c2"
expect_exit 0 "the files survived" $KILN sandbox exec "$a" -- cat /etc/mark /run/mark
expect_eq "...disk and RAM" "$(cat "$T_TMP/out")" "$(printf 'on-disk\nin-ram')"
expect_exit 0 "the clock is right after resume" $KILN sandbox exec "$a" -- date +%s
g=$(cat "$T_TMP/out"); h=$(date +%s)
[ $((h - g)) -le 2 ] && [ $((g - h)) -le 2 ] && ok "...guest $g, host $h" || not_ok "...guest $g, host $h"
expect_eq "its timeout runs again" "$([ "$(state "$a" expires_ms)" != None ] && echo set)" "set"
# A second cycle: the disk written since goes on top of the first pause's.
expect_exit 0 "write again" $KILN sandbox exec "$a" -- sh -c 'echo second >/etc/mark2; sync'
expect_exit 0 "pause again" $KILN sandbox pause "$a"
expect_exit 0 "resume again" $KILN sandbox resume "$a"
expect_exit 0 "both writes are there" $KILN sandbox exec "$a" -- sh -c "cat /etc/mark /etc/mark2; kill -0 $cpid && echo alive"
expect_eq "...and the counter" "$(cat "$T_TMP/out")" "$(printf 'on-disk\nsecond\nalive')"

# --- commit ---------------------------------------------------------------
expect_exit 0 "commit a running sandbox" $KILN sandbox commit "$a" pz:committed
expect_grep "...prints the template's digest" '^sha256:[0-9a-f]{64}$' "$T_TMP/out"
expect_exit 0 "...the sandbox goes on" $KILN sandbox exec "$a" -- sh -c "kill -0 $cpid && echo alive"
expect_eq "...with its counter" "$(cat "$T_TMP/out")" "alive"
expect_exit 0 "snapshot verify of the committed template" $KILN snapshot verify pz:committed
expect_exit 0 "kiln run of it here" $KILN run pz:committed -- sh -c "cat /etc/mark2 /run/mark; kill -0 $cpid && echo alive"
expect_eq "...has the files and the process" "$(cat "$T_TMP/out")" "$(printf 'second\nin-ram\nalive')"
reg_start "$T_TMP/reg" || exit 0
expect_exit 0 "push it to kiln serve" $KILN push pz:committed "$REG/team/pz:committed"
expect_exit 0 "pull it into another KILN_HOME" env KILN_HOME="$H2" $KILN pull "$REG/team/pz:committed"
expect_exit 0 "run it there" env KILN_HOME="$H2" $KILN run "$REG/team/pz:committed" -- \
	sh -c "c1=\$(cat /tmp/count); sleep 1; echo \$(cat /etc/mark) \$(kill -0 $cpid && echo alive) \$((\$(cat /tmp/count) > c1))"
expect_eq "...with the committed file and a counter that counts" "$(cat "$T_TMP/out")" "on-disk alive 1"
reg_stop

# --- figures -------------------------------------------------------------------
expect_exit 0 "a plain create for comparison" $KILN sandbox create --json --timeout 0 pz:v1
create_ms=$(jq -r '.timings_ms.total | floor' "$T_TMP/out")
echo "# pause ${pause_ms} ms, resume ${resume_ms} ms, create (full restore) ${create_ms} ms (256 MiB guest)"
[ "${pause_ms:-9999}" -le 1000 ] && ok "pause of a 256 MiB sandbox within 1 s (${pause_ms} ms)" ||
	not_ok "pause took ${pause_ms} ms"
