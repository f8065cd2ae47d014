#!/usr/bin/env bash
# t0706-registry-s3-replicas.sh — two `kiln serve` replicas (own data
# directories) sharing one radosgw bucket: a push through A is pulled through
# B, deletes through B are seen by A, mounts and referrers cross replicas; then
# gc with zero grace runs in a loop from a third process while both replicas
# take pushes of the same blobs, and afterwards every manifest and link in the
# bucket names blobs that exist whole (test_registry_s3gc checks the bucket;
# its live part also races gc against a writer at gc's critical point);
# finally the conformance suites t0701 and t0707 against the S3 backend.
. tests/e2e/lib.sh
. tests/e2e/radosgw-lib.sh
. tests/e2e/registry-lib.sh

REPO=$PWD
BIN=$(realpath -m "${REG_S3GC_TEST:-build/asan/tests/test_registry_s3gc}")
PIDS=()
stop_all() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; PIDS=(); }
trap 'stop_all; rgw_stop; rm -rf "$T_TMP"' EXIT
if [ ! -x "$BIN" ]; then not_ok "$BIN is built (make check builds it)"; exit 1; fi
if rgw_start "$T_TMP/ceph" >"$T_TMP/rgw.log" 2>&1; then ok "radosgw up at $RGW_ENDPOINT"; else
	not_ok "radosgw starts"; sed 's/^/#   /' "$T_TMP/rgw.log" | tail -20; exit 1
fi
export KILN_TEST_S3_ENDPOINT=$RGW_ENDPOINT KILN_TEST_S3_ACCESS_KEY=$RGW_ACCESS KILN_TEST_S3_SECRET_KEY=$RGW_SECRET
cd "$T_TMP"
# Short pins so that gc with zero grace can act within the test (docs/registry.md).
cat >s3.json <<EOC
{"s3": {"endpoint": "$RGW_ENDPOINT", "bucket": "shared", "access_key": "$RGW_ACCESS", "secret_key": "$RGW_SECRET"},
 "gc_grace_s": 0, "gc_pin_s": 2, "upload_expiry_s": 0}
EOC
start() { # NAME [CONFIG] -> sets NAME=host:port
	reg_start "$T_TMP/data$1" --config "${2:-s3.json}" || { not_ok "replica $1 starts"; exit 1; }
	PIDS+=("$REG_PID"); REG_PID=
	eval "$1=$REG"
}
start A
start B
ok "two replicas on one bucket: A=$A B=$B"
S="skopeo --command-timeout 120s"
OM_TYPE=application/vnd.oci.image.manifest.v1+json
umoci init --layout img >/dev/null && umoci new --image img:v1 >/dev/null
head -c 3000000 /dev/urandom >l1; head -c 3000 /dev/urandom >l2
for f in l1 l2; do umoci insert --image img:v1 "$f" "/$f" >/dev/null; done
src=$(skopeo inspect --raw oci:img:v1 | sha256sum | cut -d' ' -f1)

# ---- push through A, pull through B
expect_exit 0 "skopeo push through A" $S copy --dest-tls-verify=false oci:img:v1 "docker://$A/team/app:v1"
expect_exit 0 "skopeo pull through B" $S copy --src-tls-verify=false "docker://$B/team/app:v1" oci:pulled:v1
expect_eq "pulled manifest digest matches" "$(skopeo inspect --raw oci:pulled:v1 | sha256sum | cut -d' ' -f1)" "$src"
bad=0
for d in $(skopeo inspect --raw oci:pulled:v1 | jq -r '.config.digest, .layers[].digest'); do
	cmp -s "img/blobs/sha256/${d#sha256:}" "pulled/blobs/sha256/${d#sha256:}" || bad=$((bad + 1))
done
expect_eq "every blob pulled through B is byte-identical" "$bad" 0
U=http://$B
req GET /v2/team/app/tags/list
expect_eq "tags list through B" "$CODE $(jq -c .tags body)" '200 ["v1"]'
req GET /v2/_catalog
expect_eq "catalog through B" "$CODE $(jq -c .repositories body)" '200 ["team/app"]'
layer=$(skopeo inspect --raw oci:img:v1 | jq -r '.layers[0].digest')
head_req "/v2/team/app/blobs/$layer"
expect_eq "blob HEAD through B" "$CODE $(hdr Content-Length)" "200 $(stat -c %s "img/blobs/sha256/${layer#sha256:}")"

# ---- mounts and referrers across replicas
req POST "/v2/other/app/blobs/uploads/?mount=$layer&from=team/app"
expect_code "mount through B of a blob pushed through A" 201
U=http://$A
head_req "/v2/other/app/blobs/$layer"
expect_code "the mounted blob is seen through A" 200
printf '{}' >acfg
push_blob team/app acfg
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/x.sig","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"%s","size":2},"layers":[{"mediaType":"application/vnd.oci.empty.v1+json","digest":"%s","size":2}],"subject":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s}}' \
	"$(sha256_of acfg)" "$(sha256_of acfg)" "$src" "$(skopeo inspect --raw oci:img:v1 | wc -c)" >sig.json
req PUT "/v2/team/app/manifests/$(sha256_of sig.json)" -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' --data-binary @sig.json
expect_eq "artifact with a subject through A" "$CODE $(hdr OCI-Subject)" "201 sha256:$src"
U=http://$B
req GET "/v2/team/app/referrers/sha256:$src?artifactType=application/x.sig"
expect_eq "its referrer listed through B" "$CODE $(jq -r '.manifests[0].digest' body)" "200 $(sha256_of sig.json)"

# ---- upload sessions are per replica (docs/registry.md)
U=http://$A
req POST /v2/team/app/blobs/uploads/
loc=$(hdr Location)
U=http://$B
req PATCH "$loc" --data-binary @acfg
expect_error "an upload started on A is unknown to B" 404 BLOB_UPLOAD_UNKNOWN

# ---- deletes through B are seen through A
req DELETE "/v2/team/app/manifests/$(sha256_of sig.json)"
expect_code "delete the artifact through B" 202
U=http://$A
req GET "/v2/team/app/referrers/sha256:$src"
expect_eq "no referrers through A" "$CODE $(jq '.manifests | length' body)" "200 0"
expect_exit 0 "tag v2 through A" $S copy --dest-tls-verify=false oci:img:v1 "docker://$A/team/app:v2"
U=http://$B
req DELETE /v2/team/app/manifests/v2
expect_code "delete tag v2 through B" 202
U=http://$A
req GET /v2/team/app/manifests/v2
expect_error "tag v2 gone through A" 404 MANIFEST_UNKNOWN
req GET /v2/team/app/manifests/v1 -H 'Accept: application/vnd.oci.image.manifest.v1+json'
expect_code "v1 still there through A" 200
expect_exit 0 "skopeo delete through B" $S delete --tls-verify=false "docker://$B/team/app:v1"
req GET /v2/team/app/manifests/v1
expect_error "v1 gone through A" 404 MANIFEST_UNKNOWN
req GET "/v2/team/app/manifests/sha256:$src"
expect_error "its digest gone through A" 404 MANIFEST_UNKNOWN
expect_exit 0 "kiln registry history on the bucket" "$KILN" registry history --data dataA --config s3.json team/app:v1
expect_eq "history: pushed, then deleted" "$(awk '{print $3}' out | tr '\n' ' ')" "sha256:$src (deleted) "

# ---- gc from a third process: unreferenced blobs go, referenced ones stay
expect_exit 0 "skopeo push through B (stays referenced)" $S copy --dest-tls-verify=false oci:img:v1 "docker://$B/keep/app:v1"
sleep 3 # pins of the pushes above expire (gc_pin_s 2)
expect_exit 0 "kiln registry gc on the bucket" "$KILN" registry gc --data dataC --config s3.json
expect_grep "gc removed the blobs only other/app and the artifact held" '^[1-9][0-9]* blobs removed' out
U=http://$A
expect_exit 0 "the kept image still pulls through A" $S copy --src-tls-verify=false "docker://$A/keep/app:v1" oci:kept:v1
expect_eq "kept image digest" "$(skopeo inspect --raw oci:kept:v1 | sha256sum | cut -d' ' -f1)" "$src"
req GET "/v2/other/app/blobs/$layer"
expect_eq "a blob still referenced elsewhere stays linked" "$CODE" 200
"$BIN" check shared >check1.out 2>&1
expect_eq "bucket check after gc: every manifest's blobs and every link's blob exist" "$?" 0
sed -n '/^#/p; /not ok/p' check1.out

# ---- gc (grace 0) in a loop while both replicas take pushes of the same blobs
printf '{"architecture":"amd64","os":"linux"}' >rcfg
for k in 1 2 3; do head -c $((k * 200000)) /dev/urandom >"rb$k"; done
desc() { printf '{"mediaType":"%s","digest":"%s","size":%s}' "$1" "$(sha256_of "$2")" "$(stat -c %s "$2")"; }
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":%s,"layers":[%s,%s,%s]}' \
	"$(desc application/vnd.oci.image.config.v1+json rcfg)" "$(desc application/vnd.oci.image.layer.v1.tar rb1)" \
	"$(desc application/vnd.oci.image.layer.v1.tar rb2)" "$(desc application/vnd.oci.image.layer.v1.tar rb3)" >rman.json
rm -f gcstop
( for _ in $(seq 1 500); do [ -f gcstop ] && break
	"$KILN" registry gc --data dataC --config s3.json >>gcout 2>>gcerr || echo "gc failed" >>gcerr
	sleep "0.$((RANDOM % 4))"; done ) &
gcpid=$!
blobfail=0; bad=0; stored=0; unread=0; nb=0
mdig=$(sha256_of rman.json)
for n in $(seq 1 16); do
	if [ $((n % 2)) = 0 ]; then W=$A; R=$B; else W=$B; R=$A; fi
	repo="race/r$((n % 3))"
	# Now and then the last round's pins expire first, so gc takes the blobs
	# just as they are pushed again.
	[ $((n % 5)) = 0 ] && sleep 4
	U=http://$W
	for f in rcfg rb1 rb2 rb3; do push_blob "$repo" "$f" >/dev/null || blobfail=$((blobfail + 1)); done
	req PUT "/v2/$repo/manifests/v$n" -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' --data-binary @rman.json
	case "$CODE:$(jq -r '.errors[0].code' body 2>/dev/null)" in
	201:*) stored=$((stored + 1)) ;;
	400:MANIFEST_BLOB_UNKNOWN) continue ;; # gc (grace 0) took a blob between its upload and the manifest
	*) bad=$((bad + 1)); echo "# manifest PUT $repo:v$n: $CODE $(head -c 200 body)"; continue ;;
	esac
	# Stored: read back through the other replica, manifest and every blob whole.
	for d in "$mdig" $(jq -r '.config.digest, .layers[].digest' rman.json); do
		nb=$((nb + 1))
		kind=blobs; [ "$d" = "$mdig" ] && kind=manifests
		got=$(curl -s --max-time 30 -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$R/v2/$repo/$kind/$d" | sha256sum | cut -d' ' -f1)
		[ "sha256:$got" = "$d" ] || { unread=$((unread + 1)); echo "# $repo:v$n $d unreadable through the other replica"; }
	done
	U=http://$R
	req DELETE "/v2/$repo/manifests/$mdig" # unreferenced again: the next round races gc once more
done
touch gcstop; wait "$gcpid"
echo "# pushes during gc with grace 0: $stored of 16 manifests stored; gc runs that removed blobs: $(grep -c '^[1-9][0-9]* blobs removed' gcout)"
expect_eq "gc removed blobs during the race (it was exercised)" "$(grep -c '^[1-9][0-9]* blobs removed' gcout | sed 's/^[1-9][0-9]*$/yes/')" yes
expect_eq "blob uploads during gc all succeed" "$blobfail" 0
expect_eq "manifest PUTs during gc: stored or MANIFEST_BLOB_UNKNOWN, nothing else" "$bad" 0
expect_eq "gc runs without errors" "$(cat gcerr 2>/dev/null)" ""
expect_eq "all $nb blobs of stored manifests readable through the other replica" "$unread" 0
"$BIN" check shared >check2.out 2>&1
expect_eq "bucket check after the race: every manifest's blobs and every link's blob exist" "$?" 0
sed -n '/^#/p; /not ok/p' check2.out

# ---- the live unit checks: gc against a writer at gc's critical point, stale multipart uploads
"$BIN" >s3gc.out 2>&1
rc=$?
sed -n 's/^\(not \)\{0,1\}ok - /&s3gc: /p; /^#/p' s3gc.out
expect_eq "test_registry_s3gc exits 0" "$rc" 0
expect_grep "the live race ran" '^ok - test_race' s3gc.out

# ---- auth through the bucket: tokens, the issued-token key, public flags
sed 's/"bucket": "shared"/"bucket": "authed"/; s/"gc_grace_s"/"auth": true, "gc_grace_s"/' s3.json >auth.json
start P auth.json
start Q auth.json
expect_exit 0 "kiln token create on the bucket (no replica's data dir)" "$KILN" token create --data dataT --config auth.json --scope team:pull,push,delete ci
SEC=$(cat out)
expect_exit 0 "kiln token ls on the bucket" "$KILN" token ls --data dataT --config auth.json
expect_grep "token listed" '^ci +team:pull,push,delete' out
U=http://$P
req GET /v2/team/x/tags/list
expect_code "anonymous on P" 401
U=http://$Q
req GET /v2/team/x/tags/list -H "Authorization: Bearer $SEC"
expect_error "the secret works on Q" 404 NAME_UNKNOWN
U=http://$P
req GET "/token?service=kiln&scope=repository:team/x:pull" -u "any:$SEC"
TOK=$(jq -r .token body)
U=http://$Q
req GET /v2/team/x/tags/list -H "Authorization: Bearer $TOK"
expect_error "a token issued by P works on Q" 404 NAME_UNKNOWN
expect_exit 0 "skopeo push to P with the secret" $S copy --dest-tls-verify=false --dest-creds "x:$SEC" oci:img:v1 "docker://$P/team/app:v1"
rm -rf apulled
expect_exit 0 "skopeo pull from Q with the secret" $S copy --src-tls-verify=false --src-creds "x:$SEC" "docker://$Q/team/app:v1" oci:apulled:v1
req GET /v2/team/app/manifests/v1
expect_code "anonymous pull of a private repository on Q" 401
expect_exit 0 "kiln registry public on the bucket" "$KILN" registry public --data dataT --config auth.json team/app
req GET /v2/team/app/manifests/v1 -H "Accept: $OM_TYPE"
expect_code "anonymous pull once public, on Q" 200
expect_exit 0 "kiln token revoke on the bucket" "$KILN" token revoke --data dataT --config auth.json ci
U=http://$P
req GET /v2/team/x/tags/list -H "Authorization: Bearer $SEC"
expect_code "the revoked secret on P" 401
U=http://$Q
req GET /v2/team/x/tags/list -H "Authorization: Bearer $TOK"
expect_code "the token P issued, revoked, on Q" 401

# ---- the conformance suites, with the repositories in the bucket
for t in t0701-registry-api t0707-registry-conformance; do
	cat >"conf-$t.json" <<EOC
{"s3": {"endpoint": "$RGW_ENDPOINT", "bucket": "conf-${t%%-*}", "access_key": "$RGW_ACCESS", "secret_key": "$RGW_SECRET"}}
EOC
	(cd "$REPO" && REG_CONFIG="$T_TMP/conf-$t.json" bash "tests/e2e/$t.sh") >"conf-$t.out" 2>&1
	sed -n "s/^\(not \)\{0,1\}ok - /&s3 ${t%%-*}: /p" "conf-$t.out"
	grep -A3 '^not ok' "conf-$t.out" | grep '^#' | head -20
done
