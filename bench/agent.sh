#!/usr/bin/env bash
# bench/agent.sh [RUNS] — the guest agent's protocol overhead, measured on the
# host (bin/kiln-agent --listen, driven by `kiln agent`), each against the
# plain local operation as the peer in the same run (hyperfine -N, medians):
#   exec of `true`          vs  sh -c true
#   256 MiB of stdout       vs  head | cat
#   upload of a 160 MiB tree (1 big file + 2,000 small ones)  vs  tar -c | tar -x
#   download of that tree   vs  the same tar | tar
set -u
cd "$(dirname "$0")/.."
runs=${1:-7}
command -v hyperfine >/dev/null || { echo "bench/agent.sh: needs hyperfine" >&2; exit 1; }
[ -x bin/kiln-agent ] && [ -x bin/kiln ] || { echo "bench/agent.sh: run make first" >&2; exit 1; }
w=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-agent.XXXXXX")
trap 'kill $apid 2>/dev/null; rm -rf "$w"' EXIT
mkdir -p "$w/src/small"
head -c $((150 << 20)) /dev/urandom >"$w/src/big.bin"
for i in $(seq 1 2000); do head -c $((i * 5)) /dev/urandom >"$w/src/small/f$i"; done
bin/kiln-agent --listen "$w/agent.sock" &
apid=$!
S=$w/agent.sock
K="$PWD/bin/kiln agent"
$K ping --socket "$S" >/dev/null || exit 1
echo "# $(date -u '+%Y-%m-%d %H:%M') UTC, load avg $(cut -d' ' -f1 /proc/loadavg), $runs runs"
H="hyperfine --warmup 1 --runs $runs --style none"
$H -N --export-json "$w/1.json" \
	-n "kiln agent exec -- true" "$K exec --socket $S -- true" \
	-n "peer: sh -c true" "sh -c true"
$H --export-json "$w/2.json" \
	-n "kiln agent exec: 256 MiB stdout" "$K exec --socket $S -- head -c 268435456 /dev/zero >/dev/null" \
	-n "peer: head | cat" "head -c 268435456 /dev/zero | cat >/dev/null"
$H --export-json "$w/3.json" --prepare "rm -rf $w/up $w/peer; mkdir -p $w/peer" \
	-n "kiln agent upload (160 MiB, 2001 files)" "$K upload --socket $S $w/src $w/up" \
	-n "peer: tar -c | tar -x" "tar -cf - -C $w/src . | tar -xf - -C $w/peer"
$K upload --socket "$S" "$w/src" "$w/up"
$H --export-json "$w/4.json" --prepare "rm -rf $w/down" \
	-n "kiln agent download (160 MiB, 2001 files)" "$K download --socket $S $w/up $w/down"
python3 - "$w"/[1-4].json <<'PY'
import json, sys
print("| command | median | min | max |\n|---|---|---|---|")
for f in sys.argv[1:]:
    for r in json.load(open(f))["results"]:
        ms = lambda v: f"{v * 1000:.1f} ms"
        print(f"| {r['command']} | {ms(r['median'])} | {ms(r['min'])} | {ms(r['max'])} |")
PY
