#!/usr/bin/env bash
# t0351-agent-cli.sh — `kiln agent` against bin/kiln-agent serving a unix
# socket on the host (as a VM's agent.sock would): exec with exit codes,
# streams, env/cwd/user/stdin/timeout, ping, stat, and an upload/download
# round trip of a tree with modes, symlinks and hard links.
. tests/e2e/lib.sh
AGENT=$KILN_AGENT_BIN
S=$T_TMP/agent.sock
"$AGENT" --listen "$S" 2>"$T_TMP/agent.err" &
apid=$!
trap 'kill $apid 2>/dev/null; rm -rf "$T_TMP"' EXIT
A() { "$KILN" agent "$1" --socket "$S" "${@:2}"; }

expect_exit 0 "ping" A ping --count 3
expect_grep "ping names the agent" '^agent kiln-agent [0-9.]+, protocol 2, capabilities 0x' "$T_TMP/out"
expect_eq "three pongs" "$(grep -c '^pong in ' "$T_TMP/out")" 3

expect_exit 3 "exec: the command's exit code" A exec -- sh -c 'echo out; echo err >&2; exit 3'
expect_eq "exec: stdout is kiln's stdout" "$(cat "$T_TMP/out")" "out"
expect_eq "exec: stderr is kiln's stderr" "$(cat "$T_TMP/err")" "err"
expect_exit 0 "exec: env and cwd" A exec --env GREETING=hi --env X=1 --cwd /usr -- sh -c 'echo "$GREETING $X $(pwd)"'
expect_eq "exec: env and cwd applied" "$(cat "$T_TMP/out")" "hi 1 /usr"
if [ "$(id -u)" = 0 ]; then
	expect_exit 0 "exec: numeric user" A exec --user 4321:765 -- id
	expect_grep "exec: user applied" '^uid=4321 gid=765' "$T_TMP/out"
else
	skip "exec: numeric user" "needs root"
fi
expect_exit 0 "exec: stdin forwarded" sh -c "seq 1 100000 | '$KILN' agent exec --socket '$S' --stdin -- wc -l"
expect_eq "exec: all of stdin arrived" "$(cat "$T_TMP/out")" "100000"
expect_exit 124 "exec: timeout exits 124" A exec --timeout 0.3 -- sleep 30
expect_grep "exec: the timeout is reported" 'timed out after 0.3 s' "$T_TMP/err"
expect_exit 143 "exec: killed by SIGTERM exits 128+15" A exec -- sh -c 'kill -TERM $$'
expect_exit 1 "exec: a missing program" A exec -- /no/such/program
expect_grep "exec: names the program" 'agent exec: cannot execute /no/such/program: No such file' "$T_TMP/err"
expect_exit 1 "exec: an unknown user" A exec --user nosuchuser -- true
expect_grep "exec: names the user" 'unable to find user nosuchuser' "$T_TMP/err"
expect_exit 2 "exec: no command is a usage error" A exec
expect_exit 2 "exec: bad --env" A exec --env NOEQUALS -- true

expect_exit 0 "stat a symlink" A stat /proc/self
expect_grep "stat shows the type" '^type symlink$' "$T_TMP/out"
mkdir -p "$T_TMP/xd"
if python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.kiln", b"\x01y")' "$T_TMP/xd" 2>/dev/null; then
	expect_exit 0 "stat --xattrs" A stat --xattrs "$T_TMP/xd"
	expect_grep "xattrs shown in hex" '^xattr user\.kiln=0x0179$' "$T_TMP/out"
fi
expect_exit 1 "stat a missing path" A stat /no/such/path
expect_grep "stat names the path" 'stat /no/such/path: No such file' "$T_TMP/err"

src=$T_TMP/src
mkdir -p "$src/d/e"
printf 'hello\n' >"$src/a.txt"; chmod 0640 "$src/a.txt"
printf '#!/bin/sh\n' >"$src/d/run.sh"; chmod 0755 "$src/d/run.sh"
chmod 0700 "$src/d/e"
ln -s ../a.txt "$src/d/link"
ln "$src/a.txt" "$src/hard.txt"
head -c 3000000 /dev/urandom >"$src/d/e/big.bin"
listing() { (cd "$1" && find . -mindepth 1 -printf '%p %y %m %s %l %n\n' | sort && find . -type f -exec sha256sum {} + | sort); }
expect_exit 0 "upload a tree" A upload "$src" "$T_TMP/guest/x"
expect_eq "uploaded tree identical" "$(listing "$T_TMP/guest/x")" "$(listing "$src")"
expect_exit 0 "download it back" A download "$T_TMP/guest/x" "$T_TMP/back"
expect_eq "downloaded tree identical" "$(listing "$T_TMP/back")" "$(listing "$src")"
if [ "$(id -u)" = 0 ]; then
	expect_exit 0 "upload with --chown" A upload --chown 77:88 "$src" "$T_TMP/guest/owned"
	expect_eq "every entry owned 77:88" "$(find "$T_TMP/guest/owned" -mindepth 1 ! -user 77 -o -mindepth 1 ! -group 88 | wc -l)" 0
else
	skip "upload with --chown" "needs root"
fi
expect_exit 1 "download a missing dir" A download /no/such/dir "$T_TMP/none"
expect_grep "names the dir" 'download /no/such/dir: No such file' "$T_TMP/err"

expect_exit 1 "no agent at the socket" "$KILN" agent ping --socket "$T_TMP/nothing.sock" --connect-timeout 0.2
expect_grep "says which socket" 'agent connect: .*nothing.sock' "$T_TMP/err"
expect_exit 2 "--socket is required" "$KILN" agent ping
expect_exit 2 "unknown sub-command" "$KILN" agent frobnicate

kill -TERM $apid
wait $apid
expect_eq "agent exits 0 on SIGTERM" "$?" 0
if [ -e "$S" ]; then not_ok "agent removed its socket"; else ok "agent removed its socket"; fi
