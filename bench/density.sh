#!/usr/bin/env bash
# bench/density.sh [N] [RUNS] — many sandboxes of one template at once.
# A busybox template (256 MiB, 1 vCPU, its start command a busybox httpd) is
# snapshotted once; then N (default 50) `kiln sandbox create`s run one after
# the other and stay up, every one of them answers a `kiln sandbox exec ID --
# echo ok`, and with all N idle the script reports
#   - memory per idle sandbox: Pss, private and Rss of each QEMU (from
#     /proc/PID/smaps_rollup) plus its RAM copy in /dev/shm (allocated blocks:
#     pages QEMU never touched are not in its Pss), and the host's MemAvailable
#     drop over the N,
#   - RUNS (default 20) `kiln run T -- echo hi` (full restores, no pool) timed
#     to the first byte of output: p50/p99, under the load of the N,
#   - create p50/p99, the load average and the QEMUs of other users on the
#     host (the machine is shared: say so with the figures).
# BENCH_NET=outbound makes the template's network outbound (each sandbox then
# has its own slirp stack and egress chain).
set -u
cd "$(dirname "$0")/.."
n=${1:-50}
runs=${2:-20}
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-density.XXXXXX")
export KILN_HOME=$work/home
cleanup() {
	for id in $(ls "$KILN_HOME/sandboxes" 2>/dev/null); do bin/kiln sandbox kill "$id" >/dev/null 2>&1; done
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/root/bin" "$work/root/etc" "$work/root/tmp" "$work/root/www"
cp /bin/busybox "$work/root/bin/busybox"
for a in sh echo true cat; do ln -s busybox "$work/root/bin/$a"; done
echo hello >"$work/root/www/index.html"
netflag=()
[ -n "${BENCH_NET:-}" ] && netflag=(--network "$BENCH_NET")
bin/kiln rootfs --from-dir "$work/root" -o "$work/root.ext4" --free 16M >/dev/null || exit 1
bin/kiln snapshot -t dense "${netflag[@]}" --start 'busybox httpd -p 127.0.0.1:8080 -h /www' \
	--ready 'busybox wget -q -O- http://127.0.0.1:8080/index.html' "$work/root.ext4" >/dev/null || exit 1

python3 - "$n" "$runs" <<'EOF'
import json, os, subprocess, sys, time
n, runs = int(sys.argv[1]), int(sys.argv[2])
K = "bin/kiln"

def loadavg():
    return " ".join(open("/proc/loadavg").read().split()[:3])

def meminfo(key):
    for line in open("/proc/meminfo"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024.0
    return 0.0

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]

def others():
    """QEMUs on the host that are not this run's (other users' VMs)."""
    mine = set(str(s["pid"]) for s in json.loads(subprocess.run([K, "sandbox", "ls", "--json"], capture_output=True,
                                                                 text=True).stdout) if s.get("pid"))
    out = subprocess.run(["pgrep", "-f", "^qemu-system"], capture_output=True, text=True).stdout.split()
    return len([p for p in out if p not in mine])

print("host: %d CPUs, load %s, other QEMUs running: %d, MemAvailable %.0f MiB" %
      (os.cpu_count(), loadavg(), others(), meminfo("MemAvailable")))
avail0 = meminfo("MemAvailable")
ids, creates = [], []
for i in range(n):
    t0 = time.monotonic()
    p = subprocess.run([K, "sandbox", "create", "dense"], capture_output=True, text=True)
    creates.append((time.monotonic() - t0) * 1000)
    if p.returncode != 0:
        sys.exit("create %d of %d failed: %s" % (i + 1, n, p.stderr[-800:]))
    ids.append(p.stdout.strip())
print("created %d sandboxes: create p50 %.0f ms, p99 %.0f ms (load %s)" % (n, pct(creates, 50), pct(creates, 99),
                                                                          loadavg()))
bad, execs = [], []
for sid in ids:
    t0 = time.monotonic()
    p = subprocess.run([K, "sandbox", "exec", sid, "--", "echo", "ok"], capture_output=True, text=True)
    execs.append((time.monotonic() - t0) * 1000)
    if p.returncode != 0 or p.stdout.strip() != "ok":
        bad.append((sid, p.returncode, p.stderr[-300:]))
print("all %d answering an exec: %s (exec p50 %.0f ms, p99 %.0f ms)" % (n, "yes" if not bad else "NO: %r" % bad[:3],
                                                                      pct(execs, 50), pct(execs, 99)))
time.sleep(5)  # let them go idle
sb = json.loads(subprocess.run([K, "sandbox", "ls", "--json"], capture_output=True, text=True).stdout)
pss, priv, rss, shm = [], [], [], []
home = os.environ["KILN_HOME"]
for s in sb:
    if s.get("state") != "running":
        continue
    f = {}
    for line in open("/proc/%d/smaps_rollup" % s["pid"]):
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(":"):
            f[parts[0][:-1]] = int(parts[1]) / 1024.0
    pss.append(f.get("Pss", 0))
    priv.append(f.get("Private_Clean", 0) + f.get("Private_Dirty", 0))
    rss.append(f.get("Rss", 0))
    ram = os.path.join(home, "sandboxes", s["id"], "ram")
    try:
        shm.append(os.stat(os.path.realpath(ram)).st_blocks * 512 / 1048576.0)
    except OSError:
        shm.append(0.0)
avail1 = meminfo("MemAvailable")
print("idle sandboxes: %d; per QEMU Pss p50 %.1f MiB (min %.1f, max %.1f), private p50 %.1f MiB, Rss p50 %.1f MiB;"
      " RAM copy in /dev/shm p50 %.1f MiB" %
      (len(pss), pct(pss, 50), min(pss), max(pss), pct(priv, 50), pct(rss, 50), pct(shm, 50)))
print("sum of Pss %.0f MiB, of RAM copies %.0f MiB; host MemAvailable dropped %.0f MiB over the %d (%.1f MiB each; other users move it too)" %
      (sum(pss), sum(shm), avail0 - avail1, len(pss), (avail0 - avail1) / max(1, len(pss))))
print("load with %d idle: %s, other QEMUs: %d" % (len(pss), loadavg(), others()))
lat = []
for i in range(runs):
    t0 = time.monotonic()
    p = subprocess.Popen([K, "run", "dense", "--", "echo", "hi"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.read(1)
    t1 = time.monotonic()
    _, err = p.communicate()
    if p.returncode != 0 or first != b"h":
        sys.exit("kiln run failed under load: %s" % err.decode()[-500:])
    lat.append((t1 - t0) * 1000)
print("kiln run (full restore) to first output with %d idle sandboxes: p50 %.0f ms, p99 %.0f ms (%d runs, load %s)" %
      (len(pss), pct(lat, 50), pct(lat, 99), runs, loadavg()))
EOF
