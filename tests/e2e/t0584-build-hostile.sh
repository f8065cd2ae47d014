#!/usr/bin/env bash
# t0584-build-hostile.sh — requests made to hurt `kiln serve --build` (auth
# off, a 1M context limit, no VM: nothing here runs a step): E2B uploads
# whose tarballs extract to far more than they weigh (a few KB of gzip
# making MBs of zeros on the server's disk), each within the limit but all
# of one build's together over it; every one refused with a 413 naming the
# limit before anything is extracted, and what was stored before kept.
# A team's build does not pull with the operator's registry credentials.
# Then a log longer than one read, read to its end through logsOffset, and
# a cache prune or log cursor given a number it cannot read: a 400, the
# cache kept.  kiln's own API: a context tar that extracts past
# context_max fails its build, nothing left; a list over context_files: 413.
# ADD of a URL on the server's loopback (by address or by name): refused.
. tests/e2e/lib.sh

# serve DATA CONFIG LOG [kiln serve args]: started, its address in $ADDR
serve() {
	local data=$1 config=$2 log=$3
	shift 3
	: >"$log"
	$KILN serve --addr 127.0.0.1:0 --data "$data" --config "$config" "$@" 2>"$log" &
	PIDS+=("$!")
	for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
	ADDR=$(grep -o '127.0.0.1:[0-9]*' "$log" | head -1)
}
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T_TMP"' EXIT

# a private registry the server's operator is logged in to ($HOME's Docker
# config), with an image no team was given
echo '{"auth": true}' >"$T_TMP/priv.json"
OP=$($KILN token create --data "$T_TMP/priv" --scope private:pull,push op)
serve "$T_TMP/priv" "$T_TMP/priv.json" "$T_TMP/priv.log"
PRIV=$ADDR
mkdir -p "$T_TMP/pctx" "$T_TMP/operator/.docker"
echo private >"$T_TMP/pctx/p.txt"
printf 'FROM scratch\nCOPY p.txt /p.txt\n' >"$T_TMP/pctx/Dockerfile"
KILN_HOME=$T_TMP/local expect_exit 0 "an image built" $KILN build -t pimg:1 "$T_TMP/pctx"
KILN_HOME=$T_TMP/local $KILN login -u x --password-stdin "$PRIV" <<<"$OP" >/dev/null 2>&1
KILN_HOME=$T_TMP/local expect_exit 0 "...pushed to the private registry" $KILN push pimg:1 "$PRIV/private/pimg:1"
printf '{"auths": {"%s": {"auth": "%s"}}}\n' "$PRIV" "$(printf 'x:%s' "$OP" | base64 -w0)" \
	>"$T_TMP/operator/.docker/config.json"

DATA=$T_TMP/data
cat >"$T_TMP/serve.json" <<JSON
{"build": {"context_max": "1M", "host_builds": 1}}
JSON
HOME=$T_TMP/operator serve "$DATA" "$T_TMP/serve.json" "$T_TMP/serve.log"
URL=http://$ADDR

# req METHOD PATH [curl args]: the body in $T_TMP/body, the status in $CODE
req() {
	local m=$1 p=$2
	shift 2
	CODE=$(curl -s -o "$T_TMP/body" -w '%{http_code}' -X "$m" "$@" "$URL$p")
}
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$T_TMP/body" "$1"; }
J=(-H 'Content-Type: application/json')
# wait_template TID BID TRIES: an E2B build until ready or error (TRIES × 0.2 s), its status in $T_TMP/body
wait_template() {
	for _ in $(seq "$3"); do
		req GET "/templates/$1/builds/$2/status"
		case $(json 'd["status"]') in ready | error) return ;; esac
		sleep 0.2
	done
}
# wait_build ID: until it is done or failed (20 s), its status in $T_TMP/body
wait_build() {
	for _ in $(seq 100); do
		req GET "/build/v1/builds/$1"
		case $(json 'd["state"]') in done | failed) return ;; esac
		sleep 0.2
	done
}
# tgz NAME BYTES: a tarball of one file of BYTES zeros (gzip: ~1/1000 of that)
tgz() {
	mkdir -p "$T_TMP/z/$1" && truncate -s "$2" "$T_TMP/z/$1/f"
	tar -czf "$T_TMP/$1.tar.gz" -C "$T_TMP/z/$1" f
}
# upload HASH FILE: through the upload link the API gives for HASH
upload() {
	req GET "/templates/$tid/files/$1"
	local url
	url=$(json 'd["url"]')
	CODE=$(curl -s -o "$T_TMP/body" -w '%{http_code}' -X PUT --data-binary @"$2" "$url")
}

req POST /v3/templates "${J[@]}" -d '{"name":"bomb"}'
expect_eq "a template" "$CODE" 202
tid=$(json 'd["templateID"]')
bid=$(json 'd["buildID"]')

h1=$(printf 'a%.0s' $(seq 64))
tgz big 8000000
expect_eq "...an 8 MB tarball weighs a few KB" "$(($(stat -c %s "$T_TMP/big.tar.gz") < 65536))" 1
upload "$h1" "$T_TMP/big.tar.gz"
expect_eq "an upload extracting to more than the context limit: 413" "$CODE" 413
expect_grep "...saying so" 'more than 1048576 bytes of files' "$T_TMP/body"
req GET "/templates/$tid/files/$h1"
expect_grep "...nothing stored for its hash" '"present":false' "$T_TMP/body"

h2=$(printf 'b%.0s' $(seq 64))
h3=$(printf 'c%.0s' $(seq 64))
tgz p2 700000
tgz p3 700000
upload "$h2" "$T_TMP/p2.tar.gz"
expect_eq "an upload within the limit" "$CODE" 200
upload "$h3" "$T_TMP/p3.tar.gz"
expect_eq "another one" "$CODE" 200
steps() {
	local s='' h
	for h in "$@"; do
		s+="${s:+,}{\"type\":\"COPY\",\"args\":[\"f\",\"/$h\"],\"filesHash\":\"$h\"}"
	done
	echo "{\"fromImage\":\"scratch\",\"steps\":[$s]}"
}
req POST "/v2/templates/$tid/builds/$bid" "${J[@]}" -d "$(steps "$h2" "$h3")"
expect_eq "a build whose uploads together extract past the limit: 413" "$CODE" 413
expect_grep "...saying so" 'files of the COPY steps are more than the context limit of 1048576 bytes' "$T_TMP/body"
expect_eq "...nothing queued" "$(find "$DATA/build" -path '*/contexts/*' -name f | wc -l)" 0
req GET "/templates/$tid/builds/$bid/status"
expect_eq "...the build is failed, with the reason" "$(json 'd["status"] + " " + str("context limit" in d["reason"]["message"])')" "error True"

# one of them alone fits: its COPY runs (FROM scratch: no VM for it; the
# template made after it needs a shell this image lacks, so that part fails)
req POST /v3/templates "${J[@]}" -d '{"name":"fits"}'
tid=$(json 'd["templateID"]')
bid=$(json 'd["buildID"]')
req POST "/v2/templates/$tid/builds/$bid" "${J[@]}" -d "$(steps "$h2")"
expect_eq "the same upload in a build of its own is taken" "$CODE" 202
wait_template "$tid" "$bid" 100
expect_grep "...and its COPY ran" '"\[2/2\] cache (hit|miss)' "$T_TMP/body"

# a log of more than 1000 lines (one read's worth) reads to its end through
# logsOffset: 512 COPY steps (E2B's most) log two lines each
h4=$(printf 'd%.0s' $(seq 64))
tgz small 1
upload "$h4" "$T_TMP/small.tar.gz"
expect_eq "a small upload" "$CODE" 200
req POST /v3/templates "${J[@]}" -d '{"name":"long"}'
tid=$(json 'd["templateID"]')
bid=$(json 'd["buildID"]')
req POST "/v2/templates/$tid/builds/$bid" "${J[@]}" -d "$(steps $(for _ in $(seq 512); do echo "$h4"; done))"
expect_eq "a build of 512 steps" "$CODE" 202
wait_template "$tid" "$bid" 300
req GET "/templates/$tid/builds/$bid/status?logsOffset=0"
expect_eq "...its first 1000 lines" "$(json 'len(d["logEntries"])')" 1000
req GET "/templates/$tid/builds/$bid/status?logsOffset=1000"
expect_grep "...and past them, its last step and its end" '"\[513/513\] cache (hit|miss).*"failed"' "$T_TMP/body"
req GET "/templates/$tid/builds/$bid/logs?cursor=1020"
expect_grep "...the logs call too" '"failed"' "$T_TMP/body"

# a cache prune given an age it cannot read keeps the cache (strtoll read
# "7d" as 7 seconds and "abc" as 0: every entry went)
entries() { find "$DATA/build/teams/default/home/cache" -maxdepth 1 -name '*.json' | wc -l; }
N=$(entries)
expect_eq "the builds above left cache entries" "$((N > 0))" 1
for age in 7d abc -5 1e9; do
	req POST "/build/v1/cache/prune?older_than_s=$age"
	expect_eq "prune older_than_s=$age: 400" "$CODE" 400
done
expect_grep "...saying what it wants" 'older_than_s: want a number of seconds' "$T_TMP/body"
expect_eq "...every entry kept" "$(entries)" "$N"
req POST "/build/v1/cache/prune?older_than_s=86400"
expect_eq "a prune with an age in seconds" "$CODE" 200
expect_eq "...removes none of these" "$(entries)" "$N"
req GET "/build/v1/builds/b-0/logs?cursor=x"
expect_eq "a log cursor that is no number: 400" "$CODE" 400

# the operator's credentials are not the team's: a FROM of the private
# registry is refused there (its token was found in the server's $HOME)
req POST /build/v1/builds "${J[@]}" -d "{\"dockerfile\":\"FROM $PRIV/private/pimg:1\\n\",\"files\":[]}"
expect_eq "a build FROM the operator's private registry is taken" "$CODE" 202
id=$(json 'd["id"]')
wait_build "$id"
expect_eq "...and fails: the team has no credential there" "$(json 'd["state"]')" failed
expect_grep "...as the registry says" 'unauthori[sz]ed|401|authentication required' "$T_TMP/body"

# kiln's own API: a context tar (`"tar": true`) is bounded by what it
# extracts to, and a file list by its entries
tgz zst 3000000 # 3 MB of zeros in a few KB of gzip; context_max is 1M
ZH=sha256:$(sha256sum "$T_TMP/zst.tar.gz" | cut -d' ' -f1)
req PUT "/build/v1/blobs/$ZH" --data-binary @"$T_TMP/zst.tar.gz"
expect_eq "a small tarball of many zeros is stored (it weighs a few KB)" "$CODE" 201
req POST /build/v1/builds "${J[@]}" -d "{\"dockerfile\":\"FROM scratch\\nCOPY t/f /f\\n\",\"name\":\"zst\",\"files\":[{\"path\":\"t\",\"mode\":16877,\"tar\":true,\"digest\":\"$ZH\"}]}"
id=$(json 'd["id"]')
wait_build "$id"
expect_eq "...a build of it fails: the tar extracts to more than context_max" "$(json 'd["state"] + ": " + d["reason"]')" \
	"failed: context file t: tar entry 'f': the tar extracts to more than the context's limit (its bytes)"
expect_eq "...nothing of it left on the server's disk" "$(find "$DATA/build/teams/default/contexts" -name f -size +1M | wc -l)" 0
python3 -c 'import json, sys; print(json.dumps({"dockerfile": "FROM scratch\n", "files": [{"path": "d%d" % i, "mode": 16877} for i in range(200001)]}))' >"$T_TMP/many.json"
req POST /build/v1/builds "${J[@]}" --data-binary @"$T_TMP/many.json"
expect_eq "a list of 200,001 entries: 413" "$CODE" 413
expect_eq "...saying why" "$(json 'd["error"]')" "the context has 200001 entries, more than the limit of 200000"

# ADD of a URL on the server's own host or network (fetch_private unset):
# refused at connect, whatever the name resolves to; nothing reaches it
python3 -c 'import sys; sys.path.insert(0, "tests"); import loopback_http as L
s = L.listen(sys.argv[1], 20)
def serve(c):
    open(sys.argv[2], "a").write("hit\n"); c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"); c.close()
L.serve_until_idle(s, serve)' "$T_TMP/inner.port" "$T_TMP/inner.hits" &
PIDS+=("$!")
for _ in $(seq 50); do [ -s "$T_TMP/inner.port" ] && break; sleep 0.1; done
IP=$(cat "$T_TMP/inner.port")
for u in "127.0.0.1:$IP" "localhost:$IP"; do
	req POST /build/v1/builds "${J[@]}" -d "{\"dockerfile\":\"FROM scratch\\nADD http://$u/x /x\\n\",\"name\":\"ssrf\",\"files\":[]}"
	id=$(json 'd["id"]')
	wait_build "$id"
	expect_eq "ADD http://$u/x fails" "$(json 'd["state"]')" failed
	expect_grep "...the address refused" "leads to (127\.0\.0\.1|::1), not a public address: this build fetches from public addresses only" "$T_TMP/body"
done
expect_eq "...and nothing reached the server's loopback" "$(cat "$T_TMP/inner.hits" 2>/dev/null | wc -l)" 0
