#!/usr/bin/env bash
# registry.sh — kiln serve against Debian's docker-registry (distribution 2.8),
# in one run on this machine: skopeo push and pull of the same ~100 MB,
# 5-layer image into each (median of RUNS runs, fresh data directories each run,
# the two registries' runs interleaved),
# then a bounded concurrent pull of a 10 MB blob (wrk, CONNS connections for
# DURATION) and manifest GETs per second.  Also the profile behind the push
# and pull times: each server's CPU time (user + sys, from /proc) per push and
# per pull, and skopeo's own time copying the image between two local OCI
# layouts (no registry at all).  Prints a markdown block for
# bench/RESULTS.md.  Usage: bench/registry.sh [RUNS], or bench/registry.sh attack
# (below: real clients pulling while one address holds thousands of slow connections)
# (env: CONNS, DURATION, KILN_CONFIG = a kiln serve config file for A/B runs)
set -euo pipefail
RUNS=${1:-5}
[ "$RUNS" = attack ] && RUNS=0
CONNS=${CONNS:-256}
DURATION=${DURATION:-10s}
KILN=${KILN:-$PWD/bin/kiln}
HOLDCONNS=${HOLDCONNS:-$PWD/tests/holdconns.py}
W=$(mktemp -d /tmp/kiln-bench-registry.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
unset AWS_CA_BUNDLE
cd "$W"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 1 200); do curl -sf -o /dev/null "http://$1/v2/" && return 0; sleep 0.05; done; echo "no server at $1" >&2; return 1; }
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# -- peers ------------------------------------------------------------------------
start_kiln() { # DATA -> sets ADDR
	local port; port=$(free_port)
	"$KILN" serve --addr "127.0.0.1:$port" --data "$1" ${KILN_CONFIG:+--config "$KILN_CONFIG"} 2>"$1.log" &
	PIDS+=($!); ADDR=127.0.0.1:$port; wait_http "$ADDR"
}
start_distribution() { # DATA -> sets ADDR
	local port; port=$(free_port)
	cat >"$1.yml" <<EOC
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: $1}
  delete: {enabled: true}
http: {addr: "127.0.0.1:$port"}
EOC
	docker-registry serve "$1.yml" 2>"$1.log" &
	PIDS+=($!); ADDR=127.0.0.1:$port; wait_http "$ADDR"
}
stop_last() { local p=${PIDS[-1]}; kill "$p"; wait "$p" 2>/dev/null || true; unset 'PIDS[-1]'; }

wrkfig() { # FILE -> "req/s p50 p99 errors"
	local f=$1 rps p50 p99 errs non2xx
	rps=$(awk '/^Requests\/sec/ {print $2}' "$f")
	p50=$(awk '$1=="50%" {print $2}' "$f")
	p99=$(awk '$1=="99%" {print $2}' "$f")
	errs=$(awk '/Socket errors/ {gsub(",",""); print $4+$6+$8+$10}' "$f")
	non2xx=$(awk '/Non-2xx/ {print $5}' "$f")
	echo "$rps ${p50:-?} ${p99:-?} $(( ${errs:-0} + ${non2xx:-0} ))"
}

# -- attack: real clients pulling while one address holds slow connections --------
# bench/registry.sh attack: for each server, CONNS (256) wrk connections GET a
# BLOB_SIZE blob for DURATION with no attack, then again while tests/holdconns.py
# holds ATTACK (3000) half-sent requests from 127.0.0.2 (each trickles a header
# line every 5 s; every one the server closes is reopened, up to 1000/s).  Also a
# fresh client's GET /v2/ during the attack, the server's threads and RSS, and for
# kiln the limits' own figures (the info line at stop).
attack_one() { # NAME START_FN -> $W/NAME.{base,att}.wrk, NAME.hold, NAME.fresh, NAME.proc
	local name=$1 start=$2 loc pid hp
	rm -rf "$W/data-$name"
	"$start" "$W/data-$name"
	pid=${PIDS[-1]}
	head -c "$BLOB_SIZE" /dev/urandom >blob
	BLOB=sha256:$(sha256sum blob | cut -d' ' -f1)
	loc=$(curl -s -X POST -D - -o /dev/null "http://$ADDR/v2/bench/blob/blobs/uploads/" | tr -d '\r' | awk 'tolower($1)=="location:" {print $2}')
	case $loc in http*) ;; *) loc="http://$ADDR$loc" ;; esac
	case $loc in *\?*) loc="$loc&digest=$BLOB" ;; *) loc="$loc?digest=$BLOB" ;; esac
	curl -sf -X PUT --data-binary @blob -H 'Content-Type: application/octet-stream' "$loc" >/dev/null
	curl -sf -o /dev/null "http://$ADDR/v2/bench/blob/blobs/$BLOB"
	# A real client's own pace (kiln's figures at stop: longest headers, longest
	# keep-alive gap): a skopeo push and pull of a small image, before the load.
	skopeo copy -q --dest-tls-verify=false oci:small:v1 "docker://$ADDR/bench/small:v1" >/dev/null
	rm -rf small-pull
	skopeo copy -q --src-tls-verify=false "docker://$ADDR/bench/small:v1" oci:small-pull:v1 >/dev/null
	wrk -t2 -c"$CONNS" -d"$DURATION" --timeout 30s --latency "http://$ADDR/v2/bench/blob/blobs/$BLOB" >"$W/$name.base.wrk"
	python3 "$HOLDCONNS" --dst "$ADDR" --src 127.0.0.2 --count "$ATTACK" --mode half --trickle 5 --reopen \
		--rate 1000 --duration $(( ${DURATION%s} + 10 )) >"$W/$name.hold" &
	hp=$!
	sleep 5
	{ curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 10 "http://$ADDR/v2/" || true; } >"$W/$name.fresh"
	echo "$(ls "/proc/$pid/task" | wc -l) $(awk '/VmRSS/ {print $2}' "/proc/$pid/status")" >"$W/$name.proc"
	wrk -t2 -c"$CONNS" -d"$DURATION" --timeout 30s --latency "http://$ADDR/v2/bench/blob/blobs/$BLOB" >"$W/$name.att.wrk"
	wait "$hp"
	stop_last
}

ms() { # wrk latency ("12.3ms", "1.2s", "800us") -> milliseconds
	awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000; printf "%.1f", n }'
}

attack() {
	local name
	# 3,000 held connections plus the real clients need more descriptors than
	# the usual soft limit of 1024, in this shell (wrk, holdconns) and the servers.
	ulimit -n "$(( ATTACK + CONNS + 1024 ))"
	umoci init --layout small >/dev/null
	umoci new --image small:v1 >/dev/null
	head -c 1000000 /dev/urandom >small-layer
	umoci insert --image small:v1 small-layer /small-layer >/dev/null
	for name in kiln distribution; do attack_one "$name" "start_$name"; done
	echo "## registry under attack (\`bench/registry.sh attack\`)"
	echo
	echo "\`bench/registry.sh attack\` (CONNS=$CONNS DURATION=$DURATION BLOB_SIZE=$BLOB_SIZE ATTACK=$ATTACK) on $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M') UTC;"
	echo "load average at the end: $(cut -d" " -f1-3 /proc/loadavg); docker-registry $(dpkg-query -W -f '${Version}' docker-registry); kiln serve with its default config."
	echo
	echo "| | kiln serve | docker-registry 2.8 |"
	echo "| --- | --- | --- |"
	read -r kr k50 k99 ke <<<"$(wrkfig "$W/kiln.base.wrk")"
	read -r dr d50 d99 de <<<"$(wrkfig "$W/distribution.base.wrk")"
	echo "| no attack: blob GET req/s | $kr | $dr |"
	echo "| ... p50 / p99 | $k50 / $k99 | $d50 / $d99 |"
	echo "| ... errors (socket + non-2xx) | $ke | $de |"
	local kb99=$k99 db99=$d99
	read -r kr k50 k99 ke <<<"$(wrkfig "$W/kiln.att.wrk")"
	read -r dr d50 d99 de <<<"$(wrkfig "$W/distribution.att.wrk")"
	echo "| $ATTACK slow connections from 127.0.0.2: blob GET req/s | $kr | $dr |"
	echo "| ... p50 / p99 | $k50 / $k99 | $d50 / $d99 |"
	echo "| ... errors (socket + non-2xx) | $ke | $de |"
	printf '| ... p99 under attack / without | %.2f | %.2f |\n' \
		"$(echo "$(ms "$k99") / $(ms "$kb99")" | bc -l)" "$(echo "$(ms "$d99") / $(ms "$db99")" | bc -l)"
	echo "| fresh GET /v2/ during the attack (status, s) | $(cat "$W/kiln.fresh") | $(cat "$W/distribution.fresh") |"
	echo "| server threads, RSS (KiB) during the attack | $(cat "$W/kiln.proc") | $(cat "$W/distribution.proc") |"
	for name in kiln distribution; do
		jq -r '"\(.opened) connected, \(.refused) closed at accept, \(.closed) closed later, \(.open_at_end) held at the end"' "$W/$name.hold" >"$W/$name.holds"
	done
	echo "| attacker (over the whole run) | $(cat "$W/kiln.holds") | $(cat "$W/distribution.holds") |"
	echo
	echo "kiln's own account (info line at stop):"
	echo; echo '```'; { grep 'registry: .* connections; closed' "$W/data-kiln.log" || echo '(none: an older kiln)'; } | sed "s/^kiln: info: //"; echo '```'
}

if [ "${1:-}" = attack ]; then
	BLOB_SIZE=${BLOB_SIZE:-1000000}
	ATTACK=${ATTACK:-3000}
	export KILN_LOG=${KILN_LOG:-info}
	attack
	exit 0
fi

# -- the image: 5 layers of ~20 MB incompressible data, built once ------------------
umoci init --layout img >/dev/null
umoci new --image img:v1 >/dev/null
for i in 1 2 3 4 5; do
	head -c 20000000 /dev/urandom >"layer$i"
	umoci insert --image img:v1 "layer$i" "/layer$i" >/dev/null
	rm -f "layer$i"
done
SIZE=$(skopeo inspect --raw oci:img:v1 | jq '[.layers[].size] | add')
SRC=$(skopeo inspect --raw oci:img:v1 | sha256sum | cut -d' ' -f1)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user + sys, in clock ticks
push_pull() { # NAME START_FN -> appends "push pull" seconds to $W/NAME.times, server CPU s to NAME.cpu
	local name=$1 start=$2 t0 t1 t2 got c0 c1 c2 hz
	hz=$(getconf CLK_TCK)
	{
		rm -rf "$W/data-$name" "$W/pull"
		"$start" "$W/data-$name"
		c0=$(cpu_ticks "${PIDS[-1]}")
		t0=$(now)
		skopeo copy -q --dest-tls-verify=false oci:img:v1 "docker://$ADDR/bench/img:v1" >/dev/null
		t1=$(now)
		c1=$(cpu_ticks "${PIDS[-1]}")
		skopeo copy -q --src-tls-verify=false "docker://$ADDR/bench/img:v1" oci:pull:v1 >/dev/null
		t2=$(now)
		c2=$(cpu_ticks "${PIDS[-1]}")
		echo "$(echo "($c1 - $c0) / $hz" | bc -l) $(echo "($c2 - $c1) / $hz" | bc -l)" >>"$W/$name.cpu"
		got=$(skopeo inspect --raw oci:pull:v1 | sha256sum | cut -d' ' -f1)
		[ "$got" = "$SRC" ] || { echo "$name: pulled digest differs" >&2; exit 1; }
		echo "$(echo "$t1 - $t0" | bc -l) $(echo "$t2 - $t1" | bc -l)" >>"$W/$name.times"
		stop_last
	}
}

load() { # NAME START_FN -> wrk figures in $W/NAME.wrk and $W/NAME.mwrk
	local name=$1 start=$2 loc
	rm -rf "$W/data-$name"
	"$start" "$W/data-$name"
	skopeo copy -q --dest-tls-verify=false oci:img:v1 "docker://$ADDR/bench/img:v1" >/dev/null
	head -c 10485760 /dev/urandom >blob10m
	BLOB=sha256:$(sha256sum blob10m | cut -d' ' -f1)
	loc=$(curl -s -X POST -D - -o /dev/null "http://$ADDR/v2/bench/blob/blobs/uploads/" | tr -d '\r' | awk 'tolower($1)=="location:" {print $2}')
	case $loc in http*) ;; *) loc="http://$ADDR$loc" ;; esac
	case $loc in *\?*) loc="$loc&digest=$BLOB" ;; *) loc="$loc?digest=$BLOB" ;; esac
	curl -sf -X PUT --data-binary @blob10m -H 'Content-Type: application/octet-stream' "$loc" >/dev/null
	curl -sf -o /dev/null "http://$ADDR/v2/bench/blob/blobs/$BLOB"
	wrk -t2 -c"$CONNS" -d"$DURATION" --timeout 60s --latency "http://$ADDR/v2/bench/blob/blobs/$BLOB" >"$W/$name.wrk"
	wrk -t2 -c64 -d5s --timeout 10s --latency -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
		"http://$ADDR/v2/bench/img/manifests/v1" >"$W/$name.mwrk"
	stop_last
}


# Interleaved (kiln, distribution, skopeo alone, kiln, ...) so that all three see
# the same drift of this shared machine's load.
for r in $(seq 1 "$RUNS"); do
	push_pull kiln start_kiln
	push_pull distribution start_distribution
	rm -rf "$W/copy" # the client alone: skopeo between two local layouts
	t0=$(now)
	skopeo copy -q oci:img:v1 oci:copy:v1 >/dev/null
	echo "$(now) - $t0" | bc -l >>"$W/skopeo.times"
done
load kiln start_kiln
load distribution start_distribution

echo "## registry"
echo
echo "\`bench/registry.sh $RUNS\` (CONNS=$CONNS DURATION=$DURATION) on $(nproc) cores, $(date -u +%Y-%m-%d);"
echo "load average at the end: $(cut -d" " -f1-3 /proc/loadavg); image: 5 layers, $SIZE bytes compressed; skopeo $(skopeo --version | awk '{print $3}'), docker-registry $(dpkg-query -W -f '${Version}' docker-registry)."
echo
echo "| | kiln serve | docker-registry 2.8 |"
echo "| --- | --- | --- |"
for what in push pull; do
	col=$([ $what = push ] && echo 1 || echo 2)
	k=$(cut -d' ' -f$col "$W/kiln.times" | median)
	d=$(cut -d' ' -f$col "$W/distribution.times" | median)
	printf '| skopeo %s, median of %s (s) | %.3f | %.3f |\n' "$what" "$RUNS" "$k" "$d"
done
k=$(awk '{s+=$1+$2} END {print s/NR}' "$W/kiln.times"); d=$(awk '{s+=$1+$2} END {print s/NR}' "$W/distribution.times")
kp=$(awk '{print $1+$2}' "$W/kiln.times" | median); dp=$(awk '{print $1+$2}' "$W/distribution.times" | median)
printf '| push + pull, median (s) | %.3f | %.3f |\n' "$kp" "$dp"
for what in push pull; do
	col=$([ $what = push ] && echo 1 || echo 2)
	k=$(cut -d' ' -f$col "$W/kiln.cpu" | median)
	d=$(cut -d' ' -f$col "$W/distribution.cpu" | median)
	printf '| server CPU per %s, median (s) | %.2f | %.2f |\n' "$what" "$k" "$d"
done
printf '| (skopeo alone, oci: to oci:, median (s)) | %.3f | |\n' "$(median <"$W/skopeo.times")"
read -r kr k50 k99 ke <<<"$(wrkfig "$W/kiln.wrk")"
read -r dr d50 d99 de <<<"$(wrkfig "$W/distribution.wrk")"
echo "| 10 MB blob GET, $CONNS conns $DURATION: req/s | $kr | $dr |"
echo "| ... p50 / p99 latency | $k50 / $k99 | $d50 / $d99 |"
echo "| ... errors (socket + non-2xx) | $ke | $de |"
read -r kr k50 k99 ke <<<"$(wrkfig "$W/kiln.mwrk")"
read -r dr d50 d99 de <<<"$(wrkfig "$W/distribution.mwrk")"
echo "| manifest GET, 64 conns 5s: req/s | $kr | $dr |"
echo "| ... p50 / p99 latency | $k50 / $k99 | $d50 / $d99 |"
echo "| ... errors | $ke | $de |"
echo
echo "raw push/pull seconds per run:"
echo; echo '```'; echo "kiln:"; cat "$W/kiln.times"; echo "distribution:"; cat "$W/distribution.times"; echo '```'
