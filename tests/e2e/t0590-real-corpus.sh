#!/usr/bin/env bash
# t0590-real-corpus.sh — the real-world corpus (tests/data/real/, `make
# test-real`): Dockerfiles shaped like agent templates on a Debian 12 base made
# from Debian's mirror (examples/debian-base.sh, cached): apt-get with
# ca-certificates, curl and python3-numpy, a package purge (whiteouts of files
# and directories), useradd + USER + COPY --chown, a 20,000-file tree,
# UTF-8, Latin-1 and invalid UTF-8 names, file capabilities (ping), npm ci of
# a real package tree from the npm registry and HTTPS through the network's
# proxy (its CA a build secret), a multi-stage gcc build with COPY --from.
# kiln and buildah (vfs, chroot) build each once from the same base; the
# merged file trees (xattrs included) and configs are equal; each kiln build
# is a template whose start command serves HTTP in a restored sandbox.
# Documented differences: buildah's RUN leaves the mount targets of its
# --mount options and an /etc/hosts (the base has none) as empty entries
# (t0510 documents those), and files
# whose bytes hold the build's time (apt/dpkg logs, debconf's cache) are
# compared without their content.
# Its ~12 min mostly wait on one TCG guest, so the suite runs it beside the
# other tests (tests/run.sh):
# run.sh: alongside
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh

for t in buildah umoci debootstrap; do
	command -v "$t" >/dev/null || { not_ok "real corpus needs $t (make deps)"; exit 0; }
done
[ "$(id -u)" = 0 ] || { skip "real corpus" "needs root (debootstrap, buildah)"; exit 0; }
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >"$T_TMP/fetch.log" 2>&1 || { not_ok "guest kernel"; exit 0; }
CA=/etc/ssl/certs/ca-certificates.crt
BR=(buildah --storage-driver vfs --root "$T_TMP/broot" --runroot "$T_TMP/brun")
L=/tmp/kiln-real-base-$$ # buildah wants a plain lowercase path for an oci: base
cleanup() {
	[ -n "${BPID:-}" ] && kill "$BPID" 2>/dev/null && wait "$BPID" 2>/dev/null
	for id in $(ls "$KILN_HOME/sandboxes" 2>/dev/null); do "$KILN" sandbox kill "$id" >/dev/null 2>&1; done
	"${BR[@]}" rm -a >/dev/null 2>&1
	"${BR[@]}" rmi -a -f >/dev/null 2>&1
	rm -rf "$T_TMP" "$L"
}
trap cleanup EXIT

start=$(date +%s)
if base=$(examples/debian-base.sh 2>"$T_TMP/base.err"); then
	ok "Debian 12 base from Debian's mirror ($base, $(($(date +%s) - start)) s)"
else
	not_ok "Debian 12 base (examples/debian-base.sh)"
	sed 's/^/#   /' "$T_TMP/base.err" | tail -5
	exit 0
fi
base=${base#oci:}
ln -s "${base%:*}" "$L"
REF=oci:$L:${base##*:}

# contexts: the committed files plus names that are no UTF-8 and npm's tarball
C=$T_TMP/ctx
cases=$(tests/data/real/context.sh "$C" 2>"$T_TMP/ctx.err") || { not_ok "corpus contexts"; cat "$T_TMP/ctx.err"; exit 0; }
case " $cases " in *" node "*) ;; *) skip "node case" "no npm release tarball and no npm to fetch it (tests/data/real/context.sh)" ;; esac

# buildah builds in the background (natively, while kiln's TCG guest runs)
(
	for d in $cases; do
		s=$(date +%s.%N)
		"${BR[@]}" bud --isolation chroot --build-arg "BASE=$REF" --secret "id=ca,src=$CA" -t "real-$d" \
			-f "$C/$d/Dockerfile" "$C/$d" >"$T_TMP/bud-$d.log" 2>&1 &&
			"${BR[@]}" push "real-$d" "oci:$T_TMP/bo-$d:latest" >/dev/null 2>&1
		echo $? "$(echo "$(date +%s.%N) - $s" | bc)" >"$T_TMP/bud-$d.rc"
	done
) &
BPID=$!

config() { python3 - "$1" <<'PY'
import json, sys
d = sys.argv[1]
idx = json.load(open(d + "/index.json"))
m = json.load(open(d + "/blobs/sha256/" + idx["manifests"][-1]["digest"][7:]))
c = json.load(open(d + "/blobs/sha256/" + m["config"]["digest"][7:]))["config"]
keys = ["Env", "Cmd", "Entrypoint", "WorkingDir", "User", "ExposedPorts", "Volumes", "Labels", "StopSignal"]
c["Labels"] = {k: v for k, v in (c.get("Labels") or {}).items() if k != "io.buildah.version"}
print(json.dumps({k: c.get(k) or None for k in keys}, sort_keys=True))
PY
}
# Files whose bytes hold the build's time; buildah's empty --mount targets and /etc/hosts.
CONTENT_IGNORED=(var/log/dpkg.log var/log/apt/history.log var/log/apt/term.log var/log/apt/eipp.log.xz
	var/log/alternatives.log var/cache/debconf/config.dat var/cache/debconf/config.dat-old
	var/cache/debconf/templates.dat var/cache/debconf/templates.dat-old var/cache/ldconfig/aux-cache)
buildah_mount_stubs() {
	grep -a -v -x -e 'etc/hosts file 755 0:0 e3b0c44298fc1c14 -' -e 'run/secrets dir 755 0:0 - -' -e 'run/secrets/ca file 755 0:0 e3b0c44298fc1c14 -' \
		-e 'tmp/npm.tgz file 755 0:0 e3b0c44298fc1c14 -'
}
port() { case $1 in c) echo 8080 ;; python) echo 8000 ;; node) echo 3000 ;; esac; }
ca_sum=$(sha256sum "$CA" | cut -c1-16)

for d in $cases; do
	p=$(port "$d")
	probe="exec 3<>/dev/tcp/127.0.0.1/$p && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && cat <&3"
	s=$(date +%s.%N)
	expect_exit 0 "kiln builds $d as a template" "$KILN" build --json --secret "id=ca,src=$CA" \
		--build-arg "BASE=$REF" -t "real-$d" --oci-out "$T_TMP/ko-$d" \
		--ready-cmd "bash -c 'exec 3<>/dev/tcp/127.0.0.1/$p'" -f "$C/$d/Dockerfile" "$C/$d"
	cp "$T_TMP/out" "$T_TMP/events-$d.json"
	ksecs=$(echo "$(date +%s.%N) - $s" | bc)
	python3 tests/e2e/oci_tree.py "$T_TMP/ko-$d:latest" --ignore-content "${CONTENT_IGNORED[@]}" \
		>"$T_TMP/ktree-$d" 2>"$T_TMP/ktree-$d.err" || sed 's/^/#   kiln tree: /' "$T_TMP/ktree-$d.err" | tail -3
	if "$KILN" run "real-$d" -- bash -c "$probe" >"$T_TMP/http-$d" 2>&1; then :; fi
	expect_grep "$d: the template's start command serves from a restored sandbox" "hello from $d" "$T_TMP/http-$d"
	if grep -a -q " $ca_sum " "$T_TMP/ktree-$d" || grep -a -q '^run/secrets' "$T_TMP/ktree-$d"; then
		not_ok "$d: the CA secret is in no layer"
	else
		ok "$d: the CA secret is in no layer"
	fi
	while [ ! -f "$T_TMP/bud-$d.rc" ] && kill -0 "$BPID" 2>/dev/null; do sleep 1; done
	read -r brc bsecs <"$T_TMP/bud-$d.rc" 2>/dev/null || brc=1
	expect_eq "buildah builds $d" "$brc" 0
	if [ "$brc" != 0 ]; then
		tail -5 "$T_TMP/bud-$d.log" | sed 's/^/#   buildah: /'
		continue
	fi
	echo "# $d: kiln build + template $ksecs s (TCG), buildah bud $bsecs s (native, concurrently)"
	python3 tests/e2e/oci_tree.py "$T_TMP/bo-$d:latest" --ignore-content "${CONTENT_IGNORED[@]}" |
		buildah_mount_stubs >"$T_TMP/btree-$d"
	if diff "$T_TMP/btree-$d" "$T_TMP/ktree-$d" >"$T_TMP/diff-$d"; then
		ok "$d: same file tree as buildah, xattrs included ($(wc -l <"$T_TMP/ktree-$d") paths)"
	else
		not_ok "$d: file trees differ (< buildah, > kiln; $(grep -c '^[<>]' "$T_TMP/diff-$d") lines)"
		sed 's/^/#   /' "$T_TMP/diff-$d" | head -30
	fi
	expect_eq "$d: same config as buildah" "$(config "$T_TMP/ko-$d")" "$(config "$T_TMP/bo-$d")"
done
wait "$BPID" 2>/dev/null
BPID=
# what each image must hold, whichever builder made it
grep -a -q '^usr/bin/ping file 755 0:0 [0-9a-f]* security.capability=' "$T_TMP/ktree-python" &&
	ok "python: /usr/bin/ping keeps its file capability" || not_ok "python: /usr/bin/ping keeps its file capability"
n=$(grep -a -c '^home/agent/data/d[0-9]*/f[0-9]*\.txt file 644 1000:1000 ' "$T_TMP/ktree-python")
expect_eq "python: the data tree has 20,000 files owned by the USER" "$n" 20000
grep -a -q '^home/agent/app/names/caf\\xe9-latin1 file 644 1000:1000 ' "$T_TMP/ktree-python" &&
	ok "python: a Latin-1 name COPYed --chown byte for byte" || not_ok "python: a Latin-1 name COPYed --chown byte for byte"
grep -a -q '^usr/bin/curl ' "$T_TMP/ktree-python" && not_ok "python: curl purged" || ok "python: curl purged"
grep -a -q '^usr/local/bin/hello-httpd file 755 0:0 ' "$T_TMP/ktree-c" && ! grep -a -q '^usr/bin/gcc' "$T_TMP/ktree-c" &&
	ok "c: only the binary came from the build stage" || not_ok "c: only the binary came from the build stage"
