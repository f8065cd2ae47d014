# busybox-base.sh — sourced by bench/lazy.sh and bench/push.sh: the large base both measure,
# built the same way so their figures describe one template.
# busybox_base MIB: an OCI layout ./base (image base:base) of busybox plus the first MIB MiB
# of /usr/lib/x86_64-linux-gnu's files in sorted order (real library bytes, reproducible).
busybox_base() {
	local max=$(($1 * 1048576)) R=bbb/rootfs
	umoci init --layout base >/dev/null
	umoci new --image base:base >/dev/null
	umoci unpack --image base:base bbb >/dev/null
	mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/usr/lib/x86_64-linux-gnu"
	chmod 1777 "$R/tmp"
	cp /bin/busybox "$R/bin/busybox"
	for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
	(cd /usr/lib/x86_64-linux-gnu && find . -type f | LC_ALL=C sort |
		awk -v max="$max" 'BEGIN {t = 0} {cmd = "stat -c %s \"" $0 "\""; cmd | getline s; close(cmd); if (t + s <= max) {t += s; print}}' |
		xargs -d '\n' cp --parents -t "$OLDPWD/$R/usr/lib/x86_64-linux-gnu")
	umoci repack --image base:base bbb >/dev/null
	rm -rf bbb
}
