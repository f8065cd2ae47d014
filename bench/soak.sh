#!/usr/bin/env bash
# bench/soak.sh HOURS [KILL_MIN] — a long mixed run (issue 29): one `kiln serve
# --build` (registry, build service, its GC timer every minute) on loopback and,
# concurrently until HOURS have passed (bounded, self-stopping):
#   - remote builds (FROM scratch + COPY of a new file each time), published;
#   - local builds pushed with `kiln push`;
#   - pulls of what was pushed (skopeo, then every layer's digest checked);
#   - a lazily pulled template: `kiln run` and a sandbox created, exec'd,
#     paused, resumed and killed, in a fresh KILN_HOME every few rounds;
#   - a `kill -9` of the server every KILL_MIN minutes (default 4), restarted
#     on the same port and data, except in the run's last QUIET_MIN minutes
#     (default a third of the run): that last lifetime is long enough to tell a
#     leak from warm-up.
# A failed operation within 20 s of a kill is retried once (a client would)
# and counted as kill-caused if the retry succeeds; every other failure is an
# error. Every 10 s the server's RSS, fds and threads and the data directory's
# size are sampled. At the end: operations and errors per kind, the samples'
# slopes per server lifetime after its first minute (KiB/min, fds/min), and,
# after `kiln registry gc`, the bytes on disk against the bytes the stores hold.
set -u
cd "$(dirname "$0")/.."
HOURS=${1:?usage: bench/soak.sh HOURS [KILL_MIN]}
KILL_MIN=${2:-4}
QUIET_MIN=${QUIET_MIN:-$(awk -v h="$HOURS" 'BEGIN { printf "%d", h * 20 }')}
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null || exit 1
KILN=$PWD/bin/kiln
W=$(mktemp -d "${TMPDIR:-/tmp}/kiln-soak.XXXXXX")
END=$(($(date +%s) + $(awk -v h="$HOURS" 'BEGIN { printf "%d", h * 3600 }')))
export SOURCE_DATE_EPOCH=1700000000 KILN_HOME=$W/home
DATA=$W/data
pids=
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null; done
	kill -9 "$(cat "$W/srv.pid" 2>/dev/null)" 2>/dev/null
	for h in "$W"/lazy*; do [ -d "$h" ] && KILN_HOME=$h "$KILN" sandbox gc >/dev/null 2>&1 && KILN_HOME=$h "$KILN" chunkfs stop >/dev/null 2>&1; done
	wait 2>/dev/null
	# SOAK_OUT=DIR keeps the samples, the operations' log and the errors
	[ -n "${SOAK_OUT:-}" ] && mkdir -p "$SOAK_OUT" && cp "$W"/samples "$W"/ops "$W"/errors "$W"/srv.log "$SOAK_OUT"/ 2>/dev/null
	rm -rf "$W"
}
trap cleanup EXIT
echo '{"auth": true, "gc_interval_s": 60, "gc_grace_s": 30, "build": {"host_builds": 1}}' >"$W/serve.json"
TOK=$("$KILN" token create --data "$DATA" --scope 'soak:build,pull,push' soak)
export KILN_TOKEN=$TOK

serve() { # on the port of the first start
	local addr=${HOSTP:-127.0.0.1:0}
	for _ in $(seq 40); do
		: >"$W/srv.log.new"
		"$KILN" serve --addr "$addr" --data "$DATA" --config "$W/serve.json" --log-format off 2>"$W/srv.log.new" &
		echo $! >"$W/srv.pid"
		for _ in $(seq 100); do grep -q listening "$W/srv.log.new" && break; sleep 0.1; done
		cat "$W/srv.log.new" >>"$W/srv.log"
		grep -q listening "$W/srv.log.new" && break
		sleep 0.5
	done
	HOSTP=$(grep -o '127.0.0.1:[0-9]*' "$W/srv.log.new" | head -1)
}
serve
[ -n "$HOSTP" ] || { echo "soak: kiln serve did not start" >&2; exit 1; }
echo "$HOSTP" >"$W/host"
"$KILN" login -u soak --password-stdin "$HOSTP" <<<"$TOK" >/dev/null

# op KIND CMD...: run, log "time kind ok|kill|error"; a failure near a kill is retried once
op() {
	local kind=$1 t
	shift
	t=$(date +%s)
	if "$@" >"$W/$kind.last" 2>&1; then echo "$t $kind ok" >>"$W/ops"; return 0; fi
	if [ $((t - $(cat "$W/killed" 2>/dev/null || echo 0))) -lt 20 ] || [ $(($(date +%s) - $(cat "$W/killed" 2>/dev/null || echo 0))) -lt 20 ]; then
		sleep 3
		if "$@" >"$W/$kind.last" 2>&1; then echo "$t $kind kill" >>"$W/ops"; return 0; fi
	fi
	echo "$t $kind error" >>"$W/ops"
	echo "--- $(date -u +%FT%TZ) $kind: $*" >>"$W/errors"
	tail -5 "$W/$kind.last" >>"$W/errors"
	return 1
}

# the inputs: a busybox base (for the template), a small context
mkdir -p "$W/bb/root/bin" "$W/bb/root/tmp" "$W/ctx"
cp /bin/busybox "$W/bb/root/bin/busybox"
for a in sh cat echo sleep sha256sum; do ln -sf busybox "$W/bb/root/bin/$a"; done
printf 'FROM scratch\nCOPY root/ /\n' >"$W/bb/Dockerfile"
"$KILN" build --remote "http://$HOSTP" -t bb:1 "$W/bb" >/dev/null 2>&1 || { echo "soak: the base does not build" >&2; exit 1; }
printf 'FROM %s/soak/bb:1\nRUN echo soak >/ready\n' "$HOSTP" >"$W/bb/Dockerfile.t"
"$KILN" build --remote "http://$HOSTP" -f "$W/bb/Dockerfile.t" --template --start-cmd 'sleep 100000' --ready-cmd true \
	--memory 128 -t tpl:1 "$W/bb" >/dev/null 2>&1 || { echo "soak: the template does not build" >&2; exit 1; }

remote_builds() {
	local n=0
	while [ "$(date +%s)" -lt "$END" ]; do
		n=$((n + 1))
		head -c 200000 /dev/urandom >"$W/ctx/r.bin"
		printf 'FROM scratch\nCOPY r.bin /r.bin\n' >"$W/ctx/Dockerfile"
		op remote "$KILN" build --remote "http://$HOSTP" -t "r:$((n % 20))" "$W/ctx" && echo "r:$((n % 20))" >>"$W/published"
		sleep 2
	done
}
local_builds() {
	local n=0
	mkdir -p "$W/lctx"
	while [ "$(date +%s)" -lt "$END" ]; do
		n=$((n + 1))
		head -c 300000 /dev/urandom >"$W/lctx/l.bin"
		printf 'FROM scratch\nCOPY l.bin /l.bin\n' >"$W/lctx/Dockerfile"
		op local "$KILN" build -t "l:$n" "$W/lctx" && op push "$KILN" push "l:$n" "$HOSTP/soak/l:$((n % 20))"
		sleep 2
	done
}
pull_one() { # REF: a pull whose every blob matches its digest
	rm -rf "$W/pulled"
	skopeo copy --quiet --src-tls-verify=false --src-creds "soak:$TOK" "docker://$1" "oci:$W/pulled:x" &&
		for b in "$W"/pulled/blobs/sha256/*; do [ "$(sha256sum <"$b" | cut -c1-64)" = "${b##*/}" ] || return 1; done
}
pulls() {
	while [ "$(date +%s)" -lt "$END" ]; do
		[ -s "$W/published" ] && { op pull pull_one "$HOSTP/soak/$(sort -u "$W/published" | shuf -n1)" || true; }
		sleep 3
	done
}
sandbox_round() { # HOME: a lazy run, then a sandbox's life
	local h=$1 id
	KILN_HOME=$h "$KILN" login -u soak --password-stdin "$HOSTP" <<<"$TOK" >/dev/null 2>&1
	KILN_HOME=$h "$KILN" pull --lazy "$HOSTP/soak/tpl:1" >/dev/null 2>&1 || KILN_HOME=$h "$KILN" pull "$HOSTP/soak/tpl:1" || return 1
	[ "$(KILN_HOME=$h "$KILN" run "$HOSTP/soak/tpl:1" -- cat /ready)" = soak ] || return 1
	id=$(KILN_HOME=$h "$KILN" sandbox create "$HOSTP/soak/tpl:1") || return 1
	KILN_HOME=$h "$KILN" sandbox exec "$id" -- sh -c 'echo x >/tmp/x' &&
		KILN_HOME=$h "$KILN" sandbox pause "$id" && KILN_HOME=$h "$KILN" sandbox resume "$id" &&
		[ "$(KILN_HOME=$h "$KILN" sandbox exec "$id" -- cat /tmp/x)" = x ]
	local rc=$?
	KILN_HOME=$h "$KILN" sandbox kill "$id" >/dev/null 2>&1
	return $rc
}
sandboxes() {
	local n=0 h
	while [ "$(date +%s)" -lt "$END" ]; do
		[ $((n % 5)) = 0 ] && { [ -n "${h:-}" ] && KILN_HOME=$h "$KILN" chunkfs stop >/dev/null 2>&1; h=$W/lazy$n; }
		op sandbox sandbox_round "$h" || true
		KILN_HOME=$h "$KILN" sandbox gc >/dev/null 2>&1
		n=$((n + 1))
		sleep 2
	done
}
killer() {
	local last=$((END - QUIET_MIN * 60 - 60))
	while [ "$(date +%s)" -lt "$last" ]; do
		sleep $((KILL_MIN * 60))
		[ "$(date +%s)" -lt "$last" ] || break
		date +%s >"$W/killed"
		kill -9 "$(cat "$W/srv.pid")" 2>/dev/null
		sleep 1
		serve
		echo "$(date +%s) restart" >>"$W/ops"
	done
}
sampler() {
	echo "time pid rss_kib fds threads data_kib" >"$W/samples"
	while [ "$(date +%s)" -lt "$END" ]; do
		local p
		p=$(cat "$W/srv.pid")
		[ -r "/proc/$p/status" ] && echo "$(date +%s) $p $(awk '/^VmRSS/ {print $2}' "/proc/$p/status") $(ls "/proc/$p/fd" | wc -l) $(awk '/^Threads/ {print $2}' "/proc/$p/status") $(du -sk "$DATA" 2>/dev/null | cut -f1)" >>"$W/samples"
		sleep 10
	done
}
START=$(date +%s)
for f in remote_builds local_builds pulls sandboxes killer sampler; do
	$f &
	pids="$pids $!"
done
wait $pids 2>/dev/null
pids=

# ---- the report
"$KILN" registry gc --data "$DATA" --config <(echo '{"gc_grace_s": 0}') >"$W/gc.out" 2>&1
"$KILN" registry gc --data "$DATA" --config <(echo '{"gc_grace_s": 0}') --dry-run >"$W/gc2.out" 2>&1
on_disk=$(find "$DATA/blobs" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
held=$("$KILN" registry usage --data "$DATA" --json 2>/dev/null | jq '[.[].bytes] | add // 0')
echo "soak: $(awk -v s="$START" -v e="$(date +%s)" 'BEGIN { printf "%.2f", (e - s) / 3600 }') h, kill -9 of the server every $KILL_MIN min ($(grep -c restart "$W/ops") kills, none in the last $QUIET_MIN min), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %8s %12s %8s\n' kind ok kill-caused errors
for k in remote local push pull sandbox; do
	printf '%-8s %8d %12d %8d\n' "$k" "$(grep -c " $k ok" "$W/ops")" "$(grep -c " $k kill" "$W/ops")" "$(grep -c " $k error" "$W/ops")"
done
# the slope of each server lifetime's samples after its first minute (least squares, per minute)
awk 'NR > 1 { if ($2 != pid) { pid = $2; t0 = $1 } if ($1 - t0 >= 60) { n[pid]++; x = ($1 - t0) / 60; sx[pid] += x; sxx[pid] += x * x; for (i = 3; i <= 5; i++) { sy[pid, i] += $i; sxy[pid, i] += x * $i; last[pid, i] = $i } } }
	END { printf "%-8s %8s %12s %10s %10s %10s %10s\n", "server", "samples", "rss_kib", "rss/min", "fds", "fds/min", "thr/min";
	      for (p in n) { if (n[p] < 3) continue; d = n[p] * sxx[p] - sx[p] * sx[p]; if (d == 0) continue;
	        printf "%-8s %8d %12d %10.1f %10d %10.2f %10.2f\n", p, n[p], last[p, 3], (n[p] * sxy[p, 3] - sx[p] * sy[p, 3]) / d, last[p, 4],
	          (n[p] * sxy[p, 4] - sx[p] * sy[p, 4]) / d, (n[p] * sxy[p, 5] - sx[p] * sy[p, 5]) / d } }' "$W/samples"
# the last (longest, kill-free) lifetime's second half: after any warm-up, a leak shows as a slope here
awk 'NR > 1 { pid[NR] = $2; t[NR] = $1; r[NR] = $3; f[NR] = $4; h[NR] = $5; last = $2 }
	END { for (i = 2; i <= NR; i++) if (pid[i] == last) { if (!a) a = i; b = i }
	      if (b - a < 10) exit; m = int((a + b) / 2); n = 0;
	      for (i = m; i <= b; i++) { x = (t[i] - t[m]) / 60; n++; sx += x; sxx += x * x; sr += r[i]; sxr += x * r[i]; sf += f[i]; sxf += x * f[i]; sh += h[i]; sxh += x * h[i] }
	      d = n * sxx - sx * sx; if (d == 0) exit;
	      printf "last lifetime (%.0f min), its second half (%d samples): rss %d -> %d KiB, %.1f KiB/min; fds %.2f/min; threads %.2f/min\n",
	        (t[b] - t[a]) / 60, n, r[m], r[b], (n * sxr - sx * sr) / d, (n * sxf - sx * sf) / d, (n * sxh - sx * sh) / d }' "$W/samples"
echo "registry after gc: $on_disk bytes of blob files, the teams' stored bytes $held; gc: $(tail -1 "$W/gc.out"); a second gc would: $(tail -1 "$W/gc2.out")"
if [ -s "$W/errors" ]; then
	echo "errors:"
	head -60 "$W/errors"
fi
