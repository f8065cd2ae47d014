#!/usr/bin/env bash
# t0582-build-remote-run.sh — a template built by kiln serve --build with RUN
# in its builder microVM (real QEMU under TCG): the base itself built and
# published remotely, FROM it on the server's registry, RUN, start and ready
# commands; the template and its image published under the team; a fresh
# client (empty KILN_HOME, as a CI runner) gets the RUN from the team's cache
# on the server; --secret reaches a RUN there and is stored nowhere on the
# server; `kiln pull` then `kiln run` on another KILN_HOME starts it.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup

export SOURCE_DATE_EPOCH=1700000000
DATA=$T_TMP/data
echo '{"auth": true, "build": {"host_builds": 1}}' >"$T_TMP/serve.json"
A=$($KILN token create --data "$DATA" --scope team-a:build,pull,push a)
: >"$T_TMP/serve.log"
$KILN serve --addr 127.0.0.1:0 --data "$DATA" --config "$T_TMP/serve.json" 2>"$T_TMP/serve.log" &
SRV=$!
trap 'kill $SRV 2>/dev/null; wait $SRV 2>/dev/null; rm -rf "$T_TMP"' EXIT
for _ in $(seq 100); do grep -q listening "$T_TMP/serve.log" && break; sleep 0.1; done
HOST=$(grep -o '127.0.0.1:[0-9]*' "$T_TMP/serve.log" | head -1)
URL=http://$HOST
export KILN_TOKEN=$A

B=$T_TMP/base
mkdir -p "$B/root/bin" "$B/root/www" "$B/root/tmp"
cp /bin/busybox "$B/root/bin/busybox"
for a in sh cat echo id hostname; do ln -sf busybox "$B/root/bin/$a"; done
printf 'FROM scratch\nCOPY root/ /\n' >"$B/Dockerfile"
expect_exit 0 "the base built and published remotely" $KILN build --remote "$URL" -t bb:1 "$B"

C=$T_TMP/ctx
mkdir -p "$C"
echo "page built remotely" >"$C/index.html"
cat >"$C/Dockerfile" <<DF
FROM $HOST/team-a/bb:1
COPY index.html /www/index.html
RUN echo "ran in the builder VM" >/www/run.txt && echo run-output
DF
expect_exit 0 "a template with RUN built remotely" $KILN build --remote "$URL" -t web:1 \
	--start-cmd 'busybox httpd -p 127.0.0.1:8080 -h /www' --ready-cmd 'busybox wget -q -O- http://127.0.0.1:8080/index.html' "$C"
expect_grep "RUN output streamed back" '^run-output' "$T_TMP/err"
expect_grep "the template published" '^published team-a/web:1 sha256:' "$T_TMP/err"
expect_grep "its image beside it" '^published team-a/web:1-image sha256:' "$T_TMP/err"
expect_eq "two digests on stdout (image, template)" "$(grep -c '^sha256:' "$T_TMP/out")" 2

# --ready-timeout reaches the server's build: a ready command that never
# succeeds fails the build after it, not after the default 60 s
t0=$(date +%s)
expect_exit 1 "a remote template build whose ready command never succeeds, --ready-timeout 2" $KILN build --remote "$URL" \
	-t never:1 --ready-cmd 'echo not yet; exit 3' --ready-timeout 2 "$C"
t1=$(date +%s)
expect_grep "...quotes the ready command's output" "ready command .* did not succeed.*exit 3.*not yet" "$T_TMP/err"
[ $((t1 - t0)) -lt 50 ] && ok "...and gives up after its timeout, not the default 60 s ($((t1 - t0)) s)" ||
	not_ok "...took $((t1 - t0)) s"

KILN_HOME=$T_TMP/ci expect_exit 0 "a fresh client rebuilds" $KILN build --remote "$URL" -t web:2 "$C"
expect_eq "its RUN comes from the team's cache on the server" "$(grep -c '^  cache hit' "$T_TMP/err")" 2

# --secret reaches RUN --mount=type=secret on the server, and is stored nowhere there
PLAIN=kiln-t0582-$RANDOM$RANDOM$RANDOM-plain
printf '%s' "$PLAIN" >"$T_TMP/secret.src"
cat >"$C/Dockerfile.secret" <<DF
FROM $HOST/team-a/bb:1
RUN --mount=type=secret,id=tok busybox sha256sum /run/secrets/tok | busybox cut -c1-64 >/tok.sum && busybox sleep 3
DF
descendants() { # PID: every process under it
	local c
	for c in $(ps -o pid= --ppid "$1"); do echo "$c"; descendants "$c"; done
}
$KILN build --remote "$URL" -f "$C/Dockerfile.secret" -t sec:1 --secret "id=tok,src=$T_TMP/secret.src" \
	--rootfs-out "$T_TMP/sec.ext4" "$C" >"$T_TMP/out" 2>"$T_TMP/err" &
BPID=$!
# while its RUN runs: the server's child kiln build holds the secret's memfd, the QEMU it started must not
: >"$T_TMP/qfds"
for _ in $(seq 600); do
	kill -0 $BPID 2>/dev/null || break
	held= q=
	for p in $(descendants $SRV); do
		ls -l /proc/$p/fd 2>/dev/null | grep -q 'memfd:kiln-build-secret' && held=1
		case "$(cat /proc/$p/comm 2>/dev/null)" in qemu*) q=$p ;; esac
	done
	if [ -n "$held" ] && [ -n "$q" ] && ls -l /proc/$q/fd >"$T_TMP/qfds" 2>/dev/null; then break; fi
	sleep 0.1
done
wait $BPID
expect_eq "a remote build with --secret and --rootfs-out" "$?" 0
if [ ! -s "$T_TMP/qfds" ]; then not_ok "the build's QEMU seen while the secret was held"
elif grep -q 'memfd:kiln-build-secret' "$T_TMP/qfds"; then
	not_ok "the build's QEMU does not inherit the secret's memfd"; grep memfd:kiln-build-secret "$T_TMP/qfds" | sed 's/^/#   /'
else ok "the build's QEMU does not inherit the secret's memfd"; fi
expect_eq "RUN read the secret (its sha256, in the downloaded rootfs)" \
	"$(debugfs -R 'cat /tok.sum' "$T_TMP/sec.ext4" 2>/dev/null)" "$(sha256sum "$T_TMP/secret.src" | cut -c1-64)"
if grep -rlaF "$PLAIN" "$DATA" "$T_TMP/serve.log" "$T_TMP/err" "$T_TMP/out" >"$T_TMP/found"; then
	not_ok "the secret's plaintext is nowhere in the server's data, database, cache or logs"
	sed 's/^/#   found in: /' "$T_TMP/found"
else ok "the secret's plaintext is nowhere in the server's data, database, cache or logs"; fi

export KILN_HOME=$T_TMP/runtime
$KILN login -u x --password-stdin "$HOST" <<<"$A" >/dev/null 2>&1
expect_exit 0 "kiln pull of the published template" $KILN pull "$HOST/team-a/web:1"
expect_exit 0 "kiln run starts it" $KILN run "$HOST/team-a/web:1" -- sh -c 'cat /www/run.txt; busybox wget -q -O- http://127.0.0.1:8080/index.html'
expect_eq "with what the remote build made" "$(cat "$T_TMP/out")" "ran in the builder VM
page built remotely"
