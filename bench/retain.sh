#!/usr/bin/env bash
# retain.sh — a retention run on TAGS tags (issue 30): a registry holding
# TAGS tags in one repository, each its own manifest with its own 1 KiB layer
# (one shared config), made through the registry's HTTP API (monolithic blob
# POSTs and manifest PUTs from 8 keep-alive connections); a copy of that data
# directory is restored before each run of
#   kiln registry retain   with  {"repositories": "bench/*", "keep_newest": KEEP}
# so every run removes TAGS-KEEP tags and manifests.  Prints, medians of RUNS:
# wall time, tags / manifests removed, bytes freed; and, from one more run under
# strace, the reads of the store (read/pread64 calls and bytes, stat calls).
# Usage: bench/retain.sh [TAGS] [KEEP] [RUNS]
set -euo pipefail
TAGS=${1:-10000}
KEEP=${2:-100}
RUNS=${3:-3}
KILN=${KILN:-$PWD/bin/kiln}
W=$(mktemp -d /tmp/kiln-bench-retain.XXXXXX)
SRV=
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

"$KILN" serve --addr 127.0.0.1:0 --data "$W/data" --log-format off 2>"$W/serve.log" &
SRV=$!
for _ in $(seq 1 100); do
	port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$W/serve.log")
	[ -n "$port" ] && break
	sleep 0.05
done
t0=$(date +%s.%N)
python3 - "$port" "$TAGS" <<'EOF'
import hashlib, http.client, json, os, sys, threading
port, n = int(sys.argv[1]), int(sys.argv[2])
cfg = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
def dg(b): return "sha256:" + hashlib.sha256(b).hexdigest()
def call(c, method, path, body, ctype, want):
    c.request(method, path, body=body, headers={"Content-Type": ctype})
    r = c.getresponse(); r.read()
    if r.status != want: raise SystemExit(f"{method} {path}: {r.status}")
c0 = http.client.HTTPConnection("127.0.0.1", port)
call(c0, "POST", f"/v2/bench/app/blobs/uploads/?digest={dg(cfg)}", cfg, "application/octet-stream", 201)
def worker(k):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for i in range(k, n, 8):
        layer = os.urandom(1024)
        call(c, "POST", f"/v2/bench/app/blobs/uploads/?digest={dg(layer)}", layer, "application/octet-stream", 201)
        m = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": dg(cfg), "size": len(cfg)},
                        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": dg(layer), "size": 1024}]}).encode()
        call(c, "PUT", f"/v2/bench/app/manifests/t{i}", m, "application/vnd.oci.image.manifest.v1+json", 201)
ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
for t in ts: t.start()
for t in ts: t.join()
EOF
t1=$(date +%s.%N)
kill "$SRV" && wait "$SRV" 2>/dev/null || true
SRV=
echo "made $TAGS tags (2 requests each) through the API in $(echo "$t1 - $t0" | bc) s"
echo "{\"retention\": [{\"repositories\": \"bench/*\", \"keep_newest\": $KEEP}]}" >"$W/cfg.json"
cp -a "$W/data" "$W/pristine"
du -sh "$W/pristine/meta.db" | sed 's/^/meta.db: /'

restore() { rm -rf "$W/data" && cp -a "$W/pristine" "$W/data"; }
: >"$W/times"
for r in $(seq 1 "$RUNS"); do
	restore
	a=$(date +%s.%N)
	"$KILN" registry retain --data "$W/data" --config "$W/cfg.json" --json >"$W/out.json"
	b=$(date +%s.%N)
	echo "$b - $a" | bc >>"$W/times"
	jq -c '{tags, manifests, blobs_freed, bytes_freed}' "$W/out.json" | sed "s/^/run $r: $(tail -1 "$W/times") s /"
done
echo "wall time, median of $RUNS: $(median <"$W/times") s"
restore
strace -f -e trace=read,pread64,newfstatat,stat,lstat,statx,utimensat -o "$W/trace" \
	"$KILN" registry retain --data "$W/data" --config "$W/cfg.json" >/dev/null
awk '/ (read|pread64)\(/ { n++; if (match($0, /= [0-9]+$/)) b += substr($0, RSTART + 2) }
     / (newfstatat|stat|lstat|statx)\(/ { s++ } / utimensat\(/ { u++ }
     END { printf "reads of the store (one run under strace): %d read/pread64 calls, %.1f MiB; %d stat calls, %d utimensat\n", n, b / 1048576, s, u }' "$W/trace"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
