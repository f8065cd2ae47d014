#!/usr/bin/env bash
# deb.sh — the Debian package end to end (`make test-deb`; not part of `make
# test`: it compiles the tree again and installs into /usr): build it from a
# copy of the tree with dpkg-buildpackage (the guest kernel from
# ~/.cache/kiln/kernel, not rebuilt), check it with lintian and its contents
# and dependencies, install it with apt, run e2e tests against /usr/bin/kiln,
# then purge it.  Installing needs root and no other kiln package installed.
. tests/e2e/lib.sh
src=$T_TMP/kiln
mkdir -p "$src"
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$src"
start=$(date +%s)
if (cd "$src" && dpkg-buildpackage -us -uc -b) >"$T_TMP/build.log" 2>&1; then
	ok "dpkg-buildpackage -us -uc -b ($(($(date +%s) - start)) s)"
else
	not_ok "dpkg-buildpackage -us -uc -b"
	sed 's/^/#   /' "$T_TMP/build.log" | tail -30
	exit 0
fi
expect_eq "the guest kernel came from the cache, not a rebuild" \
	"$(grep -c 'build-kernel: building' "$T_TMP/build.log")" 0
deb=$(ls "$T_TMP"/kiln_*_amd64.deb)
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$T_TMP/contents"
missing=
for f in /usr/bin/kiln /usr/lib/kiln/kiln-agent /usr/lib/kiln/kernel/release /usr/lib/kiln/fetch-kernel.sh \
	/usr/share/man/man1/kiln.1.gz /usr/share/man/man1/kiln-build.1.gz /usr/share/bash-completion/completions/kiln \
	/usr/share/doc/kiln/README.md.gz /etc/kiln/serve.json /lib/systemd/system/kiln-serve.service \
	/lib/systemd/system/kiln-gc.service /lib/systemd/system/kiln-gc.timer; do
	grep -qxF "$f" "$T_TMP/contents" || missing="$missing $f"
done
expect_eq "the package holds kiln, its kernel, agent, man pages, units, config" "${missing:-none missing}" "none missing"
deps=$(dpkg-deb -f "$deb" Depends)
missing=
for p in qemu-system-x86 qemu-utils busybox-static adduser libarchive13 libext2fs2 libcurl4 libzstd1 libsqlite3-0 \
	libjansson4 libmicrohttpd12 libssl3; do
	grep -qE "(^|, )$p( |,|$)" <<<"$deps" || missing="$missing $p"
done
expect_eq "Depends: Debian's runtime packages" "${missing:-none missing}" "none missing"
bu=$(dpkg-deb -f "$deb" Built-Using)
expect_eq "Built-Using names the kernel's and libc's sources ($bu)" \
	"$(grep -qE '(^|, )linux \(= ' <<<"$bu" && grep -qE '(^|, )glibc \(= ' <<<"$bu" && echo yes)" yes

lintian --fail-on none --info --display-level '>=pedantic' "$T_TMP"/kiln_*.changes >"$T_TMP/lintian" 2>&1
expect_eq "lintian: no errors or warnings (debian/README.source explains the rest)" \
	"$(grep -E '^[EW]: ' "$T_TMP/lintian")" ""
grep -E '^[EWIP]: ' "$T_TMP/lintian" | sort | uniq -c | sed 's/^/#   /' | head -30

if [ "$(id -u)" -ne 0 ] || dpkg-query -W -f '${Status}' kiln 2>/dev/null | grep -q installed; then
	skip "install and run the package" "not root, or a kiln package is installed already"
	exit 0
fi
trap 'dpkg --purge kiln >/dev/null 2>&1; rm -rf "$T_TMP"' EXIT
expect_exit 0 "apt-get install the .deb" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$deb"
expect_eq "the system user kiln" "$(getent passwd kiln | cut -d: -f6)" /var/lib/kiln
expect_exit 0 "/usr/bin/kiln finds the packaged kernel with a new KILN_HOME" \
	env -u KILN_KERNEL -u KILN_KERNEL_DIR KILN_HOME="$T_TMP/h" /usr/bin/kiln vm kernel
expect_grep "in /usr/lib/kiln/kernel" '^dir +/usr/lib/kiln/kernel$' "$T_TMP/out"
# The e2e tests against the installed binary (they use the tree only for data).
KILN=/usr/bin/kiln KILN_AGENT= tests/run.sh tests/e2e/t0001-cli.sh tests/e2e/t0300-vm-boot.sh \
	tests/e2e/t0520-build-run.sh tests/e2e/t0900-install.sh 2>&1 | grep -v '^[0-9]* passed, [0-9]* failed'
expect_exit 0 "dpkg --purge kiln" dpkg --purge kiln
expect_eq "purge removes /usr/bin/kiln, /usr/lib/kiln and the user" \
	"$([ -e /usr/bin/kiln ] || [ -e /usr/lib/kiln ] || getent passwd kiln >/dev/null || echo gone)" gone
