#!/usr/bin/env bash
# t0882-cosign.sh — interop with cosign itself (Debian trixie's 2.5.0, the
# reference implementation of the format; fetched by tests/e2e/cosign-fetch.sh
# into ~/.cache/kiln, apt checking its signature) against a real `kiln serve`
# on 127.0.0.1: cosign verify accepts kiln's signatures and refuses them after
# the tag moved or under another key; cosign verify-attestation accepts kiln's
# provenance; kiln pull accepts what cosign sign and cosign attest made, with
# cosign's own key and with kiln's key imported into cosign, and refuses it
# under another key.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

if ! COSIGN=$(tests/e2e/cosign-fetch.sh 2>"$T_TMP/fetch.err"); then
	skip "cosign verify accepts kiln's signature" "no cosign 2.5.0: $(cat "$T_TMP/fetch.err")"
	exit 0
fi
trap 'reg_stop; rm -rf "$T_TMP"' EXIT
export SOURCE_DATE_EPOCH=1700000000 KILN_REGISTRY_RETRIES=1 COSIGN_PASSWORD=pw
# no sigstore service is reachable here: no transparency log, no TUF root
export TUF_ROOT=$T_TMP/tuf SIGSTORE_NO_CACHE=1
reg_start "$T_TMP/data" || { not_ok "kiln serve starts"; exit 1; }
cd "$T_TMP" || exit 1
cv() { "$COSIGN" verify --insecure-ignore-tlog=true --allow-http-registry "$@"; }
ca() { "$COSIGN" verify-attestation --insecure-ignore-tlog=true --allow-http-registry --type slsaprovenance1 "$@"; }

mkimg() { # NAME CONTENT
	mkdir -p "ctx-$1" && echo "$2" >"ctx-$1/f.txt" && printf 'FROM scratch\nCOPY f.txt /f.txt\n' >"ctx-$1/Dockerfile"
	"$KILN" build --provenance -t "$1" "ctx-$1" 2>/dev/null
}
D1=$(mkimg demo:1 one) && D2=$(mkimg demo:2 two) || { not_ok "test images build"; exit 1; }
"$KILN" key generate team >/dev/null && "$KILN" key generate other >/dev/null

# ---- cosign verifies what kiln signed
"$KILN" push --sign team.key demo:1 "$REG/team/app:v1" >/dev/null 2>&1 || not_ok "kiln push --sign"
expect_exit 0 "cosign verify accepts kiln's signature" cv --key team.pub "$REG/team/app:v1"
expect_eq "  ... of the digest kiln pushed" "$(jq -r '.[0].critical.image."docker-manifest-digest"' "$T_TMP/out")" "$D1"
expect_exit 12 "cosign verify refuses it under another key" cv --key other.pub "$REG/team/app:v1"
expect_grep "  ... saying no signature matched" 'no matching signatures: invalid signature' "$T_TMP/err"
expect_exit 0 "cosign verify-attestation accepts kiln's provenance" ca --key team.pub "$REG/team/app:v1"
st=$(jq -r '.payload' "$T_TMP/out" | base64 -d)
expect_eq "  ... a SLSA v1 statement about that digest" \
	"$(echo "$st" | jq -r '[.predicateType, .subject[0].digest.sha256] | join(" ")')" "https://slsa.dev/provenance/v1 ${D1#sha256:}"
expect_eq "  ... naming kiln's builder" "$(echo "$st" | jq -r '.predicate.runDetails.builder.id')" "kiln@$(hostname)"
expect_exit 1 "cosign verify-attestation refuses it under another key" ca --key other.pub "$REG/team/app:v1"
"$KILN" push demo:2 "$REG/team/app:v1" >/dev/null 2>&1
expect_exit 10 "cosign verify refuses after the tag moved to another digest" cv --key team.pub "$REG/team/app:v1"
expect_grep "  ... finding no signature of it" 'no signatures found' "$T_TMP/err"
expect_exit 1 "  ... and so does verify-attestation" ca --key team.pub "$REG/team/app:v1"
expect_exit 0 "  ... while the old digest still verifies" cv --key team.pub "$REG/team/app@$D1"

# ---- kiln verifies what cosign signed
"$COSIGN" generate-key-pair >/dev/null 2>&1 && [ -s cosign.pub ] || not_ok "cosign generate-key-pair"
"$KILN" push demo:2 "$REG/team/cs:v1" >/dev/null 2>&1
expect_exit 0 "cosign sign of an image in kiln's registry" \
	"$COSIGN" sign --key cosign.key --tlog-upload=false --allow-http-registry -y "$REG/team/cs:v1"
H2=$T_TMP/h2
pull() { KILN_HOME=$H2 "$KILN" pull --policy "$@"; }
echo "{\"scopes\": {\"$REG/team\": {\"keys\": [\"cosign.pub\"], \"identity\": \"repository\"}}}" >cs.json
expect_exit 0 "kiln pull accepts cosign's signature (identity: repository)" pull cs.json "$REG/team/cs:v1"
expect_eq "  ... of that digest" "$(cat "$T_TMP/out")" "$D2"
[ -f "$H2/trust/${D2#sha256:}.json" ] && ok "  ... recorded as trusted" || not_ok "  ... recorded as trusted"
echo "{\"scopes\": {\"$REG/team\": {\"keys\": [\"cosign.pub\"]}}}" >exact.json
expect_exit 1 "  ... an exact-identity policy refuses it by tag (cosign names the repository only)" pull exact.json "$REG/team/cs:v1"
expect_grep "  ... saying so" "it was made for $REG/team/cs, not $REG/team/cs:v1" "$T_TMP/err"
expect_exit 0 "  ... and accepts it by digest" pull exact.json "$REG/team/cs@$D2"
echo "{\"scopes\": {\"$REG/team\": {\"keys\": [\"team.pub\"], \"identity\": \"repository\"}}}" >team.json
expect_exit 1 "kiln pull refuses cosign's signature under another key" pull team.json "$REG/team/cs:v1"
expect_grep "  ... naming the key" "refused: no valid signature by key sha256:[0-9a-f]{64} \\(.*team.pub\\)" "$T_TMP/err"
"$KILN" push demo:1 "$REG/team/cs:v1" >/dev/null 2>&1
expect_exit 1 "kiln pull refuses it after the tag moved" pull cs.json "$REG/team/cs:v1"
expect_grep "  ... not signed" "team/cs:v1 \\($D1\\): refused: not signed" "$T_TMP/err"

# kiln's provenance predicate, attested by cosign
"$KILN" push demo:2 "$REG/team/cs:v1" >/dev/null 2>&1
"$KILN" inspect --provenance "$REG/team/app@$D1" 2>/dev/null | jq '.[0].statement.predicate' >pred.json
expect_exit 0 "cosign attest of a SLSA v1 predicate" "$COSIGN" attest --key cosign.key --tlog-upload=false \
	--allow-http-registry -y --type slsaprovenance1 --predicate pred.json "$REG/team/cs:v1"
expect_exit 0 "kiln inspect --provenance reads cosign's attestation" \
	"$KILN" inspect --provenance --key cosign.pub "$REG/team/cs:v1"
expect_eq "  ... signed by cosign's key" "$(jq -r '.[0].key' "$T_TMP/out")" "$(jq -r '.verified[0].keys[0]' "$H2/trust/${D2#sha256:}.json")"
echo "{\"scopes\": {\"$REG/team\": {\"keys\": [\"cosign.pub\"], \"identity\": \"repository\", \"builder\": \"kiln@$(hostname)\"}}}" >b.json
expect_exit 0 "a policy requiring the builder accepts cosign's attestation naming it" pull b.json "$REG/team/cs:v1"

# kiln's key for cosign: cosign import-key-pair of Debian's 2.5.0 refuses every
# EC and RSA key ("error validating ecdsa key: unsupported public key type",
# cosign's own generate-key-pair keys excepted), so the key is re-wrapped in
# cosign's encrypted format by tests/e2e/cosign_key.py, as t0880 does for skopeo
if /usr/bin/python3 -c 'import nacl.secret, cryptography' 2>/dev/null; then
	/usr/bin/python3 "$OLDPWD/tests/e2e/cosign_key.py" team.key pw team.cosign
	"$KILN" push demo:1 "$REG/team/imp:v1" >/dev/null 2>&1
	expect_exit 0 "cosign sign with kiln's key (converted)" \
		"$COSIGN" sign --key team.cosign --tlog-upload=false --allow-http-registry -y "$REG/team/imp:v1"
	expect_exit 0 "  ... kiln pull accepts it under kiln's team.pub" pull team.json "$REG/team/imp:v1"
	echo "{\"scopes\": {\"$REG/team\": {\"keys\": [\"other.pub\"], \"identity\": \"repository\"}}}" >other.json
	expect_exit 1 "  ... and refuses it under other.pub" pull other.json "$REG/team/imp:v1"
else
	skip "cosign sign with kiln's key (converted)" "no python3-nacl to convert the key to cosign's format"
fi
