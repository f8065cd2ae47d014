#!/usr/bin/env bash
# t0320-vm-agent.sh — `kiln vm boot ROOTFS -- CMD` through the guest agent:
# output streams kept apart, exit codes and signals, env/cwd/user, the overlay
# whose upper dir holds exactly a step's changes, the writable mode, the
# network, a command timeout, and an agent that never answers.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
img=$T_TMP/root.ext4
sum=$(sha256sum <"$img")
if [ ! -x "$KILN_AGENT_BIN" ]; then
	not_ok "the guest agent $KILN_AGENT_BIN is built"
	exit 0
fi
boot() { $KILN vm boot --timeout 180 "$@"; }

expect_exit 7 "exit code comes back" boot "$img" -- sh -c 'echo out; echo err >&2; exit 7'
expect_eq "stdout is the command's" "$(cat "$T_TMP/out")" "out"
expect_eq "stderr is the command's" "$(cat "$T_TMP/err")" "err"

expect_exit 137 "a signal is 128+N" boot "$img" -- sh -c 'kill -9 $$'

expect_exit 0 "env, workdir and user" boot -e FOO=bar -w /etc -u 1234:567 "$img" -- \
	sh -c 'echo "$FOO $(pwd) $(id -u):$(id -g)"'
expect_eq "env, workdir and user applied" "$(cat "$T_TMP/out")" "bar /etc 1234:567"

# Overlay mode: the base is read-only underneath, changes land in the upper dir.
expect_exit 0 "writes go to the overlay" boot "$img" -- sh -c \
	'echo new >/etc/new && rm /etc/motd && mkdir /data && echo x >/data/f &&
	 cd /run/kiln/upper && find . | sort && grep -c . /proc/mounts >/dev/null &&
	 mount | grep -c "on /run/kiln/lower type ext4 (ro"'
expect_eq "upper dir holds exactly the changes" "$(tr '\n' ' ' <"$T_TMP/out")" ". ./data ./data/f ./etc ./etc/motd ./etc/new 1 "
expect_exit 0 "the next VM starts from the base again" boot "$img" -- cat /etc/motd
expect_eq "base content intact" "$(cat "$T_TMP/out")" "kiln test rootfs"

# --scratch: the changes live on their own disk, still seen at /run/kiln/upper;
# 48 MiB written is more than half of a 64 MiB guest could hold in RAM.
expect_exit 0 "overlay changes on a scratch disk" boot --scratch 256 --memory 96 "$img" -- sh -c \
	'dd if=/dev/zero of=/big bs=1M count=48 2>/dev/null && ls -l /run/kiln/upper/big | awk "{print \$5}" &&
	 mount | grep -c "on /run/kiln/scratch type ext4"'
expect_eq "the upper dir is on the scratch disk" "$(tr '\n' ' ' <"$T_TMP/out")" "50331648 1 "
expect_exit 0 "writable mode" boot --writable "$img" -- sh -c 'echo w >/etc/w && cat /etc/w && mount | grep -c "/dev/vda on / type ext4 (rw"'
expect_eq "writable root in use" "$(tr '\n' ' ' <"$T_TMP/out")" "w 1 "
expect_eq "base image never written" "$(sha256sum <"$img")" "$sum"

expect_exit 0 "user-mode network" boot --net "$img" -- sh -c 'ip -4 addr show eth0 | grep -o "inet [0-9./]*"; cat /etc/resolv.conf'
expect_eq "guest address and DNS" "$(tr '\n' ' ' <"$T_TMP/out")" "inet 10.0.2.15/24 nameserver 10.0.2.3 "
expect_exit 0 "no network by default" boot "$img" -- sh -c 'ls /sys/class/net | tr "\n" " "'
expect_eq "only lo without --net" "$(cat "$T_TMP/out")" "lo "

expect_exit 137 "a command past --cmd-timeout is killed" boot --cmd-timeout 2 "$img" -- sleep 60
expect_grep "the timeout is reported" 'timed out after 2 s' "$T_TMP/err"

# An agent that never speaks: kiln gives up with a clear error, cleans up.
printf '#!/bin/sh\nexec sleep 1000\n' >"$T_TMP/mute-agent"
chmod +x "$T_TMP/mute-agent"
expect_exit 1 "a guest whose agent never answers" env KILN_AGENT="$T_TMP/mute-agent" $KILN vm boot --timeout 20 "$img" -- true
expect_grep "says the agent did not answer" 'agent did not answer' "$T_TMP/err"
expect_eq "nothing left behind" "$(ls -A "$TMPDIR")" ""
