#!/usr/bin/env bash
# t1101-dashboard-sandboxes.sh — the dashboard's sandboxes page (docs/dashboard.md)
# in headless Chromium on `kiln serve --sandboxes`: a team's running sandbox
# listed with its template, state, age, time left and memory, another team's
# not; +5 min extends it and Kill kills it, from the page.  Real QEMU (a
# busybox template as t1020 makes it); puppeteer-core as t1100 installs it.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
. tests/e2e/registry-lib.sh

. tests/e2e/browser-lib.sh
ART=${KILN_ARTIFACTS:-$PWD/build/test-artifacts}/t1101
need_browser "the sandboxes page in Chromium" || exit 0
mkdir -p "$ART"
vm_setup

# a busybox base with a user "user" (E2B's templates run as one), as t1020's
B=$T_TMP/bb
{ umoci init --layout "$B" && umoci new --image "$B:base" && umoci unpack --image "$B:base" "$T_TMP/bbb"; } >/dev/null 2>&1
R=$T_TMP/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/home/user" "$R/root"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\nuser:x:1000:\n' >"$R/etc/group"
chown 1000:1000 "$R/home/user"
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
mkdir -p "$T_TMP/ctx"
printf 'FROM oci:%s:base\nENV GREETING=hello\n' "$B" >"$T_TMP/ctx/Dockerfile"
expect_exit 0 "a template kiln build made" "$KILN" build -t sbx:1 --template --start-cmd true --ready-cmd true \
	--memory 128 "$T_TMP/ctx"

D=$T_TMP/reg
mkdir -p "$D"
echo '{"auth": true, "sandboxes": {"domain": "kiln.test"}, "quotas": {"team": {"sandboxes": 4, "sandbox_memory_mib": 1024}}}' >"$T_TMP/serve.json"
KEY=$("$KILN" token create --data "$D" --e2b --scope team:sandbox,pull web 2>/dev/null)
OTHER=$("$KILN" token create --data "$D" --e2b --scope other:sandbox other 2>/dev/null)
reg_start "$D" --config "$T_TMP/serve.json" --sandboxes || { not_ok "kiln serve --sandboxes starts"; exit 0; }
trap '"$KILN" sandbox kill $(ls "$KILN_HOME/sandboxes" 2>/dev/null) >/dev/null 2>&1; reg_stop; rm -rf "$T_TMP"' EXIT
URL=http://$REG
create() { curl -s -H "X-API-Key: $1" -XPOST "$URL/sandboxes" -d '{"templateID":"sbx:1","timeout":600}' | jq -r .sandboxID; }
S1=$(create "$KEY")
S2=$(create "$OTHER")
expect_grep "the team's sandbox runs" '.' <(echo "$S1" | grep -v null)
expect_grep "...and another team's" '.' <(echo "$S2" | grep -v null)

URL=$URL TOKEN=$KEY SANDBOX=$S1 OTHER_SANDBOX=$S2 ART=$ART CHROMIUM=$CHROMIUM \
	PUPPETEER=$PUPPETEER HOME=$T_TMP timeout 180 node tests/e2e/dashboard-sandboxes.cjs | tee "$T_TMP/browser"
grep -q '^ok - \|^not ok - ' "$T_TMP/browser" || not_ok "the browser run printed no result"
expect_eq "the killed sandbox is gone from the API" "$(curl -s -o /dev/null -w '%{http_code}' -H "X-API-Key: $KEY" "$URL/sandboxes/$S1")" 404
expect_eq "the other team's still runs" "$(curl -s -H "X-API-Key: $OTHER" "$URL/sandboxes/$S2" | jq -r .state)" running
