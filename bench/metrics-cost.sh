#!/usr/bin/env bash
# metrics-cost.sh — what /metrics and the access log cost kiln serve (issue
# 30): the server's CPU time (utime + stime of its process) for one skopeo
# push and pull of a 100-layer image (~600 requests, each blob its own HEAD,
# POST, PUT, GET), by three servers alternating round by round in one run:
#   base  — a kiln without metrics or access log (KILN_BASE, e.g. f470cca's),
#   off   — this kiln with --log-format off (metrics counted and scraped),
#   text  — this kiln as it runs by default (metrics + the text access log);
# a scrape of /metrics every 0.5 s during the rounds of the two with metrics,
# as a Prometheus at twice the usual rate would.  Prints medians of ROUNDS
# and the ratios to base, and the load average before and after.  The CPU
# time is perf's task-clock of the server (every thread, in ns) where perf is
# installed, else /proc's ticks (10 ms).  BENCH_DIR (default /tmp) holds the
# data directories: /dev/shm takes the disk's fsync times out of the figures,
# which otherwise vary more from round to round than the difference measured.
# Usage: KILN_BASE=/path/to/old/kiln [BENCH_DIR=/dev/shm] bench/metrics-cost.sh [ROUNDS]
set -euo pipefail
ROUNDS=${1:-5}
KILN=${KILN:-$PWD/bin/kiln}
BASE=${KILN_BASE:?KILN_BASE: a kiln binary without metrics (e.g. built at f470cca)}
W=$(mktemp -d "${BENCH_DIR:-/tmp}/kiln-bench-metrics.XXXXXX")
SRV= WRAP=
PERF=$(command -v perf || true)
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$WRAP" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
export KILN_HOME=$W/home SOURCE_DATE_EPOCH=1700000000
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

mkdir -p "$W/ctx"
{ echo 'FROM scratch'; for i in $(seq 1 100); do head -c 4096 /dev/urandom >"$W/ctx/f$i"; echo "COPY f$i /f$i"; done; } \
	>"$W/ctx/Dockerfile"
"$KILN" build -t many:1 --oci-out "$W/oci" "$W/ctx" >/dev/null 2>&1

port=
start_srv() { # BINARY [serve args]: a server on a fresh data directory, its pid in SRV, its port in port
	local bin=$1
	shift
	rm -rf "$W/data" "$W/pc"
	if [ -n "$PERF" ]; then
		"$PERF" stat -x, -e task-clock -o "$W/pc" -- "$bin" serve --addr 127.0.0.1:0 --data "$W/data" "$@" \
			2>"$W/serve.log" &
	else
		"$bin" serve --addr 127.0.0.1:0 --data "$W/data" "$@" 2>"$W/serve.log" &
	fi
	WRAP=$!
	for _ in $(seq 1 100); do
		port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$W/serve.log")
		[ -n "$port" ] && break
		sleep 0.05
	done
	SRV=$WRAP
	[ -n "$PERF" ] && SRV=$(pgrep -P "$WRAP")
	return 0
}
# stop_srv : ends the server, its CPU seconds in CPU (not in a $(...): wait needs this shell)
stop_srv() {
	local ticks
	ticks=$(awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$SRV/stat")
	kill "$SRV"
	wait "$WRAP" 2>/dev/null || true
	SRV= WRAP=
	CPU=$ticks
	if [ -n "$PERF" ]; then CPU=$(awk -F, '$3 == "task-clock" { print $1 / 1000 }' "$W/pc"); fi
}
round() { # NAME BINARY [serve args] -> appends "NAME CPU_SECONDS" to $W/cpu
	local name=$1 bin=$2 scr=
	shift 2
	rm -rf "$W/pulled"
	start_srv "$bin" "$@"
	if [ "$name" != base ]; then
		(while :; do curl -s -o /dev/null "http://127.0.0.1:$port/metrics"; sleep 0.5; done) &
		scr=$!
	fi
	skopeo copy -q --dest-tls-verify=false "oci:$W/oci" "docker://127.0.0.1:$port/bench/many:1" >/dev/null
	skopeo copy -q --src-tls-verify=false "docker://127.0.0.1:$port/bench/many:1" "oci:$W/pulled:1" >/dev/null
	[ -n "$scr" ] && kill "$scr" && wait "$scr" 2>/dev/null || true
	stop_srv
	echo "$name $CPU" >>"$W/cpu"
}
round warmup "$KILN" >/dev/null
: >"$W/cpu"
for r in $(seq 1 "$ROUNDS"); do
	round base "$BASE"
	round off "$KILN" --log-format off
	round text "$KILN"
done
# and one scrape's own cost: a server that takes the push, against one that
# takes the push and then 200 scrapes (the difference, per scrape)
start_srv "$KILN" --log-format off
skopeo copy -q --dest-tls-verify=false "oci:$W/oci" "docker://127.0.0.1:$port/bench/many:1" >/dev/null
stop_srv
c0=$CPU
start_srv "$KILN" --log-format off
skopeo copy -q --dest-tls-verify=false "oci:$W/oci" "docker://127.0.0.1:$port/bench/many:1" >/dev/null
for _ in $(seq 1 200); do curl -s -o /dev/null "http://127.0.0.1:$port/metrics"; done
bytes=$(curl -s "http://127.0.0.1:$port/metrics" | wc -c)
stop_srv
c1=$CPU
scrape_ms=$(echo "($c1 - $c0) * 1000 / 201" | bc -l | xargs printf '%.2f')
m() { awk -v n="$1" '$1 == n { print $2 }' "$W/cpu" | median; }
b=$(m base) o=$(m off) t=$(m text)
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| server CPU for one skopeo push + pull of a 100-layer image, median of $ROUNDS | s | vs base |"
echo "| --- | --- | --- |"
echo "| base (no metrics, no access log) | $b | 1.00x |"
echo "| metrics, scraped every 0.5 s, access log off | $o | $(echo "$o / $b" | bc -l | xargs printf '%.3f')x |"
echo "| metrics + text access log (the default) | $t | $(echo "$t / $b" | bc -l | xargs printf '%.3f')x |"
echo "one scrape of /metrics ($bytes bytes, 101 blobs stored): $scrape_ms ms of server CPU (201 scrapes)"
echo "CPU time from: $([ -n "$PERF" ] && echo "perf task-clock" || echo "/proc ticks"); data in ${BENCH_DIR:-/tmp}"
echo "each round: $(awk '{ printf "%s=%s ", $1, $2 }' "$W/cpu")"
