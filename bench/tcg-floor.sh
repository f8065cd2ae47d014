#!/usr/bin/env bash
# bench/tcg-floor.sh — what the corpus's heaviest commands cost under TCG with
# no kiln in the way, against kiln's RUN of the same command and buildah's
# native one: the floor of bench/real.sh's kiln/buildah ratio on a host
# without KVM.  Per command, alternated, RUNS times: (1) plain VM: `kiln vm
# run --net -m 2048 --scratch 8192` of the Debian base's ext4 (the base
# read-only under an overlay on a scratch disk; no layers, no capture); (2) kiln: `kiln build
# --no-cache` of `FROM base` + that one RUN, its exec_seconds and the whole
# build; (3) buildah: `buildah run --isolation chroot` in a container of the
# base (vfs), natively.  Needs root, buildah, umoci, debootstrap.
# Usage: bench/tcg-floor.sh   (env: RUNS=1 CMDS="c python" BENCH_DIR=/var/tmp/kiln-bench-floor)
set -euo pipefail
cd "$(dirname "$0")/.."
KILN=${KILN:-$PWD/bin/kiln}
RUNS=${RUNS:-1}
W=${BENCH_DIR:-/var/tmp/kiln-bench-floor}
rm -rf "$W" && mkdir -p "$W/ctx"
export KILN_HOME=$W/kiln-home
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null
BR=(buildah --storage-driver vfs --root "$W/broot" --runroot "$W/brun")
L=/tmp/kiln-bench-floor-base-$$
trap '"${BR[@]}" rm -a >/dev/null 2>&1 || true; "${BR[@]}" rmi -a -f >/dev/null 2>&1 || true; rm -f "$L"' EXIT
base=$(examples/debian-base.sh)
base=${base#oci:}
ln -s "${base%:*}" "$L"
REF=oci:$L:${base##*:}
"$KILN" rootfs "$REF" -o "$W/base.ext4" --free 2G >/dev/null

# the apt RUNs of tests/data/real/{c,python,node}/Dockerfile, as written there
declare -A CMD=(
	[c]='apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && apt-get clean && rm -rf /var/lib/apt/lists/*'
	[python]='apt-get update && apt-get install -y --no-install-recommends ca-certificates curl iputils-ping python3 python3-numpy && apt-get clean && rm -rf /var/lib/apt/lists/*'
	[node]='apt-get update && apt-get install -y --no-install-recommends nodejs && apt-get clean && rm -rf /var/lib/apt/lists/*'
)
P=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
VMENV=(-e DEBIAN_FRONTEND=noninteractive -e "$P")
BRENV=(--env DEBIAN_FRONTEND=noninteractive --env "$P")
now() { date +%s.%N; }
el() { echo "$(now) - $1" | bc; }

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| command | plain TCG VM | kiln RUN exec (whole build) | buildah run (native) | VM/buildah | kiln exec/VM |\n|---|---|---|---|---|---|\n'
for c in ${CMDS:-c python node}; do
	for i in $(seq "$RUNS"); do
		s=$(now)
		"$KILN" vm run --net -m 2048 --scratch 8192 --cmd-timeout 3000 "${VMENV[@]}" "$W/base.ext4" -- \
			/bin/sh -c "${CMD[$c]}" >"$W/vm.out" 2>&1 || { tail -5 "$W/vm.out"; exit 1; }
		v=$(el "$s")
		printf 'FROM %s\nENV DEBIAN_FRONTEND=noninteractive\nRUN %s\n' "$REF" "${CMD[$c]}" >"$W/ctx/Dockerfile"
		s=$(now)
		"$KILN" build --no-cache --json "$W/ctx" >"$W/kb.json" 2>"$W/kb.err" || { tail -5 "$W/kb.err"; exit 1; }
		kt=$(el "$s")
		ke=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("event") == "step_done" and e.get("run"): print("%.1f" % e["run"]["exec_seconds"])' "$W/kb.json" | tail -1)
		ctr=$("${BR[@]}" from --pull=never "$REF" 2>/dev/null || "${BR[@]}" from "$REF")
		s=$(now)
		"${BR[@]}" run --isolation chroot "${BRENV[@]}" "$ctr" -- /bin/sh -c "${CMD[$c]}" >"$W/br.out" 2>&1 ||
			{ tail -5 "$W/br.out"; exit 1; }
		b=$(el "$s")
		"${BR[@]}" rm "$ctr" >/dev/null
		printf '| %s apt RUN (run %d, load %s) | %.1f s | %s s (%.1f s) | %.1f s | %.1f | %.2f |\n' "$c" "$i" \
			"$(cut -d' ' -f1 /proc/loadavg)" "$v" "$ke" "$kt" "$b" "$(echo "$v / $b" | bc -l)" "$(echo "$ke / $v" | bc -l)"
	done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
