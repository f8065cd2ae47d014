#!/usr/bin/env bash
# t0530-build-names.sh — file names are bytes (UTF-8 composed and decomposed,
# Latin-1, invalid UTF-8, 250-byte names, paths over 100 bytes, in symlink
# and hardlink targets) through every path: a base layer written by umoci
# (Go's archive/tar), COPY, ADD of a pax and a GNU tar, RUN making them and
# copying the base's and the COPY's (upload into the builder VM + capture),
# the image's layers (umoci unpack; buildah builds the same COPY/ADD steps),
# kiln rootfs (e2fsck, debugfs, loop mount), a sandbox of the image as a
# template, and agent upload/download with
# GNU tar and with busybox tar (the guest's).
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
NAMES="python3 $PWD/tests/data/names/names.py"
export SOURCE_DATE_EPOCH=1700000000

ref=$T_TMP/ref
mkdir -p "$ref" && $NAMES mk "$ref"
want=$($NAMES list "$ref")
# same NAME GOT WANT: like expect_eq, printing only where the listings differ
same() {
	if [ "$2" = "$3" ]; then ok "$1"; else
		not_ok "$1"
		diff <(echo "$3") <(echo "$2") | head -6 | cut -c1-200 | sed 's/^/#   /'
	fi
}

# a busybox base whose layer (written by umoci) holds the names too
B=/tmp/kiln-e2e-names-$$
trap 'rm -rf "$T_TMP" "$B"' EXIT
umoci init --layout "$B" >/dev/null 2>&1
umoci new --image "$B:base" >/dev/null 2>&1
umoci unpack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
R=$T_TMP/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/base-names"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
$NAMES mk "$R/base-names"
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1

C=$T_TMP/ctx
mkdir -p "$C/ctx"
$NAMES mk "$C/ctx"
$NAMES tar "$C/names.tar" pax
$NAMES tar "$T_TMP/names-gnu.tar" gnu && gzip -c "$T_TMP/names-gnu.tar" >"$C/names-gnu.tar.gz"
(echo 'mkdir -p /r && cd /r' && $NAMES script /r) >"$C/mk.sh"
cat >"$C/Dockerfile.copy" <<'DF'
FROM scratch
COPY ctx/ /c/
ADD names.tar /a/
ADD names-gnu.tar.gz /g/
DF
{ echo "FROM oci:$B:base"; cat <<'DF'; } >"$C/Dockerfile"
COPY ctx/ /c/
ADD names.tar /a/
ADD names-gnu.tar.gz /g/
COPY mk.sh /mk.sh
RUN sh /mk.sh && cp -a /base-names /r2 && cp -a /c /r3 && cd /c && find . | sort >/seen-c
DF
expect_exit 0 "build with names in COPY, ADD and RUN" "$KILN" build -t names:1 --oci-out "$T_TMP/oci" "$C"
expect_exit 0 "umoci unpacks it" umoci unpack --image "$T_TMP/oci:1" "$T_TMP/u"
U=$T_TMP/u/rootfs
# COPY and ADD do not keep hardlinks yet: the listing leaves link counts out
same "base layer (Go's tar): names as bytes" "$($NAMES list "$U/base-names")" "$want"
same "COPY: names as bytes" "$($NAMES list "$U/c")" "$want"
same "ADD of a pax tar: names as bytes" "$($NAMES list "$U/a")" "$want"
same "ADD of a GNU tar.gz: names as bytes" "$($NAMES list "$U/g")" "$want"
same "RUN making the names: captured as bytes" "$($NAMES list "$U/r")" "$want"
same "RUN copying the base's names (uploaded to the VM): bytes" "$($NAMES list "$U/r2")" "$want"
same "RUN copying the COPY's names (uploaded to the VM): bytes" "$($NAMES list "$U/r3")" "$want"
expect_eq "the RUN saw the COPY's names" "$(od -An -tx1 "$U/seen-c" | tr -d ' \n')" \
	"$(cd "$ref" && find . | LC_ALL=C sort | od -An -tx1 | tr -d ' \n')"

# the same COPY/ADD steps built by buildah give the same names
if command -v buildah >/dev/null && [ "$(id -u)" = 0 ]; then
	BR=(buildah --storage-driver vfs --root "$T_TMP/broot" --runroot "$T_TMP/brun")
	if "${BR[@]}" bud --isolation chroot -f "$C/Dockerfile.copy" -t names-b "$C" >"$T_TMP/b.log" 2>&1 &&
		"${BR[@]}" push names-b "oci:$T_TMP/boci:1" >>"$T_TMP/b.log" 2>&1 &&
		umoci unpack --image "$T_TMP/boci:1" "$T_TMP/ub" >>"$T_TMP/b.log" 2>&1; then
		ok "buildah built the COPY/ADD steps"
		for d in c a g; do
			same "/$d: kiln's names equal buildah's" "$($NAMES list "$U/$d")" "$($NAMES list "$T_TMP/ub/rootfs/$d")"
		done
	else
		not_ok "buildah built the COPY/ADD steps"; sed 's/^/#   /' "$T_TMP/b.log" | tail -5
	fi
	"${BR[@]}" rmi -a -f >/dev/null 2>&1
else
	skip "kiln's names equal buildah's" "needs root and buildah"
fi

# kiln rootfs: the ext4 image holds the same bytes
expect_exit 0 "kiln rootfs of the image" "$KILN" rootfs "oci:$T_TMP/oci:1" -o "$T_TMP/n.ext4" --free 8M
expect_exit 0 "e2fsck -fn is clean" e2fsck -fn "$T_TMP/n.ext4"
n0=$(printf 'F\305\221tan\303\272s\303\255tv\303\241ny.pem')
debugfs -R "cat \"/r/$(printf 'bad-\377\376-\303')\"" "$T_TMP/n.ext4" >"$T_TMP/dbg" 2>/dev/null
expect_eq "debugfs reads a file by its invalid-UTF-8 name" "$(cat "$T_TMP/dbg")" "content of 4"
debugfs -R "stat \"/c/988a38cb.0\"" "$T_TMP/n.ext4" >"$T_TMP/dbg" 2>/dev/null
expect_grep "debugfs: the hash link points at the UTF-8 name" "Fast link dest: \"NetLock_Arany_=Class_Gold=_$n0\"" "$T_TMP/dbg"
if [ "$(id -u)" = 0 ] && mkdir -p "$T_TMP/mnt" && mount -o loop,ro "$T_TMP/n.ext4" "$T_TMP/mnt" 2>/dev/null; then
	for d in base-names c a g r r2 r3; do
		same "loop mount: /$d names as bytes" "$($NAMES list "$T_TMP/mnt/$d")" "$want"
	done
	umount "$T_TMP/mnt"
else
	skip "loop mount of the rootfs" "needs root and loop devices"
fi

# a template of the image: a sandbox restored from it lists the same bytes
expect_exit 0 "build --template of the image" "$KILN" build --template -t names-tpl:1 --ready-cmd true --memory 256 "$C"
expect_exit 0 "sandbox from the template" "$KILN" sandbox create --json names-tpl:1
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$T_TMP/out" 2>/dev/null)
expect_exit 0 "sandbox: list the names" "$KILN" sandbox exec "$id" -- sh -c 'cd /r && find . | sort'
expect_eq "sandbox: the RUN's names as bytes" "$(od -An -tx1 "$T_TMP/out" | tr -d ' \n')" \
	"$(cd "$ref" && find . | LC_ALL=C sort | od -An -tx1 | tr -d ' \n')"
"$KILN" sandbox kill "$id" >/dev/null 2>&1

# agent upload/download, with GNU tar and with busybox's (the guest's tar)
AGENT=$KILN_AGENT_BIN
wantn=$($NAMES list "$ref" --nlink)
for tarp in tar busybox; do
	S=$T_TMP/agent-$tarp.sock
	"$AGENT" --listen "$S" --tar "$tarp" 2>"$T_TMP/agent.err" &
	apid=$!
	for _ in $(seq 50); do [ -S "$S" ] && break; sleep 0.1; done
	expect_exit 0 "agent ($tarp): upload names" "$KILN" agent upload --socket "$S" "$ref" "$T_TMP/g-$tarp/up"
	same "agent ($tarp): uploaded names as bytes, hardlink kept" "$($NAMES list "$T_TMP/g-$tarp/up" --nlink)" "$wantn"
	expect_exit 0 "agent ($tarp): download them" "$KILN" agent download --socket "$S" "$T_TMP/g-$tarp/up" "$T_TMP/back-$tarp"
	same "agent ($tarp): downloaded names as bytes, hardlink kept" "$($NAMES list "$T_TMP/back-$tarp" --nlink)" "$wantn"
	kill $apid 2>/dev/null
	wait $apid 2>/dev/null
done
