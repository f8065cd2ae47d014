#!/usr/bin/env bash
# bench/sandbox-api.sh [ROUNDS] — E2B's npm SDK against `kiln serve --sandboxes`
# versus `kiln run`, on one busybox template, in one run (issue 28):
#   - ROUNDS (default 10) of Sandbox.create + commands.run('echo hi') timed
#     to the first stdout byte, interleaved with `kiln run T -- echo hi` to
#     its first byte, each with a warm pool (`kiln sandbox pool -n 2` before
#     every start, for both) and without one (a full restore).  The SDK runs
#     in one node process, as in an application (its first create in a fresh
#     process costs node ~150-200 ms more: not counted, one warm-up first);
#     the same process starts each `kiln run` and reads its first byte;
#   - 50 sandboxes created at once through the API, each asked `echo ok`;
#   - 100 sequential commands.run('true') in one sandbox;
#   - files.write + files.read of 10 MiB.
# Prints p50/p99 of each and the SDK/kiln-run ratios; the load average before
# and after.  Needs node/npm (the SDK is cached as t1010/t1020 cache it).
set -u
cd "$(dirname "$0")/.."
rounds=${1:-10}
E2B_VERSION=2.51.0
export SDK=${KILN_E2B_SDK:-$HOME/.cache/kiln/npm/e2b-$E2B_VERSION}
[ -f "$SDK/node_modules/e2b/package.json" ] || npm install --prefix "$SDK" --no-audit --no-fund "e2b@$E2B_VERSION" >/dev/null || exit 1
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-sbapi.XXXXXX")
export KILN_HOME=$work/home
K=$PWD/bin/kiln
cleanup() {
	[ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	$K sandbox pool -n 0 bb >/dev/null 2>&1
	for id in $(ls "$KILN_HOME/sandboxes" 2>/dev/null); do $K sandbox kill "$id" >/dev/null 2>&1; done
	rm -rf "$work"
}
trap cleanup EXIT
R=$work/root
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/root"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
$K rootfs --from-dir "$R" -o "$work/bb.ext4" --free 32M >/dev/null 2>&1 || exit 1
$K snapshot -t bb --memory 128 --start 'sleep 1000000' "$work/bb.ext4" >/dev/null 2>&1 || exit 1
mkdir -p "$work/data"
echo '{"auth": true, "per_ip_connection_limit": 2048, "sandboxes": true}' >"$work/serve.json"
key=$($K token create --data "$work/data" --e2b --scope bench:sandbox bench)
$K serve --addr 127.0.0.1:0 --data "$work/data" --config "$work/serve.json" 2>"$work/serve.log" &
pid=$!
for _ in $(seq 100); do grep -q listening "$work/serve.log" && break; sleep 0.1; done
port=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/serve.log")
export E2B_API_URL=http://127.0.0.1:$port E2B_SANDBOX_URL=http://127.0.0.1:$port E2B_API_KEY=$key E2B_DOMAIN=kiln.test
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)"

cat >"$work/sdk.cjs" <<'JS'
const { Sandbox } = require(process.env.SDK + '/node_modules/e2b')
const mode = process.argv[2]
const ms = (t) => Number(process.hrtime.bigint() - t) / 1e6
;(async () => {
  if (mode === 'rounds') {
    const { spawn, execFileSync } = require('child_process')
    const [n, pooled, kiln] = [Number(process.argv[3]), process.argv[4] === 'pooled', process.argv[5]]
    const fill = () => { if (pooled) execFileSync(kiln, ['sandbox', 'pool', '-n', '2', 'bb']) }
    const sdk = async () => {
      const t0 = process.hrtime.bigint()
      let first = 0
      const sb = await Sandbox.create('bb')
      await sb.commands.run('echo hi', { onStdout: () => { if (!first) first = ms(t0) } })
      await sb.kill()
      return first
    }
    const run = () => new Promise((resolve, reject) => {
      const t0 = process.hrtime.bigint()
      let first = 0
      const p = spawn(kiln, ['run', 'bb', '--', 'echo', 'hi'], { stdio: ['ignore', 'pipe', 'ignore'] })
      p.stdout.on('data', () => { if (!first) first = ms(t0) })
      p.on('exit', (c) => c === 0 ? resolve(first) : reject(new Error('kiln run exit ' + c)))
    })
    fill()
    await sdk() // the warm-up: node's own first-call costs
    const v = { sdk: [], run: [] }
    for (let i = 0; i < n; i++) {
      fill(); v.sdk.push(await sdk())
      fill(); v.run.push(await run())
    }
    if (pooled) execFileSync(kiln, ['sandbox', 'pool', '-n', '0', 'bb'])
    console.log(v.sdk.map((x) => x.toFixed(1)).join(' ') + '|' + v.run.map((x) => x.toFixed(1)).join(' '))
  } else if (mode === 'many') {
    const n = 50, t0 = process.hrtime.bigint()
    const res = await Promise.all(Array.from({ length: n }, async () => {
      try {
        const sb = await Sandbox.create('bb')
        const r = await sb.commands.run('echo ok')
        return { sb, ok: r.stdout === 'ok\n' }
      } catch (e) { return { ok: false, e: e.message } }
    }))
    console.log(JSON.stringify({ n, answering: res.filter((x) => x.ok).length, ms: ms(t0).toFixed(0),
      errors: res.filter((x) => !x.ok).slice(0, 2).map((x) => x.e) }))
    await Promise.all(res.filter((x) => x.sb).map((x) => x.sb.kill()))
  } else if (mode === 'seq') {
    const sb = await Sandbox.create('bb')
    await sb.commands.run('true')
    const v = []
    for (let i = 0; i < 100; i++) { const t = process.hrtime.bigint(); await sb.commands.run('true'); v.push(ms(t)) }
    v.sort((a, b) => a - b)
    const data = Buffer.alloc(10 << 20, 7)
    let t = process.hrtime.bigint()
    await sb.files.write('/tmp/big', data)
    const w = ms(t)
    t = process.hrtime.bigint()
    const back = await sb.files.read('/tmp/big', { format: 'bytes' })
    const r = ms(t)
    console.log(JSON.stringify({ p50: v[49].toFixed(1), p99: v[98].toFixed(1), write_ms: w.toFixed(0), read_ms: r.toFixed(0),
      same: Buffer.compare(Buffer.from(back), data) === 0, mib_s: (20 / ((w + r) / 1000)).toFixed(1) }))
    await sb.kill()
  }
})().catch((e) => { console.log('FAIL ' + e.message); process.exit(1) })
JS
declare -A v
for pool in pooled nopool; do
	r=$(node "$work/sdk.cjs" rounds "$rounds" $pool "$K") || { echo "rounds ($pool) failed: $r"; exit 1; }
	v[sdk_$pool]=${r%|*}
	v[run_$pool]=${r#*|}
done
python3 - "${v[sdk_pooled]}" "${v[run_pooled]}" "${v[sdk_nopool]}" "${v[run_nopool]}" <<'PY'
import statistics, sys
def q(s):
    x = sorted(float(t) for t in s.split())
    return x[len(x) // 2], x[min(len(x) - 1, int(len(x) * 0.99))]
names = ["SDK create+run, pooled", "kiln run, pooled", "SDK create+run, no pool", "kiln run, no pool"]
r = [q(a) for a in sys.argv[1:5]]
for n, (p50, p99) in zip(names, r):
    print("%-26s p50 %7.1f ms  p99 %7.1f ms" % (n, p50, p99))
print("ratio SDK / kiln run (p50): pooled %.2f, no pool %.2f" % (r[0][0] / r[1][0], r[2][0] / r[3][0]))
PY
echo "50 at once: $(node "$work/sdk.cjs" many)"
echo "100 x commands.run('true') and 10 MiB files: $(node "$work/sdk.cjs" seq)"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
