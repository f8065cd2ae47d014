#!/usr/bin/env python3
# bench/start_burst.py N — run by bench/start.sh with START_BURST=N: N pooled
# `kiln run` starts in a row (no pause between them) from a pool sized for
# them, each refilled in the background as kiln run does; counts the misses.
import json, os, re, subprocess, sys, time
n = int(sys.argv[1]); K = "bin/kiln"
RE = re.compile(r"started in ([0-9.]+) ms( from the pool)?")
def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, int(round(q * len(v) + 0.4999)) - 1))]
t0 = time.monotonic()
subprocess.run([K, "sandbox", "pool", "-n", str(n), "web"], check=True, capture_output=True)
while True:  # the fill runs in the background: wait until all N are pooled
    ls = subprocess.run([K, "sandbox", "ls", "--json"], capture_output=True, text=True).stdout
    ready = sum(1 for s in json.loads(ls or "[]") if s.get("state") == "pooled")
    if ready >= n or time.monotonic() - t0 > 60 + 10 * n:
        break
    time.sleep(1)
print("pool of %d filled in %.1f s (%d pooled); load average %s" % (n, time.monotonic() - t0, ready,
      " ".join(open("/proc/loadavg").read().split()[:3])))
first, misses = [], 0
for i in range(n):
    t = time.monotonic()
    p = subprocess.Popen([K, "run", "--time", "web", "--", "echo", "hi"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    b = p.stdout.read(1); t1 = time.monotonic(); out, err = p.communicate()
    if p.returncode != 0 or b != b"h":
        sys.exit("failed: " + err.decode()[-300:])
    first.append((t1 - t) * 1000)
    m = RE.search(err.decode())
    if not m or not m.group(2):
        misses += 1
print("%d pooled starts in a row: p50 %.1f  p90 %.1f  p99 %.1f  max %.1f ms; %d missed the pool" %
      (n, pct(first, 0.5), pct(first, 0.9), pct(first, 0.99), max(first), misses))
subprocess.run([K, "sandbox", "pool", "-n", "0", "web"], capture_output=True)
