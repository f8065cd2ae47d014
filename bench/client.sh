#!/usr/bin/env bash
# client.sh — kiln's registry client against skopeo, in one run on this
# machine: push and pull of the same ~100 MB, 5-layer image (kiln build from
# scratch, exported as an OCI layout for skopeo) to/from one `kiln serve` on
# 127.0.0.1; median of RUNS runs, a fresh repository (push) and a fresh store
# or directory (pull) each run.  Prints a markdown block for bench/RESULTS.md.
# Usage: bench/client.sh [RUNS]
set -euo pipefail
RUNS=${1:-3}
KILN=${KILN:-$PWD/bin/kiln}
W=$(mktemp -d /tmp/kiln-bench-client.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
cd "$W"
export KILN_HOME=$W/home SOURCE_DATE_EPOCH=1700000000
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

mkdir ctx
for i in 1 2 3 4 5; do
	head -c 20000000 /dev/urandom >"ctx/layer$i"
	echo "COPY layer$i /layer$i"
done | { echo 'FROM scratch'; cat; } >ctx/Dockerfile
IMG=$("$KILN" build --compression gzip -t bench:1 --oci-out "$W/oci" ctx 2>/dev/null)
SIZE=$(skopeo inspect --raw "oci:$W/oci" | jq '[.layers[].size] | add')

start_server() { # fresh data and port each run: skopeo's blob-info cache knows nothing of it
	rm -rf "$W/data"
	"$KILN" serve --addr 127.0.0.1:0 --data "$W/data" 2>"$W/serve.log" &
	PIDS+=($!)
	PORT=
	for _ in $(seq 1 100); do
		PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$W/serve.log")
		[ -n "$PORT" ] && break
		sleep 0.05
	done
	R=127.0.0.1:$PORT
}
stop_server() { local p=${PIDS[-1]}; kill "$p"; wait "$p" 2>/dev/null || true; unset 'PIDS[-1]'; }

for r in $(seq 1 "$RUNS"); do
	start_server
	t0=$(now)
	"$KILN" push bench:1 "$R/bench/k$r:v1" >/dev/null
	t1=$(now)
	KILN_HOME=$W/pull$r "$KILN" pull "$R/bench/k$r:v1" >"$W/got"
	t2=$(now)
	[ "$(cat "$W/got")" = "$IMG" ] || { echo "kiln: pulled digest differs" >&2; exit 1; }
	skopeo copy -q --dest-tls-verify=false "oci:$W/oci" "docker://$R/bench/s$r:v1" >/dev/null
	t3=$(now)
	skopeo copy -q --src-tls-verify=false "docker://$R/bench/s$r:v1" "oci:$W/spull$r:v1" >/dev/null
	t4=$(now)
	"$KILN" push --parallel 1 bench:1 "$R/bench/p$r:v1" >/dev/null
	t5=$(now)
	KILN_HOME=$W/one$r "$KILN" pull --parallel 1 "$R/bench/p$r:v1" >/dev/null
	t6=$(now)
	echo "$(echo "$t1 - $t0" | bc -l) $(echo "$t2 - $t1" | bc -l) $(echo "$t3 - $t2" | bc -l) $(echo "$t4 - $t3" | bc -l)" \
		"$(echo "$t5 - $t4" | bc -l) $(echo "$t6 - $t5" | bc -l)" >>"$W/times"
	rm -rf "$W/pull$r" "$W/spull$r" "$W/one$r"
	stop_server
done
med() { awk -v c="$1" '{print $c}' "$W/times" | median; }

echo "## registry client — kiln push/pull vs skopeo (\`bench/client.sh\`)"
echo
echo "Command: \`bench/client.sh $RUNS\` — a fresh \`kiln serve\` on 127.0.0.1 per run, image of 5 layers,"
echo "$SIZE bytes compressed; median of $RUNS runs (fresh repository / fresh store each run)."
echo "kiln pull also verifies, fsyncs and imports every blob into its store; skopeo writes an"
echo "OCI directory. Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); skopeo $(skopeo --version | awk '{print $3}')."
echo
echo "| | kiln (4 at once) | kiln --parallel 1 | skopeo copy |"
echo "| --- | --- | --- | --- |"
printf '| push (s) | %.2f | %.2f | %.2f |\n' "$(med 1)" "$(med 5)" "$(med 3)"
printf '| pull (s) | %.2f | %.2f | %.2f |\n' "$(med 2)" "$(med 6)" "$(med 4)"
echo
echo "Runs (kiln push/pull, skopeo push/pull, kiln --parallel 1 push/pull): $(awk '{printf "%s%.2f/%.2f %.2f/%.2f %.2f/%.2f", (NR>1 ? "; " : ""), $1, $2, $3, $4, $5, $6}' "$W/times")"
