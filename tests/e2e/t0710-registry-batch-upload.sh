#!/usr/bin/env bash
# t0710-registry-batch-upload.sh — kiln serve's batch upload (POST
# /v2/NAME/blobs/_batch, docs/registry.md "Batch upload"): blobs stored and
# served intact, the batch query offering it, every hostile body refused with
# nothing of its batch stored (wrong digest, bad headers, cut, too many, too
# big), auth scopes, kiln push using it, and SIGKILL during parallel batches:
# every blob of every batch acknowledged 201 is there, intact, after a restart.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

trap 'reg_stop KILL; rm -rf "$T_TMP"' EXIT
cd "$T_TMP"
reg_start_teams '{"auth": true, "blob_max": "80M"}' || { not_ok "kiln serve starts"; exit 1; }

# mkbatch OUT CORRUPT BLOB... : a batch body of the files (CORRUPT: index whose bytes are altered, -1 none)
mkbatch() {
	python3 - "$@" <<'PY'
import hashlib, sys
out, corrupt, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
with open(out, "wb") as o:
    for i, f in enumerate(files):
        data = open(f, "rb").read()
        o.write(b"sha256:%s %d\n" % (hashlib.sha256(data).hexdigest().encode(), len(data)))
        o.write(data if i != corrupt else data[:-1] + bytes([data[-1] ^ 1]))
PY
}
staged() { find "$D/uploads" -mindepth 1 | wc -l; }
for i in 1 2 3 4 5; do head -c $((i * 3000)) /dev/urandom >b$i; done
: >empty

req POST /v2/team-a/x/blobs/_exists -H "$(H "$A")" -d '{"digests":[]}'
expect_eq "the batch query offers the batch upload" "$(jq -c .batch_upload body)" '{"max_blobs":1000,"max_bytes":67108864}'

mkbatch good -1 b1 b2 empty b3
req POST /v2/team-a/x/blobs/_batch -H "$(H "$A")" --data-binary @good
expect_code "a batch of four blobs (one empty)" 201
expect_eq "  ... lists them in order" "$(jq -r '.stored | join(" ")' body)" \
	"$(sha256_of b1) $(sha256_of b2) $(sha256_of empty) $(sha256_of b3)"
all=1
for f in b1 b2 empty b3; do
	got=$(curl -s -H "$(H "$A")" "$U/v2/team-a/x/blobs/$(sha256_of $f)" | sha256sum | cut -d' ' -f1)
	[ "sha256:$got" = "$(sha256_of $f)" ] || all=0
done
expect_eq "  ... each served intact" "$all" 1
expect_eq "  ... nothing left staged" "$(staged)" 0
req POST /v2/team-a/x/blobs/_batch -H "$(H "$A")" --data-binary @good
expect_code "the same batch again (blobs present)" 201

# ---- hostile bodies: refused, nothing of the batch stored
mkbatch bad 1 b4 b5 b1
req POST /v2/team-a/x/blobs/_batch -H "$(H "$A")" --data-binary @bad
expect_error "a wrong digest in the middle: 400" 400 DIGEST_INVALID
expect_grep "  ... names the blob" "blobs\\[1\\] $(sha256_of b5)" body
req HEAD "/v2/team-a/x/blobs/$(sha256_of b4)" -I -H "$(H "$A")"
expect_code "  ... and the batch's good blob before it is not stored" 404
expect_eq "  ... nothing left staged" "$(staged)" 0
mkbatch cut -1 b4 b5
head -c $(($(stat -c %s cut) - 10)) cut >cut.short
req POST /v2/team-a/x/blobs/_batch -H "$(H "$A")" --data-binary @cut.short
expect_error "a body cut inside a blob: 400" 400 BODY_INVALID
expect_grep "  ... says where" 'ends inside blobs\[1\]' body
req HEAD "/v2/team-a/x/blobs/$(sha256_of b4)" -I -H "$(H "$A")"
expect_code "  ... and its complete first blob is not stored" 404
printf 'sha256:zz 3\nabc' >b.bad
req POST /v2/team-a/x/blobs/_batch -H "$(H "$A")" --data-binary @b.bad
expect_error "a bad digest: 400" 400 DIGEST_INVALID
expect_grep "  ... names its index" 'blobs\[0\]' body
printf '%s lots\nabc' "$(sha256_of b1)" >b.bad
req POST /v2/team-a/x/blobs/_batch -H "$(H "$A")" --data-binary @b.bad
expect_error "a size that is no number: 400" 400 BODY_INVALID
printf 'just some bytes without any header line at all' >b.bad
req POST /v2/team-a/x/blobs/_batch -H "$(H "$A")" --data-binary @b.bad
expect_error "no header line: 400" 400 BODY_INVALID
req POST /v2/team-a/x/blobs/_batch -H "$(H "$A")" --data-binary ''
expect_error "an empty batch: 400" 400 BODY_INVALID
python3 -c "import sys; sys.stdout.write('sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 0\n' * 1001)" >many
req POST /v2/team-a/x/blobs/_batch -H "$(H "$A")" --data-binary @many
expect_error "1001 blobs: 400" 400 TOO_MANY_BLOBS
printf '%s 70000000\n' "$(sha256_of b1)" >big.head
req POST /v2/team-a/x/blobs/_batch -H "$(H "$A")" --data-binary @big.head
expect_error "a blob over the batch's 64 MiB: 413" 413 SIZE_INVALID
head -c 90000000 /dev/zero >zeros
mkbatch huge -1 zeros
req POST /v2/team-a/x/blobs/_batch -H "$(H "$A")" --data-binary @huge
expect_error "a body over the limit (Content-Length): 413" 413 SIZE_INVALID
rm -f zeros huge
expect_eq "nothing left staged by the refused batches" "$(staged)" 0
req GET /v2/team-a/x/blobs/_batch -H "$(H "$A")"
expect_error "GET: 405" 405 UNSUPPORTED

# ---- auth: push on the repository
req POST /v2/team-a/x/blobs/_batch --data-binary @good
expect_error "anonymous: 401" 401 UNAUTHORIZED
req POST /v2/team-a/x/blobs/_batch -H "$(H "$PULLA")" --data-binary @good
expect_error "a pull-only token: 403" 403 DENIED
req POST /v2/team-a/x/blobs/_batch -H "$(H "$BT")" --data-binary @good
expect_error "another team's token: 403" 403 DENIED

# ---- kiln push uses it
reg_demo_image "$A"
expect_exit 0 "kiln push to kiln serve" env KILN_LOG=debug "$KILN" push demo:1 "$REG/team-a/app:v1"
expect_grep "  ... in batch uploads" 'registry [^ ]*: [0-9]+ batch uploads' err
expect_exit 0 "  ... and it pulls back" "$KILN" pull "$REG/team-a/app:v1"

# ---- SIGKILL during parallel batch uploads: what was acknowledged survives
reg_stop KILL
rm -f serve.*.log
reg_start "$D" || { not_ok "kiln serve restarts without auth"; exit 1; }
cat >pusher.py <<'PY'
import hashlib, http.client, os, sys
port, n = int(sys.argv[1]), sys.argv[2]
with open("acked.%s" % n, "a") as acked:
    for round_ in range(40):
        blobs = [os.urandom(1000 + int.from_bytes(os.urandom(2), "big")) for _ in range(12)]
        body = b"".join(b"sha256:%s %d\n" % (hashlib.sha256(b).hexdigest().encode(), len(b)) + b for b in blobs)
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("POST", "/v2/g/p%s/blobs/_batch" % n, body)
            r = c.getresponse()
            r.read()
        except Exception:
            break
        if r.status == 201:
            for b in blobs:
                acked.write("%s sha256:%s\n" % (n, hashlib.sha256(b).hexdigest()))
            acked.flush()
PY
pids=()
for n in 1 2 3 4; do python3 pusher.py "$REG_PORT" "$n" & pids+=($!); done
for _ in $(seq 1 200); do [ "$(cat acked.* 2>/dev/null | wc -l)" -ge 240 ] && break; sleep 0.05; done
reg_stop KILL
wait "${pids[@]}"
cat acked.* >acked
echo "# blobs acknowledged before SIGKILL: $(wc -l <acked)"
reg_start "$D" || { not_ok "restart after SIGKILL"; exit 1; }
lost=0
while read -r n d; do
	got=$(curl -s --max-time 10 "$U/v2/g/p$n/blobs/$d" | sha256sum | cut -d' ' -f1)
	[ "sha256:$got" = "$d" ] || { lost=$((lost + 1)); echo "# lost: p$n $d"; }
done <acked
expect_eq "every blob of every acknowledged batch is there and intact after SIGKILL ($(wc -l <acked))" "$lost" 0
[ "$(wc -l <acked)" -ge 240 ] && ok "  ... at least 20 batches were acknowledged" || not_ok "  ... at least 20 batches were acknowledged"
echo '{"gc_grace_s": 3600, "upload_expiry_s": 0}' >gcu.json
expect_exit 0 "gc after the kill" "$KILN" registry gc --data "$D" --config gcu.json
expect_eq "  ... removes what the cut batches staged" "$(staged)" 0
