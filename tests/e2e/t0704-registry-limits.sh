#!/usr/bin/env bash
# t0704-registry-limits.sh — limits that keep `kiln serve` up under abuse: idle
# and slow connections time out, the connection limit holds, oversized headers,
# URLs and bodies are refused, and the server answers normally afterwards.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

trap 'reg_stop; rm -rf "$T_TMP"' EXIT
cd "$T_TMP"
echo '{"timeout_s": 1, "connection_limit": 4, "connection_headroom": 0, "blob_max": "1M", "manifest_max": "64K"}' >limits.json
reg_start "$T_TMP/data" --config limits.json || { not_ok "kiln serve starts"; exit 1; }

# A slow client (headers never finished) is dropped after the idle timeout.
start=$(date +%s.%N)
timeout 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$REG_PORT; printf 'GET /v2/ HTTP/1.1\r\nHost: x\r\n' >&3; cat <&3 >/dev/null"
took=$(echo "$(date +%s.%N) - $start" | bc)
if [ "$(echo "$took < 5" | bc)" = 1 ]; then ok "slow client dropped after the timeout (${took}s)"; else not_ok "slow client dropped after the timeout (${took}s)"; fi

# The connection limit: 4 idle connections held open, a 5th request is not served.
for i in 1 2 3 4; do exec {fd}<>/dev/tcp/127.0.0.1/"$REG_PORT"; eval "fd$i=$fd"; done
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$U/v2/")
expect_eq "request beyond the connection limit is refused" "$code" 000
for i in 1 2 3 4; do eval "exec {fd$i}>&-"; done
sleep 1.5
req GET /v2/
expect_code "served again once connections close" 200

# Oversized requests.
# raw_status REQUEST_FILE : the status code the server answers a raw request with.
raw_status() {
	timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$REG_PORT; cat '$1' >&3; head -c 12 <&3" 2>/dev/null | awk '{print $2}'
}
{ printf 'GET /v2/'; head -c 200000 /dev/zero | tr '\0' a; printf '/tags/list HTTP/1.1\r\nHost: x\r\n\r\n'; } >rq1
code=$(raw_status rq1)
case $code in 414|431|400|413) ok "huge URL refused ($code)" ;; *) not_ok "huge URL refused ($code)" ;; esac
{ printf 'GET /v2/ HTTP/1.1\r\nHost: x\r\nX-Big: '; head -c 200000 /dev/zero | tr '\0' b; printf '\r\n\r\n'; } >rq2
code=$(raw_status rq2)
case $code in 431|400|413) ok "huge header refused ($code)" ;; *) not_ok "huge header refused ($code)" ;; esac
head -c 2000000 /dev/urandom >big
req POST "/v2/lim/blobs/uploads/?digest=$(sha256_of big)" --data-binary @big
expect_error "blob over blob_max (Content-Length)" 413 SIZE_INVALID
req POST /v2/lim/blobs/uploads/
LOC=$(hdr Location)
req PATCH "$LOC" --data-binary @big -H 'Transfer-Encoding: chunked'
expect_error "chunked PATCH over blob_max" 413 SIZE_INVALID
head -c 100000 /dev/zero >m
req PUT /v2/lim/manifests/x --data-binary @m -H 'Transfer-Encoding: chunked' -H 'Content-Type: application/vnd.oci.image.manifest.v1+json'
expect_error "chunked manifest over manifest_max" 413 SIZE_INVALID
expect_eq "no blob came of it" "$(find data/blobs -type f | wc -l)" 0

# Garbage of many shapes; the server stays up.
for junk in 'GET' 'GET / HTTP/9.9\r\n\r\n' '\x00\x01\x02\r\n\r\n' 'POST /v2/a/blobs/uploads/ HTTP/1.1\r\nContent-Length: -5\r\n\r\n' \
	'PUT /v2/a/manifests/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n'; do
	printf "$junk" | timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$REG_PORT; cat >&3; cat <&3" >/dev/null 2>&1
done
req GET /v2/
expect_code "server answers after garbage" 200
kill -0 "$REG_PID" && ok "server process alive" || not_ok "server process alive"
