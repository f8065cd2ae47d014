#!/usr/bin/env bash
# t0850-template-distribution.sh — templates as chunked OCI artifacts, with
# two templates built once (v2 changes one file in the last step) and one
# `kiln serve` on 127.0.0.1: push, pull into a second KILN_HOME, `kiln run`
# there gives the builder's answer; v2 moves few bytes both ways (pull only
# the chunks the host lacks); a push and a pull killed midway resume and end
# correct (and survive a registry killed and restarted); a chunk corrupted on
# the server is refused; a registry with tokens works after kiln login; Debian's
# docker-registry (distribution 2.8) stores the artifact as well.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
. tests/e2e/registry-lib.sh
vm_setup

export SOURCE_DATE_EPOCH=1700000000
B=$T_TMP/bb
umoci init --layout "$B" >/dev/null 2>&1
umoci new --image "$B:base" >/dev/null 2>&1
umoci unpack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
R=$T_TMP/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/lib"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
head -c 6000000 /dev/urandom >"$R/lib/payload.bin" # some incompressible data in the base
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1

# build_version N: template app:vN whose last step copies app.txt = "app version N".
build_version() {
	local c=$T_TMP/ctx$1
	mkdir -p "$c"
	echo "app version $1" >"$c/app.txt"
	printf 'FROM oci:%s:base\nCOPY app.txt /app/app.txt\n' "$B" >"$c/Dockerfile"
	expect_exit 0 "build template app:v$1" "$KILN" build -t "app:v$1" --start-cmd 'echo started >/tmp/started; sync' \
		--ready-cmd 'test -f /tmp/started' --memory 128 "$c"
}
build_version 1
build_version 2
BUILDER=$KILN_HOME
H2=$T_TMP/host2
want=$(KILN_HOME=$BUILDER "$KILN" run app:v1 -- cat /app/app.txt /tmp/started)
expect_eq "the builder runs v1" "$want" "app version 1
started"

reg_start "$T_TMP/reg" || exit 0
# json_of FILE KEY: KEY of the final {"event":"done"} of a --json run.
json_of() { grep '"event":"done"' "$1" | jq -r ".$2"; }

expect_exit 0 "push v1" "$KILN" push --json app:v1 "$REG/team/app:v1"
cp "$T_TMP/out" "$T_TMP/push1.json"
total1=$(json_of "$T_TMP/push1.json" bytes_total)
moved1=$(json_of "$T_TMP/push1.json" bytes_moved)
expect_eq "the first push sends every blob" "$(json_of "$T_TMP/push1.json" blobs_moved)" \
	"$(json_of "$T_TMP/push1.json" blobs_total)"
mt=$(curl -s -H 'Accept: application/vnd.oci.image.manifest.v1+json' "$U/v2/team/app/manifests/v1" | jq -r .artifactType)
expect_eq "the manifest is a kiln template artifact" "$mt" application/vnd.kiln.template.v1

expect_exit 0 "pull v1 on a host that never built it" env KILN_HOME="$H2" "$KILN" pull --json "$REG/team/app:v1"
expect_eq "...all of it moved" "$(json_of "$T_TMP/out" blobs_moved)" "$(json_of "$T_TMP/out" blobs_total)"
# Nothing is rewritten on import: the template has the builder's digest on a host with another KILN_HOME.
expect_eq "...and the pulled template has the builder's digest" "$(json_of "$T_TMP/out" template)" \
	"$(cat "$BUILDER/snapshots/refs/app/v1")"
expect_eq "...under its full reference too" "$(cat "$H2/snapshots/refs/$REG/team/app/v1")" "$(cat "$BUILDER/snapshots/refs/app/v1")"
echo "# pull v1: $(json_of "$T_TMP/out" blobs_total) blobs in $(json_of "$T_TMP/out" seconds) s (load $(cut -d' ' -f1 /proc/loadavg))"
got=$(KILN_HOME=$H2 "$KILN" run team/app:v1 -- cat /app/app.txt /tmp/started 2>"$T_TMP/err")
expect_eq "kiln run on the pulled template gives the builder's answer" "$got" "$want"
# zero chunks are not stored: fewer chunk files than 64 KiB pieces of the rootfs + memory
cfg=$(KILN_HOME=$H2 "$KILN" snapshot ls --json | jq -r '.[0].digest' | cut -d: -f2)
pieces=$(jq '[.rootfs.size, .memory.size] | map((. + 65535) / 65536 | floor) | add' "$H2/snapshots/blobs/sha256/$cfg")
stored=$(find "$H2/chunks/sha256" -type f | wc -l)
if [ "$stored" -lt $((pieces / 2)) ]; then ok "zero chunks are not stored ($stored chunks for $pieces pieces)"
else not_ok "zero chunks are not stored ($stored chunks for $pieces pieces)"; fi

expect_exit 0 "push v2 (one file changed in the last step)" "$KILN" push --json app:v2 "$REG/team/app:v2"
cp "$T_TMP/out" "$T_TMP/push2.json"
moved2=$(json_of "$T_TMP/push2.json" bytes_moved)
total2=$(json_of "$T_TMP/push2.json" bytes_total)
echo "# v1: $moved1 of $total1 bytes pushed; v2: $moved2 of $total2 bytes pushed"
expect_grep "the summary line reports the bytes sent" "push template .*app:v2: sent .* of .*blobs" "$T_TMP/err"
script -qec "$KILN push app:v2 $REG/team/app:tty" /dev/null >"$T_TMP/tty" 2>&1
expect_grep "on a terminal the push draws progress (blobs, bytes, rate)" 'push template: [0-9]+/[0-9]+ blobs.*/s' "$T_TMP/tty"
"$KILN" push app:v2 "$REG/team/app:quiet" >"$T_TMP/quiet" 2>"$T_TMP/quiet.err"
expect_eq "without a terminal: the digest on stdout, one summary line on stderr" \
	"$(wc -l <"$T_TMP/quiet") $(wc -l <"$T_TMP/quiet.err")" "1 1"
if [ "$moved2" -lt $((total2 / 3)) ]; then ok "v2 sends a fraction of the template ($moved2 of $total2 bytes)"
else not_ok "v2 sends a fraction of the template ($moved2 of $total2 bytes)"; fi

expect_exit 0 "pull v2 on the host that has v1" env KILN_HOME="$H2" "$KILN" pull --json "$REG/team/app:v2"
cp "$T_TMP/out" "$T_TMP/pull2.json"
# push v2 moved the config, the index and the new chunks; the pull fetches the
# config and index as documents, and exactly those new chunks as blobs.
expect_eq "the pull moves only the chunks v1 lacked" "$(json_of "$T_TMP/pull2.json" blobs_moved)" \
	"$(( $(json_of "$T_TMP/push2.json" blobs_moved) - 2 ))"
pmoved=$(json_of "$T_TMP/pull2.json" bytes_moved)
if [ "$pmoved" -le "$moved2" ]; then ok "the v2 pull receives no more than the v2 push sent ($pmoved <= $moved2)"
else not_ok "the v2 pull receives no more than the v2 push sent ($pmoved > $moved2)"; fi
expect_eq "v2 runs on the second host" "$(KILN_HOME=$H2 "$KILN" run team/app:v2 -- cat /app/app.txt 2>/dev/null)" \
	"app version 2"
expect_exit 0 "the pulled template verifies" env KILN_HOME="$H2" "$KILN" snapshot verify team/app:v2
expect_exit 0 "chunks gc --max 0 empties the chunk store" env KILN_HOME="$H2" "$KILN" chunks gc --json --max 0
expect_eq "...no chunk left" "$(jq .chunks "$T_TMP/out")" 0
expect_eq "...and pulled templates still run" "$(KILN_HOME=$H2 "$KILN" run team/app:v1 -- cat /app/app.txt 2>/dev/null)" \
	"app version 1"
expect_exit 0 "a pull under a 1M chunk store limit" env KILN_HOME="$H2" KILN_CHUNKS_MAX=1M "$KILN" pull "$REG/team/app:v2"
used=$(find "$H2/chunks/sha256" -type f -printf '%b\n' | awk '{s += $1 * 512} END {print s + 0}')
if [ "$used" -le 1048576 ]; then ok "...leaves the store within the limit ($used bytes)"
else not_ok "...leaves the store within the limit ($used bytes)"; fi
expect_exit 0 "chunks du" env KILN_HOME="$H2" "$KILN" chunks du --json
expect_eq "...reports that usage" "$(jq .bytes "$T_TMP/out")" "$used"

# -- interruptions: kill the client midway, run it again ------------------------
# wait_files DIR N PID: until DIR holds N complete files (not .part) or PID ends.
wait_files() {
	local i
	for i in $(seq 1 400); do
		[ "$(find "$1" -type f ! -name '*.part' 2>/dev/null | wc -l)" -ge "$2" ] && return 0
		kill -0 "$3" 2>/dev/null || return 1
		sleep 0.02
	done
	return 1
}
H3=$T_TMP/host3
KILN_HOME=$H3 "$KILN" pull --parallel 1 "$REG/team/app:v1" >/dev/null 2>&1 &
pid=$!
if wait_files "$H3/chunks/sha256" 30 "$pid"; then
	kill -9 "$pid"; wait "$pid" 2>/dev/null
	expect_eq "a killed pull leaves no template" "$(KILN_HOME=$H3 "$KILN" snapshot ls --json 2>/dev/null | jq length)" 0
	expect_exit 0 "the pull run again completes" env KILN_HOME="$H3" "$KILN" pull --json "$REG/team/app:v1"
	total=$(json_of "$T_TMP/out" blobs_total); moved=$(json_of "$T_TMP/out" blobs_moved)
	if [ "$moved" -lt "$total" ]; then ok "...fetching only what the first run lacked ($moved of $total chunks)"
	else not_ok "...fetching only what the first run lacked ($moved of $total chunks)"; fi
	expect_eq "...and runs" "$(KILN_HOME=$H3 "$KILN" run team/app:v1 -- cat /app/app.txt 2>/dev/null)" "app version 1"
else
	wait "$pid"; not_ok "a pull with --parallel 1 was still running when 30 chunks had arrived"
fi

reg_stop
reg_start "$T_TMP/reg2" || exit 0
"$KILN" push --parallel 1 app:v1 "$REG/other/app:v1" >/dev/null 2>&1 &
pid=$!
if wait_files "$T_TMP/reg2/blobs" 30 "$pid"; then
	kill -9 "$pid"; wait "$pid" 2>/dev/null
	code=$(curl -s -o /dev/null -w '%{http_code}' "$U/v2/other/app/manifests/v1")
	expect_eq "a killed push published no manifest" "$code" 404
	expect_exit 0 "the push run again completes" "$KILN" push --json app:v1 "$REG/other/app:v1"
	moved=$(json_of "$T_TMP/out" bytes_moved); total=$(json_of "$T_TMP/out" bytes_total)
	if [ "$moved" -lt "$total" ]; then ok "...sending only what the registry lacked ($moved of $total bytes)"
	else not_ok "...sending only what the registry lacked ($moved of $total bytes)"; fi
	H4=$T_TMP/host4
	expect_exit 0 "what it pushed pulls" env KILN_HOME="$H4" "$KILN" pull "$REG/other/app:v1"
	expect_eq "...and runs" "$(KILN_HOME=$H4 "$KILN" run other/app:v1 -- cat /app/app.txt 2>/dev/null)" "app version 1"
	# pulled chunks are renamed in without fsync: what a power loss may leave of one
	torn=$(find "$H4/chunks/sha256" -type f ! -name '*.part' -size +1 | head -1)
	: >"$torn"
	expect_exit 0 "a pull over a chunk torn by a crash completes" env KILN_HOME="$H4" "$KILN" pull "$REG/other/app:v1"
	expect_grep "...having found it corrupted and fetched it again" "corrupted.*fetching them again" "$T_TMP/err"
	expect_eq "...and stores it whole" "$(sha256sum <"$torn" | cut -d' ' -f1)" "$(basename "$torn")"
else
	wait "$pid"; not_ok "a push with --parallel 1 was still running when 30 blobs had arrived"
fi

# -- the server killed (SIGKILL) midway and restarted on its data -------------------
"$KILN" push --parallel 1 app:v2 "$REG/other/app:v2" >"$T_TMP/sk.out" 2>"$T_TMP/sk.err" &
pid=$!
before=$(find "$T_TMP/reg2/blobs" -type f | wc -l)
if wait_files "$T_TMP/reg2/blobs" $((before + 20)) "$pid"; then
	kill -9 "$REG_PID"; wait "$REG_PID" 2>/dev/null
	"$KILN" serve --addr "$REG" --data "$T_TMP/reg2" 2>"$T_TMP/serve-again.log" &
	REG_PID=$!
	wait "$pid"; rc=$?
	echo "# the push during the restart exited $rc ($(tail -1 "$T_TMP/sk.err"))"
	expect_exit 0 "after a server crash, push (again) completes" "$KILN" push app:v2 "$REG/other/app:v2"
	H7=$T_TMP/host7
	expect_exit 0 "...and pulls" env KILN_HOME="$H7" "$KILN" pull "$REG/other/app:v2"
	expect_eq "...and runs" "$(KILN_HOME=$H7 "$KILN" run other/app:v2 -- cat /app/app.txt 2>/dev/null)" "app version 2"
else
	wait "$pid"; not_ok "a push with --parallel 1 was still running when 20 blobs had arrived"
fi

# -- a chunk corrupted on the server ---------------------------------------------
man=$(curl -s -H 'Accept: application/vnd.oci.image.manifest.v1+json' "$U/v2/other/app/manifests/v1")
victim=$(echo "$man" | jq -r '.layers[3].digest' | cut -d: -f2)
f=$(find "$T_TMP/reg2/blobs" -name "$victim" -type f | head -1)
if [ -n "$f" ]; then
	chmod u+w "$f"
	printf 'X' | dd of="$f" bs=1 seek=10 conv=notrunc 2>/dev/null
	H5=$T_TMP/host5
	expect_exit 1 "a pull with a chunk corrupted on the server fails" env KILN_HOME="$H5" "$KILN" pull "$REG/other/app:v1"
	expect_grep "...naming the digest mismatch" "$victim|digest" "$T_TMP/err"
	expect_eq "...and tags no template" "$(KILN_HOME=$H5 "$KILN" snapshot ls --json 2>/dev/null | jq length)" 0
	expect_eq "...and stores no corrupted chunk" "$(find "$H5/chunks/sha256" -name "$victim" -type f | wc -l)" 0
else
	not_ok "chunk $victim found in the server's store"
fi
reg_stop

# -- a registry that wants tokens: kiln login, then the Bearer flow -----------------
echo '{"auth": true}' >"$T_TMP/auth.json"
SECRET=$("$KILN" token create --data "$T_TMP/reg-auth" --scope 'team:pull,push' ci)
reg_start "$T_TMP/reg-auth" --config "$T_TMP/auth.json" || exit 0
expect_exit 1 "a template push without credentials is refused" "$KILN" push app:v1 "$REG/team/app:v1"
echo "$SECRET" | expect_exit 0 "kiln login" "$KILN" login -u ci --password-stdin "$REG"
expect_exit 0 "after login the template pushes" "$KILN" push app:v1 "$REG/team/app:v1"
H8=$T_TMP/host8
expect_exit 1 "a host without credentials cannot pull it" env KILN_HOME="$H8" "$KILN" pull "$REG/team/app:v1"
echo "$SECRET" | KILN_HOME=$H8 "$KILN" login -u ci --password-stdin "$REG" >/dev/null 2>&1
expect_exit 0 "after login on that host, the pull works" env KILN_HOME="$H8" "$KILN" pull "$REG/team/app:v1"
expect_eq "...and runs" "$(KILN_HOME=$H8 "$KILN" run team/app:v1 -- cat /app/app.txt 2>/dev/null)" "app version 1"
reg_stop

# -- Debian's docker-registry (distribution 2.8) -----------------------------------
if command -v docker-registry >/dev/null; then
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	cat >"$T_TMP/dist.yml" <<EOC
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $T_TMP/dist}}
http: {addr: "127.0.0.1:$port"}
EOC
	(unset AWS_CA_BUNDLE; exec docker-registry serve "$T_TMP/dist.yml") 2>"$T_TMP/dist.log" &
	dpid=$!
	for i in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/v2/" && break; sleep 0.05; done
	expect_exit 0 "push v2 to distribution 2.8" "$KILN" push app:v2 "127.0.0.1:$port/kiln/app:v2"
	H6=$T_TMP/host6
	expect_exit 0 "pull it back from distribution 2.8" env KILN_HOME="$H6" "$KILN" pull "127.0.0.1:$port/kiln/app:v2"
	expect_eq "...and it runs" "$(KILN_HOME=$H6 "$KILN" run kiln/app:v2 -- cat /app/app.txt 2>/dev/null)" "app version 2"
	kill "$dpid"; wait "$dpid" 2>/dev/null
else
	not_ok "docker-registry is installed (deps/registry.txt)"
fi
"$KILN" sandbox gc >/dev/null 2>&1
