#!/usr/bin/env bash
# t0510-buildah-diff.sh — differential check against buildah (vfs, chroot):
# the same Dockerfiles and base give the same file trees (paths, types,
# modes, owners, link targets, content) and the same config fields; D4's
# RUN steps (files made, deleted, replaced directories, chmod/chown, USER,
# WORKDIR, HOME; a COPY into a directory a RUN gave to USER, who then writes
# in it) run in buildah's chroot and in kiln's builder VM.
# Documented differences (BuildKit's behaviour, which kiln follows, is not
# buildah's): a COPY glob matching nothing is an error in buildah, and a
# directory excluded by .dockerignore with an exception inside is an error.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh

if [ "$(id -u)" != 0 ]; then
	skip "buildah differential check" "needs root (buildah --isolation chroot)"
	exit 0
fi
if ! command -v buildah >/dev/null; then
	not_ok "buildah is installed (deps/builder.txt)"
	exit 0
fi
vm_setup # the guest kernel, for D4's RUN steps
BR=(buildah --storage-driver vfs --root "$T_TMP/broot" --runroot "$T_TMP/brun")
# buildah wants a lowercase path for an oci: base
B=/tmp/kiln-e2e-bb-$$
trap '"${BR[@]}" rm -a >/dev/null 2>&1; "${BR[@]}" rmi -a -f >/dev/null 2>&1; rm -rf "$T_TMP" "$B"' EXIT

C=$T_TMP/ctx
mkdir -p "$C/src/sub" "$C/skip"
echo hello >"$C/a.txt"
echo b >"$C/b.txt"
echo 'int main;' >"$C/src/main.c"
chmod 600 "$C/src/main.c"
echo x >"$C/src/sub/x.h"
ln -s main.c "$C/src/link"
echo no >"$C/skip/no"
echo log >"$C/x.log"
mkdir -p "$T_TMP/t/d" && echo in-tar >"$T_TMP/t/d/f" && tar czf "$C/t.tar.gz" -C "$T_TMP/t" d
printf 'skip\n*.log\n' >"$C/.dockerignore"

# a busybox base with users, made with umoci
umoci init --layout "$B" >/dev/null 2>&1
umoci new --image "$B:base" >/dev/null 2>&1
umoci unpack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
mkdir -p "$T_TMP/bbb/rootfs/bin" "$T_TMP/bbb/rootfs/etc" "$T_TMP/bbb/rootfs/srv"
cp /bin/busybox "$T_TMP/bbb/rootfs/bin/busybox"
for a in sh cat chmod chown echo id ln mkdir rm touch; do ln -s busybox "$T_TMP/bbb/rootfs/bin/$a"; done
ln -s /srv "$T_TMP/bbb/rootfs/data"
printf 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n' >"$T_TMP/bbb/rootfs/etc/passwd"
printf 'root:x:0:\napp:x:1000:\nstaff:x:50:\n' >"$T_TMP/bbb/rootfs/etc/group"
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
umoci config --image "$B:base" --config.env PATH=/bin --config.cmd sh >/dev/null 2>&1

cat >"$T_TMP/D1" <<'DF'
FROM scratch
WORKDIR /app
COPY a.txt .
COPY src/ /app/src/
COPY src /plain
COPY --chmod=700 --chown=5:6 a.txt /bin/tool
COPY *.txt /txt/
COPY a.txt /newdir/deep/file
COPY src/link /followed
ENV A=1 B="two words"
LABEL x=y
EXPOSE 80/tcp 53/udp
VOLUME ["/vol"]
USER 1000:1000
STOPSIGNAL SIGINT
ENTRYPOINT ["/bin/tool", "-x"]
CMD ["arg"]
DF
cat >"$T_TMP/D2" <<DF
FROM oci:$B:base
COPY --chown=app:staff a.txt /home/app/
COPY b.txt /data/
ADD t.tar.gz /unpacked/
ADD --chown=1000:50 t.tar.gz /unpacked2
WORKDIR /srv/work
COPY . /all/
ENV PATH=/usr/bin:\$PATH
CMD echo hi
DF
cat >"$T_TMP/D3" <<'DF'
FROM scratch AS one
COPY --chown=7:8 src /s/
FROM scratch
COPY --from=one /s /from/
COPY --from=one /s/sub/x.h /single
COPY --from=one /s/sub/../main.c /via/
COPY --from=one /s/*.c /globbed/
DF

# RUN steps: buildah's chroot isolation against kiln's builder VM
cat >"$T_TMP/D4" <<'DF'
FROM oci:BASE
COPY a.txt b.txt /in/
RUN mkdir -p /r/d /tmp && chmod 1777 /tmp && echo x >/r/d/f && chmod 640 /r/d/f && ln -s d/f /r/link && \
    rm /in/b.txt && chown 1000:50 /r/d && echo "$HOME" >/r/home
RUN rm -rf /srv && mkdir /srv && echo y >/srv/new && cat /in/a.txt >/srv/copy
COPY src /src/
RUN rm /src/sub/x.h && chmod 600 /src/main.c && echo more >>/src/main.c
WORKDIR /w
RUN touch t && echo "$(pwd)" >where
RUN mkdir -p /home/app && chown 1000:1000 /home/app && chmod 700 /home/app
COPY --chown=app:app a.txt /home/app/sub/
USER app
RUN id -u >/tmp/uid && echo "$HOME" >/tmp/home && touch /home/app/by-app
DF
sed -i "s|BASE|$B:base|" "$T_TMP/D4"

listing() { (cd "$1/rootfs" && find . -mindepth 1 | sort | while read -r p; do
	if [ -f "$p" ] && [ ! -L "$p" ]; then s=$(sha256sum "$p" | cut -c1-16); else s=-; fi
	printf '%s %s\n' "$(stat -c '%n %F %a %u:%g' "$p")" "$( [ -L "$p" ] && readlink "$p" || echo "$s")"
done); }
config() { python3 - "$1" <<'PY'
import json, sys
d = sys.argv[1]
idx = json.load(open(d + "/index.json"))
m = json.load(open(d + "/blobs/sha256/" + idx["manifests"][-1]["digest"][7:]))
c = json.load(open(d + "/blobs/sha256/" + m["config"]["digest"][7:]))["config"]
keys = ["Env", "Cmd", "Entrypoint", "WorkingDir", "User", "ExposedPorts", "Volumes", "Labels", "StopSignal"]
labels = {k: v for k, v in (c.get("Labels") or {}).items() if k != "io.buildah.version"}
c["Labels"] = labels
print(json.dumps({k: c.get(k) or None for k in keys}, sort_keys=True))
PY
}

# Documented difference: buildah's RUN (chroot isolation) leaves the mount
# points it made (/dev /proc /sys /run, empty) and the empty /etc/hosts,
# /etc/hostname, /etc/resolv.conf it bind-mounted over in the image; BuildKit
# and kiln do not commit them.  Only those exact empty entries are ignored.
buildah_run_stubs() {
	grep -v -x -e './dev directory 755 0:0 -' -e './proc directory 755 0:0 -' -e './sys directory 755 0:0 -' \
		-e './run directory 755 0:0 -' -e './etc/hostname regular empty file 755 0:0 e3b0c44298fc1c14' \
		-e './etc/hosts regular empty file 755 0:0 e3b0c44298fc1c14' \
		-e './etc/resolv.conf regular empty file 755 0:0 e3b0c44298fc1c14'
}

for n in 1 2 3 4; do
	"${BR[@]}" bud --isolation chroot -f "$T_TMP/D$n" -t "d$n" "$C" >"$T_TMP/bud$n.log" 2>&1 &&
		"${BR[@]}" push "d$n" "oci:$T_TMP/bo$n:latest" >/dev/null 2>&1 &&
		umoci unpack --image "$T_TMP/bo$n:latest" "$T_TMP/bu$n" >/dev/null 2>&1
	rc=$?
	expect_eq "buildah builds D$n" "$rc" 0
	[ "$rc" = 0 ] || tail -3 "$T_TMP/bud$n.log" | sed 's/^/#   buildah: /'
	expect_exit 0 "kiln builds D$n" "$KILN" build -f "$T_TMP/D$n" --oci-out "$T_TMP/ko$n" "$C"
	umoci unpack --image "$T_TMP/ko$n:latest" "$T_TMP/ku$n" >/dev/null 2>&1
	if diff <(listing "$T_TMP/bu$n" | buildah_run_stubs) <(listing "$T_TMP/ku$n") >"$T_TMP/diff$n"; then
		ok "D$n: same file tree as buildah"
	else
		not_ok "D$n: file trees differ (< buildah, > kiln)"
		sed 's/^/#   /' "$T_TMP/diff$n" | head -20
	fi
	expect_eq "D$n: same config as buildah" "$(config "$T_TMP/ko$n")" "$(config "$T_TMP/bo$n")"
done
