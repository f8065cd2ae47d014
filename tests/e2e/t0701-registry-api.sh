#!/usr/bin/env bash
# t0701-registry-api.sh — conformance of `kiln serve` with the OCI distribution
# spec v1.1, endpoint by endpoint: status codes, headers and error bodies for
# blobs, uploads (monolithic, chunked, mount), manifests, tags, catalog.
# REG_CONFIG=FILE runs it against a server with that config (t0706 runs it on
# the S3 backend, whose metadata lives in the bucket).
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

trap 'reg_stop; rm -rf "$T_TMP"' EXIT
reg_start "$T_TMP/data" ${REG_CONFIG:+--config "$REG_CONFIG"} || { not_ok "kiln serve starts"; exit 1; }
cd "$T_TMP"
Z=sha256:0000000000000000000000000000000000000000000000000000000000000000

# ---- base, routing, names
req GET /v2/
expect_code "GET /v2/" 200
expect_eq "API version header" "$(hdr Docker-Distribution-API-Version)" "registry/2.0"
req GET /v3/whatever
expect_code "unknown endpoint" 404
req GET "/v2/Bad/Name/blobs/$Z"
expect_error "uppercase name is NAME_INVALID" 400 NAME_INVALID
req GET "/v2/a..b/manifests/latest"
expect_error "name with '..' is NAME_INVALID" 400 NAME_INVALID
req POST "/v2/foo/tags/list"
expect_error "POST on tags list is UNSUPPORTED" 405 UNSUPPORTED

# ---- blobs
printf 'hello, registry' >b1
D1=$(sha256_of b1)
req GET "/v2/foo/blobs/$D1"
expect_error "unknown blob GET" 404 BLOB_UNKNOWN
head_req "/v2/foo/blobs/$D1"
expect_code "unknown blob HEAD" 404
req GET "/v2/foo/blobs/sha256:xyz"
expect_error "malformed digest" 400 DIGEST_INVALID
req GET "/v2/foo/blobs/md5:d41d8cd98f00b204e9800998ecf8427e"
expect_error "unsupported algorithm" 400 DIGEST_INVALID

req POST "/v2/foo/blobs/uploads/?digest=$D1" --data-binary @b1 -H 'Content-Type: application/octet-stream'
expect_code "monolithic POST with digest" 201
expect_eq "Location of the blob" "$(hdr Location)" "/v2/foo/blobs/$D1"
expect_eq "Docker-Content-Digest" "$(hdr Docker-Content-Digest)" "$D1"
req GET "/v2/foo/blobs/$D1"
expect_code "blob GET" 200
expect_eq "blob content" "$(cat body)" "hello, registry"
head_req "/v2/foo/blobs/$D1"
expect_code "blob HEAD" 200
expect_eq "HEAD Content-Length" "$(hdr Content-Length)" 15
expect_eq "HEAD Docker-Content-Digest" "$(hdr Docker-Content-Digest)" "$D1"
req GET "/v2/foo/blobs/$D1" -H 'Range: bytes=7-14'
expect_code "blob GET with Range" 206
expect_eq "ranged content" "$(cat body)" "registry"
expect_eq "Content-Range" "$(hdr Content-Range)" "bytes 7-14/15"
req GET "/v2/foo/blobs/$D1" -H 'Range: bytes=-3'
expect_eq "suffix range" "$(cat body)" "try"
req GET "/v2/foo/blobs/$D1" -H 'Range: bytes=100-'
expect_code "unsatisfiable range" 416
expect_eq "416 names the size" "$(hdr Content-Range)" "bytes */15"
req GET "/v2/bar/blobs/$D1"
expect_error "blob is not visible in another repository" 404 BLOB_UNKNOWN

printf 'wrong' >b2
req POST "/v2/foo/blobs/uploads/?digest=$D1" --data-binary @b2
expect_error "monolithic POST with a wrong digest" 400 DIGEST_INVALID
req GET "/v2/foo/blobs/$(sha256_of b2)"
expect_error "content with a wrong digest never becomes visible" 404 BLOB_UNKNOWN
expect_eq "no staging left behind by the failed upload" "$(ls data/uploads | wc -l)" 0

# sha512
printf 'sha512 content' >b5
D5=$(sha512_of b5)
req POST "/v2/foo/blobs/uploads/?digest=$D5" --data-binary @b5
expect_code "sha512 monolithic upload" 201
req GET "/v2/foo/blobs/$D5"
expect_eq "sha512 blob content" "$(cat body)" "sha512 content"
req POST "/v2/foo/blobs/uploads/?digest=sha512:abcd" --data-binary @b5
expect_error "short sha512 digest" 400 DIGEST_INVALID

# ---- POST + PUT
req POST "/v2/foo/blobs/uploads/"
expect_code "POST opens an upload" 202
LOC=$(hdr Location)
expect_grep "Location names the upload" '^location: /v2/foo/blobs/uploads/[0-9a-f-]{36}$' <(tr 'A-Z' 'a-z' <hdr | grep -i '^location')
expect_eq "empty upload Range" "$(hdr Range)" "0-0"
[ -n "$(hdr Docker-Upload-UUID)" ] && ok "Docker-Upload-UUID set" || not_ok "Docker-Upload-UUID set"
printf 'put body' >b3
D3=$(sha256_of b3)
req PUT "$LOC?digest=$D3" --data-binary @b3 -H 'Content-Type: application/octet-stream'
expect_code "PUT completes the upload" 201
expect_eq "PUT Location" "$(hdr Location)" "/v2/foo/blobs/$D3"
req GET "$LOC"
expect_error "a finished upload is gone" 404 BLOB_UPLOAD_UNKNOWN

# ---- chunked
head -c 3000 /dev/urandom >c1; head -c 2000 /dev/urandom >c2; cat c1 c2 >c12
DC=$(sha256_of c12)
req POST "/v2/foo/blobs/uploads/"
LOC=$(hdr Location)
req PATCH "$LOC" --data-binary @c1 -H 'Content-Type: application/octet-stream' -H 'Content-Range: 0-2999'
expect_code "first chunk" 202
expect_eq "Range after first chunk" "$(hdr Range)" "0-2999"
req GET "$LOC"
expect_code "upload status" 204
expect_eq "status Range" "$(hdr Range)" "0-2999"
req PATCH "$LOC" --data-binary @c2 -H 'Content-Range: 0-1999'
expect_error "out-of-order chunk" 416 BLOB_UPLOAD_INVALID
req PATCH "$LOC" --data-binary @c2 -H 'Content-Range: 3001-5000'
expect_code "chunk with a gap" 416
req PATCH "$LOC" --data-binary @c2 -H 'Content-Range: 3000-4999'
expect_code "second chunk" 202
expect_eq "Range after second chunk" "$(hdr Range)" "0-4999"
req PUT "$LOC"
expect_error "PUT without digest" 400 DIGEST_INVALID
req PUT "$LOC?digest=$DC"
expect_code "PUT closes the chunked upload" 201
req GET "/v2/foo/blobs/$DC"
cmp -s body c12 && ok "chunked blob content" || not_ok "chunked blob content"

# streamed PATCH without Content-Range, then a final chunk in the PUT
req POST "/v2/foo/blobs/uploads/"
LOC=$(hdr Location)
req PATCH "$LOC" --data-binary @c1
expect_code "streamed PATCH" 202
req PUT "$LOC?digest=$DC" --data-binary @c2 -H 'Content-Type: application/octet-stream'
expect_code "PUT with the last chunk" 201

# cancel and unknown uploads
req POST "/v2/foo/blobs/uploads/"
LOC=$(hdr Location)
req DELETE "$LOC"
expect_code "DELETE cancels an upload" 204
req GET "$LOC"
expect_error "cancelled upload is unknown" 404 BLOB_UPLOAD_UNKNOWN
req PATCH "/v2/foo/blobs/uploads/00000000-0000-4000-8000-000000000000" --data-binary @c1
expect_error "PATCH to an unknown upload" 404 BLOB_UPLOAD_UNKNOWN
req GET "/v2/foo/blobs/uploads/..%2F..%2Fmeta.db"
expect_code "upload id cannot escape the store" 404
req POST "/v2/other/blobs/uploads/"
LOC_OTHER=$(hdr Location)
req GET "${LOC_OTHER/other/foo}"
expect_error "an upload belongs to its repository" 404 BLOB_UPLOAD_UNKNOWN

# ---- cross-repository mount
req POST "/v2/bar/blobs/uploads/?mount=$D1&from=foo"
expect_code "mount from another repository" 201
expect_eq "mount Location" "$(hdr Location)" "/v2/bar/blobs/$D1"
req GET "/v2/bar/blobs/$D1"
expect_code "mounted blob readable" 200
req POST "/v2/bar/blobs/uploads/?mount=$Z&from=foo"
expect_code "mount of an unknown blob falls back to an upload" 202
req POST "/v2/baz/blobs/uploads/?mount=$D1&from=nope"
expect_code "mount from a repository without the blob is an upload" 202

# ---- blob delete
req DELETE "/v2/bar/blobs/$D1"
expect_code "blob DELETE" 202
req GET "/v2/bar/blobs/$D1"
expect_error "deleted blob" 404 BLOB_UNKNOWN
req GET "/v2/foo/blobs/$D1"
expect_code "blob still in the other repository" 200
req DELETE "/v2/bar/blobs/$D1"
expect_error "delete twice" 404 BLOB_UNKNOWN

# ---- manifests
printf '{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}' >cfg
push_blob foo cfg
DCFG=$(sha256_of cfg)
mk_manifest() { # CONFIG_DIGEST CONFIG_SIZE LAYER_DIGEST LAYER_SIZE [EXTRA_JSON]
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]%s}' "$@"
}
OCI='Content-Type: application/vnd.oci.image.manifest.v1+json'
mk_manifest "$DCFG" "$(stat -c %s cfg)" "$DC" 5000 "" >m1
DM1=$(sha256_of m1)
req PUT /v2/foo/manifests/v1 --data-binary @m1 -H "$OCI"
expect_code "manifest PUT by tag" 201
expect_eq "manifest Docker-Content-Digest" "$(hdr Docker-Content-Digest)" "$DM1"
expect_eq "manifest Location" "$(hdr Location)" "/v2/foo/manifests/$DM1"
req GET /v2/foo/manifests/v1
expect_code "manifest GET by tag" 200
cmp -s body m1 && ok "manifest bytes unchanged" || not_ok "manifest bytes unchanged"
expect_eq "manifest Content-Type" "$(hdr Content-Type)" "application/vnd.oci.image.manifest.v1+json"
req GET "/v2/foo/manifests/$DM1"
expect_code "manifest GET by digest" 200
head_req /v2/foo/manifests/v1
expect_code "manifest HEAD" 200
expect_eq "manifest HEAD digest" "$(hdr Docker-Content-Digest)" "$DM1"
expect_eq "manifest HEAD length" "$(hdr Content-Length)" "$(stat -c %s m1)"
req GET /v2/foo/manifests/nope
expect_error "unknown tag" 404 MANIFEST_UNKNOWN
req GET "/v2/foo/manifests/$Z"
expect_error "unknown manifest digest" 404 MANIFEST_UNKNOWN
req GET "/v2/bar/manifests/v1"
expect_error "manifest not in another repository" 404 MANIFEST_UNKNOWN
req PUT "/v2/foo/manifests/$DM1" --data-binary @m1 -H "$OCI"
expect_code "manifest PUT by its digest" 201
req PUT "/v2/foo/manifests/$Z" --data-binary @m1 -H "$OCI"
expect_error "manifest PUT by a wrong digest" 400 DIGEST_INVALID
mk_manifest "$DCFG" 10 "$Z" 5 "" >m_missing
req PUT /v2/foo/manifests/missing --data-binary @m_missing -H "$OCI"
expect_error "manifest with a layer not in the repository" 400 MANIFEST_BLOB_UNKNOWN
printf '{"schemaVersion":2,' >m_bad
req PUT /v2/foo/manifests/bad --data-binary @m_bad -H "$OCI"
expect_error "truncated JSON" 400 MANIFEST_INVALID
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}' >m_nocfg
req PUT /v2/foo/manifests/bad --data-binary @m_nocfg -H "$OCI"
expect_error "manifest without config" 400 MANIFEST_INVALID
req PUT /v2/foo/manifests/bad --data-binary @m1 -H 'Content-Type: application/vnd.oci.image.index.v1+json'
expect_error "mediaType differs from Content-Type" 400 MANIFEST_INVALID
sed 's/"size":5000/"size":-1/' m1 >m_neg
req PUT /v2/foo/manifests/bad --data-binary @m_neg -H "$OCI"
expect_error "negative size" 400 MANIFEST_INVALID
req PUT "/v2/foo/manifests/-bad-tag" --data-binary @m1 -H "$OCI"
expect_code "invalid tag refused" 400
head -c 5000000 /dev/zero >m_huge
req PUT /v2/foo/manifests/huge --data-binary @m_huge -H "$OCI"
expect_error "manifest over the size limit" 413 SIZE_INVALID

# image index and Docker schema2 list
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"amd64","os":"linux"}}]}' "$DM1" "$(stat -c %s m1)" >idx
req PUT /v2/foo/manifests/multi --data-binary @idx -H 'Content-Type: application/vnd.oci.image.index.v1+json'
expect_code "image index PUT" 201
req GET /v2/foo/manifests/multi
expect_eq "index Content-Type" "$(hdr Content-Type)" "application/vnd.oci.image.index.v1+json"
sed "s/$DM1/$Z/" idx >idx_missing
req PUT /v2/foo/manifests/multi2 --data-binary @idx_missing -H 'Content-Type: application/vnd.oci.image.index.v1+json'
expect_error "index with an unknown manifest" 400 MANIFEST_BLOB_UNKNOWN
printf '{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","digest":"%s","size":5000}]}' "$DCFG" "$(stat -c %s cfg)" "$DC" >dm
req PUT /v2/foo/manifests/docker --data-binary @dm -H 'Content-Type: application/vnd.docker.distribution.manifest.v2+json'
expect_code "Docker schema2 manifest PUT" 201
printf '{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.list.v2+json","manifests":[{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","digest":"%s","size":%s,"platform":{"architecture":"amd64","os":"linux"}}]}' "$(sha256_of dm)" "$(stat -c %s dm)" >dl
req PUT /v2/foo/manifests/dlist --data-binary @dl -H 'Content-Type: application/vnd.docker.distribution.manifest.list.v2+json'
expect_code "Docker manifest list PUT" 201
req PUT /v2/foo/manifests/sha512 --data-binary @m1 -H "$OCI"
req PUT "/v2/foo/manifests/$(sha512_of m1)" --data-binary @m1 -H "$OCI"
expect_code "manifest PUT by a sha512 digest" 201
req GET "/v2/foo/manifests/$(sha512_of m1)"
expect_code "manifest GET by sha512 digest" 200

# ---- tags list and pagination
push_blob pg cfg
req POST "/v2/pg/blobs/uploads/?mount=$DC&from=foo"
for t in t5 t3 t1 t4 t2; do req PUT "/v2/pg/manifests/$t" --data-binary @m1 -H "$OCI"; done
req GET /v2/pg/tags/list
expect_eq "tags list, sorted" "$(jq -c .tags body)" '["t1","t2","t3","t4","t5"]'
expect_eq "tags list names the repository" "$(jq -r .name body)" pg
req GET "/v2/pg/tags/list?n=2"
expect_eq "first page" "$(jq -c .tags body)" '["t1","t2"]'
expect_eq "Link to the next page" "$(hdr Link)" '</v2/pg/tags/list?n=2&last=t2>; rel="next"'
req GET "/v2/pg/tags/list?n=2&last=t2"
expect_eq "second page" "$(jq -c .tags body)" '["t3","t4"]'
req GET "/v2/pg/tags/list?n=2&last=t4"
expect_eq "last page" "$(jq -c .tags body)" '["t5"]'
expect_eq "no Link on the last page" "$(hdr Link)" ""
req GET "/v2/pg/tags/list?n=0"
expect_eq "n=0 gives an empty list" "$(jq -c .tags body)" '[]'
req GET "/v2/pg/tags/list?n=abc"
expect_code "bad n" 400
req GET /v2/nosuch/tags/list
expect_error "tags of an unknown repository" 404 NAME_UNKNOWN

# ---- catalog
req GET /v2/_catalog
expect_grep "catalog lists foo and pg" '"foo".*"pg"' body
req GET "/v2/_catalog?n=1"
expect_eq "catalog page of 1" "$(jq -c '.repositories|length' body)" 1
expect_grep "catalog Link" '^Link: </v2/_catalog\?n=1&last=' hdr

# ---- manifest delete
req DELETE /v2/pg/manifests/t5
expect_code "DELETE a tag" 202
req GET /v2/pg/manifests/t5
expect_error "deleted tag" 404 MANIFEST_UNKNOWN
req GET /v2/pg/manifests/t4
expect_code "other tags of that manifest stay" 200
req DELETE "/v2/pg/manifests/$DM1"
expect_code "DELETE a manifest by digest" 202
req GET /v2/pg/manifests/t4
expect_error "its tags are gone" 404 MANIFEST_UNKNOWN
req DELETE "/v2/pg/manifests/$DM1"
expect_error "DELETE it again" 404 MANIFEST_UNKNOWN
req GET /v2/pg/tags/list
expect_eq "tags list after deletes" "$(jq -c .tags body)" '[]'

# ---- robustness: garbage, slow and half requests; the server stays up
printf 'GARBAGE\r\n\r\n' | timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$REG_PORT; cat >&3; cat <&3" >/dev/null 2>&1
printf 'GET /v2/%s HTTP/1.1\r\nHost: x\r\n\r\n' "$(head -c 20000 /dev/zero | tr '\0' a)" | timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$REG_PORT; cat >&3; cat <&3" >/dev/null 2>&1
printf 'PATCH /v2/foo/blobs/uploads/x HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc' | timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$REG_PORT; cat >&3; sleep 1" >/dev/null 2>&1
req GET /v2/
expect_code "server up after malformed requests" 200
kill -0 "$REG_PID" && ok "server process alive" || not_ok "server process alive"

# ---- an upload survives a restart
req POST "/v2/foo/blobs/uploads/"
LOC=$(hdr Location)
req PATCH "$LOC" --data-binary @c1 -H 'Content-Range: 0-2999'
reg_stop TERM
reg_start "$T_TMP/data" ${REG_CONFIG:+--config "$REG_CONFIG"} || not_ok "restart"
req GET "$LOC"
expect_eq "upload offset after restart" "$CODE $(hdr Range)" "204 0-2999"
req PUT "$LOC?digest=$DC" --data-binary @c2
expect_code "upload finished after restart" 201
req GET /v2/foo/manifests/v1
expect_code "manifest survives restart" 200
