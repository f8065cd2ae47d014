#!/usr/bin/env bash
# t0581-build-remote-pg.sh — two kiln serve --build hosts sharing one queue in
# a real PostgreSQL server (initdb + pg_ctl as the postgres user, on
# 127.0.0.1, started and removed here) and one data directory: 8 builds
# queued at once all succeed, each claimed once (FOR UPDATE SKIP LOCKED),
# both hosts take work, a team's limit holds across hosts, another team's
# build is not starved behind it, and a build submitted to one host is
# followed through the other.  No VM: FROM scratch + COPY of a few MB.
. tests/e2e/lib.sh
. tests/e2e/pg-lib.sh

SRV1= SRV2=
cleanup() {
	for p in $SRV1 $SRV2; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	pg_stop
	rm -rf "$T_TMP"
}
trap cleanup EXIT
pg_start

DATA=$T_TMP/data
cat >"$T_TMP/serve.json" <<JSON
{"auth": true, "build": {"db": "host=127.0.0.1 port=$PGPORT user=kiln dbname=postgres", "host_builds": 1, "team_builds": 1}}
JSON
A=$($KILN token create --data "$DATA" --scope team-a:build,pull,push a)
B=$($KILN token create --data "$DATA" --scope team-b:build,pull,push b)
start() { # N
	: >"$T_TMP/serve$1.log" # there before the loop below reads it
	$KILN serve --addr 127.0.0.1:0 --data "$DATA" --config "$T_TMP/serve.json" 2>"$T_TMP/serve$1.log" &
	eval "SRV$1=$!"
	for _ in $(seq 300); do grep -q listening "$T_TMP/serve$1.log" && break; sleep 0.1; done
	eval "URL$1=http://$(grep -o '127.0.0.1:[0-9]*' "$T_TMP/serve$1.log" | head -1)"
}
start 1
start 2
expect_grep "host 1 runs the build service on PostgreSQL" 'building' "$T_TMP/serve1.log"
expect_grep "host 2 too" 'building' "$T_TMP/serve2.log"

# 8 builds of team a, each with its own 1 MB file copied twelve times (so each takes a moment), submitted at once
for i in 1 2 3 4 5 6 7 8; do
	mkdir -p "$T_TMP/c$i"
	head -c 1000000 /dev/urandom >"$T_TMP/c$i/f"
	# twelve steps, so that each of a's builds lasts long enough for b's to overtake the queue
	{ echo 'FROM scratch'; for s in $(seq 12); do echo "COPY f /f$s"; done; } >"$T_TMP/c$i/Dockerfile"
done
for i in 1 2 3 4 5 6 7 8; do
	u=$URL1; [ $((i % 2)) -eq 0 ] && u=$URL2
	KILN_TOKEN=$A $KILN build --remote "$u" -t app:v$i "$T_TMP/c$i" >"$T_TMP/out$i" 2>"$T_TMP/err$i" &
	eval "P$i=$!"
	[ "$i" = 2 ] && sleep 1
done
# team b's one build, submitted behind team a's eight
mkdir -p "$T_TMP/cb"
echo b >"$T_TMP/cb/f"
printf 'FROM scratch\nCOPY f /f\n' >"$T_TMP/cb/Dockerfile"
# B comes in while several of a's wait in the queue (a fixed sleep let a quiet
# machine run all eight first, and then the check below could not tell)
for _ in $(seq 400); do
	a_queued=$($PSQL -c "select count(*) from svc_builds where team = 'team-a' and state = 'queued'")
	[ "$a_queued" -ge 3 ] && break
	sleep 0.05
done
KILN_TOKEN=$B $KILN build --remote "$URL1" -t b:1 "$T_TMP/cb" >"$T_TMP/outb" 2>"$T_TMP/errb" &
PB=$!
fails=0
wait $PB || { fails=$((fails + 1)); sed 's/^/#   /' "$T_TMP/errb" | tail -3; }
# fairness: when b's build is done, some of a's (queued before it) are not yet
# (the queue's times are in seconds, too coarse to order claims by)
a_left=$($PSQL -c "select count(*) from svc_builds where team = 'team-a' and state <> 'done'")
for i in 1 2 3 4 5 6 7 8; do eval "wait \$P$i" || { fails=$((fails + 1)); sed 's/^/#   /' "$T_TMP/err$i" | tail -3; }; done
expect_eq "9 builds queued at once all succeed" "$fails" 0
expect_eq "each was claimed and done once" "$($PSQL -c "select count(*) from svc_builds where state = 'done'")" 9
expect_eq "both hosts took work" "$($PSQL -c "select count(distinct host) from svc_builds")" 2
# team_builds = 1: no two of team a's builds overlapped, whichever host ran them
overlap=$($PSQL -c "select count(*) from svc_builds x join svc_builds y on x.team = y.team and x.id < y.id
	where x.team = 'team-a' and x.started < y.ended and y.started < x.ended")
expect_eq "a team's limit holds across hosts" "$overlap" 0
if [ "$a_left" -ge 1 ]; then ok "team b is not starved behind team a ($a_left of a's still to finish when b's was done)"
else
	not_ok "team b is not starved behind team a (all of a's were done before b's; $a_queued of a's queued when b came)"
	$PSQL -c "select team, host, qms, started, ended from svc_builds order by qms" | sed 's/^/#   /'
fi
expect_grep "the log of a build claimed by either host streams" '^\[13/13\] COPY f /f12' "$T_TMP/err1"
ID=$(curl -s -H "X-API-Key: $A" "$URL1/build/v1/builds" | jq -r '.builds[0].id')
expect_eq "its status reads the same on both hosts" "$(curl -s -H "X-API-Key: $A" "$URL1/build/v1/builds/$ID" | jq -c '[.state,.host]')" \
	"$(curl -s -H "X-API-Key: $A" "$URL2/build/v1/builds/$ID" | jq -c '[.state,.host]')"

# E2B's templates and builds live in the shared database too: made on one host, read on the other
curl -s -XPOST -H "X-API-Key: $A" -H 'Content-Type: application/json' "$URL1/v3/templates" \
	-d '{"name":"shared-app","cpuCount":2,"memoryMB":256}' >"$T_TMP/e2b-create"
TID=$(jq -r .templateID "$T_TMP/e2b-create")
EBID=$(jq -r .buildID "$T_TMP/e2b-create")
expect_eq "an E2B template made through host 1 is listed by host 2" \
	"$(curl -s -H "X-API-Key: $A" "$URL2/templates" | jq -c '[.[] | [.templateID, .names[0]]]')" "[[\"$TID\",\"shared-app\"]]"
expect_eq "...and its build's status read there" \
	"$(curl -s -o /dev/null -w '%{http_code}' -H "X-API-Key: $A" "$URL2/templates/$TID/builds/$EBID/status")" 200
expect_eq "...its rows in PostgreSQL, not in a file of one host" \
	"$($PSQL -c "select team, name from e2b_templates"),$(ls "$DATA/e2b" | grep -c 'e2b.db')" "team-a|shared-app,0"
expect_eq "...not by another team" "$(curl -s -H "X-API-Key: $B" "$URL2/templates" | jq -c .)" "[]"

# replays through the shared queue: b's build answers its rebuild sent to the other host
DB0=$(head -1 "$T_TMP/outb")
KILN_TOKEN=$B $KILN build --remote "$URL2" -t b:1 "$T_TMP/cb" >"$T_TMP/outb" 2>"$T_TMP/errb"
expect_grep "a rebuild is answered from an earlier build's record in PostgreSQL" '^same inputs as build b-[0-9a-f]*: its result' "$T_TMP/errb"
expect_eq "...its image that of b's first build" "$(head -1 "$T_TMP/outb")" "$DB0"

# a host that dies while building: its build ends failed, queued ones stay queued
$PSQL -c "update svc_builds set state = 'building', host = 'gone:1', heartbeat = 1 where id = '$ID'" >/dev/null
$PSQL -c "insert into svc_builds(id, team, state, request, created, time_limit) values('b-queued', 'team-a', 'queued', '{\"dockerfile\":\"FROM scratch\\nENV A=1\\n\",\"files\":[]}', 1, 60)" >/dev/null
kill $SRV1; wait $SRV1 2>/dev/null
start 1
# the restarted host ends the gone host's build and runs the queued one: waited
# for, not slept on (a fixed 3 s assumed a quiet machine)
state() { $PSQL -c "select state from svc_builds where id = '$1'"; }
for _ in $(seq 300); do
	[ "$(state "$ID")" = failed ] && [ "$(state b-queued)" = done ] && break
	sleep 0.1
done
expect_eq "a build whose host stopped ends failed" "$($PSQL -c "select state from svc_builds where id = '$ID'")" failed
expect_grep "with the reason" 'host gone:1 stopped' <($PSQL -c "select reason from svc_builds where id = '$ID'")
expect_eq "a queued build survives the restart and runs" "$($PSQL -c "select state from svc_builds where id = 'b-queued'")" done
