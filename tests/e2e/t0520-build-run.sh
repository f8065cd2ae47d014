#!/usr/bin/env bash
# t0520-build-run.sh — RUN in the builder microVM: changes captured as one
# layer (new files, deletions as whiteouts, replaced directories as opaque),
# USER/ENV/WORKDIR seen by the command, a failing RUN named with its line and
# exit code and leaving no cache entry, cache hits skipping the VM, a changed
# input re-running only the steps after it.  Real QEMU (TCG), real agent.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup

export SOURCE_DATE_EPOCH=1700000000
B=$T_TMP/bb
umoci init --layout "$B" >/dev/null 2>&1
umoci new --image "$B:base" >/dev/null 2>&1
umoci unpack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
R=$T_TMP/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/old/sub" "$R/home/app"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in sh echo cat ls rm mkdir id touch pwd env; do ln -s busybox "$R/bin/$a"; done
echo gone >"$R/old/sub/f"
echo kept >"$R/old/keep"
printf 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\napp:x:1000:\n' >"$R/etc/group"
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1

C=$T_TMP/ctx
mkdir -p "$C"
echo hi >"$C/a.txt"
cat >"$C/Dockerfile" <<DF
FROM oci:$B:base
ENV GREETING=hello
COPY a.txt /a.txt
WORKDIR /work
RUN echo run-output-line && cat /a.txt >made && pwd >cwd && echo \$GREETING >env && rm -rf /old/sub && mkdir /old/sub && echo new >/old/sub/g && rm /bin/ls
USER app
RUN --network=none id -u >/tmp/uid
DF
expect_exit 0 "build with RUN steps" "$KILN" build -t run:1 --oci-out "$T_TMP/oci" "$C"
expect_grep "RUN output streamed" '^run-output-line$' "$T_TMP/err"
expect_exit 0 "umoci unpacks it" umoci unpack --image "$T_TMP/oci:1" "$T_TMP/u"
U=$T_TMP/u/rootfs
expect_eq "RUN wrote files in WORKDIR" "$(cat "$U/work/made" "$U/work/cwd" "$U/work/env")" "hi
/work
hello"
expect_eq "USER app ran the second RUN" "$(cat "$U/tmp/uid")" 1000
expect_eq "a deleted file is gone (whiteout)" "$(ls "$U/bin" | grep -c '^ls$')" 0
expect_eq "a replaced directory is opaque" "$(ls "$U/old/sub")" g
expect_eq "its sibling is kept" "$(cat "$U/old/keep")" kept
layers=$(python3 - "$T_TMP/oci" <<'PY'
import json, sys, tarfile
d = sys.argv[1]
idx = json.load(open(d + "/index.json"))
m = json.load(open(d + "/blobs/sha256/" + idx["manifests"][-1]["digest"][7:]))
names = tarfile.open(d + "/blobs/sha256/" + m["layers"][-2]["digest"][7:]).getnames()
print(" ".join(sorted(n for n in names if ".wh." in n or n.startswith("etc"))))
PY
)
expect_eq "whiteout and opaque marker in the RUN layer, no resolv.conf" "$layers" "bin/.wh.ls etc old/sub/.wh..wh..opq"

# a failing RUN: its line and exit code; no cache entry is left
printf 'FROM oci:%s:base\nCOPY a.txt /x\nRUN echo before; exit 3\n' "$B" >"$T_TMP/Dockerfile.fail"
n_before=$("$KILN" cache ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
expect_exit 1 "a failing RUN fails the build" "$KILN" build -f "$T_TMP/Dockerfile.fail" "$C"
expect_grep "error names file, line, step and exit code" 'Dockerfile.fail:3: \[3/3\] RUN echo before; exit 3: the command returned a non-zero code: 3' "$T_TMP/err"
n_after=$("$KILN" cache ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
expect_eq "only the COPY step was cached" "$n_after" "$((n_before + 1))"

# cache: a rebuild skips the VM; a changed input re-runs only what follows it
start=$(date +%s)
expect_exit 0 "cached rebuild" "$KILN" build --json "$C"
expect_eq "cached rebuild: every layer step a hit" "$(grep -c '"cache":"hit"' "$T_TMP/out")" 4
expect_eq "cached rebuild boots no VM (under 5 s)" "$(( $(date +%s) - start < 5 ))" 1
echo changed >"$C/a.txt"
expect_exit 0 "rebuild after changing a.txt" "$KILN" build --json "$C"
hits=$(python3 -c 'import json,sys
print(" ".join(json.loads(l)["cache"] for l in open(sys.argv[1]) if "\"cache\"" in l))' "$T_TMP/out")
expect_eq "COPY and the RUNs after it re-run; WORKDIR layer too" "$hits" "miss miss miss miss"

# --template: the image finalised by the snapshot stage; its start command
# defaults to ENTRYPOINT + CMD, and a sandbox restored from it sees its work
printf 'FROM oci:%s:base\nENV MODE=tpl\nWORKDIR /srv\nCMD ["sh", "-c", "echo started $MODE > /tmp/s"]\n' "$B" >"$T_TMP/Dockerfile.tpl"
expect_exit 0 "build --template" "$KILN" build -f "$T_TMP/Dockerfile.tpl" -t tpl:1 --ready-cmd 'cat /tmp/s' --memory 256 "$C"
expect_eq "manifest and template digests printed" "$(grep -c '^sha256:' "$T_TMP/out")" 2
expect_exit 0 "snapshot ls" "$KILN" snapshot ls
expect_grep "the template is named after -t" '^tpl:1 ' "$T_TMP/out"
expect_exit 0 "sandbox from the built template" "$KILN" sandbox create --json tpl:1
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$T_TMP/out")
expect_exit 0 "exec in the sandbox" "$KILN" sandbox exec "$id" -- sh -c 'cat /tmp/s; pwd'
expect_eq "the default start command ran with the image's ENV; WORKDIR kept" "$(cat "$T_TMP/out")" "started tpl
/srv"
"$KILN" sandbox kill "$id" >/dev/null 2>&1
