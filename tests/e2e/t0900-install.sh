#!/usr/bin/env bash
# t0900-install.sh — `make install DESTDIR=... PREFIX=/usr` lays out kiln, its
# agent, its guest kernel, man pages, completion and docs; the installed kiln,
# run from DESTDIR, finds its own kernel and agent with a brand-new KILN_HOME
# and boots a VM with them (one VM); a kiln with no kernel anywhere lists where
# it looked; the man pages say what --help says; the systemd units verify;
# `make uninstall` removes every file install put there.  $KILN (e.g. the
# .deb's /usr/bin/kiln) must find its kernel the same way.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
img=$T_TMP/root.ext4
dest=$T_TMP/dest
lib=$dest/usr/lib/kiln

# The tree is built already (make all); install only copies.
if make -s install DESTDIR="$dest" PREFIX=/usr KERNEL="$KILN_KERNEL_DIR" >"$T_TMP/install.log" 2>&1; then
	ok "make install DESTDIR PREFIX=/usr"
else
	not_ok "make install DESTDIR PREFIX=/usr"
	sed 's/^/#   /' "$T_TMP/install.log" | tail -20
	exit 0
fi
rel=$(cat "$KILN_KERNEL_DIR/release")
missing=
for f in usr/bin/kiln usr/lib/kiln/kiln-agent usr/lib/kiln/kernel/release "usr/lib/kiln/kernel/root/boot/vmlinuz-$rel" \
	usr/lib/kiln/fetch-kernel.sh usr/lib/kiln/build-kernel.sh usr/lib/kiln/kernel.config \
	usr/share/man/man1/kiln.1 usr/share/man/man1/kiln-build.1 usr/share/man/man1/kiln-sandbox.1 \
	usr/share/bash-completion/completions/kiln usr/share/doc/kiln/README.md usr/share/doc/kiln/ARCHITECTURE.md; do
	[ -f "$dest/$f" ] || missing="$missing $f"
done
expect_eq "the installed layout" "${missing:-none missing}" "none missing"
expect_eq "kiln and kiln-agent are executable" \
	"$([ -x "$dest/usr/bin/kiln" ] && [ -x "$lib/kiln-agent" ] && [ -x "$lib/fetch-kernel.sh" ] && echo yes)" yes
expect_eq "the kernel is the tree's" "$(cat "$lib/kernel/release")" "$rel"
expect_eq "installed-files lists every file installed" \
	"$(cd "$dest/usr" && find . ! -type d | sed 's|^\./||' | sort)" "$(sort "$lib/installed-files")"

# The installed kiln alone: no override in the environment, a new KILN_HOME.
fresh() { env -u KILN_KERNEL -u KILN_KERNEL_DIR -u KILN_AGENT KILN_HOME="$T_TMP/fresh-$1" "${@:2}"; }
expect_exit 0 "installed kiln: kiln vm kernel with a new KILN_HOME" fresh a "$dest/usr/bin/kiln" vm kernel
expect_grep "finds PREFIX/lib/kiln/kernel beside itself" "^dir +$lib/kernel\$" "$T_TMP/out"
expect_exit 0 "installed kiln boots a VM with its own kernel and agent" \
	fresh b "$dest/usr/bin/kiln" vm run --timeout 180 "$img" -- sh -c 'uname -r; cat /etc/motd'
expect_eq "the guest runs the installed kernel, the agent answers" "$(tr '\n' ' ' <"$T_TMP/out")" "$rel kiln test rootfs "

# Overrides: $KILN_HOME/kernel when it holds a kernel, $KILN_KERNEL alone.
mkdir -p "$T_TMP/fresh-c/kernel/root/boot"
echo x-home >"$T_TMP/fresh-c/kernel/release"
: >"$T_TMP/fresh-c/kernel/root/boot/vmlinuz-x-home"
expect_exit 0 "KILN_HOME/kernel overrides the installed kernel" fresh c "$dest/usr/bin/kiln" vm kernel
expect_grep "names the KILN_HOME kernel" '^release +x-home$' "$T_TMP/out"
expect_exit 1 "KILN_KERNEL is the only place looked at" \
	fresh a env KILN_KERNEL="$T_TMP/nokernel" "$dest/usr/bin/kiln" vm kernel
expect_grep "says KILN_KERNEL has no kernel" "no guest kernel in $T_TMP/nokernel \\(set by \\\$KILN_KERNEL" "$T_TMP/err"

# A kiln with no kernel anywhere: the error lists every place it looked.
mkdir -p "$T_TMP/bare/bin"
cp "$dest/usr/bin/kiln" "$T_TMP/bare/bin/kiln"
expect_exit 1 "a kiln without a kernel" fresh d "$T_TMP/bare/bin/kiln" vm kernel
expect_grep "lists where it looked" \
	"looked in $T_TMP/fresh-d/kernel, $T_TMP/bare/lib/kiln/kernel, $T_TMP/bare/build/kernel .*kiln vm kernel --fetch" \
	"$T_TMP/err"

# $KILN itself (the checkout's bin/kiln, or an installed one) finds a kernel
# beside itself the same way.
top=$(dirname "$(dirname "$(readlink -f "$KILN")")")
expect_exit 0 "\$KILN finds its kernel with a new KILN_HOME" fresh e "$KILN" vm kernel
expect_grep "beside itself" "^dir +($top/lib/kiln/kernel|$top/build/kernel)\$" "$T_TMP/out"

# Man pages: one per command, each holding the command's --help (and its
# sub-commands') verbatim, rendered by man without warnings.
k=$dest/usr/bin/kiln
man1=$dest/usr/share/man/man1
unroff() { awk '/^\.fi$/ { on = 0 } on { print } /^\.nf$/ { on = 1 }' "$1" | sed -e 's/^\\&//' -e 's/\\-/-/g' -e 's/\\e/\\/g'; }
bad= pages=0
while IFS=$'\t' read -r cmd _; do
	pages=$((pages + 1))
	want=$("$k" "$cmd" --help; if subs=$("$k" "$cmd" --list-commands 2>/dev/null); then
		cut -f1 <<<"$subs" | while read -r s; do "$k" "$cmd" "$s" --help; done
	fi)
	[ -f "$man1/kiln-$cmd.1" ] && [ "$(unroff "$man1/kiln-$cmd.1")" = "$want" ] || bad="$bad $cmd"
done < <("$k" --list-commands)
expect_eq "each command's man page holds its --help ($pages pages)" "${bad:-all match}" "all match"
expect_eq "kiln(1) holds kiln --help" "$(unroff "$man1/kiln.1")" "$("$k" --help)"
expect_eq "no man page for a command that is gone" "$(ls "$man1" | wc -l)" "$((pages + 1))"
warn=$(for p in "$man1"/*.1; do LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$p" 2>&1 >/dev/null; done)
expect_eq "man renders every page without warnings" "${warn:-none}" "none"

# Bash completion from the same source.
comp=$(bash -c '. "$1"; COMP_WORDS=(kiln sandbox ""); COMP_CWORD=2; _kiln; echo "${COMPREPLY[*]}"
	COMP_WORDS=(kiln build --no-c); COMP_CWORD=2; _kiln; echo "${COMPREPLY[*]}"' _ \
	"$dest/usr/share/bash-completion/completions/kiln")
expect_eq "bash completion: sub-commands and options" "$comp" "create exec ls kill gc pool cp logs timeout pause resume commit
--no-cache"

# The systemd units of the Debian package, pointed at the installed kiln.
if command -v systemd-analyze >/dev/null; then
	mkdir -p "$T_TMP/units"
	for u in debian/kiln.*.service debian/kiln.*.timer; do
		sed "s|/usr/bin/kiln|$k|g" "$u" >"$T_TMP/units/${u#debian/kiln.}"
	done
	expect_exit 0 "systemd-analyze verify kiln-serve.service kiln-gc.service kiln-gc.timer" \
		env SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no "$T_TMP/units/kiln-serve.service" \
		"$T_TMP/units/kiln-gc.service" "$T_TMP/units/kiln-gc.timer"
	expect_eq "systemd-analyze has nothing to say" "$(cat "$T_TMP/out" "$T_TMP/err")" ""
else
	skip "systemd units verified" "no systemd-analyze on this host"
fi

expect_exit 0 "make uninstall" make -s uninstall DESTDIR="$dest" PREFIX=/usr
expect_eq "uninstall removes every file install put there" "$(cd "$dest" && find . ! -type d)" ""
expect_eq "and kiln's own folders" "$([ -e "$lib" ] || [ -e "$dest/usr/share/doc/kiln" ] || echo gone)" gone
expect_exit 2 "make uninstall when nothing is installed says so" make -s uninstall DESTDIR="$dest" PREFIX=/usr
expect_grep "naming the folder" "kiln is not installed in $dest/usr" "$T_TMP/err"
expect_eq "nothing left in TMPDIR" "$(ls -A "$TMPDIR")" ""
