#!/usr/bin/env bash
# t0880-signed.sh — signed images against a real `kiln serve` on 127.0.0.1:
# kiln key generate, kiln push --sign (cosign's format, read back with
# curl), kiln pull under a signing policy (accepted and recorded as
# trusted; then answered by the record), and the tampering it must refuse
# with nothing stored: unsigned, an unknown key, a moved tag, a signature of
# another digest, one made for another tag replayed onto an older version, a
# truncated signature, a registry answering the tag differently the second
# time (tests/swap_proxy.py).  Interop with skopeo's sigstore support when
# this skopeo has it (Debian's 1.9 is built without: skipped, saying so).
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

trap 'reg_stop; [ -n "${PX:-}" ] && kill "$PX" 2>/dev/null; rm -rf "$T_TMP"' EXIT
export SOURCE_DATE_EPOCH=1700000000 KILN_REGISTRY_RETRIES=1
reg_start "$T_TMP/data" || { not_ok "kiln serve starts"; exit 1; }
cd "$T_TMP" || exit 1
H1=$KILN_HOME

mkimg() { # NAME CONTENT
	mkdir -p "ctx-$1" && echo "$2" >"ctx-$1/f.txt" && printf 'FROM scratch\nCOPY f.txt /f.txt\n' >"ctx-$1/Dockerfile"
	"$KILN" build -t "$1" "ctx-$1" 2>/dev/null
}
D1=$(mkimg demo:1 one) && D2=$(mkimg demo:2 two) || { not_ok "test images build"; exit 1; }

# ---- keys
expect_exit 0 "kiln key generate" "$KILN" key generate team
expect_eq "the private key is 0600" "$(stat -c %a team.key)" 600
expect_grep "  ... prints the key's id" 'key sha256:[0-9a-f]{64}' "$T_TMP/out"
grep -q 'PRIVATE' "$T_TMP/out" "$T_TMP/err" && not_ok "  ... and never the private key" || ok "  ... and never the private key"
expect_exit 1 "an existing key is never overwritten" "$KILN" key generate team
expect_grep "  ... saying so" 'team.key: File exists' "$T_TMP/err"
"$KILN" key generate other >/dev/null
expect_exit 1 "push --sign with a public key is refused before pushing" "$KILN" push --sign team.pub demo:1 "$REG/team/none:v1"
head_req /v2/team/none/manifests/v1
expect_eq "  ... nothing pushed" "$CODE" 404

# ---- sign
sig_tag() { echo "sha256-${1#sha256:}.sig"; }
expect_exit 0 "push --sign" "$KILN" push --sign team.key demo:1 "$REG/team/app:v1"
expect_eq "  ... prints the digest" "$(cat "$T_TMP/out")" "$D1"
req GET "/v2/team/app/manifests/$(sig_tag "$D1")"
expect_code "  ... the signature is tagged sha256-HEX.sig" 200
cp body sig1.json
expect_eq "  ... as cosign's simple-signing layer" "$(jq -r '.layers[0].mediaType' sig1.json)" \
	application/vnd.dev.cosign.simplesigning.v1+json
req GET "/v2/team/app/blobs/$(jq -r '.layers[0].digest' sig1.json)"
expect_eq "  ... whose payload names the reference and digest" \
	"$(jq -c '[.critical.identity."docker-reference", .critical.image."docker-manifest-digest", .critical.type]' body)" \
	"[\"$REG/team/app:v1\",\"$D1\",\"cosign container image signature\"]"
jq -r '.layers[0].annotations."dev.cosignproject.cosign/signature"' sig1.json | base64 -d >sig.der
openssl dgst -sha256 -verify team.pub -signature sig.der body >/dev/null 2>&1 &&
	ok "  ... and openssl verifies its signature with team.pub" || not_ok "  ... and openssl verifies its signature with team.pub"
expect_exit 0 "a second signer is added beside the first" "$KILN" push --sign other.key demo:1 "$REG/team/app:v1"
req GET "/v2/team/app/manifests/$(sig_tag "$D1")"
expect_eq "  ... two signatures" "$(jq '.layers | length' body)" 2

# ---- verify
echo "{\"scopes\": {\"$REG/team\": {\"keys\": [\"team.pub\"]}}}" >policy.json
H2=$T_TMP/h2
pull() { KILN_HOME=$H2 "$KILN" pull --policy policy.json "$@"; }
expect_exit 0 "pull under the policy: signed by team.pub" pull "$REG/team/app:v1"
expect_grep "  ... says it verified" 'signed by 1 key the policy requires \(verified' "$T_TMP/err"
[ -f "$H2/trust/${D1#sha256:}.json" ] && ok "  ... recorded as trusted" || not_ok "  ... recorded as trusted"
expect_exit 0 "pulled again: the trust record answers" pull "$REG/team/app:v1"
expect_grep "  ... without fetching the signatures" 'trust record' "$T_TMP/err"
expect_exit 0 "by digest: the signature's repository is enough" pull "$REG/team/app@$D1"

refused() { # NAME PATTERN REF
	expect_exit 1 "$1" pull "$3"
	expect_grep "  ... naming the reference and what was wrong" "$2" "$T_TMP/err"
	local d
	d=$(jq -r --arg r "$3" '.[$r].digest // ""' "$H2/images.json") || d=unreadable
	[ -z "$d" ] || [ "$d" = "$D1" ] && ok "  ... nothing else stored under that name" || not_ok "  ... nothing else stored under that name ($d)"
}
"$KILN" push demo:2 "$REG/team/unsigned:v1" >/dev/null 2>&1
refused "an unsigned image is refused" "team/unsigned:v1 \(sha256:[0-9a-f]+\): refused: not signed" "$REG/team/unsigned:v1"
"$KILN" push --sign other.key demo:2 "$REG/team/otherkey:v1" >/dev/null 2>&1
refused "a signature by an unknown key is refused" "refused: no valid signature by key sha256:[0-9a-f]+ \(.*team.pub\).*not a valid signature by this key" "$REG/team/otherkey:v1"
echo '{"scopes": {}}' >open.json
expect_exit 0 "outside the policy's scopes nothing is asked" env KILN_HOME="$H2" "$KILN" pull --policy open.json "$REG/team/unsigned:v1"

# a moved tag: v1 now names demo:2, whose digest nobody signed
"$KILN" push demo:2 "$REG/team/app:v1" >/dev/null 2>&1
refused "a moved tag is refused" "team/app:v1 \($D2\): refused: not signed" "$REG/team/app:v1"
# the signature of demo:1 copied onto demo:2's signature tag
req PUT "/v2/team/app/manifests/$(sig_tag "$D2")" -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' --data-binary @sig1.json
refused "a signature of another digest is refused" "signature 1 \(by this key\): it signs manifest $D1, not $D2" "$REG/team/app:v1"
# an older version, signed when it was :old, replayed as :v1
"$KILN" push --sign team.key demo:2 "$REG/team/app:old" >/dev/null 2>&1
refused "a signature made for another tag, replayed, is refused" "it was made for $REG/team/app:old, not $REG/team/app:v1" "$REG/team/app:v1"
# a truncated signature
"$KILN" push --sign team.key demo:2 "$REG/team/trunc:v1" >/dev/null 2>&1
req GET "/v2/team/trunc/manifests/$(sig_tag "$D2")"
good=$(hdr Docker-Content-Digest)
jq -c '.layers[0].annotations."dev.cosignproject.cosign/signature" |= .[0:40]' body >trunc.json
req PUT "/v2/team/trunc/manifests/$(sig_tag "$D2")" -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' --data-binary @trunc.json
# the untruncated manifest is a referrer of D2 (its subject) until deleted
req DELETE "/v2/team/trunc/manifests/$good"
expect_code "the untruncated signature manifest deleted (the truncated one its only referrer)" 202
refused "a truncated signature is refused" "not a valid signature by this key" "$REG/team/trunc:v1"
echo "{\"scopes\": {\"$REG/team/trunc\": {\"reject\": true}, \"$REG/team\": {\"keys\": [\"team.pub\"]}}}" >rej.json
expect_exit 1 "the most specific scope applies (reject)" env KILN_HOME="$H2" "$KILN" pull --policy rej.json "$REG/team/trunc:v1"
expect_grep "  ... naming it" "the signing policy rejects $REG/team/trunc" "$T_TMP/err"
echo '{"scopes": {"x": {"keys": ["missing.pub"]}}}' >bad.json
expect_exit 1 "a policy naming a missing key refuses everything" env KILN_HOME="$H2" "$KILN" pull --policy bad.json "$REG/team/unsigned:v1"

# a registry that answers the tag differently the second time: kiln asks once and pulls by digest
python3 "$OLDPWD/tests/swap_proxy.py" px.port "$REG" /v2/team/swap/manifests/v1 /v2/team/swap/manifests/v2 &
PX=$!
for _ in $(seq 1 100); do [ -s px.port ] && break; sleep 0.05; done
PREG=127.0.0.1:$(cat px.port)
"$KILN" push --sign team.key demo:1 "$PREG/team/swap:v1" >/dev/null 2>"$T_TMP/err" || { not_ok "push through the proxy"; sed 's/^/#   /' "$T_TMP/err"; }
"$KILN" push demo:2 "$REG/team/swap:v2" >/dev/null 2>&1
echo "{\"scopes\": {\"$PREG/team\": {\"keys\": [\"team.pub\"]}}}" >px.json
curl -s "http://$PREG/_reset" >/dev/null
expect_exit 0 "a registry changing the tag's answer after the check: the checked digest is pulled" \
	env KILN_HOME="$H2" "$KILN" pull --policy px.json "$PREG/team/swap:v1"
expect_eq "  ... the signed one, not the second answer" "$(cat "$T_TMP/out")" "$D1"
expect_eq "  ... and stored as such" \
	"$(jq -r --arg r "$PREG/team/swap:v1" '.[$r].digest' "$H2/images.json")" "$D1"
curl -s "http://$PREG/_reset" >/dev/null
curl -s -o /dev/null "http://$PREG/v2/team/swap/manifests/v1"
expect_exit 1 "  ... and once it answers with the unsigned one, that is refused" \
	env KILN_HOME="$H2" "$KILN" pull --policy px.json "$PREG/team/swap:v1"
expect_grep "  ... naming its digest" "team/swap:v1 \\($D2\\): refused: not signed" "$T_TMP/err"
kill "$PX" 2>/dev/null; wait "$PX" 2>/dev/null; PX=

# ---- provenance
mkdir -p ctx-p && echo prov >ctx-p/f.txt && printf 'FROM scratch\nARG V\nCOPY f.txt /f.txt\n' >ctx-p/Dockerfile
expect_exit 0 "kiln build --provenance" "$KILN" build --provenance --build-arg V=42 -t prov:1 ctx-p
DP=$(head -1 "$T_TMP/out")
[ -f "$H1/provenance/${DP#sha256:}.json" ] && ok "  ... recorded for the push" || not_ok "  ... recorded for the push"
expect_exit 0 "push --sign attaches it" "$KILN" push --sign team.key prov:1 "$REG/team/prov:1"
expect_grep "  ... saying so" "attached signed provenance to $REG/team/prov:1 \\($DP\\)" "$T_TMP/err"
expect_exit 0 "kiln inspect --provenance" "$KILN" inspect --provenance --key team.pub "$REG/team/prov:1"
cp "$T_TMP/out" prov.json
expect_eq "  ... an in-toto statement about the pushed manifest" \
	"$(jq -r '.[0].statement | [._type, .predicateType, .subject[0].digest.sha256] | join(" ")' prov.json)" \
	"https://in-toto.io/Statement/v1 https://slsa.dev/provenance/v1 ${DP#sha256:}"
expect_eq "  ... signed by team.pub" "$(jq -r '.[0].key' prov.json)" "$(jq -r '.verified[0].keys[0]' "$H2/trust/${D1#sha256:}.json")"
expect_eq "  ... with the Dockerfile's digest" \
	"$(jq -r '.[0].statement.predicate.buildDefinition.externalParameters.dockerfile.digest.sha256' prov.json)" \
	"$(sha256sum ctx-p/Dockerfile | cut -d' ' -f1)"
expect_eq "  ... the build args" "$(jq -c '.[0].statement.predicate.buildDefinition.externalParameters.buildArgs' prov.json)" '{"V":"42"}'
expect_eq "  ... the builder" "$(jq -r '.[0].statement.predicate.runDetails.builder.id' prov.json)" "kiln@$(hostname)"
expect_eq "  ... and the build's times" \
	"$(jq -r '.[0].statement.predicate.runDetails.metadata | (.startedOn <= .finishedOn)' prov.json)" true
# the context's digest, computed here from its files (tree order, mode, sha256 or link target)
ctxdigest() {
	python3 - "$1" <<'PY'
import hashlib, os, sys
root = sys.argv[1]; out = [b"kiln-context/1\n"]
paths = []
for d, dirs, files in os.walk(root):
	for n in dirs + files:
		paths.append(os.path.relpath(os.path.join(d, n), root))
for p in sorted(paths, key=lambda x: x.encode()):
	st = os.lstat(os.path.join(root, p)); link = os.readlink(os.path.join(root, p)) if os.path.islink(os.path.join(root, p)) else ""
	dg = "sha256:" + hashlib.sha256(open(os.path.join(root, p), "rb").read()).hexdigest() if os.path.isfile(os.path.join(root, p)) and not link else "-"
	out.append(("%d:%s %o %d:%s %s\n" % (len(p.encode()), p, st.st_mode, len(link.encode()), link, dg)).encode())
print(hashlib.sha256(b"".join(out)).hexdigest())
PY
}
expect_eq "  ... the context's digest" \
	"$(jq -r '.[0].statement.predicate.buildDefinition.externalParameters.context.digest.sha256' prov.json)" "$(ctxdigest ctx-p)"
expect_eq "  ... no base images (FROM scratch)" "$(jq -c '.[0].statement.predicate.buildDefinition.resolvedDependencies' prov.json)" '[]'
# a build FROM an image in the registry: its digest as the build resolved it
mkdir -p ctx-b/sub && echo b >ctx-b/sub/b.txt && ln -s sub/b.txt ctx-b/link && echo secret >ctx-b/ignored.txt &&
	echo ignored.txt >ctx-b/.dockerignore &&
	printf 'FROM %s/team/prov:1\nCOPY sub /sub\nCOPY --from=%s/team/app:old /f.txt /old.txt\n' "$REG" "$REG" >ctx-b/Dockerfile
expect_exit 0 "kiln build --provenance FROM a registry image" "$KILN" build --provenance -t based:1 ctx-b
DB=$(head -1 "$T_TMP/out")
jq . "$H1/provenance/${DB#sha256:}.json" >pb.json
expect_eq "  ... records the base image's digest as pulled" \
	"$(jq -r --arg u "$REG/team/prov:1" '.buildDefinition.resolvedDependencies[] | select(.uri == $u) | .digest.sha256' pb.json)" \
	"${DP#sha256:}"
expect_eq "  ... and the COPY --from image's" \
	"$(jq -r --arg u "$REG/team/app:old" '.buildDefinition.resolvedDependencies[] | select(.uri == $u) | .digest.sha256' pb.json)" \
	"${D2#sha256:}"
rm ctx-b/ignored.txt
expect_eq "  ... and the context's digest, through .dockerignore" \
	"$(jq -r '.buildDefinition.externalParameters.context.digest.sha256' pb.json)" "$(ctxdigest ctx-b)"

# the attestation of prov:1 copied onto demo:1's: its subject differs
req GET "/v2/team/prov/manifests/sha256-${DP#sha256:}.att"
cp body att.json
"$KILN" push demo:1 "$REG/team/prov:other" >/dev/null 2>&1
req GET "/v2/team/prov/blobs/$(jq -r '.layers[0].digest' att.json)"
req PUT "/v2/team/prov/manifests/sha256-${D1#sha256:}.att" -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' --data-binary @att.json
expect_exit 1 "a provenance statement about another subject is refused" "$KILN" inspect --provenance "$REG/team/prov:other"
expect_grep "  ... saying whose it is" "its subject is sha256:${DP#sha256:}, not $D1" "$T_TMP/err"
expect_exit 1 "no provenance attached: an error" "$KILN" inspect --provenance "$REG/team/app:old"

echo "{\"scopes\": {\"$REG/team\": {\"keys\": [\"team.pub\"], \"builder\": \"kiln@$(hostname)\"}}}" >builder.json
expect_exit 0 "a policy requiring the builder: its signed provenance names it" \
	env KILN_HOME="$H2" "$KILN" pull --policy builder.json "$REG/team/prov:1"
echo "{\"scopes\": {\"$REG/team\": {\"keys\": [\"team.pub\"], \"builder\": \"ci@elsewhere\"}}}" >builder2.json
expect_exit 1 "another builder required: refused" env KILN_HOME="$H2" "$KILN" pull --policy builder2.json "$REG/team/prov:1"
expect_grep "  ... naming the builder found" "refused: no signed provenance naming builder ci@elsewhere; statement 1 names builder 'kiln@" "$T_TMP/err"
expect_exit 1 "a builder required, no provenance attached: refused" \
	env KILN_HOME="$H2" "$KILN" pull --policy builder.json "$REG/team/app:old"
expect_grep "  ... saying none is attached" 'naming builder .* \(none attached\)' "$T_TMP/err"

# ---- skopeo's sigstore support, when this skopeo has it
printf 'docker:\n  %s:\n    use-sigstore-attachments: true\n' "$REG" >"$T_TMP/rd.yaml" && mkdir -p rd && mv rd.yaml rd/
cat >sp.json <<JSON
{"default": [{"type": "reject"}], "transports": {
  "docker": {"$REG/team": [{"type": "sigstoreSigned", "keyPath": "$T_TMP/team.pub",
                            "signedIdentity": {"type": "matchRepoDigestOrExact"}}]},
  "dir": {"": [{"type": "insecureAcceptAnything"}]}}}
JSON
"$KILN" push --sign team.key demo:1 "$REG/team/sk:v1" >/dev/null 2>&1
if skopeo copy --policy sp.json --registries.d rd --src-tls-verify=false "docker://$REG/team/sk:v1" dir:sk1 \
	>"$T_TMP/out" 2>"$T_TMP/err"; then
	ok "skopeo's sigstoreSigned policy accepts kiln's signature"
	"$KILN" push demo:2 "$REG/team/sk:v1" >/dev/null 2>&1
	expect_exit 1 "  ... and refuses after the tag moved" skopeo copy --policy sp.json --registries.d rd \
		--src-tls-verify=false "docker://$REG/team/sk:v1" dir:sk2
elif grep -q 'sigstore disabled' "$T_TMP/err"; then
	skip "skopeo's sigstoreSigned policy accepts kiln's signature" "this skopeo is built without sigstore ($(skopeo --version))"
	skip "  ... and refuses after the tag moved" "the same"
else
	not_ok "skopeo's sigstoreSigned policy accepts kiln's signature"; sed 's/^/#   /' "$T_TMP/err"
fi
if /usr/bin/python3 -c 'import nacl.secret, cryptography' 2>/dev/null; then
	/usr/bin/python3 "$OLDPWD/tests/e2e/cosign_key.py" team.key pw team.cosign && printf pw >pw.txt
	echo '{"default": [{"type": "insecureAcceptAnything"}]}' >any.json
	if skopeo copy --policy any.json --registries.d rd --src-tls-verify=false --dest-tls-verify=false \
		--sign-by-sigstore-private-key team.cosign --sign-passphrase-file pw.txt \
		"docker://$REG/team/app:old" "docker://$REG/team/bysk:v1" >"$T_TMP/out" 2>"$T_TMP/err"; then
		expect_exit 0 "kiln verifies a signature skopeo made" pull "$REG/team/bysk:v1"
	elif grep -q 'sigstore disabled' "$T_TMP/err"; then
		skip "kiln verifies a signature skopeo made" "this skopeo is built without sigstore"
	else
		not_ok "skopeo signs with the converted key"; sed 's/^/#   /' "$T_TMP/err"
	fi
else
	skip "kiln verifies a signature skopeo made" "no python3-nacl to convert the key to cosign's format"
fi
