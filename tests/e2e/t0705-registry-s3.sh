#!/usr/bin/env bash
# t0705-registry-s3.sh — the registry's S3 client against a real S3 server:
# a one-node Ceph with radosgw on 127.0.0.1 (memstore, ~15 s to start), then
# the live part of test_registry_s3 (SigV4, put, multipart, ranged get, head,
# delete, zero-byte objects, a wrong secret refused) under ASan/UBSan.
. tests/e2e/lib.sh
. tests/e2e/radosgw-lib.sh

trap 'rgw_stop; rm -rf "$T_TMP"' EXIT
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
