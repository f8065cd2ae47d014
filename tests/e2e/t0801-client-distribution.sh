#!/usr/bin/env bash
# t0801-client-distribution.sh — kiln's registry client against Debian's
# docker-registry (distribution 2.8): push (monolithic and PATCH chunks) and
# pull with digests equal to what skopeo sees, an image skopeo pushed pulled
# by kiln (OCI and Docker schema 2, built on and pushed back), resume with
# Range, HTTPS (certificate refused, then trusted with KILN_REGISTRY_CA_FILE)
# and htpasswd (Basic challenge) login.
. tests/e2e/lib.sh

PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T_TMP"' EXIT
export SOURCE_DATE_EPOCH=1700000000 KILN_REGISTRY_RETRIES=1
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_distribution() { # NAME [AUTH-YAML | TLS-YAML https] -> sets ADDR
	local port d="$T_TMP/$1" scheme=${3:-http} auth=${2:-} tls=
	port=$(free_port)
	[ "$scheme" = https ] && { tls=$auth; auth=; }
	mkdir -p "$d"
	cat >"$d.yml" <<EOC
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: $d}
http:
    addr: "127.0.0.1:$port"
$tls
$auth
EOC
	docker-registry serve "$d.yml" 2>"$d.log" &
	PIDS+=($!); ADDR=127.0.0.1:$port
	for _ in $(seq 1 200); do
		[ "$(curl -sk -o /dev/null -w '%{http_code}' "$scheme://$ADDR/v2/")" != 000 ] && return 0
		sleep 0.05
	done
	echo "# docker-registry did not start"; sed 's/^/#   /' "$d.log"; return 1
}

mkimg() { # NAME CONTENT BIGFILE_KB
	local c="$T_TMP/ctx-$1"
	mkdir -p "$c"; echo "$2" >"$c/f.txt"; head -c "$(($3 << 10))" /dev/urandom >"$c/big"
	printf 'FROM scratch\nCOPY f.txt /f.txt\nCOPY big /big\n' >"$c/Dockerfile"
	"$KILN" build -t "$1" "$c" 2>/dev/null
}
L1=$(mkimg one:1 one 3072) && L2=$(mkimg two:1 two 64) || { not_ok "test images build"; exit 1; }
start_distribution open || { not_ok "docker-registry starts"; exit 1; }
R=$ADDR
SK=(--tls-verify=false)

expect_exit 0 "push to distribution in 1 MiB PATCH chunks" "$KILN" push --chunk-size 1M one:1 "$R/a/one:v1"
expect_eq "  ... the local digest" "$(cat "$T_TMP/out")" "$L1"
expect_exit 0 "push to distribution monolithically" env KILN_LOG=debug "$KILN" push two:1 "$R/a/two:v1"
expect_grep "  ... no batch blob query there: HEADs instead" 'no batch blob query \(HTTP 404\)' "$T_TMP/err"
expect_exit 0 "skopeo inspect" skopeo inspect "${SK[@]}" "docker://$R/a/one:v1"
expect_eq "  ... same digest" "$(jq -r .Digest "$T_TMP/out")" "$L1"
expect_exit 0 "skopeo copy (distribution → OCI layout)" skopeo copy --src-tls-verify=false "docker://$R/a/one:v1" "oci:$T_TMP/lay:x"
expect_eq "  ... same digest" "$(jq -r '.manifests[0].digest' "$T_TMP/lay/index.json")" "$L1"
expect_exit 0 "skopeo copy (OCI layout → distribution, other repo)" skopeo copy --dest-tls-verify=false \
	"oci:$T_TMP/lay:x" "docker://$R/b/copied:v2"

export KILN_HOME="$T_TMP/h2"
expect_exit 0 "kiln pull of what skopeo pushed" "$KILN" pull "$R/b/copied:v2"
expect_eq "  ... same digest" "$(cat "$T_TMP/out")" "$(skopeo inspect "${SK[@]}" "docker://$R/b/copied:v2" | jq -r .Digest)"
expect_exit 0 "kiln pull of what kiln pushed" "$KILN" pull "$R/a/two:v1"
expect_eq "  ... same digest" "$(cat "$T_TMP/out")" "$L2"
expect_exit 0 "kiln images lists both" "$KILN" images
expect_grep "  ... copied" "^$R/b/copied:v2 " "$T_TMP/out"

# a Docker schema 2 image (skopeo converts), pulled, built on and pushed back
expect_exit 0 "skopeo pushes a Docker schema 2 image" skopeo copy --dest-tls-verify=false --format v2s2 \
	"oci:$T_TMP/lay:x" "docker://$R/d/v2s2:v1"
expect_exit 0 "kiln pulls it" "$KILN" pull "$R/d/v2s2:v1"
DV=$(cat "$T_TMP/out")
expect_eq "  ... same digest" "$DV" "$(skopeo inspect "${SK[@]}" "docker://$R/d/v2s2:v1" | jq -r .Digest)"
expect_eq "  ... stored as Docker's type" "$(jq -r .mediaType "$KILN_HOME/blobs/sha256/${DV#sha256:}")" \
	application/vnd.docker.distribution.manifest.v2+json
C="$T_TMP/ctx-from"; mkdir -p "$C"; echo x >"$C/x"
printf 'FROM %s/d/v2s2:v1\nCOPY x /x\n' "$R" >"$C/Dockerfile"
expect_exit 0 "build FROM it" "$KILN" build -t onv2 "$C"
expect_exit 0 "push the result" "$KILN" push onv2 "$R/d/built:v1"
expect_exit 0 "skopeo copies the result" skopeo copy --src-tls-verify=false "docker://$R/d/built:v1" "oci:$T_TMP/built:x"
expect_eq "  ... 3 layers" "$(skopeo inspect --raw "oci:$T_TMP/built:x" | jq '.layers | length')" 3

# resume: distribution answers Range with 206
export KILN_HOME="$T_TMP/h3"
H1=$T_TMP/home
LAYER=$(jq -r '.layers[-1].digest' "$H1/blobs/sha256/${L1#sha256:}")
LSIZE=$(stat -c %s "$H1/blobs/sha256/${LAYER#sha256:}")
mkdir -p "$KILN_HOME/tmp"
head -c $((LSIZE / 3)) "$H1/blobs/sha256/${LAYER#sha256:}" >"$KILN_HOME/tmp/pull-${LAYER#sha256:}.part"
expect_exit 0 "pull resumes a partial layer" "$KILN" pull --json "$R/a/one:v1"
MOVED=$(grep '"progress"' "$T_TMP/out" | tail -1 | jq .bytes_moved)
[ "$MOVED" -le $((LSIZE - LSIZE / 3 + 4096)) ] && ok "  ... fetched only the rest ($MOVED of $LSIZE)" ||
	not_ok "  ... fetched only the rest ($MOVED of $LSIZE)"
expect_eq "  ... intact" "sha256:$(sha256sum "$KILN_HOME/blobs/sha256/${LAYER#sha256:}" | cut -d' ' -f1)" "$LAYER"
expect_exit 1 "a missing tag" "$KILN" pull "$R/a/one:nope"
expect_grep "  ... MANIFEST_UNKNOWN from distribution" 'HTTP 404 MANIFEST_UNKNOWN' "$T_TMP/err"

# HTTPS: a host name kiln does not take for loopback (0x7f000001 is 127.0.0.1,
# which curl checks the certificate against), a self-signed certificate,
# trusted through KILN_REGISTRY_CA_FILE
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=0x7f000001 -addext subjectAltName=DNS:0x7f000001,IP:127.0.0.1 \
	-keyout "$T_TMP/tls.key" -out "$T_TMP/tls.crt" 2>/dev/null
start_distribution tls "    tls: {certificate: $T_TMP/tls.crt, key: $T_TMP/tls.key}" https ||
	{ not_ok "docker-registry with TLS starts"; exit 1; }
TH="0x7f000001:${ADDR#127.0.0.1:}"
export KILN_HOME=$H1
expect_exit 1 "HTTPS with an untrusted certificate is refused" "$KILN" push two:1 "$TH/t/two:v1"
expect_grep "  ... saying why" 'certificate.*KILN_REGISTRY_CA_FILE' "$T_TMP/err"
expect_exit 0 "push over HTTPS with the CA trusted" env KILN_REGISTRY_CA_FILE="$T_TMP/tls.crt" "$KILN" push two:1 "$TH/t/two:v1"
expect_exit 0 "  ... skopeo sees it" skopeo inspect --tls-verify=false "docker://$ADDR/t/two:v1"
expect_eq "  ... same digest" "$(jq -r .Digest "$T_TMP/out")" "$L2"
expect_exit 0 "pull over HTTPS" env KILN_REGISTRY_CA_FILE="$T_TMP/tls.crt" KILN_HOME="$T_TMP/h5" "$KILN" pull "$TH/t/two:v1"
expect_eq "  ... same digest" "$(cat "$T_TMP/out")" "$L2"

# htpasswd: the Basic challenge
HASH=$(python3 -c 'import crypt; print(crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH)))' 2>/dev/null)
echo "alice:$HASH" >"$T_TMP/htpasswd"
start_distribution basic "auth: {htpasswd: {realm: kiln-test, path: $T_TMP/htpasswd}}" ||
	{ not_ok "docker-registry with htpasswd starts"; exit 1; }
B=$ADDR
export KILN_HOME=$H1
echo nope | expect_exit 1 "Basic login with a wrong password" "$KILN" login -u alice --password-stdin "$B"
expect_grep "  ... refused" 'not accepted|401' "$T_TMP/err"
echo s3cret | expect_exit 0 "Basic login" "$KILN" login -u alice --password-stdin "$B"
expect_exit 0 "push with Basic credentials" "$KILN" push two:1 "$B/c/two:v1"
expect_exit 0 "skopeo sees it" skopeo inspect "${SK[@]}" --creds alice:s3cret "docker://$B/c/two:v1"
expect_eq "  ... same digest" "$(jq -r .Digest "$T_TMP/out")" "$L2"
export KILN_HOME="$T_TMP/h4"
expect_exit 1 "anonymous pull is refused" "$KILN" pull "$B/c/two:v1"
expect_grep "  ... asks for a login" 'kiln login' "$T_TMP/err"
echo s3cret | "$KILN" login -u alice --password-stdin "$B" >/dev/null 2>&1
expect_exit 0 "pull with Basic credentials" "$KILN" pull "$B/c/two:v1"
expect_eq "  ... same digest" "$(cat "$T_TMP/out")" "$L2"
