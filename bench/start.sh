#!/usr/bin/env bash
# bench/start.sh [STARTS] [BOOTS] — sandbox start versus cold boot, in one run.
# A busybox template whose start command runs httpd is snapshotted once, then:
#   - STARTS (default 50) `kiln run --time T -- echo hi` with a pool of 2 (the
#     pool is refilled in the background after each claim; the next start
#     waits for it), with the breakdown kiln reports (--time),
#   - STARTS/2 `kiln sandbox create T` + a first `kiln sandbox exec ID -- echo
#     hi` (two processes) from the pool of 2,
#   - STARTS/5 `kiln run` with no pool (a full restore),
#   - BOOTS (default 5) cold boots `kiln vm boot --writable ROOTFS -- echo hi`;
# each timed from the request to the first byte of the command's output.
# Prints p50/p99 of each, the ratio of medians, the load average before and
# after, and memory per idle sandbox (Pss and private memory of its QEMU, from
# /proc/PID/smaps_rollup).
# START_BURST=N: N pooled starts in a row from a pool of N, misses counted.
# START_PYTHON=1 also builds the real corpus's python template
# (tests/data/real/python on examples/debian-base.sh: python3 + numpy, its
# start command `python3 -m http.server`; kept in START_PYTHON_HOME if set)
# and times STARTS/2 full restores (no pool) of it and of the busybox
# template, each to the first byte of `echo hi` and of an HTTP response from
# the start command's server, with kiln's --time breakdown and QEMU's CPU time
# (START_BASELINE=OTHER-KILN alternates each of these starts between bin/kiln
# and that binary: an A/B in one run).
set -u
cd "$(dirname "$0")/.."
starts=${1:-50}
boots=${2:-5}
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-start.XXXXXX")
export KILN_HOME=$work/home
cleanup() {
	bin/kiln sandbox pool -n 0 web >/dev/null 2>&1
	for id in $(ls "$KILN_HOME/sandboxes" 2>/dev/null); do bin/kiln sandbox kill "$id" >/dev/null 2>&1; done
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/root/bin" "$work/root/etc" "$work/root/tmp" "$work/root/www"
cp /bin/busybox "$work/root/bin/busybox"
for a in sh echo true cat; do ln -s busybox "$work/root/bin/$a"; done
echo hello >"$work/root/www/index.html"
bin/kiln rootfs --from-dir "$work/root" -o "$work/root.ext4" --free 16M >/dev/null || exit 1
bin/kiln snapshot -t web --start 'busybox httpd -p 127.0.0.1:8080 -h /www' \
	--ready 'busybox wget -q -O- http://127.0.0.1:8080/index.html' "$work/root.ext4" >/dev/null || exit 1

# START_JAIL_AB=N: only the jail's cost, N rounds of jailed and KILN_UNCONFINED=1
# alternating, pooled and full restore (bench/jail_ab.py).
if [ -n "${START_JAIL_AB:-}" ]; then
	python3 bench/jail_ab.py "$START_JAIL_AB"
	exit
fi

# START_BURST=N: only N pooled starts in a row from a pool of N (issue 27:
# "50 pooled starts in a row without a miss"; bench/start_burst.py).
if [ -n "${START_BURST:-}" ]; then
	python3 bench/start_burst.py "$START_BURST"
	exit
fi

# START_AB=1: only the full restores (no pool) of the busybox template below,
# alternating bin/kiln and START_BASELINE (an A/B in one run; with
# START_PYTHON=1 the python template too).
[ "${START_AB:-0}" = 1 ] || python3 - "$starts" "$boots" "$work" <<'EOF'
import json, os, re, subprocess, sys, time
starts, boots, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
K = "bin/kiln"

def first_output(argv, t0=None, want_err=False):
    """ms from the request (t0, default now) to the first byte of output, and to the exit."""
    t0 = t0 if t0 is not None else time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.read(1)
    t1 = time.monotonic()
    rest, err = p.communicate()
    t2 = time.monotonic()
    if p.returncode != 0 or first != b"h":
        sys.exit("failed: %s: %s" % (" ".join(argv), err.decode()[-500:]))
    if want_err:
        return (t1 - t0) * 1000, (t2 - t0) * 1000, err.decode()
    return (t1 - t0) * 1000, (t2 - t0) * 1000

TIME_RE = re.compile(r"started in ([0-9.]+) ms from the pool \(check ([0-9.]+), (?:jail [0-9.]+, )?qemu [0-9.]+, cont ([0-9.]+), "
                     r"agent ([0-9.]+), setup [0-9.]+\); first output ([0-9.]+) ms")
phases = {k: [] for k in ("kiln process start + output delivery", "template check", "claim (state, pool scan)",
                          "QMP cont", "agent connect (HELLO not awaited)",
                          "HELLO + IDENTITY + EXEC to first output")}

def loadavg():
    return open("/proc/loadavg").read().split()[:3]

load_before = loadavg()

def pooled():
    out = subprocess.run([K, "sandbox", "ls", "--json"], capture_output=True, text=True).stdout
    return sum(1 for s in json.loads(out) if s.get("state") == "pooled")

def wait_pool(n):
    for _ in range(600):
        if pooled() >= n:
            return
        time.sleep(0.05)
    sys.exit("the pool did not refill")

def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, int(round(q * len(v) + 0.4999)) - 1))]

subprocess.run([K, "sandbox", "pool", "-n", "2", "web"], check=True, capture_output=True)
pool_first, pool_exit = [], []
for i in range(starts):
    wait_pool(2)
    f, e, err = first_output([K, "run", "--time", "web", "--", "echo", "hi"], want_err=True)
    pool_first.append(f); pool_exit.append(e)
    m = TIME_RE.search(err)
    if m:
        total, check, cont, agent, first = (float(x) for x in m.groups())
        phases["kiln process start + output delivery"].append(f - first)
        phases["template check"].append(check)
        phases["claim (state, pool scan)"].append(total - check - cont - agent)
        phases["QMP cont"].append(cont)
        phases["agent connect (HELLO not awaited)"].append(agent)
        phases["HELLO + IDENTITY + EXEC to first output"].append(first - total)

create_first = []
for i in range(max(1, starts // 2)):
    wait_pool(2)
    t0 = time.monotonic()
    sid = subprocess.run([K, "sandbox", "create", "web"], check=True, capture_output=True, text=True).stdout.strip()
    f, _ = first_output([K, "sandbox", "exec", sid, "--", "echo", "hi"], t0=t0)
    create_first.append(f)
    subprocess.run([K, "sandbox", "kill", sid], check=True, capture_output=True)
wait_pool(2)
subprocess.run([K, "sandbox", "pool", "-n", "0", "web"], check=True, capture_output=True)
load_after_pool = loadavg()

RESTORE_RE = re.compile(r"started in ([0-9.]+) ms \(check ([0-9.]+), (?:jail [0-9.]+, )?qemu ([0-9.]+), load ([0-9.]+), "
                        r"agent ([0-9.]+), setup [0-9.]+\); first output ([0-9.]+) ms")
restore_first = []
rphases = {k: [] for k in ("QEMU process start until QMP answers", "state load (RAM mapped, not read)",
                           "agent connect (HELLO not awaited)", "HELLO + IDENTITY + EXEC to first output (cold TCG)")}
for i in range(max(1, starts // 5)):
    f, _, err = first_output([K, "run", "--time", "web", "--", "echo", "hi"], want_err=True)
    restore_first.append(f)
    m = RESTORE_RE.search(err)
    if m:
        total, check, qemu, load, agent, first = (float(x) for x in m.groups())
        for k, v in zip(rphases, (qemu, load, agent, first - total)):
            rphases[k].append(v)

cold_first = []
for i in range(boots):
    f, _ = first_output([K, "vm", "boot", "--writable", work + "/root.ext4", "--", "echo", "hi"])
    cold_first.append(f)

# Memory of idle sandboxes (running, after one command each).
ids = []
for i in range(3):
    ids.append(subprocess.run([K, "sandbox", "create", "web"], check=True, capture_output=True, text=True).stdout.strip())
for i in ids:
    subprocess.run([K, "sandbox", "exec", i, "--", "true"], check=True)
time.sleep(1)
pss, priv = [], []
for i in ids:
    st = json.load(open(os.path.join(work, "home/sandboxes", i, "state.json")))
    f = {}
    for line in open("/proc/%d/smaps_rollup" % st["pid"]):
        parts = line.split()
        if len(parts) >= 3 and parts[1].isdigit():
            f[parts[0].rstrip(":")] = int(parts[1])
    pss.append(f["Pss"] / 1024); priv.append((f["Private_Clean"] + f["Private_Dirty"]) / 1024)
    subprocess.run([K, "sandbox", "kill", i], check=True)

def row(name, v):
    print("%-44s n=%-3d p50 %7.1f ms   p99 %7.1f ms" % (name, len(v), pct(v, 0.5), pct(v, 0.99)))

print("load average before: %s, after the pooled starts: %s, at the end: %s" %
      (" ".join(load_before), " ".join(load_after_pool), " ".join(loadavg())))
row("sandbox start, pool of 2 (kiln run)", pool_first)
row("  ... to kiln run's exit (incl. kill)", pool_exit)
for name, v in phases.items():
    if v:
        row("    " + name, v)
row("sandbox create + first exec, pool of 2", create_first)
row("sandbox start, full restore, no pool", restore_first)
for name, v in rphases.items():
    if v:
        row("    " + name, v)
row("cold boot (kiln vm boot -- echo)", cold_first)
print("ratio cold boot / pooled start (p50): %.0fx;  cold boot / full restore: %.0fx" %
      (pct(cold_first, 0.5) / pct(pool_first, 0.5), pct(cold_first, 0.5) / pct(restore_first, 0.5)))
print("memory per idle sandbox: Pss %.1f MiB, private %.1f MiB (mean of %d; guest RAM 256 MiB)" %
      (sum(pss) / len(pss), sum(priv) / len(priv), len(pss)))
EOF

[ "${START_PYTHON:-0}" = 1 ] || [ "${START_AB:-0}" = 1 ] || exit 0
# The python template: built once into START_PYTHON_HOME (a KILN_HOME kept
# between runs) when it is set, else into this run's home.  The image is
# built first and snapshotted by `kiln snapshot` with a long ready timeout:
# the server's first start on a loaded TCG host can take minutes.
pyhome=${START_PYTHON_HOME:-$KILN_HOME}
mkdir -p "$pyhome"
if [ "${START_PYTHON:-0}" = 1 ] && ! KILN_HOME=$pyhome bin/kiln snapshot ls 2>/dev/null | grep -q '^real-python'; then
	base=$(examples/debian-base.sh) || exit 1
	tests/data/real/context.sh "$work/ctx" >/dev/null || exit 1
	echo "building the python template into $pyhome (several minutes under TCG)..."
	KILN_HOME=$pyhome bin/kiln build -t real-python --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt \
		--build-arg "BASE=$base" -f "$work/ctx/python/Dockerfile" "$work/ctx/python" >"$work/py-build.log" 2>&1 &&
		KILN_HOME=$pyhome bin/kiln snapshot -t real-python --start 'python3 -m http.server 8000 --bind 127.0.0.1' \
			--ready "bash -c 'exec 3<>/dev/tcp/127.0.0.1/8000'" --ready-timeout 900 real-python:latest \
			>>"$work/py-build.log" 2>&1 || { tail -5 "$work/py-build.log"; exit 1; }
fi
# The baseline restores a template it made itself (an older kiln's machine
# may differ), in a KILN_HOME of its own.
basehome=$work/home-base
if [ -n "${START_BASELINE:-}" ]; then
	mkdir -p "$basehome"
	KILN_HOME=$basehome "$START_BASELINE" snapshot -t web --start 'busybox httpd -p 127.0.0.1:8080 -h /www' \
		--ready 'busybox wget -q -O- http://127.0.0.1:8080/index.html' "$work/root.ext4" >/dev/null || exit 1
fi
# and the python template from the same rootfs (its disk as main built it;
# the baseline's snapshot of a bare ext4 has no ENV, WORKDIR or USER, and
# the start command does not need them).
pybasehome=$work/home-base-py
if [ -n "${START_BASELINE:-}" ] && [ "${START_PYTHON:-0}" = 1 ]; then
	mkdir -p "$pybasehome"
	pyroot=$(python3 - "$pyhome" <<'EOF2'
import json, os, sys
home = sys.argv[1]
d = open(os.path.join(home, "snapshots/refs/real-python/latest")).read().split()[0]
c = json.load(open(os.path.join(home, "snapshots/blobs/sha256", d.split(":")[1])))
print(os.path.join(home, "snapshots/blobs/sha256", c["rootfs"]["digest"].split(":")[1]))
EOF2
) || exit 1
	cp --sparse=always "$pyroot" "$work/py-root.ext4" || exit 1
	echo "snapshotting the python rootfs with the baseline..."
	KILN_HOME=$pybasehome "$START_BASELINE" snapshot -t real-python \
		--start 'python3 -m http.server 8000 --bind 127.0.0.1' \
		--ready "bash -c 'exec 3<>/dev/tcp/127.0.0.1/8000'" --ready-timeout 900 "$work/py-root.ext4" \
		>"$work/py-base.log" 2>&1 || { tail -5 "$work/py-base.log"; exit 1; }
fi
# Full restores (no pool) of both templates, to the first byte of a trivial
# command and of an HTTP response from the start command's server, with
# kiln's --time breakdown and QEMU's CPU time until that byte (all its
# threads, /proc/PID/task/*/schedstat: what the load average inflates least).
python3 - "$starts" "$KILN_HOME" "$pyhome" "$basehome" "$pybasehome" <<'EOF'
import json, os, re, subprocess, sys, time
n = max(2, int(sys.argv[1]) // 2)
basehome, pybasehome = sys.argv[4], sys.argv[5]
K = "bin/kiln"
RESTORE_RE = re.compile(r"started in ([0-9.]+) ms \(check ([0-9.]+), (?:jail ([0-9.]+), )?qemu ([0-9.]+), load ([0-9.]+), "
                        r"agent ([0-9.]+), setup [0-9.]+\); first output ([0-9.]+) ms")
PY_HTTP = "exec 3<>/dev/tcp/127.0.0.1/8000 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3"
templates = [
    ("busybox", sys.argv[2], "web", {
        "echo hi": ["echo", "hi"],
        "HTTP GET from its busybox httpd": ["busybox", "wget", "-q", "-O-", "http://127.0.0.1:8080/index.html"]}),
    ("python (real corpus)", sys.argv[3], "real-python", {
        "echo hi": ["echo", "hi"],
        "HTTP GET / from its python3 -m http.server": ["bash", "-c", PY_HTTP]}),
]
if os.environ.get("START_PYTHON", "0") != "1":
    templates = templates[:1]
if os.environ.get("START_AB", "0") == "1":
    n = max(2, int(sys.argv[1]))
    del templates[0][3]["HTTP GET from its busybox httpd"]

def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, int(round(q * len(v) + 0.4999)) - 1))]

def qemu_cpu_ms(home, before):
    """CPU time so far of all threads of the QEMU of the sandbox not in before, ms."""
    for sid in set(os.listdir(os.path.join(home, "sandboxes"))) - before:
        try:
            pid = json.load(open(os.path.join(home, "sandboxes", sid, "state.json")))["pid"]
            return sum(int(open("/proc/%d/task/%s/schedstat" % (pid, t)).read().split()[0])
                       for t in os.listdir("/proc/%d/task" % pid)) / 1e6
        except (OSError, ValueError, KeyError):
            pass
    return None

def row(name, v):
    print("%-52s p50 %7.1f  p90 %7.1f  p99 %7.1f ms  (n=%d)" % (name, pct(v, 0.5), pct(v, 0.9), pct(v, 0.99), len(v)))

kilns = [("", K)]
if os.environ.get("START_BASELINE"):
    # A/B in one run: each start alternates between bin/kiln and this binary
    kilns = [(" [bin/kiln]", K), (" [baseline]", os.environ["START_BASELINE"])]
print("full restores, no pool; load average %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
for label, home, tmpl, cases in templates:
    print(label + " template")
    for name, argv in cases.items():
        first, cpu, ph = {}, {}, {}
        for tag, _ in kilns:
            first[tag], cpu[tag] = [], []
            ph[tag] = {k: [] for k in ("directory, jail, egress chain (before QEMU's exec)",
                                       "QEMU start (+ RAM copy) until QMP answers", "state load", "agent connect",
                                       "HELLO + EXEC to first output (guest, cold TCG)")}
        for i in range(n):
            for tag, kiln in kilns:
                if tag == " [baseline]":
                    home_k = basehome if home == sys.argv[2] else pybasehome
                else:
                    home_k = home
                env = dict(os.environ, KILN_HOME=home_k)
                before = set(os.listdir(os.path.join(home_k, "sandboxes"))) if os.path.isdir(
                    os.path.join(home_k, "sandboxes")) else set()
                t0 = time.monotonic()
                p = subprocess.Popen([kiln, "run", "--time", tmpl, "--"] + argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
                b = p.stdout.read(1)
                t1 = time.monotonic()
                c = qemu_cpu_ms(home_k, before)
                out, err = p.communicate()
                if p.returncode != 0 or b not in (b"h", b"H"):
                    sys.exit("failed: %s" % err.decode()[-500:])
                first[tag].append((t1 - t0) * 1000)
                if c is not None:
                    cpu[tag].append(c)
                m = RESTORE_RE.search(err.decode())
                if m:
                    total, check, jail, qemu, load, agent, fo = (float(x) if x else None for x in m.groups())
                    for k, v in zip(ph[tag], (jail, qemu, load, agent, fo - total)):
                        if v is not None:
                            ph[tag][k].append(v)
        for tag, _ in kilns:
            row("  " + name + tag, first[tag])
            for k, v in ph[tag].items():
                if v:
                    row("      " + k, v)
            if cpu[tag]:
                row("      QEMU CPU time until the first byte", cpu[tag])
print("load average at the end: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
EOF
