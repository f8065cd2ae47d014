#!/usr/bin/env bash
# t0580-build-remote.sh — kiln build --remote against kiln serve --build with
# auth on, two teams, no VM (FROM scratch + COPY, so it is cheap): the same
# step lines, only missing files uploaded (a one-file change sends one file),
# the result published under the team's namespace and pulled elsewhere, a
# Dockerfile error with FILE:LINE:COL, a server-side base refused, a context
# over the limit, and each team blind to the other's builds, logs, context
# blobs and cache; X-API-Key accepted; a restart keeps queued builds.
. tests/e2e/lib.sh

# fetch_private: the cancel and time-limit cases ADD from a server on 127.0.0.1
# the client sends it with the request, so remote and local images are byte-identical
export SOURCE_DATE_EPOCH=1700000000
DATA=$T_TMP/data
cat >"$T_TMP/serve.json" <<JSON
{"auth": true, "build": {"context_max": "3M", "host_builds": 1, "fetch_private": true}}
JSON
A=$($KILN token create --data "$DATA" --scope team-a:build,pull,push a)
B=$($KILN token create --data "$DATA" --scope team-b:build,pull,push b)
MET=$($KILN token create --data "$DATA" --scope '*:metrics' prometheus)
scrape() { curl -s -H "Authorization: Bearer $MET" "$URL/metrics" >"$T_TMP/$1"; }
sample() { awk -v k="$2" '$1 == k { v = $2 } END { print v + 0 }' "$T_TMP/$1"; }
delta() { echo $(($(sample "$2" "$3") - $(sample "$1" "$3"))); }
start_server() {
	: >"$T_TMP/serve.log" # there before the loop below reads it
	$KILN serve --addr 127.0.0.1:0 --data "$DATA" --config "$T_TMP/serve.json" 2>"$T_TMP/serve.log" &
	SRV=$!
	for _ in $(seq 100); do grep -q listening "$T_TMP/serve.log" && break; sleep 0.1; done
	PORT=$(grep -o '127.0.0.1:[0-9]*' "$T_TMP/serve.log" | head -1 | cut -d: -f2)
	URL=http://127.0.0.1:$PORT
}
stop_server() { kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; }
trap 'stop_server; rm -rf "$T_TMP"' EXIT
start_server
expect_grep "serve --build announces the service" 'building' "$T_TMP/serve.log"

mkdir -p "$T_TMP/ctx/sub" "$T_TMP/ctx/skip"
echo one >"$T_TMP/ctx/a.txt"
echo two >"$T_TMP/ctx/sub/b.txt"
echo secret >"$T_TMP/ctx/skip/x"
echo skip >"$T_TMP/ctx/.dockerignore"
printf 'FROM scratch\nCOPY a.txt /a.txt\nCOPY sub/ /sub/\n' >"$T_TMP/ctx/Dockerfile"

export KILN_TOKEN=$A
scrape m0
expect_exit 0 "remote build succeeds" $KILN build --remote "$URL" -t app:v1 "$T_TMP/ctx"
expect_grep "same step lines as a local build" '^\[3/3\] COPY sub/ /sub/' "$T_TMP/err"
expect_grep "cache lines too" '^  cache miss' "$T_TMP/err"
expect_grep "every file uploaded the first time (.dockerignore applied)" 'files uploaded' "$T_TMP/err"
expect_grep "published under the team's namespace" '^published team-a/app:v1 sha256:' "$T_TMP/err"
D1=$(head -1 "$T_TMP/out")
BID=$(grep -o 'as build b-[0-9a-f]*' "$T_TMP/err" | cut -d' ' -f3)
expect_exit 0 "kiln registry history of the published tag" $KILN registry history --data "$DATA" team-a/app:v1
expect_grep "names the build that made it" "team-a/app:v1 .*$D1 build $BID\$|v1 $D1 build $BID\$" "$T_TMP/out"
# the local build of the same context gives the same image
KILN_HOME=$T_TMP/local expect_exit 0 "local build of the same context" $KILN build -t app:v1 "$T_TMP/ctx"
expect_eq "remote digest equals the local one" "$D1" "$(head -1 "$T_TMP/out")"

echo changed >"$T_TMP/ctx/sub/b.txt"
expect_exit 0 "rebuild after a one-file change" $KILN build --remote "$URL" -t app:v2 "$T_TMP/ctx"
expect_grep "only the changed file is uploaded" 'context: [0-9]+ entries, 1 files uploaded \([0-9]+ bytes in [0-9.]+ s\)' "$T_TMP/err"
expect_grep "the unchanged step is a cache hit" '^  cache hit' "$T_TMP/err"
scrape m1
if promtool check metrics <"$T_TMP/m1" >"$T_TMP/lint" 2>&1; then ok "promtool check metrics: clean with the build service"; else
	not_ok "promtool check metrics: clean with the build service"; sed 's/^/#   /' "$T_TMP/lint" | head
fi
expect_eq "/metrics: the 2 builds counted done" "$(delta m0 m1 'kiln_builds_ended_total{outcome="done"}')" 2
expect_eq "/metrics: their durations observed" "$(delta m0 m1 'kiln_build_duration_seconds_count{outcome="done"}')" 2
expect_eq "/metrics: the step cache's one hit" "$(delta m0 m1 'kiln_build_steps_total{cache="hit"}')" 1
expect_eq "/metrics: and its 3 misses" "$(delta m0 m1 'kiln_build_steps_total{cache="miss"}')" 3
expect_eq "/metrics: the queue is empty" "$(sample m1 'kiln_build_queue_depth{team="team-a"}')" 0
expect_eq "/metrics: one worker" "$(sample m1 kiln_build_workers)" 1
curl -s "$URL/readyz" >"$T_TMP/ready"
expect_grep "/readyz checks the build queue" '^build queue: ok' "$T_TMP/ready"

expect_exit 0 "--json events from a remote build" $KILN build --json --remote "$URL" "$T_TMP/ctx"
expect_grep "json step events" '^\{"event":"step","step":1,"total":3' "$T_TMP/out"
expect_grep "json done event" '^\{"event":"done","digest":"sha256:' "$T_TMP/out"

# kiln pull elsewhere with the team's token
KILN_HOME=$T_TMP/other $KILN login -u x --password-stdin "127.0.0.1:$PORT" <<<"$A" >/dev/null 2>&1
KILN_HOME=$T_TMP/other expect_exit 0 "the result pulls from the registry" $KILN pull "127.0.0.1:$PORT/team-a/app:v1"
expect_eq "pulled digest is the built one" "$(head -1 "$T_TMP/out")" "$D1"

# replays: a rebuild with the inputs of an earlier build is answered from
# its record (nothing run) as a rebuild from the cache; anything that
# changes what a build would do runs it
replayed() { grep -q 'same inputs as build' "$T_TMP/err"; }
build_id() { sed -n 's/^built .* as build \(b-[0-9a-f]*\)$/\1/p' "$T_TMP/err"; }
mkdir -p "$T_TMP/rb"
echo base >"$T_TMP/rb/b.txt"
printf 'FROM scratch\nCOPY b.txt /b.txt\n' >"$T_TMP/rb/Dockerfile.base"
expect_exit 0 "a base in the team's namespace" $KILN build --remote "$URL" -f "$T_TMP/rb/Dockerfile.base" -t rbase:1 "$T_TMP/rb"
printf 'FROM 127.0.0.1:%s/team-a/rbase:1\nCOPY b.txt /c.txt\n' "$PORT" >"$T_TMP/rb/Dockerfile"
expect_exit 0 "a build on it" $KILN build --remote "$URL" -t rapp:1 "$T_TMP/rb"
expect_grep "...runs its steps" '^  cache miss' "$T_TMP/err"
if replayed; then not_ok "...(no build before it)"; else ok "...(no build before it)"; fi
R1=$(head -1 "$T_TMP/out")
B1=$(build_id)
expect_exit 0 "its rebuild" $KILN build --remote "$URL" -t rapp:1 "$T_TMP/rb"
expect_grep "...is answered from that build's record" "^same inputs as build $B1: its result, every step from the cache, nothing run" "$T_TMP/err"
expect_grep "...with the step lines of a rebuild from the cache" '^\[2/2\] COPY b.txt /c.txt' "$T_TMP/err"
expect_eq "...every layer step a hit" "$(grep -c '^  cache hit' "$T_TMP/err") $(grep -c '^  cache miss' "$T_TMP/err")" "1 0"
expect_grep "...and what it published" "^published team-a/rapp:1 $R1" "$T_TMP/err"
expect_eq "...its result" "$(head -1 "$T_TMP/out")" "$R1"
B2=$(build_id)
expect_eq "...a build of its own, done, with the image" \
	"$(curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$B2" | jq -r '[.id != "'"$B1"'", .state, .image, .image_digest, .step, .total] | join(" ")')" \
	"true done team-a/rapp:1 $R1 2 2"
curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$B2/logs" >"$T_TMP/rlog"
expect_eq "...its log: a status naming the build, then that build's lines" \
	"$(jq -r 'select(.event == "status") | .state + " " + (.replay_of // "-")' "$T_TMP/rlog" | tr '\n' ' ')" "building $B1 done - "
expect_exit 0 "...the tag's history unchanged" $KILN registry history --data "$DATA" team-a/rapp:1
expect_eq "...(one change, by the build that made it)" "$(grep -c sha256: "$T_TMP/out")" 1
expect_exit 0 "--json: the same events" $KILN build --json --remote "$URL" -t rapp:1 "$T_TMP/rb"
expect_eq "...the status names the build it came from" "$(jq -r 'select(.replay_of) | .replay_of' "$T_TMP/out")" "$B1"
for i in 1 2; do $KILN build --remote "$URL" -f "$T_TMP/rb/Dockerfile.base" -t rsolo:1 "$T_TMP/rb" 2>"$T_TMP/err" >/dev/null; done
if replayed; then ok "a request on scratch is answered too"; else not_ok "a request on scratch is answered too"; fi
expect_exit 0 "--no-cache" $KILN build --remote "$URL" --no-cache -t rapp:1 "$T_TMP/rb"
if replayed; then not_ok "...runs"; else ok "...runs"; fi
expect_exit 0 "a build arg the Dockerfile does not use" $KILN build --remote "$URL" --build-arg X=1 -t rapp:1 "$T_TMP/rb"
if replayed; then not_ok "...is a new request: it runs"; else ok "...is a new request: it runs"; fi
printf 'FROM scratch\nCOPY --from=127.0.0.1:%s/team-a/rbase:1 /b.txt /x\n' "$PORT" >"$T_TMP/rb/Dockerfile.from"
$KILN build --remote "$URL" -f "$T_TMP/rb/Dockerfile.from" -t rfrom:1 "$T_TMP/rb" >/dev/null 2>&1
expect_exit 0 "a build with COPY --from an image, again" $KILN build --remote "$URL" -f "$T_TMP/rb/Dockerfile.from" -t rfrom:1 "$T_TMP/rb"
if replayed; then not_ok "...runs (every time)"; else ok "...runs (every time)"; fi
# another build moves the tag: the next runs (and publishes again)
expect_exit 0 "another build tagged rapp:1" $KILN build --remote "$URL" -f "$T_TMP/rb/Dockerfile.base" -t rapp:1 "$T_TMP/rb"
expect_exit 0 "the rebuild after it" $KILN build --remote "$URL" -t rapp:1 "$T_TMP/rb"
if replayed; then not_ok "...runs (its tag moved)"; else ok "...runs (its tag moved)"; fi
expect_grep "...and tags its result again" "^published team-a/rapp:1 $R1" "$T_TMP/err"
expect_exit 0 "then is answered again" $KILN build --remote "$URL" -t rapp:1 "$T_TMP/rb"
if replayed; then ok "...(the tag holds its result)"; else not_ok "...(the tag holds its result)"; fi
# the base moves: the build runs on the new one
echo base2 >"$T_TMP/rb/b.txt"
expect_exit 0 "the base rebuilt with other content" $KILN build --remote "$URL" -f "$T_TMP/rb/Dockerfile.base" -t rbase:1 "$T_TMP/rb"
echo base >"$T_TMP/rb/b.txt"
expect_exit 0 "the build on it" $KILN build --remote "$URL" -t rapp:1 "$T_TMP/rb"
if replayed; then not_ok "...runs (its base moved)"; else ok "...runs (its base moved)"; fi
if [ "$(head -1 "$T_TMP/out")" != "$R1" ]; then ok "...giving another image"; else not_ok "...giving another image"; fi

# a context of many files goes up over several connections at once
mkdir -p "$T_TMP/many/d"
for i in $(seq 40); do echo "file $i" >"$T_TMP/many/d/f$i"; done
printf 'FROM scratch\nCOPY d/ /d/\n' >"$T_TMP/many/Dockerfile"
expect_exit 0 "a build of 41 files" $KILN build --remote "$URL" -t many:1 "$T_TMP/many"
expect_grep "...uploads each file the server lacks" '^context: 42 entries, 41 files uploaded' "$T_TMP/err"
MANY=$(head -1 "$T_TMP/out")
KILN_HOME=$T_TMP/local expect_exit 0 "...the same image as a local build" $KILN build -t many:1 "$T_TMP/many"
expect_eq "...(digest)" "$(head -1 "$T_TMP/out")" "$MANY"

# bad input
printf 'FROM scratch\nCOPY --nope a.txt /\n' >"$T_TMP/ctx/Dockerfile.bad"
expect_exit 1 "a Dockerfile error fails" $KILN build --remote "$URL" -f "$T_TMP/ctx/Dockerfile.bad" "$T_TMP/ctx"
expect_grep "the error has FILE:LINE:COL" 'Dockerfile.bad:2:6: Unknown flag: nope' "$T_TMP/err"
printf 'FROM scratch\nCOPY missing /x\n' >"$T_TMP/ctx/Dockerfile.miss"
expect_exit 1 "a failing step fails the remote build (exit 1)" $KILN build --remote "$URL" -f "$T_TMP/ctx/Dockerfile.miss" "$T_TMP/ctx"
expect_grep "its reason names the step" 'Dockerfile.miss:2: \[2/2\] COPY missing /x' "$T_TMP/err"
scrape m2
expect_eq "/metrics: the failing step's build counted failed (the Dockerfile error never queued)" "$(delta m1 m2 'kiln_builds_ended_total{outcome="failed"}')" 1
ID=$(curl -s -H "X-API-Key: $A" "$URL/build/v1/builds?team=team-a" | jq -r '.builds[0].id')
curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$ID" >"$T_TMP/st.json"
expect_eq "status: failed, with the place" "$(jq -r '.state + " " + .location' "$T_TMP/st.json")" "failed Dockerfile.miss:2"
printf 'FROM oci:/etc\n' >"$T_TMP/ctx/Dockerfile.local"
expect_exit 1 "a base on the server's disk is refused" $KILN build --remote "$URL" -f "$T_TMP/ctx/Dockerfile.local" "$T_TMP/ctx"
expect_grep "with where and why" 'Dockerfile.local:1:1: base .oci:/etc. names a path on the build server' "$T_TMP/err"
printf 'FROM scratch\nRUN --mount=type=bind,from=oci-archive:/etc/x.tar,target=/x true\n' >"$T_TMP/ctx/Dockerfile.mnt"
expect_exit 1 "a RUN mounting an image on the server's disk is refused" $KILN build --remote "$URL" -f "$T_TMP/ctx/Dockerfile.mnt" "$T_TMP/ctx"
expect_grep "...with where and why" 'Dockerfile.mnt:2:1: base .oci-archive:/etc/x.tar. names a path on the build server' "$T_TMP/err"
# an ONBUILD trigger is only known when the build runs: the build refuses the path then
printf 'FROM scratch\nONBUILD COPY --from=oci:context / /x\n' >"$T_TMP/ctx/Dockerfile.onb"
expect_exit 0 "an image whose ONBUILD names a path" $KILN build --remote "$URL" -f "$T_TMP/ctx/Dockerfile.onb" -t onb:1 "$T_TMP/ctx"
printf 'FROM 127.0.0.1:%s/team-a/onb:1\n' "$PORT" >"$T_TMP/ctx/Dockerfile.onb2"
expect_exit 1 "a build on it fails" $KILN build --remote "$URL" -f "$T_TMP/ctx/Dockerfile.onb2" "$T_TMP/ctx"
expect_grep "...the path refused, not opened" 'oci:context names a path on the build host: this build takes registry references and stages only' "$T_TMP/err"
printf 'FROM 127.0.0.1:%s/team-b/base:1\n' "$PORT" >"$T_TMP/ctx/Dockerfile.other"
expect_exit 1 "another team's base is not reachable" $KILN build --remote "$URL" -f "$T_TMP/ctx/Dockerfile.other" "$T_TMP/ctx"
mkdir -p "$T_TMP/big"
head -c 3200000 /dev/urandom >"$T_TMP/big/f"
printf 'FROM scratch\nCOPY f /f\n' >"$T_TMP/big/Dockerfile"
expect_exit 1 "a context over the limit is refused" $KILN build --remote "$URL" "$T_TMP/big"
expect_grep "saying so" 'larger than the limit' "$T_TMP/err"
H=sha256:$(sha256sum "$T_TMP/big/f" | cut -d' ' -f1)
expect_eq "nothing of it is stored" "$(curl -s -H "X-API-Key: $A" -XPOST "$URL/build/v1/missing" -d "{\"digests\":[\"$H\"]}" | jq -r '.missing[0]')" "$H"

# a hostile file list: nothing is made through a symlink, wherever it points
ESC=$T_TMP/escape
mkdir -p "$ESC"
echo evil >"$T_TMP/evil"
HE=sha256:$(sha256sum "$T_TMP/evil" | cut -d' ' -f1)
curl -s -o /dev/null -H "X-API-Key: $A" -T "$T_TMP/evil" "$URL/build/v1/blobs/$HE"
LNK=$(( 0120000 + 0777 )) REG=$(( 0100000 + 0644 ))
REQ=$(jq -nc --arg d "$HE" --arg esc "$ESC" --argjson l $LNK --argjson r $REG \
	'{dockerfile:"FROM scratch\nCOPY a/x /x\n", files:[{path:"a",mode:$l,link:$esc},{path:"a/x",mode:$r,digest:$d}]}')
curl -s -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds" -d "$REQ" >"$T_TMP/esc.json"
expect_eq "a file listed under a symlink the list makes is refused" "$(jq -r .error "$T_TMP/esc.json")" \
	"files[1] a/x: inside a, which the list makes a symlink"
python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1], "w"); i = tarfile.TarInfo("l"); i.type = tarfile.SYMTYPE; i.linkname = sys.argv[2]; t.addfile(i); t.close()' \
	"$T_TMP/sym.tar" "$ESC"
HT=sha256:$(sha256sum "$T_TMP/sym.tar" | cut -d' ' -f1)
curl -s -o /dev/null -H "X-API-Key: $A" -T "$T_TMP/sym.tar" "$URL/build/v1/blobs/$HT"
REQ=$(jq -nc --arg d "$HE" --arg t "$HT" --argjson r $REG \
	'{dockerfile:"FROM scratch\nCOPY t/l/x /x\n", files:[{path:"t",mode:16877,tar:true,digest:$t},{path:"t/l/x",mode:$r,digest:$d}]}')
EID=$(curl -s -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds" -d "$REQ" | jq -r .id)
for _ in $(seq 100); do case $(curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$EID" | jq -r .state) in failed|done) break ;; esac; sleep 0.1; done
expect_eq "a file under a symlink a listed tar made fails the build, saying so" \
	"$(curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$EID" | jq -r '.state + ": " + .reason')" \
	"failed: context file t/l/x: t/l is a symlink, not a directory: nothing is made through it"
expect_eq "...and nothing was written where the symlinks point" "$(ls -A "$ESC" | wc -l)" 0

# teams
HA=sha256:$(sha256sum "$T_TMP/ctx/a.txt" | cut -d' ' -f1)
expect_eq "team b does not see team a's context blobs" "$(curl -s -H "X-API-Key: $B" -XPOST "$URL/build/v1/missing" -d "{\"digests\":[\"$HA\"]}" | jq -r '.missing[0]')" "$HA"
expect_eq "team b gets 404 for team a's build" "$(curl -s -o /dev/null -w '%{http_code}' -H "X-API-Key: $B" "$URL/build/v1/builds/$ID")" 404
expect_eq "nor its log" "$(curl -s -o /dev/null -w '%{http_code}' -H "X-API-Key: $B" "$URL/build/v1/builds/$ID/logs")" 404
expect_eq "team b's list is empty" "$(curl -s -H "X-API-Key: $B" "$URL/build/v1/builds" | jq '.builds | length')" 0
expect_eq "a token cannot build for another team" "$(curl -s -o /dev/null -w '%{http_code}' -H "X-API-Key: $A" "$URL/build/v1/builds?team=team-b")" 403
expect_eq "no credential: 401" "$(curl -s -o /dev/null -w '%{http_code}' "$URL/build/v1/builds")" 401
KILN_TOKEN=$B expect_exit 0 "team b builds the same context" $KILN build --remote "$URL" -t app:v1 "$T_TMP/ctx"
expect_grep "uploading it all itself" 'context: [0-9]+ entries, [1-9][0-9]* files uploaded' "$T_TMP/err"
if grep -q 'cache hit' "$T_TMP/err"; then not_ok "team b does not get team a's cache"; else ok "team b does not get team a's cache"; fi
KILN_TOKEN=$B expect_exit 0 "team b sends a request team a's builds would answer" $KILN build --remote "$URL" -f "$T_TMP/rb/Dockerfile.base" -t rsolo:1 "$T_TMP/rb"
if replayed || grep -q 'cache hit' "$T_TMP/err"; then not_ok "...it runs, on team b's own cache"; else ok "...it runs, on team b's own cache"; fi
KILN_HOME=$T_TMP/other expect_exit 1 "team a's token cannot pull team b's result" $KILN pull "127.0.0.1:$PORT/team-b/app:v1"

# a client that goes away mid-upload: nothing stored, nothing left behind
head -c 2000000 /dev/urandom >"$T_TMP/part"
HP=sha256:$(sha256sum "$T_TMP/part" | cut -d' ' -f1)
curl -s -o /dev/null --limit-rate 10k --max-time 2 -H "X-API-Key: $A" -T "$T_TMP/part" "$URL/build/v1/blobs/$HP"
sleep 0.5
expect_eq "an interrupted upload stores nothing" "$(curl -s -H "X-API-Key: $A" -XPOST "$URL/build/v1/missing" -d "{\"digests\":[\"$HP\"]}" | jq -r '.missing[0]')" "$HP"
expect_eq "and leaves no partial file" "$(find "$DATA/build/teams/team-a/context" -type f -newer "$T_TMP/part" | grep -vc '/sha256/')" 0
echo corrupt | curl -s -o "$T_TMP/put.json" -w '%{http_code}' -H "X-API-Key: $A" -T - "$URL/build/v1/blobs/$HP" >"$T_TMP/code"
expect_eq "a blob that does not match its digest is refused" "$(cat "$T_TMP/code")" 400

# cancel and the time limit: ADD of a URL that never finishes (no VM needed)
python3 tests/slow_http.py "$T_TMP/slow.port" 120 90 &
SLOW=$!
for _ in $(seq 50); do [ -s "$T_TMP/slow.port" ] && break; sleep 0.1; done
SLOWURL=http://127.0.0.1:$(cat "$T_TMP/slow.port")/x
submit() { # TIME_LIMIT → build id
	curl -s -H "X-API-Key: $A" -H "X-Request-Id: t0580-submit-$1" -XPOST "$URL/build/v1/builds" \
		-d "{\"dockerfile\":\"FROM scratch\\nADD $SLOWURL /x\\n\",\"time_limit_s\":$1}" | jq -r .id
}
state() { curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$1" | jq -r "${2:-.state}"; }
wait_state() { # ID STATE
	for _ in $(seq 150); do [ "$(state "$1")" = "$2" ] && return 0; sleep 0.2; done
	return 1
}
T1=$(submit 3)
T2=$(submit 600)
wait_state "$T1" building
expect_eq "the submit's request id opens the build's log" \
	"$(curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$T1/logs?cursor=0" | head -1 | jq -r '.state + " " + .request_id')" "building t0580-submit-3"
expect_grep "...the id of the submit's access-log line" '^access .* id=t0580-submit-3 .* method=POST path=/build/v1/builds status=202 ' "$T_TMP/serve.log"
expect_eq "with one worker the second build waits queued" "$(state "$T2")" queued
scrape m3
expect_eq "/metrics: team-a's queue depth 1" "$(sample m3 'kiln_build_queue_depth{team="team-a"}')" 1
expect_eq "/metrics: and 1 running" "$(sample m3 'kiln_builds_running{team="team-a"}')" 1
curl -s -o /dev/null -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds/$T2/cancel"
expect_eq "a queued build is cancelled at once" "$(state "$T2")" cancelled
wait_state "$T1" failed
expect_eq "a build past its time limit fails, saying so" "$(state "$T1" .reason)" "the build ran past its time limit of 3 s"
T3=$(submit 600)
wait_state "$T3" building
sleep 1
curl -s -o /dev/null -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds/$T3/cancel"
if wait_state "$T3" cancelled; then ok "a running build is cancelled"; else not_ok "a running build is cancelled ($(state "$T3"))"; fi
expect_eq "cancelling it again says it is over" "$(curl -s -o /dev/null -w '%{http_code}' -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds/$T3/cancel")" 409
expect_eq "nothing of a cancelled build is published" "$(curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$T3" | jq -r '.image // "none"')" none
kill $SLOW 2>/dev/null
wait $SLOW 2>/dev/null

# --template-network goes with the request (refused if not none or outbound)
printf 'FROM scratch\nCOPY missing /x\n' >"$T_TMP/Dockerfile.tnet"
expect_exit 1 "a remote template build with --template-network outbound --ready-timeout 7" $KILN build --remote "$URL" -f "$T_TMP/Dockerfile.tnet" --template-network outbound --ready-timeout 7 "$T_TMP/ctx"
expect_eq "...both sent with it (a template)" "$(sqlite3 "$DATA/meta.db" "SELECT request FROM svc_builds ORDER BY qms DESC LIMIT 1" | jq -c '[.template_network, .template, .ready_timeout_s]')" '["outbound",true,7]'
expect_eq "a bad ready_timeout_s is refused" "$(curl -s -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds" -d '{"dockerfile":"FROM scratch\n","ready_timeout_s":0}' | jq -r .error)" \
	"ready_timeout_s: want seconds from 1 to 86400"
expect_eq "a bad template_network is refused" "$(curl -s -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds" -d '{"dockerfile":"FROM scratch\n","template_network":"all"}' | jq -r .error)" \
	"template_network: network 'all': want none or outbound"
# the core's one body limit, said before the body is read (a client waiting with Expect: 100-continue sends none)
expect_eq "a request body over 64 MiB is refused, naming the limit" "$(head -c $((64 * 1024 * 1024 + 1)) /dev/zero |
	curl -s -H "X-API-Key: $A" -H 'Expect: 100-continue' -XPOST "$URL/build/v1/builds" --data-binary @- | jq -r .error)" \
	"the request body is over the limit of 67108864 bytes"
# what only the server sets for its child: a client choosing its cache keys' digests would poison the cache
expect_eq "a request setting context_digests is refused" "$(curl -s -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds" -d '{"dockerfile":"FROM scratch\n","context_digests":"/etc/passwd"}' | jq -r .error)" \
	"context_digests: set by the build server, not by a request"
expect_eq "...and registry_bases false" "$(curl -s -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds" -d '{"dockerfile":"FROM scratch\n","registry_bases":false}' | jq -r .error)" \
	"registry_bases: set by the build server, not by a request"

# one context directory per file list, shared by its builds: a rebuild links nothing
CD=$DATA/build/teams/team-a/contexts
inodes() { find "$CD" -mindepth 1 -maxdepth 1 -name '[0-9a-f]*' -printf '%i\n' | sort | tr '\n' ' '; }
I0=$(inodes)
if [ -n "$I0" ]; then ok "a file list's context is a directory of the team's"; else not_ok "a file list's context is a directory of the team's"; fi
expect_exit 0 "a rebuild of the same context" $KILN build --remote "$URL" -t app:v2 "$T_TMP/ctx"
expect_eq "...builds in the directory its file list already had" "$(inodes)" "$I0"
# the worker removes its work directory after the result went out: give it 10 s
for _ in $(seq 100); do [ -z "$(find "$DATA/build/work" -mindepth 1 | head -1)" ] && break; sleep 0.1; done
expect_eq "...and leaves nothing in work/" "$(find "$DATA/build/work" -mindepth 1 | wc -l)" 0
# a prune removes the context directories no build holds (a build holds its own, shared)
HELD=$(ls -t "$CD" | head -1)
flock -s "$CD/$HELD" -c "echo \$\$ >'$T_TMP/held.tmp'; mv '$T_TMP/held.tmp' '$T_TMP/held'; exec sleep 30" &
HOLD=$!
for _ in $(seq 50); do [ -s "$T_TMP/held" ] && break; sleep 0.1; done

# the team's cache on the server, pruned from the client: by age, then by size
files_of() { find "$DATA/build/teams/$1/context/sha256" "$DATA/build/teams/$1/linked" -type f 2>/dev/null | grep -c '/[0-9a-f]\{64\}$'; }
nb=$(files_of team-b)
expect_exit 0 "kiln cache prune --remote, files used within a day" $KILN cache prune --remote "$URL" --older-than 1d
expect_grep "...keeps team a's context files" '^removed 0 cache entries and 0 context files on ' "$T_TMP/out"
expect_eq "...and removes the context directories no build holds, keeping the one held" "$(ls "$CD")" "$HELD"
kill "$(cat "$T_TMP/held")" $HOLD 2>/dev/null
wait $HOLD 2>/dev/null
expect_exit 0 "kiln cache prune --remote" $KILN cache prune --remote "$URL" --older-than 0s
expect_grep "it removed team a's entries and context files" '^removed [1-9][0-9]* cache entries and [1-9][0-9]* context files on ' "$T_TMP/out"
expect_eq "team a's uploaded files and linked copies are gone" "$(files_of team-a)" 0
expect_eq "...with its last context directory" "$(ls -A "$CD")" ""
expect_eq "team b's are all there" "$(files_of team-b)" "$nb"
expect_exit 0 "a rebuild after the prune" $KILN build --remote "$URL" -t app:v4 "$T_TMP/ctx"
if grep -q 'cache hit' "$T_TMP/err"; then not_ok "misses the pruned cache"; else ok "misses the pruned cache"; fi
expect_grep "...uploading its files again" '^context: [0-9]* entries, [1-9][0-9]* files uploaded' "$T_TMP/err"
expect_exit 0 "after the prune, a request an earlier build would have answered" $KILN build --remote "$URL" -t rapp:1 "$T_TMP/rb"
if replayed; then not_ok "...runs (a prune that removed entries clears the team's replays)"; else ok "...runs (a prune that removed entries clears the team's replays)"; fi
expect_grep "...its steps again" '^  cache miss' "$T_TMP/err"
expect_exit 0 "kiln cache prune --remote --max-size 1" $KILN cache prune --remote "$URL" --older-than 1d --max-size 1
expect_grep "...removes files used within a day, the store being over its size" ' and [1-9][0-9]* context files on ' "$T_TMP/out"
expect_eq "...all of team a's" "$(files_of team-a)" 0
expect_exit 0 "a rebuild after that" $KILN build --remote "$URL" -t app:v4 "$T_TMP/ctx"
KILN_TOKEN=$B expect_exit 0 "team b's cache is untouched by a's prune" $KILN build --remote "$URL" -t app:v1 "$T_TMP/ctx"
expect_grep "...its steps still hit" '^  cache hit' "$T_TMP/err"

# the log with a cursor
curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$ID/logs" >"$T_TMP/log.all"
curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$ID/logs?cursor=2" >"$T_TMP/log.2"
expect_eq "a cursor resumes the log" "$(tail -n +3 "$T_TMP/log.all" | md5sum)" "$(md5sum <"$T_TMP/log.2")"

# a restart: a queued build stays queued, then runs
stop_server
sqlite3 "$DATA/meta.db" "UPDATE svc_builds SET state='building', host='vm-gone', heartbeat=1 WHERE id='$ID'" 2>/dev/null
start_server
expect_eq "a build a stopped host was running ends failed" "$(curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$ID" | jq -r .state)" failed
expect_exit 0 "the restarted server builds" $KILN build --remote "$URL" -t app:v3 "$T_TMP/ctx"
