#!/usr/bin/env bash
# t0583-build-remote-flags.sh — kiln build --remote takes the local build's
# flags (no VM: FROM scratch + COPY): -f - (the Dockerfile from stdin, named
# <stdin> in errors, the same digest as a local build), --oci-out and
# --rootfs-out (the published result downloaded), --secret (sent for that
# build only: its plaintext nowhere in the server's data directory or
# database, the build pinned to the host holding it in memory, a restart
# failing it clearly, never sent over plain HTTP to a remote host), --ssh
# refused saying why; the client on the registry client's HTTP transport
# (keep-alive, retries); the svc_ tables' schema version (an old database
# migrated, a newer one refused untouched).
. tests/e2e/lib.sh

export SOURCE_DATE_EPOCH=1700000000
DATA=$T_TMP/data
echo '{"auth": true, "build": {"host_builds": 1, "fetch_private": true}}' >"$T_TMP/serve.json"
A=$($KILN token create --data "$DATA" --scope team-a:build,pull,push a)
SRV=
start_server() {
	: >"$T_TMP/serve.log"
	$KILN serve --addr 127.0.0.1:0 --data "$DATA" --config "$T_TMP/serve.json" 2>"$T_TMP/serve.log" &
	SRV=$!
	for _ in $(seq 100); do grep -q listening "$T_TMP/serve.log" && break; sleep 0.1; done
	PORT=$(grep -o '127.0.0.1:[0-9]*' "$T_TMP/serve.log" | head -1 | cut -d: -f2)
	URL=http://127.0.0.1:$PORT
}
stop_server() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; SRV=; }
SLOW= AGENT=
trap 'stop_server; [ -n "$SLOW" ] && kill $SLOW 2>/dev/null; [ -n "$AGENT" ] && kill $AGENT 2>/dev/null; rm -rf "$T_TMP"' EXIT
start_server
export KILN_TOKEN=$A

C=$T_TMP/ctx
mkdir -p "$C/sub"
echo one >"$C/a.txt"
echo two >"$C/sub/b.txt"
printf 'FROM scratch\nCOPY a.txt /a.txt\nCOPY sub/ /sub/\n' >"$T_TMP/Dockerfile.in"

# -f -
KILN_HOME=$T_TMP/local expect_exit 0 "a local build from stdin" $KILN build -f - -t app:1 "$C" <"$T_TMP/Dockerfile.in"
LOCAL=$(head -1 "$T_TMP/out")
expect_exit 0 "a remote build with -f - (the Dockerfile on stdin)" $KILN build --remote "$URL" -f - -t app:1 "$C" <"$T_TMP/Dockerfile.in"
expect_eq "gives the local build's digest" "$(head -1 "$T_TMP/out")" "$LOCAL"
printf 'FROM scratch\nBOGUS x\n' >"$T_TMP/bad.in"
expect_exit 1 "a bad Dockerfile on stdin fails remotely" $KILN build --remote "$URL" -f - "$C" <"$T_TMP/bad.in"
expect_grep "naming <stdin>:LINE:COL as a local build does" '<stdin>:2:1: unknown instruction' "$T_TMP/err"

# the build's process was started ahead (`kiln --wait-job`, its exec paid
# while idle) and is used once: a new one waits for the next build
waiting() { ps -o pid=,args= --ppid "$SRV" | awk '$3 == "--wait-job" {print $1}' | sort | tr '\n' ' '; }
W1=$(waiting)
expect_eq "the server keeps one child started ahead per worker" "$(echo $W1 | wc -w)" 1
expect_exit 0 "a remote build (a new request: not answered from a record)" $KILN build --remote "$URL" -f - -t app:waitjob "$C" <"$T_TMP/Dockerfile.in"
for _ in $(seq 50); do W2=$(waiting); [ -n "$W2" ] && [ "$W2" != "$W1" ] && break; sleep 0.1; done
if [ -n "$W1" ] && ! kill -0 $W1 2>/dev/null && [ -n "$W2" ] && [ "$W2" != "$W1" ]; then
	ok "...ran in it (gone after the build), and another waits"
else not_ok "...ran in it (gone after the build), and another waits (before: $W1, after: $W2)"; fi

# the child takes the context's digests from the server's store (the client
# hashed the files, the store verified them): --context-digests, as a local
# build takes them
printf '{"a.txt":"%s","sub/b.txt":"%s"}' "sha256:$(sha256sum <"$C/a.txt" | cut -c1-64)" \
	"sha256:$(sha256sum <"$C/sub/b.txt" | cut -c1-64)" >"$T_TMP/digests.json"
printf '{"a.txt":"%s","sub/b.txt":"sha256:%064d"}' "sha256:$(sha256sum <"$C/a.txt" | cut -c1-64)" 0 >"$T_TMP/wrong.json"
KILN_HOME=$T_TMP/hint expect_exit 0 "a local build with the right --context-digests" $KILN build -f - --context-digests "$T_TMP/digests.json" -t app:1 "$C" <"$T_TMP/Dockerfile.in"
expect_eq "...gives the digest of one that hashes" "$(head -1 "$T_TMP/out")" "$LOCAL"
KILN_HOME=$T_TMP/hint expect_exit 0 "a rebuild with other digests for a file" $KILN build -f - --context-digests "$T_TMP/wrong.json" -t app:1 "$C" <"$T_TMP/Dockerfile.in"
expect_eq "...takes them as they are, not hashing (that file's step misses the cache)" "$(grep -c '^  cache miss' "$T_TMP/err")" 1
echo '[1]' >"$T_TMP/bad.json"
KILN_HOME=$T_TMP/hint expect_exit 1 "--context-digests that is not an object" $KILN build -f - --context-digests "$T_TMP/bad.json" "$C" <"$T_TMP/Dockerfile.in"
expect_grep "...is refused saying so" 'context-digests.*want a JSON object' "$T_TMP/err"

# the registry client's transport: one kept-alive connection, retries with backoff
KILN_LOG=debug expect_exit 0 "a remote build with the debug log" $KILN build --remote "$URL" -f - -t app:1 "$C" <"$T_TMP/Dockerfile.in"
expect_grep "its requests share one kept-alive connection" 'build server .*: [2-9][0-9]* requests over 1 connections' "$T_TMP/err"
expect_grep "...two for a rebuild whose files the server has (the submit, the log)" 'build server .*: 2 requests over' "$T_TMP/err"
H=sha256:$(printf 'never uploaded %s' "$RANDOM" | sha256sum | cut -c1-64)
N=$(sqlite3 "$DATA/meta.db" "SELECT count(*) FROM svc_builds")
curl -s -o "$T_TMP/miss.json" -w '%{http_code}' -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds?missing=1" \
	-d "{\"dockerfile\":\"FROM scratch\\nCOPY f /f\\n\",\"files\":[{\"path\":\"f\",\"mode\":33188,\"digest\":\"$H\"}]}" >"$T_TMP/code"
expect_eq "a submit with ?missing=1 naming a file not uploaded answers 409" "$(cat "$T_TMP/code")" 409
expect_eq "...with the digests the server lacks" "$(jq -r '.missing[0]' "$T_TMP/miss.json")" "$H"
expect_eq "...and queues nothing" "$(sqlite3 "$DATA/meta.db" "SELECT count(*) FROM svc_builds")" "$N"
KILN_REGISTRY_RETRIES=2 expect_exit 1 "a build server that does not answer" $KILN build --remote http://127.0.0.1:1 -f - "$C" <"$T_TMP/Dockerfile.in"
expect_grep "is retried with backoff first" 'after 2 retries' "$T_TMP/err"

# a retried submit (the transport retries after errors) queues one build per client key
expect_eq "kiln build --remote sends a key with its request" \
	"$(sqlite3 "$DATA/meta.db" "SELECT length(client_key) FROM svc_builds ORDER BY qms DESC LIMIT 1")" 32
KEY=0123456789abcdef0123456789abcdef
sub() { curl -s -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds" -d "{\"dockerfile\":\"FROM scratch\\n\",\"client_key\":\"$KEY\"}" | jq -r .id; }
K1=$(sub)
K2=$(sub)
expect_eq "the same key submitted twice is one build" "$K2" "$K1"
expect_eq "...one row" "$(sqlite3 "$DATA/meta.db" "SELECT count(*) FROM svc_builds WHERE client_key = '$KEY'")" 1
expect_eq "a malformed key is refused" "$(curl -s -o /dev/null -w '%{http_code}' -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds" \
	-d '{"dockerfile":"FROM scratch\n","client_key":"no spaces"}')" 400

# --oci-out / --rootfs-out: the published image downloaded
expect_exit 0 "--oci-out and --rootfs-out with --remote" $KILN build --remote "$URL" -f - -t app:2 \
	--oci-out "$T_TMP/oci" --rootfs-out "$T_TMP/root.ext4" "$C" <"$T_TMP/Dockerfile.in"
expect_eq "the OCI layout holds the build's manifest" "$(jq -r '.manifests[0].digest' "$T_TMP/oci/index.json")" "$LOCAL"
expect_eq "named by its tag" "$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "$T_TMP/oci/index.json")" 2
if command -v skopeo >/dev/null; then
	expect_exit 0 "skopeo reads the layout" skopeo inspect --raw "oci:$T_TMP/oci:2"
else skip "skopeo reads the layout" "no skopeo"; fi
expect_exit 0 "the rootfs is a clean ext4" e2fsck -fn "$T_TMP/root.ext4"
expect_eq "holding the image's files" "$(debugfs -R 'cat /sub/b.txt' "$T_TMP/root.ext4" 2>/dev/null)" two
expect_exit 2 "--oci-out with --remote wants a name" $KILN build --remote "$URL" --oci-out "$T_TMP/oci2" "$C"

# --ssh: refused, saying why
ssh-agent -a "$T_TMP/agent.sock" -D >/dev/null 2>&1 &
AGENT=$!
for _ in $(seq 50); do [ -S "$T_TMP/agent.sock" ] && break; sleep 0.1; done
expect_exit 2 "--ssh with --remote is refused" $KILN build --remote "$URL" --ssh "default=$T_TMP/agent.sock" "$C"
expect_grep "saying why and what to use" 'not forwarded to a remote build.*--secret instead' "$T_TMP/err"
kill $AGENT 2>/dev/null
wait $AGENT 2>/dev/null
AGENT=

# --secret: accepted for the build, stored nowhere
PLAIN=kiln-t0583-$RANDOM$RANDOM$RANDOM-plain
printf '%s' "$PLAIN" >"$T_TMP/secret.src"
printf 'FROM scratch\nCOPY a.txt /s.txt\n' >"$C/Dockerfile.s"
expect_exit 0 "a remote build with --secret (file)" $KILN build --remote "$URL" -f "$C/Dockerfile.s" -t sec:1 \
	--secret "id=tok,src=$T_TMP/secret.src" "$C"
TOKVAR=$PLAIN expect_exit 0 "and with --secret env=" $KILN build --remote "$URL" -f "$C/Dockerfile.s" -t sec:2 \
	--secret id=tok2,env=TOKVAR "$C"
SID=$(grep -o 'as build b-[0-9a-f]*' "$T_TMP/err" | cut -d' ' -f3)
expect_eq "the stored request names the secret's id, not its bytes" \
	"$(sqlite3 "$DATA/meta.db" "SELECT json_extract(request, '\$.secret_ids[0]') || ':' || coalesce(json_extract(request, '\$.secrets'), 'none') FROM svc_builds WHERE id = '$SID'")" \
	"tok2:none"
expect_eq "the build was pinned to the host that held it" \
	"$(sqlite3 "$DATA/meta.db" "SELECT pin = host FROM svc_builds WHERE id = '$SID'")" 1
expect_exit 1 "a secret is not sent over plain HTTP to a remote host" \
	$KILN build --remote http://192.0.2.1:9 --secret "id=tok,src=$T_TMP/secret.src" "$C"
expect_grep "saying so" 'plain HTTP; secrets go only over HTTPS' "$T_TMP/err"

# a queued build with a secret, then a restart: it fails saying why (its secret was in memory only)
python3 tests/slow_http.py "$T_TMP/slow.port" 60 40 &
SLOW=$!
for _ in $(seq 50); do [ -s "$T_TMP/slow.port" ] && break; sleep 0.1; done
SLOWURL=http://127.0.0.1:$(cat "$T_TMP/slow.port")/x
state() { curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$1" | jq -r "${2:-.state}"; }
W2=$(waiting)
touch "$KILN" # a newer kiln binary: the child started ahead by the older one is not used
T1=$(curl -s -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds" -d "{\"dockerfile\":\"FROM scratch\\nADD $SLOWURL /x\\n\"}" | jq -r .id)
for _ in $(seq 100); do [ "$(state "$T1")" = building ] && break; sleep 0.1; done
if ps -o args= --ppid "$SRV" | grep -q -- ' build --json ' && [ -n "$W2" ] && ! kill -0 $W2 2>/dev/null; then
	ok "after the kiln binary changed a build runs in a process of its own, the older child stopped"
else not_ok "after the kiln binary changed a build runs in a process of its own, the older child stopped ($(ps -o args= --ppid "$SRV" | tr '\n' ';'))"; fi
B64=$(printf '%s' "$PLAIN" | base64 -w0)
T2=$(curl -s -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds" \
	-d "{\"dockerfile\":\"FROM scratch\\n\",\"secrets\":[{\"id\":\"tok\",\"data\":\"$B64\"}]}" | jq -r .id)
expect_eq "a build with a secret waits queued" "$(state "$T2")" queued
expect_eq "a bad secret is refused" "$(curl -s -o /dev/null -w '%{http_code}' -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds" \
	-d '{"dockerfile":"FROM scratch\n","secrets":[{"id":"a,b","data":"eA=="}]}')" 400
stop_server
kill $SLOW 2>/dev/null
wait $SLOW 2>/dev/null
SLOW=
start_server
expect_eq "after a restart the queued build with a secret failed" "$(state "$T2")" failed
expect_grep "saying its secrets were in memory only" 'secrets were kept in memory only' <(state "$T2" .reason)
if grep -rlaF "$PLAIN" "$DATA" "$T_TMP/serve.log" >"$T_TMP/found"; then
	not_ok "the secret's plaintext is nowhere in the server's data directory, database or log"
	sed 's/^/#   found in: /' "$T_TMP/found"
else ok "the secret's plaintext is nowhere in the server's data directory, database or log"; fi
if grep -rlaF "$B64" "$DATA" >"$T_TMP/found"; then
	not_ok "nor its base64"
	sed 's/^/#   found in: /' "$T_TMP/found"
else ok "nor its base64"; fi

# the schema version of the svc_ tables
expect_eq "the svc_ tables record their schema version" "$(sqlite3 "$DATA/meta.db" "SELECT v FROM svc_meta WHERE k = 'schema'")" 5
stop_server
OLD=$T_TMP/old
mkdir -p "$OLD"
sqlite3 "$OLD/meta.db" "CREATE TABLE svc_builds(id TEXT PRIMARY KEY, team TEXT NOT NULL, name TEXT,
 state TEXT NOT NULL, request TEXT NOT NULL, created BIGINT NOT NULL, started BIGINT NOT NULL DEFAULT 0,
 ended BIGINT NOT NULL DEFAULT 0, heartbeat BIGINT NOT NULL DEFAULT 0, host TEXT,
 step INTEGER NOT NULL DEFAULT 0, total INTEGER NOT NULL DEFAULT 0, instruction TEXT, reason TEXT,
 location TEXT, image TEXT, image_digest TEXT, template_ref TEXT, template_digest TEXT,
 cancel INTEGER NOT NULL DEFAULT 0, time_limit BIGINT NOT NULL, nlog BIGINT NOT NULL DEFAULT 0,
 qms BIGINT NOT NULL DEFAULT 0);
INSERT INTO svc_builds(id, team, state, request, created, time_limit) VALUES('b-old', 'default', 'done', '{}', 1, 60);"
# E2B's state as an older kiln kept it, in a sqlite file of its own
mkdir -p "$OLD/e2b"
sqlite3 "$OLD/e2b/e2b.db" "PRAGMA journal_mode=WAL;
CREATE TABLE templates (id TEXT PRIMARY KEY, team TEXT NOT NULL, name TEXT NOT NULL, cpus INTEGER NOT NULL,
 memory INTEGER NOT NULL, created INTEGER NOT NULL, updated INTEGER NOT NULL, UNIQUE(team, name));
CREATE TABLE builds (id TEXT PRIMARY KEY, template TEXT NOT NULL, team TEXT NOT NULL, tag TEXT NOT NULL, svc_id TEXT,
 error TEXT, lines TEXT, cpus INTEGER NOT NULL, memory INTEGER NOT NULL, created INTEGER NOT NULL, updated INTEGER NOT NULL);
CREATE TABLE tags (template TEXT NOT NULL, tag TEXT NOT NULL, build TEXT NOT NULL, created INTEGER NOT NULL,
 PRIMARY KEY(template, tag));
CREATE TABLE files (team TEXT NOT NULL, hash TEXT NOT NULL, digest TEXT NOT NULL, size INTEGER NOT NULL,
 created INTEGER NOT NULL, PRIMARY KEY(team, hash));
INSERT INTO templates VALUES('oldtemplateid0000001', 'default', 'old-app', 2, 512, 1700000000, 1700000000);
INSERT INTO builds VALUES('11111111-1111-4111-8111-111111111111', 'oldtemplateid0000001', 'default', 'v1', NULL,
 'it failed then', NULL, 2, 512, 1700000000, 1700000001);
INSERT INTO tags VALUES('oldtemplateid0000001', 'v1', '11111111-1111-4111-8111-111111111111', 1700000001);
INSERT INTO files VALUES('default', 'abc', 'sha256:$(printf '%064d' 0)', 10, 1700000000);"
DATA=$OLD
echo '{"build": {"host_builds": 1}}' >"$T_TMP/serve.json"
KILN_LOG=info start_server
expect_eq "a first-version database is migrated (pin, client_key and replay columns, e2b_ tables added)" \
	"$(sqlite3 "$OLD/meta.db" "SELECT v FROM svc_meta WHERE k = 'schema'; SELECT count(*) FROM pragma_table_info('svc_builds') WHERE name IN ('pin', 'client_key', 'replay'); SELECT count(*) FROM sqlite_master WHERE name LIKE 'e2b_%' AND type = 'table'")" "5
3
4"
expect_eq "keeping its builds" "$(curl -s "$URL/build/v1/builds/b-old" | jq -r .state)" done
expect_eq "E2B's old state is moved into the service's database" \
	"$(sqlite3 "$OLD/meta.db" "SELECT count(*) FROM e2b_templates; SELECT count(*) FROM e2b_builds; SELECT count(*) FROM e2b_tags; SELECT count(*) FROM e2b_files")" "1
1
1
1"
expect_eq "...the old file kept aside, moved" "$(ls "$OLD/e2b" | grep -c '^e2b.db.moved$'),$(ls "$OLD/e2b" | grep -c '^e2b.db$')" "1,0"
expect_grep "...saying so" 'E2B state: 4 rows moved from .*e2b.db' "$T_TMP/serve.log"
expect_eq "...and E2B's API answers from it" "$(curl -s "$URL/templates" | jq -c '[.[] | [.templateID, .names[0], .cpuCount, .memoryMB]]')" \
	'[["oldtemplateid0000001","old-app",2,512]]'
stop_server
sqlite3 "$OLD/meta.db" "UPDATE svc_meta SET v = '99' WHERE k = 'schema'"
expect_exit 1 "a database from a newer kiln is refused" timeout 20 $KILN serve --addr 127.0.0.1:0 --data "$OLD" --config "$T_TMP/serve.json"
expect_grep "saying so" 'schema version 99, newer than this kiln' "$T_TMP/err"
expect_eq "and left untouched" "$(sqlite3 "$OLD/meta.db" "SELECT v FROM svc_meta WHERE k = 'schema'")" 99
