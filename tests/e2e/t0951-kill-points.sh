#!/usr/bin/env bash
# run.sh: alongside
# t0951-kill-points.sh — `kill -9` at random points (docs/reliability.md): kiln
# build (a COPY and a RUN in a builder VM), push and pull of a template, kiln
# snapshot, kiln serve under pushes, kiln serve --build with builds queued and
# running, a kiln build --remote client, a service build's child process, and
# the chunkfs file server under a lazily started sandbox, each
# killed after a delay drawn from a seed it prints (KILN_KILL_SEED=S replays a
# run), then run again: the rerun succeeds, every store verifies (each blob
# hashes to its name, each template with `kiln snapshot verify`), nothing
# half-made is listed, and no QEMU, FUSE mount, process, uid slot, cgroup or
# egress chain of the test is left.  KILN_KILL_POINTS=N points per command
# (default 1 in `make test`; `make test-faults` runs 40 each, 360 in all).
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
. tests/e2e/registry-lib.sh

POINTS=${KILN_KILL_POINTS:-1}
SEED=${KILN_KILL_SEED:-$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')}
echo "# kill points: seed $SEED, $POINTS per command (KILN_KILL_SEED=$SEED replays)"
RANDOM=$SEED
stop_lazy() { KILN_HOME=$T_TMP/hp-lazy "$KILN" sandbox gc >/dev/null 2>&1; KILN_HOME=$T_TMP/hp-lazy "$KILN" chunkfs stop >/dev/null 2>&1; }
trap 'stop_lazy; reg_stop KILL; [ -n "${SVC:-}" ] && kill -9 "$SVC" 2>/dev/null; rm -rf "$T_TMP"' EXIT
vm_setup
export SOURCE_DATE_EPOCH=1700000000
cd "$T_TMP"

# delay MAX_MS: a point in [0, MAX_MS) ms, as seconds for sleep
delay() { local ms=$(((RANDOM * 32768 + RANDOM) % $1)); printf '%d.%03d' $((ms / 1000)) $((ms % 1000)); }
# run_ms CMD...: how long one uninterrupted run takes (the range points are drawn from)
run_ms() { local t0; t0=$(date +%s%N); "$@" >/dev/null 2>&1; echo $((($(date +%s%N) - t0) / 1000000 + 1)); }
# killed_at NAME MAX_MS CMD...: start CMD, kill -9 it (and only it) at a random point
killed_at() {
	local name=$1 max=$2 d pid
	shift 2
	d=$(delay "$max")
	"$@" >/dev/null 2>&1 &
	pid=$!
	sleep "$d"
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	echo "# $name killed after ${d}s"
}
# settle: what a killed kiln left running dies with it (PDEATHSIG) within moments
settle() {
	local i
	for i in $(seq 1 50); do
		leftovers || return 0
		sleep 0.1
	done
}
# descendants PID: every process under PID
descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
# leftovers: processes (QEMU, chunkfs, kiln) or mounts of this test still there
leftovers() {
	local p found=1
	for p in $(pgrep -f "$T_TMP" 2>/dev/null); do
		[ "$p" = $$ ] && continue
		grep -q "$T_TMP" "/proc/$p/cmdline" 2>/dev/null || continue
		case "$(tr '\0' ' ' <"/proc/$p/cmdline")" in *"$KILN serve"*) [ "$p" = "${REG_PID:-}" ] || [ "$p" = "${SVC:-}" ] && continue ;; esac
		[ -n "${SVC:-}" ] && descendants "$SVC" | grep -qx "$p" && continue # the live build server's own
		[ -n "${1:-}" ] && echo "#   left: $p $(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-200)"
		found=0
	done
	grep -q " $T_TMP" /proc/mounts && found=0
	return $found
}
bad=0
fail_point() { not_ok "$1"; bad=$((bad + 1)); }
# verify_home HOME: each blob of its stores hashes to its name, each listed
# template verifies — those written or listed since HOME's last verification
# (a kill corrupts only what its run writes; what was verified before and not
# written since is not hashed again, so a point costs the same at the 40th)
verify_home() {
	local h=$1 blobs t mark=$1.verified
	if [ -e "$mark" ]; then
		mapfile -t blobs < <(find "$h/blobs" "$h/snapshots/blobs" -type f -newer "$mark" 2>/dev/null)
	else
		mapfile -t blobs < <(find "$h/blobs" "$h/snapshots/blobs" -type f 2>/dev/null)
	fi
	touch "$mark.next" # before the listing: what is written meanwhile is newer than it
	[ "$(misnamed_blobs "${blobs[@]}")" = 0 ] || { echo "# $h: misnamed blobs"; return 1; }
	# and nothing verified before is gone (a template's chunk removed under it)
	if [ -e "$mark.blobs" ]; then
		while read -r b; do [ -e "$b" ] || { echo "# $h: $b is gone"; return 1; }; done <"$mark.blobs"
	fi
	find "$h/blobs" "$h/snapshots/blobs" -type f 2>/dev/null >"$mark.blobs"
	for t in $(KILN_HOME=$h "$KILN" snapshot ls --json 2>/dev/null | python3 -c 'import json,sys; [print(x["digest"]) for x in json.load(sys.stdin)]'); do
		grep -qxF "$t" "$mark.list" 2>/dev/null && continue
		KILN_HOME=$h "$KILN" snapshot verify "$t" >/dev/null 2>"$T_TMP/verify.err" ||
			{ echo "# $h: template $t does not verify:"; sed 's/^/#   /' "$T_TMP/verify.err"; return 1; }
		echo "$t" >>"$mark.list"
	done
	mv "$mark.next" "$mark"
}
# slot_free N: no VM holds uid slot N (its lock can be taken, its cgroups are empty)
slot_free() {
	local c
	flock -n "/run/kiln/slots/$1" true 2>/dev/null || [ ! -e "/run/kiln/slots/$1" ] || return 1
	for c in $(slot_cgroups "$1"); do [ -s "$c/cgroup.procs" ] && return 1; done
	return 0
}
slot_cgroups() { find /sys/fs/cgroup -maxdepth 3 -type d -path "*/kiln/vm-$1" 2>/dev/null; }
# slot_leftovers: after `kiln sandbox gc`, what a free slot still has (its
# cgroups, its egress chain): a kill left it and the gc did not take it away
# (what was there, free, before the gc too: a VM of another kiln on the host
# that ends meanwhile has, for a moment, a free slot whose cgroups its kiln or
# the next gc removes)
slot_leftovers() {
	local d n found=1 before left
	before=$(slot_things | while read -r n d; do slot_free "$n" && echo "$n $d"; done)
	KILN_HOME=$T_TMP/gc-home "$KILN" sandbox gc >/dev/null 2>&1
	left=$(while read -r n d; do
		[ -n "$n" ] || continue
		grep -qxF "$n $d" <<<"$before" || continue
		slot_free "$n" && echo "$n $d"
	done <<<"$(slot_things)")
	[ -n "$left" ] || return 1
	# what another kiln's VM was taking or giving back at that moment (its
	# slot busy for the gc, free again by the check) is gone by a second gc; a
	# leak is not
	sleep 1
	KILN_HOME=$T_TMP/gc-home "$KILN" sandbox gc >/dev/null 2>&1
	while read -r n d; do
		grep -qxF "$n $d" <<<"$left" || continue
		slot_free "$n" && { echo "# uid slot $n: $d left"; found=0; }
	done <<<"$(slot_things)"
	return $found
}
slot_things() { # "SLOT what" for every egress chain and cgroup of a uid slot
	local d
	iptables -w 5 -S 2>/dev/null | sed -n 's/^-N KILN-VM-\([0-9]*\)$/\1 egress chain KILN-VM-\1/p'
	for d in $(find /sys/fs/cgroup -maxdepth 3 -type d -path '*/kiln/vm-*' 2>/dev/null); do
		echo "${d##*/vm-} cgroup $d"
	done
}
check_point() { # NAME HOME: leftovers and stores after a killed run and its rerun
	settle
	if leftovers; then
		fail_point "$1: nothing of the killed run is left"
		leftovers show
		grep " $T_TMP" /proc/mounts | sed 's/^/#   mount: /' 
	fi
	slot_leftovers && fail_point "$1: no uid slot, cgroup or egress chain is left"
	verify_home "$2" || fail_point "$1: the stores verify"
}

# ---- the inputs: a busybox base, a context with a COPY and a RUN
B=$T_TMP/bb
{ umoci init --layout "$B" && umoci new --image "$B:base" && umoci unpack --image "$B:base" bbb; } >/dev/null 2>&1
R=bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
umoci repack --image "$B:base" bbb >/dev/null 2>&1
mkdir -p ctx && head -c 8000000 /dev/urandom >ctx/data.bin
printf 'FROM oci:%s:base\nCOPY data.bin /data.bin\nRUN sha256sum /data.bin >/sum\n' "$B" >ctx/Dockerfile
HB=$T_TMP/hb
export KILN_HOME=$HB
build() { "$KILN" build --no-cache -t k:1 --template --start-cmd true --ready-cmd true --memory 128 ctx; }
ms=$(run_ms build)
"$KILN" snapshot ls | grep -q '^k:1' || { not_ok "the template builds"; exit 1; }
echo "# one build: $ms ms"

# ---- kiln build (local)
for i in $(seq 1 "$POINTS"); do
	killed_at "build $i" "$ms" build
	build >/dev/null 2>"$T_TMP/err" || { fail_point "build $i: the rerun succeeds"; sed 's/^/#   /' "$T_TMP/err" | tail -3; }
	check_point "build $i" "$HB"
done

# ---- kiln snapshot of an ext4 (a new tag each time: nothing half-made may be listed)
snap() { "$KILN" snapshot -t "s:$1" --start true --ready true "$T_TMP/root.ext4"; }
ms=$(run_ms snap 0)
for i in $(seq 1 "$POINTS"); do
	killed_at "snapshot $i" "$ms" snap "$i"
	if "$KILN" snapshot ls | grep -q "^s:$i "; then
		KILN_HOME=$HB "$KILN" snapshot verify "s:$i" >/dev/null 2>&1 || fail_point "snapshot $i: a listed template is whole"
	fi
	snap "$i" >/dev/null 2>"$T_TMP/err" || { fail_point "snapshot $i: the rerun succeeds"; sed 's/^/#   /' "$T_TMP/err" | tail -3; }
	check_point "snapshot $i" "$HB"
done

# ---- kiln push of the template (a new repository each time), kiln serve on the side
reg_start "$T_TMP/reg" || { not_ok "kiln serve starts"; exit 1; }
ms=$(run_ms "$KILN" push k:1 "$REG/p/k0:1")
for i in $(seq 1 "$POINTS"); do
	killed_at "push $i" "$ms" "$KILN" push k:1 "$REG/p/k$i:1"
	"$KILN" push k:1 "$REG/p/k$i:1" >/dev/null 2>"$T_TMP/err" || { fail_point "push $i: the rerun succeeds"; sed 's/^/#   /' "$T_TMP/err" | tail -3; }
	check_point "push $i" "$HB"
done

# ---- kiln pull of the template into a fresh host each time, then a sandbox from it
ms=$(KILN_HOME=$T_TMP/hp0 run_ms "$KILN" pull "$REG/p/k0:1")
for i in $(seq 1 "$POINTS"); do
	H=$T_TMP/hp$i
	KILN_HOME=$H killed_at "pull $i" "$ms" "$KILN" pull "$REG/p/k0:1"
	if KILN_HOME=$H "$KILN" snapshot ls | grep -q "p/k0:1"; then
		KILN_HOME=$H "$KILN" snapshot verify "$REG/p/k0:1" >/dev/null 2>&1 || fail_point "pull $i: a listed template is whole"
	fi
	KILN_HOME=$H "$KILN" pull "$REG/p/k0:1" >/dev/null 2>"$T_TMP/err" || { fail_point "pull $i: the rerun succeeds"; sed 's/^/#   /' "$T_TMP/err" | tail -3; }
	out=$(KILN_HOME=$H "$KILN" run "$REG/p/k0:1" -- cat /sum 2>"$T_TMP/err")
	case "$out" in *" /data.bin") ;; *) fail_point "pull $i: a sandbox runs from the pulled template"; sed 's/^/#   /' "$T_TMP/err" | tail -3 ;; esac
	check_point "pull $i" "$H"
	rm -rf "$H"
done

# ---- kiln serve killed under a push; restarted on the same data, the push again
for i in $(seq 1 "$POINTS"); do
	"$KILN" push k:1 "$REG/s/k$i:1" >/dev/null 2>&1 &
	ppid=$!
	sleep "$(delay "$ms")"
	reg_stop KILL
	wait "$ppid" 2>/dev/null
	reg_start "$T_TMP/reg" || { fail_point "serve $i: restarts after kill -9"; break; }
	"$KILN" push k:1 "$REG/s/k$i:1" >/dev/null 2>"$T_TMP/err" || { fail_point "serve $i: the push succeeds after the restart"; sed 's/^/#   /' "$T_TMP/err" | tail -3; }
	mapfile -t blobs < <(find "$T_TMP/reg/blobs" -type f)
	[ "$(misnamed_blobs "${blobs[@]}")" = 0 ] || fail_point "serve $i: every registry blob matches its digest"
	echo "# serve $i killed"
done

# ---- kiln serve --build killed with one build running (a RUN in its builder
# VM) and one queued; restarted on the same data: the cut build ends failed
# saying why, the queued one runs, the cut one submitted again succeeds, and
# nothing the killed server started is left
SD=$T_TMP/svc
echo '{"auth": true, "build": {"host_builds": 1}}' >"$T_TMP/svc.json"
STOK=$("$KILN" token create --data "$SD" --scope team-a:build,pull,push a)
# svc_start: on the port of its first start (the host's id in the queue, and
# the registry its images name, stay those of the host that was killed)
svc_start() {
	local i
	: >"$T_TMP/svc.log"
	for i in $(seq 20); do
		"$KILN" serve --addr "${SHOST:-127.0.0.1:0}" --data "$SD" --config "$T_TMP/svc.json" 2>>"$T_TMP/svc.log" &
		SVC=$!
		for _ in $(seq 100); do grep -q listening "$T_TMP/svc.log" && break; kill -0 $SVC 2>/dev/null || break; sleep 0.1; done
		grep -q listening "$T_TMP/svc.log" && break
		sleep 0.5 # the killed server's port not yet free
	done
	SHOST=$(grep -o '127.0.0.1:[0-9]*' "$T_TMP/svc.log" | head -1)
	[ -n "$SHOST" ] && kill -0 $SVC 2>/dev/null
}
# builds_state: "ID STATE REASON" of each of the team's builds
builds_state() {
	curl -s -H "X-API-Key: $STOK" "http://$SHOST/build/v1/builds" |
		jq -r '.builds[] | "\(.id) \(.state) \(.reason // "")"'
}
rbuild() { KILN_TOKEN=$STOK timeout 300 "$KILN" build --remote "http://$SHOST" "$@"; }
svc_start || { not_ok "kiln serve --build starts"; exit 1; }
mkdir -p sbase/root
cp -a bbb/rootfs/. sbase/root/
printf 'FROM scratch\nCOPY root/ /\n' >sbase/Dockerfile
rbuild -t bb:1 sbase >/dev/null 2>"$T_TMP/err" || { not_ok "the service builds the base"; sed 's/^/#   /' "$T_TMP/err" | tail -3; exit 1; }
mkdir -p sctx && cp ctx/data.bin sctx/
printf 'FROM %s/team-a/bb:1\nARG N\nCOPY data.bin /data.bin\nRUN echo "$N" >/n && sha256sum /data.bin >/sum\n' "$SHOST" >sctx/Dockerfile
ms=$(run_ms rbuild --build-arg N=0 -t r:0 sctx)
echo "# one remote build: $ms ms"
for i in $(seq 1 "$POINTS"); do
	rbuild --build-arg "N=r$i" -t "r:$i" sctx >/dev/null 2>&1 &
	c1=$!
	sleep 0.3
	rbuild --build-arg "N=q$i" -t "q:$i" sctx >/dev/null 2>&1 &
	c2=$!
	sleep "$(delay "$ms")"
	mapfile -t kids < <(descendants "$SVC")
	kill -9 "$SVC"
	wait "$SVC" 2>/dev/null
	echo "# serve --build $i killed ($(ps -o args= -p "${kids[@]:-1}" 2>/dev/null | grep -c qemu) QEMU under it)"
	gone=1
	for _ in $(seq 50); do
		gone=1
		for k in "${kids[@]}"; do kill -0 "$k" 2>/dev/null && gone=0; done
		[ $gone = 1 ] && break
		sleep 0.1
	done
	[ $gone = 1 ] || { fail_point "serve --build $i: what the killed server started dies with it"; ps -o pid=,args= -p "${kids[@]}" | cut -c1-150 | sed 's/^/#   /'; }
	svc_start || { fail_point "serve --build $i: restarts after kill -9"; break; }
	wait $c1 $c2 2>/dev/null
	# every build ends: cut ones failed saying the server restarted, the rest done
	for _ in $(seq 600); do builds_state | grep -qE ' (queued|building) ' || break; sleep 0.5; done
	builds_state >"$T_TMP/states"
	if grep -E ' (queued|building) ' "$T_TMP/states"; then fail_point "serve --build $i: every build ends after the restart"; fi
	if grep ' failed ' "$T_TMP/states" | grep -v 'the server restarted'; then fail_point "serve --build $i: a build fails only because the server was cut"; fi
	rbuild --build-arg "N=r$i" -t "r:$i" sctx >/dev/null 2>"$T_TMP/err" || { fail_point "serve --build $i: the cut build succeeds when submitted again"; sed 's/^/#   /' "$T_TMP/err" | tail -3; }
	rbuild --build-arg "N=q$i" -t "q:$i" sctx >/dev/null 2>"$T_TMP/err" || { fail_point "serve --build $i: the queued build succeeds"; sed 's/^/#   /' "$T_TMP/err" | tail -3; }
	mapfile -t blobs < <(find "$SD/blobs" -type f)
	[ "$(misnamed_blobs "${blobs[@]}")" = 0 ] || fail_point "serve --build $i: every registry blob matches its digest"
	check_point "serve --build $i" "$T_TMP/nohome"
	echo "# serve --build $i: $(awk '{print $2}' "$T_TMP/states" | sort | uniq -c | tr '\n' ' ')"
done

# builds_end: wait until no build of the team is queued or running
builds_end() { for _ in $(seq 600); do builds_state | grep -qE ' (queued|building) ' || return 0; sleep 0.5; done; return 1; }
TH=$SD/build/teams/team-a/home
# ---- kiln build --remote killed as a client (listing, uploading, submitting or
# following the log): a build the server took ends on its own, the same
# command again succeeds, and no half-made context is kept
for i in $(seq 1 "$POINTS"); do
	head -c 300000 /dev/urandom >sctx/c.bin # a new file each time: an upload to cut
	builds_state >"$T_TMP/before"
	killed_at "remote client $i" "$ms" rbuild --build-arg "N=c$i" -t "c:$i" sctx
	builds_end || fail_point "remote client $i: a build whose client was killed ends"
	builds_state | grep -vxFf "$T_TMP/before" | grep ' failed ' && fail_point "remote client $i: a build whose client was killed is not failed for it"
	rbuild --build-arg "N=c$i" -t "c:$i" sctx >/dev/null 2>"$T_TMP/err" || { fail_point "remote client $i: the rerun succeeds"; sed 's/^/#   /' "$T_TMP/err" | tail -3; }
	left=$(find "$SD/build" -name '.tmp-*' | head -3)
	[ -z "$left" ] || { fail_point "remote client $i: no half-made context or file is left"; echo "$left" | sed 's/^/#   /'; }
	check_point "remote client $i" "$TH"
done
rm -f sctx/c.bin

# ---- a build's child (`kiln build --json` or its publishing `kiln push`, run
# by a `kiln --wait-job` the server started ahead) killed while it
# builds: the build ends failed saying so, its client says why, the server
# goes on, and the same build submitted again succeeds
child_of_svc() { # the child running a build's job (`kiln --wait-job` that took it: in the build's work directory)
	local p
	for p in $(descendants "$SVC"); do
		case "$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")" in "$KILN --wait-job "*) ;; *) continue ;; esac
		case "$(readlink "/proc/$p/cwd" 2>/dev/null)" in "$SD"/build/*/work/* | "$SD"/build/work/*) echo "$p"; return ;; esac
	done
}
# (a step that takes 2 s: a child seen at its start is killed within its work)
sed 's/^RUN echo "$N" >\/n/& \&\& sleep 2/' sctx/Dockerfile >sctx/Dockerfile.k
kbuild() { rbuild -f sctx/Dockerfile.k --build-arg "N=k$1" -t "k:$1" sctx; }
kms=$(run_ms kbuild 0)
echo "# one remote build with a 2 s step: $kms ms"
for i in $(seq 1 "$POINTS"); do
	kbuild "$i" >/dev/null 2>"$T_TMP/kerr" &
	c=$!
	d=$(delay "$kms")
	sleep "$d"
	kid=
	for _ in $(seq 100); do kid=$(child_of_svc); [ -n "$kid" ] && break; kill -0 $c 2>/dev/null || break; sleep 0.05; done
	if [ -n "$kid" ] && kill -9 "$kid" 2>/dev/null; then
		echo "# build child $i killed after ${d}s"
		wait $c && fail_point "build child $i: the client of a killed build fails"
		grep -q 'killed by signal 9' "$T_TMP/kerr" || { fail_point "build child $i: its client says the build's process was killed"; sed 's/^/#   /' "$T_TMP/kerr" | tail -3; }
	else
		wait $c
		echo "# build child $i: it ended before the kill point (${d}s)"
	fi
	builds_end || fail_point "build child $i: every build ends"
	kill -0 "$SVC" 2>/dev/null || fail_point "build child $i: the server goes on"
	kbuild "$i" >/dev/null 2>"$T_TMP/err" || { fail_point "build child $i: the rerun succeeds"; sed 's/^/#   /' "$T_TMP/err" | tail -3; }
	check_point "build child $i" "$TH"
done
kill "$SVC" 2>/dev/null
wait "$SVC" 2>/dev/null
SVC=

# ---- the chunkfs file server killed under a lazily started sandbox
H=$T_TMP/hp-lazy
chunkfs_pid() { # the file server of KILN_HOME $H
	local p
	for p in $(pgrep -f 'chunkfs serve'); do
		tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qxF "KILN_HOME=$H" && echo "$p"
	done
}
for i in $(seq 1 "$POINTS"); do
	id=$(KILN_HOME=$H "$KILN" sandbox create "$REG/p/k0:1" 2>"$T_TMP/err")
	[ -n "$id" ] || { fail_point "chunkfs $i: a lazy sandbox starts"; sed 's/^/#   /' "$T_TMP/err" | tail -3; continue; }
	KILN_HOME=$H "$KILN" sandbox exec "$id" -- cat /sum >/dev/null 2>&1 &
	epid=$!
	sleep "$(delay 400)"
	cp=$(chunkfs_pid)
	[ -n "$cp" ] && kill -9 $cp
	wait "$epid"
	echo "# chunkfs $i killed (pid ${cp:-none})"
	KILN_HOME=$H "$KILN" sandbox kill "$id" >/dev/null 2>&1
	KILN_HOME=$H "$KILN" sandbox gc >/dev/null 2>&1
	out=$(KILN_HOME=$H "$KILN" run "$REG/p/k0:1" -- cat /sum 2>"$T_TMP/err")
	case "$out" in *" /data.bin") ;; *) fail_point "chunkfs $i: a sandbox runs again after the file server was killed"; sed 's/^/#   /' "$T_TMP/err" | tail -3 ;; esac
	KILN_HOME=$H "$KILN" sandbox gc >/dev/null 2>&1
	KILN_HOME=$H "$KILN" chunkfs stop >/dev/null 2>&1
	sleep 3 # what would start a server again has had its time
	left=$(chunkfs_pid)
	[ -z "$left" ] || { fail_point "chunkfs $i: no file server runs after kiln chunkfs stop"; ps -o pid=,ppid=,lstart=,args= -p $left | sed 's/^/#   /'; }
	check_point "chunkfs $i" "$H"
done
expect_eq "$((POINTS * 9)) kill points (seed $SEED): rerun succeeds, stores verify, nothing left" "$bad" 0
reg_stop
