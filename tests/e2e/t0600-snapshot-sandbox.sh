#!/usr/bin/env bash
# t0600-snapshot-sandbox.sh — one template (busybox httpd started by the start
# command, polled by the ready command) shared by every check: sandboxes
# restored from it answer through the server at once, see the start command's
# file, keep state between execs, are private to each other, get their own
# hostname, fresh randomness and a correct clock, run concurrent execs;
# corrupted or mismatched templates are refused;
# dead sandboxes and a kiln killed mid-restore leave nothing after gc.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
mkdir -p "$T_TMP/root/www"
for a in cat ls hostname date head sleep; do ln -sf busybox "$T_TMP/root/bin/$a"; done
echo "hello from the template" >"$T_TMP/root/www/index.html"
expect_exit 0 "rootfs from a directory" $KILN rootfs --from-dir "$T_TMP/root" -o "$T_TMP/web.ext4" --free 16M
SB="$KILN_HOME/sandboxes"

# strays: QEMU processes started for this test's sandboxes.
strays() { pgrep -f "$SB/" | wc -l; }

start='busybox httpd -p 127.0.0.1:8080 -h /www; echo started-$$ > /tmp/marker; sync'
ready='busybox wget -q -O- http://127.0.0.1:8080/index.html'
expect_exit 1 "a ready command that never succeeds fails the snapshot" \
	$KILN snapshot -t never --ready 'echo not yet; exit 3' --ready-timeout 2 "$T_TMP/web.ext4"
expect_grep "the failure quotes the ready command's output" "ready command .* did not succeed.*exit 3.*not yet" "$T_TMP/err"
expect_exit 0 "snapshot with a start and a ready command" \
	$KILN snapshot -t web:v1 --start "$start" --ready "$ready" -e GREETING=hi --workdir /www "$T_TMP/web.ext4"
expect_grep "the template's digest is printed" '^sha256:[0-9a-f]{64}$' "$T_TMP/out"
digest=$(cat "$T_TMP/out")
snapped=$(date +%s)
expect_exit 0 "snapshot ls" $KILN snapshot ls --json
expect_grep "ls names the template" '"name": "web:v1"' "$T_TMP/out"
cfg="$KILN_HOME/snapshots/blobs/sha256/${digest#sha256:}"
mem=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["memory"]["digest"][7:])' "$cfg")
memf="$KILN_HOME/snapshots/blobs/sha256/$mem"
if [ "$(du -k "$memf" | cut -f1)" -lt $(( $(stat -c %s "$memf") / 1024 / 2 )) ]; then
	ok "zero pages of the memory file take no space"
else not_ok "zero pages of the memory file take no space ($(du -k "$memf"))"; fi
expect_exit 0 "snapshot verify" $KILN snapshot verify web:v1
# The disk blob names its rootfs blob relatively: its bytes do not depend on $KILN_HOME.
rootd=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rootfs"]["digest"][7:])' "$cfg")
diskd=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["disk"]["digest"][7:])' "$cfg")
expect_eq "the disk blob's backing is the rootfs blob's relative name" \
	"$(qemu-img info -U --output=json "$KILN_HOME/snapshots/blobs/sha256/$diskd" | jq -r '.["backing-filename"]')" "$rootd"

expect_exit 0 "sandbox create" $KILN sandbox create --json web:v1
a=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$T_TMP/out")
expect_exit 0 "second sandbox create" $KILN sandbox create web:v1
b=$(cat "$T_TMP/out")
expect_exit 0 "the server started by the start command answers at once" \
	$KILN sandbox exec "$a" -- busybox wget -q -O- http://127.0.0.1:8080/index.html
expect_grep "...with the page" '^hello from the template$' "$T_TMP/out"
expect_exit 0 "the start command's file is there" $KILN sandbox exec "$a" -- cat /tmp/marker
expect_grep "...with its content" '^started-[0-9]+$' "$T_TMP/out"
expect_exit 0 "exec gets the template's env and workdir" $KILN sandbox exec "$a" -- sh -c 'echo $GREETING $(pwd)'
expect_eq "...GREETING and /www" "$(cat "$T_TMP/out")" "hi /www"
expect_exit 7 "exec returns the command's exit code" $KILN sandbox exec "$a" -- sh -c 'echo to-err >&2; exit 7'
expect_grep "...and its stderr" '^to-err$' "$T_TMP/err"
expect_exit 0 "sandbox A writes a file" $KILN sandbox exec "$a" -- sh -c 'echo A > /tmp/mine-a; sleep 1000 & echo $! > /tmp/bg'
expect_exit 0 "sandbox B writes another" $KILN sandbox exec "$b" -- sh -c 'echo B > /tmp/mine-b'
expect_exit 0 "A's state persists between execs" $KILN sandbox exec "$a" -- sh -c 'cat /tmp/mine-a; kill -0 $(cat /tmp/bg) && echo bg-alive'
expect_eq "...its file and background process" "$(tr '\n' ' ' <"$T_TMP/out")" "A bg-alive "
# Concurrent execs in one sandbox: each runs at once, with its own output and code.
$KILN sandbox exec "$a" -- sh -c 'echo slow-start; sleep 3; echo slow-end; exit 3' >"$T_TMP/c1" 2>&1 &
p1=$!
for i in $(seq 100); do grep -qs slow-start "$T_TMP/c1" && break; sleep 0.1; done
expect_exit 4 "a second exec while the first runs" $KILN sandbox exec "$a" -- sh -c 'echo fast; exit 4'
expect_eq "...has its own output" "$(cat "$T_TMP/out")" "fast"
kill -0 $p1 2>/dev/null && ok "...and finished while the first still ran" || not_ok "...the first had ended already"
wait $p1
expect_eq "the first exec's code" "$?" "3"
expect_eq "...and its own output" "$(tr '\n' ' ' <"$T_TMP/c1")" "slow-start slow-end "
# More than the ports (4): the rest wait for a free one, none is lost.
for i in 1 2 3 4 5 6; do
	$KILN sandbox exec "$a" -- sh -c "sleep 1; echo p$i; exit $i" >"$T_TMP/m$i" 2>/dev/null &
	eval "m$i=\$!"
done
good=0
for i in 1 2 3 4 5 6; do
	eval "wait \$m$i"; rc=$?
	[ "$rc" = "$i" ] && [ "$(cat "$T_TMP/m$i")" = "p$i" ] && good=$((good + 1))
done
expect_eq "six concurrent execs each got their output and exit code" "$good" "6"
expect_exit 1 "A does not see B's file" $KILN sandbox exec "$a" -- cat /tmp/mine-b
expect_exit 1 "B does not see A's file" $KILN sandbox exec "$b" -- cat /tmp/mine-a
expect_exit 0 "a third sandbox (kiln run) sees neither" $KILN run web:v1 -- ls /tmp
expect_eq "...only the template's file" "$(cat "$T_TMP/out")" "marker"
# Identity right after a restore: the first command of two sandboxes of one
# template (without the forced CRNG reseed both read the same bytes).
for s in 1 2; do
	$KILN run web:v1 -- sh -c 'head -c 32 /dev/urandom | od -An -tx1; cat /proc/sys/kernel/random/uuid' \
		>"$T_TMP/rand$s" 2>&1
done
if [ -s "$T_TMP/rand1" ] && ! cmp -s "$T_TMP/rand1" "$T_TMP/rand2" &&
	[ "$(sed -n 3p "$T_TMP/rand1")" != "$(sed -n 3p "$T_TMP/rand2")" ]; then
	ok "two sandboxes' first /dev/urandom and random uuid differ"
else not_ok "two sandboxes read the same random bytes: $(cat "$T_TMP/rand1") / $(cat "$T_TMP/rand2")"; fi
expect_exit 0 "hostname is the sandbox id" $KILN sandbox exec "$a" -- hostname
expect_eq "...for A" "$(cat "$T_TMP/out")" "$a"
# clock_ok NAME ID: the guest's time lies between the host's before and after the exec (±1 s).
clock_ok() {
	local t0 t1 g
	t0=$(date +%s)
	$KILN sandbox exec "$2" -- date +%s >"$T_TMP/out" 2>"$T_TMP/err"
	t1=$(date +%s)
	g=$(cat "$T_TMP/out")
	if [ -n "$g" ] && [ "$g" -ge $((t0 - 1)) ] && [ "$g" -le $((t1 + 1)) ]; then ok "$1 ($g in [$t0, $t1])"
	else not_ok "$1 (guest '$g', host $t0..$t1)"; fi
}
# The template's clock stood still since the snapshot: make that at least 5 s.
age=$(( $(date +%s) - snapped )); [ "$age" -ge 5 ] || sleep $((5 - age))
clock_ok "the restored guest's clock is right (template $(( $(date +%s) - snapped )) s old)" "$b"
expect_exit 0 "random state differs between sandboxes" $KILN sandbox exec "$a" -- head -c 16 /dev/urandom
ra=$(od -An -tx1 <"$T_TMP/out")
$KILN sandbox exec "$b" -- head -c 16 /dev/urandom >"$T_TMP/rb"
expect_eq "...(A and B read different bytes)" "$([ "$ra" != "$(od -An -tx1 <"$T_TMP/rb")" ] && echo differ)" "differ"

expect_exit 0 "sandbox ls" $KILN sandbox ls
expect_eq "ls shows both running" "$(grep -c running "$T_TMP/out")" "2"
expect_exit 0 "kill A" $KILN sandbox kill "$a"
expect_exit 1 "exec in a killed sandbox fails" $KILN sandbox exec "$a" -- true
expect_grep "...saying there is no such sandbox" "no sandbox $a" "$T_TMP/err"
pkill -KILL -f "$SB/$b/" # B's QEMU dies under it
sleep 0.5
expect_exit 0 "ls after B's QEMU died" $KILN sandbox ls
expect_grep "ls says B is dead" "^$b +dead" "$T_TMP/out"
expect_exit 1 "exec in a dead sandbox fails clearly" $KILN sandbox exec "$b" -- true
expect_grep "...saying it is dead" "sandbox $b is dead" "$T_TMP/err"

# kiln killed mid-restore (at several points): gc leaves nothing.
for delay in 0.05 0.2 0.4; do
	$KILN sandbox create web:v1 >/dev/null 2>&1 &
	sleep $delay
	kill -KILL $! 2>/dev/null
	wait $! 2>/dev/null
done
expect_exit 0 "sandbox gc" $KILN sandbox gc
$KILN sandbox ls >"$T_TMP/ls" 2>&1
n=$(ls -A "$SB" | wc -l)
expect_eq "no half-made sandbox left (only whole ones: a create may have finished)" \
	"$(grep -Ec 'dead|creating' "$T_TMP/ls")" "0"
expect_eq "no QEMU left but those of whole sandboxes" "$(strays)" "$n"
[ "$n" = 0 ] || $KILN sandbox kill $(ls "$SB") >/dev/null 2>&1
$KILN sandbox create web:v1 >/dev/null 2>&1 &
sleep 0.3
kill -TERM $! 2>/dev/null
wait $! 2>/dev/null
$KILN sandbox ls >"$T_TMP/ls" 2>&1
n=$(ls -A "$SB" | wc -l)
if ! grep -Eq 'dead|creating' "$T_TMP/ls" && [ "$(strays)" = "$n" ]; then
	ok "SIGTERM during a create leaves nothing half-made ($n whole sandbox)"
else not_ok "SIGTERM during a create left: $(cat "$T_TMP/ls"), $(strays) QEMU"; fi
[ "$n" = 0 ] || $KILN sandbox kill $(ls "$SB") >/dev/null 2>&1

# A pool: restored, warmed-up, paused sandboxes; a create claims one.
expect_exit 0 "sandbox pool -n 2" $KILN sandbox pool -n 2 web:v1
expect_eq "...started two" "$(cat "$T_TMP/out")" "started 2"
$KILN sandbox ls >"$T_TMP/ls"
expect_eq "ls shows two pooled" "$(grep -c ' pooled ' "$T_TMP/ls")" "2"
expect_exit 0 "create claims a pooled sandbox" $KILN sandbox create --json web:v1
expect_grep "...(it says so)" '"pooled": ?true' "$T_TMP/out"
p=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$T_TMP/out")
grep -q "^$p " "$T_TMP/ls" && ok "...one of the pool's" || not_ok "claimed $p, not in the pool: $(cat "$T_TMP/ls")"
expect_exit 0 "the claimed sandbox serves at once" $KILN sandbox exec "$p" -- sh -c 'busybox wget -q -O- http://127.0.0.1:8080/index.html; hostname; ls /tmp'
expect_eq "...with its own hostname and only the template's files" "$(tr '\n' ' ' <"$T_TMP/out")" "hello from the template $p marker "
clock_ok "a pooled sandbox's clock is right when claimed" "$p"
for i in $(seq 600); do [ "$(grep -c ' pooled ' <($KILN sandbox ls))" = 2 ] && break; sleep 0.1; done
expect_eq "the pool is refilled in the background" "$(grep -c ' pooled ' <($KILN sandbox ls))" "2"
expect_exit 0 "kiln run from the pool" $KILN run --time web:v1 -- hostname
expect_grep "...says it came from the pool" "started in [0-9.]+ ms from the pool" "$T_TMP/err"
# A member gets its hostname and random state when it is made, not when claimed:
# claimed, it must still be its own:
# a fresh 12-hex id, never the template's or another member's.
h1=$(cat "$T_TMP/out")
[[ "$h1" =~ ^[0-9a-f]{12}$ ]] && ok "...its hostname is its own id ($h1)" || not_ok "kiln run from the pool: hostname '$h1'"
for i in $(seq 600); do [ "$(grep -c ' pooled ' <($KILN sandbox ls))" = 2 ] && break; sleep 0.1; done
$KILN run web:v1 -- sh -c 'hostname; head -c 16 /dev/urandom | od -An -tx1' >"$T_TMP/pr1" 2>&1
for i in $(seq 600); do [ "$(grep -c ' pooled ' <($KILN sandbox ls))" = 2 ] && break; sleep 0.1; done
$KILN run web:v1 -- sh -c 'hostname; head -c 16 /dev/urandom | od -An -tx1' >"$T_TMP/pr2" 2>&1
if [ "$(wc -l <"$T_TMP/pr1")" = 2 ] && [ "$(head -1 "$T_TMP/pr1")" != "$(head -1 "$T_TMP/pr2")" ] &&
	[ "$(sed -n 2p "$T_TMP/pr1")" != "$(sed -n 2p "$T_TMP/pr2")" ] && [ "$(head -1 "$T_TMP/pr1")" != "$h1" ]; then
	ok "two pooled sandboxes have their own hostnames and random state"
else
	not_ok "two pooled sandboxes: $(tr '\n' ' ' <"$T_TMP/pr1") / $(tr '\n' ' ' <"$T_TMP/pr2")"
fi
expect_exit 5 "kiln run exits with the command's code" $KILN run web:v1 -- sh -c 'echo $GREETING; exit 5'
expect_eq "...and the command had the template's env" "$(cat "$T_TMP/out")" "hi"
expect_exit 127 "kiln run of a missing program" $KILN run web:v1 -- no-such-program
expect_grep "...says so" "no-such-program" "$T_TMP/err"
# (the background refill runs at nice 10: on a busy host it takes a while)
for i in $(seq 600); do
	q=$($KILN sandbox ls | awk '$2 == "pooled" {print $3; exit}')
	[ -n "$q" ] && break
	sleep 0.1
done
kill -KILL "$q"; sleep 0.3
expect_exit 0 "a pooled sandbox whose QEMU died" $KILN sandbox ls
expect_grep "...is dead" " dead +$q " "$T_TMP/out"
for i in $(seq 600); do [ "$(grep -c ' pooled ' <($KILN sandbox ls))" -ge 1 ] && break; sleep 0.1; done
expect_exit 0 "create skips it" $KILN sandbox create web:v1
c=$(cat "$T_TMP/out")
expect_exit 0 "pool -n 0 empties the pool" $KILN sandbox pool -n 0 web:v1
$KILN sandbox kill "$p" "$c" >/dev/null 2>&1
for i in $(seq 600); do pgrep -f "sandbox pool web:v1" >/dev/null || break; sleep 0.1; done
$KILN sandbox pool -n 0 web:v1 >/dev/null
expect_exit 0 "gc after the pool" $KILN sandbox gc
left="$(ls -A "$SB")$(strays)"
[ "$left" = 0 ] || { $KILN sandbox ls; cat "$KILN_HOME"/snapshots/pools/*; ps -eo pid,ni,etime,args | grep '[k]iln sandbox'; } >&2
expect_eq "nothing left after the pool" "$left" "0"

# Refusals.  A corrupted state blob: clear error, nothing left.
st=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["state"]["digest"][7:])' "$cfg")
stf="$KILN_HOME/snapshots/blobs/sha256/$st"
cp "$stf" "$T_TMP/state.bak"
chmod u+w "$stf"
printf 'X' | dd of="$stf" bs=1 seek=100 conv=notrunc 2>/dev/null
expect_exit 1 "a corrupted state blob is refused" $KILN sandbox create web:v1
expect_grep "...with a clear error" "state blob is corrupted" "$T_TMP/err"
cp "$T_TMP/state.bak" "$stf"
mv "$memf" "$memf.orig"
cp --sparse=always "$memf.orig" "$memf" && truncate -s -4096 "$memf"
expect_exit 1 "a truncated memory file is refused" $KILN sandbox create web:v1
expect_grep "...with a clear error" "memory blob is corrupted" "$T_TMP/err"
mv -f "$memf.orig" "$memf"
# A template made with another QEMU (its config says so, digest intact).
python3 - "$cfg" "$KILN_HOME/snapshots" <<'EOF'
import hashlib, json, os, sys
c = json.load(open(sys.argv[1]))
c["depends"]["qemu"] = "99.0.0"
data = json.dumps(c, sort_keys=True, separators=(",", ":")).encode()
h = hashlib.sha256(data).hexdigest()
open(os.path.join(sys.argv[2], "blobs/sha256", h), "wb").write(data)
os.makedirs(os.path.join(sys.argv[2], "refs/otherqemu"), exist_ok=True)
open(os.path.join(sys.argv[2], "refs/otherqemu/latest"), "w").write("sha256:" + h + "\n")
EOF
expect_exit 1 "a template made with another QEMU is refused" $KILN sandbox create otherqemu
expect_grep "...naming both versions" "made with QEMU 99.0.0, this host has QEMU" "$T_TMP/err"
# A host whose TSC runs at another rate (the cached measurement edited).
cp "$KILN_HOME/host-tsc.json" "$T_TMP/tsc.bak"
python3 - "$KILN_HOME/host-tsc.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1])); j["tsc_khz"] = j["tsc_khz"] * 2
json.dump(j, open(sys.argv[1], "w"))
EOF
expect_exit 1 "a template from a host with another TSC rate is refused" $KILN sandbox create web:v1
expect_grep "...saying why" "TSC, this host's runs at" "$T_TMP/err"
cp "$T_TMP/tsc.bak" "$KILN_HOME/host-tsc.json"
# A config blob whose bytes do not match its digest.
chmod u+w "$cfg"; cp "$cfg" "$T_TMP/cfg.bak"; sed -i 's/"cpus":1/"cpus":2/' "$cfg"
expect_exit 1 "a corrupted config is refused" $KILN sandbox create web:v1
expect_grep "...with a clear error" "is corrupted: its config blob has digest" "$T_TMP/err"
cp "$T_TMP/cfg.bak" "$cfg"
expect_exit 1 "an unknown template" $KILN sandbox create nosuch:tag
expect_grep "...is named" "no template nosuch:tag" "$T_TMP/err"
expect_exit 0 "the restored template still works" $KILN run web:v1 -- cat /www/index.html
expect_eq "nothing left after the refusals" "$(ls -A "$SB")$(strays)" "0"
$KILN sandbox gc >/dev/null 2>&1
