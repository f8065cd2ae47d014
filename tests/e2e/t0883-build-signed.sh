#!/usr/bin/env bash
# t0883-build-signed.sh — the build service signs what it publishes: `kiln
# serve --build` with a service key and a team's own key (build.sign_key,
# build.team_sign_keys), no VM (FROM scratch + COPY): a remote build's image
# verifies with kiln pull --policy naming the service's public key (and its
# signed provenance names the service's builder, kiln-serve@HOSTNAME or
# build.builder_id, the Dockerfile, the context and, for a build FROM it, the
# base's digest; a local build signed with the same key is refused by a
# policy requiring the service's builder); kiln build --remote --provenance
# asks the service for it (attached where its config has it off, refused
# with the reason where it signs nothing of the team's); the other team's build is signed by its
# own key only; the private keys are nowhere in the data directory or logs;
# a config naming a public key as the signing key does not start.
. tests/e2e/lib.sh
. tests/e2e/service-lib.sh

export SOURCE_DATE_EPOCH=1700000000
DATA=$T_TMP/data
cd "$T_TMP" || exit 1
"$KILN" key generate svc >/dev/null && "$KILN" key generate tb >/dev/null
cat >serve.json <<JSON
{"auth": true, "build": {"host_builds": 1, "sign_key": "$T_TMP/svc.key", "team_sign_keys": {"team-b": "$T_TMP/tb.key"}}}
JSON
A=$($KILN token create --data "$DATA" --scope team-a:build,pull,push a)
B=$($KILN token create --data "$DATA" --scope team-b:build,pull,push b)
trap 'kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; rm -rf "$T_TMP"' EXIT
serve_build "$DATA" serve.json || { not_ok "kiln serve --build starts"; sed 's/^/#   /' serve.log; exit 1; }

mkdir -p ctx && echo one >ctx/a.txt && printf 'FROM scratch\nCOPY a.txt /a.txt\n' >ctx/Dockerfile
expect_exit 0 "a remote build (team-a)" env KILN_TOKEN="$A" "$KILN" build --remote "$URL" -t app:v1 ctx
D1=$(head -1 "$T_TMP/out")
policy() { echo "{\"scopes\": {\"$HOST/$1\": {\"keys\": [\"$2\"]$3}}}"; }
policy team-a svc.pub ", \"builder\": \"kiln-serve@$(hostname)\"" >pa.json
# the default KILN_HOME logged in as team-a, $T_TMP/hb as team-b
"$KILN" login -u x --password-stdin "$HOST" <<<"$A" >/dev/null 2>&1
KILN_HOME=$T_TMP/hb "$KILN" login -u x --password-stdin "$HOST" <<<"$B" >/dev/null 2>&1
pull() { KILN_HOME=$1 "$KILN" pull --policy "$2" "$3"; }
expect_exit 0 "its result pulls under a policy naming the service's key and builder" pull "$KILN_HOME" pa.json "$HOST/team-a/app:v1"
expect_grep "  ... verified" "team-a/app \\($D1\\): signed by 1 key the policy requires \\(verified" "$T_TMP/err"
policy team-a tb.pub "" >pa-tb.json
expect_exit 1 "  ... and is refused under team-b's key" pull "$KILN_HOME" pa-tb.json "$HOST/team-a/app:v1"
expect_grep "  ... saying so" 'not a valid signature by this key' "$T_TMP/err"
expect_exit 0 "kiln inspect --provenance of the service's result" \
	"$KILN" inspect --provenance --key svc.pub "$HOST/team-a/app:v1"
cp "$T_TMP/out" prov.json
expect_eq "  ... signed by the service's key" "$(jq -r '.[0].key' prov.json)" \
	"sha256:$(openssl pkey -pubin -in svc.pub -outform DER | sha256sum | cut -d' ' -f1)"
expect_eq "  ... about the published digest" "$(jq -r '.[0].statement.subject[0].digest.sha256' prov.json)" "${D1#sha256:}"
expect_eq "  ... with the Dockerfile's digest" \
	"$(jq -r '.[0].statement.predicate.buildDefinition.externalParameters.dockerfile.digest.sha256' prov.json)" \
	"$(sha256sum ctx/Dockerfile | cut -d' ' -f1)"
expect_grep "  ... and the context's" '"context":\{"digest":\{"sha256":"[0-9a-f]{64}"' <(jq -c '.[0].statement.predicate' prov.json)
expect_eq "  ... naming the service's own builder, not a local build's" \
	"$(jq -r '.[0].statement.predicate.runDetails.builder.id' prov.json)" "kiln-serve@$(hostname)"

# a local build signed with the same key: not what a policy requiring the service's builder accepts
mkdir -p ctxl && echo local >ctxl/a.txt && printf 'FROM scratch\nCOPY a.txt /a.txt\n' >ctxl/Dockerfile
"$KILN" build --provenance -t local:v1 ctxl >/dev/null 2>&1 || not_ok "a local build"
expect_exit 0 "a local build pushed --sign with the service's key" "$KILN" push --sign svc.key local:v1 "$HOST/team-a/local:v1"
expect_exit 1 "  ... is refused under the policy requiring the service's builder" pull "$KILN_HOME" pa.json "$HOST/team-a/local:v1"
expect_grep "  ... naming the builder its provenance names" \
	"refused: no signed provenance naming builder kiln-serve@$(hostname); statement 1 names builder 'kiln@$(hostname)'" "$T_TMP/err"
policy team-a svc.pub ", \"builder\": \"kiln@$(hostname)\"" >pa-local.json
expect_exit 0 "  ... and accepted by one requiring a local build's" pull "$KILN_HOME" pa-local.json "$HOST/team-a/local:v1"
expect_exit 1 "  ... which refuses the service's build" pull "$KILN_HOME" pa-local.json "$HOST/team-a/app:v1"
expect_exit 2 "kiln build --builder-id without --provenance is a usage error" "$KILN" build --builder-id x -t y ctxl

# a build FROM the first: its provenance names the base's digest
mkdir -p ctx2 && echo two >ctx2/b.txt && printf 'FROM %s/team-a/app:v1\nCOPY b.txt /b.txt\n' "$HOST" >ctx2/Dockerfile
expect_exit 0 "a remote build FROM the first result" env KILN_TOKEN="$A" "$KILN" build --remote "$URL" -t app2:v1 ctx2
"$KILN" inspect --provenance --key svc.pub "$HOST/team-a/app2:v1" >prov2.json 2>"$T_TMP/err"
expect_eq "  ... its provenance names the base image's digest" \
	"$(jq -r '.[0].statement.predicate.buildDefinition.resolvedDependencies[0] | .uri + " " + .digest.sha256' prov2.json)" \
	"$HOST/team-a/app:v1 ${D1#sha256:}"

# team-b: its own key
mkdir -p ctxb && echo b >ctxb/a.txt && printf 'FROM scratch\nCOPY a.txt /b.txt\n' >ctxb/Dockerfile
expect_exit 0 "a remote build (team-b)" env KILN_TOKEN="$B" "$KILN" build --remote "$URL" -t app:v1 ctxb
policy team-b tb.pub "" >pb.json
expect_exit 0 "  ... verifies under team-b's key" pull "$T_TMP/hb" pb.json "$HOST/team-b/app:v1"
policy team-b svc.pub "" >pb-svc.json
expect_exit 1 "  ... and not under the service's" pull "$T_TMP/hb" pb-svc.json "$HOST/team-b/app:v1"

# the private keys: in no file of the data directory (database, logs, layers, team homes), nor the server's log
leak=
for k in svc.key tb.key; do
	line=$(sed -n 2p "$k")
	grep -rqaF "$line" "$DATA" serve.log && leak="$leak $k"
done
[ -z "$leak" ] && ok "the private keys are nowhere in the data directory or the server's log" ||
	not_ok "the private keys are nowhere in the data directory or the server's log (found:$leak)"
kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null

# kiln build --remote --provenance asks for it: a service with "provenance": false attaches it to
# that build only, and one that signs nothing of the team's refuses the request
cat >np.json <<JSON
{"auth": true, "build": {"host_builds": 1, "provenance": false, "team_sign_keys": {"team-b": "$T_TMP/tb.key"}}}
JSON
serve_build "$DATA" np.json || not_ok "kiln serve --build starts with provenance off"
"$KILN" login -u x --password-stdin "$HOST" <<<"$A" >/dev/null 2>&1
KILN_HOME=$T_TMP/hb "$KILN" login -u x --password-stdin "$HOST" <<<"$B" >/dev/null 2>&1
mkdir -p ctx4 && echo four >ctx4/a.txt && printf 'FROM scratch\nCOPY a.txt /d.txt\n' >ctx4/Dockerfile
expect_exit 0 "a remote build (provenance off in the service)" env KILN_TOKEN="$B" "$KILN" build --remote "$URL" -t np:v1 ctx4
expect_exit 1 "  ... attaches no provenance" env KILN_HOME="$T_TMP/hb" "$KILN" inspect --provenance --key tb.pub "$HOST/team-b/np:v1"
expect_grep "  ... (kiln inspect says so)" "team-b/np:v1 \(sha256:[0-9a-f]{64}\): no provenance attached" "$T_TMP/err"
mkdir -p ctx5 && echo five >ctx5/a.txt && printf 'FROM scratch\nCOPY a.txt /e.txt\n' >ctx5/Dockerfile
expect_exit 0 "kiln build --remote --provenance there" env KILN_TOKEN="$B" "$KILN" build --remote "$URL" --provenance -t p:v1 ctx5
D5=$(head -1 "$T_TMP/out")
KILN_HOME=$T_TMP/hb "$KILN" inspect --provenance --key tb.pub "$HOST/team-b/p:v1" >p.json.out 2>"$T_TMP/err"
expect_eq "  ... attaches a signed statement about the result, naming the service's builder" \
	"$(jq -r '.[0] | [.key != null, .statement.subject[0].digest.sha256, .statement.predicate.runDetails.builder.id] | join(" ")' p.json.out)" \
	"true ${D5#sha256:} kiln-serve@$(hostname)"
expect_exit 1 "kiln build --remote --provenance where the service signs nothing of the team's" \
	env KILN_TOKEN="$A" "$KILN" build --remote "$URL" --provenance -t p:v1 ctx5
expect_grep "  ... refused, saying why" "provenance: this build service signs nothing of team team-a's .*cannot attach provenance" "$T_TMP/err"
kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null

# build.builder_id: the operator's name for the service's builder
cat >bid.json <<JSON
{"auth": true, "build": {"host_builds": 1, "sign_key": "$T_TMP/svc.key", "builder_id": "https://ci.example/kiln-serve"}}
JSON
serve_build "$DATA" bid.json || not_ok "kiln serve --build starts with build.builder_id"
mkdir -p ctx3 && echo three >ctx3/a.txt && printf 'FROM scratch\nCOPY a.txt /c.txt\n' >ctx3/Dockerfile
expect_exit 0 "a remote build under build.builder_id" env KILN_TOKEN="$A" "$KILN" build --remote "$URL" -t app3:v1 ctx3
"$KILN" login -u x --password-stdin "$HOST" <<<"$A" >/dev/null 2>&1 # a new port: a new host to log in to
"$KILN" inspect --provenance --key svc.pub "$HOST/team-a/app3:v1" >prov3.json 2>"$T_TMP/err"
expect_eq "  ... its provenance names that builder" "$(jq -r '.[0].statement.predicate.runDetails.builder.id' prov3.json)" \
	"https://ci.example/kiln-serve"
kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null

echo "{\"build\": {\"sign_key\": \"$T_TMP/svc.pub\"}}" >bad.json
expect_exit 1 "a config naming a public key as the signing key: kiln serve refuses to start" \
	timeout 20 "$KILN" serve --addr 127.0.0.1:0 --data "$T_TMP/d2" --config bad.json
expect_grep "  ... naming it" "build.sign_key: .*svc.pub" "$T_TMP/err"
echo "{\"build\": {\"sign_key\": \"svc.key\"}}" >rel.json
expect_exit 1 "  ... and a relative key path" timeout 20 "$KILN" serve --addr 127.0.0.1:0 --data "$T_TMP/d3" --config rel.json
