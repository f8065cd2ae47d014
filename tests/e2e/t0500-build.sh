#!/usr/bin/env bash
# t0500-build.sh — kiln build without a VM: every config instruction, COPY/ADD
# rules, .dockerignore, a busybox oci: base made here with umoci, multi-stage
# COPY --from, the cache (hit/miss per changed file, prune), reproducible
# digests, the OCI layout read back by skopeo and unpacked by umoci.
. tests/e2e/lib.sh

export SOURCE_DATE_EPOCH=1700000000
C=$T_TMP/ctx
mkdir -p "$C/src/sub" "$C/docs"
echo hello >"$C/a.txt"
echo 'int main;' >"$C/src/main.c"
echo 'x' >"$C/src/sub/x.h"
echo doc >"$C/docs/x.md"
echo keep >"$C/docs/keep.md"
echo log >"$C/x.log"
printf 'docs\n!docs/keep.md\n*.log\n' >"$C/.dockerignore"
cat >"$C/Dockerfile" <<'DF'
FROM scratch
ARG VER=1
ENV APP=/app V=$VER
WORKDIR /app
COPY a.txt .
COPY src/ /app/src/
COPY --chmod=700 --chown=5:6 a.txt /bin/tool
COPY docs /docs/
COPY --parents *.txt src/sub/*.h /multi/
LABEL org.test=yes
EXPOSE 80 53/udp 9000-9001
VOLUME /data
USER 1000
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --retries=2 CMD check
SHELL ["/bin/bash", "-c"]
ENTRYPOINT ["/bin/tool"]
CMD echo hi
DF

# the OCI config field of the built image, as JSON (python: no jq needed)
cfg() { python3 - "$1" "$2" <<'PY'
import json, sys
d = sys.argv[1]
idx = json.load(open(d + "/index.json"))
m = json.load(open(d + "/blobs/sha256/" + idx["manifests"][-1]["digest"][7:]))
c = json.load(open(d + "/blobs/sha256/" + m["config"]["digest"][7:]))
v = eval(sys.argv[2], {"c": c, "m": m})
print(json.dumps(v, sort_keys=True, separators=(",", ":")))
PY
}
# the unpacked tree as "path mode uid:gid" lines
tree() { (cd "$1/rootfs" && find . -mindepth 1 -printf '%p %m %U:%G\n' | sort | tr '\n' ';'); }

expect_exit 0 "build from scratch" "$KILN" build -t demo:1 --oci-out "$T_TMP/oci" "$C"
expect_grep "step lines are numbered" '^\[6/18\] COPY src/ /app/src/$' "$T_TMP/err"
expect_grep "cache miss logged with time" '^  cache miss, [0-9.]+s$' "$T_TMP/err"
D1=$(cat "$T_TMP/out")
expect_exit 0 "skopeo inspect reads the layout" skopeo inspect "oci:$T_TMP/oci"
expect_grep "skopeo sees the digest" "\"Digest\": \"$D1\"" "$T_TMP/out"
expect_eq "Env" "$(cfg "$T_TMP/oci" 'c["config"]["Env"]')" '["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","APP=/app","V=1"]'
expect_eq "Cmd via SHELL" "$(cfg "$T_TMP/oci" 'c["config"]["Cmd"]')" '["/bin/bash","-c","echo hi"]'
expect_eq "Entrypoint" "$(cfg "$T_TMP/oci" 'c["config"]["Entrypoint"]')" '["/bin/tool"]'
expect_eq "WorkingDir User StopSignal" "$(cfg "$T_TMP/oci" '[c["config"][k] for k in ("WorkingDir","User","StopSignal")]')" '["/app","1000","SIGTERM"]'
expect_eq "ExposedPorts" "$(cfg "$T_TMP/oci" 'c["config"]["ExposedPorts"]')" '{"53/udp":{},"80/tcp":{},"9000/tcp":{},"9001/tcp":{}}'
expect_eq "Volumes Labels" "$(cfg "$T_TMP/oci" '[c["config"]["Volumes"], c["config"]["Labels"]]')" '[{"/data":{}},{"org.test":"yes"}]'
expect_eq "Healthcheck" "$(cfg "$T_TMP/oci" 'c["config"]["Healthcheck"]')" '{"Interval":30000000000,"Retries":2,"Test":["CMD-SHELL","check"]}'
expect_eq "Shell" "$(cfg "$T_TMP/oci" 'c["config"]["Shell"]')" '["/bin/bash","-c"]'
expect_eq "history: one entry per instruction" "$(cfg "$T_TMP/oci" 'len(c["history"])')" 16
expect_eq "layers = non-empty history" "$(cfg "$T_TMP/oci" '[len(m["layers"]), len(c["rootfs"]["diff_ids"]), len([h for h in c["history"] if not h.get("empty_layer")])]')" '[6,6,6]'
expect_exit 0 "umoci unpacks it" umoci unpack --image "$T_TMP/oci:1" "$T_TMP/b1"
expect_eq "file tree" "$(tree "$T_TMP/b1")" "./app 755 0:0;./app/a.txt 644 0:0;./app/src 755 0:0;./app/src/main.c 644 0:0;./app/src/sub 755 0:0;./app/src/sub/x.h 644 0:0;./bin 755 5:6;./bin/tool 700 5:6;./docs 755 0:0;./docs/keep.md 644 0:0;./multi 755 0:0;./multi/a.txt 644 0:0;./multi/src 755 0:0;./multi/src/sub 755 0:0;./multi/src/sub/x.h 644 0:0;"
expect_eq "content" "$(cat "$T_TMP/b1/rootfs/bin/tool")" hello
expect_exit 0 "kiln images" "$KILN" images
expect_grep "image listed by tag" "^demo:1 +$D1" "$T_TMP/out"

# cache: all hits, same digest (fixed SOURCE_DATE_EPOCH); then one file changes
expect_exit 0 "rebuild" "$KILN" build --json "$C"
expect_eq "rebuild: every layer step a hit" "$(grep -c '"cache":"hit"' "$T_TMP/out")" 6
expect_grep "rebuild: same manifest digest" "\"digest\":\"$D1\"" "$T_TMP/out"
echo 'int main2;' >"$C/src/main.c"
expect_exit 0 "rebuild after changing src/main.c" "$KILN" build --json "$C"
hits=$(python3 -c 'import json,sys
print(" ".join(json.loads(l)["cache"] for l in open(sys.argv[1]) if "\"cache\"" in l))' "$T_TMP/out")
expect_eq "only the steps from the changed COPY re-run" "$hits" "hit hit miss miss miss miss"
touch -d '2001-01-01' "$C/a.txt"
expect_exit 0 "mtime only" "$KILN" build --json "$C"
expect_eq "an mtime change is still a hit" "$(grep -c '"cache":"miss"' "$T_TMP/out")" 0
chmod 600 "$C/a.txt"
expect_exit 0 "mode change" "$KILN" build --json "$C"
expect_eq "a mode change is a miss" "$(grep -c '"cache":"miss"' "$T_TMP/out")" 5
chmod 644 "$C/a.txt"
expect_exit 0 "--no-cache" "$KILN" build --no-cache --json "$C"
expect_eq "--no-cache: no hits" "$(grep -c '"cache":"hit"' "$T_TMP/out")" 0
expect_exit 0 "cache ls" "$KILN" cache ls
expect_grep "cache ls shows steps" 'COPY src/ /app/src/' "$T_TMP/out"

# .dockerignore: excluded sources are not there
printf 'FROM scratch\nCOPY x.log /\n' >"$T_TMP/Dockerfile.ign"
expect_exit 1 "COPY of an ignored file fails" "$KILN" build -f "$T_TMP/Dockerfile.ign" "$C"
expect_grep "names the missing source" 'x.log: not found in the build context' "$T_TMP/err"

# a busybox base made here: oci layout with /etc/passwd, built by umoci
B=$T_TMP/bb
umoci init --layout "$B" >/dev/null 2>&1
umoci new --image "$B:base" >/dev/null 2>&1
umoci unpack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
mkdir -p "$T_TMP/bbb/rootfs/bin" "$T_TMP/bbb/rootfs/etc" "$T_TMP/bbb/rootfs/home/app"
cp /bin/busybox "$T_TMP/bbb/rootfs/bin/busybox"
ln -s busybox "$T_TMP/bbb/rootfs/bin/sh"
printf 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n' >"$T_TMP/bbb/rootfs/etc/passwd"
printf 'root:x:0:\napp:x:1000:\nstaff:x:50:\n' >"$T_TMP/bbb/rootfs/etc/group"
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
umoci config --image "$B:base" --config.env PATH=/bin --config.cmd sh --config.workingdir /home/app >/dev/null 2>&1
expect_exit 0 "busybox base made with umoci" skopeo inspect "oci:$B:base"
BASE_DIGEST=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["Digest"])' <"$T_TMP/out")
cat >"$C/Dockerfile.bb" <<DF
FROM scratch AS files
COPY --chown=7:8 src /s/
FROM oci:$B:base
ENV EXTRA=1
COPY --chown=app:staff a.txt ./
COPY --from=files /s /from-stage/
ADD --chown=1000 t.tar.gz /unpacked/
DF
mkdir -p "$T_TMP/tarsrc/d" && echo in-tar >"$T_TMP/tarsrc/d/f" && tar czf "$C/t.tar.gz" -C "$T_TMP/tarsrc" d
expect_exit 0 "build on the busybox oci: base" "$KILN" build -f "$C/Dockerfile.bb" -t bb --oci-out "$T_TMP/oci2" "$C"
expect_grep "base pinned by digest" "^  $BASE_DIGEST" "$T_TMP/err"
expect_eq "base env kept, ENV appended" "$(cfg "$T_TMP/oci2" 'c["config"]["Env"]')" '["PATH=/bin","EXTRA=1"]'
expect_eq "base Cmd and WorkingDir kept" "$(cfg "$T_TMP/oci2" '[c["config"]["Cmd"], c["config"]["WorkingDir"]]')" '[["sh"],"/home/app"]'
expect_exit 0 "umoci unpacks the busybox build" umoci unpack --image "$T_TMP/oci2:latest" "$T_TMP/b2"
expect_eq "tree on busybox" "$(tree "$T_TMP/b2" | tr ';' '\n' | grep -E '^./(home|from-stage|unpacked)' | tr '\n' ';')" "./from-stage 755 0:0;./from-stage/main.c 644 7:8;./from-stage/sub 755 7:8;./from-stage/sub/x.h 644 7:8;./home 755 0:0;./home/app 755 0:0;./home/app/a.txt 644 1000:50;./unpacked 755 1000:1000;./unpacked/d 755 0:0;./unpacked/d/f 644 0:0;"
expect_eq "busybox still runs from the image" "$("$T_TMP/b2/rootfs/bin/busybox" echo ok)" ok
# the ext4 rootfs of the result, made by the rootfs stage from the store
expect_exit 0 "--rootfs-out" "$KILN" build -f "$C/Dockerfile.bb" --rootfs-out "$T_TMP/r.ext4" "$C"
expect_exit 0 "e2fsck -fn accepts the rootfs" e2fsck -fn "$T_TMP/r.ext4"
expect_eq "rootfs holds the COPY" "$(debugfs -R 'cat /home/app/a.txt' "$T_TMP/r.ext4" 2>/dev/null)" hello
expect_eq "rootfs holds the base" "$(debugfs -R 'stat /bin/busybox' "$T_TMP/r.ext4" 2>/dev/null | grep -c 'Type: regular')" 1
printf 'FROM bb\nCOPY a.txt /again\n' >"$T_TMP/Dockerfile.local"
expect_exit 0 "FROM a local kiln image by name" "$KILN" build -f "$T_TMP/Dockerfile.local" "$C"

# ADD URL with --checksum against a server on 127.0.0.1
PORT=$((20000 + RANDOM % 20000))
(cd "$C" && exec timeout 60 python3 -m http.server --bind 127.0.0.1 "$PORT" >/dev/null 2>&1) &
SRV=$!
for _ in $(seq 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 0.2)" 2>/dev/null && break; sleep 0.1; done
SUM=sha256:$(sha256sum "$C/a.txt" | cut -d' ' -f1)
printf 'FROM scratch\nADD --checksum=%s http://127.0.0.1:%s/a.txt /dl/\n' "$SUM" "$PORT" >"$T_TMP/Dockerfile.url"
expect_exit 0 "ADD URL with a good checksum" "$KILN" build -f "$T_TMP/Dockerfile.url" --oci-out "$T_TMP/oci3" "$C"
expect_exit 0 "umoci unpacks the download" umoci unpack --image "$T_TMP/oci3:latest" "$T_TMP/b3"
expect_eq "downloaded file, mode 600" "$(tree "$T_TMP/b3")" "./dl 755 0:0;./dl/a.txt 600 0:0;"
printf 'FROM scratch\nADD --unpack=true http://127.0.0.1:%s/t.tar.gz /remote/\nADD --unpack=false t.tar.gz /raw/\n' "$PORT" >"$T_TMP/Dockerfile.unpack"
expect_exit 0 "ADD --unpack=true of a URL, --unpack=false of a local tar" "$KILN" build -f "$T_TMP/Dockerfile.unpack" --oci-out "$T_TMP/oci7" "$C"
expect_exit 0 "umoci unpacks the --unpack build" umoci unpack --image "$T_TMP/oci7:latest" "$T_TMP/b7"
expect_eq "remote archive extracted, local one kept" "$(cat "$T_TMP/b7/rootfs/remote/d/f"; ls "$T_TMP/b7/rootfs/raw")" "in-tar
t.tar.gz"
printf 'FROM scratch\nADD --checksum=sha256:%064d http://127.0.0.1:%s/a.txt /dl/\n' 0 "$PORT" >"$T_TMP/Dockerfile.bad"
expect_exit 1 "ADD URL with a wrong checksum fails" "$KILN" build -f "$T_TMP/Dockerfile.bad" "$C"
expect_grep "checksum mismatch named" 'checksum mismatch' "$T_TMP/err"
kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null

# ADD URL rides the one HTTP transport: a 503 and a body cut short are retried
# (the file starts over), a 404 is not, and its error names the line and the URL
F=$T_TMP/flaky
mkdir -p "$F"
head -c 300000 /dev/urandom >"$F/big.bin"
FSUM=sha256:$(sha256sum "$F/big.bin" | cut -d' ' -f1)
python3 tests/flaky_http.py "$T_TMP/flaky.port" "$F" 60 &
FLAKY=$!
for _ in $(seq 50); do [ -s "$T_TMP/flaky.port" ] && break; sleep 0.1; done
FURL=http://127.0.0.1:$(cat "$T_TMP/flaky.port")
printf 'FROM scratch\nADD --checksum=%s %s/503-big.bin /dl/a.bin\nADD --checksum=%s %s/cut-big.bin /dl/b.bin\n' \
	"$FSUM" "$FURL" "$FSUM" "$FURL" >"$T_TMP/Dockerfile.flaky"
expect_exit 0 "ADD URL: a 503 and a cut body are retried" "$KILN" build -f "$T_TMP/Dockerfile.flaky" --oci-out "$T_TMP/oci-flaky" "$C"
expect_eq "each asked for twice" "$(sort "$F/requests" | uniq -c | awk '{print $1, $2}' | tr '\n' ';')" "2 /503-big.bin;2 /cut-big.bin;"
umoci unpack --image "$T_TMP/oci-flaky:latest" "$T_TMP/bflaky" >/dev/null 2>&1
if cmp -s "$F/big.bin" "$T_TMP/bflaky/rootfs/dl/a.bin" && cmp -s "$F/big.bin" "$T_TMP/bflaky/rootfs/dl/b.bin"; then
	ok "both downloads whole, nothing of the cut answer kept"
else not_ok "both downloads whole, nothing of the cut answer kept"; fi
: >"$F/requests"
printf 'FROM scratch\nCOPY a.txt /a\nADD %s/404-big.bin /dl/\n' "$FURL" >"$T_TMP/Dockerfile.404"
expect_exit 1 "ADD URL of a 404 fails" "$KILN" build -f "$T_TMP/Dockerfile.404" "$C"
expect_grep "naming the line and the URL" ":3.*ADD $FURL/404-big.bin: HTTP status 404" "$T_TMP/err"
expect_eq "a 404 is not retried" "$(cat "$F/requests")" "/404-big.bin"
kill "$FLAKY" 2>/dev/null; wait "$FLAKY" 2>/dev/null

# two builds at once on one store, then prune
"$KILN" build --no-cache -t c1 "$C" >/dev/null 2>"$T_TMP/e1" & P1=$!
"$KILN" build --no-cache -f "$C/Dockerfile.bb" -t c2 "$C" >/dev/null 2>"$T_TMP/e2" & P2=$!
wait $P1; r1=$?; wait $P2; r2=$?
expect_eq "two concurrent builds both succeed" "$r1 $r2" "0 0"
expect_exit 0 "cache prune --all" "$KILN" cache prune --all
expect_grep "prune reports" '^removed [1-9][0-9]* cache entries' "$T_TMP/out"
expect_exit 0 "images survive prune" skopeo inspect "oci:$T_TMP/oci" 
expect_exit 0 "rebuild after prune" "$KILN" build --json -t demo:1 "$C"
expect_eq "after prune: misses" "$(grep -c '"cache":"hit"' "$T_TMP/out")" 0
expect_exit 2 "bad flag is a usage error" "$KILN" build --bogus "$C"
expect_exit 2 "bad --older-than" "$KILN" cache prune --older-than 3x

# other base transports: the busybox base as docker-archive and oci-archive
expect_exit 0 "skopeo makes a docker-archive" skopeo copy "oci:$B:base" "docker-archive:$T_TMP/bb-docker.tar:bb:1"
printf 'FROM docker-archive:%s\nCOPY a.txt /x\n' "$T_TMP/bb-docker.tar" >"$T_TMP/Dockerfile.da"
expect_exit 0 "FROM docker-archive:" "$KILN" build -f "$T_TMP/Dockerfile.da" --oci-out "$T_TMP/oci4" "$C"
expect_exit 0 "umoci unpacks the docker-archive build" umoci unpack --image "$T_TMP/oci4:latest" "$T_TMP/b4"
expect_eq "docker-archive base files and the COPY" "$(ls "$T_TMP/b4/rootfs/bin/busybox" "$T_TMP/b4/rootfs/x" | wc -l)" 2
expect_exit 0 "skopeo makes an oci-archive" skopeo copy "oci:$B:base" "oci-archive:$T_TMP/bb-oci.tar:base"
printf 'FROM oci-archive:%s:base\nCOPY a.txt /x\n' "$T_TMP/bb-oci.tar" >"$T_TMP/Dockerfile.oa"
expect_exit 0 "FROM oci-archive:" "$KILN" build -f "$T_TMP/Dockerfile.oa" "$C"

# zstd layers, read back by skopeo
expect_exit 0 "zstd layers" "$KILN" build --compression zstd --oci-out "$T_TMP/oci5" "$C"
expect_eq "zstd media type" "$(cfg "$T_TMP/oci5" 'sorted(set(l["mediaType"] for l in m["layers"]))')" '["application/vnd.oci.image.layer.v1.tar+zstd"]'
expect_exit 0 "skopeo copies the zstd image" skopeo copy "oci:$T_TMP/oci5" "dir:$T_TMP/dir5"

# heredoc COPY; ONBUILD triggers of a base run as the stage's first steps;
# a local image as a base by name and by NAME@DIGEST
printf 'FROM scratch\nCOPY <<EOT /etc/motd\nhello $HOSTNAME\nEOT\nONBUILD COPY a.txt /\nONBUILD ENV FROM_ONBUILD=yes\n' >"$T_TMP/Dockerfile.hd"
expect_exit 0 "heredoc COPY" "$KILN" build -f "$T_TMP/Dockerfile.hd" -t onb --oci-out "$T_TMP/oci6" "$C"
onb_digest=$(tail -1 "$T_TMP/out")
expect_exit 0 "umoci unpacks the heredoc build" umoci unpack --image "$T_TMP/oci6:latest" "$T_TMP/b6"
expect_eq "heredoc file" "$(cat "$T_TMP/b6/rootfs/etc/motd")" "hello "
expect_eq "OnBuild recorded" "$(cfg "$T_TMP/oci6" 'c["config"]["OnBuild"]')" '["COPY a.txt /","ENV FROM_ONBUILD=yes"]'
printf 'FROM onb\nCOPY a.txt /y\n' >"$T_TMP/Dockerfile.onb"
expect_exit 0 "a base with ONBUILD triggers" "$KILN" build -f "$T_TMP/Dockerfile.onb" --oci-out "$T_TMP/oci8" "$C"
expect_grep "the triggers ran first" '^\[2/4\] COPY a.txt /$' "$T_TMP/err"
expect_exit 0 "umoci unpacks the ONBUILD build" umoci unpack --image "$T_TMP/oci8:latest" "$T_TMP/onb7"
expect_eq "the trigger's COPY is in the image" "$(cat "$T_TMP/onb7/rootfs/a.txt")" "$(cat "$C/a.txt")"
expect_eq "the trigger's ENV is in the config, OnBuild consumed" \
	"$(cfg "$T_TMP/oci8" '["FROM_ONBUILD=yes" in c["config"]["Env"], c["config"].get("OnBuild")]')" '[true,null]'
printf 'FROM onb@%s\nCOPY a.txt /y\n' "$onb_digest" >"$T_TMP/Dockerfile.dg"
expect_exit 0 "FROM NAME@DIGEST of a local image" "$KILN" build -f "$T_TMP/Dockerfile.dg" "$C"
expect_grep "pinned to that digest" "^  $onb_digest " "$T_TMP/err"
printf 'FROM nosuch:1\n' >"$T_TMP/Dockerfile.ns"
expect_exit 1 "an unknown local name" "$KILN" build -f "$T_TMP/Dockerfile.ns" "$C"
expect_grep "says what is missing" "FROM nosuch:1: not a local kiln image" "$T_TMP/err"

# a build killed midway leaves no partial blob visible; prune clears its temp files
head -c 64M /dev/urandom >"$C/big.bin"
printf 'FROM scratch\nCOPY big.bin /\n' >"$T_TMP/Dockerfile.big"
"$KILN" build --no-cache -f "$T_TMP/Dockerfile.big" "$C" >/dev/null 2>&1 & PB=$!
sleep 1; kill -9 $PB 2>/dev/null; wait $PB 2>/dev/null
bad=$(misnamed_blobs "$KILN_HOME"/blobs/sha256/*)
expect_eq "every visible blob matches its digest" "$bad" 0
expect_exit 0 "prune after a killed build" "$KILN" cache prune
expect_eq "temp files gone" "$(ls -A "$KILN_HOME/tmp" | wc -l)" 0
# the next build removes the scratch directory a killed one left (its pid file names a dead process)
"$KILN" build --no-cache -f "$T_TMP/Dockerfile.big" "$C" >/dev/null 2>&1 & PB=$!
for _ in $(seq 100); do grep -qs . "$KILN_HOME"/tmp/build-*/pid && break; sleep 0.05; done
kill -9 $PB 2>/dev/null; wait $PB 2>/dev/null
expect_eq "a killed build leaves its scratch directory" "$(ls -d "$KILN_HOME"/tmp/build-* 2>/dev/null | wc -l)" 1
printf 'FROM scratch\nCOPY a.txt /a\n' >"$T_TMP/Dockerfile.small"
expect_exit 0 "a build after it" "$KILN" build -f "$T_TMP/Dockerfile.small" "$C"
expect_eq "...removes it" "$(ls -d "$KILN_HOME"/tmp/build-* 2>/dev/null | wc -l)" 0
rm -f "$C/big.bin"
