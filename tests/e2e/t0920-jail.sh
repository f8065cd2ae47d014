#!/usr/bin/env bash
# t0920-jail.sh — tests that try to get out of a VM's jail (docs/security.md).
# One template, two sandboxes A and B: each QEMU runs with seccomp, its own
# uid, no capabilities, no_new_privs, its own mount/pid/net namespaces and a
# cgroup with limits; from inside A's jail (nsenter into its mount namespace
# as its uid) /etc/shadow, B's files and a registry data directory cannot be
# read; a fork bomb and a memory hog in A leave B responsive; templates whose
# config or qcow2 point outside the store are refused; a kiln killed -9
# mid-start leaves no QEMU outside its cgroup and nothing after gc; the KVM
# path passes /dev/kvm only (skipped without KVM); --unconfined is flagged.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
if [ "$(id -u)" != 0 ]; then
	ok "jail tests # skip they need root"
	exit 0
fi
for a in cat ls head sleep dd tr; do ln -sf busybox "$T_TMP/root/bin/$a"; done
expect_exit 0 "rootfs" $KILN rootfs --from-dir "$T_TMP/root" -o "$T_TMP/j.ext4" --free 16M
expect_exit 0 "template" $KILN snapshot -t jt --memory 192 --start 'echo up' "$T_TMP/j.ext4"
SB="$KILN_HOME/sandboxes"
STORE="$KILN_HOME/snapshots"
pid_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$SB/$1/state.json"; }
field() { sed -n "s/^$2:[[:space:]]*//p" "/proc/$1/status" | awk '{print $1}'; }
cleanup() {
	for id in $(ls "$SB" 2>/dev/null); do $KILN sandbox kill "$id" >/dev/null 2>&1; done
	rm -rf "$T_TMP"
}
trap cleanup EXIT

expect_exit 0 "sandbox A" $KILN sandbox create jt
A=$(cat "$T_TMP/out")
expect_exit 0 "sandbox B" $KILN sandbox create jt
B=$(cat "$T_TMP/out")
PA=$(pid_of "$A")
PB=$(pid_of "$B")

# --- the process: seccomp, uid, capabilities, no_new_privs -----------------
expect_eq "QEMU runs under QEMU's seccomp filter (Seccomp: 2)" "$(field "$PA" Seccomp)" 2
UA=$(field "$PA" Uid)
UB=$(field "$PB" Uid)
if [ -n "$UA" ] && [ "$UA" != 0 ]; then ok "QEMU's uid is not root ($UA)"; else not_ok "QEMU's uid is not root ($UA)"; fi
if [ "$UA" != "$UB" ]; then ok "two VMs never share a uid ($UA, $UB)"; else not_ok "two VMs share uid $UA"; fi
expect_eq "QEMU has no effective capabilities" "$(field "$PA" CapEff)" 0000000000000000
expect_eq "QEMU has no bounding capabilities" "$(field "$PA" CapBnd)" 0000000000000000
expect_eq "QEMU has no_new_privs" "$(field "$PA" NoNewPrivs)" 1
for ns in mnt pid net ipc; do
	if [ "$(readlink /proc/$PA/ns/$ns)" != "$(readlink /proc/self/ns/$ns)" ]; then
		ok "QEMU has its own $ns namespace"
	else not_ok "QEMU shares kiln's $ns namespace"; fi
done
$KILN sandbox ls >"$T_TMP/ls"
expect_grep "sandbox ls shows the jail's uid" "^$A .* uid $UA( |$)" "$T_TMP/ls"

# --- the cgroup ---------------------------------------------------------------
cg=$(grep -E '(^0::|memory)' /proc/$PA/cgroup | grep -o '/kiln/vm-[0-9]*' | head -1)
if [ -n "$cg" ]; then ok "QEMU is in a cgroup of its own ($cg)"; else not_ok "QEMU is in a kiln/vm-N cgroup"; cat /proc/$PA/cgroup; fi
# every controller's, the same slot (v1: the child moves itself, per thread,
# through each tasks file; v2: it is born in its cgroup), and every thread of
# QEMU with it
if grep -q '^0::/' /proc/$PA/cgroup && ! grep -q ':memory:' /proc/$PA/cgroup; then
	ctls="0::"
else ctls="memory cpu pids blkio"; fi
for c in $ctls; do
	if [ "$c" = 0:: ]; then line=$(grep '^0::' /proc/$PA/cgroup)
	else line=$(awk -F: -v c="$c" '{n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == c) print}' /proc/$PA/cgroup); fi
	case "$line" in
	*"$cg") ok "QEMU is in its VM's cgroup of the ${c%::} controller ($line)" ;;
	*) not_ok "QEMU is in its VM's cgroup of the ${c%::} controller: '$line', want ...$cg" ;;
	esac
done
nt=0
bad=0
for t in /proc/$PA/task/*; do
	nt=$((nt + 1))
	cmp -s "$t/cgroup" /proc/$PA/cgroup || bad=$((bad + 1))
done
if [ "$nt" -gt 1 ] && [ "$bad" = 0 ]; then ok "all $nt threads of QEMU are in its cgroups"
else not_ok "all threads of QEMU are in its cgroups ($bad of $nt are not)"; fi
memdir=$(awk -F: '$2 ~ /memory/ {print $3}' /proc/$PA/cgroup)
if [ -f "/sys/fs/cgroup/memory$memdir/memory.limit_in_bytes" ]; then
	lim=$(cat "/sys/fs/cgroup/memory$memdir/memory.limit_in_bytes")
	pids=$(cat "/sys/fs/cgroup/pids$(awk -F: '$2 ~ /pids/ {print $3}' /proc/$PA/cgroup)/pids.max")
	quota=$(cat "/sys/fs/cgroup/cpu$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ {print $3}' /proc/$PA/cgroup)/cpu.cfs_quota_us")
else
	leaf=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/$PA/cgroup)
	lim=$(cat "$leaf/memory.max")
	pids=$(cat "$leaf/pids.max")
	quota=$(awk '{print $1}' "$leaf/cpu.max")
fi
expect_eq "memory limit: guest RAM + QEMU overhead" "$lim" $(((192 + 384) * 1024 * 1024))
expect_eq "pids limit" "$pids" 256
expect_eq "CPU limit: the template's vCPU and half a CPU for QEMU" "$quota" 150000

# --- from inside A's jail -------------------------------------------------------
mkdir -p "$T_TMP/registry-data/blobs"
echo secret-blob >"$T_TMP/registry-data/blobs/x"
chmod -R a+rX "$T_TMP/registry-data"
injail() { nsenter -t "$PA" -m -S "$UA" -G "$UA" "$@"; }
if injail ls "$SB/$A/run" >"$T_TMP/own" 2>&1 && grep -q qmp.sock "$T_TMP/own"; then
	ok "from inside its jail, QEMU's uid sees its own sockets"
else not_ok "from inside its jail, QEMU's uid sees its own sockets"; sed 's/^/#   /' "$T_TMP/own"; fi
for f in /etc/shadow "$SB/$B/state.json" "$SB/$B/run/qmp.sock" "$T_TMP/registry-data/blobs/x" "$STORE/refs/jt/latest" \
	/root /home; do
	if injail cat "$f" >/dev/null 2>&1 || injail ls "$f" >/dev/null 2>&1; then
		not_ok "from inside A's jail, $f cannot be read"
	else ok "from inside A's jail, $f cannot be read"; fi
done
if [ ! -e "/proc/$PA/root/etc/shadow" ] && [ ! -e "/proc/$PA/root$SB/$B" ]; then
	ok "A's root holds no /etc/shadow and nothing of B"
else not_ok "A's root holds no /etc/shadow and nothing of B"; fi
if injail sh -c "echo x > /usr/kiln-probe" 2>/dev/null || injail sh -c "echo x > /kiln-probe" 2>/dev/null; then
	not_ok "the jail's root and /usr are read-only"
else ok "the jail's root and /usr are read-only"; fi
devs=$(ls "/proc/$PA/root/dev" | grep -v '^shm$' | tr '\n' ' ')
expect_eq "the jail's /dev/shm holds its RAM copy only" "$(ls "/proc/$PA/root/dev/shm" 2>/dev/null | grep -vc "^kiln-$A-")" 0
accel=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["depends"]["accel"])' \
	"$STORE/blobs/sha256/$(cut -c8- "$STORE/refs/jt/latest")")
if [ "$accel" = kvm ]; then
	expect_eq "the KVM jail's /dev holds /dev/kvm and the basic nodes only" "$devs" "kvm null urandom zero "
else
	expect_eq "the jail's /dev holds only null, urandom, zero" "$devs" "null urandom zero "
	ok "a KVM VM's jail passes /dev/kvm and nothing else # skip no usable KVM"
fi
sock=$(stat -c '%a %U' "$SB/$A")
expect_eq "the sandbox directory (state, sockets' links) is root's alone" "$sock" "700 root"
expect_eq "QEMU's own directory is its uid's alone" "$(stat -c '%a %u' "$SB/$A/run")" "700 $UA"

# --- a fork bomb and a memory hog in A; B answers ---------------------------------
timeout 60 $KILN sandbox exec "$A" -- sh -c 'bomb() { bomb | bomb & }; bomb' >/dev/null 2>&1 &
bomb=$!
timeout 60 $KILN sandbox exec "$A" -- sh -c 'x=$(head -c 300m /dev/zero | tr "\0" x); echo ${#x}' >/dev/null 2>&1 &
hog=$!
sleep 3
t0=$(date +%s%N)
if out=$(timeout 30 $KILN sandbox exec "$B" -- echo alive 2>&1) && [ "$out" = alive ]; then
	ok "B answers while A runs a fork bomb and a memory hog ($((($(date +%s%N) - t0) / 1000000)) ms)"
else not_ok "B answers while A runs a fork bomb and a memory hog: $out"; fi
usage=$(cat "/sys/fs/cgroup/memory$memdir/memory.max_usage_in_bytes" 2>/dev/null ||
	cat "/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/$PA/cgroup)/memory.peak" 2>/dev/null || echo 0)
if [ "$usage" -le "$lim" ]; then ok "A's QEMU stays within its memory limit ($((usage >> 20)) MiB)"
else not_ok "A's QEMU stays within its memory limit ($usage > $lim)"; fi
expect_eq "B's QEMU is untouched" "$(pid_of "$B")" "$PB"
[ -d "/proc/$PB" ] && ok "B's QEMU still runs" || not_ok "B's QEMU still runs"
kill "$bomb" "$hog" 2>/dev/null
wait "$bomb" "$hog" 2>/dev/null
# A compromised QEMU owns run/: it could swap its socket for a link to B's.
for s in agent.sock agent-1.sock agent-2.sock agent-3.sock qmp.sock; do
	rm -f "$SB/$A/run/$s"
	ln -s "$SB/$B/run/$s" "$SB/$A/run/$s"
done
expect_exit 1 "kiln refuses an agent socket swapped for another VM's" $KILN sandbox exec "$A" -- echo hi
expect_grep "... saying why" "answers as uid $UB, not as the VM's uid $UA" "$T_TMP/err"
expect_exit 0 "kill A and B" $KILN sandbox kill "$A" "$B"

# --- templates that point outside the store ----------------------------------------
cfgd=$(cat "$STORE/refs/jt/latest")
cfg="$STORE/blobs/sha256/${cfgd#sha256:}"
# put_template NAME PYTHON-EDIT: a copy of jt's config edited by the snippet (c = the config)
put_template() {
	python3 - "$cfg" "$STORE" "$1" "$2" <<'EOF'
import hashlib, json, os, sys
cfg, store, name, edit = sys.argv[1:5]
c = json.load(open(cfg))
exec(edit)
data = json.dumps(c, sort_keys=True, separators=(",", ":")).encode()
d = hashlib.sha256(data).hexdigest()
open(os.path.join(store, "blobs/sha256", d), "wb").write(data)
os.makedirs(os.path.join(store, "refs", name), exist_ok=True)
open(os.path.join(store, "refs", name, "latest"), "w").write("sha256:" + d + "\n")
EOF
}
put_template dotdot 'c["memory"]["digest"] = "sha256:../../../../etc/shadow"'
expect_exit 1 "a config whose blob digest is a path is refused" $KILN run dotdot -- true
expect_grep "... saying why" "memory digest .* is not sha256" "$T_TMP/err"
put_template abs 'c["disk"]["digest"] = "/etc/shadow"'
expect_exit 1 "a config naming an absolute path is refused" $KILN run abs -- true
expect_grep "... saying why" "disk digest '/etc/shadow' is not sha256" "$T_TMP/err"
# a symlink planted in the store in place of a blob
fake=$(printf 'planted' | sha256sum | cut -d' ' -f1)
ln -sf /etc/shadow "$STORE/blobs/sha256/$fake"
put_template planted "c['memory']['digest'] = 'sha256:$fake'"
expect_exit 1 "a blob that is a symlink into the host is refused" $KILN run planted -- true
expect_grep "... saying why" "memory blob .* is not a regular file \\(a symlink\\)" "$T_TMP/err"
# a qcow2 disk whose backing file names a host file
qemu-img create -q -f qcow2 -F raw -b /etc/shadow "$T_TMP/evil.qcow2" 64M 2>/dev/null ||
	qemu-img create -q -f qcow2 -F raw -u -b /etc/shadow "$T_TMP/evil.qcow2" 64M
ed=$(sha256sum "$T_TMP/evil.qcow2" | cut -d' ' -f1)
cp "$T_TMP/evil.qcow2" "$STORE/blobs/sha256/$ed"
put_template backing "c['disk'] = {'mediaType': c['disk']['mediaType'], 'digest': 'sha256:$ed', 'size': $(stat -c %s "$T_TMP/evil.qcow2")}"
expect_exit 1 "a qcow2 whose backing names a host file is refused" $KILN run backing -- true
expect_grep "... saying why" "names the backing file '/etc/shadow'.*refused" "$T_TMP/err"

# --- kill -9 of kiln mid-start ---------------------------------------------------------
ids=""
for delay in 0.1 0.3 0.6; do
	$KILN sandbox create jt >/dev/null 2>&1 &
	k=$!
	sleep "$delay"
	kill -9 "$k" 2>/dev/null
	wait "$k" 2>/dev/null
	ids="$ids $(ls "$SB")"
	outside=0
	for p in $(pgrep -f "$SB/"); do
		grep -q '/kiln/vm-' /proc/$p/cgroup 2>/dev/null || outside=$((outside + 1))
	done
	expect_eq "kill -9 of kiln $delay s into a start: no QEMU outside its cgroup" "$outside" 0
done
expect_exit 0 "sandbox gc after the killed starts" $KILN sandbox gc
# a start that finished before the kill is a running sandbox: kept, then killed
$KILN sandbox ls --json >"$T_TMP/ls.json"
expect_eq "what gc kept is running" "$(jq -r '.[] | select(.state != "running") | .id' "$T_TMP/ls.json")" ""
for id in $(jq -r '.[].id' "$T_TMP/ls.json"); do $KILN sandbox kill "$id"; done
left=$(pgrep -f "$SB/" | wc -l)
expect_eq "no QEMU of this test left after gc" "$left" 0
expect_eq "no sandbox directory left after gc" "$(ls "$SB" | wc -l)" 0
shm=0
for id in $ids; do shm=$((shm + $(ls /dev/shm | grep -c "^kiln-$id-"))); done
expect_eq "no RAM copy left in /dev/shm" "$shm" 0

# --- a slot whose cgroup a smaller VM left behind -----------------------------------
# (v1: the memory limit may not exceed memory+swap's, which the old VM set too)
own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
if [ -f "/sys/fs/cgroup/memory$own/memory.memsw.limit_in_bytes" ]; then
	par=kiln-t0920-$$
	d=/sys/fs/cgroup/memory$own/$par/vm-0
	mkdir -p "$d"
	echo $((448 << 20)) >"$d/memory.limit_in_bytes"
	echo $((448 << 20)) >"$d/memory.memsw.limit_in_bytes"
	expect_exit 0 "a VM of 1 GiB takes a slot whose leftover cgroup holds a 448 MiB limit" \
		env KILN_CGROUP_PARENT=$par KILN_JAIL_SLOTS=1 $KILN vm run -m 1024 "$T_TMP/j.ext4" -- true
	while IFS=: read -r _ ctl path; do
		for c in ${ctl//,/ }; do
			[ -d "/sys/fs/cgroup/$c$path/$par" ] || continue
			rmdir "/sys/fs/cgroup/$c$path/$par/vm-0" 2>/dev/null
			rmdir "/sys/fs/cgroup/$c$path/$par"
		done
	done </proc/self/cgroup
else
	skip "a VM takes a slot whose leftover cgroup holds a smaller limit" "no cgroup v1 memory.memsw here"
fi

# --- --unconfined ------------------------------------------------------------------------
expect_exit 0 "--unconfined sandbox create" $KILN --unconfined sandbox create jt
U=$(cat "$T_TMP/out")
expect_grep "--unconfined says so" "unconfined: VMs run without their jail" "$T_TMP/err"
$KILN sandbox ls >"$T_TMP/ls"
expect_grep "sandbox ls flags an unconfined sandbox" "^$U .*UNCONFINED( |$)" "$T_TMP/ls"
expect_eq "an unconfined QEMU runs as root" "$(field "$(pid_of "$U")" Uid)" 0
expect_exit 0 "kill the unconfined sandbox" $KILN sandbox kill "$U"
