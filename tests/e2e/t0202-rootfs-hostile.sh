#!/usr/bin/env bash
# t0202-rootfs-hostile.sh — hostile layers written with python's tarfile:
# "..", absolute paths, symlinks and hardlinks that point outside the root,
# duplicates, file→dir→file, symlink loops, tar bombs (huge sizes, many
# entries), truncated and non-tar blobs.  Each is either contained inside the
# image (checked with debugfs) or refused with a clear error; never a crash.
. tests/e2e/lib.sh
D=$PWD/tests/data/rootfs
W=$T_TMP/w
mkdir -p "$W"

# image NAME SPEC... [-- SPEC...]... : an image whose layers are the spec groups
image() {
	local name=$1 n=0 specs=()
	shift
	rm -rf "${W:?}/$name"
	for s in "$@" --; do
		if [ "$s" = -- ]; then
			python3 "$D/mklayer.py" "$W/$name.$n.tar" "${specs[@]}"
			python3 "$D/ociadd.py" "$W/$name" t "$W/$name.$n.tar" none
			n=$((n + 1))
			specs=()
		else
			specs+=("$s")
		fi
	done
}

# cat_in IMG PATH : a file's content inside an ext4 image
cat_in() { debugfs -R "cat $2" "$1" 2>/dev/null; }

image dotdot f:ok=1 f:a/../../evil=x
expect_exit 1 "'..' in a path is refused" "$KILN" rootfs "oci:$W/dotdot:t" -o "$W/o.ext4"
expect_grep "'..' error names the entry" "entry 'a/../../evil': path 'a/../../evil' contains '..'" "$T_TMP/err"

image abs f:/abs/x=inside
expect_exit 0 "absolute path accepted" "$KILN" rootfs "oci:$W/abs:t" -o "$W/abs.ext4"
expect_eq "absolute path lands under the root" "$(cat_in "$W/abs.ext4" /abs/x)" "inside"

rm -rf /tmp/kiln-escape-target
image escape l:esc=../../../../../tmp/kiln-escape-target l:absl=/etc -- f:esc/pwned=x f:absl/passwd=p
expect_exit 0 "symlink escape is contained" "$KILN" rootfs "oci:$W/escape:t" -o "$W/esc.ext4"
expect_eq "write through ../ symlink stays in the image" "$(cat_in "$W/esc.ext4" /tmp/kiln-escape-target/pwned)" "x"
expect_eq "write through absolute symlink stays in the image" "$(cat_in "$W/esc.ext4" /etc/passwd)" "p"
if [ -e /tmp/kiln-escape-target ]; then not_ok "nothing written on the host"; else ok "nothing written on the host"; fi
expect_exit 0 "escape image passes e2fsck" e2fsck -fn "$W/esc.ext4"

image hlout h:h=../../etc/passwd
expect_exit 1 "hardlink out of the root is refused" "$KILN" rootfs "oci:$W/hlout:t" -o "$W/o.ext4"
expect_grep "hardlink error is clear" "hardlink target: path '../../etc/passwd' contains '..'" "$T_TMP/err"
image hlsym f:etc/shadow=s l:out=../../.. -- h:h2=out/etc/shadow
expect_exit 0 "hardlink through a symlink is resolved inside" "$KILN" rootfs "oci:$W/hlsym:t" -o "$W/hl.ext4"
expect_grep "it links the image's own file" 'Links: 2' <(debugfs -R "stat /h2" "$W/hl.ext4" 2>/dev/null)
image hlmiss h:h=nowhere
expect_exit 1 "hardlink to nothing is refused" "$KILN" rootfs "oci:$W/hlmiss:t" -o "$W/o.ext4"
expect_grep "missing target is named" "hardlink target 'nowhere' does not exist" "$T_TMP/err"

image dups f:dup=1 f:dup=22 -- f:p=file -- d:p f:p/c=c -- f:p=again
expect_exit 0 "duplicates and file→dir→file" "$KILN" rootfs "oci:$W/dups:t" -o "$W/dups.ext4"
expect_eq "the last duplicate wins" "$(cat_in "$W/dups.ext4" /dup)" "22"
expect_eq "file→dir→file ends a file" "$(cat_in "$W/dups.ext4" /p)" "again"
expect_exit 0 "replacement image passes e2fsck" e2fsck -fn "$W/dups.ext4"

image loop l:a=b l:b=a f:a/x=1
expect_exit 1 "symlink loop is refused" "$KILN" rootfs "oci:$W/loop:t" -o "$W/o.ext4"
expect_grep "loop error is clear" "too many levels of symbolic links" "$T_TMP/err"

image badwh f:.wh..=x
expect_exit 1 "whiteout of '..' is refused" "$KILN" rootfs "oci:$W/badwh:t" -o "$W/o.ext4"

image bomb big:huge=1099511627776
expect_exit 1 "a 1 TiB declared file hits the limit" "$KILN" rootfs "oci:$W/bomb:t" -o "$W/o.ext4"
expect_grep "size limit error is clear" "file size 1099511627776 is over the limit" "$T_TMP/err"
image sum f:a=0123456789 f:b=0123456789
expect_exit 1 "--max-bytes caps declared content" "$KILN" rootfs "oci:$W/sum:t" --max-bytes 15 -o "$W/o.ext4"
expect_grep "byte limit error is clear" "layers declare more than 15 bytes" "$T_TMP/err"
image many many:5000
expect_exit 1 "--max-entries caps entries" "$KILN" rootfs "oci:$W/many:t" --max-entries 1000 -o "$W/o.ext4"
expect_grep "entry limit error is clear" "more than 1000 entries" "$T_TMP/err"
expect_exit 0 "within the limit it builds" "$KILN" rootfs "oci:$W/many:t" --max-entries 6000 -o "$W/many.ext4"

# a truncated layer whose descriptor matches its (short) bytes, and a non-tar
python3 - "$W" <<'EOF'
import sys, os, subprocess
w = sys.argv[1]
full = open(w + "/many.0.tar", "rb").read()
open(w + "/trunc.tar", "wb").write(full[:len(full) // 2 + 100])
open(w + "/junk.tar", "wb").write(os.urandom(5000))
EOF
rm -rf "$W/trunc" "$W/junk"
python3 "$D/ociadd.py" "$W/trunc" t "$W/trunc.tar" gzip
python3 "$D/ociadd.py" "$W/junk" t "$W/junk.tar" none
expect_exit 1 "truncated layer is refused" "$KILN" rootfs "oci:$W/trunc:t" -o "$W/o.ext4"
expect_grep "truncation error names the layer" "layer 0 \(sha256:[0-9a-f]{64}\)" "$T_TMP/err"
expect_exit 1 "non-tar layer is refused" "$KILN" rootfs "oci:$W/junk:t" -o "$W/o.ext4"
expect_grep "non-tar error names the layer" "layer 0 \(sha256:[0-9a-f]{64}\)" "$T_TMP/err"
if ls "$W"/o.ext4* >/dev/null 2>&1; then not_ok "failed builds leave no file"; else ok "failed builds leave no file"; fi
