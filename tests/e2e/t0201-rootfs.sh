#!/usr/bin/env bash
# t0201-rootfs.sh — kiln rootfs on real images made here with umoci, skopeo and
# tar: the ext4 passes e2fsck -fn, and mounted read-only it has the same tree
# (types, modes, owners, sizes, contents, link targets, xattrs, mtimes, link
# counts) as `umoci unpack` of the same image; every transport; zstd; sparse
# files; htree; reproducible output; size limits; --from-dir.
. tests/e2e/lib.sh
D=$PWD/tests/data/rootfs
W=$T_TMP/w
MNT=$T_TMP/mnt
mkdir -p "$W" "$MNT"
trap 'umount "$MNT" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$T_TMP"' EXIT

# listing FILE.ext4 OUT : the tree inside an image, via a read-only loop mount
listing() {
	if ! mount -o ro,loop "$1" "$MNT"; then
		echo "mount failed" >"$2"
		return
	fi
	python3 "$D/treelist.py" "$MNT" --skip lost+found >"$2"
	umount "$MNT"
}

# --- an image built with umoci: two layers, then two more made by hand ---------
umoci init --layout "$W/oci" && umoci new --image "$W/oci:t" && umoci unpack --image "$W/oci:t" "$W/b" >/dev/null
R=$W/b/rootfs
mkdir -p "$R/etc" "$R/opq/sub" "$R/gone" "$R/usr/bin" "$R/big" "$R/tmp" "$R/deep/$(printf 'd%.0s/' $(seq 1 40))"
echo base >"$R/etc/base"; chown 1000:2000 "$R/etc/base"
echo keep >"$R/opq/sub/old"; echo x >"$R/gone/x"
echo tool >"$R/usr/bin/tool"; chmod 4755 "$R/usr/bin/tool"; chmod 2755 "$R/usr/bin"
chmod 1777 "$R/tmp"
mknod "$R/null" c 1 3; mknod "$R/sda" b 8 0; mkfifo "$R/fifo"
ln -s ../etc/base "$R/usr/link"; ln -s "$(printf 'long/%.0s' $(seq 1 30))target" "$R/usr/longlink"
echo long >"$R/$(printf 'n%.0s' $(seq 1 250))"
echo deep >"$R/deep/$(printf 'd%.0s/' $(seq 1 40))file"
for i in $(seq 1 2500); do : >"$R/big/entry-number-$i"; done
head -c 12M /dev/urandom >"$R/usr/bin/blob"
python3 -c "import os,sys; os.setxattr(sys.argv[1], 'user.kiln', b'v1'); os.setxattr(sys.argv[2], 'security.capability', bytes.fromhex('0100000200200000000000000000000000000000'))" "$R/etc/base" "$R/usr/bin/tool"
umoci repack --refresh-bundle --image "$W/oci:t" "$W/b" >/dev/null
rm -rf "$R/gone" "$R/opq/sub/old"; echo v2 >"$R/etc/base"; echo new >"$R/opq/sub/new"
umoci repack --image "$W/oci:t" "$W/b" >/dev/null
# layer 3: an opaque directory, a hardlink to a file from layer 1, a dir→file swap
python3 "$D/mklayer.py" "$W/l3.tar" d:opq f:opq/fresh=fresh f:opq/.wh..wh..opq= \
	h:usr/bin/tool-link=usr/bin/tool f:deep=now-a-file
python3 "$D/ociadd.py" "$W/oci" t "$W/l3.tar" gzip
# layer 4: a sparse file (GNU tar, PAX sparse format)
mkdir -p "$W/sp/var" && truncate -s 64M "$W/sp/var/sparse" &&
	printf 'middle' | dd of="$W/sp/var/sparse" bs=1 seek=33554432 conv=notrunc 2>/dev/null
tar --sparse --format=posix -C "$W/sp" -cf "$W/l4.tar" var
python3 "$D/ociadd.py" "$W/oci" t "$W/l4.tar" gzip

# --place-min 0: data written while the layers are read (the path big images take)
expect_exit 0 "kiln rootfs oci:DIR:TAG" "$KILN" rootfs "oci:$W/oci:t" --place-min 0 -o "$W/a.ext4"
expect_grep "summary names the layers" '4 layers' "$T_TMP/err"
expect_exit 0 "e2fsck -fn passes" e2fsck -fn "$W/a.ext4"
expect_grep "files are contiguous" '\(0\.0% non-contiguous\)' "$T_TMP/out"
dumpe2fs -h "$W/a.ext4" >"$W/sb" 2>/dev/null
expect_grep "journal, htree, extents, checksums" '^Filesystem features:.*has_journal.*dir_index.*extent.*metadata_csum' "$W/sb"
expect_grep "4 KiB blocks" '^Block size: +4096$' "$W/sb"
listing "$W/a.ext4" "$W/a.list"
umoci unpack --image "$W/oci:t" "$W/u" >/dev/null 2>&1
python3 "$D/treelist.py" "$W/u/rootfs" >"$W/u.list"
if cmp -s "$W/a.list" "$W/u.list"; then ok "tree equals umoci unpack ($(wc -l <"$W/u.list") paths)"; else
	not_ok "tree equals umoci unpack"; diff "$W/a.list" "$W/u.list" | head -20 | sed 's/^/#   /'; fi
expect_grep "opaque dir keeps its own layer's file" '^opq/fresh ' "$W/a.list"
if grep -q '^gone' "$W/a.list" || grep -q '^opq/sub' "$W/a.list"; then not_ok "whiteouts and opaque dir applied"; else ok "whiteouts and opaque dir applied"; fi
expect_grep "hardlink across layers" '^usr/bin/tool-link 100000 4755 0 0 5 n2 ' "$W/a.list"
expect_grep "xattr security.capability kept" '^usr/bin/tool .*x:security.capability=01000002' "$W/a.list"
expect_grep "setgid dir and sticky tmp" '^tmp 40000 1777' "$W/a.list"
expect_grep "device nodes" '^sda 60000 0644 0 0 8,0' "$W/a.list"

mount -o ro,loop "$W/a.ext4" "$MNT"
expect_eq "sparse file stays sparse" "$(stat -c '%s %b' "$MNT/var/sparse")" "67108864 8"
if lsattr -d "$MNT/big" | grep -q -- '-I-'; then ok "big directory has an htree index"; else not_ok "big directory has an htree index"; fi
umount "$MNT"
expect_exit 0 "debugfs reads the htree" debugfs -R "htree /big" "$W/a.ext4"
expect_grep "htree root present" 'Root node dump' "$T_TMP/out"

# --- the default for small images: tight layout, then a data pass ---------------
expect_exit 0 "kiln rootfs with a data pass" "$KILN" rootfs "oci:$W/oci:t" -o "$W/tp.ext4"
expect_exit 0 "data-pass image passes e2fsck" e2fsck -fn "$W/tp.ext4"
listing "$W/tp.ext4" "$W/tp.list"
if cmp -s "$W/tp.list" "$W/u.list"; then ok "data-pass tree equals umoci unpack"; else
	not_ok "data-pass tree equals umoci unpack"; diff "$W/tp.list" "$W/u.list" | head -10 | sed 's/^/#   /'; fi
if [ "$(stat -c %s "$W/tp.ext4")" -lt "$(stat -c %s "$W/a.ext4")" ]; then ok "data-pass layout is tighter"; else not_ok "data-pass layout is tighter"; fi

# --- reproducible ------------------------------------------------------------
"$KILN" rootfs "oci:$W/oci:t" --place-min 0 -o "$W/a2.ext4" 2>/dev/null
if cmp -s "$W/a.ext4" "$W/a2.ext4"; then ok "two runs give byte-identical images"; else not_ok "two runs give byte-identical images"; fi

# --- other transports and compressions ----------------------------------------
skopeo copy -q "oci:$W/oci:t" "oci-archive:$W/t.tar:t"
skopeo copy -q "oci:$W/oci:t" "docker-archive:$W/d.tar:kiln/t:latest"
expect_exit 0 "kiln rootfs oci-archive:FILE:TAG" "$KILN" rootfs "oci-archive:$W/t.tar:t" --place-min 0 -o "$W/oa.ext4"
if cmp -s "$W/a.ext4" "$W/oa.ext4"; then ok "oci-archive gives the same image"; else not_ok "oci-archive gives the same image"; fi
expect_exit 0 "kiln rootfs docker-archive:FILE" "$KILN" rootfs "docker-archive:$W/d.tar" -o "$W/da.ext4"
expect_exit 0 "docker-archive image passes e2fsck" e2fsck -fn "$W/da.ext4"
listing "$W/da.ext4" "$W/da.list"
if cmp -s "$W/da.list" "$W/u.list"; then ok "docker-archive tree equals umoci unpack"; else
	not_ok "docker-archive tree equals umoci unpack"; diff "$W/da.list" "$W/u.list" | head -10 | sed 's/^/#   /'; fi
for c in zstd none; do
	python3 "$D/ociadd.py" "$W/$c" t "$W/l4.tar" $c
done
python3 "$D/ociadd.py" "$W/gz" t "$W/l4.tar" gzip
umoci unpack --image "$W/gz:t" "$W/gzu" >/dev/null 2>&1
python3 "$D/treelist.py" "$W/gzu/rootfs" >"$W/gz.list"
for c in zstd none; do
	expect_exit 0 "kiln rootfs with a $c layer" "$KILN" rootfs "oci:$W/$c:t" -o "$W/$c.ext4"
	listing "$W/$c.ext4" "$W/$c.list"
	if cmp -s "$W/$c.list" "$W/gz.list"; then ok "$c layer gives the same tree"; else not_ok "$c layer gives the same tree"; fi
done

# --- errors --------------------------------------------------------------------
cp -r "$W/oci" "$W/bad"
blob=$(python3 -c "import json,sys; i=json.load(open(sys.argv[1]+'/index.json')); m=json.load(open(sys.argv[1]+'/blobs/sha256/'+i['manifests'][-1]['digest'][7:])); print(m['layers'][0]['digest'][7:])" "$W/bad")
printf 'XXXX' | dd of="$W/bad/blobs/sha256/$blob" bs=1 seek=200 conv=notrunc 2>/dev/null
expect_exit 1 "corrupted layer is refused" "$KILN" rootfs "oci:$W/bad:t" -o "$W/bad.ext4"
expect_grep "error names the blob and the mismatch" "layer 0 \(sha256:$blob\): digest mismatch" "$T_TMP/err"
if [ -e "$W/bad.ext4" ] || ls "$W"/bad.ext4.* >/dev/null 2>&1; then not_ok "no output left behind"; else ok "no output left behind"; fi
expect_exit 1 "unknown tag" "$KILN" rootfs "oci:$W/oci:nope" -o "$W/x.ext4"
expect_grep "unknown tag is named" "no image tagged 'nope'" "$T_TMP/err"
expect_exit 2 "unknown transport is a usage error" "$KILN" rootfs "ftp:x" -o "$W/x.ext4"
expect_exit 2 "missing -o is a usage error" "$KILN" rootfs "oci:$W/oci:t"
expect_exit 1 "content larger than --size" "$KILN" rootfs "oci:$W/oci:t" --size 8M -o "$W/small.ext4"
expect_grep "size error is clear" 'content needs about .* use a larger --size' "$T_TMP/err"
expect_exit 0 "fixed --size" "$KILN" rootfs "oci:$W/oci:t" --size 100M -o "$W/fixed.ext4"
expect_eq "image has the fixed size" "$(stat -c %s "$W/fixed.ext4")" "104857600"
expect_exit 0 "--free margin" "$KILN" rootfs "oci:$W/oci:t" --free 1G -o "$W/free.ext4"
free_blocks=$(dumpe2fs -h "$W/free.ext4" 2>/dev/null | awk -F: '/^Free blocks/ {print $2+0}')
if [ "${free_blocks:-0}" -ge 262144 ]; then ok "--free 1G leaves at least 1 GiB free"; else not_ok "--free 1G leaves at least 1 GiB free ($free_blocks blocks)"; fi

# --- a plain directory -----------------------------------------------------------
expect_exit 0 "kiln rootfs --from-dir" "$KILN" rootfs --from-dir "$W/u/rootfs" -o "$W/dir.ext4"
expect_exit 0 "--from-dir image passes e2fsck" e2fsck -fn "$W/dir.ext4"
listing "$W/dir.ext4" "$W/dir.list"
if cmp -s "$W/dir.list" "$W/u.list"; then ok "--from-dir tree equals the directory"; else
	not_ok "--from-dir tree equals the directory"; diff "$W/dir.list" "$W/u.list" | head -10 | sed 's/^/#   /'; fi
