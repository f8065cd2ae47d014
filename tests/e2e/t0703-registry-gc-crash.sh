#!/usr/bin/env bash
# t0703-registry-gc-crash.sh — durability and garbage collection: SIGKILL the
# server during parallel skopeo pushes; after a restart every finished push is
# intact, every visible blob matches its digest, and gc removes unfinished
# uploads and unreferenced blobs (also while pushes run, without harm).
# Also gc with zero grace against re-pushes of the same blobs, `kiln registry
# ls` and tag history.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

trap 'reg_stop KILL; rm -rf "$T_TMP"' EXIT
D="$T_TMP/data"
cd "$T_TMP"
mkimg() { # DIR SIZE
	umoci init --layout "$1" >/dev/null && umoci new --image "$1:v1" >/dev/null
	head -c "$2" /dev/urandom >"$1.bin" && umoci insert --image "$1:v1" "$1.bin" /data >/dev/null
	umoci insert --image "$1:v1" "$1.bin" /copy >/dev/null
}
for i in 1 2 3 4 5 6; do mkimg "img$i" $((3000000 + i * 1000000)); done
S="skopeo --command-timeout 60s"
reg_start "$D" || { not_ok "kiln serve starts"; exit 1; }

# ---- finished pushes, then a crash during four parallel ones
expect_exit 0 "push img1" $S copy --dest-tls-verify=false oci:img1:v1 "docker://$REG/team/one:v1"
expect_exit 0 "push img2" $S copy --dest-tls-verify=false oci:img2:v1 "docker://$REG/team/two:v1"
pids=()
for i in 3 4 5 6; do
	( $S copy -q --dest-tls-verify=false "oci:img$i:v1" "docker://$REG/team/p$i:v1" >/dev/null 2>&1; echo $? >"push$i.rc" ) &
	pids+=($!)
done
sleep 0.4
reg_stop KILL
wait "${pids[@]}"
finished=$(for i in 3 4 5 6; do [ "$(cat "push$i.rc")" = 0 ] && echo "$i"; done | tr '\n' ' ')
echo "# pushes finished before SIGKILL: ${finished:-none}"
reg_start "$D" || { not_ok "restart after SIGKILL"; exit 1; }
ok "server restarts after SIGKILL"
check_image() { # IMG REPO
	local want got
	want=$(skopeo inspect --raw "oci:$1:v1" | sha256sum | cut -d' ' -f1)
	rm -rf "pull-$1"
	if $S copy -q --src-tls-verify=false "docker://$REG/$2:v1" "oci:pull-$1:v1" >/dev/null 2>&1; then
		got=$(skopeo inspect --raw "oci:pull-$1:v1" | sha256sum | cut -d' ' -f1)
	else got="pull failed"; fi
	expect_eq "$2 intact" "$got" "$want"
}
check_image img1 team/one
check_image img2 team/two
for i in $finished; do check_image "img$i" "team/p$i"; done
blobs=()
for f in "$D"/blobs/sha256/*/*; do
	case $f in *.tmp.*) continue ;; esac
	blobs+=("$f")
done
n=${#blobs[@]}
bad=$(misnamed_blobs "${blobs[@]}")
expect_eq "all $n visible blobs match their digests" "$bad" 0
for i in 3 4 5 6; do
	case " $finished " in *" $i "*) continue ;; esac
	req GET "/v2/team/p$i/manifests/v1"
	expect_code "unfinished push p$i has no manifest" 404
done

# ---- gc: unfinished uploads and unreferenced blobs go, referenced ones stay
printf 'orphan blob' >orphan
push_blob team/orphans orphan
req POST "/v2/team/orphans/blobs/uploads/"
req PATCH "$(hdr Location)" --data-binary @orphan
echo '{"gc_grace_s": 0, "upload_expiry_s": 0}' >gc0.json
expect_exit 0 "gc --dry-run" "$KILN" registry gc --data "$D" --config gc0.json --dry-run
expect_grep "dry run reports" '^dry run: [1-9][0-9]* blobs removed' out
[ -f "$D/blobs/sha256/$(sha256_of orphan | cut -c8-9)/$(sha256_of orphan | cut -c8-)" ] && ok "dry run removes nothing" || not_ok "dry run removes nothing"
expect_exit 0 "gc" "$KILN" registry gc --data "$D" --config gc0.json
expect_grep "gc reports expired uploads" ' [1-9][0-9]* expired uploads removed' out
expect_eq "no upload sessions left" "$(ls "$D/uploads" | wc -l)" 0
req GET "/v2/team/orphans/blobs/$(sha256_of orphan)"
expect_error "unreferenced blob collected" 404 BLOB_UNKNOWN
check_image img1 team/one
check_image img2 team/two

# ---- gc (default grace) running in a loop during parallel pushes harms nothing
( for _ in $(seq 1 20); do "$KILN" registry gc --data "$D" >/dev/null 2>&1; sleep 0.05; done ) &
pids=($!)
for i in 3 4 5 6; do
	( $S copy -q --dest-tls-verify=false "oci:img$i:v1" "docker://$REG/gc/p$i:v1" >/dev/null 2>&1; echo $? >"gcpush$i.rc" ) &
	pids+=($!)
done
wait "${pids[@]}"
rcs=$(cat gcpush3.rc gcpush4.rc gcpush5.rc gcpush6.rc | tr -d '\n')
expect_eq "pushes during gc succeed" "$rcs" 0000
for i in 3 4 5 6; do check_image "img$i" "gc/p$i"; done

# ---- gc with zero grace in a loop while the same blobs are re-pushed again and
# again: every commit and gc's removal are serialised (docs/registry.md, locking
# rule), so a link or manifest never names a missing or wrong file.
echo '{"gc_grace_s": 0}' >gcz.json
printf '{"architecture":"amd64","os":"linux"}' >rcfg
for k in 1 2 3; do head -c $((k * 300000)) /dev/urandom >"rb$k"; done
desc() { printf '{"mediaType":"%s","digest":"%s","size":%s}' "$1" "$(sha256_of "$2")" "$(stat -c %s "$2")"; }
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":%s,"layers":[%s,%s,%s]}' \
	"$(desc application/vnd.oci.image.config.v1+json rcfg)" "$(desc application/vnd.oci.image.layer.v1.tar rb1)" \
	"$(desc application/vnd.oci.image.layer.v1.tar rb2)" "$(desc application/vnd.oci.image.layer.v1.tar rb3)" >rman.json
rm -f gcstop
( for _ in $(seq 1 2000); do [ -f gcstop ] && break
	"$KILN" registry gc --data "$D" --config gcz.json >/dev/null 2>>gcerr || echo "gc failed" >>gcerr
	sleep "0.$((RANDOM % 6))"; done ) &
gcpid=$!
blobfail=0; bad=0; stored=0; unread=0; nb=0
mdig=$(sha256_of rman.json)
for n in $(seq 1 30); do
	repo="race/r$((n % 3))"
	for f in rcfg rb1 rb2 rb3; do push_blob "$repo" "$f" >/dev/null || blobfail=$((blobfail + 1)); done
	req PUT "/v2/$repo/manifests/v$n" -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' --data-binary @rman.json
	case "$CODE:$(jq -r '.errors[0].code' "$T_TMP/body" 2>/dev/null)" in
	201:*) stored=$((stored + 1)) ;;
	400:MANIFEST_BLOB_UNKNOWN) continue ;; # gc (grace 0) took a blob between its upload and the manifest
	*) bad=$((bad + 1)); echo "# manifest PUT $repo:v$n: $CODE $(head -c 200 "$T_TMP/body")"; continue ;;
	esac
	# Stored: its manifest and every blob must be there, whole.
	for d in "$mdig" $(jq -r '.config.digest, .layers[].digest' rman.json); do
		nb=$((nb + 1))
		kind=blobs; [ "$d" = "$mdig" ] && kind=manifests
		got=$(curl -s --max-time 30 -H 'Accept: application/vnd.oci.image.manifest.v1+json' "$U/v2/$repo/$kind/$d" | sha256sum | cut -d' ' -f1)
		[ "sha256:$got" = "$d" ] || { unread=$((unread + 1)); echo "# $repo:v$n $d unreadable"; }
	done
	# Unreferenced again, so the next round races gc once more.
	req DELETE "/v2/$repo/manifests/$mdig"
done
touch gcstop; wait "$gcpid"
echo "# re-pushes during gc with grace 0: $stored of 30 manifests stored"
expect_eq "blob re-uploads during gc all succeed" "$blobfail" 0
expect_eq "manifest PUTs during gc: stored or MANIFEST_BLOB_UNKNOWN, nothing else" "$bad" 0
expect_eq "gc runs without errors" "$(cat gcerr 2>/dev/null)" ""
expect_eq "all $nb blobs of stored manifests readable and intact" "$unread" 0
missing=0
for d in $(sqlite3 "$D/meta.db" "SELECT digest FROM blob_links UNION SELECT digest FROM manifests"); do
	h=${d#sha256:}
	[ "$(sha256sum "$D/blobs/sha256/${h:0:2}/$h" 2>/dev/null | cut -d' ' -f1)" = "$h" ] || missing=$((missing + 1))
done
expect_eq "every linked blob and manifest has its file (metadata db)" "$missing" 0

# ---- ls and tag history
expect_exit 0 "push v2 over the same tag" $S copy --dest-tls-verify=false oci:img2:v1 "docker://$REG/team/one:v1"
expect_exit 0 "kiln registry ls team/" "$KILN" registry ls --data "$D" team/
expect_grep "ls shows team/one" '^team/one +1 tags +2 manifests' out
if grep -q '^gc/' out; then not_ok "ls filters by namespace"; else ok "ls filters by namespace"; fi
expect_exit 0 "kiln registry history" "$KILN" registry history --data "$D" team/one:v1
expect_eq "history has both versions" "$(wc -l <out)" 2
expect_grep "history names the first version" " v1 sha256:$(skopeo inspect --raw oci:img1:v1 | sha256sum | cut -d' ' -f1)\$" out
expect_exit 1 "history of an unknown tag fails" "$KILN" registry history --data "$D" team/one:nope
