#!/usr/bin/env bash
# t0707-registry-conformance.sh — the endpoints, statuses and headers of the
# issue's list that t0701 does not reach, with curl against a real server:
# the referrers API (subject, OCI-Subject, artifactType filter and
# OCI-Filters-Applied, config mediaType as artifactType, unknown and bad
# subjects, deletes), OCI artifact manifests, sha512 manifests of sha512
# blobs, and the error bodies of odd requests (bad digests on DELETE, unknown
# upload status, Content-Range/Content-Length disagreeing, pagination edges).
# REG_CONFIG=FILE runs it against a server with that config (t0706 runs it on
# the S3 backend, whose metadata lives in the bucket).
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

trap 'reg_stop; rm -rf "$T_TMP"' EXIT
reg_start "$T_TMP/data" ${REG_CONFIG:+--config "$REG_CONFIG"} || { not_ok "kiln serve starts"; exit 1; }
cd "$T_TMP"
IDX=application/vnd.oci.image.index.v1+json
OM=application/vnd.oci.image.manifest.v1+json

# ---- a subject image and two referrers of it
printf '{"architecture":"amd64","os":"linux"}' >cfg
printf 'layer bytes' >lay
printf '{}' >empty
push_blob conf/app cfg && push_blob conf/app lay && push_blob conf/app empty || not_ok "blobs pushed"
desc() { printf '{"mediaType":"%s","digest":"%s","size":%s}' "$1" "$(sha256_of "$2")" "$(stat -c %s "$2")"; }
printf '{"schemaVersion":2,"mediaType":"%s","config":%s,"layers":[%s]}' "$OM" \
	"$(desc application/vnd.oci.image.config.v1+json cfg)" "$(desc application/vnd.oci.image.layer.v1.tar lay)" >img.json
req PUT /v2/conf/app/manifests/v1 -H "Content-Type: $OM" --data-binary @img.json
expect_code "subject image PUT" 201
SUBJ=$(sha256_of img.json)
subject=$(printf '{"mediaType":"%s","digest":"%s","size":%s}' "$OM" "$SUBJ" "$(stat -c %s img.json)")
printf '{"schemaVersion":2,"mediaType":"%s","artifactType":"application/x.sbom","config":%s,"layers":[%s],"subject":%s,"annotations":{"org.example":"sbom"}}' \
	"$OM" "$(desc application/vnd.oci.empty.v1+json empty)" "$(desc application/vnd.oci.empty.v1+json empty)" "$subject" >sbom.json
req PUT "/v2/conf/app/manifests/$(sha256_of sbom.json)" -H "Content-Type: $OM" --data-binary @sbom.json
expect_eq "artifact PUT answers OCI-Subject" "$CODE $(hdr OCI-Subject)" "201 $SUBJ"
# no artifactType: its config's media type stands in (image-spec)
printf '{"schemaVersion":2,"mediaType":"%s","config":%s,"layers":[%s],"subject":%s}' \
	"$OM" "$(desc application/x.sig.config cfg)" "$(desc application/vnd.oci.image.layer.v1.tar lay)" "$subject" >sig.json
req PUT "/v2/conf/app/manifests/$(sha256_of sig.json)" -H "Content-Type: $OM" --data-binary @sig.json
expect_code "manifest with a subject, no artifactType" 201

req GET "/v2/conf/app/referrers/$SUBJ"
expect_eq "referrers: 200, an image index" "$CODE $(hdr Content-Type) $(jq -r .mediaType body) $(jq .schemaVersion body)" \
	"200 $IDX $IDX 2"
expect_eq "referrers lists both" "$(jq -r '[.manifests[].digest] | sort | join(" ")' body)" \
	"$(printf '%s\n' "$(sha256_of sbom.json)" "$(sha256_of sig.json)" | sort | tr '\n' ' ' | sed 's/ $//')"
expect_eq "descriptor: artifactType, size, annotations" \
	"$(jq -c --arg d "$(sha256_of sbom.json)" '.manifests[] | select(.digest == $d) | [.mediaType, .artifactType, .size, .annotations["org.example"]]' body)" \
	"[\"$OM\",\"application/x.sbom\",$(stat -c %s sbom.json),\"sbom\"]"
expect_eq "config media type as artifactType" \
	"$(jq -r --arg d "$(sha256_of sig.json)" '.manifests[] | select(.digest == $d) | .artifactType' body)" application/x.sig.config
if [ -z "$(hdr OCI-Filters-Applied)" ]; then ok "no OCI-Filters-Applied without a filter"; else not_ok "no OCI-Filters-Applied without a filter"; fi
req GET "/v2/conf/app/referrers/$SUBJ?artifactType=application/x.sbom"
expect_eq "filtered by artifactType" "$CODE $(hdr OCI-Filters-Applied) $(jq -r '[.manifests[].digest] | join(" ")' body)" \
	"200 artifactType $(sha256_of sbom.json)"
req GET "/v2/conf/app/referrers/$SUBJ?artifactType=application/none"
expect_eq "a filter matching nothing: empty index" "$CODE $(jq '.manifests | length' body)" "200 0"
req GET "/v2/conf/app/referrers/sha256:$(printf %064d 0)"
expect_eq "referrers of an unknown digest: empty index" "$CODE $(jq '.manifests | length' body)" "200 0"
req GET /v2/conf/app/referrers/sha256:xyz
expect_error "referrers of a malformed digest" 400 DIGEST_INVALID
req DELETE "/v2/conf/app/manifests/$(sha256_of sig.json)"
expect_code "delete a referrer" 202
req GET "/v2/conf/app/referrers/$SUBJ"
expect_eq "deleted referrer no longer listed" "$CODE $(jq -r '[.manifests[].digest] | join(" ")' body)" "200 $(sha256_of sbom.json)"
# a subject need not exist (image-spec: referrers may be pushed first)
printf '{"schemaVersion":2,"mediaType":"%s","artifactType":"application/x.early","config":%s,"layers":[],"subject":{"mediaType":"%s","digest":"sha256:%s","size":7}}' \
	"$OM" "$(desc application/vnd.oci.empty.v1+json empty)" "$OM" "$(printf %064d 1)" >early.json
req PUT "/v2/conf/app/manifests/$(sha256_of early.json)" -H "Content-Type: $OM" --data-binary @early.json
expect_eq "referrer of a subject not (yet) pushed" "$CODE $(hdr OCI-Subject)" "201 sha256:$(printf %064d 1)"

# ---- OCI artifact manifest (application/vnd.oci.artifact.manifest.v1+json)
AM=application/vnd.oci.artifact.manifest.v1+json
printf '{"mediaType":"%s","artifactType":"application/x.note","blobs":[%s],"subject":%s}' "$AM" \
	"$(desc application/octet-stream lay)" "$subject" >art.json
req PUT /v2/conf/app/manifests/note -H "Content-Type: $AM" --data-binary @art.json
expect_eq "artifact manifest PUT" "$CODE $(hdr OCI-Subject)" "201 $SUBJ"
req GET /v2/conf/app/manifests/note -H "Accept: $AM"
expect_eq "artifact manifest GET: bytes and type" "$CODE $(hdr Content-Type) $(sha256_of body)" "200 $AM $(sha256_of art.json)"
printf '{"mediaType":"%s","artifactType":"application/x.note","blobs":[%s]}' "$AM" \
	"$(printf '{"mediaType":"application/octet-stream","digest":"sha256:%s","size":3}' "$(printf %064d 2)")" >art2.json
req PUT /v2/conf/app/manifests/note2 -H "Content-Type: $AM" --data-binary @art2.json
expect_error "artifact manifest with an unknown blob" 400 MANIFEST_BLOB_UNKNOWN

# ---- sha512 all the way: a sha512 manifest naming sha512 blobs
req POST "/v2/conf/s512/blobs/uploads/?digest=$(sha512_of cfg)" --data-binary @cfg
expect_code "sha512 config blob" 201
req POST "/v2/conf/s512/blobs/uploads/?digest=$(sha512_of lay)" --data-binary @lay
expect_code "sha512 layer blob" 201
printf '{"schemaVersion":2,"mediaType":"%s","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
	"$OM" "$(sha512_of cfg)" "$(stat -c %s cfg)" "$(sha512_of lay)" "$(stat -c %s lay)" >m512.json
req PUT "/v2/conf/s512/manifests/$(sha512_of m512.json)" -H "Content-Type: $OM" --data-binary @m512.json
expect_eq "sha512 manifest of sha512 blobs" "$CODE $(hdr Docker-Content-Digest)" "201 $(sha512_of m512.json)"
head_req "/v2/conf/s512/blobs/$(sha512_of lay)"
expect_eq "sha512 blob HEAD" "$CODE $(hdr Docker-Content-Digest) $(hdr Content-Length)" "200 $(sha512_of lay) $(stat -c %s lay)"

# ---- odd requests get the spec's errors
req DELETE /v2/conf/app/blobs/sha256:nothex
expect_error "blob DELETE with a malformed digest" 400 DIGEST_INVALID
head_req "/v2/conf/app/blobs/sha256:$(printf %064d 3)"
expect_eq "HEAD of an unknown blob: 404, no body" "$CODE $(stat -c %s body)" "404 0"
head_req /v2/conf/app/manifests/nope
expect_code "HEAD of an unknown manifest" 404
req DELETE /v2/conf/app/manifests/nope
expect_error "DELETE of an unknown tag" 404 MANIFEST_UNKNOWN
req GET /v2/conf/nothere/manifests/v1
expect_eq "manifest of an unknown repository: 404" "$CODE" 404
req GET /v2/conf/app/blobs/uploads/00000000-0000-4000-8000-000000000000
expect_error "status of an unknown upload" 404 BLOB_UPLOAD_UNKNOWN
req POST /v2/conf/app/blobs/uploads/
loc=$(hdr Location)
req PATCH "$loc" -H 'Content-Range: 0-9' --data-binary @cfg
expect_error "Content-Range disagreeing with the body's length" 416 BLOB_UPLOAD_INVALID
req GET "$loc"
expect_eq "the refused chunk left the upload at 0" "$CODE $(hdr Range)" "204 0-0"
req PUT "$loc?digest=$(sha256_of lay)" --data-binary @cfg
expect_error "closing PUT whose bytes do not match" 400 DIGEST_INVALID
req PUT /v2/conf/app/manifests/v1 -H "Content-Type: $OM" --data-binary '{"schemaVersion":2,'
expect_error "truncated manifest by tag" 400 MANIFEST_INVALID
req GET "/v2/conf/app/tags/list?last=zzz"
expect_eq "tags after the last one: empty list" "$CODE $(jq -c .tags body)" '200 []'
req GET "/v2/conf/app/tags/list?n=-1"
expect_error "negative n" 400 PAGINATION_NUMBER_INVALID
req GET "/v2/_catalog?n=0"
expect_eq "catalog with n=0" "$CODE $(jq -c .repositories body)" '200 []'
req PUT /v2/conf/app/blobs/uploads/
expect_error "PUT on the uploads collection" 405 UNSUPPORTED
