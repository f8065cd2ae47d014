#!/usr/bin/env bash
# t0885-signed-referrers.sh — signatures and provenance as OCI 1.1 referrers:
# after kiln push --sign, a real `kiln serve`'s referrers API lists the
# signature and the provenance (by their artifactType, under the signed
# digest) while the sha256-HEX.sig/.att tags still hold them; cosign 2.5.0
# verifies them both ways (its tag scheme and --experimental-oci11); kiln
# pull finds a signature cosign wrote as a referrer only (oci-1-1 mode, no
# tag) and refuses a referrer carrying another digest's signature; against
# Debian's docker-registry (distribution 2.8, no referrers API: 404) push
# --sign and pull under a policy still work through the tags.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

need_tools docker-registry jq curl
DPID=
trap 'reg_stop; [ -n "$DPID" ] && { kill "$DPID"; wait "$DPID"; } 2>/dev/null; rm -rf "$T_TMP"' EXIT
export SOURCE_DATE_EPOCH=1700000000 KILN_REGISTRY_RETRIES=1 COSIGN_PASSWORD=pw TUF_ROOT=$T_TMP/tuf SIGSTORE_NO_CACHE=1
reg_start "$T_TMP/data" || { not_ok "kiln serve starts"; exit 1; }
cd "$T_TMP" || exit 1
COSIGN=$("$OLDPWD/tests/e2e/cosign-fetch.sh" 2>fetch.err) || COSIGN=

mkimg() { # NAME CONTENT
	mkdir -p "ctx-$1" && echo "$2" >"ctx-$1/f.txt" && printf 'FROM scratch\nCOPY f.txt /f.txt\n' >"ctx-$1/Dockerfile"
	"$KILN" build --provenance -t "$1" "ctx-$1" 2>/dev/null
}
D1=$(mkimg demo:1 one) && D2=$(mkimg demo:2 two) || { not_ok "test images build"; exit 1; }
"$KILN" key generate team >/dev/null && "$KILN" key generate other >/dev/null
H2=$T_TMP/h2
pull() { # POLICY REF
	rm -rf "$H2"
	KILN_HOME=$H2 "$KILN" pull --policy "$@"
}
pol() { # REGISTRY KEY [MORE-JSON]: a policy file for REGISTRY/team, its path printed
	local f=$T_TMP/policy.$RANDOM.json
	echo "{\"scopes\": {\"$1/team\": {\"keys\": [\"$2\"]${3:-}}}}" >"$f" && echo "$f"
}
SIG=application/vnd.dev.cosign.artifact.sig.v1+json ATT=application/vnd.in-toto+json

# ---- kiln's registry: the referrers API lists what push --sign attached
expect_exit 0 "kiln push --sign" "$KILN" push --sign team.key demo:1 "$REG/team/app:v1"
req GET "/v2/team/app/referrers/$D1"
expect_code "the referrers API answers for the signed digest" 200
cp body refs.json
expect_eq "  ... listing a signature and a provenance attestation, by artifactType" \
	"$(jq -r '[.manifests[].artifactType] | sort | join(" ")' refs.json)" "$SIG $ATT"
SIGM=$(jq -r --arg t "$SIG" '.manifests[] | select(.artifactType == $t) | .digest' refs.json)
ATTM=$(jq -r --arg t "$ATT" '.manifests[] | select(.artifactType == $t) | .digest' refs.json)
head_req "/v2/team/app/manifests/sha256-${D1#sha256:}.sig"
expect_eq "  ... the signature listed is the manifest tagged sha256-HEX.sig" "$(hdr Docker-Content-Digest)" "$SIGM"
head_req "/v2/team/app/manifests/sha256-${D1#sha256:}.att"
expect_eq "  ... the provenance listed is the manifest tagged sha256-HEX.att" "$(hdr Docker-Content-Digest)" "$ATTM"
req GET "/v2/team/app/manifests/$SIGM" -H 'Accept: application/vnd.oci.image.manifest.v1+json'
expect_eq "  ... whose subject is the signed manifest (digest, type, size)" \
	"$(jq -r '.subject | [.digest, .mediaType, .size] | join(" ")' body)" \
	"$D1 application/vnd.oci.image.manifest.v1+json $(curl -s -H 'Accept: application/vnd.oci.image.manifest.v1+json' "$U/v2/team/app/manifests/$D1" | wc -c)"
req GET "/v2/team/app/referrers/$D1?artifactType=${SIG//+/%2B}"
expect_eq "  ... filtered by artifactType: the signature alone" "$(jq -r '[.manifests[].digest] | join(" ")' body)" "$SIGM"
req GET "/v2/team/app/referrers/$D2"
expect_eq "  ... an unsigned digest has none" "$(jq '.manifests | length' body)" 0

expect_exit 0 "kiln pull under a policy, the builder required too" pull "$(pol "$REG" team.pub ", \"builder\": \"kiln@$(hostname)\"")" "$REG/team/app:v1"
expect_grep "  ... the signatures found through the referrers API and the tag" 'signatures from 1 referrer and the .sig tag' "$T_TMP/err"

# ---- cosign 2.5.0 reads them both ways
if [ -z "$COSIGN" ]; then
	skip "cosign verify (tag scheme) accepts kiln's signature" "no cosign 2.5.0: $(cat fetch.err)"
	skip "cosign verify --experimental-oci11 (referrers) accepts it" "no cosign 2.5.0"
	skip "kiln pull accepts cosign's OCI 1.1 signature (a referrer, no tag)" "no cosign 2.5.0"
else
	cv() { "$COSIGN" verify --insecure-ignore-tlog=true --allow-http-registry "$@"; }
	expect_exit 0 "cosign verify (tag scheme) accepts kiln's signature" cv --key team.pub "$REG/team/app:v1"
	expect_exit 0 "cosign verify --experimental-oci11 (referrers) accepts it" cv --experimental-oci11 --key team.pub "$REG/team/app:v1"
	expect_exit 12 "  ... and refuses it under another key" cv --experimental-oci11 --key other.pub "$REG/team/app:v1"
	expect_exit 0 "cosign verify-attestation accepts kiln's provenance" "$COSIGN" verify-attestation \
		--insecure-ignore-tlog=true --allow-http-registry --type slsaprovenance1 --key team.pub "$REG/team/app:v1"

	"$COSIGN" generate-key-pair >/dev/null 2>&1
	"$KILN" push demo:2 "$REG/team/cs:v1" >/dev/null 2>&1
	expect_exit 0 "cosign sign --registry-referrers-mode=oci-1-1" env COSIGN_EXPERIMENTAL=1 "$COSIGN" sign --key cosign.key \
		--tlog-upload=false --allow-http-registry -y --registry-referrers-mode=oci-1-1 "$REG/team/cs:v1"
	head_req "/v2/team/cs/manifests/sha256-${D2#sha256:}.sig"
	expect_eq "  ... wrote no .sig tag" "$CODE" 404
	expect_exit 0 "kiln pull accepts cosign's OCI 1.1 signature (a referrer, no tag)" \
		pull "$(pol "$REG" cosign.pub ', "identity": "repository"')" "$REG/team/cs:v1"
	expect_grep "  ... found through the referrers API" 'signatures from 1 referrer, ' "$T_TMP/err"
	expect_exit 1 "  ... and refuses it under another key" pull "$(pol "$REG" team.pub ', "identity": "repository"')" "$REG/team/cs:v1"
	expect_grep "  ... saying no valid signature by that key" 'refused: no valid signature by key .*not a valid signature by this key' "$T_TMP/err"
fi

# ---- a referrer carrying another digest's valid signature
"$KILN" push --sign team.key demo:2 "$REG/team/forge:v1" >/dev/null 2>&1
"$KILN" push demo:1 "$REG/team/forge:v1" >/dev/null 2>&1
curl -s -H 'Accept: application/vnd.oci.image.manifest.v1+json' "$U/v2/team/forge/manifests/sha256-${D2#sha256:}.sig" |
	jq -c --arg d "$D1" '.subject.digest = $d | .subject.size = '"$(curl -s -H 'Accept: application/vnd.oci.image.manifest.v1+json' "$U/v2/team/forge/manifests/$D1" | wc -c)" >forged.json
FD=sha256:$(sha256sum forged.json | cut -d' ' -f1)
req PUT "/v2/team/forge/manifests/$FD" --data-binary @forged.json -H 'Content-Type: application/vnd.oci.image.manifest.v1+json'
expect_code "a forged referrer of demo:1 carrying demo:2's signature is stored" 201
expect_exit 1 "  ... kiln pull refuses demo:1" pull "$(pol "$REG" team.pub ', "identity": "repository"')" "$REG/team/forge:v1"
expect_grep "  ... saying the signature is of another digest" "refused: no valid signature by key .*it signs manifest $D2, not $D1" "$T_TMP/err"
[ -e "$H2/trust/${D1#sha256:}.json" ] && not_ok "  ... nothing recorded as trusted" || ok "  ... nothing recorded as trusted"

# ---- a registry without the referrers API: the tags
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
DP=$(free_port)
mkdir -p dist && cat >dist.yml <<EOC
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: $T_TMP/dist}
http:
  addr: "127.0.0.1:$DP"
EOC
docker-registry serve dist.yml 2>dist.log &
DPID=$!
DR=127.0.0.1:$DP
for _ in $(seq 1 200); do [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$DR/v2/")" = 200 ] && break; sleep 0.05; done
expect_exit 0 "kiln push --sign to docker-registry (distribution 2.8)" "$KILN" push --sign team.key demo:1 "$DR/team/app:v1"
expect_eq "  ... which has no referrers API (404)" \
	"$(curl -s -o /dev/null -w '%{http_code}' "http://$DR/v2/team/app/referrers/$D1")" 404
expect_eq "  ... the signature tagged sha256-HEX.sig" "$(curl -s -o /dev/null -w '%{http_code}' \
	-H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$DR/v2/team/app/manifests/sha256-${D1#sha256:}.sig")" 200
expect_exit 0 "kiln pull under a policy (builder too) verifies through the tags" \
	pull "$(pol "$DR" team.pub ", \"builder\": \"kiln@$(hostname)\"")" "$DR/team/app:v1"
expect_grep "  ... saying the registry has no referrers API" 'signatures from the .sig tag \(no referrers API\)' "$T_TMP/err"
expect_exit 1 "  ... and refuses under another key" pull "$(pol "$DR" other.pub)" "$DR/team/app:v1"
"$KILN" push demo:2 "$DR/team/plain:v1" >/dev/null 2>&1
expect_exit 1 "an unsigned image there is refused" pull "$(pol "$DR" team.pub)" "$DR/team/plain:v1"
expect_grep "  ... naming reference, digest and reason" \
	"team/plain:v1 \\($D2\\): refused: not signed \\(no signature referrer \\(the registry has no referrers API\\) nor a manifest sha256-${D2#sha256:}.sig" "$T_TMP/err"
if [ -n "$COSIGN" ]; then
	expect_exit 0 "cosign verify accepts kiln's signature there" "$COSIGN" verify --insecure-ignore-tlog=true \
		--allow-http-registry --key team.pub "$DR/team/app:v1"
fi
