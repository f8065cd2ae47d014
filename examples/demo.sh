#!/usr/bin/env bash
# demo.sh — `make demo`, the main job on embedded defaults: parse and plan the
# example Dockerfiles, then build the examples/hello template (its RUN in a
# builder microVM), snapshot it with its web server running, and start a
# sandbox from it by restore.  Needs only Debian packages (no registry).
set -euo pipefail
cd "$(dirname "$0")/.."
KILN=${KILN:-$PWD/bin/kiln}
WORK=$PWD/build/demo
mkdir -p "$WORK"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. parse and plan the example Dockerfiles"
for df in examples/*.Dockerfile; do
	n=$("$KILN" dockerfile parse --dump "$df" | wc -l)
	order=$("$KILN" dockerfile plan "$df" |
		jq -r '[.order[] as $i | .stages[$i] | (.name // "#\(.index)")] | join(" -> ")')
	printf '  %-32s %3d instructions, stages to build: %s\n' "$df" "$n" "$order"
done

step "2. guest kernel (built from Debian's linux-source, or copied from the build cache)"
"$KILN" vm kernel --fetch | sed 's/^/  /'

step "3. a busybox base image (OCI layout, made locally with umoci)"
BASE=$WORK/base
if [ ! -f "$BASE/index.json" ]; then
	rm -rf "$BASE" "$WORK/unpacked"
	umoci init --layout "$BASE"
	umoci new --image "$BASE:busybox"
	umoci unpack --image "$BASE:busybox" "$WORK/unpacked" >/dev/null
	R=$WORK/unpacked/rootfs
	mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/root"
	chmod 1777 "$R/tmp"
	cp /bin/busybox "$R/bin/busybox"
	for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
	printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
	printf 'root:x:0:\n' >"$R/etc/group"
	umoci repack --image "$BASE:busybox" "$WORK/unpacked" >/dev/null
	rm -rf "$WORK/unpacked"
fi
echo "  oci:$BASE:busybox"

step "4. kiln build: examples/hello -> image + template (RUN in a microVM, then snapshot)"
start=$(date +%s%N)
"$KILN" build -t hello:latest --build-arg "BASE=oci:$BASE:busybox" \
	--ready-cmd 'busybox wget -q -O- http://127.0.0.1:8080/index.html' examples/hello
echo "  build + snapshot took $(( ($(date +%s%N) - start) / 1000000 )) ms"

step "5. kiln run: a sandbox restored from the snapshot; its web server is already up"
"$KILN" run --time hello:latest -- busybox wget -q -O- http://127.0.0.1:8080/greeting.txt

step "6. a sandbox that lives on: create, exec twice, kill"
id=$("$KILN" sandbox create hello:latest)
echo "  sandbox $id"
"$KILN" sandbox exec "$id" -- sh -c 'echo "state kept" > /tmp/note'
"$KILN" sandbox exec "$id" -- cat /tmp/note
"$KILN" sandbox ls
"$KILN" sandbox kill "$id"
echo
echo "kiln demo: done"
