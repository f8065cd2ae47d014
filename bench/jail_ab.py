#!/usr/bin/env python3
# jail_ab.py ROUNDS — the jail's cost on a sandbox start (bench/start.sh
# START_JAIL_AB=ROUNDS runs it on its template "web", KILN_HOME set): the same
# binary, jailed and KILN_UNCONFINED=1 alternating round by round (so the
# shared host's load drifts over both alike), each round one pooled start (a
# pool of 1 made under that arm, then `kiln run --time web -- echo hi`) and one
# full restore (no pool); the arms are in ARMS below.  Each timed from the
# request to the first byte of output, with kiln's --time breakdown; p50 and
# p90 per arm, the jail's cost (the difference to unconfined), the load
# average before, midway and after.  JAIL_AB_BEFORE=PATH adds an arm "before":
# that kiln binary, jailed under the default parent (a before/after of a
# change to the jail in the same run: compare it with "jailed, kiln parent").
import glob, json, os, re, statistics, subprocess, sys, time

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 16
K = "bin/kiln"
# "jailed": the VMs' cgroups under a parent of this run's own, whose CPU weight
# no other VM shares; "jailed, kiln parent": under the default parent "kiln",
# shared with every other jailed VM on the host (on a shared host its weight,
# one task's, is split among all of them).
PARENT = "kiln-bench-%d" % os.getpid()
ARMS = {"jailed": {"KILN_CGROUP_PARENT": PARENT}, "jailed, kiln parent": {}, "unconfined": {"KILN_UNCONFINED": "1"}}
BIN = {a: K for a in ARMS}
if os.environ.get("JAIL_AB_BEFORE"):
    ARMS["before"] = {}
    BIN["before"] = os.environ["JAIL_AB_BEFORE"]
POOL_RE = re.compile(r"started in ([0-9.]+) ms from the pool \(check ([0-9.]+), (?:jail [0-9.]+, )?qemu [0-9.]+, cont ([0-9.]+), "
                     r"agent ([0-9.]+), setup [0-9.]+\)")
FULL_RE = re.compile(r"started in ([0-9.]+) ms \(check ([0-9.]+), (?:jail [0-9.]+, )?qemu ([0-9.]+), load ([0-9.]+), "
                     r"agent ([0-9.]+), setup [0-9.]+\)")


def env(arm):
    e = dict(os.environ)
    e.pop("KILN_UNCONFINED", None)
    e.pop("KILN_CGROUP_PARENT", None)
    e.update(ARMS[arm])
    return e


def kiln(arm, *args):
    subprocess.run([BIN[arm], *args], check=True, capture_output=True, env=env(arm))


def first_output(arm, argv, debug=False):
    t0 = time.monotonic()
    e = env(arm)
    if debug:
        e["KILN_LOG"] = "debug"  # for vm_spawn's "exec'd N ms after the fork"
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
    first = p.stdout.read(1)
    t1 = time.monotonic()
    _, err = p.communicate()
    if p.returncode != 0 or first != b"h":
        sys.exit("failed (%s): %s: %s" % (arm, " ".join(argv), err.decode()[-500:]))
    return (t1 - t0) * 1000, err.decode()


def pooled_n():
    out = subprocess.run([K, "sandbox", "ls", "--json"], capture_output=True, text=True).stdout
    return sum(1 for s in json.loads(out) if s.get("state") == "pooled")


def wait_pool(n):
    for _ in range(1200):
        if pooled_n() == n:
            return
        time.sleep(0.05)
    sys.exit("the pool did not reach %d" % n)


def loadavg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


EXEC_RE = re.compile(r"exec'd ([0-9.]+) ms after the fork")
res = {a: {k: [] for k in ("pool", "pool_started", "full", "full_exec", "full_qemu", "full_load")} for a in ARMS}
loads = [loadavg()]
for r in range(rounds):
    order = list(ARMS)[r % len(ARMS):] + list(ARMS)[:r % len(ARMS)]
    for arm in order:
        # a pool member made under this arm, claimed under it
        kiln(arm, "sandbox", "pool", "-n", "1", "web")
        wait_pool(1)
        f, err = first_output(arm, [BIN[arm], "run", "--time", "web", "--", "echo", "hi"])
        res[arm]["pool"].append(f)
        m = POOL_RE.search(err)
        if m:
            res[arm]["pool_started"].append(float(m.group(1)))
        wait_pool(1)  # its background refill, then empty the pool
        kiln(arm, "sandbox", "pool", "-n", "0", "web")
        wait_pool(0)
        f, err = first_output(arm, [BIN[arm], "run", "--time", "web", "--", "echo", "hi"], debug=True)
        res[arm]["full"].append(f)
        m = EXEC_RE.search(err)
        if m:
            res[arm]["full_exec"].append(float(m.group(1)))
        m = FULL_RE.search(err)
        if m:
            res[arm]["full_qemu"].append(float(m.group(3)))
            res[arm]["full_load"].append(float(m.group(4)))
    if r == rounds // 2:
        loads.append(loadavg())
loads.append(loadavg())


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, int(round(q * len(v) + 0.4999)) - 1))] if v else float("nan")


names = {"pool": "pooled kiln run, request to first output", "pool_started": "  pooled, 'started in'",
         "full": "full restore, request to first output",
         "full_exec": "  full, fork until QEMU is exec'd (jail setup)", "full_qemu": "  full, QEMU start until QMP answers",
         "full_load": "  full, state load"}
print("load average before / midway / after: %s" % " / ".join(loads))
arms = [a for a in ARMS if a != "unconfined"] + ["unconfined"]
print("%-48s %3s" % ("p50 (p90), ms", "n") + "".join("%21s" % a for a in arms))
for k, name in names.items():
    line = "%-48s %3d" % (name, len(res["jailed"][k]))
    for a in arms:
        line += "%12.1f (%6.1f)" % (pct(res[a][k], 0.5), pct(res[a][k], 0.9))
    print(line)
# the jail's cost: each arm's p50 minus unconfined's, and the median of the
# round-by-round differences (paired: the arms of a round ran back to back)
for a in arms[:-1]:
    for k in ("pool", "pool_started", "full", "full_exec", "full_qemu", "full_load"):
        d = [x - y for x, y in zip(res[a][k], res["unconfined"][k])]
        if not res[a][k]:
            continue
        print("jail cost, %-20s %-13s p50 difference %+7.1f ms, median paired difference %+7.1f ms" %
              (a + ":", k, pct(res[a][k], 0.5) - pct(res["unconfined"][k], 0.5), statistics.median(d) if d else 0))

# this run's parent cgroups (their VMs are gone: kill, then gc)
subprocess.run([K, "sandbox", "gc"], capture_output=True, env=env("jailed"))
for pat in ("/sys/fs/cgroup/%s", "/sys/fs/cgroup/*/%s", "/sys/fs/cgroup/*/*/%s", "/sys/fs/cgroup/*/*/*/%s"):
    for d in glob.glob(pat % PARENT):
        for sub in glob.glob(d + "/vm-*"):
            try:
                os.rmdir(sub)
            except OSError:
                pass
        try:
            os.rmdir(d)
        except OSError as e:
            print("left %s: %s" % (d, e))
