#!/usr/bin/env bash
# t0952-service-full-disk.sh — the build service (kiln serve --build, sqlite
# queue) with its data directory on a small tmpfs of the test's own, filled
# (docs/reliability.md): a context upload and a submit answer 507 saying the
# storage is full, kiln build --remote says so, nothing half-written is stored
# or listed, reads (builds, logs, pulls) go on; a build whose layer write meets
# the full disk ends failed saying so, leaving no temporary file; and all of
# it works again once space is freed.  No VM: FROM scratch + COPY.
. tests/e2e/lib.sh
. tests/e2e/service-lib.sh

MNT=$T_TMP/mnt
SRV=
stop_server() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; SRV=; }
trap 'stop_server; umount -l "$MNT" 2>/dev/null; rm -rf "$T_TMP"' EXIT
if [ "$(id -u)" != 0 ]; then
	skip "service on a full disk" "needs root to mount a tmpfs"
	exit 0
fi
mkdir -p "$MNT" && mount -t tmpfs -o size=160m,mode=0755 tmpfs "$MNT" || { not_ok "tmpfs mounts"; exit 1; }
export SOURCE_DATE_EPOCH=1700000000
DATA=$MNT/data
echo '{"auth": true, "build": {"host_builds": 1, "fetch_private": true}}' >"$T_TMP/serve.json"
A=$($KILN token create --data "$DATA" --scope team-a:build,pull,push a)
export KILN_TOKEN=$A
serve_build "$DATA" "$T_TMP/serve.json" || { not_ok "kiln serve --build starts"; exit 1; }

# fill [KEEP_KIB]: take the tmpfs's free space but KEEP_KIB (dd stops at ENOSPC)
fill() {
	local keep=${1:-0} free
	free=$(df -k --output=avail "$MNT" | tail -1 | tr -d ' ')
	if [ "$keep" -gt 0 ]; then
		dd if=/dev/zero of="$MNT/filler" bs=1k count=$((free - keep)) status=none 2>/dev/null
	else
		dd if=/dev/zero of="$MNT/filler" bs=64k status=none 2>/dev/null
		dd if=/dev/zero of="$MNT/filler2" bs=4k status=none 2>/dev/null
	fi
	sync
}
unfill() { rm -f "$MNT/filler" "$MNT/filler2"; }
# stored: the data directory's files but sqlite's own (what is stored)
stored() { find "$DATA" -type f ! -name 'meta.db*' -printf '%P %s\n' | sort; }
tmp_left() { find "$DATA" -type f -printf '%P\n' | grep -E '(^|/)tmp/|\.tmp$|\.kiln-tmp$'; }
api() { CODE=$(curl -s -o "$T_TMP/body" -w '%{http_code}' -H "X-API-Key: $A" "$@"); }
state() { curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$1" | jq -r .state; }
n_builds() { curl -s -H "X-API-Key: $A" "$URL/build/v1/builds" | jq '.builds | length'; }

$KILN login -u x --password-stdin "$HOST" <<<"$A" >/dev/null 2>&1
# ends_failed ID REASON_RE NAME: the build, its state read while the disk is
# full, ends failed with that reason once space is freed, at the latest; if
# its end waited for space, the server's log says it was recorded afterwards
ends_failed() {
	local st
	st=$(state "$1")
	unfill
	for _ in $(seq 50); do [ "$(state "$1")" = failed ] && break; sleep 0.2; done
	expect_eq "$3: ends failed (it was '$st' while the disk was full)" "$(state "$1")" failed
	curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$1" | jq -r .reason >"$T_TMP/reason"
	expect_grep "...its reason: /$2/" "$2" "$T_TMP/reason"
	if [ "$st" = building ]; then
		expect_grep "...its end waited for space (the server said so)" 'its end recorded once space was freed' "$T_TMP/serve.log"
	else
		echo "# the queue's database had room for the build's end: its wait for space was not needed"
	fi
}

mkdir -p "$T_TMP/ctx"
echo one >"$T_TMP/ctx/a.txt"
printf 'FROM scratch\nARG N\nCOPY a.txt /a.txt\n' >"$T_TMP/ctx/Dockerfile"
expect_exit 0 "a build before the disk fills" $KILN build --remote "$URL" -t app:v1 "$T_TMP/ctx"
ID1=$(grep -o 'as build b-[0-9a-f]*' "$T_TMP/err" | cut -d' ' -f3)

# ---- full: uploads and submits refused, reads go on
fill
before=$(stored)
nb=$(n_builds)
head -c 1000000 /dev/urandom >"$T_TMP/ctx/big.bin"
printf 'FROM scratch\nCOPY big.bin /big.bin\n' >"$T_TMP/ctx/Dockerfile.big"
expect_exit 1 "kiln build --remote with a new file on a full disk fails" \
	$KILN build --remote "$URL" -f "$T_TMP/ctx/Dockerfile.big" -t app:big "$T_TMP/ctx"
expect_grep "...saying the server's storage is full" 'storage is full' "$T_TMP/err"
BD=sha256:$(sha256sum "$T_TMP/ctx/big.bin" | cut -d' ' -f1)
api -X PUT --data-binary @"$T_TMP/ctx/big.bin" -H 'Content-Type: application/octet-stream' "$URL/build/v1/blobs/$BD"
expect_eq "a context blob upload on a full disk: 507" "$CODE" 507
expect_grep "...its message says the storage is full and to retry" 'storage is full.*retry once space is freed' "$T_TMP/body"
grep -q "$MNT" "$T_TMP/body" && not_ok "...and does not name the server's paths" || ok "...and does not name the server's paths"
expect_grep "the server's log names the file" "$MNT" "$T_TMP/serve.log"
# a submit whose files are all there: only the queue's row needs space
expect_exit 1 "a submit on a full disk fails" $KILN build --remote "$URL" --build-arg N=2 -t app:v2 "$T_TMP/ctx"
expect_grep "...saying the storage is full" 'storage is full' "$T_TMP/err"
expect_eq "no build was queued by the failed submits" "$(n_builds)" "$nb"
expect_eq "nothing was stored by the failed writes (no temporary file either)" "$(stored)" "$before"
api "$URL/build/v1/builds/$ID1"
expect_eq "a build's status is read while the disk is full" "$CODE" 200
api "$URL/build/v1/builds/$ID1/logs"
expect_eq "...and its log" "$CODE" 200
expect_grep "...whole" '"state":"done"' "$T_TMP/body"
expect_exit 0 "the published image is pulled while the disk is full" \
	$KILN pull "$HOST/team-a/app:v1"
kill -0 "$SRV" 2>/dev/null && ok "the server is up after the failed writes" || not_ok "the server is up after the failed writes"

# ---- space freed: the same requests succeed
unfill
expect_exit 0 "the build with the new file succeeds once space is freed" \
	$KILN build --remote "$URL" -f "$T_TMP/ctx/Dockerfile.big" -t app:big "$T_TMP/ctx"
expect_exit 0 "...and the submit" $KILN build --remote "$URL" --build-arg N=2 -t app:v2 "$T_TMP/ctx"

# ---- a build that meets the full disk once claimed: its context (16 MB of
# random bytes) is uploaded, the copy it is built from does not fit
head -c 16000000 /dev/urandom >"$T_TMP/ctx/huge.bin"
printf 'FROM scratch\nCOPY huge.bin /huge.bin\n' >"$T_TMP/ctx/Dockerfile.huge"
fill 24000
expect_exit 1 "a build that meets the full disk fails" \
	$KILN build --remote "$URL" -f "$T_TMP/ctx/Dockerfile.huge" -t app:huge "$T_TMP/ctx"
expect_grep "...saying the disk is full" 'No space left on device|storage is full' "$T_TMP/err"
IDH=$(curl -s -H "X-API-Key: $A" "$URL/build/v1/builds" | jq -r '[.builds[] | select(.state != "done")][0].id // empty')
expect_eq "...no temporary file is left" "$(tmp_left)" ""
expect_exit 1 "...nothing was published" $KILN pull "$HOST/team-a/app:huge"
# its end may wait for space too (the queue's database is on the full disk)
ends_failed "$IDH" 'No space left on device' "a build that met the full disk"
expect_exit 0 "...it succeeds once space is freed" \
	$KILN build --remote "$URL" -f "$T_TMP/ctx/Dockerfile.huge" -t app:huge "$T_TMP/ctx"
expect_exit 0 "...and is published" $KILN pull "$HOST/team-a/app:huge"
# ---- a build whose end is recorded on a full disk: it hits its time limit
# (an ADD that never finishes) after every free byte was taken
python3 tests/slow_http.py "$T_TMP/slow.port" 60 30 &
SLOW=$!
for _ in $(seq 50); do [ -s "$T_TMP/slow.port" ] && break; sleep 0.1; done
IDT=$(curl -s -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds" \
	-d "{\"dockerfile\":\"FROM scratch\\nADD http://127.0.0.1:$(cat "$T_TMP/slow.port")/x /x\\n\",\"time_limit_s\":4}" | jq -r .id)
for _ in $(seq 50); do [ "$(state "$IDT")" = building ] && break; sleep 0.1; done
fill
sleep 6
ends_failed "$IDT" 'time limit' "a build timed out on a full disk"
kill $SLOW 2>/dev/null
wait $SLOW 2>/dev/null
kill -0 "$SRV" 2>/dev/null && ok "the server is up at the end" || not_ok "the server is up at the end"
stop_server
