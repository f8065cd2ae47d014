# radosgw-lib.sh — a throw-away one-node Ceph (mon + memstore OSD) with a
# radosgw S3 endpoint on 127.0.0.1, for the registry's S3 tests.
# rgw_start DIR : sets RGW_ENDPOINT, RGW_ACCESS, RGW_SECRET; rgw_stop.
# Every step is bounded; a failed bring-up is retried from scratch (3 tries).
RGW_PIDS=()

rgw_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

rgw_try() {
	local d=$1 monport rgwport fsid osduuid c i osdpid restarts=0
	mkdir -p "$d/mon" "$d/osd" "$d/run" "$d/log" "$d/rgw"
	monport=$(rgw_port); rgwport=$(rgw_port)
	fsid=$(cat /proc/sys/kernel/random/uuid)
	c="$d/ceph.conf"
	cat >"$c" <<EOC
[global]
fsid = $fsid
mon host = v1:127.0.0.1:$monport
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
osd objectstore = memstore
memstore device bytes = 1073741824
ms bind ipv6 = false
run dir = $d/run
admin socket = $d/run/\$name.asok
log file = $d/log/\$name.log
pid file = $d/run/\$name.pid
[mon.a]
mon data = $d/mon
[osd.0]
osd data = $d/osd
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$rgwport
rgw data = $d/rgw
EOC
	monmaptool --create --addv a "[v1:127.0.0.1:$monport]" --fsid "$fsid" "$d/monmap" >/dev/null || return 1
	ceph-mon -c "$c" --mkfs -i a --monmap "$d/monmap" || return 1
	ceph-mon -c "$c" -i a -f </dev/null >/dev/null 2>&1 & RGW_PIDS+=($!)
	# The OSD's uuid is given to both sides so the OSD's own "osd create" at
	# start agrees with the monitor's record ('wrong fsid' otherwise).
	osduuid=$(cat /proc/sys/kernel/random/uuid)
	timeout 60 ceph -c "$c" --connect-timeout 30 osd create "$osduuid" >/dev/null || return 1
	timeout 60 ceph-osd -c "$c" -i 0 --mkfs --osd-uuid "$osduuid" >/dev/null 2>&1 || return 1
	ceph-osd -c "$c" -i 0 -f </dev/null >/dev/null 2>&1 & osdpid=$!
	RGW_PIDS+=($osdpid)
	radosgw -c "$c" -n client.rgw -f </dev/null >/dev/null 2>&1 & RGW_PIDS+=($!)
	RGW_ACCESS=kilntest$RANDOM
	RGW_SECRET=$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
	RGW_ENDPOINT="http://127.0.0.1:$rgwport"
	for i in $(seq 1 120); do
		curl -s -o /dev/null "$RGW_ENDPOINT/" && break
		[ "$i" = 120 ] && return 1
		# Seen now and then: the OSD's own registration is refused ('wrong
		# fsid': its first commands go out before it has the monitor's map)
		# and it never serves; radosgw would wait forever.  The OSD alone is
		# started again, after a pause (the mon is fine), twice; then over.
		if grep -q "wrong fsid" "$d/log/osd.0.log" 2>/dev/null; then
			echo "# OSD refused ('wrong fsid'), restart $((++restarts))" >&2
			[ "$restarts" -gt 2 ] && return 1
			kill "$osdpid" 2>/dev/null; wait "$osdpid" 2>/dev/null
			mv "$d/log/osd.0.log" "$d/log/osd.0.log.$restarts"
			sleep 1
			ceph-osd -c "$c" -i 0 -f </dev/null >/dev/null 2>&1 & osdpid=$!
			RGW_PIDS+=($osdpid)
		fi
		sleep 0.5
	done
	timeout 60 radosgw-admin -c "$c" user create --uid=kiln --display-name=kiln \
		--access-key="$RGW_ACCESS" --secret-key="$RGW_SECRET" >/dev/null || return 1
	curl -s -o /dev/null "$RGW_ENDPOINT/"
}

rgw_start() {
	local n
	for n in 1 2 3; do
		rgw_try "$1/$n" && return 0
		echo "# radosgw bring-up $n failed" >&2
		tail -n 3 "$1/$n"/log/*.log >&2
		rgw_stop
	done
	return 1
}

rgw_stop() {
	local p= i
	# radosgw and the OSD before the monitor they say goodbye to; SIGKILL
	# whatever is still there after 5 s (memstore holds nothing worth keeping).
	for ((i = ${#RGW_PIDS[@]} - 1; i >= 0; i--)); do kill "${RGW_PIDS[i]}" 2>/dev/null; sleep 0.2; done
	for i in $(seq 1 25); do
		for p in "${RGW_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && break; p=; done
		[ -z "$p" ] && break
		sleep 0.2
	done
	for p in "${RGW_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	for p in "${RGW_PIDS[@]}"; do wait "$p" 2>/dev/null; done
	RGW_PIDS=()
}
