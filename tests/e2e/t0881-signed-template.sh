#!/usr/bin/env bash
# t0881-signed-template.sh — a signed template against a real `kiln serve`
# on 127.0.0.1: kiln push --sign, then on a runtime host with a policy: the
# unsigned version refused before any chunk is fetched (chunk store empty,
# no template), the signed one run lazily by `kiln run` (the verification
# cost against an unverified lazy run is printed), a local template without
# a trust record refused by kiln run, and one with it started.
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
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/lib"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
c=$T_TMP/ctx
mkdir -p "$c" && echo "signed app" >"$c/app.txt"
printf 'FROM oci:%s:base\nCOPY app.txt /app/app.txt\n' "$B" >"$c/Dockerfile"
expect_exit 0 "build template app:v1" "$KILN" build -t app:v1 --start-cmd 'true' --memory 128 "$c"
reg_start "$T_TMP/reg" || exit 0
stop_hosts() {
	for h in "$T_TMP/h2" "$T_TMP/h3" "$T_TMP/h4"; do
		[ -d "$h" ] || continue
		KILN_HOME=$h "$KILN" sandbox gc >/dev/null 2>&1
		KILN_HOME=$h "$KILN" chunkfs stop >/dev/null 2>&1
	done
	reg_stop
}
trap 'stop_hosts; rm -rf "$T_TMP"' EXIT
cd "$T_TMP" || exit 1
"$KILN" key generate team >/dev/null

expect_exit 0 "push --sign of a template" "$KILN" push --sign team.key app:v1 "$REG/team/app:v1"
expect_grep "  ... signed" "signed $REG/team/app:v1 \\(sha256:" "$T_TMP/err"
expect_exit 0 "the same template pushed unsigned elsewhere" "$KILN" push app:v1 "$REG/team/plain:v1"
if COSIGN=$("$OLDPWD/tests/e2e/cosign-fetch.sh" 2>"$T_TMP/fetch.err"); then
	expect_exit 0 "cosign verify accepts kiln's signature of the template's manifest" env TUF_ROOT="$T_TMP/tuf" \
		"$COSIGN" verify --key team.pub --insecure-ignore-tlog=true --allow-http-registry "$REG/team/app:v1"
	expect_exit 10 "  ... and refuses the unsigned copy" env TUF_ROOT="$T_TMP/tuf" \
		"$COSIGN" verify --key team.pub --insecure-ignore-tlog=true --allow-http-registry "$REG/team/plain:v1"
else
	skip "cosign verify accepts kiln's signature of the template's manifest" "no cosign: $(cat "$T_TMP/fetch.err")"
fi
echo "{\"scopes\": {\"$REG/team\": {\"keys\": [\"$T_TMP/team.pub\"]}}}" >policy.json

H2=$T_TMP/h2 H3=$T_TMP/h3 H4=$T_TMP/h4
expect_exit 1 "kiln run of the unsigned one is refused" env KILN_HOME="$H2" KILN_POLICY=policy.json "$KILN" run "$REG/team/plain:v1" -- cat /app/app.txt
expect_grep "  ... naming reference, digest and reason" "team/plain:v1 \\(sha256:[0-9a-f]{64}\\): refused: not signed" "$T_TMP/err"
n=$(find "$H2/chunks" -type f -path '*sha256*' 2>/dev/null | wc -l)
expect_eq "  ... before any chunk was fetched" "$n" 0
expect_eq "  ... and no template stored" "$(KILN_HOME=$H2 "$KILN" snapshot ls --json 2>/dev/null | jq length)" 0

t0=$(date +%s%N)
got=$(KILN_HOME=$H3 "$KILN" run "$REG/team/plain:v1" -- cat /app/app.txt 2>"$T_TMP/err3")
t1=$(date +%s%N)
expect_eq "an unverified lazy kiln run (no policy)" "$got" "signed app"
got=$(KILN_HOME=$H4 KILN_POLICY=policy.json "$KILN" run "$REG/team/app:v1" -- cat /app/app.txt 2>"$T_TMP/err4")
t2=$(date +%s%N)
expect_eq "a verified lazy kiln run of the signed one" "$got" "signed app"
expect_grep "  ... verified before the pull" 'signed by 1 key the policy requires \(verified' "$T_TMP/err4"
echo "# lazy kiln run: unverified $(((t1 - t0) / 1000000)) ms, verified $(((t2 - t1) / 1000000)) ms; verification itself: $(grep -o '[0-9.]* ms)' "$T_TMP/err4")"
[ -n "$(ls "$H4/trust/")" ] && ok "  ... recorded as trusted" || not_ok "  ... recorded as trusted"
expect_exit 0 "kiln run of it again (local, its trust record)" env KILN_HOME="$H4" KILN_POLICY=policy.json "$KILN" run "$REG/team/app:v1" -- true
expect_exit 1 "kiln run of a local template without a trust record is refused" env KILN_HOME="$H3" KILN_POLICY=policy.json "$KILN" run "$REG/team/plain:v1" -- true
expect_grep "  ... saying it was not verified here" 'refused: not verified on this host' "$T_TMP/err"
