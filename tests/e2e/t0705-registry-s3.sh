#!/usr/bin/env bash
# t0705-registry-s3.sh — the S3 backend against a real S3 server: a one-node
# Ceph with radosgw on 127.0.0.1 (memstore, ~15 s to start); the live part of
# test_registry_s3 (SigV4, put, multipart, ranged get, head, delete, zero-byte
# objects, a wrong secret refused) under ASan/UBSan; then `kiln serve` with its
# blobs in the bucket: skopeo push/pull (a large layer goes multipart), a
# zero-byte blob, ranges, a restart; and `kiln serve --build` on it, the
# build's id in the bucket's tag history.
. tests/e2e/lib.sh
. tests/e2e/radosgw-lib.sh
. tests/e2e/registry-lib.sh

trap 'reg_stop; rgw_stop; rm -rf "$T_TMP"' EXIT
BIN=${REG_S3_TEST:-build/asan/tests/test_registry_s3}
if [ ! -x "$BIN" ]; then not_ok "$BIN is built (make check builds it)"; exit 1; fi
if ! command -v radosgw >/dev/null; then not_ok "radosgw installed (deps/registry.txt)"; exit 1; fi
if rgw_start "$T_TMP/ceph" >"$T_TMP/rgw.log" 2>&1; then ok "radosgw up at $RGW_ENDPOINT"; else
	not_ok "radosgw starts"; sed 's/^/#   /' "$T_TMP/rgw.log" | tail -20; exit 1
fi
KILN_TEST_S3_ENDPOINT=$RGW_ENDPOINT KILN_TEST_S3_ACCESS_KEY=$RGW_ACCESS KILN_TEST_S3_SECRET_KEY=$RGW_SECRET \
	"$BIN" >"$T_TMP/s3.out" 2>&1
rc=$?
sed -n 's/^\(not \)\{0,1\}ok - /&s3: /p; /^#/p' "$T_TMP/s3.out"
expect_eq "test_registry_s3 exits 0" "$rc" 0
expect_grep "the live checks ran" '^ok - test_live$' "$T_TMP/s3.out"

# ---- kiln serve with blobs in S3
cat >"$T_TMP/s3.json" <<EOC
{"s3": {"endpoint": "$RGW_ENDPOINT", "bucket": "kiln-registry", "access_key": "$RGW_ACCESS", "secret_key": "$RGW_SECRET"}}
EOC
reg_start "$T_TMP/data" --config "$T_TMP/s3.json" || { not_ok "kiln serve with S3 starts"; exit 1; }
ok "kiln serve with S3 starts"
cd "$T_TMP"
umoci init --layout img >/dev/null && umoci new --image img:v1 >/dev/null
head -c 20000000 /dev/urandom >l1; head -c 3000 /dev/urandom >l2
for f in l1 l2; do umoci insert --image img:v1 "$f" "/$f" >/dev/null; done
src=$(skopeo inspect --raw oci:img:v1 | sha256sum | cut -d' ' -f1)
S="skopeo --command-timeout 120s"
expect_exit 0 "skopeo push into S3-backed kiln serve" $S copy --dest-tls-verify=false oci:img:v1 "docker://$REG/team/s3img:v1"
expect_exit 0 "skopeo pull back" $S copy --src-tls-verify=false "docker://$REG/team/s3img:v1" oci:pulled:v1
expect_eq "pulled manifest digest matches" "$(skopeo inspect --raw oci:pulled:v1 | sha256sum | cut -d' ' -f1)" "$src"
bad=0
for d in $(skopeo inspect --raw oci:pulled:v1 | jq -r '.config.digest, .layers[].digest'); do
	cmp -s "img/blobs/sha256/${d#sha256:}" "pulled/blobs/sha256/${d#sha256:}" || bad=$((bad + 1))
done
expect_eq "every blob pulled back from S3 is byte-identical" "$bad" 0
expect_eq "no blob bytes on the local disk" "$(find data -path '*/blobs/*' -type f | wc -l)" 0
: >empty
req POST "/v2/team/s3img/blobs/uploads/?digest=$(sha256_of empty)" --data-binary @empty
expect_code "zero-byte blob upload" 201
req GET "/v2/team/s3img/blobs/$(sha256_of empty)"
expect_eq "zero-byte blob GET" "$CODE $(stat -c %s body)" "200 0"
head_req "/v2/team/s3img/blobs/$(sha256_of empty)"
expect_eq "zero-byte blob HEAD" "$CODE $(hdr Content-Length)" "200 0"
req POST /v2/team/s3img/blobs/_exists -d "{\"digests\":[\"$(sha256_of l2)\",\"$(sha256_of empty)\"]}"
expect_eq "batch blob query against S3" "$CODE $(jq -c .missing body)" "200 [\"$(sha256_of l2)\"]"
req POST "/v2/team/other/blobs/uploads/?mount=$(sha256_of empty)"
expect_code "a mount without from= is an upload with S3 (no lookup of holders)" 202
big=$(skopeo inspect --raw oci:img:v1 | jq -r '[.layers[] | select(.size > 1000000)][0].digest')
req GET "/v2/team/s3img/blobs/$big" -H 'Range: bytes=2097150-2097160'
expect_eq "range across an S3 read chunk" "$CODE $(od -An -tx1 body | tr -d ' \n')" \
	"206 $(tail -c +2097151 "img/blobs/sha256/${big#sha256:}" | head -c 11 | od -An -tx1 | tr -d ' \n')"
reg_stop
reg_start "$T_TMP/data" --config "$T_TMP/s3.json" || not_ok "restart"
rm -rf pulled
expect_exit 0 "pull after a restart" $S copy --src-tls-verify=false "docker://$REG/team/s3img:v1" oci:pulled:v1
expect_eq "digest after restart" "$(skopeo inspect --raw oci:pulled:v1 | sha256sum | cut -d' ' -f1)" "$src"

# the build service on the S3 backend: the build's id in the bucket's tag history
reg_stop
jq '. + {"build": {"host_builds": 1}}' "$T_TMP/s3.json" >"$T_TMP/s3b.json"
reg_start "$T_TMP/data" --config "$T_TMP/s3b.json" || not_ok "kiln serve --build with S3 starts"
mkdir -p "$T_TMP/bctx"
echo built >"$T_TMP/bctx/f"
printf 'FROM scratch\nCOPY f /f\n' >"$T_TMP/bctx/Dockerfile"
expect_exit 0 "a remote build published into the S3-backed registry" env KILN_HOME="$T_TMP/bhome" \
	"$KILN" build --remote "$U" -t s3app:1 "$T_TMP/bctx"
BID=$(grep -o 'as build b-[0-9a-f]*' "$T_TMP/err" | cut -d' ' -f3)
BD=$(head -1 "$T_TMP/out")
expect_exit 0 "kiln registry history on the bucket" "$KILN" registry history --data "$T_TMP/data" --config "$T_TMP/s3b.json" default/s3app:1
expect_grep "names the build that made the change" " 1 $BD build $BID\$" "$T_TMP/out"
