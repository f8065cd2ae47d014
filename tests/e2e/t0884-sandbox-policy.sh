#!/usr/bin/env bash
# t0884-sandbox-policy.sh — the sandbox service consults the host's signing
# policy as kiln run does: a template registry (`kiln serve`) holding a signed
# template and an unsigned one, and `kiln serve --sandboxes` on a runtime
# host whose $KILN_POLICY names the team's key: POST /sandboxes (curl, an E2B
# key) of the unsigned one is refused with E2B's JSON error naming the
# reference, the digest and the reason, before any chunk is fetched and with
# no template stored, answered 403 (forbidden); the signed one starts.  With
# a warm pool naming both, only the signed one is restored into it (the
# other's refusal logged, naming reference, digest and reason).  Real QEMU.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
. tests/e2e/registry-lib.sh
vm_setup

export SOURCE_DATE_EPOCH=1700000000
B=$T_TMP/bb
umoci init --layout "$B" >/dev/null 2>&1
umoci new --image "$B:base" >/dev/null 2>&1
umoci unpack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
R=$T_TMP/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/home/user"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\nuser:x:1000:\n' >"$R/etc/group"
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
c=$T_TMP/ctx
mkdir -p "$c" && echo "signed app" >"$c/app.txt"
printf 'FROM oci:%s:base\nCOPY app.txt /app/app.txt\n' "$B" >"$c/Dockerfile"
expect_exit 0 "build template app:v1" "$KILN" build -t app:v1 --start-cmd 'true' --memory 128 "$c"
# the unsigned one of other content: a digest verified under one name is trusted under any
echo "unsigned app" >"$c/app.txt"
expect_exit 0 "build template plain:v1" "$KILN" build -t plain:v1 --start-cmd 'true' --memory 128 "$c"

H2=$T_TMP/h2
reg_start "$T_TMP/reg" || exit 0
TREG=$REG TPID=$REG_PID
cd "$T_TMP" || exit 1
"$KILN" key generate team >/dev/null
"$KILN" push --sign team.key app:v1 "$TREG/team/app:v1" >/dev/null 2>&1 || not_ok "push --sign of the template"
"$KILN" push plain:v1 "$TREG/team/plain:v1" >/dev/null 2>&1 || not_ok "push of the unsigned template"
echo "{\"scopes\": {\"$TREG/team\": {\"keys\": [\"$T_TMP/team.pub\"]}}}" >policy.json

# the runtime host: its own KILN_HOME, the policy in its environment
D=$T_TMP/sbx
mkdir -p "$D"
echo '{"auth": true, "sandboxes": {"domain": "kiln.test"}}' >serve.json
KEY=$(KILN_HOME=$H2 "$KILN" token create --data "$D" --e2b --scope team:sandbox e2b-team 2>/dev/null)
stop_all() {
	[ -d "$H2" ] && KILN_HOME=$H2 "$KILN" sandbox kill $(ls "$H2/sandboxes" 2>/dev/null) >/dev/null 2>&1
	reg_stop
	kill "$TPID" 2>/dev/null; wait "$TPID" 2>/dev/null
	KILN_HOME=$H2 "$KILN" chunkfs stop >/dev/null 2>&1
}
trap 'stop_all; rm -rf "$T_TMP"' EXIT
REG_PID=
KILN_HOME=$H2 KILN_POLICY=$T_TMP/policy.json reg_start "$D" --config serve.json --sandboxes ||
	{ not_ok "kiln serve --sandboxes starts"; exit 0; }

create() { req POST /sandboxes -H "X-API-Key: $KEY" -H 'Content-Type: application/json' -d "{\"templateID\":\"$1\"}"; }
create "$TREG/team/plain:v1"
expect_eq "POST /sandboxes of the unsigned template: refused, 403 forbidden" "$CODE" 403
msg=$(jq -r '.message' "$T_TMP/body")
case $msg in
*"$TREG/team/plain:v1 (sha256:"*"): refused: not signed"*) ok "  ... E2B's JSON error naming reference, digest and reason" ;;
*) not_ok "  ... E2B's JSON error naming reference, digest and reason"; echo "#   $(cat "$T_TMP/body")" ;;
esac
expect_eq "  ... with E2B's code field" "$(jq -r '.code' "$T_TMP/body")" 403
n=$(find "$H2/chunks" -type f -path '*sha256*' 2>/dev/null | wc -l)
expect_eq "  ... before any chunk was fetched" "$n" 0
expect_eq "  ... and no template stored" "$(KILN_HOME=$H2 "$KILN" snapshot ls --json 2>/dev/null | jq length)" 0

create "$TREG/team/app:v1"
expect_eq "POST /sandboxes of the signed template: created" "$CODE" 201
SB=$(jq -r '.sandboxID // ""' "$T_TMP/body")
[ -n "$(ls "$H2/trust/" 2>/dev/null)" ] && ok "  ... verified and recorded as trusted" || not_ok "  ... verified and recorded as trusted"
[ -n "$SB" ] && req DELETE "/sandboxes/$SB" -H "X-API-Key: $KEY"
expect_eq "  ... and killed" "$CODE" 204
create "$TREG/team/plain:v1"
expect_eq "the unsigned one is still refused after the signed one ran" "$CODE" 403

# ---- the warm pool: a configured template is checked before it is restored
reg_stop
KILN_HOME=$H2 "$KILN" pull "$TREG/team/plain:v1" >/dev/null 2>&1 || not_ok "the unsigned template pulled without a policy"
PD=$(KILN_HOME=$H2 "$KILN" snapshot ls --json 2>/dev/null | jq -r --arg r "$TREG/team/plain:v1" '.[] | select(.name == $r) | .digest')
AD=$(KILN_HOME=$H2 "$KILN" snapshot ls --json 2>/dev/null | jq -r --arg r "$TREG/team/app:v1" '.[] | select(.name == $r) | .digest')
[ -n "$PD" ] && [ -n "$AD" ] && ok "both templates are on the runtime host" || { not_ok "both templates are on the runtime host"; KILN_HOME=$H2 "$KILN" snapshot ls --json | sed 's/^/#   /'; }
echo "{\"auth\": true, \"sandboxes\": {\"domain\": \"kiln.test\", \"pool_size\": 1,
  \"pool\": [\"$TREG/team/plain:v1\", \"$TREG/team/app:v1\"]}}" >pool.json
KILN_HOME=$H2 KILN_POLICY=$T_TMP/policy.json reg_start "$D" --config pool.json --sandboxes ||
	{ not_ok "kiln serve --sandboxes starts with a pool"; exit 0; }
pooled() { KILN_HOME=$H2 "$KILN" sandbox ls --json 2>/dev/null | jq --arg d "$1" '[.[] | select(.state == "pooled" and .template == $d)] | length'; }
for _ in $(seq 1 600); do [ "$(pooled "$AD")" -ge 1 ] && break; sleep 0.1; done
expect_eq "the signed template is restored into its pool" "$(pooled "$AD")" 1
expect_eq "  ... the unsigned one is not" "$(pooled "$PD")" 0
expect_grep "  ... the log naming its reference, digest and what was wrong" \
	"sandbox pool of $TREG/team/plain:v1: not restored: .*$TREG/team/plain:v1 \\($PD\\): refused: not verified on this host" "$REG_LOG"
create "$TREG/team/plain:v1"
expect_eq "  ... and a create of it is refused (403)" "$CODE" 403
PID1=$(KILN_HOME=$H2 "$KILN" sandbox ls --json 2>/dev/null | jq -r --arg d "$AD" '.[] | select(.state == "pooled" and .template == $d) | .id')
create "$TREG/team/app:v1"
expect_eq "a create of the signed one is served" "$CODE" 201
SB=$(jq -r '.sandboxID // ""' "$T_TMP/body")
expect_eq "  ... by its pooled sandbox" "$SB" "$PID1"
[ -n "$SB" ] && req DELETE "/sandboxes/$SB" -H "X-API-Key: $KEY"
