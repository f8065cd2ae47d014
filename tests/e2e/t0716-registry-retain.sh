#!/usr/bin/env bash
# t0716-registry-retain.sh — retention rules on a running `kiln serve` fed by
# skopeo: keep_newest keeps exactly the newest N tags (cosign attachment tags
# not counted, and removed with what they attach to), keep_tags keeps old ones,
# a manifest another tag holds stays, a referrer goes with its subject and
# stays with a kept one, untagged_older_than removes an old untagged manifest
# and not a fresh one; a dry run lists the same and changes nothing; the bytes
# retention says it frees are what the next gc past the grace period frees,
# and a blob stays fetchable until then; bad rules are refused naming the
# rule; kiln serve's gc timer applies the rules while serving.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

cleanup() {
	reg_stop
	chattr -R -i "$T_TMP/data/blobs" 2>/dev/null
	rm -rf "$T_TMP"
}
trap cleanup EXIT
need_tools skopeo umoci sqlite3 jq
cd "$T_TMP"
D="$T_TMP/data"
S="skopeo --command-timeout 60s"
C="--dest-tls-verify=false"
cat >cfg.json <<'EOF'
{"gc_grace_s": 4, "retention": [
  {"repositories": "team-a/*", "keep_newest": 2, "keep_tags": ["stable*"]},
  {"repositories": ["team-a/tool", "team-a/app"], "untagged_older_than": "2s"}]}
EOF
reg_start "$D" --config cfg.json || { not_ok "kiln serve starts with retention rules"; exit 1; }

# digest REPO REF : what the registry says REF is
digest() { curl -sI "$U/v2/$1/manifests/$2" | tr -d '\r' | awk 'tolower($1) == "docker-content-digest:" { print $2 }'; }
# code PATH : the status of a GET
code() { curl -s -o /dev/null -w '%{http_code}' "$U$1"; }
tags() { curl -s "$U/v2/$1/tags/list" | jq -r '.tags[]?' | sort | tr '\n' ' '; }
# an image of one random layer of $2 bytes, tagged $1 in the layout img
mkimg() { umoci new --image "img:$1" >/dev/null && head -c "$2" /dev/urandom >"l.$1" &&
	umoci insert --image "img:$1" "l.$1" /l >/dev/null; }
push() { $S copy $C "oci:img:$1" "docker://$REG/$2" >/dev/null 2>"push.err" || { cat push.err; return 1; }; }
blobs_bytes() { find "$D/blobs" -type f -name '[0-9a-f]*' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }
path_of() { h=${1#sha256:}; echo "$D/blobs/sha256/${h:0:2}/$h"; }

umoci init --layout img >/dev/null
bad=0
for v in s1 a1 a2 a3 a4 a5 sig; do mkimg $v $((20000 + RANDOM)) || bad=1; done
# oldest first (the order of their last change is what "newest" means)
for p in "s1 team-a/app:stable-1" "a1 team-a/app:v1" "a2 team-a/app:v2" "a5 team-a/app:shared-old" \
	"a3 team-a/app:v3" "a4 team-a/app:v4" "a5 team-a/app:v5"; do
	# shellcheck disable=SC2086
	push $p || bad=1
done
expect_eq "seven skopeo pushes to team-a/app" "$bad" 0
A1=$(digest team-a/app v1) A2=$(digest team-a/app v2) A3=$(digest team-a/app v3)
A4=$(digest team-a/app v4) A5=$(digest team-a/app v5) S1=$(digest team-a/app stable-1)
expect_eq "shared-old and v5 are one manifest" "$(digest team-a/app shared-old)" "$A5"
# a cosign-style signature tag of v1, the newest tag: not a version, so it
# must not push v4 out of the newest 2, and it goes with v1
SIGTAG="sha256-${A1#sha256:}.sig"
push sig "team-a/app:$SIGTAG" || not_ok "push the attachment tag"
SIG=$(digest team-a/app "$SIGTAG")
L1=$(curl -s "$U/v2/team-a/app/manifests/v1" | jq -r '.layers[0].digest')
# referrers (OCI subject) of v2 (to go) and of v5 (to stay), sharing one empty blob
printf '{}' >empty
push_blob team-a/app empty || not_ok "push the empty blob"
E=$(sha256_of empty)
referrer() { # SUBJECT-DIGEST FILE : PUT an artifact manifest whose subject it is
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.kiln.test","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"%s","size":2},"layers":[{"mediaType":"application/vnd.oci.empty.v1+json","digest":"%s","size":2}],"annotations":{"of":"%s"},"subject":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s}}' \
		"$E" "$E" "$1" "$1" "$(curl -sI "$U/v2/team-a/app/manifests/$1" | tr -d '\r' | awk 'tolower($1) == "content-length:" { print $2 }')" >"$2"
	req PUT "/v2/team-a/app/manifests/$(sha256_of "$2")" -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' --data-binary @"$2"
	[ "$CODE" = 201 ] || echo "# referrer PUT: $CODE $(cat "$T_TMP/body")"
	sha256_of "$2"
}
R2=$(referrer "$A2" r2.json) R5=$(referrer "$A5" r5.json)
expect_eq "v5 has its referrer" "$(curl -s "$U/v2/team-a/app/referrers/$A5" | jq -r '.manifests[].digest')" "$R5"
# team-a/tool: t1 untagged long ago (moved away from), t2 untagged just now
mkimg t1 20000 && mkimg t2 20001 && mkimg t3 20002
push t1 team-a/tool:x && push t1 team-a/tool:keep || not_ok "push team-a/tool t1"
T1=$(digest team-a/tool x)
push t2 team-a/tool:old || not_ok "push team-a/tool t2"
T2=$(digest team-a/tool old)
curl -s -X DELETE -o /dev/null "$U/v2/team-a/tool/manifests/old" # a tag moved or deleted: t2 untagged
push t3 team-a/tool:x || not_ok "move team-a/tool:x"
curl -s -X DELETE -o /dev/null "$U/v2/team-a/tool/manifests/keep" # t1 untagged, created > 2 s ago by now
sleep 3
mkimg t4 20003 && push t4 team-a/tool:new || not_ok "push a fresh t4"
T4=$(digest team-a/tool new)
push t3 team-a/tool:new || not_ok "move team-a/tool:new off t4"
expect_eq "t4 is untagged but in the repository" "$(code "/v2/team-a/tool/manifests/$T4")" 200

# ---- dry run: the list, and nothing changes
sqlite3 "$D/meta.db" .dump >dump.before
T_BEFORE="$(tags team-a/app)|$(tags team-a/tool)"
touch -d '@1700000000' "$(path_of "$L1")"
M1=$(stat -c %Y "$(path_of "$L1")")
expect_exit 0 "kiln registry retain --dry-run" "$KILN" registry retain --data "$D" --config cfg.json --dry-run
sed -n 's/^would remove //p' "$T_TMP/out" | sort >dry.list
cp "$T_TMP/out" dry.out
expect_grep "it says it is a dry run, with totals" '^dry run: would remove 5 tags, [0-9]+ manifests in 2 repositories; [0-9]+ blobs \([0-9]+ bytes\)' dry.out
sqlite3 "$D/meta.db" .dump >dump.after
expect_exit 0 "the dry run changed no row of meta.db" cmp dump.before dump.after
expect_eq "every tag still served after the dry run" "$(tags team-a/app)|$(tags team-a/tool)" "$T_BEFORE"
expect_eq "no blob touched by the dry run" "$(stat -c %Y "$(path_of "$L1")")" "$M1"
expect_exit 0 "--json dry run" "$KILN" registry retain --data "$D" --config cfg.json --dry-run --json
expect_eq "its JSON lists the same number of removals" "$(jq '.removed | length' "$T_TMP/out")" "$(wc -l <dry.list)"
DRY_BYTES=$(jq .bytes_freed "$T_TMP/out")

# ---- the real run
SIZE0=$(blobs_bytes)
expect_exit 0 "kiln registry retain" "$KILN" registry retain --data "$D" --config cfg.json
cp "$T_TMP/out" real.out
sed -n 's/^removed //p' real.out | grep -v '^[0-9]* tags' | sort >real.list
expect_exit 0 "it removed what the dry run listed" diff dry.list real.list
BYTES=$(sed -n 's/^removed .* blobs (\([0-9]*\) bytes).*/\1/p' real.out)
NBLOBS=$(sed -n 's/^removed .*; \([0-9]*\) blobs (.*/\1/p' real.out)
expect_eq "the same bytes to free as the dry run said" "$BYTES" "$DRY_BYTES"
expect_eq "team-a/app keeps the newest 2, stable-1 by pattern (the .sig tag went with v1)" "$(tags team-a/app)" \
	"stable-1 v4 v5 "
expect_grep "v3 removed for retention[0].keep_newest" "tag team-a/app:v3 \\($A3\\) retention\\[0\\]\\.keep_newest=2" real.out
expect_grep "the attachment tag removed with v1" "tag team-a/app:$SIGTAG \\($SIG\\) attachment of removed $A1" real.out
expect_grep "v2's referrer removed with it" "manifest team-a/app@$R2 referrer of removed $A2" real.out
bad=0
for p in "v4 $A4" "v5 $A5" "stable-1 $S1"; do
	# shellcheck disable=SC2086
	set -- $p
	got=$($S inspect --tls-verify=false --format '{{.Digest}}' "docker://$REG/team-a/app:$1" 2>/dev/null)
	[ "$got" = "$2" ] || { bad=1; echo "# $1: $got, want $2"; }
done
expect_eq "the kept tags pulled by skopeo with their digests" "$bad" 0
rm -rf pulled
expect_exit 0 "a kept image pulls whole" $S copy --src-tls-verify=false "docker://$REG/team-a/app:v4" oci:pulled:v4
expect_eq "the manifest shared with removed shared-old stays (v5)" "$(code "/v2/team-a/app/manifests/$A5")" 200
expect_eq "v1, v2, v3 manifests removed" \
	"$(code "/v2/team-a/app/manifests/$A1") $(code "/v2/team-a/app/manifests/$A2") $(code "/v2/team-a/app/manifests/$A3")" \
	"404 404 404"
expect_eq "the signature's manifest removed" "$(code "/v2/team-a/app/manifests/$SIG")" 404
expect_eq "v5's untagged referrer stays (its subject is kept)" \
	"$(curl -s "$U/v2/team-a/app/referrers/$A5" | jq -r '.manifests[].digest')" "$R5"
expect_eq "the old untagged t1 removed" "$(code "/v2/team-a/tool/manifests/$T1")" 404
expect_eq "the untagged t2 (over 2 s) removed" "$(code "/v2/team-a/tool/manifests/$T2")" 404
expect_eq "the fresh untagged t4 stays" "$(code "/v2/team-a/tool/manifests/$T4")" 200
expect_eq "team-a/tool keeps its tags" "$(tags team-a/tool)" "new x "
expect_grep "t1 removed for retention[1].untagged_older_than" "manifest team-a/tool@$T1 retention\\[1\\]\\.untagged_older_than=2s" real.out

# ---- the blobs: still there until gc's grace has passed since the removal
expect_eq "v1's layer still fetchable right after" "$(code "/v2/team-a/app/blobs/$L1")" 200
if [ "$(stat -c %Y "$(path_of "$L1")")" -gt "$M1" ]; then ok "its grace period restarted (mtime now)"; else
	not_ok "its grace period restarted (mtime now)"; fi
expect_exit 0 "kiln registry gc at once" "$KILN" registry gc --data "$D" --config cfg.json
expect_grep "gc applies retention first (nothing left to do)" '^retention: removed 0 tags, 0 manifests' "$T_TMP/out"
expect_eq "v1's layer still fetchable after that gc (grace)" "$(code "/v2/team-a/app/blobs/$L1")" 200
expect_eq "the gc inside the grace freed nothing on disk" "$(blobs_bytes)" "$SIZE0"
sleep 5
expect_exit 0 "kiln registry gc once the grace has passed" "$KILN" registry gc --data "$D" --config cfg.json
expect_grep "it removes the blobs retention counted" "^$NBLOBS blobs removed \\($BYTES bytes\\)" "$T_TMP/out"
expect_eq "and that many bytes left the disk" "$(( SIZE0 - $(blobs_bytes) ))" "$BYTES"
expect_eq "v1's layer is gone now" "$(code "/v2/team-a/app/blobs/$L1")" 404
expect_exit 0 "a kept image still pulls after gc" $S copy --src-tls-verify=false "docker://$REG/team-a/app:v5" oci:pulled:v5
# ---- the CLI's gc runs as the server's metrics count them (meta.db's gc_runs)
metric() { awk -v k="$1" '$1 == k { print $2 }' scrape.txt; }
curl -s "$U/metrics" >scrape.txt
expect_eq "kiln_registry_gc_runs_total counts the CLI's two gc runs" \
	"$(metric 'kiln_registry_gc_runs_total{source="cli",outcome="ok"}')" 2
expect_eq "kiln_registry_gc_freed_bytes_total is the bytes they freed" \
	"$(metric 'kiln_registry_gc_freed_bytes_total{source="cli",outcome="ok"}')" "$BYTES"
expect_eq "kiln_registry_gc_removed_blobs_total the blobs" \
	"$(metric 'kiln_registry_gc_removed_blobs_total{source="cli",outcome="ok"}')" "$NBLOBS"
last=$(metric 'kiln_registry_gc_last_run_timestamp_seconds{source="cli",outcome="ok"}')
if [ -n "$last" ] && [ $(( $(date +%s) - last )) -lt 60 ]; then ok "kiln_registry_gc_last_run_timestamp_seconds is now"; else
	not_ok "kiln_registry_gc_last_run_timestamp_seconds is now ($last)"; fi
if ! command -v promtool >/dev/null; then skip "promtool check metrics" "promtool not installed"
elif promtool check metrics <scrape.txt >lint.txt 2>&1; then ok "promtool check metrics is clean with the gc families"
else not_ok "promtool check metrics is clean with the gc families"; sed 's/^/#   /' lint.txt | head; fi
expect_exit 0 "a dry gc" "$KILN" registry gc --dry-run --data "$D" --config cfg.json
curl -s "$U/metrics" >scrape.txt
expect_eq "...is not counted" "$(metric 'kiln_registry_gc_runs_total{source="cli",outcome="ok"}')" 2
# a blob no manifest holds, past its grace, that gc cannot move (its directory immutable)
printf 'orphan %s' "$(date +%s%N)" >orphan
OD=sha256:$(sha256sum orphan | cut -d' ' -f1)
curl -s -o /dev/null -X POST --data-binary @orphan -H 'Content-Type: application/octet-stream' \
	"$U/v2/team-a/app/blobs/uploads/?digest=$OD"
touch -d '1 hour ago' "$(path_of "$OD")"
chattr +i "$(dirname "$(path_of "$OD")")" || not_ok "chattr +i on the orphan's directory"
expect_exit 1 "a gc that cannot remove a blob fails" "$KILN" registry gc --data "$D" --config cfg.json
chattr -i "$(dirname "$(path_of "$OD")")"
curl -s "$U/metrics" >scrape.txt
expect_eq "...and is counted as failed" "$(metric 'kiln_registry_gc_runs_total{source="cli",outcome="failed"}')" 1
expect_eq "...the ok runs' count unchanged" "$(metric 'kiln_registry_gc_runs_total{source="cli",outcome="ok"}')" 2
expect_exit 0 "the next gc removes it" "$KILN" registry gc --data "$D" --config cfg.json
curl -s "$U/metrics" >scrape.txt
expect_eq "...counted: 3 ok runs, the orphan's bytes added" \
	"$(metric 'kiln_registry_gc_runs_total{source="cli",outcome="ok"}') $(metric 'kiln_registry_gc_freed_bytes_total{source="cli",outcome="ok"}')" \
	"3 $(( BYTES + $(stat -c %s orphan) ))"
reg_stop

# ---- bad rules: refused naming the rule and what is wrong
badrule() { # NAME RULES-JSON PATTERN
	echo "{\"retention\": $2}" >bad.json
	expect_exit 1 "kiln serve refuses $1" "$KILN" serve --addr 127.0.0.1:0 --data "$T_TMP/bad" --config bad.json
	expect_grep "...saying so" "$3" "$T_TMP/err"
	expect_exit 1 "kiln registry retain refuses $1" "$KILN" registry retain --data "$T_TMP/bad" --config bad.json
	expect_grep "...saying so" "$3" "$T_TMP/err"
}
badrule "an unknown key" '[{"repositories": "a/*", "keep_newest": 1}, {"repositories": "b", "keep_newst": 3}]' \
	"retention\\[1\\]: unknown key 'keep_newst'"
badrule "a bad glob" '[{"repositories": "team-[a/*", "keep_newest": 1}]' \
	"retention\\[0\\]\\.repositories: bad pattern 'team-\\[a/\\*' \\(unclosed \\[\\)"
badrule "a negative count" '[{"repositories": "*", "keep_newest": -1}]' "retention\\[0\\]\\.keep_newest: want an integer >= 0"
badrule "a bad duration" '[{"repositories": "*", "untagged_older_than": "7x"}]' "retention\\[0\\]\\.untagged_older_than: .*7x"
badrule "a rule without repositories" '[{"keep_newest": 3}]' "retention\\[0\\]\\.repositories: required"
badrule "a rule that says nothing" '[{"repositories": "*"}]' "retention\\[0\\]: says nothing"
echo '{"s3": {"endpoint": "http://127.0.0.1:1", "bucket": "b", "access_key": "k", "secret_key": "s"},
  "retention": [{"repositories": "*", "keep_newest": 1}]}' >s3.json
expect_exit 1 "retention with the S3 backend refused by kiln registry retain" \
	"$KILN" registry retain --data "$T_TMP/bad" --config s3.json
expect_grep "...saying it needs the filesystem metadata backend" 'retention: needs the filesystem metadata backend' "$T_TMP/err"
expect_exit 1 "...and by kiln serve" "$KILN" serve --addr 127.0.0.1:0 --data "$T_TMP/bad" --config s3.json
[ ! -e "$T_TMP/bad/meta.db" ] && ok "no data directory made by the refusals" || not_ok "no data directory made by the refusals"

# ---- kiln serve's gc timer applies the rules while serving
cat >timer.json <<'EOF'
{"gc_interval_s": 1, "gc_grace_s": 2, "retention": [{"repositories": "team-b/*", "keep_newest": 1}]}
EOF
D="$T_TMP/data2"
reg_start "$D" --config timer.json || { not_ok "kiln serve starts with gc_interval_s"; exit 1; }
push a1 team-b/svc:one || not_ok "push team-b/svc:one"
B1=$(digest team-b/svc one)
LB=$(curl -s "$U/v2/team-b/svc/manifests/one" | jq -r '.layers[0].digest')
push a2 team-b/svc:two && push a3 team-b/svc:three || not_ok "push team-b/svc:two, three"
for i in $(seq 1 40); do [ "$(tags team-b/svc)" = "three " ] && break; sleep 0.25; done
expect_eq "the timer removed all but the newest tag" "$(tags team-b/svc)" "three "
expect_eq "and the manifest of one" "$(code "/v2/team-b/svc/manifests/$B1")" 404
for i in $(seq 1 40); do [ "$(code "/v2/team-b/svc/blobs/$LB")" = 404 ] && break; sleep 0.25; done
expect_eq "its gc freed one's layer once the grace had passed" "$(code "/v2/team-b/svc/blobs/$LB")" 404
expect_exit 0 "team-b/svc:three pulls whole meanwhile" $S copy --src-tls-verify=false "docker://$REG/team-b/svc:three" oci:pulled:three
curl -s "$U/metrics" >scrape.txt
runs=$(metric 'kiln_registry_gc_runs_total{source="timer",outcome="ok"}')
if [ "${runs:-0}" -ge 1 ]; then ok "the timer's runs counted ($runs)"; else not_ok "the timer's runs counted"; fi
expect_eq "the tags its retention removed counted: one, two" \
	"$(metric 'kiln_registry_retention_removed_tags_total{source="timer",outcome="ok"}')" 2
freed=$(metric 'kiln_registry_gc_freed_bytes_total{source="timer",outcome="ok"}')
if [ "${freed:-0}" -ge "$(stat -c %s l.a1)" ]; then ok "the bytes it freed counted ($freed, one's layer included)"; else
	not_ok "the bytes it freed counted ($freed)"; fi
reg_stop
