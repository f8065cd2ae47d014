#!/usr/bin/env bash
# t0700-registry-skopeo.sh — real clients against `kiln serve`: skopeo pushes an
# image built here with umoci (OCI and Docker schema2 formats), pulls it back,
# copies it between repositories (cross-repo mount) and the digests match.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

trap 'reg_stop; rm -rf "$T_TMP"' EXIT
reg_start "$T_TMP/data" || { not_ok "kiln serve starts"; exit 1; }
ok "kiln serve starts on 127.0.0.1:$REG_PORT"

cd "$T_TMP"
umoci init --layout img >/dev/null && umoci new --image img:v1 >/dev/null
head -c 2000000 /dev/urandom >l1; head -c 70000 /dev/urandom >l2; echo small >l3
for f in l1 l2 l3; do umoci insert --image img:v1 "$f" "/$f" >/dev/null || not_ok "umoci insert $f"; done
src=$(skopeo inspect --raw oci:img:v1 | sha256sum | cut -d' ' -f1)
nlayers=$(skopeo inspect --raw oci:img:v1 | jq '.layers | length')
expect_eq "test image has 3 layers" "$nlayers" 3

S="skopeo --command-timeout 60s"
expect_exit 0 "skopeo copy oci: -> kiln serve" $S copy --dest-tls-verify=false oci:img:v1 "docker://$REG/team/app:v1"
expect_exit 0 "skopeo copy kiln serve -> oci:" $S copy --src-tls-verify=false "docker://$REG/team/app:v1" oci:pulled:v1
got=$(skopeo inspect --raw oci:pulled:v1 | sha256sum | cut -d' ' -f1)
expect_eq "pulled manifest digest matches the pushed one" "$got" "$src"
remote=$($S inspect --tls-verify=false --format '{{.Digest}}' "docker://$REG/team/app:v1")
expect_eq "registry reports the same digest" "$remote" "sha256:$src"
bad=0
for d in $(skopeo inspect --raw oci:pulled:v1 | jq -r '.config.digest, .layers[].digest'); do
	cmp -s "img/blobs/sha256/${d#sha256:}" "pulled/blobs/sha256/${d#sha256:}" || bad=$((bad + 1))
done
expect_eq "every blob pulled back is byte-identical" "$bad" 0

# Docker schema2 (manifest conversion happens in skopeo; kiln stores it as given).
expect_exit 0 "skopeo push as Docker schema2" $S copy --format v2s2 --dest-tls-verify=false oci:img:v1 "docker://$REG/team/app-docker:v1"
mt=$(curl -s -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' "http://$REG/v2/team/app-docker/manifests/v1" | jq -r .mediaType)
expect_eq "schema2 manifest served with its media type" "$mt" application/vnd.docker.distribution.manifest.v2+json
expect_exit 0 "skopeo pull of the schema2 image" $S copy --src-tls-verify=false "docker://$REG/team/app-docker:v1" dir:pulled-docker

# Registry to registry: skopeo mounts blobs across repositories.
expect_exit 0 "skopeo copy between repositories" $S copy --src-tls-verify=false --dest-tls-verify=false \
	"docker://$REG/team/app:v1" "docker://$REG/other/copy:v2"
got=$(skopeo inspect --raw --tls-verify=false "docker://$REG/other/copy:v2" | sha256sum | cut -d' ' -f1)
expect_eq "copied manifest digest matches" "$got" "$src"
expect_exit 0 "skopeo list-tags" $S list-tags --tls-verify=false "docker://$REG/team/app"
expect_grep "list-tags shows v1" '"v1"' "$T_TMP/out"
expect_exit 0 "skopeo delete" $S delete --tls-verify=false "docker://$REG/other/copy:v2"
expect_exit 1 "deleted image is gone" $S inspect --tls-verify=false "docker://$REG/other/copy:v2"

# A second client: buildah pulls from kiln serve and pushes (re-compressing the layers) back.
B="buildah --root $T_TMP/bst/root --runroot $T_TMP/bst/run --storage-driver vfs"
cfg=$(skopeo inspect --raw oci:img:v1 | jq -r .config.digest)
expect_exit 0 "buildah pull from kiln serve" $B pull -q --tls-verify=false "docker://$REG/team/app:v1"
expect_eq "buildah's image ID is the config digest" "sha256:$(head -1 "$T_TMP/out")" "$cfg"
expect_exit 0 "buildah push to kiln serve" $B push -q --tls-verify=false "$REG/team/app:v1" "docker://$REG/team/rebuilt:v1"
got=$(skopeo inspect --raw --tls-verify=false "docker://$REG/team/rebuilt:v1" | jq -r .config.digest)
expect_eq "image pushed by buildah has the same config" "$got" "$cfg"
$B rmi -a -f >/dev/null 2>&1
