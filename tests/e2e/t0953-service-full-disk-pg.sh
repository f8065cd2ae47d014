#!/usr/bin/env bash
# t0953-service-full-disk-pg.sh — the build service's PostgreSQL queue on a
# full disk (docs/reliability.md): kiln's tables in a tablespace on a small
# tmpfs of the test's own (PostgreSQL's WAL stays on its own disk, as on a
# server whose data volume fills), filled; builds are submitted until the
# queue's tables cannot grow: the refused submit answers 507 saying the storage
# is full, no build is left half-queued or stuck, reads go on, and builds run
# again once space is freed.  No VM: FROM scratch + COPY.
. tests/e2e/lib.sh
. tests/e2e/service-lib.sh
. tests/e2e/pg-lib.sh

SRV=
cleanup() {
	[ -n "$SRV" ] && kill "$SRV" 2>/dev/null
	wait "$SRV" 2>/dev/null
	pg_stop_full
	rm -rf "$T_TMP"
}
pg_stop_full() { [ -n "${PGDIR:-}" ] && { pg_stop_db; umount -l "$PGDIR/space" 2>/dev/null; pg_stop; }; }
pg_stop_db() { pg_as "$PGBIN/pg_ctl -D $PGDIR/db -m immediate stop" >/dev/null 2>&1; }
trap cleanup EXIT
[ -n "${KEEP_LOG:-}" ] && trap 'cp "$T_TMP/serve.log" /tmp/t0953.log; cleanup' EXIT
if [ "$(id -u)" != 0 ]; then
	skip "PostgreSQL queue on a full disk" "needs root to mount a tmpfs"
	exit 0
fi
pg_start
mkdir -p "$PGDIR/space" && mount -t tmpfs -o size=8m,mode=0700 tmpfs "$PGDIR/space" && chown postgres "$PGDIR/space" ||
	{ not_ok "a tmpfs for the tablespace mounts"; exit 1; }
$PSQL -c "CREATE TABLESPACE small LOCATION '$PGDIR/space'" >/dev/null &&
	$PSQL -c "ALTER ROLE kiln SET default_tablespace = small" >/dev/null ||
	{ not_ok "kiln's tables go to the small tablespace"; exit 1; }

export SOURCE_DATE_EPOCH=1700000000
DATA=$T_TMP/data
echo "{\"auth\": true, \"build\": {\"db\": \"$PG_CONNINFO\", \"host_builds\": 1}}" >"$T_TMP/serve.json"
A=$($KILN token create --data "$DATA" --scope team-a:build,pull,push a)
export KILN_TOKEN=$A
serve_build "$DATA" "$T_TMP/serve.json" || { not_ok "kiln serve --build starts on PostgreSQL"; sed 's/^/#   /' "$T_TMP/serve.log"; exit 1; }
expect_eq "kiln's queue table is in the small tablespace" \
	"$($PSQL -c "SELECT tablespace FROM pg_tables WHERE tablename = 'svc_builds'")" small

mkdir -p "$T_TMP/ctx"
echo one >"$T_TMP/ctx/a.txt"
printf 'FROM scratch\nARG N\nCOPY a.txt /a.txt\n' >"$T_TMP/ctx/Dockerfile"
expect_exit 0 "a build before the disk fills" $KILN build --remote "$URL" --build-arg N=0 -t app:v0 "$T_TMP/ctx"
states() { $PSQL -c "SELECT state, count(*) FROM svc_builds GROUP BY state ORDER BY state" | tr '\n' ' '; }

dd if=/dev/zero of="$PGDIR/space/filler" bs=4k status=none 2>/dev/null
# the tables' pages have some room left: builds go in until they cannot grow.
# Then either the submit is refused (507), or the build's log and end wait
# in the server's memory for space (its client waits with them)
rc=0 n=0
for n in $(seq 1 200); do
	timeout 20 $KILN build --remote "$URL" --build-arg "N=$n" -t "app:v$n" "$T_TMP/ctx" >"$T_TMP/out" 2>"$T_TMP/err"
	rc=$?
	[ $rc = 0 ] || break
done
last=$($PSQL -c "SELECT id FROM svc_builds ORDER BY qms DESC LIMIT 1")
echo "# build $n on the full disk: exit $rc ($(states))"
if [ $rc = 124 ]; then
	ok "a build meets the full queue (its end waits for space)"
	expect_grep "...the server says its end waits, and why" 'its end cannot be recorded: .*No space left on device.*retrying' "$T_TMP/serve.log"
	expect_grep "...and that its log lines are kept" 'its lines are kept in memory until space is freed' "$T_TMP/serve.log"
else
	expect_eq "a build is refused once the queue's tables cannot grow" "$rc" 1
	expect_grep "...saying the storage is full" 'storage is full' "$T_TMP/err"
	grep -q "$PGDIR\|pg_tblspc" "$T_TMP/err" && not_ok "...without the server's paths" || ok "...without the server's paths"
fi
curl -s -o /dev/null -w '%{http_code}' -H "X-API-Key: $A" "$URL/build/v1/builds" >"$T_TMP/code"
expect_eq "the builds are listed while the disk is full" "$(cat "$T_TMP/code")" 200
$KILN login -u x --password-stdin "$HOST" <<<"$A" >/dev/null 2>&1
expect_exit 0 "an image built before is pulled while the disk is full" $KILN pull "$HOST/team-a/app:v0"
kill -0 "$SRV" 2>/dev/null && ok "the server is up" || not_ok "the server is up"

rm -f "$PGDIR/space/filler"
for _ in $(seq 100); do $PSQL -c "SELECT count(*) FROM svc_builds WHERE state IN ('queued', 'building')" | grep -qx 0 && break; sleep 0.2; done
expect_eq "once space is freed no build is left queued or running" \
	"$($PSQL -c "SELECT count(*) FROM svc_builds WHERE state IN ('queued', 'building')")" 0
expect_eq "...and none failed but for the full disk" \
	"$($PSQL -c "SELECT count(*) FROM svc_builds WHERE state = 'failed' AND reason NOT LIKE '%space%' AND reason NOT LIKE '%full%'")" 0
if [ $rc = 124 ]; then
	curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$last/logs" >"$T_TMP/log"
	expect_grep "...the waiting build's log is whole: its step" '"step_done".*"instruction":"COPY a.txt /a.txt"' "$T_TMP/log"
	expect_grep "...and its end" '"state":"done"' "$T_TMP/log"
	expect_eq "...it is done" "$(curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$last" | jq -r .state)" done
fi
expect_exit 0 "the refused build succeeds once space is freed" $KILN build --remote "$URL" --build-arg "N=$n" -t "app:v$n" "$T_TMP/ctx"
expect_exit 0 "...and a new one" $KILN build --remote "$URL" --build-arg N=new -t app:new "$T_TMP/ctx"
kill -0 "$SRV" 2>/dev/null && ok "the server is up at the end" || not_ok "the server is up at the end"
