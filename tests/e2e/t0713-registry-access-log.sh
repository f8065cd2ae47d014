#!/usr/bin/env bash
# t0713-registry-access-log.sh — `kiln serve` writes one access-log line per
# request (text by default, --log-format json, or off): request id (made here,
# or the client's X-Request-Id when sane) also sent back in X-Request-Id,
# client, team, route class, method, path, status, bytes, duration; a hostile
# path stays one field of one line; a build request's line names its team.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

trap 'reg_stop; rm -rf "$T_TMP"' EXIT
need_tools skopeo umoci jq
cd "$T_TMP"
D="$T_TMP/data"
echo '{"auth": true}' >auth.json
PUSH=$(reg_tok --scope 'team-a:*' pusher)
reg_start "$D" --config auth.json || { not_ok "kiln serve starts"; exit 1; }
umoci init --layout img >/dev/null && umoci new --image img:v1 >/dev/null
head -c 20000 /dev/urandom >l1 && umoci insert --image img:v1 l1 /l1 >/dev/null
S="skopeo --command-timeout 60s"
expect_exit 0 "push team-a/app:v1" $S copy --dest-creds="ci:$PUSH" --dest-tls-verify=false oci:img:v1 "docker://$REG/team-a/app:v1"
req GET /v2/team-a/app/tags/list -H "$(H "$PUSH")"
id=$(sed -n 's/^X-Request-Id: //p' "$T_TMP/hdr")
case "$id" in [0-9a-f]*) [ ${#id} = 16 ] && ok "an answer carries its X-Request-Id ($id)" || not_ok "a 16-hex id (got '$id')" ;;
*) not_ok "an answer carries its X-Request-Id (got '$id')" ;; esac
req GET /v2/team-a/app/tags/list -H "$(H "$PUSH")" -H 'X-Request-Id: lb-7f3a.9_x'
expect_grep "the client's id is kept" '^X-Request-Id: lb-7f3a.9_x$' "$T_TMP/hdr"
req GET /v2/team-a/app/tags/list -H "$(H "$PUSH")" -H 'X-Request-Id: bad id "with" spaces'
expect_grep "an id with other bytes is replaced" '^X-Request-Id: [0-9a-f]{16}$' "$T_TMP/hdr"
req GET '/v2/team-a/app/manifests/a%20b%22c%0Ad' -H "$(H "$PUSH")"
reg_stop
L=$REG_LOG
expect_eq "the 3 manifest and blob PUTs of the push: one line each" \
	"$(grep -c '^access .* team=team-a route=\(manifest\|upload\) method=PUT path=/v2/team-a/app/[^ ]* status=201 ' "$L")" 3
expect_grep "its own request's line, by id, with every field" \
	"^access [0-9T:Z-]+ id=$id client=127\\.0\\.0\\.1 team=team-a route=tags method=GET path=/v2/team-a/app/tags/list status=200 in=0 out=[1-9][0-9]* ms=[0-9.]+\$" "$L"
expect_grep "the client's id in the log" '^access .* id=lb-7f3a\.9_x ' "$L"
expect_grep "a hostile path: escaped, one field of one line" 'path=/v2/team-a/app/manifests/a%20b%22c%0Ad status=404 ' "$L"
n=$(grep -c '^access ' "$L")
expect_eq "every line is an access line or the server's own (no torn line)" \
	"$(grep -vc '^access \|^kiln\|listening\|^$' "$L")" 0
[ "$n" -ge 8 ] && ok "$n requests logged" || not_ok "at least 8 requests logged (got $n)"

# ---- json
reg_start "$D" --config auth.json --log-format json || { not_ok "kiln serve --log-format json starts"; exit 1; }
req GET /v2/team-a/app/tags/list -H "$(H "$PUSH")" -H 'X-Request-Id: j-1'
req GET '/v2/team-a/app/manifests/%FF%FE' -H "$(H "$PUSH")"
reg_stop
grep '^{' "$REG_LOG" >j.log
expect_eq "json lines parse, one object each" "$(jq -c . j.log | wc -l)" "$(wc -l <j.log)"
expect_eq "the json line of request j-1" \
	"$(jq -r 'select(.id == "j-1") | [.team, .route, .method, .path, .status, (.out > 0), (.ms >= 0)] | @tsv' j.log)" \
	"$(printf 'team-a\ttags\tGET\t/v2/team-a/app/tags/list\t200\ttrue\ttrue')"
expect_eq "a path of invalid UTF-8 in json: escaped bytes" \
	"$(jq -r 'select(.status == 404) | .path' j.log | head -1)" "/v2/team-a/app/manifests/%FF%FE"

# ---- off, and a bad value
reg_start "$D" --config auth.json --log-format off || { not_ok "kiln serve --log-format off starts"; exit 1; }
req GET /v2/ -H "$(H "$PUSH")"
reg_stop
expect_eq "--log-format off: no access line" "$(grep -c '^access \|^{' "$REG_LOG")" 0
expect_exit 1 "--log-format xml is refused" "$KILN" serve --addr 127.0.0.1:0 --data "$D" --log-format xml
expect_grep "naming the choices" "access log format 'xml': want text, json or off" "$T_TMP/err"
echo '{"access_log": 3}' >bad.json
expect_exit 1 "a config access_log of the wrong type is refused" "$KILN" serve --addr 127.0.0.1:0 --data "$D" --config bad.json
expect_grep "saying so" 'access_log: want "text", "json" or "off"' "$T_TMP/err"
