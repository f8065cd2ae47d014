#!/usr/bin/env bash
# t0709-registry-batch-mount.sh — pushing at scale to `kiln serve`: the batch
# blob query (POST /v2/NAME/blobs/_exists: answers, its 400s and auth), the
# blob mount without from= (automatic content discovery) with two teams'
# tokens, kiln push using the query, and group commit under SIGKILL: every
# blob acknowledged 201 during parallel uploads is there, intact, after a
# restart.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

trap 'reg_stop KILL; rm -rf "$T_TMP"' EXIT
cd "$T_TMP"
reg_start_teams '{"auth": true}' || { not_ok "kiln serve starts"; exit 1; }
printf 'blob one' >b1; D1=$(sha256_of b1)
printf 'blob two' >b2; D2=$(sha256_of b2)
printf 'not pushed' >b3; D3=$(sha256_of b3)
req POST "/v2/team-a/x/blobs/uploads/?digest=$D1" -H "$(H "$A")" --data-binary @b1
expect_code "push b1 to team-a/x" 201
req POST "/v2/team-a/x/blobs/uploads/?digest=$D2" -H "$(H "$A")" --data-binary @b2
expect_code "push b2 to team-a/x" 201

# ---- the batch query
q() { printf '{"digests":[%s]}' "$1"; }
req POST /v2/team-a/x/blobs/_exists -H "$(H "$PULLA")" -d "$(q "\"$D3\",\"$D1\",\"$D2\"")"
expect_code "batch query with a pull token" 200
expect_eq "  ... present, in request order" "$(jq -c .present body)" "[\"$D1\",\"$D2\"]"
expect_eq "  ... missing" "$(jq -c .missing body)" "[\"$D3\"]"
req POST /v2/team-a/new/blobs/_exists -H "$(H "$A")" -d "$(q "\"$D1\"")"
expect_eq "batch query on a repository not yet pushed: all missing" "$(jq -c '[.present, .missing]' body)" "[[],[\"$D1\"]]"
req POST /v2/team-a/x/blobs/_exists -H "$(H "$A")" -d "$(q "\"$D1\",\"sha256:zz\"")"
expect_error "a bad digest: 400" 400 DIGEST_INVALID
expect_grep "  ... says which" 'digests\[1\]' body
req POST /v2/team-a/x/blobs/_exists -H "$(H "$A")" -d "$(q "\"$D1\",7")"
expect_error "a digest that is not a string: 400" 400 DIGEST_INVALID
req POST /v2/team-a/x/blobs/_exists -H "$(H "$A")" -d '["sha256:x"]'
expect_error "not the query's shape: 400" 400 BODY_INVALID
python3 -c "import json; print(json.dumps({'digests': ['sha256:' + '0' * 64] * 1001}))" >many.json
req POST /v2/team-a/x/blobs/_exists -H "$(H "$A")" --data-binary @many.json
expect_error "1001 digests: 400" 400 TOO_MANY_DIGESTS
python3 -c "import json; print(json.dumps({'digests': ['sha256:%064x' % i for i in range(1000)]}))" >max.json
req POST /v2/team-a/x/blobs/_exists -H "$(H "$A")" --data-binary @max.json
expect_eq "1000 digests: answered" "$CODE $(jq '.missing | length' body)" "200 1000"
req GET /v2/team-a/x/blobs/_exists -H "$(H "$A")"
expect_error "GET: 405" 405 UNSUPPORTED
req POST /v2/team-a/x/blobs/_exists -d "$(q "\"$D1\"")"
expect_error "anonymous: 401" 401 UNAUTHORIZED
req POST /v2/team-a/x/blobs/_exists -H "$(H "$BT")" -d "$(q "\"$D1\"")"
expect_error "another team's token: 403" 403 DENIED

# ---- mount without from=: only from a repository the caller may read
req POST "/v2/team-b/y/blobs/uploads/?mount=$D1" -H "$(H "$BT")"
expect_code "team-b mounts team-a's blob without from=: an upload instead" 202
expect_eq "  ... with a Location" "$(hdr Location | grep -c '^/v2/team-b/y/blobs/uploads/')" 1
req HEAD "/v2/team-b/y/blobs/$D1" -I -H "$(H "$BT")"
expect_code "  ... and the blob is not in team-b/y" 404
req POST "/v2/team-b/y/blobs/uploads/?mount=$D3" -H "$(H "$BT")"
expect_code "mount of an unknown blob: an upload (the same answer)" 202
req POST "/v2/team-a/z/blobs/uploads/?mount=$D1" -H "$(H "$A")"
expect_code "team-a mounts its own blob without from=" 201
expect_eq "  ... Location" "$(hdr Location)" "/v2/team-a/z/blobs/$D1"
req HEAD "/v2/team-a/z/blobs/$D1" -I -H "$(H "$A")"
expect_code "  ... now in team-a/z" 200
expect_exit 0 "kiln registry public team-a/x" "$KILN" registry public --data "$D" team-a/x
req POST "/v2/team-b/y/blobs/uploads/?mount=$D2" -H "$(H "$BT")"
expect_code "team-b mounts from a public repository without from=" 201
req GET "/v2/team-b/y/blobs/$D2" -H "$(H "$BT")"
expect_eq "  ... and reads it" "$CODE $(cat body)" "200 blob two"
req POST "/v2/team-b/y/blobs/uploads/?mount=$D1&from=team-a/z" -H "$(H "$BT")"
expect_code "mount with from= a private repository still refused" 202

# ---- kiln push uses the query (no HEAD per blob)
reg_demo_image "$A"
expect_exit 0 "kiln push to kiln serve" env KILN_LOG=debug "$KILN" push demo:1 "$REG/team-a/app:v1"
expect_grep "  ... asked with one batch query" 'batch blob query: 0 of [0-9]+ blobs present' err
expect_exit 0 "kiln push again" env KILN_LOG=debug "$KILN" push demo:1 "$REG/team-a/app:v1"
expect_grep "  ... every blob present" 'batch blob query: ([0-9]+) of \1 blobs present' err

# ---- group commit under SIGKILL: what was acknowledged survives
reg_stop KILL
rm -f serve.*.log
KILN_LOG=debug reg_start "$D" || { not_ok "kiln serve restarts without auth"; exit 1; }
mkdir -p gc
pusher() { # N: 60 small blobs, one line per 201
	local i f d
	for i in $(seq 1 60); do
		f=gc/$1.$i; head -c $((1000 + RANDOM)) /dev/urandom >"$f"; d=$(sha256_of "$f")
		[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X POST --data-binary @"$f" \
			"$U/v2/g/p$1/blobs/uploads/?digest=$d")" = 201 ] && echo "$1 $d $f" >>"acked.$1"
	done
}
pids=()
for n in 1 2 3 4 5 6; do pusher "$n" & pids+=($!); done
for _ in $(seq 1 100); do [ "$(cat acked.* 2>/dev/null | wc -l)" -ge 40 ] && break; sleep 0.05; done
reg_stop KILL
wait "${pids[@]}"
expect_grep "uploads were committed in groups" 'group commit of [0-9]+ blob links' <(cat serve.*.log)
cat acked.* >acked
echo "# blobs acknowledged before SIGKILL: $(wc -l <acked)"
reg_start "$D" || { not_ok "restart after SIGKILL"; exit 1; }
lost=0
while read -r n d f; do
	got=$(curl -s --max-time 10 "$U/v2/g/p$n/blobs/$d" | sha256sum | cut -d' ' -f1)
	[ "sha256:$got" = "$d" ] || { lost=$((lost + 1)); echo "# lost: p$n $d"; }
done <acked
expect_eq "every acknowledged blob is there and intact after SIGKILL ($(wc -l <acked))" "$lost" 0
[ "$(wc -l <acked)" -ge 40 ] && ok "  ... at least 40 were acknowledged" || not_ok "  ... at least 40 were acknowledged"
# a monolithic upload cut by the kill left at most its one file (uploads/UUID.once)
once=$(find "$D/uploads" -name '*.once' | wc -l)
[ "$once" -le 6 ] && ok "at most one file left per cut monolithic upload ($once)" || not_ok "at most one file left per cut monolithic upload ($once)"
echo '{"gc_grace_s": 3600, "upload_expiry_s": 0}' >gcu.json
expect_exit 0 "gc after the kill" "$KILN" registry gc --data "$D" --config gcu.json
expect_eq "  ... removes what the cut uploads left" "$(ls "$D/uploads" | wc -l)" 0
req POST /v2/g/p1/blobs/_exists -d "$(q "$(awk '{printf "%s\"%s\"", (NR > 1 ? "," : ""), $2}' acked.1)")"
expect_eq "  ... and the batch query agrees" "$(jq '[(.present | length), (.missing | length)] | @text' -r body)" "[$(wc -l <acked.1),0]"
