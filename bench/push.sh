#!/usr/bin/env bash
# push.sh — full push of a large template to `kiln serve` on 127.0.0.1
# (issue 17's goal: ≥ 1 GiB rootfs / 512 MiB memory template in ≤ 3 s): one
# template (the base of bench/lazy.sh: busybox + ROOTFS_MIB of real library
# files, 512 MiB guest RAM), pushed RUNS times, each to a fresh registry (new
# data directory, new server).  With KILN_BEFORE=PATH (an older bin/kiln) the
# runs alternate before/after — server and client of the same binary — so
# both see the same load.  "after-first" is the first push after a build
# (the kept artifact, chunks/made, removed: every file chunked), "after" a
# push of the same template again (to a fresh registry: every blob sent).  Each push is split at its first progress event:
# chunking (read, sha256, zstd of every chunk: dist_tmpl_make) and the
# transfer (batch query or HEADs, uploads, commits, the manifest).  Prints a
# markdown block for bench/RESULTS.md.
# Usage: [KILN_BEFORE=/path/to/old/kiln] [KILN_AFTER=/path/to/kiln] bench/push.sh [RUNS] [ROOTFS_MIB]
set -euo pipefail
RUNS=${1:-3}
ROOT_MIB=${2:-1024}
KILN=${KILN:-$PWD/bin/kiln}
BEFORE=${KILN_BEFORE:-}
AFTER=${KILN_AFTER:-$KILN} # the binary measured as "after" (default: the one that builds)
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
W=$(mktemp -d /tmp/kiln-bench-push.XXXXXX)
SPID=
cleanup() {
	[ -n "$SPID" ] && { kill "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; }
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

# -- the template: busybox + the first ROOT_MIB of /usr/lib/x86_64-linux-gnu's files --
busybox_base "$ROOT_MIB"
mkdir -p ctx
echo "app version 1" >ctx/app.txt
printf 'FROM oci:%s/base:base\nCOPY app.txt /app/app.txt\n' "$W" >ctx/Dockerfile
export KILN_HOME=$W/home
tb0=$(date +%s)
"$KILN" build -t app --start-cmd 'echo started >/tmp/started; sync' --ready-cmd 'test -f /tmp/started' \
	--memory 512 ctx >/dev/null 2>build.log
tb1=$(date +%s)

# push_once BIN LABEL: a fresh server of BIN, then BIN push; appends "total chunk" seconds to LABEL.times.
# Each server gets a new data directory, and the old ones stay until the end: removing the last
# push's 4,651 blob files right before the next push made every file the next one created scan
# them (ext4 without a journal skips inodes deleted in the last minute: `recently_deleted`),
# 1-2 s of server CPU (measured, both binaries) that a registry pays only right after deleting thousands of files.
NREG=0
push_once() {
	local bin=$1 label=$2 port
	NREG=$((NREG + 1))
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	"$bin" serve --addr "127.0.0.1:$port" --data "$W/reg.$NREG" 2>>serve.log &
	SPID=$!
	for _ in $(seq 1 200); do curl -sf -o /dev/null "http://127.0.0.1:$port/v2/" && break; sleep 0.05; done
	local s0 s1
	s0=$(awk '{print $14 + $15}' "/proc/$SPID/stat")
	python3 - "$bin" "127.0.0.1:$port" "$label" <<'PY' >>"$2.times"
import json, os, subprocess, sys, time
binary, reg, label = sys.argv[1:]
t0 = time.monotonic()
p = subprocess.Popen([binary, "push", "--json", "app", reg + "/t/app:v1"], stdout=subprocess.PIPE,
                     stderr=open("push.err", "a"), text=True)
first = None
done = {}
for line in p.stdout:
    if first is None and '"progress"' in line:
        first = time.monotonic() - t0
    if '"done"' in line:
        done = json.loads(line)
_, status, ru = os.wait4(p.pid, 0)
t = time.monotonic() - t0
if status != 0:
    sys.exit("push failed: status %d" % status)
print("%.3f %.3f %d %d %.2f" % (t, first or 0, done.get("blobs_total", 0), done.get("bytes_total", 0),
                                ru.ru_utime + ru.ru_stime), end="")
PY
	s1=$(awk '{print $14 + $15}' "/proc/$SPID/stat")
	echo " $(awk -v a="$s0" -v b="$s1" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", (b - a) / hz}')" >>"$2.times"
	kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=
}
L0=$(load)
for r in $(seq 1 "$RUNS"); do
	[ -n "$BEFORE" ] && push_once "$BEFORE" before
	rm -rf "$KILN_HOME/chunks/made" # the first push after a build: chunks every file
	push_once "$AFTER" after-first
	push_once "$AFTER" after        # the artifact kept from that push (chunks/made)
done
L1=$(load)

row() { # LABEL
	local t c
	t=$(awk '{print $1}' "$1.times" | median)
	c=$(awk '{print $2}' "$1.times" | median)
	echo "| $1 | $t s | $c s | $(awk -v a="$t" -v b="$c" 'BEGIN {printf "%.3f", a - b}') s |" \
		"$(awk '{print $5}' "$1.times" | median) s | $(awk '{print $6}' "$1.times" | median) s | $(awk '{printf "%s ", $1}' "$1.times")|"
}
cfg=$W/home/snapshots/blobs/sha256/$(cut -d: -f2 "$W/home/snapshots/refs/app/latest")
read -r _ _ blobs bytes _ <after.times
cat <<MD
Template: rootfs $(mib "$(jq -r .rootfs.size "$cfg")") MiB ext4 (busybox + $ROOT_MIB MiB of /usr/lib/x86_64-linux-gnu),
$(jq -r .memory_mib "$cfg") MiB guest RAM; as an artifact $(mib "$bytes") MiB in $blobs blobs (zstd chunks). Built in $((tb1 - tb0)) s.
Load before / after the pushes: $L0 / $L1. Each push to a fresh \`kiln serve\` (empty data directory).

| \`kiln push --json app REG/t/app:v1\`, median of $RUNS | full push | chunking (to the first progress event) | transfer (query, uploads, commits, manifest) | client CPU | server CPU | runs |
| --- | --- | --- | --- | --- | --- | --- |
$([ -n "$BEFORE" ] && row before)
$(row after-first)
$(row after)
MD
