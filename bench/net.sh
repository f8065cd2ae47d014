#!/usr/bin/env bash
# bench/net.sh [MIB] [RUNS] — the two ways a sandbox could reach out, measured
# on one busybox rootfs under the same load:
#   slirp: QEMU's user-mode network (what kiln uses: libslirp in QEMU 7.2),
#   tap:   a tap device on the host routed by the kernel (the "NAT of kiln's
#          own" candidate: tap + netns + veth + MASQUERADE; here the tap sits
#          in the host's namespace with the address slirp's gateway has, so
#          the guest's side is the same and only the data path differs).
# Throughput: the guest downloads MIB (default 64) MiB from an HTTP server on
# the host (busybox wget to /dev/null, timed in the guest), 3 times each, in
# VMs booted with `kiln --unconfined vm boot --net` (the tap one through a
# KILN_QEMU wrapper that swaps -netdev user for -netdev tap).
# Start latency: `kiln run` of a network-outbound template with the default
# network versus --network none, RUNS (default 10) each, alternating (what
# kiln adds: the egress chain, iptables-restore + a check); and the time the
# tap candidate's per-sandbox set-up takes with ip(8)/iptables (netns, veth
# pair, tap, addresses, forwarding and NAT rules), RUNS times.
set -u
cd "$(dirname "$0")/.."
mib=${1:-64}
runs=${2:-10}
[ "$(id -u)" = 0 ] || { echo "bench/net.sh needs root (tap devices, the jail)" >&2; exit 1; }
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-net.XXXXXX")
export KILN_HOME=$work/home
tap=kbtap$$
srv=
cleanup() {
	[ -n "$srv" ] && kill "$srv" 2>/dev/null
	ip link del "$tap" 2>/dev/null
	for id in $(ls "$KILN_HOME/sandboxes" 2>/dev/null); do bin/kiln sandbox kill "$id" >/dev/null 2>&1; done
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/root/bin" "$work/root/etc" "$work/root/tmp" "$work/root/www" "$work/srv"
cp /bin/busybox "$work/root/bin/busybox"
for a in sh echo true cat wget date; do ln -s busybox "$work/root/bin/$a"; done
echo hello >"$work/root/www/index.html"
head -c $((mib << 20)) /dev/urandom >"$work/srv/blob"
bin/kiln rootfs --from-dir "$work/root" -o "$work/root.ext4" --free 16M >/dev/null || exit 1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

# the tap, with slirp's gateway address; the server listens on both
ip tuntap add "$tap" mode tap && ip addr add 10.0.2.2/24 dev "$tap" && ip link set "$tap" up || exit 1
(cd "$work/srv" && exec timeout 1200 python3 -m http.server "$port" --bind 0.0.0.0) >/dev/null 2>&1 &
srv=$!
cat >"$work/qemu-tap" <<EOF
#!/bin/sh
# bench/net.sh: QEMU with the tap instead of slirp
for a; do shift; case \$a in user,id=net0*) a="tap,id=net0,ifname=$tap,script=no,downscript=no" ;; esac; set -- "\$@" "\$a"; done
exec qemu-system-x86_64 "\$@"
EOF
chmod +x "$work/qemu-tap"
sleep 1
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $mib MiB per download"
get="s=\$(cat /proc/uptime); wget -q -O /dev/null http://10.0.2.2:$port/blob || exit 1; e=\$(cat /proc/uptime); echo \$s \$e"
for mode in slirp tap slirp tap slirp tap; do
	q=qemu-system-x86_64
	[ $mode = tap ] && q=$work/qemu-tap
	# the guest's uptime (kernel clock, the host's TSC under TCG) around the download
	ms=$(KILN_QEMU=$q bin/kiln --unconfined vm boot --net "$work/root.ext4" -- sh -c "$get" 2>/dev/null |
		awk '{printf "%d", ($3 - $1) * 1000}')
	[ -n "$ms" ] && echo "throughput $mode: $ms ms, $(python3 -c "print('%.1f' % ($mib * 1000.0 / max(1, $ms)))") MiB/s" \
		|| echo "throughput $mode: failed"
done

bin/kiln snapshot -t netb --network outbound --start 'busybox httpd -p 8080 -h /www' \
	--ready 'busybox wget -q -O- http://127.0.0.1:8080/index.html' "$work/root.ext4" >/dev/null 2>&1 || exit 1
python3 - "$runs" <<'PYEOF'
import re, subprocess, sys, time
runs = int(sys.argv[1])
res = {"outbound": [], "none": []}
RE = re.compile(r"qemu ([0-9.]+)")
for i in range(runs):
    for mode in ("outbound", "none"):
        t0 = time.monotonic()
        p = subprocess.Popen(["bin/kiln", "run", "--time", "--network", mode, "netb", "--", "echo", "hi"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = p.stdout.read(1)
        t1 = time.monotonic()
        _, err = p.communicate()
        if p.returncode != 0 or first != b"h":
            sys.exit("kiln run failed: %s" % err.decode()[-400:])
        m = RE.search(err.decode())
        res[mode].append(((t1 - t0) * 1000, float(m.group(1)) if m else 0.0))
def med(xs): xs = sorted(xs); return xs[len(xs) // 2]
for mode, v in res.items():
    print("kiln run --network %-8s first output p50 %.0f ms (qemu spawn to QMP, incl. the egress chain: p50 %.0f ms), %d runs"
          % (mode, med([a for a, _ in v]), med([b for _, b in v]), len(v)))
PYEOF

# the tap candidate's set-up per sandbox, by hand: what kiln would run
for i in $(seq "$runs"); do
	ns=kbns$$-$i
	s=$(date +%s%N)
	ip netns add "$ns" &&
	ip link add "kbv$i" type veth peer name eth0 netns "$ns" &&
	ip addr add "10.201.$i.1/30" dev "kbv$i" && ip link set "kbv$i" up &&
	ip netns exec "$ns" sh -c "ip link set lo up && ip link set eth0 up && ip addr add 10.201.$i.2/30 dev eth0 &&
		ip route add default via 10.201.$i.1 && ip tuntap add tap0 mode tap && ip addr add 10.0.2.2/24 dev tap0 &&
		ip link set tap0 up && sysctl -qw net.ipv4.ip_forward=1 &&
		iptables -t nat -A POSTROUTING -o eth0 -j MASQUERADE && iptables -A FORWARD -i tap0 -d 127.0.0.0/8 -j REJECT" &&
	iptables -t nat -A POSTROUTING -s "10.201.$i.0/30" -j MASQUERADE
	e=$(date +%s%N)
	echo "tap set-up $i: $(( (e - s) / 1000000 )) ms"
	iptables -t nat -D POSTROUTING -s "10.201.$i.0/30" -j MASQUERADE 2>/dev/null
	ip link del "kbv$i" 2>/dev/null
	ip netns del "$ns" 2>/dev/null
done | sort -t: -k2 -n | awk '{a[NR]=$0} END {print "tap candidate set-up per sandbox (netns, veth, tap, NAT): median " a[int((NR+1)/2)] " of " NR}'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
