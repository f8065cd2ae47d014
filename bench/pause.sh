#!/usr/bin/env bash
# bench/pause.sh [ROUNDS] — pause and resume of a sandbox versus a template
# start, in one run.  A busybox template (256 MiB guest, the default) is
# snapshotted once; each round creates a sandbox by a full restore (no pool:
# `kiln sandbox create --json`, its timings_ms.total), starts a counter in it,
# dirties ~16 MiB of its RAM and writes a file, then `kiln sandbox pause` and
# `kiln sandbox resume` (the times they report: request to a sandbox whose
# agent answered, as create's), checks the counter still counts and kills it.
# Prints p50/max of each and the difference resume - create at p50.
set -u
cd "$(dirname "$0")/.."
rounds=${1:-10}
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-pause.XXXXXX")
export KILN_HOME=$work/home
cleanup() {
	for id in $(ls "$KILN_HOME/sandboxes" 2>/dev/null); do bin/kiln sandbox kill "$id" >/dev/null 2>&1; done
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/root/bin" "$work/root/etc" "$work/root/tmp" "$work/root/run" "$work/root/proc" "$work/root/sys" \
	"$work/root/dev"
cp /bin/busybox "$work/root/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$work/root/bin/$a"; done
bin/kiln rootfs --from-dir "$work/root" -o "$work/root.ext4" --free 32M >/dev/null || exit 1
bin/kiln snapshot -t pz "$work/root.ext4" >/dev/null 2>&1 || exit 1
: >"$work/c"; : >"$work/p"; : >"$work/r"
for n in $(seq "$rounds"); do
	j=$(bin/kiln sandbox create --json --timeout 0 pz) || exit 1
	id=$(echo "$j" | jq -r .id)
	echo "$j" | jq -r .timings_ms.total >>"$work/c"
	bin/kiln sandbox exec --detach "$id" -- sh -c 'i=0; while :; do i=$((i+1)); echo $i >/tmp/n.new; mv /tmp/n.new /tmp/n; sleep 0.1; done' >/dev/null
	bin/kiln sandbox exec "$id" -- sh -c 'head -c 16777216 /dev/urandom >/run/dirty; echo f >/etc/f; sync'
	bin/kiln sandbox pause "$id" 2>&1 | sed -n 's/.*paused in \([0-9]*\) ms.*/\1/p' >>"$work/p"
	bin/kiln sandbox resume "$id" 2>&1 | sed -n 's/.*resumed in \([0-9]*\) ms.*/\1/p' >>"$work/r"
	a=$(bin/kiln sandbox exec "$id" -- cat /tmp/n); sleep 0.5; b=$(bin/kiln sandbox exec "$id" -- cat /tmp/n)
	[ "$b" -gt "$a" ] 2>/dev/null || echo "round $n: the counter stopped ($a, $b)" >&2
	bin/kiln sandbox kill "$id"
done
stat() { sort -n "$1" | awk '{v[NR]=$1} END {printf "p50 %.0f ms, max %.0f ms (n=%d)", v[int((NR+1)/2)], v[NR], NR}'; }
p50() { sort -n "$1" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "create (full restore): $(stat "$work/c")"
echo "pause:                 $(stat "$work/p")"
echo "resume:                $(stat "$work/r")"
echo "resume - create at p50: $(awk -v r="$(p50 "$work/r")" -v c="$(p50 "$work/c")" 'BEGIN{printf "%+.0f ms", r-c}')"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
