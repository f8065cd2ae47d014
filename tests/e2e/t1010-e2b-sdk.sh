#!/usr/bin/env bash
# t1010-e2b-sdk.sh — E2B's own npm SDK (e2b 2.51.0, installed with npm at
# test time, cached under ~/.cache/kiln/npm) builds a template against
# `kiln serve --build` on 127.0.0.1: Template.build() from an image on the
# kiln registry with copy, runCmd, setEnvs, setUser, setWorkdir and
# setStartCmd/waitForFile, an API key made by `kiln token create` with the
# build scope; then `kiln run` of the published template shows what each
# step made.  Then a failing step as the SDK reports it, exists/getTags, and
# the REST surface's refusals with curl (no key, another team, unknown step
# types, files never uploaded, forged upload links, a tarball leaving its
# directory).  Real QEMU (TCG) builder and template VMs.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
. tests/e2e/registry-lib.sh

E2B_VERSION=2.51.0
SDK=${KILN_E2B_SDK:-$HOME/.cache/kiln/npm/e2b-$E2B_VERSION}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	skip "the e2b SDK builds a template" "node and npm are needed"
	exit 0
fi
if [ ! -f "$SDK/node_modules/e2b/package.json" ]; then
	mkdir -p "$SDK"
	if ! npm install --prefix "$SDK" --no-audit --no-fund "e2b@$E2B_VERSION" >"$T_TMP/npm.log" 2>&1; then
		skip "the e2b SDK builds a template" "npm install e2b@$E2B_VERSION failed: $(tail -1 "$T_TMP/npm.log")"
		exit 0
	fi
fi
expect_eq "the e2b SDK installed is $E2B_VERSION" \
	"$(node -p "require('$SDK/node_modules/e2b/package.json').version")" "$E2B_VERSION"
vm_setup

# the base: busybox with a user "app" (Debian's busybox has no adduser)
B=$T_TMP/bb
umoci init --layout "$B" >/dev/null 2>&1
umoci new --image "$B:base" >/dev/null 2>&1
umoci unpack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
R=$T_TMP/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/home/app" "$R/root"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\napp:x:1000:\n' >"$R/etc/group"
chown 1000:1000 "$R/home/app"
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1

D=$T_TMP/reg
mkdir -p "$D"
echo '{"auth": true}' >"$T_TMP/serve.json"
KEY=$("$KILN" token create --data "$D" --e2b --scope team:pull,push,build,sandbox e2b-ci 2>/dev/null)
OTHER=$("$KILN" token create --data "$D" --scope other:pull,push,build e2b-other 2>/dev/null)
reg_start "$D" --config "$T_TMP/serve.json" --build --sandboxes || { not_ok "kiln serve --build --sandboxes starts"; exit 0; }
# kiln run pulls lazily: its chunk server goes before the directory it serves from
trap '"$KILN" sandbox gc >/dev/null 2>&1; "$KILN" chunkfs stop >/dev/null 2>&1; reg_stop; rm -rf "$T_TMP"' EXIT
expect_exit 0 "the base pushed to the kiln registry" skopeo copy --dest-tls-verify=false --dest-creds "x:$KEY" \
	"oci:$B:base" "docker://$REG/team/busybox:1"

C=$T_TMP/ctx
mkdir -p "$C/app/sub"
echo hello >"$C/app/hello.txt"
echo deep >"$C/app/sub/deep.txt"
echo top >"$C/top.txt"
cat >"$T_TMP/build.cjs" <<'JS'
const { Template, waitForFile } = require(process.env.SDK + '/node_modules/e2b')
const fail = process.argv[2] === 'fail'
let t = Template({ fileContextPath: process.env.CTX }).fromImage(process.env.BASE)
if (fail) {
  t = t.copy('top.txt', '/top.txt')
    .runCmd('echo about to fail; exit 3')
} else {
  t = t.copy('app', '/app/')
    .copy('top.txt', '/opt/top.txt', { mode: 0o600 })
    .runCmd(['cat /app/hello.txt > /app/made', 'id -u > /app/uid-root'])
    .setEnvs({ GREETING: 'hi there' })
    .setUser('app')
    .setWorkdir('/home/app/w')
    .runCmd('echo "$GREETING from $(id -un)" > greeting && pwd > cwd')
    .copy('top.txt', 'mine.txt')
    .setStartCmd('echo started > /tmp/started; sleep 1000000', waitForFile('/tmp/started'))
}
const logs = []
const t0 = Date.now()
Template.build(t, fail ? 'sdk-fail' : 'sdk-app:v1', { onBuildLogs: (e) => logs.push(e.toString()) })
  .then(async (r) => {
    const exists = await Template.exists('sdk-app')
    const tags = (await Template.getTags('sdk-app')).map((x) => x.tag)
    console.log(JSON.stringify({ ok: true, ms: Date.now() - t0, result: r, exists, tags, logs }))
  })
  .catch((e) => {
    console.log(JSON.stringify({ ok: false, ms: Date.now() - t0, name: e.name, error: e.message,
      stack: String(e.stack), logs }))
  })
JS
export SDK CTX=$C BASE=$REG/team/busybox:1 E2B_API_URL=http://$REG E2B_API_KEY=$KEY
start=$(date +%s%N)
expect_exit 0 "Template.build() through the npm SDK" node "$T_TMP/build.cjs"
sdk_ms=$((($(date +%s%N) - start) / 1000000))
cp "$T_TMP/out" "$T_TMP/sdk.json"
jq_() { python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
try: v = eval(sys.argv[2])
except Exception as e: v = "(%r)" % e
print(" ".join(map(str, v)) if isinstance(v, tuple) else v)' "$T_TMP/sdk.json" "$1" 2>/dev/null; }
expect_eq "the SDK's build succeeded" "$(jq_ 'd["ok"]')" True
[ "$(jq_ 'd["ok"]')" = True ] || { sed 's/^/#   /' "$T_TMP/sdk.json" | head -40; }
jq_ '"\n".join(d.get("logs", []))' | sed 's/^/#   sdk log: /'  # where the time went
echo "# SDK Template.build: ${sdk_ms} ms (node's own count $(jq_ 'd["ms"]') ms)"
expect_eq "the result names the template and its tag" "$(jq_ 'd["result"]["name"], d["result"]["tags"]')" \
	"sdk-app:v1 ['v1']"
expect_grep "the build's steps reached the SDK's log" '\[info\] \[[0-9]+/[0-9]+\] RUN cat /app/hello.txt' <(jq_ '"\n".join(d["logs"])')
expect_grep "the SDK uploaded the copied files" "Uploaded 'app'" <(jq_ '"\n".join(d["logs"])')
expect_eq "Template.exists and getTags" "$(jq_ 'd["exists"], d["tags"]')" "True ['v1']"
# the build service's own log of that build opens with the id of the SDK's request that started it
BID=$(curl -s -H "X-API-Key: $KEY" "$U/build/v1/builds?team=team" | jq -r '[.builds[] | select(.state == "done")][0].id')
RID=$(curl -s -H "X-API-Key: $KEY" "$U/build/v1/builds/$BID/logs?cursor=0" | head -1 | jq -r '.state + " " + (.request_id // "")')
expect_grep "the E2B build's log opens with its request id" '^building [^ ]+$' <(echo "$RID")
expect_grep "...the id of the SDK's start-build request in the access log" \
	"^access .* id=${RID#building } .* method=POST path=[^ ]*templates/[^ ]*/builds/[^ ]* status=202 " "$REG_LOG"

# the published template (as GET /templates/ID says), pulled and run by kiln
tid=$(jq_ 'd["result"]["templateId"]')
req GET "/templates/$tid" -H "X-API-Key: $KEY"
tref=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["builds"][0].get("kilnTemplate", ""))' "$T_TMP/body")
expect_eq "GET /templates/ID: the build is ready" \
	"$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["builds"][0]["status"])' "$T_TMP/body")" ready
case "$tref" in
"$REG/team/sdk-app"*) ok "its template published in the team's namespace ($tref)" ;;
*) not_ok "its template published in the team's namespace (got '$tref')" ;;
esac
echo "$KEY" | "$KILN" login -u x --password-stdin "$REG" >/dev/null 2>&1
expect_exit 0 "kiln run of the template the SDK built" "$KILN" run "$tref" -- sh -c \
	'cat /app/hello.txt /app/made /app/sub/deep.txt /app/uid-root; cat greeting cwd; id -un; cat /tmp/started; stat -c "%a %U" /opt/top.txt mine.txt; echo "$GREETING"'
expect_eq "every step's work is in the template" "$(cat "$T_TMP/out")" "hello
hello
deep
0
hi there from app
/home/app/w
app
started
600 root
644 app
hi there"

# the same template as a sandbox through the SDK, by its E2B name (the
# daemon pulls it from its own registry with this host's kiln login)
cat >"$T_TMP/sandbox.cjs" <<'JS'
const { Sandbox } = require(process.env.SDK + '/node_modules/e2b')
;(async () => {
  const sb = await Sandbox.create('sdk-app:v1')
  const r = await sb.commands.run('cat /app/hello.txt; echo "$GREETING"; id -un; pwd')
  await sb.files.write('note.txt', 'from the sdk')
  const back = await sb.files.read('/home/app/note.txt').catch((e) => e.message)
  console.log(JSON.stringify({ out: r.stdout, back, killed: await sb.kill() }))
})().catch((e) => { console.log(JSON.stringify({ fail: e.name + ': ' + e.message })); process.exit(1) })
JS
E2B_SANDBOX_URL=http://$REG expect_exit 0 "Sandbox.create('sdk-app:v1') of the template the SDK built" \
	node "$T_TMP/sandbox.cjs"
expect_eq "the SDK's sandbox runs as the template's user in its workdir with its env; a relative file is in the home" "$(cat "$T_TMP/out")" \
	'{"out":"hello\nhi there\napp\n/home/app/w\n","back":"from the sdk","killed":true}'

# a failing step: the SDK's BuildError with kiln's reason, pointing at the user's line
expect_exit 0 "a failing build through the SDK" node "$T_TMP/build.cjs" fail
cp "$T_TMP/out" "$T_TMP/sdk.json"
expect_eq "it fails as a BuildError" "$(jq_ 'd["ok"], d["name"]')" "False BuildError"
expect_grep "the reason names the command and its exit code" 'non-zero code: 3' <(jq_ 'd["error"]')
expect_grep "the stack points at the runCmd line of the user's script (reason.step mapped back)" 'build.cjs:6' <(jq_ 'd["stack"]')
expect_grep "the failing command's output reached the log" 'about to fail' <(jq_ '"\n".join(d["logs"])')

# the REST surface's refusals (no VM)
H=(-H "X-API-Key: $KEY" -H 'Content-Type: application/json')
req GET /templates "${H[@]}"
expect_code "the team's templates" 200
expect_eq "both templates listed" "$(python3 -c 'import json,sys; print(sorted(t["names"][0] for t in json.load(open(sys.argv[1]))))' "$T_TMP/body")" "['sdk-app', 'sdk-fail']"
req GET /templates -H "X-API-Key: kiln_0000000000000000000000000000000000000000000000000000000000000000"
expect_code "a wrong key" 401
expect_eq "E2B's error shape" "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["code"], "message" in d)' "$T_TMP/body")" "401 True"
req GET /templates -H "X-API-Key: $OTHER"
expect_eq "another team sees none of them" "$(cat "$T_TMP/body")" "[]"
req POST /v3/templates "${H[@]}" -d '{"name":"hostile"}'
expect_code "a template made" 202
tid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["templateID"])' "$T_TMP/body")
bid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["buildID"])' "$T_TMP/body")
req GET "/templates/$tid/builds/$bid/status" -H "X-API-Key: $OTHER"
expect_code "another team's build is not found" 404
req POST "/v2/templates/$tid/builds/$bid" "${H[@]}" -d '{"fromImage":"busybox","steps":[{"type":"ADD","args":["a","b"]}]}'
expect_code "an unknown step type" 400
expect_grep "named with its step" 'steps\[0\]: unknown step type' "$T_TMP/body"
req POST "/v2/templates/$tid/builds/$bid" "${H[@]}" -d '{"fromImage":"busybox","steps":[{"type":"COPY","args":["../../etc/passwd","/x"],"filesHash":"'"$(printf %064d 0)"'"}]}'
expect_code "a COPY source leaving the context" 400
req POST "/v2/templates/$tid/builds/$bid" "${H[@]}" -d '{"fromImage":"busybox","steps":[{"type":"COPY","args":["a","/x"],"filesHash":"'"$(printf %064d 1)"'"}]}'
expect_code "files never uploaded" 400
expect_grep "said so" 'were not uploaded' "$T_TMP/body"
req GET "/templates/$tid/builds/$bid/status" "${H[@]}"
expect_eq "the build is failed, with the reason" "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["status"], "not uploaded" in d["reason"]["message"])' "$T_TMP/body")" "error True"
h=$(printf %064d 2)
req GET "/templates/$tid/files/$h" "${H[@]}"
expect_code "an upload link" 201
url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$T_TMP/body")
mkdir -p "$T_TMP/evil" && echo x >"$T_TMP/evil/f"
python3 - "$T_TMP/evil.tar.gz" <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w:gz") as t:
    i = tarfile.TarInfo("../escape"); i.size = 2; t.addfile(i, io.BytesIO(b"x\n"))
PY
CODE=$(curl -s -o "$T_TMP/body" -w '%{http_code}' -X PUT --data-binary @"$T_TMP/evil.tar.gz" "${url/signature=/signature=0}")
expect_eq "a forged upload link" "$CODE" 403
CODE=$(curl -s -o "$T_TMP/body" -w '%{http_code}' -X PUT --data-binary @"$T_TMP/evil.tar.gz" "$url")
expect_eq "a tarball leaving its directory" "$CODE" 400
req GET "/templates/$tid/files/$h" "${H[@]}"
expect_grep "nothing was stored for it" '"present":false' "$T_TMP/body"
tar -czf "$T_TMP/good.tar.gz" -C "$C" top.txt
CODE=$(curl -s -o "$T_TMP/body" -w '%{http_code}' -X PUT --data-binary @"$T_TMP/good.tar.gz" "$url")
expect_eq "a good tarball" "$CODE" 200
req GET "/templates/$tid/files/$h" "${H[@]}"
expect_grep "then present" '"present":true' "$T_TMP/body"
req DELETE "/templates/$tid" "${H[@]}"
expect_code "delete" 204
req GET "/templates/$tid" "${H[@]}"
expect_code "gone" 404
