#!/usr/bin/env bash
# t0640-sandbox-network.sh — sandbox networking, one template shared by every
# check (busybox httpd on the guest's port 8080, network outbound): a host
# HTTP server on 127.0.0.1 is reachable with an allow rule, refused by
# default (the host itself), with --network none and by a deny rule, also
# when the guest's root re-addresses itself; a published port reaches the
# start command's server; two sandboxes of the template run at once with
# their own MACs and addresses; the egress chain exists while a sandbox runs
# and is gone after it; where QEMU's network namespace is; bad flags.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
if [ "$(id -u)" != 0 ] || ! command -v iptables-restore >/dev/null; then
	skip "sandbox network" "needs root and iptables (deps/vm.txt)"
	exit 0
fi
vm_setup
mkdir -p "$T_TMP/root/www" "$T_TMP/srv"
echo "hello from the template" >"$T_TMP/root/www/index.html"
echo "hello from the host" >"$T_TMP/srv/index.html"
expect_exit 0 "rootfs from a directory" $KILN rootfs --from-dir "$T_TMP/root" -o "$T_TMP/web.ext4" --free 16M
SB="$KILN_HOME/sandboxes"

# three free ports on the host's loopback: the host's server, two published
read -r HOSTP PUBA PUBB < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
(cd "$T_TMP/srv" && exec timeout 300 python3 -m http.server "$HOSTP" --bind 127.0.0.1) >/dev/null 2>&1 &
srv=$!
cleanup() {
	kill "$srv" 2>/dev/null
	for id in $(ls "$SB" 2>/dev/null); do $KILN sandbox kill "$id" >/dev/null 2>&1; done
	rm -rf "$T_TMP"
}
trap cleanup EXIT
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$HOSTP/" && break; sleep 0.1; done
url="http://10.0.2.2:$HOSTP/index.html" # slirp's gateway is the host's loopback

expect_exit 0 "snapshot with --network outbound" $KILN snapshot -t web --network outbound \
	--start 'busybox httpd -p 8080 -h /www' --ready 'busybox wget -q -O- http://127.0.0.1:8080/' "$T_TMP/web.ext4"
cfg="$KILN_HOME/snapshots/blobs/sha256/$(sed 's/^sha256://' "$T_TMP/out")"
expect_eq "the template records its network" "$(jq -r .network "$cfg")" outbound

expect_exit 0 "create A: allowed to the host's server, port published" \
	$KILN sandbox create --allow-egress "127.0.0.1:$HOSTP" -p "127.0.0.1:$PUBA:8080" web
a=$(cat "$T_TMP/out")
expect_exit 0 "create B: default outbound, port published" $KILN sandbox create -p "$PUBB:8080" web
b=$(cat "$T_TMP/out")
expect_exit 0 "A reaches the host's HTTP server" $KILN sandbox exec "$a" -- wget -q -O- "$url"
expect_grep "...and gets its page" '^hello from the host$' "$T_TMP/out"
expect_exit 0 "a published port reaches A's server (the start command's)" curl -s -m 10 "http://127.0.0.1:$PUBA/index.html"
expect_grep "...with the template's page" '^hello from the template$' "$T_TMP/out"
expect_exit 0 "B's published port reaches B's server" curl -s -m 10 "http://127.0.0.1:$PUBB/index.html"
expect_grep "...with the template's page" '^hello from the template$' "$T_TMP/out"
t0=$(date +%s%N)
expect_exit 1 "B (no allow rule) cannot reach the host itself" $KILN sandbox exec "$b" -- wget -q -O- "$url"
expect_grep "...refused, not timed out" 'refused' "$T_TMP/err"
el=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ "$el" -lt 10000 ]; then ok "...at once ($el ms)"; else not_ok "...at once ($el ms)"; fi
expect_exit 1 "B's root re-addressing itself does not get round the rule" $KILN sandbox exec "$b" -- sh -c \
	"ip addr flush dev eth0 && ip addr add 10.0.2.99/24 dev eth0 && ip route add default via 10.0.2.2 && wget -q -O- $url"
ida=$($KILN sandbox exec "$a" -- cat /sys/class/net/eth0/address)
idb=$($KILN sandbox exec "$b" -- cat /sys/class/net/eth0/address)
ipa=$($KILN sandbox exec "$a" -- sh -c "ip -4 -o addr show eth0 | awk '{print \$4}'")
if [ -n "$ida" ] && [ "$ida" != "$idb" ] && [ "$ida" != 52:54:00:12:34:56 ]; then
	ok "A and B have their own MACs ($ida, $idb), not the template's"
else not_ok "A and B have their own MACs ($ida, $idb)"; fi
expect_eq "A's guest address is the one its state records" "${ipa%/24}" "$(jq -r .network.address "$SB/$a/state.json")"
expect_eq "A's MAC is the one its state records" "$ida" "$(jq -r .network.mac "$SB/$a/state.json")"
expect_exit 0 "sandbox ls --json shows the network" $KILN sandbox ls --json
expect_grep "...with A's allow rule" "127.0.0.1/32:$HOSTP" "$T_TMP/out"

# a resumed sandbox keeps the network it was created with, not its template's default
expect_exit 0 "pause A" $KILN sandbox pause "$a"
expect_exit 0 "resume A" $KILN sandbox resume "$a"
expect_exit 0 "...A's published port reaches its server again" curl -s -m 10 "http://127.0.0.1:$PUBA/index.html"
expect_grep "...with the template's page" '^hello from the template$' "$T_TMP/out"
expect_exit 0 "...A's allow rule still lets it reach the host's server" $KILN sandbox exec "$a" -- wget -q -O- "$url"
expect_eq "...and its state still records the rule" "$(jq -r '.network.allow[0]' "$SB/$a/state.json")" \
	"127.0.0.1/32:$HOSTP"

# where each QEMU's sockets are, and its egress chain
pa=$(jq -r .pid "$SB/$a/state.json")
ua=$(jq -r .uid "$SB/$a/state.json")
expect_eq "an outbound sandbox's QEMU is in the host's network namespace" "$(readlink /proc/$pa/ns/net)" \
	"$(readlink /proc/self/ns/net)"
if iptables -w -S OUTPUT | grep -q -- "--uid-owner $ua .*-j KILN-VM-"; then ok "OUTPUT jumps to A's chain for its uid"
else not_ok "OUTPUT jumps to A's chain for its uid $ua"; fi
expect_exit 0 "sandbox kill A" $KILN sandbox kill "$a"
if iptables -w -S OUTPUT | grep -q -- "--uid-owner $ua "; then not_ok "A's chain is gone with it"
else ok "A's chain is gone with it"; fi

expect_exit 1 "--network none: the host's server is out of reach" \
	$KILN run --network none web -- wget -q -O- "$url"
expect_exit 1 "a deny rule wins over an allow rule" \
	$KILN run --allow-egress 127.0.0.0/8 --deny-egress "127.0.0.1:$HOSTP" web -- wget -q -O- "$url"
expect_exit 0 "kiln run --allow-egress reaches it" $KILN run --allow-egress "127.0.0.1:$HOSTP" web -- wget -q -O- "$url"
expect_grep "...and gets its page" '^hello from the host$' "$T_TMP/out"
expect_exit 0 "create with --network none" $KILN sandbox create --network none web
n=$(cat "$T_TMP/out")
expect_eq "...its QEMU has a network namespace of its own" \
	"$([ "$(readlink /proc/$(jq -r .pid "$SB/$n/state.json")/ns/net)" != "$(readlink /proc/self/ns/net)" ] && echo own)" own
expect_exit 0 "...and it still answers" $KILN sandbox exec "$n" -- echo ok

expect_exit 2 "--network bogus is a usage error" $KILN sandbox create --network bogus web
expect_grep "...naming the choices" 'none or outbound' "$T_TMP/err"
expect_exit 2 "a bad CIDR is a usage error" $KILN run --allow-egress 300.1.2.3/8 web -- true
expect_exit 2 "a published port not on loopback is a usage error" $KILN sandbox create -p 0.0.0.0:8000:80 web
expect_exit 2 "egress rules with --network none are refused" $KILN run --network none --deny-egress 10.0.0.0/8 web -- true
expect_exit 0 "sandbox kill the rest" $KILN sandbox kill "$b" "$n"
expect_eq "no QEMU of this test is left" "$(pgrep -f "$SB/" | wc -l)" 0
