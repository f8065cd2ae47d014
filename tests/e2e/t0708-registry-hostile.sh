#!/usr/bin/env bash
# t0708-registry-hostile.sh — `kiln serve` under hostile load from other
# loopback addresses (tests/holdconns.py): a slowloris flood from one address
# while a fresh client is answered at once; the per-address limit closes the
# excess at accept; header, slow-body and idle keep-alive deadlines close
# connections on time; over the headroom the oldest idle connections make
# room; token guessing gets 429 + Retry-After while a correct token from
# elsewhere works at once.  A few hundred connections, about 30 s.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

trap 'reg_stop; rm -rf "$T_TMP"' EXIT
cd "$T_TMP"
HOLD="python3 $OLDPWD/tests/holdconns.py"
D="$T_TMP/data"
cat >hostile.json <<'EOF'
{"auth": true, "per_ip_connection_limit": 20, "connection_limit": 120, "connection_headroom": 30,
 "header_timeout_s": 2, "idle_timeout_s": 2, "body_rate_window_s": 2, "body_min_rate": 1000,
 "auth_fail_burst": 5, "auth_fail_refill_s": 60}
EOF
ADMIN=$("$KILN" token create --data "$D" --scope '*:*' admin)
reg_start "$D" --config hostile.json || { not_ok "kiln serve starts"; exit 1; }
AUTH="Authorization: Bearer $ADMIN"

# in_range NAME VALUE LO HI
in_range() {
	if [ -n "$2" ] && [ "$2" != null ] && [ "$(echo "$2 >= $3 && $2 <= $4" | bc)" = 1 ]; then ok "$1 ($2)"; else
		not_ok "$1 (got ${2:-nothing}, want $3..$4)"; fi
}
jqr() { jq -r "$1" "$2"; }

# -- slowloris from 127.0.0.2: 200 connections each trickling a header line ----
$HOLD --dst "$REG" --src 127.0.0.2 --count 200 --mode half --trickle 0.5 --checkpoint 1.2 --duration 5 >slow.json &
HPID=$!
sleep 1.5
t=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 5 -H "$AUTH" "$U/v2/")
expect_eq "a fresh client is answered during the flood" "${t% *}" 200
in_range "... at once (s)" "${t#* }" 0 1
wait "$HPID"
expect_eq "per-address limit: 20 of the 200 held, the rest closed at accept" "$(jqr .open_at_checkpoint slow.json)" 20
expect_eq "... the 20 closed by the header deadline though they trickle" "$(jqr '.refused + .closed' slow.json)" 200
in_range "... 2 s after the connect (the last, s)" "$(jqr '.close_after_s[2]' slow.json)" 1.9 4.5

# -- silent connections and idle keep-alive -------------------------------------
$HOLD --dst "$REG" --src 127.0.0.3 --count 5 --mode silent --duration 4 >silent.json &
HPID=$!
$HOLD --dst "$REG" --src 127.0.0.4 --count 5 --mode idle --header "$AUTH" --duration 4 >idle.json
wait "$HPID"
in_range "a connection that sends nothing is closed by the header deadline (s)" "$(jqr '.close_after_s[1]' silent.json)" 1.9 4
expect_eq "idle keep-alive: each got its answer" "$(jqr '.statuses["200"]' idle.json)" 5
in_range "... then was closed after idle_timeout_s (s)" "$(jqr '.close_after_s[1]' idle.json)" 1.9 4

# -- a body that trickles is closed after a window below body_min_rate ----------
req POST /v2/slow/blobs/uploads/ -H "$AUTH"
LOC=$(hdr Location)
LOC=${LOC#http://$REG}
$HOLD --dst "$REG" --src 127.0.0.5 --count 2 --mode body --path "$LOC" --header "$AUTH" --trickle 0.2 --duration 6 >body.json
in_range "a body at 5 B/s is closed after one 2 s window (s)" "$(jqr '.close_after_s[2]' body.json)" 1.9 4.5

# -- over the headroom (120 - 30): the oldest idle connections make room --------
HPIDS=()
for a in 6 7 8 9 10 11; do
	$HOLD --dst "$REG" --src "127.0.0.$a" --count 20 --mode silent --rate 200 --duration 1.8 >"head$a.json" &
	HPIDS+=($!)
done
sleep 1
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 -H "$AUTH" "$U/v2/")
wait "${HPIDS[@]}"
expect_eq "with 120 idle connections held, a fresh client is answered" "$code" 200
closed=$(cat head*.json | jq -s 'map(.refused + .closed) | add')
in_range "... the oldest idle ones were closed to make room" "$closed" 25 40

# -- token guessing -------------------------------------------------------------
guess() { # SRC USER SECRET -> "CODE RETRY-AFTER"
	curl -s -o /dev/null -D guess.hdr -w '%{http_code}' --max-time 5 --interface "$1" -u "$2:$3" "$U/v2/"
	printf ' %s\n' "$(tr -d '\r' <guess.hdr | awk 'tolower($1)=="retry-after:" {print $2}')"
}
codes=""
for i in 1 2 3 4 5 6 7; do codes="$codes $(guess 127.0.0.12 ci "kiln_wrong$i" | cut -d' ' -f1)"; done
expect_eq "wrong secrets: 401 five times, then 429" "$codes" " 401 401 401 401 401 429 429"
r=$(guess 127.0.0.12 ci kiln_wrong8)
in_range "... with Retry-After (s)" "${r#* }" 1 60
t=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 5 --interface 127.0.0.13 -u "ci:$ADMIN" "$U/v2/")
expect_eq "the correct token from another address works, same user name" "${t% *}" 200
in_range "... at once (s)" "${t#* }" 0 1
expect_eq "... and as Bearer" "$(curl -s -o /dev/null -w '%{http_code}' --interface 127.0.0.13 -H "$AUTH" "$U/v2/")" 200
expect_eq "the guessing address is refused even with the right token" "$(guess 127.0.0.12 ci "$ADMIN" | cut -d' ' -f1)" 429
# The name "ci" is out of tries: an address that fails once on it is held back at its next try.
expect_eq "guessing the same name from a new address: first try checked" "$(guess 127.0.0.14 ci kiln_x | cut -d' ' -f1)" 401
expect_eq "... its next try on that name gets 429" "$(guess 127.0.0.14 ci kiln_y | cut -d' ' -f1)" 429
expect_eq "... another name from it is still checked" "$(guess 127.0.0.14 other kiln_z | cut -d' ' -f1)" 401

# -- still serving ----------------------------------------------------------------
req GET /v2/ -H "$AUTH"
expect_code "the server answers after all of it" 200
kill -0 "$REG_PID" && ok "server process alive" || not_ok "server process alive"
reg_stop

# -- over the headroom with every connection busy: 503 + Retry-After ------------
# 8 connections, headroom 2: six manifest bodies in progress (no rate check)
# leave no idle connection to close, so the 7th is told to come back.
echo '{"connection_limit": 8, "connection_headroom": 2, "body_min_rate": 0, "per_ip_connection_limit": 0}' >busy.json
reg_start "$T_TMP/busy" --config busy.json || { not_ok "kiln serve starts (busy)"; exit 1; }
$HOLD --dst "$REG" --src 127.0.0.20 --count 6 --mode body --method PUT --path /v2/hold/manifests/t --length 100000 \
	--trickle 0.2 --duration 15 --ready-file busy.ready >busy.json.out &
HPID=$!
# Probe only once the six are connected and have sent their heads (python may
# start slowly on a loaded machine), then give the server a moment to read them.
for _ in $(seq 1 200); do [ -e busy.ready ] && break; sleep 0.05; done
for _ in $(seq 1 50); do req GET /v2/; [ "$CODE" = 503 ] && break; sleep 0.1; done
expect_code "over the headroom, all busy: 503" 503
expect_eq "... with Retry-After" "$(hdr Retry-After)" 1
expect_eq "... and the connection closed" "$(hdr Connection)" close
wait "$HPID"
[ "$CODE" = 503 ] || echo "# the holder's report: $(cat busy.json.out)"
expect_eq "the busy connections were left alone" "$(jq -r .closed busy.json.out)" 0
req GET /v2/
expect_code "served again once they are gone" 200
