#!/usr/bin/env bash
# t0711-registry-metrics.sh — an operator's view of `kiln serve`: GET /metrics
# behind its own token scope, clean for promtool, scraped by a real Prometheus
# on loopback while skopeo pushes and pulls, and PromQL answering exactly what
# the workload did; usage per team counted once per team; /healthz and
# /readyz, with the uploads directory made immutable under a running server.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

PROM_PID=
cleanup() {
	reg_stop
	[ -n "$PROM_PID" ] && kill "$PROM_PID" 2>/dev/null && wait "$PROM_PID" 2>/dev/null
	chattr -i "$T_TMP/data/uploads" 2>/dev/null
	rm -rf "$T_TMP"
}
trap cleanup EXIT
need_tools prometheus promtool skopeo umoci
cd "$T_TMP"
D="$T_TMP/data"
echo '{"auth": true}' >auth.json
PUSH=$(reg_tok --scope 'team-a:*' --scope 'team-b:*' pusher)
MET=$(reg_tok --scope '*:metrics' prometheus)
expect_exit 2 "a metrics scope on a namespace is refused" "$KILN" token create --data "$D" --scope team-a:metrics bad
expect_grep "the refusal says where metrics goes" 'metrics only as \*:metrics' "$T_TMP/err"
reg_start "$D" --config auth.json || { not_ok "kiln serve starts"; exit 1; }

# ---- health, no credentials
req GET /healthz
expect_code "/healthz without credentials" 200
req GET /readyz
expect_code "/readyz: ready" 200
expect_grep "/readyz names what it checked" '^store: ok \(filesystem\)' "$T_TMP/body"

# ---- the scope
req GET /metrics
expect_code "/metrics without credentials" 401
req GET /metrics -H "$(H "$PUSH")"
expect_error "/metrics with a team's push token" 403 DENIED
req GET /metrics -H "$(H "$MET")"
expect_code "/metrics with *:metrics" 200
expect_grep "text format's content type" '^Content-Type: text/plain; version=0.0.4' "$T_TMP/hdr"

# ---- a workload: 3 pushes (two repositories of team-a share an image), 2
# pulls, 2 bad credentials
umoci init --layout img >/dev/null && umoci new --image img:v1 >/dev/null
head -c 300000 /dev/urandom >l1 && umoci insert --image img:v1 l1 /l1 >/dev/null
umoci new --image img:v2 >/dev/null && head -c 5000 /dev/urandom >l2 && umoci insert --image img:v2 l2 /l2 >/dev/null
S="skopeo --command-timeout 60s"
C="--dest-creds=ci:$PUSH --dest-tls-verify=false"
expect_exit 0 "push team-a/app:v1" $S copy $C oci:img:v1 "docker://$REG/team-a/app:v1"
expect_exit 0 "push team-a/copy:v1 (the same blobs)" $S copy $C oci:img:v1 "docker://$REG/team-a/copy:v1"
expect_exit 0 "push team-b/app:v2" $S copy $C oci:img:v2 "docker://$REG/team-b/app:v2"
for i in 1 2; do
	expect_exit 0 "pull $i" $S copy --src-creds="ci:$PUSH" --src-tls-verify=false "docker://$REG/team-a/app:v1" "oci:pulled$i:v1"
done
for i in 1 2; do req GET /v2/team-a/app/tags/list -H "$(H kiln_not_a_token_$i)"; done
expect_code "a bad token is refused" 401

req GET /metrics -H "$(H "$MET")"
cp "$T_TMP/body" scrape.txt
if promtool check metrics <scrape.txt >lint.txt 2>&1; then ok "promtool check metrics is clean"; else
	not_ok "promtool check metrics is clean"; sed 's/^/#   /' lint.txt | head -20
fi
sample() { awk -v k="$1" '$1 == k { print $2 }' scrape.txt; }
expect_eq "manifest PUTs counted by route, method and code" \
	"$(sample 'kiln_http_requests_total{route="manifest",method="PUT",code="201"}')" 3
expect_eq "failed authentications counted" "$(sample kiln_auth_failures_total)" 2
expect_grep "a latency histogram per route with +Inf" '^kiln_http_request_duration_seconds_bucket\{route="manifest",le="\+Inf"\} [0-9]+' scrape.txt
expect_eq "no upload left in flight" "$(sample kiln_registry_uploads_in_flight)" 0
# what each team stores, each blob and manifest once per team
size_of() { # LAYOUT:TAG -> bytes of its manifest, config and layers
	skopeo inspect --raw "oci:$1" >m.json
	echo $(( $(wc -c <m.json) + $(jq '[.config.size, .layers[].size] | add' m.json) ))
}
expect_eq "team-a's stored bytes: one image, counted once" \
	"$(sample 'kiln_registry_stored_bytes{team="team-a"}')" "$(size_of img:v1)"
expect_eq "team-b's stored bytes" "$(sample 'kiln_registry_stored_bytes{team="team-b"}')" "$(size_of img:v2)"
expect_eq "team-a's repositories and tags" \
	"$(sample 'kiln_registry_repositories{team="team-a"}') $(sample 'kiln_registry_tags{team="team-a"}')" "2 2"
pulled=$(sample 'kiln_http_sent_bytes_total{route="blob"}')
expect_eq "blob bytes sent: the two pulls' layers and configs" "$pulled" "$(( 2 * ($(size_of img:v1) - $(skopeo inspect --raw oci:img:v1 | wc -c)) ))"

# ---- a real Prometheus scrapes it
PP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf '%s' "$MET" >token
cat >prom.yml <<EOF
global: { scrape_interval: 1s, scrape_timeout: 1s }
scrape_configs:
  - job_name: kiln
    authorization: { credentials_file: $T_TMP/token }
    static_configs: [ { targets: ['$REG'] } ]
EOF
prometheus --config.file=prom.yml --storage.tsdb.path=tsdb --web.listen-address="127.0.0.1:$PP" >prom.log 2>&1 &
PROM_PID=$!
q() { curl -s --max-time 5 "http://127.0.0.1:$PP/api/v1/query" --data-urlencode "query=$1" | jq -r '.data.result[0].value[1] // empty'; }
got=
for i in $(seq 1 60); do
	got=$(q 'sum(kiln_http_requests_total{route="manifest",method="PUT",code="201"})')
	[ "$got" = 3 ] && break
	sleep 1
done
expect_eq "PromQL over a real scrape: pushes counted exactly" "$got" 3
expect_eq "PromQL: the target is up with its token" "$(q 'up{job="kiln"}')" 1
expect_eq "PromQL: team-a's stored bytes" "$(q 'kiln_registry_stored_bytes{team="team-a"}')" "$(size_of img:v1)"
expect_eq "PromQL: two failed authentications" "$(q 'kiln_auth_failures_total')" 2
n=$(q 'sum(kiln_http_requests_total{route="metrics",code="200"})')
if [ -n "$n" ] && [ "$n" -ge 1 ]; then ok "the scrapes themselves are counted ($n)"; else not_ok "the scrapes are counted (got '$n')"; fi
kill "$PROM_PID"; wait "$PROM_PID" 2>/dev/null; PROM_PID=

# ---- readiness with the store's uploads made immutable under the server
# (a fault root cannot write through, as a read-only filesystem)
chattr +i "$D/uploads" || not_ok "chattr +i on the uploads directory"
req GET /readyz
expect_code "/readyz with uploads not writable" 503
expect_grep "/readyz names the failing part" "^store: FAILING: $D/uploads is not writable" "$T_TMP/body"
req POST /v2/team-a/app/blobs/uploads/ -H "$(H "$PUSH")"
if [ "$CODE" -ge 500 ]; then ok "a push then fails too ($CODE): the check tells the truth"; else not_ok "a push fails (got $CODE)"; fi
req GET /healthz
expect_code "/healthz: the process is still alive" 200
chattr -i "$D/uploads"
req GET /readyz
expect_code "/readyz once the store is writable again" 200
req POST /metrics -H "$(H "$MET")"
expect_code "POST /metrics" 405
