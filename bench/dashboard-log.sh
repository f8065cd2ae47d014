#!/usr/bin/env bash
# dashboard-log.sh — does the dashboard's log view keep up with a build that
# prints 1,000 lines a second (docs/dashboard.md)?  kiln serve --build with
# auth, a busybox base pushed with skopeo, a build whose RUN prints 100 lines
# ten times a second for 10 s; headless Chromium follows it on the build page
# while node reads the same log stream (bench/dashboard-log.cjs).  Needs a
# built tree, chromium, puppeteer-core (as t1100 installs it), skopeo, umoci, KVM.
set -eu
cd "$(dirname "$0")/.."
KILN=$PWD/bin/kiln
PKG=${KILN_PUPPETEER:-$HOME/.cache/kiln/npm/puppeteer-core-23.11.1}
T=$(mktemp -d)
trap 'kill $SRV 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
B=$T/bb
umoci init --layout "$B" && umoci new --image "$B:base" && umoci unpack --image "$B:base" "$T/bbb" >/dev/null
mkdir -p "$T/bbb/rootfs/bin" "$T/bbb/rootfs/tmp" "$T/bbb/rootfs/etc"
cp /bin/busybox "$T/bbb/rootfs/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$T/bbb/rootfs/bin/$a"; done
umoci repack --image "$B:base" "$T/bbb" >/dev/null
echo '{"auth": true, "build": {"host_builds": 1}}' >"$T/serve.json"
A=$($KILN token create --data "$T/data" --scope team-a:build,pull,push a)
$KILN serve --addr 127.0.0.1:0 --data "$T/data" --config "$T/serve.json" 2>"$T/serve.log" &
SRV=$!
for _ in $(seq 100); do grep -q listening "$T/serve.log" && break; sleep 0.1; done
HOST=$(grep -o '127.0.0.1:[0-9]*' "$T/serve.log" | head -1)
skopeo copy -q --dest-tls-verify=false --dest-creds "x:$A" "oci:$B:base" "docker://$HOST/team-a/bb:1"
ID=$(curl -s -H "X-API-Key: $A" -XPOST "http://$HOST/build/v1/builds" \
	-d "{\"dockerfile\":\"FROM $HOST/team-a/bb:1\\nRUN for s in \$(seq 100); do seq 100 | sed 's/^/line /'; usleep 100000; done\\n\",\"no_cache\":true}" | jq -r .id)
echo "build $ID; $(uptime)"
URL=http://$HOST TOKEN=$A BUILD=$ID CHROMIUM=/usr/bin/chromium PUPPETEER=$PKG/node_modules/puppeteer-core HOME=$T \
	node bench/dashboard-log.cjs
curl -s -H "X-API-Key: $A" "http://$HOST/build/v1/builds/$ID" | jq -c '{state, reason, started, ended}'
