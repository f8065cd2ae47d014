#!/usr/bin/env bash
# t0715-registry-quota.sh — per-team quotas on a running `kiln serve`: a
# skopeo push past team-a's stored-bytes quota is refused at the blob that
# crosses it (403 DENIED naming the quota and the usage) and nothing stored
# before is touched; bytes count once per team; repositories; a mount across
# teams; `kiln registry quota` changes take effect live; `kiln registry usage`
# agrees with what the registry serves; bad quotas refused where they are
# read; the build service's running-builds and build-minutes quotas.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

SRV=
cleanup() {
	reg_stop
	[ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
	[ -n "${SLOW:-}" ] && kill "$SLOW" 2>/dev/null && wait "$SLOW" 2>/dev/null
	rm -rf "$T_TMP"
}
trap cleanup EXIT
need_tools skopeo umoci jq
ROOT=$PWD
cd "$T_TMP"
D="$T_TMP/data"
cat >q.json <<'JSON'
{"auth": true, "quotas": {"team-a": {"bytes": 400000, "repos": 2}, "*": {"repos": 3}}}
JSON
A=$(reg_tok --scope 'team-a:*' a)
B=$(reg_tok --scope 'team-b:*' b)
AB=$(reg_tok --scope 'team-a:*' --scope team-b:pull a-reads-b)
reg_start "$D" --config q.json || { not_ok "kiln serve starts with quotas"; exit 1; }
S="skopeo --command-timeout 60s"
CA="--dest-creds=ci:$A --dest-tls-verify=false"

# images of one random layer each (random data: gzip keeps their size)
umoci init --layout img >/dev/null
for i in 1 2 3; do
	umoci new --image "img:v$i" >/dev/null
	head -c 150000 /dev/urandom >"l$i" && umoci insert --image "img:v$i" "l$i" /l >/dev/null
done
umoci new --image img:big >/dev/null && head -c 600000 /dev/urandom >lb && umoci insert --image img:big lb /l >/dev/null

expect_exit 0 "push team-a/app:v1 (under the quota)" $S copy $CA oci:img:v1 "docker://$REG/team-a/app:v1"
expect_exit 0 "push team-a/app:v2 (under the quota)" $S copy $CA oci:img:v2 "docker://$REG/team-a/app:v2"
digest() { $S inspect --creds "ci:$1" --tls-verify=false --format '{{.Digest}}' "docker://$REG/$2" 2>/dev/null; }
V1=$(digest "$A" team-a/app:v1)
V2=$(digest "$A" team-a/app:v2)

# ---- the push that crosses it
expect_exit 1 "push team-a/app:v3 past the 400000-byte quota fails" $S copy $CA oci:img:v3 "docker://$REG/team-a/app:v3"
expect_grep "skopeo shows the registry's reason" 'quota exceeded: team .team-a. stores' "$T_TMP/err"
head -c 200000 /dev/urandom >raw
req POST "/v2/team-a/app/blobs/uploads/?digest=$(sha256_of raw)" -H "$(H "$A")" --data-binary @raw -H 'Content-Type: application/octet-stream'
expect_error "a blob that would pass it: 403 DENIED" 403 DENIED
expect_grep "...its message names the quota, the usage and the blob" \
	"quota exceeded: team 'team-a' stores [0-9.]+ [kKMG]?i?B \([0-9]+ bytes\) of its stored-bytes quota of .*\(400000 bytes\); blob $(sha256_of raw) of .*\(200000 bytes\) would pass it: nothing was stored" "$T_TMP/body"
CODE=$(curl -s -o /dev/null -w '%{http_code}' -I -H "$(H "$A")" "$U/v2/team-a/app/blobs/$(sha256_of raw)")
expect_eq "...and it is not stored: HEAD 404" "$CODE" 404
expect_eq "...nor left in uploads/" "$(find "$D/uploads" -type f 2>/dev/null | wc -l)" 0
expect_eq "team-a/app:v1 still served with its digest" "$(digest "$A" team-a/app:v1)" "$V1"
expect_eq "team-a/app:v2 too" "$(digest "$A" team-a/app:v2)" "$V2"
rm -rf pulled
expect_exit 0 "a pull of team-a/app:v2 after the refusal" $S copy --src-creds="ci:$A" --src-tls-verify=false \
	"docker://$REG/team-a/app:v2" oci:pulled:v2
expect_exit 0 "...its layer is the one pushed" cmp <(umoci raw unpack --image pulled:v2 p2 >/dev/null 2>&1; cat p2/l) l2
req GET "/v2/team-a/app/tags/list" -H "$(H "$A")"
expect_eq "no tag v3" "$(jq -c '.tags | sort' "$T_TMP/body")" '["v1","v2"]'

# ---- counted once per team: the same image in a second repository adds nothing
expect_exit 0 "team-a/app2:v1, the bytes team-a already stores, is accepted over its quota's edge" \
	$S copy $CA oci:img:v1 "docker://$REG/team-a/app2:v1"
expect_exit 0 "...and a second tag of v2 in it" $S copy $CA oci:img:v2 "docker://$REG/team-a/app2:v2"
# ---- repositories: the third is refused (repos 2 beats "*"'s 3)
printf 'x' >tiny
req POST "/v2/team-a/app3/blobs/uploads/?digest=$(sha256_of tiny)" -H "$(H "$A")" --data-binary @tiny
expect_error "a third repository of team-a: 403 DENIED" 403 DENIED
expect_grep "...naming the repositories quota" "quota exceeded: team 'team-a' has 2 of its 2 repositories; repository team-a/app3 would pass it" "$T_TMP/body"

# ---- another team is not held by team-a's quota; "*" gives it 3 repositories
CB="--dest-creds=ci:$B --dest-tls-verify=false"
expect_exit 0 "team-b pushes 600000 bytes (no bytes quota)" $S copy $CB oci:img:big "docker://$REG/team-b/big:1"
n=0
for r in r2 r3; do
	req POST "/v2/team-b/$r/blobs/uploads/?digest=$(sha256_of tiny)" -H "$(H "$B")" --data-binary @tiny
	[ "$CODE" = 201 ] && n=$((n + 1))
done
expect_eq "team-b's second and third repositories" "$n" 2
req POST "/v2/team-b/r4/blobs/uploads/?digest=$(sha256_of tiny)" -H "$(H "$B")" --data-binary @tiny
expect_error "team-b's fourth: 403 DENIED (the \"*\" quota of 3)" 403 DENIED

# ---- a mount from team-b into team-a counts against team-a
BIGL=$(jq -r '.layers[0].digest' <(curl -s -H "$(H "$B")" -H 'Accept: application/vnd.oci.image.manifest.v1+json' "$U/v2/team-b/big/manifests/1"))
req POST "/v2/team-a/app/blobs/uploads/?mount=$BIGL&from=team-b/big" -H "$(H "$AB")"
expect_error "mounting team-b's 600000-byte layer into team-a: 403 DENIED" 403 DENIED
expect_grep "...naming the quota" "stored-bytes quota of .*blob $BIGL" "$T_TMP/body"
CODE=$(curl -s -o /dev/null -w '%{http_code}' -I -H "$(H "$A")" "$U/v2/team-a/app/blobs/$BIGL")
expect_eq "...team-a/app does not hold it" "$CODE" 404

# ---- kiln registry quota, live
expect_exit 0 "kiln registry quota team-a bytes=none" "$KILN" registry quota --data "$D" --config q.json team-a bytes=none
expect_grep "...shown as set by kiln registry quota" '^bytes +none +kiln registry quota$' "$T_TMP/out"
expect_grep "...repos still from the config" '^repos +2 +config$' "$T_TMP/out"
expect_exit 0 "then the push of v3 goes through (no restart)" $S copy $CA oci:img:v3 "docker://$REG/team-a/app:v3"
expect_exit 0 "kiln registry quota team-a bytes=default" "$KILN" registry quota --data "$D" --config q.json team-a bytes=default
expect_grep "...the config's value again" '^bytes +400000 +config$' "$T_TMP/out"
req POST "/v2/team-a/app/blobs/uploads/?digest=$(sha256_of tiny)" -H "$(H "$A")" --data-binary @tiny
expect_error "over its quota again, even one new byte is refused" 403 DENIED
expect_exit 0 "...a re-push of what team-a holds is not" $S copy $CA oci:img:v1 "docker://$REG/team-a/app2:again"
expect_exit 2 "a bad value is refused" "$KILN" registry quota --data "$D" --config q.json team-a repos=2 bytes=lots
expect_grep "...saying which" "bytes" "$T_TMP/err"
expect_exit 0 "...and nothing of that command was stored" "$KILN" registry quota --data "$D" --config q.json team-a
expect_grep "...(repos still from the config)" '^repos +2 +config$' "$T_TMP/out"
expect_exit 2 "an unknown key is refused" "$KILN" registry quota --data "$D" --config q.json team-a disks=3
expect_exit 2 "a bad team name is refused" "$KILN" registry quota --data "$D" --config q.json 'Team A' repos=3

# ---- kiln registry usage: what the registry serves, each blob once per team
served_bytes() { # TOKEN REPO...: config + layers + manifests of every tag, each digest once
	local tok=$1 r t
	shift
	for r in "$@"; do
		for t in $(curl -s -H "$(H "$tok")" "$U/v2/$r/tags/list" | jq -r '.tags[]'); do
			curl -s -H "$(H "$tok")" -H 'Accept: application/vnd.oci.image.manifest.v1+json' "$U/v2/$r/manifests/$t" >m.json
			echo "$(sha256_of m.json) $(stat -c %s m.json)"
			jq -r '(.config, .layers[]) | "\(.digest) \(.size)"' m.json
		done
	done | sort -u | awk '{ s += $2 } END { print s + 0 }'
}
expect_exit 0 "kiln registry usage --json" "$KILN" registry usage --data "$D" --config q.json --json
cp "$T_TMP/out" usage.json
expect_eq "team-a's bytes: what its tags reference, each once" "$(jq -r '.[] | select(.team == "team-a") | .bytes' usage.json)" "$(served_bytes "$A" team-a/app team-a/app2)"
expect_eq "...and its quotas" "$(jq -c '.[] | select(.team == "team-a") | .quotas | [.bytes, .repos]' usage.json)" '[400000,2]'
expect_eq "team-b's repositories" "$(jq -r '.[] | select(.team == "team-b") | .repos' usage.json)" 3
expect_exit 0 "kiln registry usage (table)" "$KILN" registry usage --data "$D" --config q.json
expect_grep "...team-a at over 100% of its quota" '^team-a +2 +[0-9]+ +[0-9]+ +[0-9]+ +400000 +1[0-9][0-9]\.[0-9]%' "$T_TMP/out"
reg_stop

# ---- bad quotas in the config: kiln serve refuses to start, naming the entry
bad_config() { # NAME JSON PATTERN
	echo "$2" >bad.json
	expect_exit 1 "kiln serve refuses $1" "$KILN" serve --addr 127.0.0.1:0 --data "$D" --config bad.json
	expect_grep "...naming it" "$3" "$T_TMP/err"
}
bad_config "a size that is not one" '{"quotas": {"team-a": {"bytes": "lots"}}}' 'quotas\.team-a\.bytes'
bad_config "an unknown quota" '{"quotas": {"team-a": {"disk": 3}}}' 'quotas\.team-a\.disk: unknown quota'
bad_config "a negative count" '{"quotas": {"team-a": {"repos": -1}}}' 'quotas\.team-a\.repos'
bad_config "a bad team name" '{"quotas": {"Team A": {"repos": 1}}}' 'quotas\.Team A'
bad_config "a bytes quota with the s3 backend" \
	'{"s3": {"endpoint": "http://127.0.0.1:1", "bucket": "b", "access_key": "k", "secret_key": "s"}, "quotas": {"*": {"bytes": "1G"}}}' \
	'quota bytes: not enforced with the s3 backend'

# ---- the build service: running builds per team, build minutes per day
cat >b.json <<'JSON'
{"auth": true, "build": {"host_builds": 2, "fetch_private": true},
 "quotas": {"team-a": {"builds": 1}, "team-c": {"build_minutes": 0}}}
JSON
TC=$(reg_tok --scope team-c:build,pull,push c)
reg_start "$D" --config b.json || { not_ok "kiln serve --build starts with build quotas"; exit 1; }
python3 "$ROOT/tests/slow_http.py" slow.port 120 90 &
SLOW=$!
for _ in $(seq 50); do [ -s slow.port ] && break; sleep 0.1; done
SLOWURL=http://127.0.0.1:$(cat slow.port)/x
submit() { # TOKEN → build id (a build that waits on a slow ADD: no VM)
	curl -s -H "X-API-Key: $1" -XPOST "$U/build/v1/builds" \
		-d "{\"dockerfile\":\"FROM scratch\\nADD $SLOWURL /x\\n\",\"time_limit_s\":600}" | jq -r .id
}
state() { curl -s -H "X-API-Key: $1" "$U/build/v1/builds/$2" | jq -r .state; }
wait_state() { # TOKEN ID STATE
	for _ in $(seq 150); do [ "$(state "$1" "$2")" = "$3" ] && return 0; sleep 0.2; done
	return 1
}
X1=$(submit "$A")
X2=$(submit "$A")
Y1=$(submit "$B")
wait_state "$A" "$X1" building || not_ok "team-a's first build starts ($(state "$A" "$X1"))"
if wait_state "$B" "$Y1" building; then ok "team-b's build takes the second worker"; else not_ok "team-b's build takes the second worker ($(state "$B" "$Y1"))"; fi
expect_eq "team-a's second waits: its builds quota is 1 (two workers, one free of team-b)" "$(state "$A" "$X2")" queued
curl -s -o /dev/null -H "X-API-Key: $B" -XPOST "$U/build/v1/builds/$Y1/cancel"
wait_state "$B" "$Y1" cancelled
sleep 1.5
expect_eq "...still queued with a worker idle" "$(state "$A" "$X2")" queued
"$KILN" registry quota --data "$D" --config b.json team-a builds=2 >/dev/null
if wait_state "$A" "$X2" building; then ok "raised to 2 (kiln registry quota, live): it starts"; else not_ok "raised to 2 (kiln registry quota, live): it starts ($(state "$A" "$X2"))"; fi
for x in "$X1" "$X2"; do curl -s -o /dev/null -H "X-API-Key: $A" -XPOST "$U/build/v1/builds/$x/cancel"; done
CODE=$(curl -s -o body.json -w '%{http_code}' -H "X-API-Key: $TC" -XPOST "$U/build/v1/builds" -d '{"dockerfile":"FROM scratch\n"}')
expect_eq "team-c with 0 build minutes a day: a submit is refused 403" "$CODE" 403
expect_grep "...saying which quota and when it resets" "quota exceeded: team 'team-c' used 0 of its 0 build minutes today \(UTC\)" body.json
expect_eq "...and nothing was queued" "$(curl -s -H "X-API-Key: $TC" "$U/build/v1/builds" | jq '.builds | length')" 0
reg_stop
