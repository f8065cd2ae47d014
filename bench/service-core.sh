#!/usr/bin/env bash
# bench/service-core.sh — the build service before and after issue #33's
# refactor (one build-request codec, frontends on one core, E2B's state in
# the service's database), in one run: KILN_BEFORE=/path/to/old/kiln and
# this tree's bin/kiln each serve `kiln serve --build` on loopback with their
# own data, and each round times, on both, alternating which goes first:
#   - a cached `kiln build --remote` (a fresh client home; the context's 50
#     files, a COPY and a RUN all hit the team's cache on the server; a new
#     build arg each round, so a build process runs rather than a replay);
#   - a cached E2B SDK Template.build() (e2b npm SDK: the same steps again,
#     a new tag each round; every step from the cache).
# Medians of ROUNDS (default 7), and after/before ratios.
# Usage: KILN_BEFORE=/work/before/bin/kiln [ROUNDS=7] bench/service-core.sh
set -u
cd "$(dirname "$0")/.."
BEFORE=${KILN_BEFORE:?"set KILN_BEFORE to the kiln binary to compare with"}
AFTER=$PWD/bin/kiln
ROUNDS=${ROUNDS:-7}
SDK=${KILN_E2B_SDK:-$HOME/.cache/kiln/npm/e2b-2.51.0}
[ -f "$SDK/node_modules/e2b/package.json" ] || npm install --prefix "$SDK" --no-audit --no-fund e2b@2.51.0 >/dev/null ||
	{ echo "npm install e2b failed"; exit 1; }
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null || exit 1
export SOURCE_DATE_EPOCH=1700000000
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-core.XXXXXX")
srvs=
trap 'for p in $srvs; do kill $p 2>/dev/null; wait $p 2>/dev/null; done; rm -rf "$work"' EXIT
echo "after: $AFTER ($(git rev-parse --short HEAD)); before: $BEFORE"
echo "load at start: $(uptime)"

# the base: busybox as an OCI layout
B=$work/bb
umoci init --layout "$B" >/dev/null && umoci new --image "$B:base" >/dev/null &&
	umoci unpack --image "$B:base" "$work/bbb" >/dev/null || { echo "umoci failed"; exit 1; }
R=$work/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/root"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
umoci repack --image "$B:base" "$work/bbb" >/dev/null
echo '{"auth": true, "build": {"host_builds": 1}}' >"$work/serve.json"

# serve SIDE BINARY: a server of its own, $HOST_SIDE and $KEY_SIDE set
serve() {
	local side=$1 bin=$2 d=$work/$1
	mkdir -p "$d"
	printf -v "KEY_$side" '%s' "$("$bin" token create --data "$d" --e2b --scope team:pull,push,build bench 2>/dev/null)"
	: >"$d.log"
	KILN_HOME=$work/$side-home "$bin" serve --addr 127.0.0.1:0 --data "$d" --config "$work/serve.json" --build \
		>/dev/null 2>"$d.log" &
	srvs="$srvs $!"
	for _ in $(seq 100); do grep -q listening "$d.log" && break; sleep 0.1; done
	printf -v "HOST_$side" '%s' "$(grep -o '127.0.0.1:[0-9]*' "$d.log" | head -1)"
}
serve after "$AFTER"
serve before "$BEFORE"
for side in after before; do
	host=HOST_$side key=KEY_$side
	skopeo copy -q --dest-tls-verify=false --dest-creds "x:${!key}" "oci:$B:base" "docker://${!host}/team/busybox:1" ||
		{ echo "push of the base to $side failed"; exit 1; }
done

c=$work/ctx
mkdir -p "$c/app"
for i in $(seq 50); do head -c 4096 /dev/urandom >"$c/app/f$i"; done
printf 'ARG N\nCOPY app/ /app/\nRUN ls /app | wc -l >/count\n' >"$work/df.tail"
cat >"$work/sdk.cjs" <<'JS'
const { Template } = require(process.env.SDK + '/node_modules/e2b')
const t = Template({ fileContextPath: process.env.CTX }).fromImage(process.env.BASE)
  .copy('app', '/app/').runCmd('ls /app | wc -l > /count')
const t0 = Date.now()
Template.build(t, 'sdk-bench:' + process.env.TAG, { onBuildLogs: () => {} })
  .then(() => console.log(Date.now() - t0))
  .catch((e) => { console.error(e.message); process.exit(1) })
JS
# remote SIDE N: a cached kiln build --remote, a fresh client; prints seconds
remote() {
	local host=HOST_$1 key=KEY_$1 bin t0
	bin=$AFTER; [ "$1" = before ] && bin=$BEFORE
	{ echo "FROM ${!host}/team/busybox:1"; cat "$work/df.tail"; } >"$work/Dockerfile.$1"
	rm -rf "$work/client"
	t0=$(date +%s%N)
	KILN_HOME=$work/client KILN_TOKEN=${!key} "$bin" build --remote "http://${!host}" -f "$work/Dockerfile.$1" \
		--build-arg "N=$2" -t app:1 "$c" >/dev/null 2>"$work/remote.err" || { echo "FAILED"; return; }
	echo "scale=3; ($(date +%s%N) - $t0) / 1000000000" | bc
}
# sdk SIDE TAG: an E2B SDK Template.build(); prints seconds
sdk() {
	local host=HOST_$1 key=KEY_$1 ms
	ms=$(SDK=$SDK CTX=$c BASE=${!host}/team/busybox:1 TAG=$2 E2B_API_URL=http://${!host} E2B_API_KEY=${!key} \
		node "$work/sdk.cjs" 2>"$work/sdk.err") || { echo "FAILED"; return; }
	echo "scale=3; $ms / 1000" | bc
}
# first builds: they fill each side's cache (and make its builder VM snapshot)
for side in after before; do
	[ "$(remote "$side" first)" != FAILED ] || { echo "first remote build on $side failed:"; tail -3 "$work/remote.err"; exit 1; }
	[ "$(sdk "$side" first)" != FAILED ] || { echo "first SDK build on $side failed:"; tail -3 "$work/sdk.err"; exit 1; }
done
: >"$work/times"
for r in $(seq "$ROUNDS"); do
	order="after before"; [ $((r % 2)) -eq 0 ] && order="before after"
	for side in $order; do
		echo "remote $side $(remote "$side" "r$r")" >>"$work/times"
		echo "sdk $side $(sdk "$side" "r$r")" >>"$work/times"
	done
done
grep -q FAILED "$work/times" && { echo "some builds failed:"; grep FAILED "$work/times"; }
median() { grep "^$1 $2 " "$work/times" | awk '{print $3}' | grep -v FAILED | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
range() { grep "^$1 $2 " "$work/times" | awk '{print $3}' | grep -v FAILED | sort -n | sed -n '1p;$p' | paste -sd- ; }
echo "load at end: $(uptime)"
printf '%-34s %-22s %-22s %s\n' "case (medians of $ROUNDS)" before after after/before
for k in remote sdk; do
	name="cached kiln build --remote"; [ $k = sdk ] && name="cached E2B SDK Template.build()"
	b=$(median $k before) a=$(median $k after)
	printf '%-34s %-22s %-22s %s\n' "$name" "$b s ($(range $k before))" "$a s ($(range $k after))" \
		"$(echo "scale=2; $a / $b" | bc)"
done
