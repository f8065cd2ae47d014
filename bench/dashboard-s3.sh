#!/usr/bin/env bash
# dashboard-s3.sh — /kiln/v1/repos, usage and history on the S3 backend
# (docs/dashboard.md; registry/overview_s3.c) against a one-node radosgw
# (tests/e2e/radosgw-lib.sh, as t1102): one repository of N tags of one
# manifest pushed with curl, then each endpoint timed ROUNDS times by curl;
# the filesystem backend's figure for the same repository beside it.
# Usage: [N [ROUNDS]]
set -u
cd "$(dirname "$0")/.."
. tests/e2e/lib.sh
. tests/e2e/radosgw-lib.sh
. tests/e2e/service-lib.sh
N=${1:-1000} ROUNDS=${2:-3} SRV=
trap 'kill $SRV 2>/dev/null; wait $SRV 2>/dev/null; rgw_stop; rm -rf "$T_TMP"' EXIT
rgw_start "$T_TMP/ceph" >"$T_TMP/rgw.log" 2>&1 || { echo "radosgw does not start"; exit 1; }
echo '{"auth": true}' >"$T_TMP/fs.json"
jq --arg e "$RGW_ENDPOINT" --arg a "$RGW_ACCESS" --arg s "$RGW_SECRET" \
	'. + {"s3": {"endpoint": $e, "bucket": "kiln-bench", "access_key": $a, "secret_key": $s}}' "$T_TMP/fs.json" >"$T_TMP/s3.json"
printf '{}' >"$T_TMP/cfg"
CD=sha256:$(sha256sum "$T_TMP/cfg" | cut -d' ' -f1)
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":2},"layers":[]}' "$CD" >"$T_TMP/man"
for b in fs s3; do
	C=$($KILN token create --data "$T_TMP/$b" --config "$T_TMP/$b.json" --scope team-c:pull,push c)
	serve_build "$T_TMP/$b" "$T_TMP/$b.json" || { echo "kiln serve ($b) does not start"; exit 1; }
	curl -s -o /dev/null -H "Authorization: Bearer $C" -XPOST --data-binary @"$T_TMP/cfg" "$URL/v2/team-c/many/blobs/uploads/?digest=$CD"
	seq "$N" | sed "s|.*|url = \"$URL/v2/team-c/many/manifests/t&\"\nupload-file = \"$T_TMP/man\"|" >"$T_TMP/curl.cfg"
	t0=$(date +%s%N)
	curl -s -o /dev/null -H "Authorization: Bearer $C" -H "Content-Type: application/vnd.oci.image.manifest.v1+json" -K "$T_TMP/curl.cfg"
	echo "# $b: $N tags pushed in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
	for _ in $(seq "$ROUNDS"); do
		for q in repos usage 'history?repo=team-c/many&tag=t1'; do
			curl -s -o "$T_TMP/out.json" -w "# $b: /kiln/v1/${q%%\?*} %{http_code} %{time_total} s" -H "Authorization: Bearer $C" "$URL/kiln/v1/$q"
			[ "$q" = repos ] && echo " ($(jq '.repositories[0].tags | length' "$T_TMP/out.json") tags)" || echo
		done
	done
	kill "$SRV"; wait "$SRV" 2>/dev/null
done
