#!/usr/bin/env bash
# push.sh — build, then full push of a large template to `kiln serve` on
# 127.0.0.1 (issue 17's goal: ≥ 1 GiB rootfs / 512 MiB memory template in
# ≤ 3 s): the template of bench/lazy.sh (busybox + ROOTFS_MIB of real library
# files, 512 MiB guest RAM).  Each run builds a new version of it (app.txt
# changed: the COPY step runs, the base is cached) into an empty chunk store,
# then pushes it to a fresh registry (new data directory, new server): the
# "first push" is what a user waits for after `kiln build`, whatever part of
# the chunking (read, sha256, zstd of every chunk) the build did already, and
# the build's own time is reported beside it.  Then the same template is
# pushed again to another fresh registry ("push again": the artifact kept in
# chunks/made, every blob sent).  With KILN_BEFORE=PATH (an older bin/kiln)
# its runs alternate with KILN_AFTER's — builder, server and client of the same
# binary — so both see the same load.  Each push is split at its first progress
# event: chunking left to the push (dist_tmpl_make) and the transfer (batch
# query or HEADs, uploads, commits, the manifest).  Prints a markdown block for
# bench/RESULTS.md.
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
echo "app version 0" >ctx/app.txt
printf 'FROM oci:%s/base:base\nCOPY app.txt /app/app.txt\n' "$W" >ctx/Dockerfile
export KILN_HOME=$W/home
NB=0
# build_once BIN LABEL: a new version (app.txt) built by BIN into an empty chunk store (the old one
# moved aside, not deleted: see push_once); appends the build's seconds to LABEL.build.
build_once() {
	NB=$((NB + 1))
	[ -d "$KILN_HOME/chunks" ] && mv "$KILN_HOME/chunks" "$W/chunks.$NB"
	echo "app version $NB" >ctx/app.txt
	local t0 t1
	t0=$(date +%s.%N)
	"$1" build -t app --start-cmd 'echo started >/tmp/started; sync' --ready-cmd 'test -f /tmp/started' \
		--memory 512 ctx >/dev/null 2>>build.log
	t1=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f\n", b - a}' >>"$2.build"
}
"$AFTER" build -t app --start-cmd 'echo started >/tmp/started; sync' --ready-cmd 'test -f /tmp/started' \
	--memory 512 ctx >/dev/null 2>build.log # the base's layers and cache, for every run alike

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
	if [ -n "$BEFORE" ]; then
		build_once "$BEFORE" before
		push_once "$BEFORE" before
	fi
	build_once "$AFTER" after
	push_once "$AFTER" after
	push_once "$AFTER" again # the artifact kept from that push (chunks/made)
done
L1=$(load)

col() { awk "{print \$$2}" "$1.times" | median; }
row() { # LABEL NAME: build, first push, chunking, transfer, build + push, client / server CPU
	local t c b
	t=$(col "$1" 1)
	c=$(col "$1" 2)
	b=$(median <"$1.build")
	echo "| $2 | $b s | **$t s** | $c s | $(awk -v a="$t" -v b="$c" 'BEGIN {printf "%.2f", a - b}') s |" \
		"$(paste -d' ' "$1.build" <(awk '{print $1}' "$1.times") | awk '{print $1 + $2}' | median) s |" \
		"$(col "$1" 5) / $(col "$1" 6) s | $(paste -d+ "$1.build" <(awk '{print $1}' "$1.times") | tr '\n' ' ')|"
}
cfg=$W/home/snapshots/blobs/sha256/$(cut -d: -f2 "$W/home/snapshots/refs/app/latest")
read -r _ _ blobs bytes _ <again.times
cat <<MD
Template: rootfs $(mib "$(jq -r .rootfs.size "$cfg")") MiB ext4 (busybox + $ROOT_MIB MiB of /usr/lib/x86_64-linux-gnu),
$(jq -r .memory_mib "$cfg") MiB guest RAM; as an artifact $(mib "$bytes") MiB in $blobs blobs (zstd chunks).
Load before / after the runs: $L0 / $L1. Each run: a new version built into an empty chunk store, pushed to a
fresh \`kiln serve\` (empty data directory), then pushed again to another.

| \`kiln build\` then \`kiln push --json app REG/t/app:v1\`, median of $RUNS | build | first push | chunking left to the push | transfer | build + first push | client / server CPU of the push | runs (build + push) |
| --- | --- | --- | --- | --- | --- | --- | --- |
$([ -n "$BEFORE" ] && row before before)
$(row after after)

Push again (the kept artifact, every blob sent): $(col again 1) s median ($(awk '{printf "%s ", $1}' again.times)s).
MD
