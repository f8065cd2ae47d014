#!/usr/bin/env bash
# t0870-lazy-template.sh — templates served from the chunk store (the host's
# chunkfs file server, docs/distribution.md "Lazy templates"), with one
# `kiln serve` on 127.0.0.1: `kiln run REF` on an empty host starts after
# fetching a fraction of the template and answers like the builder; versions
# 1 and 2 cost the union of their chunks on disk; with the registry stopped,
# or a chunk corrupted on the server, a read of data not yet local gets an I/O
# error in that sandbox with a clear log line while the sandbox and others
# live on and the chunk store holds only verified chunks; gc stops the server.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
. tests/e2e/registry-lib.sh
vm_setup
if [ ! -c /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
	skip "lazy templates" "no /dev/fuse or fuse3 here"
	exit 0
fi

H2=$T_TMP/host2
H3=$T_TMP/host3
stop_hosts() {
	for h in "$H2" "$H3"; do
		[ -d "$h" ] || continue
		for id in $(KILN_HOME=$h "$KILN" sandbox ls --json 2>/dev/null | jq -r '.[].id' 2>/dev/null); do
			KILN_HOME=$h "$KILN" sandbox kill "$id" >/dev/null 2>&1
		done
		KILN_HOME=$h "$KILN" sandbox gc >/dev/null 2>&1
		KILN_HOME=$h "$KILN" chunkfs stop >/dev/null 2>&1
	done
	reg_stop
}
trap 'stop_hosts; rm -rf "$T_TMP"' EXIT

export SOURCE_DATE_EPOCH=1700000000
B=$T_TMP/bb
umoci init --layout "$B" >/dev/null 2>&1
umoci new --image "$B:base" >/dev/null 2>&1
umoci unpack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
R=$T_TMP/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/lib" "$R/data"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
head -c 3000000 /dev/urandom >"$R/data/big.bin" # incompressible, never read by a start
head -c 3000000 /dev/urandom >"$R/data/other.bin"
head -c 24000000 /dev/urandom >"$R/data/mem.src" # v1's start copies it into guest RAM
md5_big=$(md5sum <"$R/data/big.bin" | cut -d' ' -f1)
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1

build_version() {
	local c=$T_TMP/ctx$1
	mkdir -p "$c"
	echo "app version $1" >"$c/app.txt"
	printf 'FROM oci:%s:base\nCOPY app.txt /app/app.txt\n' "$B" >"$c/Dockerfile"
	# v1's start keeps 24 MB of random data in guest RAM (tmpfs; copied, as
	# /dev/urandom under TCG took a minute): memory pages that the trial exec
	# does not touch, so mostly outside the working set (the kernel's
	# read-around of a fault takes up to 8 MiB along: 4 MB were all in it),
	# for the memory-fault checks
	local keep=
	[ "$1" = 1 ] && keep='cp /data/mem.src /dev/shm/mem.bin; '
	expect_exit 0 "build template app:v$1" "$KILN" build -t "app:v$1" \
		--start-cmd "${keep}echo started >/tmp/started; sync" \
		--ready-cmd 'test -f /tmp/started' --memory 128 "$c"
}
build_version 1
build_version 2
b1=$(cat "$KILN_HOME/snapshots/refs/app/v1")
ws=$KILN_HOME/snapshots/worksets/${b1#sha256:}.json
if [ -f "$ws" ] && [ "$(jq '.memory | length' "$ws")" -gt 0 ]; then
	ok "the build recorded the working set of a trial restore ($(jq -c '[.memory, .rootfs, .disk] | map(map(.[1]) | add // 0)' "$ws") bytes of memory, rootfs, disk)"
else not_ok "the build recorded the working set of a trial restore"; fi
reg_start "$T_TMP/reg" || exit 0
expect_exit 0 "push v1" "$KILN" push app:v1 "$REG/team/app:v1"
expect_exit 0 "push v2" "$KILN" push --json app:v2 "$REG/team/app:v2"
v2_sent=$(grep '"event":"done"' "$T_TMP/out" | jq -r .bytes_moved)

ix=$(curl -s -H 'Accept: application/vnd.oci.image.manifest.v1+json' "$U/v2/team/app/manifests/v1" | jq -r '.layers[0].digest')
nfirst=$(curl -s "$U/v2/team/app/blobs/$ix" | jq '[.parts[] | select(.role == "memory") | .first | length] | add')
if [ "${nfirst:-0}" -gt 0 ]; then ok "the pushed index lists the memory chunks to fetch first ($nfirst)"
else not_ok "the pushed index lists the memory chunks to fetch first (${nfirst:-none})"; fi

# 1. kiln run on an empty host: lazy by default, answers like the builder.
export KILN_CHUNKFS_PREFETCH=0 # H2's server fetches on first touch only (the fault checks need that)
got=$(KILN_HOME=$H2 "$KILN" run "$REG/team/app:v1" -- cat /app/app.txt /tmp/started 2>"$T_TMP/err")
expect_eq "kiln run on an empty host starts the template lazily" "$got" "app version 1
started"
cat "$T_TMP/err" | sed 's/^/#   /'
cfg=$(cat "$H2/snapshots/refs/$REG/team/app/v1")
hex=${cfg#sha256:}
if [ -f "$H2/chunkfs/templates/$hex.json" ] && [ ! -e "$H2/snapshots/blobs/sha256/$(jq -r .memory.digest "$H2/snapshots/blobs/sha256/$hex" | cut -d: -f2)" ]; then
	ok "...its memory and rootfs are not assembled, the chunk server has it"
else not_ok "...its memory and rootfs are not assembled, the chunk server has it"; fi
local_b=$(du -sb "$H2/chunks/sha256" | cut -f1)
total_b=$(du -sb "$T_TMP/reg/blobs" | cut -f1)
echo "# lazily fetched before the answer: $local_b of $total_b bytes the registry holds"
if [ "$local_b" -lt $((total_b / 2)) ]; then ok "...having fetched less than half the template ($local_b of $total_b bytes)"
else not_ok "...having fetched less than half the template ($local_b of $total_b bytes)"; fi
expect_eq "kiln chunkfs status: running" "$(KILN_HOME=$H2 "$KILN" chunkfs status)" running

# wait_local HOME HEX: the server's prefetch has every chunk of template HEX (≤ 60 s).
wait_local() {
	for _ in $(seq 1 600); do
		grep -q "template ${2:0:12}: every chunk is local" "$1/chunkfs/log" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# 2. Versions cost the union of their chunks: v1 then v2 on H3, prefetched whole.
unset KILN_CHUNKFS_PREFETCH
expect_exit 0 "kiln pull --lazy v1 on a third host" env KILN_HOME="$H3" "$KILN" pull --lazy "$REG/team/app:v1"
h1=$(cat "$H3/snapshots/refs/$REG/team/app/v1"); h1=${h1#sha256:}
if wait_local "$H3" "$h1"; then ok "...the background prefetch fetches the rest"; else not_ok "...the background prefetch fetches the rest"; fi
du1=$(du -sk "$H3/chunks" "$H3/snapshots" | awk '{s+=$1} END {print s}')
ap1=$(du -sb "$H3/chunks" "$H3/snapshots" | awk '{s+=$1} END {print s}')
expect_exit 0 "kiln pull --lazy v2 there" env KILN_HOME="$H3" "$KILN" pull --lazy "$REG/team/app:v2"
h2=$(cat "$H3/snapshots/refs/$REG/team/app/v2"); h2=${h2#sha256:}
wait_local "$H3" "$h2"
du2=$(du -sk "$H3/chunks" "$H3/snapshots" | awk '{s+=$1} END {print s}')
ap2=$(du -sb "$H3/chunks" "$H3/snapshots" | awk '{s+=$1} END {print s}')
# v2 adds what its push sent (its new chunks: mostly memory pages another boot
# placed elsewhere, a larger share of a small template than of a big one)
# and nothing else: no assembled copy of either version.
echo "# disk used by v1: $du1 KiB; by v1 + v2: $du2 KiB; v2's push sent $((v2_sent / 1024)) KiB"
# (apparent bytes: du's 4 KiB blocks round each small chunk file up)
if [ $((ap2 - ap1)) -le $((v2_sent * 11 / 10 + 262144)) ]; then
	ok "v2 costs the bytes of its new chunks only ($(((ap2 - ap1) / 1024)) KiB for $((v2_sent / 1024)) KiB sent)"
else not_ok "v2 costs the bytes of its new chunks only ($(((ap2 - ap1) / 1024)) KiB for $((v2_sent / 1024)) KiB sent)"; fi
got=$(KILN_HOME=$H3 "$KILN" run "$REG/team/app:v2" -- cat /app/app.txt)
expect_eq "...and v2 runs from it" "$got" "app version 2"
# the served files are the builder's, byte for byte
mem=$(jq -r .memory.digest "$H3/snapshots/blobs/sha256/$h2")
expect_eq "the served memory file hashes to the config's digest" \
	"sha256:$(sha256sum "$H3/chunkfs/mnt/$h2/memory" | cut -d' ' -f1)" "$mem"
KILN_HOME=$H3 "$KILN" sandbox gc >/dev/null
expect_eq "kiln sandbox gc stops the file server once no sandbox runs" "$(KILN_HOME=$H3 "$KILN" chunkfs status)" stopped
if grep -q " $H3/chunkfs/mnt " /proc/mounts; then not_ok "...and its mount is gone"; else ok "...and its mount is gone"; fi

# 3. Faults, on H2 (whose server fetches on first touch only).
export KILN_CHUNKFS_PREFETCH=0
# A memory page that cannot be fetched: QEMU maps the memory file, so the
# failed read is a SIGBUS in QEMU: that sandbox stops, the others go on.  The
# other one, D, is of v2 with all its memory local (a sandbox of a template
# not all local may touch such a page itself: a guest allocates pages that
# held data at the snapshot); C of v1 reads the 24 MB its start left in RAM.
KILN_HOME=$H2 "$KILN" pull --lazy "$REG/team/app:v2" >/dev/null 2>&1
h2v2=$(cat "$H2/snapshots/refs/$REG/team/app/v2"); h2v2=${h2v2#sha256:}
D=$(KILN_HOME=$H2 "$KILN" sandbox create "$REG/team/app:v2" 2>/dev/null)
cat "$H2/chunkfs/mnt/$h2v2/memory" >/dev/null
expect_eq "a sandbox of v2 runs beside (its memory all local)" "$(KILN_HOME=$H2 "$KILN" sandbox exec "$D" -- cat /app/app.txt)" "app version 2"
C=$(KILN_HOME=$H2 "$KILN" sandbox create "$REG/team/app:v1" 2>/dev/null)
reg_port=$REG_PORT
reg_stop
KILN_HOME=$H2 "$KILN" sandbox exec "$C" -- md5sum /dev/shm/mem.bin >"$T_TMP/o" 2>&1
rc=$?
sed 's/^/#   /' "$T_TMP/o"
if [ $rc -ne 0 ] && grep -q "sandbox $C stopped: its QEMU is gone" "$T_TMP/o"; then
	ok "registry stopped: a sandbox touching memory not yet local stops, and its exec says so"
elif [ $rc -ne 0 ]; then not_ok "registry stopped: a sandbox touching memory not yet local stops, and its exec says so"
else not_ok "registry stopped: a sandbox touching memory not yet local stops (it answered: the guest touched only local memory)"; fi
expect_grep "...the server logs which memory chunk and why" \
	"template ${hex:0:12}: the memory at offset [0-9]* \\(chunk [0-9]*\\) cannot be read: fetching chunk sha256:[0-9a-f]* from 127.0.0.1:$reg_port/team/app: .*SIGBUS" "$H2/chunkfs/log"
grep "cannot be read" "$H2/chunkfs/log" | head -2 | sed 's/^/#   /'
for _ in $(seq 1 50); do
	[ "$(KILN_HOME=$H2 "$KILN" sandbox ls --json | jq -r --arg id "$C" '.[] | select(.id == $id) | .state')" = dead ] && break
	sleep 0.1
done
expect_eq "...its QEMU is gone: kiln sandbox ls says dead" \
	"$(KILN_HOME=$H2 "$KILN" sandbox ls --json | jq -r --arg id "$C" '.[] | select(.id == $id) | .state')" dead
expect_eq "...the other sandbox goes on" \
	"$(KILN_HOME=$H2 "$KILN" sandbox exec "$D" -- echo alive) $(KILN_HOME=$H2 "$KILN" sandbox exec "$D" -- cat /app/app.txt)" "alive app version 2"
KILN_HOME=$H2 "$KILN" sandbox gc >/dev/null
expect_eq "...kiln sandbox gc removes the dead one only" "$(KILN_HOME=$H2 "$KILN" sandbox ls --json | jq -r '.[].id' | tr '\n' ' ')" "$D "
expect_eq "...and the server keeps serving them" "$(KILN_HOME=$H2 "$KILN" chunkfs status)" running
bad=$(misnamed_blobs $(find "$H2/chunks/sha256" -type f ! -name '*.part'))
expect_eq "...the chunk store holds only chunks that hash to their names" "$bad" 0
"$KILN" serve --addr "127.0.0.1:$reg_port" --data "$T_TMP/reg" 2>"$T_TMP/serve1.log" &
REG_PID=$!
for _ in $(seq 1 100); do grep -q listening "$T_TMP/serve1.log" 2>/dev/null && break; sleep 0.05; done
expect_eq "the registry back: a new sandbox reads that memory" \
	"$(KILN_HOME=$H2 "$KILN" sandbox create "$REG/team/app:v1" 2>/dev/null | xargs -I{} env KILN_HOME="$H2" "$KILN" sandbox exec {} -- sh -c 'md5sum </dev/shm/mem.bin | wc -c')" 36

A=$(KILN_HOME=$H2 "$KILN" sandbox create "$REG/team/app:v1" 2>/dev/null)
Bs=$(KILN_HOME=$H2 "$KILN" sandbox create "$REG/team/app:v1" 2>/dev/null)
expect_eq "two sandboxes of the lazy template run" "$(KILN_HOME=$H2 "$KILN" sandbox exec "$A" -- cat /app/app.txt)" "app version 1"
# every memory chunk local (so the guest's own RAM cannot fault): only rootfs chunks are missing
cat "$H2/chunkfs/mnt/$hex/memory" >/dev/null
reg_stop
KILN_HOME=$H2 "$KILN" sandbox exec "$A" -- md5sum /data/big.bin >"$T_TMP/o" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "Input/output error" "$T_TMP/o"; then ok "registry stopped: a read of data not yet local gets an I/O error in the sandbox"
else not_ok "registry stopped: a read of data not yet local gets an I/O error in the sandbox (rc $rc: $(head -c 300 "$T_TMP/o"))"; fi
expect_grep "...and the server logs which chunk and why" "template ${hex:0:12}: the rootfs at offset .* cannot be read: fetching chunk" "$H2/chunkfs/log"
expect_eq "...the sandbox lives on" "$(KILN_HOME=$H2 "$KILN" sandbox exec "$A" -- echo alive)" alive
expect_eq "...and so does the other one" "$(KILN_HOME=$H2 "$KILN" sandbox exec "$Bs" -- cat /app/app.txt)" "app version 1"

# the registry back on its port, with every chunk this host lacks corrupted on its disk
"$KILN" serve --addr "127.0.0.1:$reg_port" --data "$T_TMP/reg" 2>"$T_TMP/serve2.log" &
REG_PID=$!
for _ in $(seq 1 100); do grep -q listening "$T_TMP/serve2.log" 2>/dev/null && break; sleep 0.05; done
n=0
for f in $(find "$T_TMP/reg/blobs/sha256" -type f); do
	d=$(basename "$f")
	[ -e "$H2/chunks/sha256/${d:0:2}/$d" ] && continue
	sz=$(stat -c %s "$f")
	[ "$sz" -gt 200000 ] || continue # config, index, small chunks: keep
	chmod u+w "$f"; head -c "$sz" /dev/urandom >"$f"; n=$((n + 1))
done
echo "# corrupted $n chunk blobs on the registry's disk"
KILN_HOME=$H2 "$KILN" sandbox exec "$A" -- md5sum /data/big.bin >"$T_TMP/o" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "Input/output error" "$T_TMP/o"; then ok "a corrupted chunk: the read gets an I/O error"
else not_ok "a corrupted chunk: the read gets an I/O error (rc $rc: $(head -c 300 "$T_TMP/o"))"; fi
bad=$(misnamed_blobs $(find "$H2/chunks/sha256" -type f ! -name '*.part'))
expect_eq "...and the chunk store holds only chunks that hash to their names" "$bad" 0
expect_eq "...the sandbox lives on" "$(KILN_HOME=$H2 "$KILN" sandbox exec "$A" -- echo alive)" alive
reg_stop
KILN_HOME=$H2 "$KILN" sandbox kill $(KILN_HOME=$H2 "$KILN" sandbox ls --json | jq -r '.[].id') >/dev/null
KILN_HOME=$H2 "$KILN" sandbox gc >/dev/null
expect_eq "gc on H2 stops its server" "$(KILN_HOME=$H2 "$KILN" chunkfs status)" stopped
