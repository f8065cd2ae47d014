#!/usr/bin/env bash
# bench/remote-build.sh — kiln build locally vs kiln build --remote against a
# kiln serve --build on loopback, in one run:
#   - a first build (empty caches: both sides also make their builder VM
#     snapshot; FIRST more of them each side, medians) and a cached rebuild
#     of the same context, each side timed;
#   - the bytes a rebuild uploads after a one-file change (blobs and the
#     request with its file list);
#   - 8 different builds queued at once (host_builds 2 on this host): all must
#     succeed; wall time and each build's wait in the queue.
# The context: a busybox base published on the server, 200 files of 4 KiB and
# one of 1 MiB, a COPY and a RUN (in the builder microVM).
# Cached builds: ROUNDS (9) rounds, local and remote interleaved in each round
# (remote: a fresh client every time), medians; remote twice a round: the
# same request again (the server answers it from the first build's record,
# nothing run: service/replay.c) and a new one (an unused build arg: a
# build process runs, every step from the cache).  KILN_BEFORE=/path/to/kiln adds
# an A/B: a second server and client from that binary, its cached remote build
# and its local cached build (a home of its own) timed in the same rounds, so
# each binary's remote overhead (remote - local) is measured too.
set -u
cd "$(dirname "$0")/.."
export KILN_KERNEL_DIR=${KILN_KERNEL_DIR:-$PWD/build/kernel}
vm/fetch-kernel.sh "$KILN_KERNEL_DIR" >/dev/null || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-remote.XXXXXX")
KILN=$PWD/bin/kiln
export SOURCE_DATE_EPOCH=1700000000
BEFORE=${KILN_BEFORE:-}
ROUNDS=${ROUNDS:-9}
echo '{"build": {"host_builds": 2, "team_builds": 8}}' >"$work/serve.json"
srvs=
trap 'for p in $srvs; do kill $p 2>/dev/null; wait $p 2>/dev/null; done; rm -rf "$work"' EXIT
serve() { # BINARY DIR VAR: starts a server, its host:port in $VAR
	: >"$work/$2.log"
	KILN_HOME=$work/$2-home $1 serve --addr 127.0.0.1:0 --data "$work/$2" --config "$work/serve.json" \
		>/dev/null 2>"$work/$2.log" &
	srvs="$srvs $!"
	for _ in $(seq 100); do grep -q listening "$work/$2.log" && break; sleep 0.1; done
	printf -v "$3" '%s' "$(grep -o '127.0.0.1:[0-9]*' "$work/$2.log" | head -1)"
}
serve "$KILN" data host
url=http://$host
echo "load at start: $(uptime)"
now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc; }

b=$work/base
mkdir -p "$b/root/bin" "$b/root/tmp"
cp /bin/busybox "$b/root/bin/busybox"
for a in sh cat wc ls echo; do ln -sf busybox "$b/root/bin/$a"; done
printf 'FROM scratch\nCOPY root/ /\n' >"$b/Dockerfile"
KILN_HOME=$work/pub $KILN build --remote "$url" -t bb:1 "$b" >/dev/null 2>&1 || { echo "base build failed"; exit 1; }

c=$work/ctx
mkdir -p "$c/app"
for i in $(seq 200); do head -c 4096 /dev/urandom >"$c/app/f$i"; done
head -c 1048576 /dev/urandom >"$c/app/big"
cat >"$c/Dockerfile" <<DF
FROM $host/default/bb:1
COPY app/ /app/
RUN ls /app | wc -l >/count && cat /app/f1 /app/f2 | wc -c >>/count
DF
run() { # LABEL HOME ARGS... → seconds
	local t0 t1
	t0=$(now)
	KILN_HOME=$2 $KILN build "${@:3}" "$c" >"$work/out" 2>"$work/err" || { echo "$1 failed:"; tail -3 "$work/err"; exit 1; }
	t1=$(now)
	secs "$t0" "$t1"
}
median() { sort -n | awk '{v[NR] = $1} END {printf "%.3f s (min %.3f, max %.3f, n %d)", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR], NR}'; }
lf=$(run "local first" "$work/local" -t app:1)
rf=$(run "remote first" "$work/client" --remote "$url" -t app:1)
up_first=$(grep -o 'context: .*' "$work/err")
# FIRST (3) more first builds each side, alternated: a fresh home locally, a
# team of its own on the server (its own home and context store: every file
# uploaded, its builder VM snapshot made), a fresh client; the upload's own
# time is taken off the remote build for the goal (remote <= 1.1x local plus
# the upload)
: >"$work/lf"; : >"$work/rf"; : >"$work/rfu"; : >"$work/up"
for i in $(seq "${FIRST:-3}"); do
	run "local first" "$work/local-f$i" -t app:1 >>"$work/lf"
	t=$(KILN_TEAM=first$i run "remote first" "$work/client-f$i" --remote "$url" -t app:1)
	u=$(sed -n 's/^context: .* bytes in \([0-9.]*\) s).*/\1/p' "$work/err")
	echo "$t" >>"$work/rf"
	echo "$u" >>"$work/up"
	echo "$t - $u" | bc >>"$work/rfu"
	rm -rf "$work/local-f$i" "$work/client-f$i"
done
if [ -n "$BEFORE" ]; then
	serve "$BEFORE" data-before bhost
	KILN_HOME=$work/pub-before $BEFORE build --remote "http://$bhost" -t bb:1 "$b" >/dev/null 2>&1 || { echo "base build (before) failed"; exit 1; }
	sed "s|^FROM .*|FROM $bhost/default/bb:1|" "$c/Dockerfile" >"$work/Dockerfile.before"
fi
run_before() { # LABEL HOME ARGS... with the before binary and its server's Dockerfile
	local t0 t1
	t0=$(now)
	KILN_HOME=$2 $BEFORE build -f "$work/Dockerfile.before" "${@:3}" "$c" >"$work/out" 2>"$work/err" || { echo "$1 failed:"; tail -3 "$work/err"; exit 1; }
	t1=$(now)
	secs "$t0" "$t1"
}
[ -n "$BEFORE" ] && run_before "remote first (before)" "$work/client-before" --remote "http://$bhost" -t app:1 >/dev/null
[ -n "$BEFORE" ] && run_before "local first (before)" "$work/local-before" -t app:1 >/dev/null
: >"$work/lc"; : >"$work/rc"; : >"$work/rn"; : >"$work/rcb"; : >"$work/lcb"
replayed() { grep -q '^same inputs as build' "$work/err"; }
for i in $(seq "$ROUNDS"); do
	run "local cached" "$work/local" -t app:1 >>"$work/lc"
	# the same request again: answered from the first build's record
	rm -rf "$work/client2"
	run "remote cached" "$work/client2" --remote "$url" -t app:1 >>"$work/rc"
	grep -q "cache hit" "$work/err" || { echo "remote cached: not from the cache"; tail -5 "$work/err"; exit 1; }
	replayed || { echo "remote cached: a repeated request ran"; tail -5 "$work/err"; exit 1; }
	# a new request each round (an unused build arg): a build process runs,
	# every step from the cache
	rm -rf "$work/client3"
	run "remote cached, new request" "$work/client3" --remote "$url" --build-arg "BENCH_ROUND=$i" -t app:1 >>"$work/rn"
	if replayed || grep -q "cache miss" "$work/err"; then echo "remote new request: not a build from the cache"; tail -5 "$work/err"; exit 1; fi
	if [ -n "$BEFORE" ]; then
		rm -rf "$work/client-b2"
		run_before "remote cached (before)" "$work/client-b2" --remote "http://$bhost" -t app:1 >>"$work/rcb"
		run_before "local cached (before)" "$work/local-before" -t app:1 >>"$work/lcb"
	fi
done
echo "load after the cached rounds: $(uptime)"
head -c 4096 /dev/urandom >"$c/app/f7"
r1=$(run "remote one-file change" "$work/client2" --remote "$url" -t app:2)
up_one=$(grep -o 'context: .*' "$work/err")
echo "local first $lf s; cached, median of $ROUNDS: $(median <"$work/lc")"
echo "remote first $rf s ($up_first)"
echo "first builds, ${FIRST:-3} more each side: local $(median <"$work/lf"); remote $(median <"$work/rf");"
echo "  its upload $(median <"$work/up"); remote minus its upload $(median <"$work/rfu")"
echo "remote cached (fresh client), the same request again (answered from the first build's record), median: $(median <"$work/rc")"
echo "remote cached (fresh client), a new request each time (runs, every step from the cache), median: $(median <"$work/rn")"
if [ -n "$BEFORE" ]; then
	echo "remote cached with $BEFORE (server and client), median: $(median <"$work/rcb")"
	echo "local cached with $BEFORE, median: $(median <"$work/lcb")"
	# each binary's own overhead: the medians of remote and of local, subtracted
	med() { sort -n "$1" | awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
	printf 'remote - local, medians: %.1f ms after, %.1f ms with %s\n' \
		"$(echo "($(med "$work/rc") - $(med "$work/lc")) * 1000" | bc)" \
		"$(echo "($(med "$work/rcb") - $(med "$work/lcb")) * 1000" | bc)" "$BEFORE"
fi
echo "remote after a one-file change (4096 bytes): $r1 s; $up_one"

# 8 builds at once, each its own context (a different file, so none is a cache hit of another)
t0=$(now)
pids=
for i in $(seq 8); do
	mkdir -p "$work/q$i"
	cp -r "$c/app" "$c/Dockerfile" "$work/q$i/"
	echo "build $i" >"$work/q$i/app/own"
	KILN_HOME=$work/q$i/home $KILN build --remote "$url" -t q:$i "$work/q$i" >"$work/q$i.out" 2>"$work/q$i.err" &
	pids="$pids $!"
done
ok=0
for p in $pids; do wait "$p" && ok=$((ok + 1)); done
t1=$(now)
echo "8 builds queued at once: $ok succeeded in $(secs "$t0" "$t1") s wall"
curl -s "$url/build/v1/builds?name=q:1" >/dev/null
curl -s "$url/build/v1/builds" | jq -r '.builds[] | select(.name|startswith("q:")) |
	"  \(.name): waited \(.started - .created) s, ran \(.ended - .started) s, \(.state)"' | sort -V
uptime
