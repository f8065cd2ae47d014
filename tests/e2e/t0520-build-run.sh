#!/usr/bin/env bash
# t0520-build-run.sh — RUN in the builder microVM: one VM per stage for all
# its RUNs, each step's changes captured as its own layer (new files,
# deletions as whiteouts, replaced directories as opaque), a COPY between RUNs
# seen by the next one, USER/ENV/WORKDIR seen by the command, heredocs,
# --mount=bind|cache|tmpfs (never in the layer), --network=none, a failing
# RUN named with its line and exit code leaving no cache entry and no VM,
# ^C cleaning up, cache hits skipping the VM, a changed input re-running
# only the steps after it.  Real QEMU (TCG), real agent.
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
mkdir -p "$C/src"
echo hi >"$C/a.txt"
echo bee >"$C/b.txt"
echo in-src >"$C/src/x"
cat >"$C/Dockerfile" <<DF
FROM scratch AS side
COPY b.txt /marker
FROM oci:$B:base
ENV GREETING=hello
COPY a.txt /a.txt
WORKDIR /work
RUN echo run-output-line && cat /a.txt >made && pwd >cwd && echo \$GREETING >env && rm -rf /old/sub && mkdir /old/sub && echo new >/old/sub/g && rm /bin/ls
COPY b.txt /b.txt
RUN cat /b.txt made >both && rm made
RUN <<EOF
echo simple-heredoc >/hd1
echo \$((1+2)) >>/hd1
EOF
RUN <<SCRIPT
#!/bin/sh
echo "script \$0" >/hd2
SCRIPT
RUN cat <<A >/hd3 && cat <<"Q" >>/hd3
a-body
A
q-body \$HOME
Q
RUN --mount=type=bind,source=src,target=/mnt/src cat /mnt/src/x >/bind1 && (touch /mnt/src/y 2>/dev/null || echo read-only >/bind2)
RUN --mount=type=bind,from=side,source=/marker,target=/m.txt cat /m.txt >/bind3
RUN --mount=type=cache,target=/cache,id=t0520 n=\$(cat /cache/n 2>/dev/null || echo 0); echo \$((n+1)) >/cache/n; cp /cache/n /count
RUN --mount=type=tmpfs,target=/scratch echo t >/scratch/f && ls /scratch >/tmpfs1
RUN --network=none ip -o link | cut -d: -f2 | tr -d ' ' >/links
USER app
RUN --network=none id -u >/tmp/uid
DF
expect_exit 0 "build with RUN steps" "$KILN" build --json -t run:1 --oci-out "$T_TMP/oci" "$C"
expect_grep "RUN output streamed" '"data":"run-output-line\\n"' "$T_TMP/out"
expect_eq "one builder VM for the stage's 11 RUNs" "$(grep -c '"event":"vm"' "$T_TMP/out")" 1
expect_eq "11 RUN steps ran" "$(grep -c '"run":{' "$T_TMP/out")" 11
expect_eq "the VM was restored from the builder VM snapshot" "$(grep '"event":"vm"' "$T_TMP/out" | grep -c '"restored":true')" 1
expect_eq "the snapshot is kept for the next builds" "$(ls "$KILN_HOME/builder-vm"/*/ok | wc -l)" 1
expect_exit 0 "umoci unpacks it" umoci unpack --image "$T_TMP/oci:1" "$T_TMP/u"
U=$T_TMP/u/rootfs
expect_eq "RUN wrote files in WORKDIR" "$(cat "$U/work/cwd" "$U/work/env")" "/work
hello"
expect_eq "a COPY between RUNs reaches the running VM" "$(cat "$U/work/both")" "bee
hi"
expect_eq "a file of an earlier RUN deleted by a later one" "$(ls "$U/work" | grep -c '^made$')" 0
expect_eq "USER app ran the last RUN" "$(cat "$U/tmp/uid")" 1000
expect_eq "a deleted file is gone (whiteout)" "$(ls "$U/bin" | grep -c '^ls$')" 0
expect_eq "a replaced directory is opaque" "$(ls "$U/old/sub")" g
expect_eq "its sibling is kept" "$(cat "$U/old/keep")" kept
expect_eq "RUN <<EOF: the body is the shell's command" "$(cat "$U/hd1")" "simple-heredoc
3"
expect_eq "RUN <<EOF with #!: a script run from /dev/pipes" "$(cat "$U/hd2")" "script /dev/pipes/SCRIPT"
expect_eq "heredocs of a command, quoted one literal" "$(cat "$U/hd3")" 'a-body
q-body $HOME'
expect_eq "bind mount of a context directory, read-only" "$(cat "$U/bind1" "$U/bind2")" "in-src
read-only"
expect_eq "bind mount of a file from another stage" "$(cat "$U/bind3")" bee
expect_eq "cache mount: first use" "$(cat "$U/count")" 1
expect_eq "tmpfs mount" "$(cat "$U/tmpfs1")" f
expect_eq "--network=none: only loopback" "$(cat "$U/links")" lo
expect_eq "no mount point, pipe or stub in the image" \
	"$(ls -d "$U/mnt" "$U/cache" "$U/scratch" "$U/m.txt" "$U/dev/pipes" 2>/dev/null | wc -l)" 0
layers=$(python3 - "$T_TMP/oci" <<'PY'
import json, sys, tarfile
d = sys.argv[1]
idx = json.load(open(d + "/index.json"))
m = json.load(open(d + "/blobs/sha256/" + idx["manifests"][-1]["digest"][7:]))
for l in m["layers"]:
    names = tarfile.open(d + "/blobs/sha256/" + l["digest"][7:]).getnames()
    if "bin/.wh.ls" in names:
        print(" ".join(sorted(n for n in names if ".wh." in n or n.startswith("etc"))))
    if "work/both" in names:
        print(" ".join(sorted(names)))
PY
)
expect_eq "each RUN its own layer: whiteout and opaque marker, no /etc copied up for resolv.conf; the next RUN's diff" "$layers" \
	"bin/.wh.ls old/sub/.wh..wh..opq
work work/.wh.made work/both"
expect_eq "no VM left behind" "$(ls -A "$TMPDIR" | grep -c kiln-vm)" 0

# refused clearly, before any VM starts (secret and ssh mounts: t0540)
printf 'FROM oci:%s:base\nRUN --network=host true\n' "$B" >"$T_TMP/Dockerfile.host"
expect_exit 1 "RUN --network=host" "$KILN" build -f "$T_TMP/Dockerfile.host" "$C"
expect_grep "host network refused" 'want none or default' "$T_TMP/err"

# a failing RUN: its line and exit code; no cache entry is left, nor a VM
printf 'FROM oci:%s:base\nCOPY a.txt /x\nRUN echo before; exit 3\n' "$B" >"$T_TMP/Dockerfile.fail"
n_before=$("$KILN" cache ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
expect_exit 1 "a failing RUN fails the build" "$KILN" build -f "$T_TMP/Dockerfile.fail" "$C"
expect_grep "error names file, line, step and exit code" 'Dockerfile.fail:3: \[3/3\] RUN echo before; exit 3: the command returned a non-zero code: 3' "$T_TMP/err"
n_after=$("$KILN" cache ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
expect_eq "only the COPY step was cached" "$n_after" "$((n_before + 1))"
expect_eq "the failed build's VM is gone" "$(ls -A "$TMPDIR" | grep -c kiln-vm)$(pgrep -f "$TMPDIR/kiln-vm|$KILN_HOME/tmp" | wc -l)" 00

# ^C in the middle of a RUN: QEMU stopped, the VM's files removed
printf 'FROM oci:%s:base\nRUN echo started; sleep 600\n' "$B" >"$T_TMP/Dockerfile.int"
"$KILN" build --json -f "$T_TMP/Dockerfile.int" "$C" >"$T_TMP/int.out" 2>&1 &
PB=$!
for _ in $(seq 1 600); do grep -q '"data":"started' "$T_TMP/int.out" && break; sleep 0.2; done
expect_eq "the VM ran the command" "$(grep -c '"data":"started' "$T_TMP/int.out")" 1
kill -INT $PB
for _ in $(seq 1 100); do kill -0 $PB 2>/dev/null || break; sleep 0.2; done
wait $PB
expect_eq "^C ends the build" "$?" 130
sleep 1 # a restored VM's QEMU is killed by the kernel when kiln dies (PDEATHSIG)
expect_eq "no QEMU and no VM directory left after ^C" "$(ls -A "$TMPDIR" | grep -c kiln-vm)$(pgrep -f "$TMPDIR/kiln-vm|$KILN_HOME/tmp" | wc -l)" 00

# cache: a rebuild skips the VM; a changed input re-runs only what follows it
start=$(date +%s)
expect_exit 0 "cached rebuild" "$KILN" build --json "$C"
expect_eq "cached rebuild: every layer step a hit" "$(grep -c '"cache":"hit"' "$T_TMP/out")" 15
expect_eq "cached rebuild boots no VM" "$(grep -c '"event":"vm"' "$T_TMP/out")" 0
expect_eq "cached rebuild under 5 s" "$(( $(date +%s) - start < 5 ))" 1
echo changed >"$C/a.txt"
expect_exit 0 "rebuild after changing a.txt" "$KILN" build --json --oci-out "$T_TMP/oci2" "$C"
hits=$(python3 -c 'import json,sys
print(" ".join(json.loads(l)["cache"] for l in open(sys.argv[1]) if "\"cache\"" in l))' "$T_TMP/out")
expect_eq "the side stage hits; COPY, WORKDIR and the RUNs after it re-run" "$hits" \
	"hit miss miss miss miss miss miss miss miss miss miss miss miss miss miss"
expect_exit 0 "umoci unpacks the rebuild" umoci unpack --image "$T_TMP/oci2:latest" "$T_TMP/u2"
expect_eq "the cache mount kept its content across builds" "$(cat "$T_TMP/u2/rootfs/count")" 2

# a RUN that hits the cache after one that missed, with a whiteout in its
# layer: a plain directory cannot carry it into the running VM, so the VM is
# restarted from the stage's ext4 and the next RUN sees the deletion
printf 'FROM oci:%s:base\nRUN echo a >/ra\nRUN rm /old/keep\nRUN cat /ra >/rc && ls /old >/rc2\n' "$B" >"$T_TMP/Dockerfile.wh"
expect_exit 0 "whiteout build, first time" "$KILN" build -f "$T_TMP/Dockerfile.wh" "$C"
for ins in 'RUN echo a >/ra' 'RUN cat /ra >/rc && ls /old >/rc2'; do
	key=$("$KILN" cache ls --json | python3 -c 'import json,sys
print([e["key"] for e in json.load(sys.stdin) if e["instruction"] == sys.argv[1]][0][7:])' "$ins")
	rm -f "$KILN_HOME/cache/$key.json"
done
expect_exit 0 "rebuild: miss, hit with a whiteout, miss" "$KILN" build --json -f "$T_TMP/Dockerfile.wh" --oci-out "$T_TMP/oci-wh" "$C"
expect_eq "cache results" "$(python3 -c 'import json,sys
print(" ".join(json.loads(l)["cache"] for l in open(sys.argv[1]) if "\"cache\"" in l))' "$T_TMP/out")" "miss hit miss"
expect_eq "the VM restarted for the whiteout layer" "$(grep -c '"event":"vm"' "$T_TMP/out")" 2
expect_eq "restored first, then booted from the stage's ext4 (whiteouts)" \
	"$(grep -o '"restored":[a-z]*' "$T_TMP/out" | tr '\n' ' ')" '"restored":true "restored":false '
expect_exit 0 "umoci unpacks it" umoci unpack --image "$T_TMP/oci-wh:latest" "$T_TMP/uwh"
expect_eq "the last RUN saw the first's file and the deletion" "$(cat "$T_TMP/uwh/rootfs/rc" "$T_TMP/uwh/rootfs/rc2")" "a
sub"
expect_exit 0 "KILN_BUILDER_WARM=0 boots the stage's ext4" env KILN_BUILDER_WARM=0 "$KILN" build --json --no-cache -f "$T_TMP/Dockerfile.wh" --oci-out "$T_TMP/oci-wh2" "$C"
expect_eq "one cold boot for the three RUNs" "$(grep -o '"restored":[a-z]*' "$T_TMP/out" | tr '\n' ' ')" '"restored":false '
expect_exit 0 "umoci unpacks it" umoci unpack --image "$T_TMP/oci-wh2:latest" "$T_TMP/uwh2"
expect_eq "same files either way" "$(cd "$T_TMP/uwh2/rootfs" && cat rc rc2 && ls)" "$(cd "$T_TMP/uwh/rootfs" && cat rc rc2 && ls)"
# a step gets the same memory in a booted builder VM as in a restored one (2 GiB; booted, it had 256 MiB)
printf 'FROM oci:%s:base\nRUN awk "/MemTotal/ { print \\$2 }" /proc/meminfo >/mem\n' "$B" >"$T_TMP/Dockerfile.mem"
expect_exit 0 "a step reads its memory, restored" "$KILN" build --no-cache -f "$T_TMP/Dockerfile.mem" --oci-out "$T_TMP/oci-mem1" "$C"
expect_exit 0 "...and booted" env KILN_BUILDER_WARM=0 "$KILN" build --no-cache -f "$T_TMP/Dockerfile.mem" --oci-out "$T_TMP/oci-mem2" "$C"
umoci unpack --image "$T_TMP/oci-mem1:latest" "$T_TMP/umem1" >/dev/null 2>&1
umoci unpack --image "$T_TMP/oci-mem2:latest" "$T_TMP/umem2" >/dev/null 2>&1
m1=$(cat "$T_TMP/umem1/rootfs/mem" 2>/dev/null || echo 0) m2=$(cat "$T_TMP/umem2/rootfs/mem" 2>/dev/null || echo 0)
[ "$m1" -gt 1800000 ] && [ "$m2" -gt 1800000 ] && ok "...about 2 GiB both ways ($m1 kB, $m2 kB)" ||
	not_ok "...restored $m1 kB, booted $m2 kB"
# the layer digests of an OCI layout's image
pb_layers() { python3 -c 'import json,sys
m=json.load(open(sys.argv[1]+"/index.json"))["manifests"][0]["digest"].split(":")[1]
print(" ".join(l["digest"] for l in json.load(open(sys.argv[1]+"/blobs/sha256/"+m))["layers"]))' "$1"; }
# a stage over KILN_BUILDER_DISK_MIN_MIB (8 MiB; here 0) is not uploaded: its
# ext4 is the restored VM's spare disk, whiteouts included, so the layer with
# a whiteout after a cache hit restores a VM again instead of booting one
for ins in 'RUN echo a >/ra' 'RUN cat /ra >/rc && ls /old >/rc2'; do
	key=$("$KILN" cache ls --json | python3 -c 'import json,sys
print([e["key"] for e in json.load(sys.stdin) if e["instruction"] == sys.argv[1]][0][7:])' "$ins")
	rm -f "$KILN_HOME/cache/$key.json"
done
expect_exit 0 "the stage's ext4 as the restored VM's disk: miss, hit with a whiteout, miss" \
	env KILN_BUILDER_DISK_MIN_MIB=0 KILN_LOG=info "$KILN" build --json -f "$T_TMP/Dockerfile.wh" --oci-out "$T_TMP/oci-wh3" "$C"
expect_eq "restored both times" "$(grep -o '"restored":[a-z]*' "$T_TMP/out" | tr '\n' ' ')" '"restored":true "restored":true '
expect_eq "nothing uploaded" "$(grep -c "with the stage's ext4 as its disk, 0 layers uploaded" "$T_TMP/err")" 2
expect_exit 0 "umoci unpacks it" umoci unpack --image "$T_TMP/oci-wh3:latest" "$T_TMP/uwh3"
expect_eq "same files as uploaded and booted" "$(cd "$T_TMP/uwh3/rootfs" && cat rc rc2 && ls)" "$(cd "$T_TMP/uwh/rootfs" && cat rc rc2 && ls)"
expect_eq "same layers as uploaded and booted" "$(pb_layers "$T_TMP/oci-wh3")" "$(pb_layers "$T_TMP/oci-wh")"

# a base seen a second time gets a builder VM snapshot of its own (the base
# uploaded): later uncached stages on it restore that and upload nothing of
# it, with the same layers; a corrupt one falls back to the generic snapshot
# (a new base: the base's bundle with one more file; umoci 0.4.7's insert
# writes a truncated tar)
cp "$C/b.txt" "$R/b2.txt"
umoci repack --image "$B:base2" "$T_TMP/bbb" >/dev/null 2>&1
printf 'FROM oci:%s:base2\nCOPY a.txt /pb\nRUN cat /pb /b2.txt /old/keep >/pb2\n' "$B" >"$T_TMP/Dockerfile.pb"
for i in 1 2 3 4; do
	[ "$i" = 4 ] && for f in "$KILN_HOME"/builder-vm/*/base-*/state; do echo corrupt >"$f"; done
	expect_exit 0 "uncached build $i on a new base" "$KILN" build --json --no-cache -f "$T_TMP/Dockerfile.pb" \
		--oci-out "$T_TMP/oci-pb$i" "$C"
	grep -o '"base_restored":[a-z]*' "$T_TMP/out" >"$T_TMP/pb-vm$i"
	cp "$T_TMP/err" "$T_TMP/pb-err$i"
	ls "$KILN_HOME"/builder-vm/*/base-*/ok 2>/dev/null | wc -l >"$T_TMP/pb-n$i"
done
expect_eq "1st and 2nd: the generic snapshot, 3rd: the one with the base, 4th (corrupt): generic" \
	"$(cat "$T_TMP"/pb-vm[1-4] | tr '\n' ' ')" \
	'"base_restored":false "base_restored":false "base_restored":true "base_restored":false '
expect_eq "the 2nd build made the snapshot with the base" "$(cat "$T_TMP/pb-n2")" "$(($(cat "$T_TMP/pb-n1") + 1))"
expect_grep "the corrupt snapshot was warned about" 'snapshot with the base did not start' "$T_TMP/pb-err4"
expect_eq "the same layers from the snapshot with the base" "$(pb_layers "$T_TMP/oci-pb3")" "$(pb_layers "$T_TMP/oci-pb1")"
expect_eq "the same layers after the fallback" "$(pb_layers "$T_TMP/oci-pb4")" "$(pb_layers "$T_TMP/oci-pb1")"
expect_exit 0 "umoci unpacks it" umoci unpack --image "$T_TMP/oci-pb3:latest" "$T_TMP/upb"
expect_eq "the RUN saw the base, the COPY and the base's own file" "$(cat "$T_TMP/upb/rootfs/pb2")" "changed
bee
kept"

# --template: the image finalised by the snapshot stage; its start command
# defaults to ENTRYPOINT + CMD, and a sandbox restored from it sees its work
printf 'FROM oci:%s:base\nENV MODE=tpl\nWORKDIR /srv\nCMD ["sh", "-c", "echo started $MODE > /tmp/s"]\n' "$B" >"$T_TMP/Dockerfile.tpl"
expect_exit 0 "build --template" "$KILN" build -f "$T_TMP/Dockerfile.tpl" -t tpl:1 --ready-cmd 'cat /tmp/s' --memory 256 "$C"
expect_eq "manifest and template digests printed" "$(grep -c '^sha256:' "$T_TMP/out")" 2
t0=$(date +%s)
expect_exit 1 "build --ready-timeout 2 with a ready command that never succeeds" "$KILN" build -f "$T_TMP/Dockerfile.tpl" \
	-t never:1 --ready-cmd 'echo not yet; exit 3' --ready-timeout 2 --memory 256 "$C"
t1=$(date +%s)
expect_grep "...quotes the ready command's output" "ready command .* did not succeed.*exit 3.*not yet" "$T_TMP/err"
[ $((t1 - t0)) -lt 50 ] && ok "...and gives up after its timeout, not the default 60 s ($((t1 - t0)) s)" ||
	not_ok "...took $((t1 - t0)) s"
expect_exit 0 "snapshot ls" "$KILN" snapshot ls
expect_grep "the template is named after -t" '^tpl:1 ' "$T_TMP/out"
expect_exit 0 "sandbox from the built template" "$KILN" sandbox create --json tpl:1
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$T_TMP/out")
expect_exit 0 "exec in the sandbox" "$KILN" sandbox exec "$id" -- sh -c 'cat /tmp/s; pwd'
expect_eq "the default start command ran with the image's ENV; WORKDIR kept" "$(cat "$T_TMP/out")" "started tpl
/srv"
"$KILN" sandbox kill "$id" >/dev/null 2>&1
