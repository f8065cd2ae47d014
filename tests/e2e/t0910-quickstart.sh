#!/usr/bin/env bash
# t0910-quickstart.sh — README.md's quick start, as written: the commands of
# its fenced blocks between <!-- quickstart:begin --> and <!-- quickstart:end -->
# run in one bash -e script (the registry on a free 127.0.0.1 port instead of
# 5000, /tmp/kiln-quickstart under this test's directory), with the registry
# it starts killed in a trap; the last kiln run must print the page its
# template's web server serves.  The install block (make deps all && make
# install) is what made the kiln under test ($KILN, first on PATH here; t0900
# tests make install itself): only its presence is checked.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup

# block MARK: the lines inside ``` fences after <!-- quickstart:MARK --> up to the next marker.
block() {
	awk -v mark="<!-- quickstart:$1 -->" '
		$0 == mark { on = 1; next }
		on && /^<!-- quickstart:/ { exit }
		on && /^```/ { fence = !fence; next }
		on && fence { print }' README.md
}

install=$(block install)
case $install in
*"make deps all && make install"*) ok "the quick start installs with make deps all && make install" ;;
*) not_ok "the quick start has an install block with make deps all && make install" ;;
esac
script=$(block begin)
if [ -z "$script" ]; then
	not_ok "README.md has a quick start between <!-- quickstart:begin --> and <!-- quickstart:end -->"
	exit 0
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
QS=$T_TMP/qs
{
	echo 'set -e'
	echo 'trap '\''[ -z "${REGISTRY_PID:-}" ] || kill "$REGISTRY_PID" 2>/dev/null || true'\'' EXIT'
	printf '%s\n' "$script" | sed -e "s|127\.0\.0\.1:5000|127.0.0.1:$port|g" -e "s|/tmp/kiln-quickstart|$QS|g"
} >"$T_TMP/quickstart.sh"
sed 's/^/#   | /' "$T_TMP/quickstart.sh"

start=$(date +%s%N)
PATH="$(dirname "$KILN"):$PATH" bash "$T_TMP/quickstart.sh" >"$T_TMP/qs.out" 2>"$T_TMP/qs.err"
rc=$?
secs=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
echo "# the quick start took ${secs} s after the install (load $(cut -d' ' -f1 /proc/loadavg))"
if [ "$rc" -eq 0 ]; then ok "the quick start runs start to finish"; else
	not_ok "the quick start runs start to finish (exit $rc)"
	tail -20 "$T_TMP/qs.err" | sed 's/^/#   stderr: /'
fi
expect_grep "...and its kiln run prints the page the template's server serves" "^hello from a kiln sandbox$" \
	"$T_TMP/qs.out"
expect_grep "...pulled on the second host under its full reference" "^127\.0\.0\.1:$port/demo/web:v1 " "$T_TMP/qs.out"
expect_grep "...pulling it first" "template 127\.0\.0\.1:$port/demo/web:v1 is not on this host: pulling it" \
	"$T_TMP/qs.err"
if [ -n "$(ss -Htln "sport = :$port" 2>/dev/null)" ]; then not_ok "...and the registry it started is gone"
else ok "...and the registry it started is gone"; fi
for h in "$KILN_HOME" "$QS/host2"; do KILN_HOME=$h "$KILN" sandbox gc >/dev/null 2>&1; done
