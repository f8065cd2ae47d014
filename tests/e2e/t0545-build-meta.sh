#!/usr/bin/env bash
# t0545-build-meta.sh — the metadata real packages carry, RUN → layer → ext4
# → sandbox: a file capability set in a RUN (as iputils-ping's postinst
# would, with a tiny static tool: busybox has no setcap) and one from the
# base layer (seen by the RUN in the restored builder VM), a POSIX ACL, the
# setuid/setgid bits, a hard link, a fifo, a device node, a sparse file; a
# socket is left out (as buildah and docker do).  The layer carries
# SCHILY.xattr records as buildah's does (buildah runs the same RUN);
# kiln rootfs passes e2fsck and debugfs lists the attributes; a sandbox of
# the template reads them back.  A sparse file arrives whole but dense (the
# guest's tar writes no holes; buildah's Go tar writes none either).
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
export SOURCE_DATE_EPOCH=1700000000
CAP=0100000200200000000000000000000000000000 # cap_net_raw=ep
# user::rw- user:1000:rwx group::r-- mask::rwx other::r-- (the kernel's xattr form)
ACL=0200000001000600ffffffff02000700e803000004000400ffffffff10000700ffffffff20000400ffffffff

B=/tmp/kiln-e2e-meta-$$
trap 'rm -rf "$T_TMP" "$B"' EXIT
cc -static -O2 -o "$T_TMP/xattr" tests/data/meta/xattr.c
umoci init --layout "$B" >/dev/null 2>&1
umoci new --image "$B:base" >/dev/null 2>&1
umoci unpack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
R=$T_TMP/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
cp "$T_TMP/xattr" "$R/bin/xattr"
cp /bin/busybox "$R/bin/baseping"
"$T_TMP/xattr" set "$R/bin/baseping" security.capability $CAP
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
C=$T_TMP/ctx
mkdir -p "$C"
cat >"$C/Dockerfile" <<DF
FROM oci:$B:base
RUN xattr get /bin/baseping security.capability >/seen-base-cap && \\
    cp /bin/busybox /bin/pinger && xattr set /bin/pinger security.capability $CAP && \\
    mkdir -p /m/shared && echo data >/m/f && ln /m/f /m/hard && mkfifo /m/fifo && (mknod /m/null c 1 3 || true) && \\
    chmod 4755 /m/f && chmod 2775 /m/shared && xattr set /m/f system.posix_acl_access $ACL && \\
    dd if=/dev/zero of=/m/sparse bs=1 count=0 seek=8388608 2>/dev/null && echo tail >>/m/sparse && \\
    xattr sock /m/sock && (xattr set /m/f user.origin 6b696c6e 2>/m/user-xattr-error || true)
DF
expect_exit 0 "build: a RUN sets a capability, an ACL, setuid/setgid, links, a fifo, a device" \
	"$KILN" build --template -t meta:1 --ready-cmd true --memory 256 --oci-out "$T_TMP/oci" "$C"
if [ "$(cat "$C/../oci/index.json" 2>/dev/null | wc -c)" = 0 ]; then :; fi
layer=$(python3 - "$T_TMP/oci" <<'PY'
import json, sys
d = sys.argv[1]
idx = json.load(open(d + "/index.json"))
m = json.load(open(d + "/blobs/sha256/" + idx["manifests"][0]["digest"][7:]))
print(d + "/blobs/sha256/" + m["layers"][-1]["digest"][7:])
PY
)
# what the layer's tar says about each path, read with python's tarfile
tarmeta() {
	python3 - "$1" <<'PY'
import sys, tarfile
kinds = {tarfile.REGTYPE: "f", tarfile.LNKTYPE: "h", tarfile.SYMTYPE: "l", tarfile.CHRTYPE: "c",
         tarfile.DIRTYPE: "d", tarfile.FIFOTYPE: "p"}
with tarfile.open(sys.argv[1]) as t:
    for m in t.getmembers():
        x = " ".join("%s=%s" % (k, v.encode("utf-8", "surrogateescape").hex()) for k, v in sorted(m.pax_headers.items())
                     if "xattr" in k)
        extra = m.linkname if m.type == tarfile.LNKTYPE else "%d,%d" % (m.devmajor, m.devminor) if m.type == tarfile.CHRTYPE else ""
        print(m.name.rstrip("/"), kinds.get(m.type, m.type), "%o" % (m.mode & 0o7777), extra, x)
PY
}
tarmeta "$layer" >"$T_TMP/meta"
expect_grep "layer: the capability as SCHILY.xattr.security.capability" "^bin/pinger f 755  SCHILY\.xattr\.security\.capability=$CAP$" "$T_TMP/meta"
expect_grep "layer: the ACL as SCHILY.xattr.system.posix_acl_access" "^m/f f 4674  SCHILY\.xattr\.system\.posix_acl_access=$ACL$" "$T_TMP/meta"
expect_grep "layer: the hard link" "^m/hard h 4674 m/f" "$T_TMP/meta"
expect_grep "layer: the fifo" "^m/fifo p 644" "$T_TMP/meta"
expect_grep "layer: the device" "^m/null c 644 1,3" "$T_TMP/meta"
expect_grep "layer: setgid directory" "^m/shared d 2775" "$T_TMP/meta"
expect_eq "layer: no socket" "$(grep -c '^m/sock ' "$T_TMP/meta")" 0
expect_eq "layer: no LIBARCHIVE.xattr duplicates" "$(grep -c LIBARCHIVE "$T_TMP/meta")" 0
if [ -s "$T_TMP/oci" ]; then :; fi
expect_exit 0 "umoci unpacks it" umoci unpack --image "$T_TMP/oci:1" "$T_TMP/u"
expect_eq "the RUN in the restored VM saw the base layer's capability" "$(cat "$T_TMP/u/rootfs/seen-base-cap")" $CAP
expect_eq "the sparse file's size and tail" "$(stat -c %s "$T_TMP/u/rootfs/m/sparse"; tail -c 5 "$T_TMP/u/rootfs/m/sparse")" "8388613
tail"
if [ -s "$T_TMP/u/rootfs/m/user-xattr-error" ]; then
	skip "a user.* xattr set in a RUN" "the builder VM's tmpfs has no user.* xattrs before Linux 6.6: $(head -1 "$T_TMP/u/rootfs/m/user-xattr-error")"
else
	expect_grep "layer: a user.* xattr set in a RUN" "SCHILY\.xattr\.user\.origin=6b696c6e" "$T_TMP/meta"
fi

# COPY keeps what its sources carry: a stage's file (COPY --from=<image>) and a context file
cp /bin/busybox "$C/capfile"
"$T_TMP/xattr" set "$C/capfile" security.capability $CAP
printf 'FROM scratch\nCOPY --from=oci:%s:1 /bin/pinger /m/f /copied/\nCOPY capfile /copied/capfile\n' "$T_TMP/oci" >"$C/Dockerfile.copy"
expect_exit 0 "build: COPY --from=<image> and COPY of a context file with xattrs" \
	"$KILN" build -f "$C/Dockerfile.copy" -t metacopy:1 --oci-out "$T_TMP/ocic" "$C"
clayer=$(python3 - "$T_TMP/ocic" <<'PY'
import json, sys
d = sys.argv[1]
idx = json.load(open(d + "/index.json"))
m = json.load(open(d + "/blobs/sha256/" + idx["manifests"][0]["digest"][7:]))
print(d + "/blobs/sha256/" + m["layers"][-2]["digest"][7:], d + "/blobs/sha256/" + m["layers"][-1]["digest"][7:])
PY
)
for l in $clayer; do tarmeta "$l"; done >"$T_TMP/cmeta"
expect_grep "COPY --from=<image>: the capability kept" "^copied/pinger f 755  SCHILY\.xattr\.security\.capability=$CAP$" "$T_TMP/cmeta"
expect_grep "COPY --from=<image>: the ACL and setuid kept" "^copied/f f 4674  SCHILY\.xattr\.system\.posix_acl_access=$ACL$" "$T_TMP/cmeta"
expect_grep "COPY of a context file: the capability kept" "^copied/capfile f 755  SCHILY\.xattr\.security\.capability=$CAP$" "$T_TMP/cmeta"

# buildah runs the same RUN (chroot isolation): its layer carries the same records
if command -v buildah >/dev/null && [ "$(id -u)" = 0 ]; then
	BR=(buildah --storage-driver vfs --root "$T_TMP/broot" --runroot "$T_TMP/brun")
	if "${BR[@]}" bud --isolation chroot -t meta-b "$C" >"$T_TMP/b.log" 2>&1 &&
		"${BR[@]}" push meta-b "oci:$T_TMP/boci:1" >>"$T_TMP/b.log" 2>&1; then
		ok "buildah built the same RUN"
		blayer=$(python3 - "$T_TMP/boci" <<'PY'
import json, sys
d = sys.argv[1]
idx = json.load(open(d + "/index.json"))
m = json.load(open(d + "/blobs/sha256/" + idx["manifests"][0]["digest"][7:]))
print(d + "/blobs/sha256/" + m["layers"][-1]["digest"][7:])
PY
)
		tarmeta "$blayer" >"$T_TMP/bmeta"
		# type, mode, link target (buildah's chroot cannot mknod; it records no ACL, and
		# user.* only where its storage has them)
		for p in bin/pinger m/f m/hard m/fifo m/shared; do
			expect_eq "buildah's layer: the same type, mode and link of $p" "$(grep "^$p " "$T_TMP/meta" | cut -d' ' -f1-4)" \
				"$(grep "^$p " "$T_TMP/bmeta" | cut -d' ' -f1-4)"
		done
		expect_eq "buildah's layer: the same capability record" "$(grep -o 'SCHILY.xattr.security.capability=[0-9a-f]*' "$T_TMP/meta")" \
			"$(grep -o 'SCHILY.xattr.security.capability=[0-9a-f]*' "$T_TMP/bmeta")"
		expect_eq "buildah leaves the socket out too" "$(grep -c '^m/sock ' "$T_TMP/bmeta")" 0
	else
		not_ok "buildah built the same RUN"; sed 's/^/#   /' "$T_TMP/b.log" | tail -5
	fi
	"${BR[@]}" rmi -a -f >/dev/null 2>&1
else
	skip "buildah's layer says the same" "needs root and buildah"
fi

# kiln rootfs: ext4 holds the attributes
expect_exit 0 "kiln rootfs of the image" "$KILN" rootfs "oci:$T_TMP/oci:1" -o "$T_TMP/m.ext4" --free 8M
expect_exit 0 "e2fsck -fn is clean" e2fsck -fn "$T_TMP/m.ext4"
debugfs -R "ea_list /bin/pinger" "$T_TMP/m.ext4" >"$T_TMP/ea" 2>/dev/null
expect_grep "debugfs: /bin/pinger has security.capability" "security\.capability" "$T_TMP/ea"
debugfs -R "ea_list /m/f" "$T_TMP/m.ext4" >"$T_TMP/ea" 2>/dev/null
expect_grep "debugfs: /m/f has its ACL" "system\.posix_acl_access" "$T_TMP/ea"
debugfs -R "stat /m/f" "$T_TMP/m.ext4" >"$T_TMP/st" 2>/dev/null
tr -s "\n" " " <"$T_TMP/st" >"$T_TMP/st1"
expect_grep "debugfs: /m/f setuid with two links" "Mode: +0?4674 .*Links: 2" "$T_TMP/st1"
if [ "$(id -u)" = 0 ] && mkdir -p "$T_TMP/mnt" && mount -o loop,ro "$T_TMP/m.ext4" "$T_TMP/mnt" 2>/dev/null; then
	expect_eq "loop mount: getcap /bin/pinger" "$(getcap "$T_TMP/mnt/bin/pinger" | sed 's/.* //')" "cap_net_raw=ep"
	expect_eq "loop mount: the ACL" "$("$T_TMP/xattr" get "$T_TMP/mnt/m/f" system.posix_acl_access)" $ACL
	expect_eq "loop mount: setuid, setgid, fifo, device, links" \
		"$(stat -c '%A %h %t,%T' "$T_TMP/mnt/m/f" "$T_TMP/mnt/m/shared" "$T_TMP/mnt/m/fifo" "$T_TMP/mnt/m/null")" \
		"-rwSrwxr-- 2 0,0
drwxrwsr-x 2 0,0
prw-r--r-- 1 0,0
crw-r--r-- 1 1,3"
	umount "$T_TMP/mnt"
else
	skip "loop mount checks" "needs root and loop devices"
fi

# a sandbox of the template reads them back
expect_exit 0 "sandbox from the template" "$KILN" sandbox create --json meta:1
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$T_TMP/out")
expect_exit 0 "sandbox: read the attributes" "$KILN" sandbox exec "$id" -- sh -c \
	'xattr get /bin/pinger security.capability; xattr get /bin/baseping security.capability; xattr get /m/f system.posix_acl_access; cd /m && stat -c "%n %A %h" f hard shared fifo null sparse; ls sock 2>&1 | grep -c sock'
expect_eq "sandbox: capabilities, ACL, modes" "$(cat "$T_TMP/out")" "$CAP
$CAP
$ACL
f -rwSrwxr-- 2
hard -rwSrwxr-- 2
shared drwxrwsr-x 2
fifo prw-r--r-- 1
null crw-r--r-- 1
sparse -rw-r--r-- 1
1"
"$KILN" sandbox kill "$id" >/dev/null 2>&1
