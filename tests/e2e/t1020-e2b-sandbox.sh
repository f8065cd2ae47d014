#!/usr/bin/env bash
# t1020-e2b-sandbox.sh — E2B's own npm SDK (e2b 2.51.0, the version t1010
# pins) creates, drives and kills sandboxes on `kiln serve --sandboxes`, on
# a template `kiln build` made: commands (streamed output, exit errors, env,
# cwd, user, timeoutMs, background with stdin, list, connect, kill), files
# (write, read, list, makeDir, rename, remove, watchDir), PTY, setTimeout,
# pause and Sandbox.connect (resume), Sandbox.list by metadata, kill.  Then
# what a hostile or careless client does (curl, python): no or wrong keys,
# another team's ids and tokens, 10,000-character ids, bad and oversized
# envelopes, /files outside the user's reach, 1,000 concurrent streams, a
# client gone mid-stream; the limits (429 team, 503 host); a daemon restart
# (TERM and kill -9) that keeps running and paused sandboxes.  Real QEMU.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
. tests/e2e/registry-lib.sh

E2B_VERSION=2.51.0
SDK=${KILN_E2B_SDK:-$HOME/.cache/kiln/npm/e2b-$E2B_VERSION}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	skip "the e2b SDK drives sandboxes" "node and npm are needed"
	exit 0
fi
if [ ! -f "$SDK/node_modules/e2b/package.json" ]; then
	mkdir -p "$SDK"
	if ! npm install --prefix "$SDK" --no-audit --no-fund "e2b@$E2B_VERSION" >"$T_TMP/npm.log" 2>&1; then
		skip "the e2b SDK drives sandboxes" "npm install e2b@$E2B_VERSION failed: $(tail -1 "$T_TMP/npm.log")"
		exit 0
	fi
fi
vm_setup

# a busybox base with a user "user" (E2B's templates run as one)
B=$T_TMP/bb
{ umoci init --layout "$B" && umoci new --image "$B:base" && umoci unpack --image "$B:base" "$T_TMP/bbb"; } >/dev/null 2>&1
R=$T_TMP/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/home/user" "$R/root"
chmod 1777 "$R/tmp"
chmod 700 "$R/root"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\nuser:x:1000:\n' >"$R/etc/group"
chown 1000:1000 "$R/home/user"
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
mkdir -p "$T_TMP/ctx"
printf 'FROM oci:%s:base\nENV GREETING=hello\nRUN echo built > /etc/built && echo secret > /root/secret && chmod 600 /root/secret\n' \
	"$B" >"$T_TMP/ctx/Dockerfile"
expect_exit 0 "a template kiln build made" "$KILN" build -t sbx:1 --template --start-cmd true --ready-cmd true \
	--memory 128 "$T_TMP/ctx"

D=$T_TMP/reg
mkdir -p "$D"
cat >"$T_TMP/serve.json" <<'EOF'
{"auth": true, "per_ip_connection_limit": 2048,
 "sandboxes": {"domain": "kiln.test", "team_limits": {"sandboxes": 3}, "host_limits": {"sandboxes": 5}}}
EOF
KEY=$("$KILN" token create --data "$D" --e2b --scope team:sandbox e2b-team 2>/dev/null)
OTHER=$("$KILN" token create --data "$D" --e2b --scope other:sandbox e2b-other 2>/dev/null)
NOSB=$("$KILN" token create --data "$D" --scope team:pull,build builds-only 2>/dev/null)
MET=$("$KILN" token create --data "$D" --scope '*:metrics' prometheus 2>/dev/null)
case "$KEY" in e2b_[0-9a-f]*) ok "kiln token create --e2b makes a key in E2B's shape" ;; *) not_ok "an e2b_ key (got '$KEY')" ;; esac
start_serve() { reg_start "$D" --config "$T_TMP/serve.json" --sandboxes; }
start_serve || { not_ok "kiln serve --sandboxes starts"; exit 0; }
trap '"$KILN" sandbox kill $(ls "$KILN_HOME/sandboxes" 2>/dev/null) >/dev/null 2>&1; reg_stop; rm -rf "$T_TMP"' EXIT
export SDK E2B_API_URL=http://$REG E2B_SANDBOX_URL=http://$REG E2B_API_KEY=$KEY E2B_DOMAIN=kiln.test TPL=sbx:1
js() { python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
try: v = eval(sys.argv[2])
except Exception as e: v = "(%r)" % e
print(v)' "$T_TMP/sdk.json" "$1" 2>/dev/null; }

# ---- the SDK's whole flow --------------------------------------------------
cat >"$T_TMP/flow.cjs" <<'JS'
const { Sandbox, CommandExitError } = require(process.env.SDK + '/node_modules/e2b')
const out = {}
;(async () => {
  let t0 = Date.now()
  const sb = await Sandbox.create(process.env.TPL, { metadata: { run: 'flow' }, envs: { FROM_CREATE: 'c1' } })
  out.id = sb.sandboxId
  out.create_ms = Date.now() - t0
  let streamed = ''
  const r = await sb.commands.run('echo hi; echo "$GREETING $FROM_CREATE $X"; pwd; id -un; cat /etc/built',
    { envs: { X: 'x1' }, onStdout: (d) => { streamed += d } })
  out.run = r.stdout
  out.streamed = streamed
  try { await sb.commands.run('echo bad >&2; exit 3'); out.exit = 'no error' } catch (e) {
    out.exit = [e instanceof CommandExitError, e.exitCode, e.stderr] }
  out.cwd = (await sb.commands.run('pwd', { cwd: '/tmp' })).stdout
  out.user = (await sb.commands.run('id -un; pwd', { user: 'user' })).stdout
  out.rel_cwd = (await sb.commands.run('pwd', { user: 'user', cwd: 'sub' }).catch((e) => ({ stdout: e.name }))).stdout
  try { await sb.commands.run('sleep 30', { timeoutMs: 1500 }); out.timeout = 'none' } catch (e) { out.timeout = e.name }
  const h = await sb.commands.run('read l; echo got $l; sleep 1000', { background: true, stdin: true,
    onStdout: (d) => { out.bg = (out.bg || '') + d } })
  await sb.commands.sendStdin(h.pid, 'line1\n')
  for (let i = 0; i < 50 && !out.bg; i++) await new Promise((res) => setTimeout(res, 100))
  out.listed = (await sb.commands.list()).some((p) => p.pid === h.pid)
  const h2 = await sb.commands.connect(h.pid)
  out.connected = h2.pid === h.pid
  out.kill = await sb.commands.kill(h.pid)
  // a signal is sent, not awaited (as envd): the second kill is asked once it has ended
  await h.wait().catch(() => {})
  out.kill_again = await sb.commands.kill(h.pid)
  await sb.files.write('/tmp/a.txt', 'hello file')
  out.read = await sb.files.read('/tmp/a.txt')
  await sb.files.write('/tmp/gz.txt', 'zipped '.repeat(1000), { gzip: true })
  out.gzip = [await sb.files.read('/tmp/gz.txt', { gzip: true }) === 'zipped '.repeat(1000),
    await sb.commands.run('wc -c < /tmp/gz.txt').then((r) => r.stdout.trim())]
  out.home_write = (await sb.files.write('rel.txt', 'in home', { user: 'user' })).path
  out.list = (await sb.files.list('/tmp')).map((e) => e.name + ':' + e.type).sort()
  out.mkdir = [await sb.files.makeDir('/tmp/d'), await sb.files.makeDir('/tmp/d')]
  await sb.files.write('/tmp/d/f', 'x')
  out.rename = (await sb.files.rename('/tmp/d/f', '/tmp/d/g')).path
  out.exists = [await sb.files.exists('/tmp/d/f'), await sb.files.exists('/tmp/d/g')]
  await sb.files.remove('/tmp/d/g')
  out.removed = await sb.files.exists('/tmp/d/g')
  const events = []
  const w = await sb.files.watchDir('/tmp/d', (e) => events.push(e.type + ':' + e.name))
  await sb.files.write('/tmp/d/new', 'y')
  for (let i = 0; i < 50 && events.length === 0; i++) await new Promise((res) => setTimeout(res, 100))
  await w.stop()
  out.watch = events.some((e) => e.endsWith(':new'))
  try { await sb.files.read('/root/secret', { user: 'user' }); out.denied = 'read it' } catch (e) { out.denied = e.name }
  let pty = ''
  const p = await sb.pty.create({ cols: 80, rows: 24, onData: (d) => { pty += Buffer.from(d).toString() } })
  await sb.pty.resize(p.pid, { cols: 100, rows: 30 })
  await sb.pty.sendInput(p.pid, new TextEncoder().encode('stty size; exit\n'))
  await p.wait().catch(() => {})
  out.pty = /30 100/.test(pty)
  // getHost(port): a server in the sandbox, fetched from the host by its Host name
  const api = new URL(process.env.E2B_API_URL)
  const get = (host, path) => new Promise((ok) => require('http').get({ host: api.hostname, port: api.port, path,
    headers: { Host: host } }, (res) => { let b = ''; res.on('data', (d) => { b += d }); res.on('end', () => ok([res.statusCode, b])) })
    .on('error', (e) => ok([0, e.message])))
  await sb.files.write('/tmp/www/index.html', 'served from the sandbox\n')
  await sb.commands.run('httpd -f -p 8080 -h /tmp/www', { background: true })
  let served = [0, '']
  for (let i = 0; i < 50 && served[0] !== 200; i++) {
    served = await get(sb.getHost(8080), '/index.html?q=a%20b')
    if (served[0] !== 200) await new Promise((res) => setTimeout(res, 100))
  }
  out.host = [sb.getHost(8080) === '8080-' + sb.sandboxId + '.kiln.test', served]
  out.host_closed = await get(sb.getHost(9999), '/')
  out.host_listed = (await sb.commands.list()).map((p) => p.cmd + ' ' + p.args.join(' '))
  await sb.commands.run('i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done')
  const [m1] = await sb.getMetrics()
  const [m2] = await sb.getMetrics()
  out.metrics = [m1.cpuCount >= 1, m1.memTotal > 64 << 20 && m1.memUsed > 0 && m1.memUsed < m1.memTotal,
    m1.diskTotal > 0 && m1.diskUsed > 0, m1.timestamp instanceof Date && Math.abs(m1.timestamp - Date.now()) < 60000,
    m2.cpuUsedPct >= 0 && m2.cpuUsedPct <= 100]
  await sb.setTimeout(600000)
  const info = await sb.getInfo()
  out.info = [info.state, info.metadata.run, new Date(info.endAt).getTime() - Date.now() > 500000]
  await sb.files.write('/tmp/keep', 'kept')
  out.pause = [await sb.pause(), await sb.pause().catch((e) => e.name)]
  const listed = await Sandbox.list({ query: { state: ['paused'], metadata: { run: 'flow' } } }).nextItems()
  out.paused_list = listed.map((x) => x.sandboxId === sb.sandboxId && x.state)
  out.running_paused = await sb.isRunning()
  const sb2 = await Sandbox.connect(sb.sandboxId)
  out.resumed = [await sb2.isRunning(), await sb2.files.read('/tmp/keep')]
  out.host_resumed = await get(sb2.getHost(8080), '/index.html')
  out.none = (await Sandbox.list({ query: { metadata: { run: 'nothing' } } }).nextItems()).length
  out.killed = [await sb2.kill(), await sb2.kill(), await sb2.isRunning()]
  console.log(JSON.stringify(out))
})().catch((e) => { out.fail = e.name + ': ' + e.message; console.log(JSON.stringify(out)); process.exit(1) })
JS
expect_exit 0 "the SDK's flow against kiln serve --sandboxes" node "$T_TMP/flow.cjs"
cp "$T_TMP/out" "$T_TMP/sdk.json"
[ -n "$(js 'd.get("fail", "")')" ] && echo "# the flow failed at: $(js 'd["fail"]')"
echo "# Sandbox.create $(js 'd["create_ms"]') ms"
expect_eq "commands.run: stdout, the template's env, create's and the command's" "$(js 'd["run"]')" "hi
hello c1 x1
/root
root
built"
expect_eq "onStdout streamed the same bytes" "$(js 'd["streamed"] == d["run"]')" True
expect_eq "a non-zero exit is a CommandExitError with its code and stderr" "$(js 'd["exit"]')" "[True, 3, 'bad\n']"
expect_eq "cwd" "$(js 'd["cwd"]')" "/tmp"
expect_eq "user switch: the user's name and home" "$(js 'd["user"]')" "user
/home/user"
expect_eq "a cwd that does not exist is refused" "$(js 'd["rel_cwd"]')" "InvalidArgumentError"
expect_eq "timeoutMs ends the command as a TimeoutError" "$(js 'd["timeout"]')" "TimeoutError"
expect_eq "background: stdin reached it, its output streamed" "$(js 'd["bg"]')" "got line1"
expect_eq "commands.list and commands.connect find it; kill, then kill again" \
	"$(js '[d["listed"], d["connected"], d["kill"], d["kill_again"]]')" "[True, True, True, False]"
expect_eq "files.write then read" "$(js 'd["read"]')" "hello file"
expect_eq "files.write and read with gzip: the same text, stored inflated" "$(js 'd["gzip"]')" "[True, '7000']"
expect_eq "a relative path is in the user's home" "$(js 'd["home_write"]')" "/home/user/rel.txt"
expect_grep "files.list" "a.txt:file" <(js 'd["list"]')
expect_eq "makeDir: made, then already there" "$(js 'd["mkdir"]')" "[True, False]"
expect_eq "rename, exists, remove" "$(js '[d["rename"], d["exists"], d["removed"]]')" "['/tmp/d/g', [False, True], False]"
expect_eq "watchDir saw the new file" "$(js 'd["watch"]')" True
expect_eq "a file the user may not read is refused (401, as envd)" "$(js 'd["denied"]')" "AuthenticationError"
expect_eq "PTY: created, resized, input sent" "$(js 'd["pty"]')" True
expect_eq "getHost(8080): the sandbox's own server answers through the daemon" "$(js 'd["host"]')" \
	"[True, [200, 'served from the sandbox\\n']]"
expect_eq "a port nothing listens on: 502, E2B's words and the guest's reason" \
	"$(js '[d["host_closed"][0], "port is not open" in d["host_closed"][1], "Connection refused" in d["host_closed"][1]]')" \
	"[502, True, True]"
expect_eq "commands.list shows the server, not the port's helper" \
	"$(js '[any("httpd -f" in x for x in d["host_listed"]), any("--connect" in x for x in d["host_listed"])]')" "[True, False]"
expect_eq "getMetrics: CPUs, memory, disk, a time, a CPU share" "$(js 'd["metrics"]')" "[True, True, True, True, True]"
expect_eq "setTimeout and getInfo" "$(js 'd["info"]')" "['running', 'flow', True]"
expect_eq "pause, then pause again (409: false)" "$(js 'd["pause"]')" "[True, False]"
expect_eq "Sandbox.list by state and metadata shows it paused" "$(js 'd["paused_list"]')" "['paused']"
expect_eq "a paused sandbox is not running (502)" "$(js 'd["running_paused"]')" False
expect_eq "Sandbox.connect resumes it with its files" "$(js 'd["resumed"]')" "[True, 'kept']"
expect_eq "a resumed sandbox's server answers again" "$(js 'd["host_resumed"]')" "[200, 'served from the sandbox\\n']"
expect_eq "a metadata filter that matches nothing" "$(js 'd["none"]')" 0
expect_eq "kill, kill again (false), not running" "$(js 'd["killed"]')" "[True, False, False]"

# ---- the control plane's refusals -------------------------------------------
jf() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$T_TMP/body" "$1" 2>/dev/null; }
create() { req POST /sandboxes -H "X-API-Key: $1" -d "{\"templateID\":\"sbx:1\",\"metadata\":{\"t\":\"$2\"}}"; }
req POST /sandboxes -d '{"templateID":"sbx:1"}'
expect_eq "no key: 401 in E2B's error shape" "$CODE $(jf 'd["code"]')" "401 401"
req POST /sandboxes -H "X-API-Key: e2b_0000" -d '{"templateID":"sbx:1"}'
expect_eq "a wrong key: 401" "$CODE" 401
req POST /sandboxes -H "X-API-Key: $NOSB" -d '{"templateID":"sbx:1"}'
expect_eq "a key without the sandbox action: 403 saying so" "$CODE $(jf '"sandbox scope" in d["message"]')" "403 True"
req POST /sandboxes -H "X-API-Key: $KEY" -d '{"templateID":'
expect_eq "a body that is not JSON: 400" "$CODE" 400
req POST /sandboxes -H "X-API-Key: $KEY" -d '{"templateID":"sbx:1","timeout":-5}'
expect_eq "a negative timeout: 400 naming it" "$CODE $(jf '"timeout" in d["message"]')" "400 True"
req POST /sandboxes -H "X-API-Key: $KEY" -d '{"templateID":"no-such:1"}'
expect_eq "an unknown template: 404 naming it" "$CODE $(jf '"no-such" in d["message"]')" "404 True"
create "$KEY" one
A=$(jf 'd["sandboxID"]') ATOK=$(jf 'd["envdAccessToken"]')
expect_eq "POST /sandboxes: 201 with the fields the SDKs read" "$CODE $(jf 'sorted(d)')" \
	"201 ['clientID', 'domain', 'envdAccessToken', 'envdVersion', 'sandboxID', 'templateID', 'trafficAccessToken']"
create "$OTHER" two
O=$(jf 'd["sandboxID"]') OTOK=$(jf 'd["envdAccessToken"]')
for r in "GET /sandboxes/$A" "DELETE /sandboxes/$A" "POST /sandboxes/$A/pause" "POST /sandboxes/$A/connect" \
	"POST /sandboxes/$A/timeout"; do
	req ${r% *} "${r#* }" -H "X-API-Key: $OTHER" -d '{"timeout": 30}'
	expect_eq "another team's sandbox is a 404: $r" "$CODE $(jf 'd["code"]')" "404 404"
done
req GET /v2/sandboxes -H "X-API-Key: $OTHER"
expect_eq "GET /v2/sandboxes lists only the team's own" "$(jf '[x["sandboxID"] for x in d]')" "['$O']"
LONG=$(head -c 10000 /dev/zero | tr '\0' a)
req GET "/sandboxes/$LONG" -H "X-API-Key: $KEY"
expect_eq "a 10,000-character id: 404" "$CODE" 404
req GET "/sandboxes/$O/metrics" -H "X-API-Key: $KEY"
expect_eq "another team's sandbox's metrics: 404" "$CODE" 404

# ---- envd's plane: routing and tokens --------------------------------------
envd() { # SANDBOX TOKEN PATH [curl args]
	local sb=$1 tok=$2 p=$3
	shift 3
	req POST "$p" -H "E2b-Sandbox-Id: $sb" -H "X-Access-Token: $tok" -H 'Content-Type: application/json' "$@"
}
env_start() { python3 -c 'import json,struct,sys; m=json.dumps({"process":{"cmd":"/bin/sh","args":["-c",sys.argv[1]]}}).encode(); sys.stdout.buffer.write(struct.pack(">BI",0,len(m))+m)' "$1"; }
env_start 'echo routed' >"$T_TMP/start.bin"
envd "$A" "$ATOK" /process.Process/Start -H 'Content-Type: application/connect+json' --data-binary @"$T_TMP/start.bin"
expect_grep "a Start stream by E2b-Sandbox-Id" "$(printf routed | base64)" "$T_TMP/body"
req POST /process.Process/Start -H "Host: 49983-$A.kiln.test" -H "X-Access-Token: $ATOK" \
	-H 'Content-Type: application/connect+json' --data-binary @"$T_TMP/start.bin"
expect_grep "the same by Host 49983-ID.domain" "$(printf routed | base64)" "$T_TMP/body"
envd "$A" "$OTOK" /process.Process/List -d '{}'
expect_eq "another sandbox's token: 502, as for no sandbox" "$CODE" 502
envd "$O" "$ATOK" /process.Process/List -d '{}'
expect_eq "another team's sandbox with one's own token: 502" "$CODE" 502
envd "$A" "" /process.Process/List -d '{}'
expect_eq "no access token: 502" "$CODE" 502
envd "$LONG" "$ATOK" /process.Process/List -d '{}'
expect_eq "a 10,000-character sandbox id: 502" "$CODE" 502
req POST /process.Process/List -H "X-Access-Token: $ATOK" -d '{}'
expect_eq "no sandbox named: 400" "$CODE" 400
envd "$A" "$ATOK" /process.Process/Start -H 'Content-Type: application/connect+json' --data-binary 'garbage!'
expect_eq "a bad envelope: the stream ends with invalid_argument" "$CODE $(grep -c invalid_argument "$T_TMP/body")" "200 1"
head -c $((5 << 20)) /dev/zero >"$T_TMP/big.bin"
envd "$A" "$ATOK" /process.Process/Start -H 'Content-Type: application/connect+json' --data-binary @"$T_TMP/big.bin"
expect_eq "an oversized envelope: 413" "$CODE" 413
envd "$A" "$ATOK" /process.Process/Nope -d '{}'
expect_eq "an unknown method: 404 unimplemented" "$CODE $(jf 'd["code"]')" "404 unimplemented"
req GET "/files?path=/root/secret&username=user" -H "E2b-Sandbox-Id: $A" -H "X-Access-Token: $ATOK"
expect_eq "/files?path= outside the user's reach: 401" "$CODE" 401
printf 'not gzip at all' >"$T_TMP/notgz"
req POST "/files?path=/tmp/x" -H "E2b-Sandbox-Id: $A" -H "X-Access-Token: $ATOK" -H 'Content-Encoding: gzip' \
	-H 'Content-Type: application/octet-stream' --data-binary @"$T_TMP/notgz"
expect_eq "a gzip upload that is not gzip: 400 saying so" "$CODE $(jf '"not valid gzip" in d["message"]')" "400 True"
head -c $((300 << 20)) /dev/zero | gzip -1 >"$T_TMP/bomb.gz"
req POST "/files?path=/tmp/x" -H "E2b-Sandbox-Id: $A" -H "X-Access-Token: $ATOK" -H 'Content-Encoding: gzip' \
	-H 'Content-Type: application/octet-stream' --data-binary @"$T_TMP/bomb.gz"
expect_eq "$(($(stat -c %s "$T_TMP/bomb.gz") >> 10)) KiB of gzip inflating to 300 MiB: 413 at the 256 MiB limit" \
	"$CODE $(jf '"more than 268435456" in d["message"]')" "413 True"
req GET "/files?path=/root/secret" -H "E2b-Sandbox-Id: $A" -H "X-Access-Token: $ATOK"
expect_eq "/files as the template's user (root) reads it" "$CODE $(cat "$T_TMP/body")" "200 secret"
req GET "/files?path=/root/secret" -H "E2b-Sandbox-Id: $A" -H "X-Access-Token: $ATOK" -H 'Accept-Encoding: gzip'
expect_eq "a download asked with Accept-Encoding: gzip comes gzipped" \
	"$CODE $(grep -ci '^content-encoding: gzip' "$T_TMP/hdr") $(gzip -dc <"$T_TMP/body")" "200 1 secret"
req GET / -H "Host: 8080-nosuchsandbox.kiln.test"
expect_eq "a port of no sandbox: 502, E2B's not found" "$CODE $(jf 'd["message"]')" "502 The sandbox was not found"
req GET "/x?a=1" -H "Host: 8080-$LONG.kiln.test"
expect_eq "a port of a 10,000-character id: 502" "$CODE" 502
# a server in A (busybox httpd): a 3 MiB file, a CGI echoing a POST body, the
# query and a header as sent
head -c $((3 << 20)) /dev/urandom >"$T_TMP/big.www"
printf '#!/bin/sh\necho "Content-Type: text/plain"\necho "X-From: guest"\necho\necho "q=$QUERY_STRING probe=$HTTP_X_PROBE"\ncat\n' >"$T_TMP/echo.cgi"
req POST "/files?path=/tmp/srv/big" -H "E2b-Sandbox-Id: $A" -H "X-Access-Token: $ATOK" \
	-H 'Content-Type: application/octet-stream' --data-binary @"$T_TMP/big.www"
req POST "/files?path=/tmp/srv/cgi-bin/echo" -H "E2b-Sandbox-Id: $A" -H "X-Access-Token: $ATOK" \
	-H 'Content-Type: application/octet-stream' --data-binary @"$T_TMP/echo.cgi"
env_start 'chmod +x /tmp/srv/cgi-bin/echo; httpd -p 8081 -h /tmp/srv' >"$T_TMP/httpd.bin"
envd "$A" "$ATOK" /process.Process/Start -H 'Content-Type: application/connect+json' --data-binary @"$T_TMP/httpd.bin"
pfd0=$(ls /proc/"$REG_PID"/fd | wc -l)
for _ in $(seq 50); do
	curl -s -o "$T_TMP/port.out" -D "$T_TMP/port.hdr" -w '%{http_code}' -H "Host: 8081-$A.kiln.test" \
		"$U/big" >"$T_TMP/port.code" 2>/dev/null
	[ "$(cat "$T_TMP/port.code")" = 200 ] && break
	sleep 0.1
done
expect_eq "a port's 3 MiB answer, byte for byte" "$(cat "$T_TMP/port.code") $(cmp -s "$T_TMP/port.out" "$T_TMP/big.www" && echo same)" "200 same"
req POST "/cgi-bin/echo?a=1&b=x%20y" -H "Host: 8081-$A.kiln.test" -H 'X-Probe: p1' --data-binary 'posted body'
expect_eq "a POST through the port: query, header and body as sent" "$CODE $(tr '\n' '|' <"$T_TMP/body")" \
	"200 q=a=1&b=x%20y probe=p1|posted body"
expect_grep "the guest's own headers come back" '^X-From: guest' "$T_TMP/hdr"
for i in $(seq 30); do curl -s -o /dev/null -H "Host: 8081-$A.kiln.test" "$U/cgi-bin/echo?n=$i"; done
envd "$A" "$ATOK" /process.Process/List -d '{}'
expect_eq "the ports' helpers are gone from the sandbox's processes" "$(grep -c -- '--connect' "$T_TMP/body")" 0
expect_eq "no fd left behind by 32 port requests" "$(ls /proc/"$REG_PID"/fd | wc -l)" "$pfd0"

# ---- 1,000 concurrent streams and a client that goes away -----------------
fds() { ls /proc/"$REG_PID"/fd | wc -l; }
fd0=$(fds)
python3 - "$REG" "$A" "$ATOK" >"$T_TMP/streams" <<'PY'
import http.client, json, struct, sys, threading
host, sb, tok = sys.argv[1], sys.argv[2], sys.argv[3]
m = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", "echo x"]}}).encode()
body = struct.pack(">BI", 0, len(m)) + m
res = []
def one():
    try:
        c = http.client.HTTPConnection(host, timeout=300)
        c.request("POST", "/process.Process/Start", body, {"E2b-Sandbox-Id": sb, "X-Access-Token": tok,
                  "Content-Type": "application/connect+json"})
        r = c.getresponse(); b = r.read()
        res.append(r.status == 200 and b'"exited":true' in b and b'eAo=' in b)
    except Exception as e:
        res.append(False)
ts = [threading.Thread(target=one) for _ in range(1000)]
[t.start() for t in ts]; [t.join() for t in ts]
print(sum(res))
PY
expect_eq "1,000 concurrent Start streams all end with their output" "$(cat "$T_TMP/streams")" 1000
env_start 'sleep 3; echo late' >"$T_TMP/slow.bin"
curl -s --max-time 1 -o /dev/null -X POST "$U/process.Process/Start" -H "E2b-Sandbox-Id: $A" -H "X-Access-Token: $ATOK" \
	-H 'Content-Type: application/connect+json' --data-binary @"$T_TMP/slow.bin"
sleep 4
envd "$A" "$ATOK" /process.Process/List -d '{}'
expect_eq "after a client left mid-stream the daemon answers" "$CODE" 200
expect_eq "no fd left behind by the streams" "$(fds)" "$fd0"

# ---- limits, and what /metrics says of them ---------------------------------
scrape() { req GET /metrics -H "Authorization: Bearer $MET" && cp "$T_TMP/body" "$T_TMP/$1"; }
sample() { awk -v k="$2" '$1 == k { v = $2 } END { print v + 0 }' "$T_TMP/$1"; }
scrape m0
create "$KEY" l2 && create "$KEY" l3
create "$KEY" l4
expect_eq "a team over its limit: 429 naming it" "$CODE $(jf '"sandboxes 3 per team" in d["message"]')" "429 True"
create "$OTHER" o2
O2=$(jf 'd["sandboxID"]')
create "$OTHER" o3
expect_eq "the host over its limit: 503 naming it" "$CODE $(jf '"sandboxes 5" in d["message"]')" "503 True"
req GET /v2/sandboxes -H "X-API-Key: $OTHER"
other_running=$(jf 'sum(1 for x in d if x["state"] == "running")')
scrape m1
if promtool check metrics <"$T_TMP/m1" >"$T_TMP/lint" 2>&1; then ok "promtool check metrics: clean with sandboxes"; else
	not_ok "promtool check metrics: clean with sandboxes"; sed 's/^/#   /' "$T_TMP/lint" | head
fi
d() { echo $(($(sample m1 "$1") - $(sample m0 "$1"))); }
expect_eq "3 restores counted (l2, l3, o2)" "$(d 'kiln_sandbox_starts_total{source="restore"}')" 3
expect_eq "the team's 429 counted" "$(d 'kiln_sandbox_creates_refused_total{reason="team_limit"}')" 1
expect_eq "the host's 503 counted" "$(d 'kiln_sandbox_creates_refused_total{reason="host_limit"}')" 1
expect_eq "start durations observed for the 3" "$(d 'kiln_sandbox_start_duration_seconds_count{source="restore"}')" 3
expect_eq "the team's sandboxes by state" "$(sample m1 'kiln_sandboxes{team="team",state="running"}')" 3
expect_eq "the other team's, as its list says" "$(sample m1 'kiln_sandboxes{team="other",state="running"}')" "$other_running"
expect_eq "sandbox requests have their route class" "$(d 'kiln_http_requests_total{route="sandbox",method="POST",code="429"}')" 1
req GET /readyz
expect_eq "/readyz with sandboxes: 200" "$CODE" 200
req GET /v2/sandboxes -H "X-API-Key: $KEY"
for s in $(jf '" ".join(x["sandboxID"] for x in d if x["metadata"].get("t") in ("l2","l3"))'); do
	req DELETE "/sandboxes/$s" -H "X-API-Key: $KEY"
done
expect_eq "kill answers 204" "$CODE" 204
# a team's quota (kiln registry quota) beats the config's team_limits, live
"$KILN" registry quota --data "$D" --config "$T_TMP/serve.json" team sandboxes=1 >/dev/null
create "$KEY" q1
expect_eq "with a sandboxes quota of 1 the team's second: 429 naming it" "$CODE $(jf '"sandboxes 1 per team" in d["message"]')" "429 True"
"$KILN" registry quota --data "$D" --config "$T_TMP/serve.json" team sandboxes=default >/dev/null
create "$KEY" q2
expect_eq "the quota removed, the config's 3 again: created" "$CODE" 201
req DELETE "/sandboxes/$(jf 'd["sandboxID"]')" -H "X-API-Key: $KEY"

# ---- a restart keeps running and paused sandboxes --------------------------
req POST "/sandboxes/$O/pause" -H "X-API-Key: $OTHER"
expect_eq "pause: 204" "$CODE" 204
envd "$A" "$ATOK" /process.Process/Start -H 'Content-Type: application/connect+json' \
	--data-binary @<(env_start 'echo before > /tmp/restart')
# a foreground server started through envd: the agent's session ends with the daemon
curl -s -o /dev/null --max-time 2 -X POST "$U/process.Process/Start" -H "E2b-Sandbox-Id: $A" -H "X-Access-Token: $ATOK" \
	-H 'Content-Type: application/connect+json' --data-binary @<(env_start 'exec httpd -f -p 8082 -h /tmp/srv')
for _ in $(seq 30); do req GET /big -H "Host: 8082-$A.kiln.test"; [ "$CODE" = 200 ] && break; sleep 0.1; done
expect_eq "a foreground server through envd answers on its port" "$CODE" 200
reg_stop
start_serve || { not_ok "kiln serve restarts"; exit 0; }
req GET "/sandboxes/$A" -H "X-API-Key: $KEY"
expect_eq "after TERM and a restart: the running sandbox is there" "$CODE $(jf 'd["state"]')" "200 running"
req GET "/sandboxes/$O" -H "X-API-Key: $OTHER"
expect_eq "and the paused one, still paused" "$CODE $(jf 'd["state"]')" "200 paused"
envd "$A" "$ATOK" /process.Process/Start -H 'Content-Type: application/connect+json' \
	--data-binary @<(env_start 'cat /tmp/restart')
expect_grep "its envd plane answers again, same token, same files" "$(printf 'before\n' | base64)" "$T_TMP/body"
req GET /big -H "Host: 8082-$A.kiln.test"
expect_eq "the server envd started before the restart still answers" "$CODE" 200
kill -9 "$REG_PID"
wait "$REG_PID" 2>/dev/null
start_serve || { not_ok "kiln serve starts after kill -9"; exit 0; }
req POST "/sandboxes/$O/connect" -H "X-API-Key: $OTHER" -d '{"timeout": 60}'
expect_eq "after kill -9: connect resumes the paused one (201)" "$CODE" 201
req POST "/sandboxes/$O/connect" -H "X-API-Key: $OTHER" -d '{"timeout": 60}'
expect_eq "connect on a running one: 200" "$CODE" 200
for s in "$A:$KEY" "$O:$OTHER" "$O2:$OTHER"; do
	req DELETE "/sandboxes/${s%%:*}" -H "X-API-Key: ${s#*:}"
done
req GET /v2/sandboxes -H "X-API-Key: $KEY"
expect_eq "every sandbox gone" "$(jf 'len(d)')" 0
n=$("$KILN" sandbox ls 2>/dev/null | grep -c running)
expect_eq "no sandbox left on the host" "$n" 0
