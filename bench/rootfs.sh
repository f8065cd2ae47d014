#!/usr/bin/env bash
# bench/rootfs.sh — kiln rootfs (straight from the gzip layer) versus the usual
# path, `tar -x` of the layer then `mke2fs -t ext4 -d`, on the same one-layer
# OCI image made from a real tree (default: parts of the host's /usr, ~1.9 GB).
# Medians of RUNS runs each, in the same invocation; also MB/s, entries/s and
# peak memory.  Usage: bench/rootfs.sh  (env: RUNS=3 BENCH_DIR=... PARTS="...")
set -euo pipefail
KILN=${KILN:-$PWD/bin/kiln}
RUNS=${RUNS:-3}
W=${BENCH_DIR:-/var/tmp/kiln-bench-rootfs}
PARTS=${PARTS:-"usr/share usr/include usr/lib/python3 usr/lib/python3.11 usr/bin usr/sbin usr/lib/gcc usr/libexec"}
mkdir -p "$W"

# --- the image (built once, reused while PARTS is unchanged) ------------------
if [ ! -f "$W/oci/index.json" ] || [ "$(cat "$W/parts" 2>/dev/null)" != "$PARTS" ]; then
	rm -rf "$W/oci" "$W/layer.tar.gz"
	echo "building the image from /$PARTS ..." >&2
	# shellcheck disable=SC2086
	tar -C / --xattrs -cf - $PARTS | tee >(sha256sum | cut -d' ' -f1 >"$W/diffid") |
		gzip -1 >"$W/layer.tar.gz"
	sleep 1
	python3 - "$W" <<'EOF'
import hashlib, json, os, sys
w = sys.argv[1]
def put(data):
    d = hashlib.sha256(data).hexdigest()
    open(os.path.join(w, "oci/blobs/sha256", d), "wb").write(data)
    return "sha256:" + d, len(data)
os.makedirs(os.path.join(w, "oci/blobs/sha256"))
h = hashlib.sha256()
with open(os.path.join(w, "layer.tar.gz"), "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
ld = h.hexdigest()
os.link(os.path.join(w, "layer.tar.gz"), os.path.join(w, "oci/blobs/sha256", ld))
diffid = open(os.path.join(w, "diffid")).read().strip()
cfg = {"architecture": "amd64", "os": "linux", "created": "2024-01-01T00:00:00Z", "config": {},
       "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diffid]}}
cd, cs = put(json.dumps(cfg).encode())
man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
       "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
       "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "sha256:" + ld,
                   "size": os.path.getsize(os.path.join(w, "layer.tar.gz"))}]}
md, ms = put(json.dumps(man).encode())
json.dump({"imageLayoutVersion": "1.0.0"}, open(os.path.join(w, "oci/oci-layout"), "w"))
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
           "digest": md, "size": ms, "annotations": {"org.opencontainers.image.ref.name": "bench"}}]},
          open(os.path.join(w, "oci/index.json"), "w"))
EOF
	echo "$PARTS" >"$W/parts"
fi

# wall seconds, peak RSS (KiB) and CPU seconds (user + sys) of a command
timed() {
	/usr/bin/time -f '%e %M %U %S' -o "$W/time" "$@" >/dev/null 2>"$W/stderr" || { cat "$W/stderr" >&2; exit 1; }
	awk '{printf "%s %s %.2f\n", $1, $2, $3 + $4}' "$W/time"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

ENTRIES=$(tar -tzf "$W/layer.tar.gz" | wc -l)
BYTES=$(gzip -dc "$W/layer.tar.gz" | wc -c)
: >"$W/k.t"; : >"$W/x.t"; : >"$W/m.t"; : >"$W/k.m"; : >"$W/m.m"; : >"$W/k.c"; : >"$W/x.c"; : >"$W/m.c"
for i in $(seq 1 "$RUNS"); do
	rm -f "$W/k.ext4" "$W/p.ext4"; rm -rf "$W/x"
	read -r s m c < <(timed "$KILN" rootfs "oci:$W/oci:bench" -o "$W/k.ext4")
	echo "$s" >>"$W/k.t"; echo "$m" >>"$W/k.m"; echo "$c" >>"$W/k.c"
	SIZE=$(stat -c %s "$W/k.ext4")
	mkdir "$W/x"
	read -r s m c < <(timed tar --xattrs --xattrs-include='*' -xzpf "$W/layer.tar.gz" -C "$W/x")
	echo "$s" >>"$W/x.t"; echo "$c" >>"$W/x.c"
	read -r s m c < <(timed mke2fs -q -F -t ext4 -b 4096 -d "$W/x" "$W/p.ext4" "$((SIZE / 1024))k")
	echo "$s" >>"$W/m.t"; echo "$m" >>"$W/m.m"; echo "$c" >>"$W/m.c"
	echo "run $i: kiln $(tail -1 "$W/k.t")s, tar -x $(tail -1 "$W/x.t")s + mke2fs -d $(tail -1 "$W/m.t")s" >&2
done
e2fsck -fn "$W/k.ext4" >/dev/null 2>&1 && fsck=pass || fsck=FAIL
K=$(median <"$W/k.t"); X=$(median <"$W/x.t"); M=$(median <"$W/m.t")
KM=$(median <"$W/k.m"); MM=$(median <"$W/m.m")
KC=$(median <"$W/k.c"); XC=$(median <"$W/x.c"); MC=$(median <"$W/m.c")
awk -v k="$K" -v x="$X" -v m="$M" -v b="$BYTES" -v e="$ENTRIES" -v km="$KM" -v mm="$MM" \
	-v kc="$KC" -v xc="$XC" -v mc="$MC" -v runs="$RUNS" -v fsck="$fsck" -v size="$(stat -c %s "$W/k.ext4")" 'BEGIN {
	printf "image: one gzip layer, %.0f MB uncompressed, %d entries; ext4 %.0f MiB; median of %d runs\n", b/1e6, e, size/1048576, runs
	printf "kiln rootfs:          %6.1f s  %6.1f MB/s  %7.0f entries/s  peak RSS %.0f MiB  (e2fsck -fn: %s)\n", k, b/1e6/k, e/k, km/1024, fsck
	printf "tar -x + mke2fs -d:   %6.1f s  (tar -x %.1f s + mke2fs -d %.1f s; mke2fs peak RSS %.0f MiB)\n", x+m, x, m, mm/1024
	printf "speedup:              %6.2fx (vs mke2fs -d alone: %.2fx)\n", (x+m)/k, m/k
	printf "CPU (user+sys):       kiln %.1f s; tar -x %.1f s + mke2fs -d %.1f s\n", kc, xc, mc
}'
rm -rf "$W/x" "$W/p.ext4"
