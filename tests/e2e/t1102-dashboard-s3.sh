#!/usr/bin/env bash
# t1102-dashboard-s3.sh — the dashboard's /kiln/v1/ on the S3 backend
# (docs/dashboard.md; overview_s3.c reads the bucket): the same builds
# published into a filesystem-backed and an S3-backed `kiln serve --build`
# (radosgw on 127.0.0.1, as t0705), whose repos, history and usage answers
# must agree (sizes, new and shared chunks, builds, counts); scopes hold on
# S3 too; then the pages on the S3 server in Chromium (puppeteer-core, as
# t1100 installs it).  No VM: the builds are FROM scratch.
. tests/e2e/lib.sh
. tests/e2e/radosgw-lib.sh
. tests/e2e/service-lib.sh

. tests/e2e/browser-lib.sh
ART=${KILN_ARTIFACTS:-$PWD/build/test-artifacts}/t1102
mkdir -p "$ART"
FS_SRV= S3_SRV=
trap 'kill $FS_SRV $S3_SRV 2>/dev/null; wait $FS_SRV $S3_SRV 2>/dev/null; rgw_stop; rm -rf "$T_TMP"' EXIT
if ! command -v radosgw >/dev/null; then not_ok "radosgw installed (deps/registry.txt)"; exit 1; fi
if rgw_start "$T_TMP/ceph" >"$T_TMP/rgw.log" 2>&1; then ok "radosgw up at $RGW_ENDPOINT"; else
	not_ok "radosgw starts"; sed 's/^/#   /' "$T_TMP/rgw.log" | tail -20; exit 1
fi

cat >"$T_TMP/fs.json" <<JSON
{"auth": true, "build": {"host_builds": 1}, "quotas": {"team-a": {"build_minutes": 600}}}
JSON
jq --arg e "$RGW_ENDPOINT" --arg a "$RGW_ACCESS" --arg s "$RGW_SECRET" \
	'. + {"s3": {"endpoint": $e, "bucket": "kiln-dash", "access_key": $a, "secret_key": $s}}' "$T_TMP/fs.json" >"$T_TMP/s3.json"
tok() { $KILN token create --data "$1" --config "$2" --scope "$3" "$4"; }
FA=$(tok "$T_TMP/fs" "$T_TMP/fs.json" team-a:build,pull,push a)
FB=$(tok "$T_TMP/fs" "$T_TMP/fs.json" team-b:build,pull,push b)
SA=$(tok "$T_TMP/s3" "$T_TMP/s3.json" team-a:build,pull,push a)
SB=$(tok "$T_TMP/s3" "$T_TMP/s3.json" team-b:build,pull,push b)
serve_build "$T_TMP/fs" "$T_TMP/fs.json" || { not_ok "kiln serve --build (filesystem) starts"; exit 1; }
FS_SRV=$SRV FS=$URL
cp "$T_TMP/serve.log" "$T_TMP/serve-fs.log"
serve_build "$T_TMP/s3" "$T_TMP/s3.json" || { not_ok "kiln serve --build (S3) starts"; sed 's/^/#   /' "$T_TMP/serve.log"; exit 1; }
S3_SRV=$SRV S3=$URL
ok "a filesystem-backed and an S3-backed kiln serve --build"

# the same builds into both: two versions of team-a/app (one file changed),
# latest moved from v1 to v2, team-b's own
export SOURCE_DATE_EPOCH=1700000000
mkdir -p "$T_TMP/ctx/sub"
echo one >"$T_TMP/ctx/a.txt"
printf 'FROM scratch\nCOPY a.txt /a.txt\nCOPY sub/ /sub/\n' >"$T_TMP/ctx/Dockerfile"
build() { # TAG TOKEN_FS TOKEN_S3
	KILN_TOKEN=$2 $KILN build --remote "$FS" -t "$1" "$T_TMP/ctx" >/dev/null 2>&1 &&
		KILN_TOKEN=$3 $KILN build --remote "$S3" -t "$1" "$T_TMP/ctx" >/dev/null 2>&1
}
echo two >"$T_TMP/ctx/sub/b.txt"
expect_exit 0 "team-a/app:v1 built on both" build app:v1 "$FA" "$SA"
expect_exit 0 "...and :latest" build app:latest "$FA" "$SA"
echo changed >"$T_TMP/ctx/sub/b.txt"
expect_exit 0 "...v2, one file changed" build app:v2 "$FA" "$SA"
expect_exit 0 "...latest moved to it" build app:latest "$FA" "$SA"
expect_exit 0 "team-b's own" build secret:v1 "$FB" "$SB"

get() { curl -s -H "Authorization: Bearer $2" "$1/kiln/v1/$3"; }
get "$S3" "$SA" repos >"$T_TMP/s3-repos.json"
expect_eq "/kiln/v1/repos on S3: 200, not 501" "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $SA" "$S3/kiln/v1/repos")" 200
# what must agree: everything but times and build ids (each server ran its own)
proj='[.repositories[] | {name, stored, logical, public, tags: [.tags[] | {tag, digest, size, blobs, new_bytes,
	manifest_size, media_type, artifact_type, signed, build: (.build | tostring | test("^build b-[0-9a-f]+$"))}] | sort_by(.tag)}]'
jq -S "$proj" "$T_TMP/s3-repos.json" >"$T_TMP/s3-p.json"
get "$FS" "$FA" repos | jq -S "$proj" >"$T_TMP/fs-p.json"
expect_eq "S3: team-a's repositories and tags" "$(jq -c '[.[] | .name + ":" + ([.tags[].tag] | join(","))]' "$T_TMP/s3-p.json")" \
	'["team-a/app:latest,v1,v2"]'
if cmp -s "$T_TMP/fs-p.json" "$T_TMP/s3-p.json"; then
	ok "S3 and filesystem agree on every tag's digest, size, blobs, new bytes, media type and build, and the stored bytes"
else
	not_ok "S3 and filesystem agree on the repositories ($(diff "$T_TMP/fs-p.json" "$T_TMP/s3-p.json" | head -c 400 | tr '\n' ' '))"
fi
expect_eq "...the stored bytes are real (> 0) and v2 cost fewer new bytes than its size" \
	"$(jq -r '.[0] | (.stored > 0) and ((.tags[] | select(.tag == "v2") | .new_bytes < .size))' "$T_TMP/s3-p.json")" true
expect_eq "...tags newest first, as the filesystem orders them" \
	"$(jq -c '[.repositories[0].tags[].tag]' "$T_TMP/s3-repos.json")" "$(get "$FS" "$FA" repos | jq -c '[.repositories[0].tags[].tag]')"

hproj='[.history[] | {digest, new_blobs, new_bytes, shared_blobs, shared_bytes, first, build: (.build | tostring | test("^build b-"))}]'
expect_eq "S3: the history of app:latest agrees (2 changes, chunks new and shared against the one before)" \
	"$(get "$S3" "$SA" 'history?repo=team-a/app&tag=latest' | jq -c "$hproj")" \
	"$(get "$FS" "$FA" 'history?repo=team-a/app&tag=latest' | jq -c "$hproj")"
expect_eq "...which is real: 2 changes, the second sharing chunks with the first" \
	"$(get "$S3" "$SA" 'history?repo=team-a/app&tag=latest' | jq -c '[.history | length, .[1].shared_blobs > 0, .[1].new_blobs > 0, .[0].first]')" \
	'[2,true,true,true]'
expect_eq "S3: another team's history is 404, as if it did not exist" \
	"$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $SA" "$S3/kiln/v1/history?repo=team-b/secret&tag=v1")" 404
expect_eq "S3: team-b sees only its own" "$(get "$S3" "$SB" repos | jq -c '[.repositories[].name]')" '["team-b/secret"]'
uproj='[.teams[] | {team, repos, tags, blobs, bytes, builds: .quotas.builds, minutes_limit: .quotas.build_minutes.limit}]'
expect_eq "S3: usage agrees (repositories, tags, blobs, bytes, build quotas)" \
	"$(get "$S3" "$SA" usage | jq -c "$uproj")" "$(get "$FS" "$FA" usage | jq -c "$uproj")"
expect_eq "...and is real" "$(get "$S3" "$SA" usage | jq -c '.teams[] | [.team, .repos, .tags, .blobs > 0, .quotas.build_minutes.used_seconds >= 0]')" \
	'["team-a",1,3,true,true]'

# signatures and provenance on S3: the S3 server again, now signing what it builds
kill "$S3_SRV"; wait "$S3_SRV" 2>/dev/null
(cd "$T_TMP" && $KILN key generate svc >/dev/null)
jq --arg k "$T_TMP/svc.key" '.build.sign_key = $k' "$T_TMP/s3.json" >"$T_TMP/s3s.json"
serve_build "$T_TMP/s3" "$T_TMP/s3s.json" || { not_ok "kiln serve --build (S3, signing) starts"; exit 1; }
S3_SRV=$SRV S3=$URL
expect_exit 0 "a signed build into S3: team-a/signed:v1" env KILN_TOKEN="$SA" $KILN build --remote "$S3" -t signed:v1 "$T_TMP/ctx"
SD=$(head -1 "$T_TMP/out")
ATT=$(curl -s -o /dev/null -D - -H "Authorization: Bearer $SA" -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
	"$S3/v2/team-a/signed/manifests/sha256-${SD#sha256:}.att" | tr -d '\r' | sed -n 's/^[Dd]ocker-[Cc]ontent-[Dd]igest: //p')
expect_eq "S3: the version is signed, its attestation the .att tag's manifest, its build noted" \
	"$(get "$S3" "$SA" repos | jq -r '.repositories[] | select(.name == "team-a/signed") | .tags | map(.tag + " " + .digest + " " +
		(.signed | tostring) + " " + (.attestation // "none") + " " + (.build | tostring | test("^build b-") | tostring)) | join(";")')" \
	"v1 $SD true $ATT true"

# the pages on the S3 server, in Chromium
need_browser "the dashboard on S3 in Chromium" || exit 0
PROV_BUILDER="kiln-serve@$(hostname)" PROV_DOCKERFILE="sha256:$(sha256sum "$T_TMP/ctx/Dockerfile" | cut -d' ' -f1)" \
URL=$S3 TOKEN=$SA EXPECT="$(jq -c '.repositories[0]' "$T_TMP/s3-repos.json")" ART=$ART CHROMIUM=$CHROMIUM \
	PUPPETEER=$PUPPETEER HOME=$T_TMP timeout 120 node tests/e2e/dashboard-s3.cjs | tee "$T_TMP/browser"
grep -q '^ok - \|^not ok - ' "$T_TMP/browser" || not_ok "the browser run printed no result"
