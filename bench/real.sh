#!/usr/bin/env bash
# bench/real.sh — kiln build versus buildah bud (vfs, chroot) on the real-world
# corpus (tests/data/real/: c, python, node on the Debian 12 base of
# examples/debian-base.sh), side by side in one run: each case uncached
# (--no-cache on both; kiln's per-base builder VM snapshot is kept, it is not
# a step) and as a cached rebuild (kiln's step cache; buildah --layers).
# Medians of RUNS runs, the corpus totals and their ratio, then where kiln's
# time went in its last uncached build of each case (per RUN: VM start, layer
# upload, exec, capture; the other steps together), from `--json` events.
# Needs root, buildah, umoci, debootstrap.  Several minutes per run under TCG.
# Usage: bench/real.sh   (env: RUNS=3 CASES="c python node" BENCH_DIR=/var/tmp/kiln-bench-real)
set -euo pipefail
cd "$(dirname "$0")/.."
KILN=${KILN:-$PWD/bin/kiln}
RUNS=${RUNS:-3}
W=${BENCH_DIR:-/var/tmp/kiln-bench-real}
rm -rf "$W" && mkdir -p "$W"
export KILN_HOME=$W/kiln-home
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null
CA=/etc/ssl/certs/ca-certificates.crt
BR=(buildah --storage-driver vfs --root "$W/broot" --runroot "$W/brun")
L=/tmp/kiln-bench-real-base-$$ # buildah wants a plain lowercase path for an oci: base
trap '"${BR[@]}" rm -a >/dev/null 2>&1 || true; "${BR[@]}" rmi -a -f >/dev/null 2>&1 || true; rm -f "$L"' EXIT
base=$(examples/debian-base.sh)
base=${base#oci:}
ln -s "${base%:*}" "$L"
REF=oci:$L:${base##*:}
avail=$(tests/data/real/context.sh "$W/ctx")
CASES=${CASES:-$avail}

# wall seconds of a command (a shell function: kb, bb), its output in $W/last.out
secs() {
	local s
	s=$(date +%s.%N)
	"$@" >"$W/last.out" 2>"$W/err" || { tail -20 "$W/err" >&2; exit 1; }
	echo "$(date +%s.%N) - $s" | bc
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
kb() { "$KILN" build --json --secret "id=ca,src=$CA" --build-arg "BASE=$REF" -f "$W/ctx/$1/Dockerfile" "${@:2}" "$W/ctx/$1"; }
bb() { "${BR[@]}" bud --isolation chroot --secret "id=ca,src=$CA" --build-arg "BASE=$REF" -f "$W/ctx/$1/Dockerfile" "${@:2}" "$W/ctx/$1"; }

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| case | kiln | buildah | kiln/buildah |\n|---|---|---|---|\n'
tk=0 tb=0 ck=0 cb=0
for c in $CASES; do
	ks=() bs=()
	for i in $(seq "$RUNS"); do # alternated, so both see the same load
		ks+=("$(secs kb "$c" --no-cache)")
		cp "$W/last.out" "$W/events-$c.json"
		bs+=("$(secs bb "$c" --no-cache)")
	done
	k=$(printf '%s\n' "${ks[@]}" | median) b=$(printf '%s\n' "${bs[@]}" | median)
	printf '| %s uncached | %.1f s | %.1f s | %.2f |\n' "$c" "$k" "$b" "$(echo "$k / $b" | bc -l)"
	tk=$(echo "$tk + $k" | bc -l) tb=$(echo "$tb + $b" | bc -l)
	secs kb "$c" >/dev/null
	secs bb "$c" --layers >/dev/null
	ks=() bs=()
	for i in $(seq "$RUNS"); do
		ks+=("$(secs kb "$c")")
		bs+=("$(secs bb "$c" --layers)")
	done
	k=$(printf '%s\n' "${ks[@]}" | median) b=$(printf '%s\n' "${bs[@]}" | median)
	printf '| %s cached rebuild | %.2f s | %.2f s | %.2f |\n' "$c" "$k" "$b" "$(echo "$k / $b" | bc -l)"
	ck=$(echo "$ck + $k" | bc -l) cb=$(echo "$cb + $b" | bc -l)
done
printf '| **corpus uncached** | %.1f s | %.1f s | %.2f |\n' "$tk" "$tb" "$(echo "$tk / $tb" | bc -l)"
printf '| **corpus cached rebuild** | %.2f s | %.2f s | %.2f |\n' "$ck" "$cb" "$(echo "$ck / $tk" | bc -l)"
echo "(the last ratio: kiln's cached rebuild / kiln's uncached build)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
for c in $CASES; do
	python3 - "$c" "$W/events-$c.json" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
tot = {"vm start": 0.0, "layer upload": 0.0, "exec": 0.0, "capture + layer": 0.0, "other steps": 0.0}
runs = []
for line in open(path):
    e = json.loads(line)
    if e.get("event") != "step_done":
        continue
    r = e.get("run")
    if r:
        tot["vm start"] += r["boot_seconds"] + r["ext4_seconds"]
        tot["layer upload"] += r["sync_seconds"]
        tot["exec"] += r["exec_seconds"]
        tot["capture + layer"] += e["seconds"] - r["boot_seconds"] - r["ext4_seconds"] - r["sync_seconds"] - r["exec_seconds"]
        runs.append("%.1f" % e["seconds"])
    else:
        tot["other steps"] += e["seconds"]
print("%s: %s; RUN steps %s s" % (name, ", ".join("%s %.1f s" % kv for kv in tot.items()), " / ".join(runs)))
PY
done
