#!/usr/bin/env bash
# lazy.sh — lazy start from the chunk store (docs/distribution.md "Lazy
# templates"), in one run: a template of ~1 GiB rootfs (busybox + real library
# files) and 512 MiB guest RAM, v1 and v2 (one file changed in the last step),
# pushed to `kiln serve` on 127.0.0.1.  On empty hosts, alternately: `kiln run
# REF -- cat /app/app.txt` lazily (KILN_LAZY=1) and with a full pull first
# (KILN_LAZY=0): time from the command's start to its first output (median of
# RUNS); bytes fetched before the first output (prefetch off); disk used by v1
# and v1+v2, lazily (chunks only) and fully pulled (chunks + assembled copies).
# With KILN_OLD=path/to/an/older/kiln, its lazy runs alternate with these
# too (before/after in one run).  Prints a markdown block for bench/RESULTS.md.
# Usage: [KILN_OLD=BIN] bench/lazy.sh [RUNS] [ROOTFS_MIB]
set -euo pipefail
RUNS=${1:-3}
ROOT_MIB=${2:-1024}
KILN=${KILN:-$PWD/bin/kiln}
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
W=$(mktemp -d /tmp/kiln-bench-lazy.XXXXXX)
PIDS=()
hosts_stop() {
	for h in "$W"/host-*; do
		[ -d "$h" ] || continue
		KILN_HOME=$h "$KILN" sandbox gc >/dev/null 2>&1 || true
		KILN_HOME=$h "$KILN" chunkfs stop >/dev/null 2>&1 || true
	done
}
cleanup() {
	hosts_stop
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$W"
}
trap cleanup EXIT
export TMPDIR=$W/tmp SOURCE_DATE_EPOCH=1700000000
mkdir -p "$TMPDIR"
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null
. "$(dirname "$0")/busybox-base.sh"
cd "$W"
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
# first_output CMD...: seconds from the start of CMD to its first byte on stdout
first_output() {
	python3 - "$@" <<'PY'
import subprocess, sys, time
t0 = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=open("run.err", "a"))
b = p.stdout.read(1)
t1 = time.monotonic()
rest = p.stdout.read()
p.wait()
if not b or p.returncode != 0:
    sys.exit("no output, exit %s" % p.returncode)
print("%.3f" % (t1 - t0))
PY
}
disk_kib() { du -sk "$@" 2>/dev/null | awk '{s += $1} END {print s + 0}'; }

# -- the base: busybox + the first ROOT_MIB of /usr/lib/x86_64-linux-gnu's files (sorted) --
busybox_base "$ROOT_MIB"

build() {
	local c=ctx-$1
	mkdir -p "$c"
	echo "app version $2" >"$c/app.txt"
	printf 'FROM oci:%s/base:base\nCOPY app.txt /app/app.txt\n' "$W" >"$c/Dockerfile"
	"$KILN" build -t "$1" --start-cmd 'echo started >/tmp/started; sync' --ready-cmd 'test -f /tmp/started' \
		--memory 512 "$c" >/dev/null 2>"build-$1.log"
}
export KILN_HOME=$W/builder
tb0=$(date +%s)
build v1 1
build v2 2
tb1=$(date +%s)

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$KILN" serve --addr "127.0.0.1:$port" --data "$W/reg" 2>"$W/serve.log" &
PIDS+=($!)
for _ in $(seq 1 200); do curl -sf -o /dev/null "http://127.0.0.1:$port/v2/" && break; sleep 0.05; done
REG=127.0.0.1:$port
"$KILN" push --json v1 "$REG/t/app:v1" >push1.json 2>/dev/null
"$KILN" push --json v2 "$REG/t/app:v2" >push2.json 2>/dev/null
total=$(grep '"event":"done"' push1.json | jq -r .bytes_total)

# -- first output on an empty host, lazily and with a full pull, alternating -----------
MODES="lazy full${KILN_OLD:+ old}"
L_RUN0=$(load)
for r in $(seq 1 "$RUNS"); do
	for mode in $MODES; do
		h=$W/host-$mode-$r
		v=$([ $mode = full ] && echo 0 || echo 1)
		k=$([ $mode = old ] && echo "$KILN_OLD" || echo "$KILN")
		echo "== $mode $r (load $(load))" >>run.err
		KILN_HOME=$h KILN_LAZY=$v first_output "$k" run --time "$REG/t/app:v1" -- cat /app/app.txt >>"$mode.times"
		[ $mode != full ] && grep -h "on first touch\|page cache\|cannot be read" "$h/chunkfs/log" >>run.err 2>/dev/null || true
		KILN_HOME=$h "$k" sandbox gc >/dev/null 2>&1 || true
		KILN_HOME=$h "$k" chunkfs stop >/dev/null 2>&1 || true
		rm -rf "$h"
	done
done
L_RUN="$L_RUN0 at the start, $(load) at the end"

# -- bytes fetched before the first output (the server fetches on first touch only) --------
h=$W/host-bytes
KILN_HOME=$h KILN_LAZY=1 KILN_CHUNKFS_PREFETCH=0 "$KILN" run "$REG/t/app:v1" -- cat /app/app.txt >/dev/null 2>&1
fetched=$(find "$h/chunks/sha256" -type f ! -name '*.part' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
KILN_HOME=$h "$KILN" sandbox gc >/dev/null 2>&1 || true
KILN_HOME=$h "$KILN" chunkfs stop >/dev/null 2>&1 || true

# -- disk used by v1 and v1+v2 ------------------------------------------------------------
wait_local() {
	for _ in $(seq 1 3000); do
		grep -q "template ${2:0:12}: every chunk is local" "$1/chunkfs/log" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}
h=$W/host-disk-lazy
KILN_HOME=$h "$KILN" pull --lazy "$REG/t/app:v1" >/dev/null 2>&1
wait_local "$h" "$(cut -d: -f2 "$h/snapshots/refs/$REG/t/app/v1")"
lazy1=$(disk_kib "$h/chunks" "$h/snapshots")
KILN_HOME=$h "$KILN" pull --lazy "$REG/t/app:v2" >/dev/null 2>&1
wait_local "$h" "$(cut -d: -f2 "$h/snapshots/refs/$REG/t/app/v2")"
lazy2=$(disk_kib "$h/chunks" "$h/snapshots")
KILN_HOME=$h "$KILN" chunkfs stop >/dev/null 2>&1 || true
h=$W/host-disk-full
KILN_HOME=$h "$KILN" pull "$REG/t/app:v1" >/dev/null 2>&1
full1=$(disk_kib "$h/chunks" "$h/snapshots")
KILN_HOME=$h "$KILN" pull "$REG/t/app:v2" >/dev/null 2>&1
full2=$(disk_kib "$h/chunks" "$h/snapshots")

# -- restore + first exec, all of it local: served by chunkfs vs assembled files, alternating --
for r in $(seq 1 "$RUNS"); do
	for mode in lazy full; do
		echo "== local $mode $r" >>run.err
		KILN_HOME=$W/host-disk-$mode first_output "$KILN" run --time "$REG/t/app:v1" -- cat /app/app.txt >>"local-$mode.times"
	done
done
hosts_stop

cfg=$W/builder/snapshots/blobs/sha256/$(cut -d: -f2 "$W/builder/snapshots/refs/v1/latest")
lz=$(median <lazy.times); fl=$(median <full.times)
cat <<MD
Template: rootfs $(mib "$(jq -r .rootfs.size "$cfg")") MiB ext4 (busybox + $ROOT_MIB MiB of /usr/lib/x86_64-linux-gnu),
$(jq -r .memory_mib "$cfg") MiB guest RAM; as an artifact $(mib "$total") MiB (zstd chunks). Built in $((tb1 - tb0)) s (two versions).
Load during the runs: $L_RUN. TCG (no usable KVM); other helpers share the 2 cores.

| \`kiln run REF -- cat /app/app.txt\` on an empty host, median of $RUNS | first output |
| --- | --- |
| lazy (KILN_LAZY=1: config, state, disk and working set fetched, the rest on first touch) | $lz s |
| full pull, then run (KILN_LAZY=0) | $fl s |
| ratio | $(awk -v a="$fl" -v b="$lz" 'BEGIN {printf "%.1fx", a / b}') |
$([ -n "${KILN_OLD:-}" ] && echo "| lazy, the older kiln (\$KILN_OLD), alternating with these | $(median <old.times) s |")

Lazy runs: $(tr '\n' ' ' <lazy.times)s; full: $(tr '\n' ' ' <full.times)s$([ -n "${KILN_OLD:-}" ] && echo "; older lazy: $(tr '\n' ' ' <old.times)s").
Bytes fetched before the first output (lazy, prefetch off): $(mib "$fetched") MiB of $(mib "$total") MiB.

| disk used on the runtime host | v1 | v1 + v2 | ratio |
| --- | --- | --- | --- |
| lazy (chunk store only) | $(mib $((lazy1 * 1024))) MiB | $(mib $((lazy2 * 1024))) MiB | $(awk -v a="$lazy2" -v b="$lazy1" 'BEGIN {printf "%.3f", a / b}') |
| full pull (chunks + assembled files) | $(mib $((full1 * 1024))) MiB | $(mib $((full2 * 1024))) MiB | $(awk -v a="$full2" -v b="$full1" 'BEGIN {printf "%.3f", a / b}') |

| all of v1 local: \`kiln run\` → first output, median of $RUNS | |
| --- | --- |
| served from the chunk store (chunkfs, memory mapped directly) | $(median <local-lazy.times) s ($(tr '\n' ' ' <local-lazy.times)) |
| assembled files (jailed: RAM copied to /dev/shm first) | $(median <local-full.times) s ($(tr '\n' ' ' <local-full.times)) |
MD
echo
echo 'What the runs said on stderr (`kiln run --time`, the pull summary):'
echo
grep -v "^kiln: template .* is not on this host" run.err | sed 's/^/    /'
