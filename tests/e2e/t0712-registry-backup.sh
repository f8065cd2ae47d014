#!/usr/bin/env bash
# t0712-registry-backup.sh — `kiln registry backup` while skopeo pushes to a
# running `kiln serve`, then `kiln registry restore` onto a fresh data
# directory: a second server on it serves every tag the backup's snapshot had,
# with the same digests and the same tokens; a restore lacking blobs names
# them and restores nothing; a restore over a registry is refused; an earlier
# backup is updated copying only new blobs; a torn or foreign DEST refused.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

LOOP=
cleanup() {
	[ -n "$LOOP" ] && kill "$LOOP" 2>/dev/null && wait "$LOOP" 2>/dev/null
	reg_stop
	rm -rf "$T_TMP"
}
trap cleanup EXIT
need_tools skopeo umoci sqlite3
cd "$T_TMP"
D="$T_TMP/data"
echo '{"auth": true}' >auth.json
PUSH=$(reg_tok --scope 'team-a:*' pusher)
reg_start "$D" --config auth.json || { not_ok "kiln serve starts"; exit 1; }
S="skopeo --command-timeout 60s"
C="--dest-creds=ci:$PUSH --dest-tls-verify=false"

umoci init --layout img >/dev/null
for i in 1 2 3; do
	umoci new --image "img:v$i" >/dev/null
	head -c $((100000 * i)) /dev/urandom >"l$i" && umoci insert --image "img:v$i" "l$i" /l >/dev/null
	expect_exit 0 "push team-a/app:v$i" $S copy $C "oci:img:v$i" "docker://$REG/team-a/app:v$i"
done
# pushes go on while the backup is taken
(
	for i in $(seq 10 49); do
		umoci new --image "img:w$i" >/dev/null 2>&1
		head -c 50000 /dev/urandom >"w$i" && umoci insert --image "img:w$i" "w$i" /w >/dev/null 2>&1
		$S copy $C "oci:img:w$i" "docker://$REG/team-a/load:w$i" >/dev/null 2>&1
	done
) &
LOOP=$!
sleep 0.5
expect_exit 0 "kiln registry backup --blobs under push load" "$KILN" registry backup --data "$D" --blobs "$T_TMP/b1"
expect_grep "it says what it copied" '^backed up: metadata and [0-9]+ blobs' "$T_TMP/out"
wait "$LOOP"
LOOP=
expect_eq "backup.json written" "$(jq -r .format b1/backup.json)" 1
expect_eq "the copy is a whole sqlite database" "$(sqlite3 b1/meta.db 'PRAGMA integrity_check')" ok
expect_eq "blobs.txt lists what the copy needs" "$(wc -l <b1/blobs.txt)" "$(jq -r .blobs b1/backup.json)"
# the tags the backup's snapshot had, with their digests
sqlite3 b1/meta.db "SELECT r.name || ':' || t.name || ' ' || t.digest FROM tags t JOIN repos r ON r.id = t.repo ORDER BY 1" >tags.txt
n=$(wc -l <tags.txt)
if [ "$n" -ge 3 ]; then ok "the snapshot holds the 3 tags pushed before it (and $((n - 3)) of the load's)"; else
	not_ok "the snapshot holds the 3 tags pushed before it (got $n)"; fi

# ---- restore elsewhere and serve it
expect_exit 0 "kiln registry restore onto a fresh directory" "$KILN" registry restore --data "$T_TMP/r1" "$T_TMP/b1"
expect_grep "it says what it placed" "^restored: metadata and $(jq -r .blobs b1/backup.json) blobs" "$T_TMP/out"
reg_stop
reg_start "$T_TMP/r1" --config auth.json || { not_ok "kiln serve starts on the restored directory"; exit 1; }
bad=0
while read -r ref digest; do
	got=$($S inspect --creds "ci:$PUSH" --tls-verify=false --format '{{.Digest}}' "docker://$REG/$ref" 2>/dev/null)
	[ "$got" = "$digest" ] || { bad=$((bad + 1)); echo "# $ref: got '$got' want $digest"; }
done <tags.txt
expect_eq "every tag of the snapshot served with its digest, the same token accepted" "$bad" 0
rm -rf pulled
expect_exit 0 "a pull of team-a/app:v3 from the restored server" $S copy --src-creds="ci:$PUSH" --src-tls-verify=false \
	"docker://$REG/team-a/app:v3" oci:pulled:v3
expect_exit 0 "its layer is the one pushed" cmp <(umoci raw unpack --image pulled:v3 p3 >/dev/null 2>&1; cat p3/l) l3
reg_stop

# ---- a restore that lacks blobs
expect_exit 0 "a backup without --blobs" "$KILN" registry backup --data "$T_TMP/r1" "$T_TMP/b2"
expect_exit 1 "its restore with no blobs anywhere fails" "$KILN" registry restore --data "$T_TMP/r2" "$T_TMP/b2"
expect_grep "naming the missing blobs" 'blobs the backup.s metadata needs are in neither .*: sha256:[0-9a-f]{64}' "$T_TMP/err"
[ ! -e "$T_TMP/r2/meta.db" ] && ok "no metadata restored" || not_ok "no metadata restored"
mkdir -p r2 && cp -a r1/blobs r2/
expect_exit 0 "once the blobs are copied in, the restore succeeds" "$KILN" registry restore --data "$T_TMP/r2" "$T_TMP/b2"
expect_grep "copying none" 'blobs copied \(0 bytes\)' "$T_TMP/out"
# a blob DIR lacks is copied from the backup (and verified), the rest left
f=$(find r1/blobs -type f | head -1)
mkdir -p r3/blobs && cp -a r1/blobs/. r3/blobs/ && rm -f "r3/${f#r1/}"
expect_exit 0 "a restore copies only what DIR lacks" "$KILN" registry restore --data "$T_TMP/r3" "$T_TMP/b1"
expect_grep "one blob copied" '; 1 blobs copied' "$T_TMP/out"

# ---- refusals
expect_exit 1 "a restore over a registry is refused" "$KILN" registry restore --data "$T_TMP/r1" "$T_TMP/b1"
expect_grep "saying why" 'meta.db exists: a restore goes to a fresh data directory' "$T_TMP/err"
mkdir -p other && echo x >other/file
expect_exit 1 "a backup into a directory holding something else is refused" "$KILN" registry backup --data "$D" other
expect_grep "saying why" 'is not empty and holds no kiln backup' "$T_TMP/err"
expect_eq "...and it is untouched" "$(ls other)" file
mkdir -p torn && cp b1/meta.db torn/
expect_exit 1 "a backup without backup.json is not restored" "$KILN" registry restore --data "$T_TMP/r4" "$T_TMP/torn"
expect_grep "saying why" 'is not a complete kiln backup' "$T_TMP/err"

# ---- an earlier backup updated: only the new blobs copied
umoci new --image img:v9 >/dev/null && head -c 70000 /dev/urandom >l9 && umoci insert --image img:v9 l9 /l >/dev/null
reg_start "$D" --config auth.json || { not_ok "kiln serve starts again"; exit 1; }
expect_exit 0 "backup --blobs over the earlier one" "$KILN" registry backup --data "$D" --blobs "$T_TMP/b1"
expect_exit 0 "push team-a/app:v9" $S copy $C oci:img:v9 "docker://$REG/team-a/app:v9"
expect_exit 0 "and again after one push" "$KILN" registry backup --data "$D" --blobs "$T_TMP/b1"
expect_grep "copies the new image's 3 blobs only" '; 3 blobs copied' "$T_TMP/out"
expect_eq "its snapshot has the new tag" \
	"$(sqlite3 b1/meta.db "SELECT count(*) FROM tags WHERE name = 'v9'")" 1
