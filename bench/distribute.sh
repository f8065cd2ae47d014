#!/usr/bin/env bash
# distribute.sh — template distribution, in one run on this machine: three
# templates built from a busybox base carrying ~300 MB of real library files
# (v1; a = v1 with one file changed in the last step; b = v1 with a changed
# "package install" RUN that writes 4 MB), pushed to `kiln serve` on 127.0.0.1
# and pulled into fresh KILN_HOMEs.  Measures full push and pull time (median of
# RUNS) and the bytes moved by a and b after v1, both ways; compares with the same
# versions as plain OCI images copied by skopeo (push to the registry, pull into an
# OCI layout that holds v1).  Prints a markdown block for bench/RESULTS.md.
# Usage: bench/distribute.sh [RUNS]
set -euo pipefail
RUNS=${1:-3}
KILN=${KILN:-$PWD/bin/kiln}
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
W=$(mktemp -d /tmp/kiln-bench-distribute.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
export TMPDIR=$W/tmp SOURCE_DATE_EPOCH=1700000000
mkdir -p "$TMPDIR"
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null
cd "$W"
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mib() { awk -v b="$1" 'BEGIN {printf "%.2f", b / 1048576}'; }
size() { awk -v b="$1" 'BEGIN {if (b < 1048576) printf "%.1f KiB", b / 1024; else printf "%.2f MiB", b / 1048576}'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", 100 * a / b}'; }
done_of() { grep '"event":"done"' "$1" | jq -r ".$2"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# -- the base: busybox + the first ~300 MB of /usr/lib/x86_64-linux-gnu (sorted) --
umoci init --layout base >/dev/null
umoci new --image base:base >/dev/null
umoci unpack --image base:base bbb >/dev/null
R=bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/usr/lib/x86_64-linux-gnu"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
(cd /usr/lib/x86_64-linux-gnu && find . -maxdepth 1 -type f -name '*.so*' | LC_ALL=C sort |
	awk 'BEGIN {t = 0} {cmd = "stat -c %s \"" $0 "\""; cmd | getline s; close(cmd); if (t + s <= 300 * 1048576) {t += s; print}}' |
	xargs -d '\n' cp -t "$W/$R/usr/lib/x86_64-linux-gnu")
umoci repack --image base:base bbb >/dev/null
rm -rf bbb

# build NAME APP PKG: template + OCI layout for one version.
build() {
	local c=ctx-$1
	mkdir -p "$c"
	echo "app version $2" >"$c/app.txt"
	cat >"$c/Dockerfile" <<DF
FROM oci:$W/base:base
ARG PKG=1
RUN mkdir -p /opt/pkg && for i in 1 2 3 4 5 6 7 8; do head -c 524288 /dev/urandom >/opt/pkg/lib\$i.so; done && echo \$PKG >/opt/pkg/version
COPY app.txt /app/app.txt
DF
	"$KILN" build -t "$1" --build-arg "PKG=$3" --oci-out "$W/oci-$1" --start-cmd 'echo started >/tmp/started; sync' \
		--ready-cmd 'test -f /tmp/started' --memory 256 "$c" >/dev/null 2>"build-$1.log"
}
export KILN_HOME=$W/builder
build v1 1 1
build va 2 1
build vb 1 2

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_reg() {
	rm -rf "$W/reg"
	"$KILN" serve --addr "127.0.0.1:$port" --data "$W/reg" 2>"$W/serve.log" &
	PIDS+=($!)
	for _ in $(seq 1 200); do curl -sf -o /dev/null "http://127.0.0.1:$port/v2/" && return 0; sleep 0.05; done
	return 1
}
stop_reg() { local p=${PIDS[-1]}; kill "$p"; wait "$p" 2>/dev/null || true; unset 'PIDS[-1]'; }
REG=127.0.0.1:$port
blobs_bytes() { find "$1" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}'; }

# -- full push and pull, RUNS times (fresh registry, fresh host each run) -----------
for r in $(seq 1 "$RUNS"); do
	start_reg
	rm -rf "$W/host"
	t0=$(now); "$KILN" push --json v1 "$REG/t/app:v1" >push.json 2>/dev/null; t1=$(now)
	KILN_HOME=$W/host "$KILN" pull --json "$REG/t/app:v1" >pull.json 2>/dev/null; t2=$(now)
	echo "$t1 - $t0" | bc >>kiln-push.times; echo "$t2 - $t1" | bc >>kiln-pull.times
	t0=$(now); skopeo copy -q --dest-tls-verify=false "oci:$W/oci-v1:latest" "docker://$REG/i/app:v1"; t1=$(now)
	rm -rf sk; skopeo copy -q --src-tls-verify=false "docker://$REG/i/app:v1" "oci:$W/sk:v1"; t2=$(now)
	echo "$t1 - $t0" | bc >>sk-push.times; echo "$t2 - $t1" | bc >>sk-pull.times
	[ "$r" = "$RUNS" ] || stop_reg
done
full=$(done_of push.json bytes_total)
img_full=$(blobs_bytes sk/blobs)
L_FULL=$(load)

# -- versions a and b after v1 (registry and host hold v1) -----------------------------
for v in va vb; do
	"$KILN" push --json "$v" "$REG/t/app:$v" >"push-$v.json" 2>/dev/null
	KILN_HOME=$W/host "$KILN" pull --json "$REG/t/app:$v" >"pull-$v.json" 2>/dev/null
	KILN_HOME=$W/host "$KILN" run "t/app:$v" -- cat /app/app.txt /opt/pkg/version >"run-$v.txt" 2>/dev/null
	b0=$(blobs_bytes reg/blobs)
	skopeo copy -q --dest-tls-verify=false "oci:$W/oci-$v:latest" "docker://$REG/i/app:$v"
	echo $(( $(blobs_bytes reg/blobs) - b0 )) >"sk-push-$v.bytes"
	rm -rf sk2; cp -a sk sk2
	b0=$(blobs_bytes sk2/blobs)
	skopeo copy -q --src-tls-verify=false "docker://$REG/i/app:$v" "oci:$W/sk2:$v"
	echo $(( $(blobs_bytes sk2/blobs) - b0 )) >"sk-pull-$v.bytes"
done
L_VER=$(load)

cat <<EOF
Template: rootfs $(mib "$(jq -r .rootfs.size "$W/builder/snapshots/blobs/sha256/$(cut -d: -f2 "$W/builder/snapshots/refs/v1/latest")")") MiB ext4,
256 MiB guest RAM; as an artifact $(mib "$full") MiB (zstd chunks, zero chunks left out).
The same version as a plain OCI image (gzip layers): $(mib "$img_full") MiB.
Load during the full transfers: $L_FULL; during the versions: $L_VER.

| full transfer, median of $RUNS (s) | kiln template | skopeo, OCI image |
| --- | --- | --- |
| push | $(median <kiln-push.times) | $(median <sk-push.times) |
| pull | $(median <kiln-pull.times) | $(median <sk-pull.times) |

| new version after v1 | template push | template pull | push, % of template | pull, % of template | OCI image push (skopeo) | OCI image pull (skopeo) |
| --- | --- | --- | --- | --- | --- | --- |
EOF
for v in va vb; do
	case $v in va) what="(a) one file changed in the last step" ;; vb) what="(b) changed RUN writing 4 MB" ;; esac
	ps=$(done_of "push-$v.json" bytes_moved); pl=$(done_of "pull-$v.json" bytes_moved)
	echo "| $what | $(size "$ps") | $(size "$pl") | $(pct "$ps" "$full") % | $(pct "$pl" "$full") % |" \
		"$(size "$(cat "sk-push-$v.bytes")") | $(size "$(cat "sk-pull-$v.bytes")") |"
done
echo
echo "Pulled versions run on the second host: $(tr '\n' ' ' <run-va.txt)/ $(tr '\n' ' ' <run-vb.txt)"
