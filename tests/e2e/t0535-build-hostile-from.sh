#!/usr/bin/env bash
# t0535-build-hostile-from.sh — t0202's hostile layers (written with
# python's tarfile) as the image of COPY --from=<image> and of
# RUN --mount=from=<image>: each build either succeeds with the hostile
# entries kept inside its own tree (libarchive replaces a symlink it would
# have to write through) or fails with an error naming the layer;
# nothing is written outside, no crash.  Invalid whiteouts (".wh.", ".wh..",
# ".wh...") are refused as `kiln rootfs` refuses them (one classifier).
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
D=$PWD/tests/data/rootfs
W=$T_TMP/w
mkdir -p "$W"
export SOURCE_DATE_EPOCH=1700000000

# image NAME SPEC... [-- SPEC...]... : an image whose layers are the spec groups (as t0202)
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

# a busybox base for the RUN steps
B=$T_TMP/bb
umoci init --layout "$B" >/dev/null 2>&1
umoci new --image "$B:base" >/dev/null 2>&1
umoci unpack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
mkdir -p "$T_TMP/bbb/rootfs/bin" "$T_TMP/bbb/rootfs/tmp"
cp /bin/busybox "$T_TMP/bbb/rootfs/bin/busybox"
for a in sh ls cat find; do ln -s busybox "$T_TMP/bbb/rootfs/bin/$a"; done
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
C=$T_TMP/ctx
mkdir -p "$C"

rm -rf /tmp/kiln-escape-target /tmp/kiln-evil
canary=$T_TMP/canary
echo intact >"$canary"

# hostile NAME WANT [ERROR]: COPY --from and RUN --mount=from of image NAME;
# WANT is the exit status (0 contained, 1 refused), ERROR what stderr names.
hostile() {
	local name=$1 want=$2 msg=${3:-}
	printf 'FROM scratch\nCOPY --from=oci:%s:t / /x/\n' "$W/$name" >"$C/Dockerfile.copy-$name"
	printf 'FROM oci:%s:base\nRUN --mount=type=bind,from=oci:%s:t,target=/m find /m >/seen\n' "$B" "$W/$name" \
		>"$C/Dockerfile.run-$name"
	for how in copy run; do
		expect_exit "$want" "$name: $how --from=image exits $want" \
			"$KILN" build -f "$C/Dockerfile.$how-$name" --oci-out "$T_TMP/o-$how-$name" "$C"
		if [ -n "$msg" ]; then expect_grep "$name: $how: the error says why" "$msg" "$T_TMP/err"; fi
		if grep -q "AddressSanitizer\|Segmentation\|core dumped" "$T_TMP/err"; then
			not_ok "$name: $how: no crash"
		fi
	done
	if [ -e /tmp/kiln-escape-target ] || [ -e /tmp/kiln-evil ] || [ -e /tmp/kiln-escape-target ] ||
		[ "$(cat "$canary")" != intact ]; then
		not_ok "$name: nothing written outside the build"
	else
		ok "$name: nothing written outside the build"
	fi
	expect_exit 0 "$name: the store is intact" "$KILN" images
}

image badwh1 f:keep/f=1 -- f:keep/.wh...=x
hostile badwh1 1 "invalid whiteout name '\.wh\.\.\.'"
image badwh2 f:keep/f=1 -- f:keep/.wh..=x
hostile badwh2 1 "invalid whiteout name '\.wh\.\.'"
image badwh3 f:keep/f=1 -- f:.wh.=x
hostile badwh3 1 "invalid whiteout name '\.wh\.'"
image aufs f:keep/f=1 -- f:keep/.wh..wh.plnk=x f:keep/g=2
hostile aufs 0
expect_eq "aufs: AUFS metadata is not a whiteout nor a file" "$(tar tf "$W/aufs.1.tar" >/dev/null && \
	umoci unpack --image "$T_TMP/o-copy-aufs:latest" "$T_TMP/u-aufs" >/dev/null 2>&1 && ls -A "$T_TMP/u-aufs/rootfs/x/keep")" "f
g"
image dotdot f:ok=1 f:a/../../kiln-evil=x
hostile dotdot 0
image abs f:/abs/x=inside
hostile abs 0
image escape l:esc=../../../../../tmp/kiln-escape-target l:absl=/etc -- f:esc/pwned=x f:absl/passwd=p
hostile escape 0
# whiteouts through a symlink that points at a directory of the host
victim=$T_TMP/victim
mkdir -p "$victim/d" && echo keep >"$victim/precious" && echo keep >"$victim/d/inner"
image whout l:esc=$victim l:esc2=../../../../../../../../$victim -- f:esc/.wh.precious=x f:esc2/d/.wh..wh..opq=x f:esc/.wh.d=x
hostile whout 0
expect_eq "whout: whiteouts through symlinks removed nothing of the host" "$(cat "$victim/precious" "$victim/d/inner")" "keep
keep"
image hlout h:h=../../etc/passwd
hostile hlout 1 "layer .*"
image hlmiss h:h=nowhere
hostile hlmiss 1 "layer .*"
image loop l:a=b l:b=a f:a/x=1
hostile loop 0
image dups f:dup=1 f:dup=22 -- f:p=file -- d:p f:p/c=c -- f:p=again
hostile dups 0
umoci unpack --image "$T_TMP/o-copy-dups:latest" "$T_TMP/u-dups" >/dev/null 2>&1
expect_eq "dups: the last duplicate wins, file→dir→file ends a file" "$(cat "$T_TMP/u-dups/rootfs/x/dup"; echo; cat "$T_TMP/u-dups/rootfs/x/p")" "22
again"
python3 - "$W" <<'PY'
import sys, os
w = sys.argv[1]
open(w + "/junk.tar", "wb").write(os.urandom(5000))
PY
rm -rf "$W/junk" && python3 "$D/ociadd.py" "$W/junk" t "$W/junk.tar" none
hostile junk 1 "layer .*"
