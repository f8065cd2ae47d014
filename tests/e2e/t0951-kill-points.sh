#!/usr/bin/env bash
# run.sh: alongside
# t0951-kill-points.sh — `kill -9` at random points (docs/reliability.md): kiln
# build (a COPY and a RUN in a builder VM), push and pull of a template, kiln
# snapshot, kiln serve under pushes and the chunkfs file server under a lazily
# started sandbox, each killed after a delay drawn from a
# seed it prints (KILN_KILL_SEED=S replays a run), then run again: the rerun
# succeeds, every store verifies (each blob hashes to its name, each template
# with `kiln snapshot verify`), nothing half-made is listed, and no QEMU, FUSE
# mount or process of the test is left.  KILN_KILL_POINTS=N points per command
# (default 1 in `make test`; `make test-faults` runs 40 each, 240 in all).
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
. tests/e2e/registry-lib.sh

POINTS=${KILN_KILL_POINTS:-1}
SEED=${KILN_KILL_SEED:-$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')}
echo "# kill points: seed $SEED, $POINTS per command (KILN_KILL_SEED=$SEED replays)"
RANDOM=$SEED
stop_lazy() { KILN_HOME=$T_TMP/hp-lazy "$KILN" sandbox gc >/dev/null 2>&1; KILN_HOME=$T_TMP/hp-lazy "$KILN" chunkfs stop >/dev/null 2>&1; }
trap 'stop_lazy; reg_stop KILL; rm -rf "$T_TMP"' EXIT
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
# leftovers: processes (QEMU, chunkfs, kiln) or mounts of this test still there
leftovers() {
	local p found=1
	for p in $(pgrep -f "$T_TMP" 2>/dev/null); do
		[ "$p" = $$ ] && continue
		grep -q "$T_TMP" "/proc/$p/cmdline" 2>/dev/null || continue
		case "$(tr '\0' ' ' <"/proc/$p/cmdline")" in *"$KILN serve"*) [ "$p" = "${REG_PID:-}" ] && continue ;; esac
		found=0
	done
	grep -q " $T_TMP" /proc/mounts && found=0
	return $found
}
bad=0
fail_point() { not_ok "$1"; bad=$((bad + 1)); }
# verify_home HOME: each blob of its stores hashes to its name, each listed template verifies
verify_home() {
	local h=$1 blobs t
	mapfile -t blobs < <(find "$h/blobs" "$h/snapshots/blobs" -type f 2>/dev/null)
	[ "$(misnamed_blobs "${blobs[@]}")" = 0 ] || { echo "# $h: misnamed blobs"; return 1; }
	for t in $(KILN_HOME=$h "$KILN" snapshot ls --json 2>/dev/null | python3 -c 'import json,sys; [print(x["digest"]) for x in json.load(sys.stdin)]'); do
		KILN_HOME=$h "$KILN" snapshot verify "$t" >/dev/null 2>"$T_TMP/verify.err" ||
			{ echo "# $h: template $t does not verify:"; sed 's/^/#   /' "$T_TMP/verify.err"; return 1; }
	done
}
check_point() { # NAME HOME: leftovers and stores after a killed run and its rerun
	settle
	if leftovers; then
		fail_point "$1: nothing of the killed run is left"
		pgrep -af "$T_TMP" | sed 's/^/#   /' | head -5
	fi
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
	check_point "chunkfs $i" "$H"
done
expect_eq "$((POINTS * 6)) kill points (seed $SEED): rerun succeeds, stores verify, nothing left" "$bad" 0
reg_stop
