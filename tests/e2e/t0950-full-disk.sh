#!/usr/bin/env bash
# t0950-full-disk.sh — a full disk, where kiln writes (docs/reliability.md): the
# registry's data and a host's KILN_HOME each on a small tmpfs of the test's own,
# filled while kiln writes.  Each write fails saying the disk is full (and where,
# on the host), nothing half-written is visible, temporary files are freed, the
# server keeps serving reads, and everything works again once space is freed.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh
. tests/e2e/vmlib.sh

MNT="$T_TMP/mnt"
trap 'reg_stop KILL; umount -l "$MNT" 2>/dev/null; rm -rf "$T_TMP"' EXIT
if [ "$(id -u)" != 0 ]; then
	skip "full disk" "needs root to mount a tmpfs"
	exit 0
fi
vm_setup
mkdir -p "$MNT" && mount -t tmpfs -o size=48m,mode=0755 tmpfs "$MNT" || { not_ok "tmpfs mounts"; exit 1; }
cd "$T_TMP"

# fill: take every free byte of the tmpfs (dd stops at ENOSPC); unfill gives it back.
fill() { dd if=/dev/zero of="$MNT/filler" bs=64k status=none 2>/dev/null; sync; }
unfill() { rm -f "$MNT/filler"; }
# tmp_files: files left in a temporary directory of KILN_HOME, or half-fetched (.part)
tmp_files() { find "$KILN_HOME" -type f | sed "s|^$KILN_HOME/||" | grep -c '\(^\|/\)tmp/\|\.part$'; }
# files DIR: the regular files under DIR with their sizes, sorted (what is stored)
files() { find "$1" -type f ! -name 'meta.db*' -printf '%P %s\n' 2>/dev/null | sort; }

# ---- the registry: data on the small disk
D="$MNT/data"
reg_start "$D" || { not_ok "kiln serve starts"; exit 1; }
umoci init --layout img >/dev/null && umoci new --image img:v1 >/dev/null
head -c 200000 /dev/urandom >f.bin && umoci insert --image img:v1 f.bin /f >/dev/null
S="skopeo --command-timeout 60s"
expect_exit 0 "push before the disk fills" $S copy --dest-tls-verify=false oci:img:v1 "docker://$REG/team/app:v1"
want=$(skopeo inspect --raw oci:img:v1 | sha256sum | cut -d' ' -f1)
fill
before=$(files "$D")

head -c 1000000 /dev/urandom >blob.bin
BD=sha256:$(sha256sum blob.bin | cut -d' ' -f1)
req POST "/v2/team/app/blobs/uploads/?digest=$BD" --data-binary @blob.bin -H 'Content-Type: application/octet-stream'
expect_code "monolithic upload on a full disk: 507" 507
expect_grep "its message says the storage is full" 'storage is full' "$T_TMP/body"
req POST "/v2/team/app/blobs/uploads/"
if [ "$CODE" = 202 ]; then
	loc=$(hdr Location)
	CODE=$(curl -s -o "$T_TMP/body" -w '%{http_code}' -X PATCH --data-binary @blob.bin \
		-H 'Content-Type: application/octet-stream' "$U$loc")
	expect_code "chunked upload (PATCH) on a full disk: 507" 507
else
	expect_code "chunked upload's start on a full disk: 507" 507
fi
printf '%s %s\n' "$BD" "$(stat -c %s blob.bin)" >batch && cat blob.bin >>batch
req POST /v2/team/app/blobs/_batch --data-binary @batch
expect_code "batch upload on a full disk: 507" 507
head_req "/v2/team/app/blobs/$BD"
expect_code "no half-written blob is visible" 404
# a manifest (and its tag) write: its blobs are stored, only the metadata write needs space
req GET /v2/team/app/manifests/v1 -H 'Accept: application/vnd.oci.image.manifest.v1+json'
cp "$T_TMP/body" man.json
mt=$(hdr Content-Type)
# take the last pages sqlite could still have used
dd if=/dev/zero of="$MNT/filler2" bs=4k status=none 2>/dev/null
req PUT /v2/team/app/manifests/v2 --data-binary @man.json -H "Content-Type: $mt"
expect_code "manifest + tag write on a full disk: 507" 507
req GET /v2/team/app/manifests/v2 -H "Accept: $mt"
expect_code "the tag that failed is not visible" 404
expect_eq "no temporary file left by the failed writes" "$(files "$D")" "$before"
# reads go on
rm -rf pulled
expect_exit 0 "pull while the disk is full" $S copy --src-tls-verify=false "docker://$REG/team/app:v1" oci:pulled:v1
expect_eq "the image pulled while full is intact" "$(skopeo inspect --raw oci:pulled:v1 | sha256sum | cut -d' ' -f1)" "$want"
req GET /v2/_catalog
expect_code "catalog while the disk is full" 200
# kiln's own client says what the server said
reg_demo_image ""
"$KILN" push demo:1 "$REG/team/demo:1" >/dev/null 2>"$T_TMP/err"
expect_grep "kiln push names the full storage" 'storage is full' "$T_TMP/err"
kill -0 "$REG_PID" 2>/dev/null && ok "the server is up after the failed writes" || not_ok "the server is up after the failed writes"
unfill
rm -f "$MNT/filler2"
req POST "/v2/team/app/blobs/uploads/?digest=$BD" --data-binary @blob.bin -H 'Content-Type: application/octet-stream'
expect_code "upload once space is freed" 201
req PUT /v2/team/app/manifests/v2 --data-binary @man.json -H "Content-Type: $mt"
expect_code "manifest + tag once space is freed" 201
expect_exit 0 "kiln push once space is freed" "$KILN" push demo:1 "$REG/team/demo:1"
mapfile -t blobs < <(find "$D/blobs" -type f)
expect_eq "every stored blob matches its digest (${#blobs[@]})" "$(misnamed_blobs "${blobs[@]}")" 0
reg_stop

# ---- a host: KILN_HOME on the small disk; templates from a registry on another disk
unfill
mount -o remount,size=200m "$MNT"
export SOURCE_DATE_EPOCH=1700000000 KILN_HOME=$T_TMP/builder
B=$T_TMP/bb
{ umoci init --layout "$B" && umoci new --image "$B:base" && umoci unpack --image "$B:base" "$T_TMP/bbb"; } >/dev/null 2>&1
R=$T_TMP/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
mkdir -p tctx && printf 'FROM oci:%s:base\nRUN echo hi >/hi\n' "$B" >tctx/Dockerfile
expect_exit 0 "a template builds (on a disk with room)" "$KILN" build -t t:1 --template --start-cmd true \
	--ready-cmd true --memory 128 tctx
reg_start "$T_TMP/reg2" || { not_ok "a second kiln serve starts"; exit 1; }
expect_exit 0 "push the template" "$KILN" push t:1 "$REG/x/t:1"

export KILN_HOME=$MNT/home
mkdir -p "$KILN_HOME"
fill
"$KILN" pull "$REG/x/t:1" >/dev/null 2>"$T_TMP/err"
expect_grep "a pull into a full chunk store says the disk is full, and where" "$MNT/home/.*No space left on device" "$T_TMP/err"
"$KILN" snapshot ls >"$T_TMP/ls"
expect_eq "the template that failed to pull is not listed" "$(grep -c x/t "$T_TMP/ls")" 0
expect_eq "the pull left no temporary file" "$(tmp_files)" 0
"$KILN" snapshot -t s:1 --start true --ready true "$T_TMP/root.ext4" >/dev/null 2>"$T_TMP/err"
expect_grep "a snapshot on a full disk says the disk is full, and where" "$MNT/home/.*No space left on device" "$T_TMP/err"
"$KILN" snapshot ls >"$T_TMP/ls"
expect_eq "the snapshot that failed is not listed" "$(grep -c '^s:1' "$T_TMP/ls")" 0
expect_eq "the snapshot left no temporary file" "$(tmp_files)" 0
mkdir -p bctx && head -c 3000000 /dev/urandom >bctx/big && printf 'FROM scratch\nCOPY big /big\n' >bctx/Dockerfile
"$KILN" build -t big:1 bctx >/dev/null 2>"$T_TMP/err"
expect_grep "a build's layer write on a full disk says so, and where" "$MNT/home/.*No space left on device" "$T_TMP/err"
"$KILN" images >"$T_TMP/ls"
expect_eq "the image that failed is not listed" "$(grep -c '^big:1' "$T_TMP/ls")" 0
"$KILN" rootfs --from-dir bctx -o "$MNT/r.ext4" --free 1M >/dev/null 2>"$T_TMP/err"
expect_grep "kiln rootfs on a full disk says so, and where" "$MNT/r.ext4.*No space left on device" "$T_TMP/err"
expect_eq "kiln rootfs leaves no output behind" "$(ls "$MNT" | grep -c r.ext4)" 0
expect_eq "the build left no temporary file" "$(tmp_files)" 0
unfill
expect_exit 0 "the build works once space is freed" "$KILN" build -t big:1 bctx
expect_exit 0 "the pull works once space is freed" "$KILN" pull "$REG/x/t:1"
"$KILN" run "$REG/x/t:1" -- cat /hi >"$T_TMP/out" 2>"$T_TMP/err"
expect_eq "and a sandbox starts from it" "$(cat "$T_TMP/out")" hi
id=$("$KILN" sandbox create "$REG/x/t:1" 2>"$T_TMP/err")
"$KILN" sandbox exec "$id" -- sh -c 'echo kept >/tmp/s' >/dev/null 2>&1
fill
"$KILN" sandbox pause "$id" >/dev/null 2>"$T_TMP/err"
expect_grep "a pause on a full disk says the disk is full, and where" "$MNT/home/.*No space left on device" "$T_TMP/err"
"$KILN" sandbox exec "$id" -- cat /tmp/s >"$T_TMP/out" 2>"$T_TMP/err"
expect_eq "the sandbox runs on after the failed pause" "$(cat "$T_TMP/out")" kept
unfill
expect_exit 0 "the pause works once space is freed" "$KILN" sandbox pause "$id"
expect_exit 0 "and the resume" "$KILN" sandbox resume "$id"
"$KILN" sandbox exec "$id" -- cat /tmp/s >"$T_TMP/out" 2>"$T_TMP/err"
expect_eq "the resumed sandbox kept its state" "$(cat "$T_TMP/out")" kept
expect_exit 0 "snapshot once space is freed" "$KILN" snapshot -t s:1 --start true --ready true "$T_TMP/root.ext4"
"$KILN" sandbox kill "$id" >/dev/null 2>&1

# ---- the file server fetching chunks onto a full disk: a lazily pulled
# sandbox reads a file none of whose chunks are local (no prefetch), the store
# is full, and the read still gets the right bytes
export KILN_HOME=$T_TMP/builder
head -c 12000000 /dev/urandom >tctx/big && head -c 1500000 /dev/urandom >tctx/big2
printf 'FROM oci:%s:base\nCOPY big big2 /\n' "$B" >tctx/Dockerfile.big
expect_exit 0 "a template with files beyond its working set builds" "$KILN" build -t big:t -f tctx/Dockerfile.big \
	--template --start-cmd true --ready-cmd true --memory 128 tctx
expect_exit 0 "and is pushed" "$KILN" push big:t "$REG/x/big:1"
export KILN_HOME=$MNT/lazy KILN_CHUNKFS_PREFETCH=0
mkdir -p "$KILN_HOME"
expect_exit 0 "a lazy pull onto the small disk" "$KILN" pull --lazy "$REG/x/big:1"
id=$("$KILN" sandbox create "$REG/x/big:1" 2>"$T_TMP/err")
[ -n "$id" ] && ok "a sandbox of the lazy template starts" || { not_ok "a sandbox of the lazy template starts"; sed 's/^/#   /' "$T_TMP/err"; }
chunks() { find "$KILN_HOME" -path '*chunks*' -type f ! -name '*.part' ! -name lock | wc -l; }
n0=$(chunks)
fill
"$KILN" sandbox exec "$id" -- sha256sum /big >"$T_TMP/out" 2>"$T_TMP/err"
expect_eq "a read whose chunks the full disk cannot store gets the right bytes" \
	"$(cut -c1-64 "$T_TMP/out")" "$(sha256sum <tctx/big | cut -c1-64)"
expect_eq "nothing half-written in the chunk store" "$(tmp_files)" 0
expect_eq "no chunk was stored" "$(chunks)" "$n0"
unfill
"$KILN" sandbox exec "$id" -- sha256sum /big2 >"$T_TMP/out" 2>"$T_TMP/err"
expect_eq "once space is freed, a read gets the right bytes" "$(cut -c1-64 "$T_TMP/out")" "$(sha256sum <tctx/big2 | cut -c1-64)"
[ "$(chunks)" -gt "$n0" ] && ok "and its chunks are stored" || not_ok "and its chunks are stored ($(chunks), $n0 before)"
expect_grep "the file server's log says the store was full, and where" \
	"chunks are stored again; [1-9][0-9]* chunks were served from memory .*$MNT/lazy/.*No space left on device" \
	"$KILN_HOME/chunkfs/log"
"$KILN" sandbox kill "$id" >/dev/null 2>&1
"$KILN" chunkfs stop >/dev/null 2>&1
unset KILN_CHUNKFS_PREFETCH
reg_stop
