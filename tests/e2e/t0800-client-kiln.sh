#!/usr/bin/env bash
# t0800-client-kiln.sh — kiln's registry client against `kiln serve` with
# tokens: login (Bearer flow, wrong password, 0600 file), push of a built
# image (skopeo sees the same digest and copies it), anonymous pull of a
# public repository, pull of an image skopeo pushed, FROM a registry pinned
# by digest (moved tag re-resolves, same digest hits the cache), resumed
# blob downloads (a partial file; a pull killed midway), a corrupted blob
# refused, bad references, a docker credential helper, logout.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

trap 'reg_stop; rm -rf "$T_TMP"' EXIT
export SOURCE_DATE_EPOCH=1700000000 KILN_REGISTRY_RETRIES=1
D="$T_TMP/data"
H1=$KILN_HOME H2="$T_TMP/h2"
echo '{"auth": true}' >"$T_TMP/auth.json"
SECRET=$("$KILN" token create --data "$D" --scope 'team:pull,push' ci)
reg_start "$D" --config "$T_TMP/auth.json" || { not_ok "kiln serve starts"; exit 1; }

# images made here from scratch (no downloads)
mkimg() { # NAME CONTENT [BIGFILE_MB]
	local c="$T_TMP/ctx-$1"
	mkdir -p "$c"; echo "$2" >"$c/f.txt"
	printf 'FROM scratch\nCOPY f.txt /f.txt\nCMD ["/f"]\n' >"$c/Dockerfile"
	if [ -n "${3:-}" ]; then head -c "$(($3 << 20))" /dev/urandom >"$c/big"; echo 'COPY big /big' >>"$c/Dockerfile"; fi
	"$KILN" build -t "$1" "$c" 2>/dev/null
}
L1=$(mkimg demo:1 one) && L2=$(mkimg demo:2 two) && LB=$(mkimg big:1 big 6) && LX=$(mkimg bad:1 bad) ||
	{ not_ok "test images build"; exit 1; }

# ---- login
expect_exit 1 "push without login is refused" "$KILN" push demo:1 "$REG/team/app:v1"
expect_grep "  ... saying authentication is needed" 'HTTP 401.*kiln login' "$T_TMP/err"
echo wrong | expect_exit 1 "login with a wrong password" "$KILN" login -u ci --password-stdin "$REG"
expect_grep "  ... says the credentials were not accepted" 'not accepted' "$T_TMP/err"
[ ! -e "$H1/auth.json" ] && ok "nothing saved after a failed login" || not_ok "nothing saved after a failed login"
echo "$SECRET" | expect_exit 0 "login (Bearer token flow)" "$KILN" login -u ci --password-stdin "$REG"
expect_eq "auth.json is private" "$(stat -c %a "$H1/auth.json")" 600
expect_eq "auth.json has docker's shape" "$(jq -r --arg h "$REG" '.auths[$h].auth' "$H1/auth.json" | base64 -d)" "ci:$SECRET"
expect_exit 2 "login without a registry" "$KILN" login -u ci --password-stdin
# on a terminal: asked for, the password not echoed
(sleep 0.5; printf 'ci\n'; sleep 0.5; printf '%s\n' "$SECRET"; sleep 1) |
	script -qec "$KILN login $REG" /dev/null >"$T_TMP/tty" 2>&1
expect_grep "login on a terminal asks and succeeds" '^Login succeeded' "$T_TMP/tty"
if grep -q "$SECRET" "$T_TMP/tty"; then not_ok "  ... the password is not echoed"; else ok "  ... the password is not echoed"; fi
expect_exit 2 "login without a terminal or --password-stdin" "$KILN" login -u ci "$REG" </dev/null

# ---- push, then other clients read it
expect_exit 0 "kiln push" "$KILN" push demo:1 "$REG/team/app:v1"
expect_eq "push prints the local digest" "$(cat "$T_TMP/out")" "$L1"
expect_exit 0 "push again (blobs present)" "$KILN" push --json demo:1 "$REG/team/app:v1"
expect_eq "  ... moves no blob bytes" "$(grep '"progress"' "$T_TMP/out" | tail -1 | jq .bytes_moved)" 0
CR=(--creds "ci:$SECRET" --tls-verify=false)
expect_exit 0 "skopeo inspect what kiln pushed" skopeo inspect "${CR[@]}" "docker://$REG/team/app:v1"
expect_eq "  ... same digest" "$(jq -r .Digest "$T_TMP/out")" "$L1"
expect_exit 0 "skopeo copy what kiln pushed" skopeo copy --src-creds "ci:$SECRET" --src-tls-verify=false \
	"docker://$REG/team/app:v1" "oci:$T_TMP/sk:x"
expect_eq "  ... same manifest digest" "$(jq -r '.manifests[0].digest' "$T_TMP/sk/index.json")" "$L1"

expect_exit 1 "push outside the token's namespace" "$KILN" push demo:1 "$REG/other/app:v1"
expect_grep "  ... access denied, one line" '^kiln: .*HTTP 403.*access denied$' "$T_TMP/err"

# ---- pull on a second host
export KILN_HOME=$H2
expect_exit 1 "anonymous pull of a private repository" "$KILN" pull "$REG/team/app:v1"
expect_grep "  ... one clear line" "^kiln: .*team/app:v1.*401" "$T_TMP/err"
expect_eq "  ... and only one line" "$(wc -l <"$T_TMP/err")" 1
"$KILN" registry public --data "$D" team/app >/dev/null
expect_exit 0 "anonymous pull of a public repository" "$KILN" pull "$REG/team/app:v1"
expect_eq "  ... same digest" "$(cat "$T_TMP/out")" "$L1"
expect_exit 0 "kiln images" "$KILN" images
expect_grep "  ... lists the pulled image" "^$REG/team/app:v1 +$L1" "$T_TMP/out"
expect_exit 0 "pull by digest" "$KILN" pull "$REG/team/app@$L1"
expect_eq "  ... quiet when not on a terminal" "$(wc -c <"$T_TMP/err")" 0
script -qec "$KILN pull $REG/team/app:v1" /dev/null >"$T_TMP/tty" 2>&1
expect_grep "progress on a terminal" 'pull: [0-9]+/[0-9]+ blobs.*/s' "$T_TMP/tty"

# an index: kiln picks its linux/amd64 image
idx() { jq -n --arg a "$L1" --arg b "$L2" --argjson sa "$(stat -c %s "$H1/blobs/sha256/${L1#sha256:}")" \
	--argjson sb "$(stat -c %s "$H1/blobs/sha256/${L2#sha256:}")" '{schemaVersion: 2,
	mediaType: "application/vnd.oci.image.index.v1+json", manifests: [
	{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $b, size: $sb, platform: {os: "linux", architecture: "arm64"}},
	{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $a, size: $sa, platform: {os: "linux", architecture: "amd64"}}]}'; }
KILN_HOME=$H1 "$KILN" push demo:2 "$REG/team/multi:arm" >/dev/null
KILN_HOME=$H1 "$KILN" push demo:1 "$REG/team/multi:amd" >/dev/null
idx >"$T_TMP/index.json"
req PUT /v2/team/multi/manifests/v1 -H "Authorization: Bearer $SECRET" \
	-H 'Content-Type: application/vnd.oci.image.index.v1+json' --data-binary @"$T_TMP/index.json"
expect_code "an index pushed with curl" 201
"$KILN" registry public --data "$D" team/multi >/dev/null
expect_exit 0 "pull of an index" "$KILN" pull "$REG/team/multi:v1"
expect_eq "  ... gives its linux/amd64 image" "$(cat "$T_TMP/out")" "$L1"

# an image skopeo pushed (from kiln's OCI output), pulled by kiln
KILN_HOME=$H1 "$KILN" build --oci-out "$T_TMP/oci" -t sk:1 "$T_TMP/ctx-demo:2" >/dev/null 2>&1
expect_exit 0 "skopeo pushes an image" skopeo copy --dest-creds "ci:$SECRET" --dest-tls-verify=false \
	"oci:$T_TMP/oci" "docker://$REG/team/sk:v1"
"$KILN" registry public --data "$D" team/sk >/dev/null
expect_exit 0 "kiln pulls what skopeo pushed" "$KILN" pull --json "$REG/team/sk:v1"
expect_eq "  ... same digest" "$(tail -1 "$T_TMP/out" | jq -r .digest)" \
	"$(skopeo inspect "${CR[@]}" "docker://$REG/team/sk:v1" | jq -r .Digest)"
expect_eq "  ... its progress counts the blob bytes it fetched, no more" \
	"$(grep '"progress"' "$T_TMP/out" | tail -1 | jq '.bytes_moved == .bytes_total and .bytes_total > 0')" true

# ---- FROM a registry, pinned by digest
C="$T_TMP/ctx-from"; mkdir -p "$C"; echo x >"$C/x"
printf 'FROM %s/team/app:v1\nCOPY x /x\n' "$REG" >"$C/Dockerfile"
expect_exit 0 "build FROM the registry" "$KILN" build -t app2 "$C"
B1=$(cat "$T_TMP/out")
expect_grep "  ... FROM resolved to the pushed digest" "^  $L1 " "$T_TMP/err"
expect_exit 0 "rebuild, tag unchanged" "$KILN" build -t app2 "$C"
expect_eq "  ... same result" "$(cat "$T_TMP/out")" "$B1"
expect_grep "  ... from the cache" 'cache hit' "$T_TMP/err"
KILN_HOME=$H1 "$KILN" push demo:2 "$REG/team/app:v1" >/dev/null
expect_exit 0 "rebuild after the tag moved" "$KILN" build -t app2 "$C"
expect_grep "  ... FROM re-resolved to the new digest" "^  $L2 " "$T_TMP/err"
[ "$(cat "$T_TMP/out")" != "$B1" ] && ok "  ... a different image" || not_ok "  ... a different image"
expect_grep "  ... the COPY step is not a cache hit" 'cache miss' "$T_TMP/err"
printf 'FROM %s/team/app@%s\nCOPY x /x\n' "$REG" "$L1" >"$C/Dockerfile"
expect_exit 0 "build FROM a registry image by digest" "$KILN" build -t app3 "$C"
expect_eq "  ... the first build's result again" "$(cat "$T_TMP/out")" "$B1"

# ---- an interrupted blob download resumes (the .part an interrupted pull leaves)
KILN_HOME=$H1 "$KILN" push big:1 "$REG/team/big:v1" >/dev/null
"$KILN" registry public --data "$D" team/big >/dev/null
LAYER=$(jq -r '.layers[-1].digest' "$H1/blobs/sha256/${LB#sha256:}")
LSIZE=$(stat -c %s "$H1/blobs/sha256/${LAYER#sha256:}")
mkdir -p "$H2/tmp"
head -c $((LSIZE / 2)) "$H1/blobs/sha256/${LAYER#sha256:}" >"$H2/tmp/pull-${LAYER#sha256:}.part"
expect_exit 0 "pull with half a layer already downloaded" "$KILN" pull --json "$REG/team/big:v1"
MOVED=$(grep '"progress"' "$T_TMP/out" | tail -1 | jq .bytes_moved)
[ "$MOVED" -lt $((LSIZE / 2 + 4096)) ] && ok "  ... fetched only the rest ($MOVED of $LSIZE bytes)" ||
	not_ok "  ... fetched only the rest ($MOVED of $LSIZE bytes)"
expect_eq "  ... the stored layer is intact" "sha256:$(sha256sum "$H2/blobs/sha256/${LAYER#sha256:}" | cut -d' ' -f1)" "$LAYER"

# ---- a pull killed midway (SIGKILL) resumes from what it left on disk
export KILN_HOME="$T_TMP/h5"
PART="$KILN_HOME/tmp/pull-${LAYER#sha256:}.part"
"$KILN" pull --limit-rate 1M "$REG/team/big:v1" >/dev/null 2>&1 &
P=$!
for _ in $(seq 1 300); do
	[ "$(stat -c %s "$PART" 2>/dev/null || echo 0)" -gt 400000 ] && break
	sleep 0.1
done
kill -9 "$P"; wait "$P" 2>/dev/null
HAVE=$(stat -c %s "$PART" 2>/dev/null || echo 0)
[ "$HAVE" -gt 0 ] && [ "$HAVE" -lt "$LSIZE" ] && ok "killed mid-download ($HAVE of $LSIZE bytes on disk)" ||
	not_ok "killed mid-download ($HAVE of $LSIZE bytes on disk)"
"$KILN" images >"$T_TMP/imgs"
if grep -q "team/big" "$T_TMP/imgs"; then not_ok "  ... no image recorded"; else ok "  ... no image recorded"; fi
expect_exit 0 "pull after the kill" "$KILN" pull --json "$REG/team/big:v1"
MOVED=$(grep '"progress"' "$T_TMP/out" | tail -1 | jq .bytes_moved)
[ "$MOVED" -le $((LSIZE - HAVE + 4096)) ] && ok "  ... fetched only the rest ($MOVED bytes)" ||
	not_ok "  ... fetched only the rest ($MOVED bytes, $HAVE were on disk)"
expect_eq "  ... the stored layer is intact" "sha256:$(sha256sum "$KILN_HOME/blobs/sha256/${LAYER#sha256:}" | cut -d' ' -f1)" "$LAYER"
export KILN_HOME=$H2

# ---- the registry killed and restarted under a pull: the same process resumes
export KILN_HOME="$T_TMP/h7"
PART="$KILN_HOME/tmp/pull-${LAYER#sha256:}.part"
KILN_REGISTRY_RETRIES=8 "$KILN" pull --json --limit-rate 1M "$REG/team/big:v1" >"$T_TMP/p7" 2>"$T_TMP/p7e" &
P=$!
for _ in $(seq 1 300); do
	[ "$(stat -c %s "$PART" 2>/dev/null || echo 0)" -gt 400000 ] && break
	sleep 0.1
done
reg_stop KILL
sleep 0.3
"$KILN" serve --addr "$REG" --data "$D" --config "$T_TMP/auth.json" 2>"$T_TMP/serve2.log" &
REG_PID=$!
wait "$P"; R7=$?
expect_eq "a pull survives a registry restart" "$R7 $(tail -1 "$T_TMP/p7" | jq -r .digest)" "0 $LB"
MOVED=$(grep '"progress"' "$T_TMP/p7" | tail -1 | jq .bytes_moved)
[ "$MOVED" -lt $((LSIZE + 100000)) ] && ok "  ... resumed, not restarted ($MOVED bytes for a $LSIZE-byte layer)" ||
	not_ok "  ... resumed, not restarted ($MOVED bytes for a $LSIZE-byte layer)"
expect_eq "  ... the layer is intact" "sha256:$(sha256sum "$KILN_HOME/blobs/sha256/${LAYER#sha256:}" | cut -d' ' -f1)" "$LAYER"
export KILN_HOME=$H2

# ---- two pulls of the same image at once into one store
export KILN_HOME="$T_TMP/h6"
"$KILN" pull --limit-rate 4M "$REG/team/big:v1" >"$T_TMP/p1" 2>&1 &
P1=$!
"$KILN" pull --limit-rate 4M "$REG/team/big:v1" >"$T_TMP/p2" 2>&1 &
P2=$!
wait "$P1"; R1=$?; wait "$P2"; R2=$?
expect_eq "two concurrent pulls both succeed" "$R1 $R2 $(cat "$T_TMP/p1") $(cat "$T_TMP/p2")" "0 0 $LB $LB"
expect_eq "  ... the layer is intact" "sha256:$(sha256sum "$KILN_HOME/blobs/sha256/${LAYER#sha256:}" | cut -d' ' -f1)" "$LAYER"
expect_eq "  ... nothing left in tmp/" "$(ls "$KILN_HOME/tmp" | wc -l)" 0
# built on a registry image, pushed to another repository there: the base
# layer is mounted across repositories, not uploaded again
C6="$T_TMP/ctx-on-big"; mkdir -p "$C6"; echo small >"$C6/s"
printf 'FROM %s/team/big:v1\nCOPY s /s\n' "$REG" >"$C6/Dockerfile"
"$KILN" build -t onbig "$C6" >/dev/null 2>&1
echo "$SECRET" | "$KILN" login -u ci --password-stdin "$REG" >/dev/null
expect_exit 0 "push of an image built on a registry image" "$KILN" push --json onbig "$REG/team/onbig:v1"
MOVED=$(grep '"progress"' "$T_TMP/out" | tail -1 | jq .bytes_moved)
[ "$MOVED" -lt $((LSIZE / 4)) ] && ok "  ... the base layer was mounted, not sent ($MOVED bytes sent)" ||
	not_ok "  ... the base layer was mounted, not sent ($MOVED bytes sent, layer $LSIZE)"
expect_exit 0 "  ... and skopeo reads it whole" skopeo copy --src-creds "ci:$SECRET" --src-tls-verify=false \
	"docker://$REG/team/onbig:v1" "oci:$T_TMP/onbig:x"
export KILN_HOME=$H2

# ---- a blob whose content does not match its digest is refused, not stored
KILN_HOME=$H1 "$KILN" push bad:1 "$REG/team/bad:v1" >/dev/null
"$KILN" registry public --data "$D" team/bad >/dev/null
BL=$(jq -r '.layers[-1].digest' "$H1/blobs/sha256/${LX#sha256:}")
F=$(find "$D/blobs" -name "${BL#sha256:}")
python3 - "$F" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0xff; open(p, "wb").write(bytes(b))
PY
expect_exit 1 "pull of a corrupted blob fails" "$KILN" pull "$REG/team/bad:v1"
expect_grep "  ... saying the content does not match its digest" "does not match its digest" "$T_TMP/err"
[ ! -e "$H2/blobs/sha256/${BL#sha256:}" ] && ok "  ... the blob is not stored" || not_ok "  ... the blob is not stored"
"$KILN" images >"$T_TMP/imgs"
if grep -q "team/bad" "$T_TMP/imgs"; then not_ok "  ... no image recorded"; else ok "  ... no image recorded"; fi

# ---- bad references, unreachable registries
expect_exit 1 "bad reference" "$KILN" pull "$REG/Team/App:v1"
expect_grep "  ... names the bad part" "bad repository name \"Team/App\": 'T' is not allowed" "$T_TMP/err"
expect_exit 1 "bad tag" "$KILN" pull "$REG/team/app:bad:tag"
expect_eq "  ... one line" "$(wc -l <"$T_TMP/err")" 1
expect_exit 1 "unreachable registry" "$KILN" pull 127.0.0.1:1/x/y:z
expect_grep "  ... one clear line" '^kiln: .*registry 127\.0\.0\.1:1: .*connect' "$T_TMP/err"
# 0x7f000001 is 127.0.0.1, but not by a name kiln knows as loopback: HTTPS
HX="0x7f000001:$REG_PORT"
expect_exit 1 "a host not known as loopback gets HTTPS" "$KILN" pull "$HX/team/app:v1"
expect_grep "  ... the TLS error points at KILN_INSECURE_REGISTRIES" 'SSL.*KILN_INSECURE_REGISTRIES' "$T_TMP/err"
expect_exit 0 "  ... and listed there, plain HTTP" env KILN_INSECURE_REGISTRIES="other:1, $HX" "$KILN" pull "$HX/team/app:v1"
expect_exit 1 "push of an unknown local image" "$KILN" push nope:1 "$REG/team/x:1"
expect_grep "  ... says so" 'no image or template nope:1 here' "$T_TMP/err"

# ---- credentials from a docker credential helper (credHelpers in ~/.docker/config.json)
mkdir -p "$T_TMP/hb" "$T_TMP/hhome/.docker"
cat >"$T_TMP/hb/docker-credential-kilne2e" <<EOF
#!/bin/sh
[ "\$1" = get ] || exit 2
read -r host
[ "\$host" = "$REG" ] && printf '{"Username":"ci","Secret":"%s"}' "$SECRET" && exit 0
echo "credentials not found in native keychain" >&2; exit 1
EOF
chmod +x "$T_TMP/hb/docker-credential-kilne2e"
printf '{"credHelpers": {"%s": "kilne2e"}}\n' "$REG" >"$T_TMP/hhome/.docker/config.json"
expect_exit 0 "pull of a private repository with a credential helper" env HOME="$T_TMP/hhome" \
	PATH="$T_TMP/hb:$PATH" KILN_HOME="$T_TMP/h8" "$KILN" pull "$REG/team/onbig:v1"

# ---- logout
export KILN_HOME=$H1
expect_exit 0 "logout" "$KILN" logout "$REG"
expect_exit 1 "logout again" "$KILN" logout "$REG"
expect_grep "  ... not logged in" 'not logged in' "$T_TMP/err"
expect_exit 1 "push after logout is refused" "$KILN" push demo:1 "$REG/team/app:v1"
