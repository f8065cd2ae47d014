#!/usr/bin/env bash
# t1100-dashboard.sh — kiln serve's dashboard (/ui/, docs/dashboard.md) in a
# real browser: Debian's Chromium driven by puppeteer-core (npm, installed at
# test time into ~/.cache/kiln/npm) through tests/e2e/dashboard.cjs.  Builds
# without a VM (FROM scratch: COPY, LABEL, an ADD from a slow local server
# that fails), so it is cheap: log in, a team's tags and sizes, a version's
# chunks against the one before, a build's log followed live until it fails
# at FILE:LINE, HTML and ANSI in a Dockerfile shown as text, usage against a
# quota, keyboard and contrast, 1,000 tags painted; screenshots kept in
# build/test-artifacts/t1100/.
. tests/e2e/lib.sh

. tests/e2e/browser-lib.sh
ART=${KILN_ARTIFACTS:-$PWD/build/test-artifacts}/t1100
mkdir -p "$ART"
trap 'kill "$SRV" "$SLOW" 2>/dev/null; wait 2>/dev/null; rm -rf "$T_TMP"' EXIT

DATA=$T_TMP/data
# the service signs what it builds: each version gets its signature and provenance
(cd "$T_TMP" && $KILN key generate svc >/dev/null)
cat >"$T_TMP/serve.json" <<JSON
{"auth": true, "build": {"host_builds": 1, "fetch_private": true, "sign_key": "$T_TMP/svc.key"}, "quotas": {"team-a": {"bytes": "50M", "build_minutes": 600, "sandboxes": 3}}}
JSON
A=$($KILN token create --data "$DATA" --scope team-a:build,pull,push a)
B=$($KILN token create --data "$DATA" --scope team-b:build,pull,push b)
C=$($KILN token create --data "$DATA" --scope team-c:pull,push c)
M=$($KILN token create --data "$DATA" --scope team-a:build,pull --scope team-b:build,pull m) # two teams: the picker
. tests/e2e/service-lib.sh
serve_build "$DATA" "$T_TMP/serve.json" || { not_ok "kiln serve --build starts"; exit 0; }

# the files and their headers, without a browser
curl -s -D "$T_TMP/h" -o /dev/null "$URL/ui/app.js"
expect_grep "/ui/app.js: a strict CSP" "^Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self';.*frame-ancestors 'none'" "$T_TMP/h"
expect_grep "...nosniff" '^X-Content-Type-Options: nosniff' "$T_TMP/h"
expect_grep "...as JavaScript" '^Content-Type: text/javascript' "$T_TMP/h"
expect_eq "/kiln/v1/repos without a token: 401" "$(curl -s -o /dev/null -w '%{http_code}' "$URL/kiln/v1/repos")" 401
expect_eq "/ui/ files are for anyone (they hold no data)" "$(curl -s -o /dev/null -w '%{http_code}' "$URL/ui/")" 200
expect_eq "a file the dashboard does not have: 404" "$(curl -s -o /dev/null -w '%{http_code}' "$URL/ui/../meta.db")" 404

# what the pages show: two versions of team-a/app (one file changed), a tag
# moved between them, another team's repository
export KILN_TOKEN=$A SOURCE_DATE_EPOCH=1700000000
mkdir -p "$T_TMP/ctx/sub"
echo one >"$T_TMP/ctx/a.txt"
echo two >"$T_TMP/ctx/sub/b.txt"
printf 'FROM scratch\nCOPY a.txt /a.txt\nCOPY sub/ /sub/\n' >"$T_TMP/ctx/Dockerfile"
expect_exit 0 "a remote build: team-a/app:v1" $KILN build --remote "$URL" -t app:v1 "$T_TMP/ctx"
D1=$(head -1 "$T_TMP/out")
$KILN build --remote "$URL" -t app:latest "$T_TMP/ctx" >/dev/null 2>&1
echo changed >"$T_TMP/ctx/sub/b.txt"
expect_exit 0 "...and v2, one file changed" $KILN build --remote "$URL" -t app:v2 "$T_TMP/ctx"
$KILN build --remote "$URL" -t app:latest "$T_TMP/ctx" >/dev/null 2>&1
# a build FROM v1: its provenance names the base's digest
mkdir -p "$T_TMP/ctx2"
echo three >"$T_TMP/ctx2/c.txt"
printf 'FROM %s/team-a/app:v1\nCOPY c.txt /c.txt\n' "$HOST" >"$T_TMP/ctx2/Dockerfile"
expect_exit 0 "team-a/app2:v1, FROM team-a/app:v1, signed with provenance" $KILN build --remote "$URL" -t app2:v1 "$T_TMP/ctx2"
expect_eq "...its attestation is stored" "$(curl -s -H "Authorization: Bearer $A" "$URL/kiln/v1/repos?team=team-a" |
	jq -r '.repositories[] | select(.name == "team-a/app2") | .tags[0] | (.signed | tostring) + " " + (.attestation != null | tostring)')" "true true"
KILN_TOKEN=$B expect_exit 0 "team-b builds its own" $KILN build --remote "$URL" -t secret:v1 "$T_TMP/ctx"
TEAMB_BUILD=$(grep -o 'as build b-[0-9a-f]*' "$T_TMP/err" | cut -d' ' -f3)
# HTML and an ANSI escape in a Dockerfile, shown by the page as text
printf 'FROM scratch\nLABEL x="<img src=x onerror=window.pwned=1> \033[31mred"\nCOPY a.txt /a.txt\n' >"$T_TMP/ctx/Dockerfile.hostile"
expect_exit 0 "a build whose LABEL holds HTML and ANSI" $KILN build --remote "$URL" -f "$T_TMP/ctx/Dockerfile.hostile" -t hostile:1 "$T_TMP/ctx"
HOSTILE=$(grep -o 'as build b-[0-9a-f]*' "$T_TMP/err" | cut -d' ' -f3)

# 1,000 tags of one manifest in team-c's repository (the paint figure)
printf '{}' >"$T_TMP/cfg"
CD=sha256:$(sha256sum "$T_TMP/cfg" | cut -d' ' -f1)
curl -s -o /dev/null -H "Authorization: Bearer $C" -XPOST --data-binary @"$T_TMP/cfg" "$URL/v2/team-c/many/blobs/uploads/?digest=$CD"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":2},"layers":[]}' "$CD" >"$T_TMP/man"
seq 1000 | sed "s|.*|url = \"$URL/v2/team-c/many/manifests/t&\"\nupload-file = \"$T_TMP/man\"|" >"$T_TMP/curl.cfg"
curl -s -o /dev/null -H "Authorization: Bearer $C" -H "Content-Type: application/vnd.oci.image.manifest.v1+json" -K "$T_TMP/curl.cfg"
expect_eq "1,000 tags pushed to team-c/many" "$(curl -s -H "Authorization: Bearer $C" "$URL/kiln/v1/repos" | jq '.repositories[0].tags | length')" 1000

# the build to follow live: an ADD from a server that sends one byte, holds
# the connection 8 s and closes it, so the build runs, then fails at its step 2
python3 tests/slow_http.py "$T_TMP/slow.port" 120 8 &
SLOW=$!
for _ in $(seq 50); do [ -s "$T_TMP/slow.port" ] && break; sleep 0.1; done
LIVE=$(curl -s -H "X-API-Key: $A" -XPOST "$URL/build/v1/builds" \
	-d "{\"dockerfile\":\"FROM scratch\\nADD http://127.0.0.1:$(cat "$T_TMP/slow.port")/x /x\\n\"}" | jq -r .id)
expect_grep "the live build is queued" '^b-' <(echo "$LIVE")
# usage counts it where the claim does: one build of team-a running
for _ in $(seq 100); do
	[ "$(curl -s -H "X-API-Key: $A" "$URL/build/v1/builds/$LIVE" | jq -r .state)" = building ] && break
	sleep 0.1
done
expect_eq "/kiln/v1/usage: team-a runs 1 build of its 2 (team_builds)" \
	"$(curl -s -H "Authorization: Bearer $A" "$URL/kiln/v1/usage" | jq -c '.teams[] | select(.team == "team-a") | .quotas.builds')" \
	'{"used":1,"limit":2}'

need_browser "the dashboard in Chromium" || exit 0
PROV_BUILDER="kiln-serve@$(hostname)" PROV_DOCKERFILE="sha256:$(sha256sum "$T_TMP/ctx2/Dockerfile" | cut -d' ' -f1)" \
PROV_BASE="$HOST/team-a/app:v1 $D1" TOKEN_MULTI=$M TEAMB_BUILD=$TEAMB_BUILD URL=$URL TOKEN=$A TOKEN_MANY=$C LIVE=$LIVE HOSTILE=$HOSTILE DIGEST_V1=$D1 ART=$ART CHROMIUM=$CHROMIUM \
	PUPPETEER=$PUPPETEER HOME=$T_TMP timeout 300 node tests/e2e/dashboard.cjs | tee "$T_TMP/browser"
grep -q '^ok - \|^not ok - ' "$T_TMP/browser" || not_ok "the browser run printed no result"
expect_eq "screenshots kept in $ART" "$(ls "$ART"/*.png 2>/dev/null | wc -l | awk '$1 >= 8 { print "yes" }')" yes
if grep -qF "$A" "$T_TMP/serve.log"; then not_ok "the token never reaches the server's log"; else ok "the token never reaches the server's log"; fi

# "ui": false: no dashboard, no /kiln/v1/
kill "$SRV"; wait "$SRV" 2>/dev/null
echo '{"auth": true, "ui": false}' >"$T_TMP/off.json"
serve_build "$DATA" "$T_TMP/off.json"
expect_eq '"ui": false: /ui/ and /kiln/v1/ are 404' \
	"$(curl -s -o /dev/null -w '%{http_code}' "$URL/ui/") $(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $A" "$URL/kiln/v1/repos")" "404 404"
