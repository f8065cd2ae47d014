#!/usr/bin/env bash
# t0330-vm-transfer.sh — upload and download of a tree through a real microVM's
# agent (virtio-serial): `kiln vm boot --wait` frees the agent socket, then
# `kiln agent upload/exec/download` round-trip a tree with modes, owners,
# symlinks and an empty directory; the guest sees what was sent.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup

"$KILN" vm boot --wait "$T_TMP/root.ext4" >"$T_TMP/boot.out" 2>"$T_TMP/boot.err" &
bootpid=$!
sock=
for _ in $(seq 600); do
	sock=$(sed -n 's/^kiln: agent socket //p' "$T_TMP/boot.err")
	[ -n "$sock" ] && break
	kill -0 "$bootpid" 2>/dev/null || break
	sleep 0.2
done
if [ -z "$sock" ]; then
	not_ok "vm boot --wait names a free agent socket"
	sed 's/^/#   /' "$T_TMP/boot.err"
	kill "$bootpid" 2>/dev/null
	exit 0
fi
ok "vm boot --wait names a free agent socket"

src=$T_TMP/src
mkdir -p "$src/dir/sub" "$src/empty"
printf 'hello\n' >"$src/dir/a.txt"
head -c 300000 /dev/urandom >"$src/dir/sub/big.bin"
printf '#!/bin/sh\necho run\n' >"$src/dir/run.sh"
ln -s dir/a.txt "$src/link"
chmod 0750 "$src/dir"; chmod 0600 "$src/dir/a.txt"; chmod 0755 "$src/dir/run.sh"; chmod 0700 "$src/empty"
chown 1000:1000 "$src/dir/a.txt"; chown 123:45 "$src/dir/sub/big.bin"

A=("$KILN" agent)
expect_exit 0 "agent ping through the VM" "${A[@]}" ping --socket "$sock"
expect_exit 0 "upload a tree into the guest" "${A[@]}" upload --socket "$sock" "$src" /tmp/up
expect_exit 0 "the guest lists it" "${A[@]}" exec --socket "$sock" -- sh -c \
	'cd /tmp/up && stat -c "%n %F %a %u:%g" dir empty && stat -c "%n %a %u:%g %s" dir/a.txt dir/run.sh dir/sub/big.bin &&
	 readlink link && dir/run.sh'
expect_eq "types, modes, owners and sizes as sent" "$(cat "$T_TMP/out")" "dir directory 750 0:0
empty directory 700 0:0
dir/a.txt 600 1000:1000 6
dir/run.sh 755 0:0 19
dir/sub/big.bin 644 123:45 300000
dir/a.txt
run"
expect_exit 0 "the guest changes it" "${A[@]}" exec --socket "$sock" -- sh -c \
	'echo guest >/tmp/up/dir/new.txt && chmod 640 /tmp/up/dir/new.txt && rm /tmp/up/dir/run.sh'
expect_exit 0 "download it back" "${A[@]}" download --socket "$sock" /tmp/up "$T_TMP/back"
listing() { (cd "$1" && find . -printf '%p %y %m %U:%G %l\n' | sort); }
expect_eq "the downloaded tree is the sent one plus the guest's change" \
	"$(listing "$T_TMP/back")" \
	"$(cp -a "$src" "$T_TMP/want" && echo guest >"$T_TMP/want/dir/new.txt" && chmod 640 "$T_TMP/want/dir/new.txt" &&
		rm "$T_TMP/want/dir/run.sh" && listing "$T_TMP/want")"
expect_eq "file content survives both ways" "$(sha256sum <"$T_TMP/back/dir/sub/big.bin")" "$(sha256sum <"$src/dir/sub/big.bin")"

kill -TERM "$bootpid"
wait "$bootpid" 2>/dev/null
expect_eq "the VM is gone after SIGTERM" "$(ls -d "$(dirname "$sock")" 2>/dev/null)" ""
