#!/usr/bin/env bash
# t0717-registry-upgrade.sh — meta.db's schema version across kiln versions:
# a database made before versions were kept (the tables and index added since
# dropped, user_version 0) is brought to this kiln's version when kiln serve
# opens it, its tags served with the same digests; a database a newer kiln
# wrote is refused by kiln serve and the admin commands with a message naming
# both versions, and left as it was; a restore of a newer kiln's backup is
# refused before anything is placed.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

cleanup() {
	reg_stop
	rm -rf "$T_TMP"
}
trap cleanup EXIT
need_tools skopeo umoci sqlite3
cd "$T_TMP"
D="$T_TMP/data"
S="skopeo --command-timeout 60s"
ver() { sqlite3 "$1" 'PRAGMA user_version'; }
dgst() { $S inspect --tls-verify=false --format '{{.Digest}}' "docker://$REG/team-a/app:$1" 2>/dev/null; }

reg_start "$D" || { not_ok "kiln serve starts"; exit 1; }
umoci init --layout img >/dev/null
for i in 1 2; do
	umoci new --image "img:v$i" >/dev/null
	head -c $((50000 * i)) /dev/urandom >"l$i" && umoci insert --image "img:v$i" "l$i" /l >/dev/null
	expect_exit 0 "push team-a/app:v$i" $S copy --dest-tls-verify=false "oci:img:v$i" "docker://$REG/team-a/app:v$i"
done
V1=$(dgst v1)
V2=$(dgst v2)
reg_stop
expect_eq "a new meta.db is at schema version 1" "$(ver "$D/meta.db")" 1

# ---- upgrade: the schema of kiln before versions (no quotas, gc_runs, tags_digest)
sqlite3 "$D/meta.db" 'DROP TABLE quotas; DROP TABLE gc_runs; DROP INDEX tags_digest; PRAGMA user_version = 0'
expect_eq "made old: version 0, no quotas table" \
	"$(ver "$D/meta.db") $(sqlite3 "$D/meta.db" "SELECT count(*) FROM sqlite_master WHERE name = 'quotas'")" "0 0"
KILN_LOG=info reg_start "$D" || { not_ok "kiln serve starts on the old database"; exit 1; }
expect_grep "it says it migrated" 'schema version 0 -> 1' "$REG_LOG"
expect_eq "the database is at version 1 now" "$(ver "$D/meta.db")" 1
expect_eq "with the tables and index added since" \
	"$(sqlite3 "$D/meta.db" "SELECT group_concat(name, ' ') FROM (SELECT name FROM sqlite_master WHERE name IN ('quotas', 'gc_runs', 'tags_digest') ORDER BY name)")" \
	"gc_runs quotas tags_digest"
expect_eq "v1 and v2 served with their digests" "$(dgst v1) $(dgst v2)" "$V1 $V2"
rm -rf pulled
expect_exit 0 "v2 pulls whole" $S copy --src-tls-verify=false "docker://$REG/team-a/app:v2" oci:pulled:v2
expect_exit 0 "a quota is set on the migrated database" "$KILN" registry quota team-a --data "$D" bytes=1G
expect_exit 0 "and gc runs on it" "$KILN" registry gc --data "$D"
reg_stop
expect_eq "the migrated database is whole" "$(sqlite3 "$D/meta.db" 'PRAGMA integrity_check')" ok

# ---- a newer kiln's database: refused, untouched
sqlite3 "$D/meta.db" 'PRAGMA user_version = 2'
before=$(sqlite3 "$D/meta.db" .dump | sha256sum)
expect_exit 1 "kiln serve refuses a database at a newer version" \
	timeout 20 "$KILN" serve --addr 127.0.0.1:0 --data "$D"
expect_grep "naming both versions" 'meta.db: its schema version 2 is newer than this kiln.s 1' "$T_TMP/err"
expect_grep "and what to do" 'run that kiln or a later one, or restore a backup taken before the upgrade' "$T_TMP/err"
expect_exit 1 "kiln registry ls refuses it" "$KILN" registry ls --data "$D"
expect_grep "...saying so" 'schema version 2 is newer than this kiln' "$T_TMP/err"
expect_exit 1 "kiln registry gc refuses it" "$KILN" registry gc --data "$D"
expect_exit 1 "kiln token create refuses it" "$KILN" token create --data "$D" --scope team-a:pull x
expect_eq "left at version 2" "$(ver "$D/meta.db")" 2
expect_eq "its content unchanged" "$(sqlite3 "$D/meta.db" .dump | sha256sum)" "$before"

# ---- a newer kiln's backup is not restored
sqlite3 "$D/meta.db" 'PRAGMA user_version = 1'
expect_exit 0 "a backup" "$KILN" registry backup --data "$D" --blobs "$T_TMP/b"
sqlite3 "$T_TMP/b/meta.db" 'PRAGMA user_version = 3'
expect_exit 1 "restoring a newer kiln's backup is refused" "$KILN" registry restore --data "$T_TMP/d2" "$T_TMP/b"
expect_grep "naming its version" 'restore .*/b/meta.db: its schema version 3 is newer than this kiln.s 1' "$T_TMP/err"
n=$(find "$T_TMP/d2" -type f 2>/dev/null | wc -l)
expect_eq "nothing placed in the target" "$n" 0
sqlite3 "$T_TMP/b/meta.db" 'PRAGMA user_version = 1'
expect_exit 0 "the same backup at this kiln's version restores" "$KILN" registry restore --data "$T_TMP/d2" "$T_TMP/b"
reg_start "$T_TMP/d2" || { not_ok "kiln serve starts on the restore"; exit 1; }
expect_eq "which serves v1 and v2" "$(dgst v1) $(dgst v2)" "$V1 $V2"
reg_stop
