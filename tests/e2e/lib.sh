# lib.sh — helpers for the numbered end-to-end tests (tests/e2e/tNNNN-*.sh).
# Each check prints "ok - NAME" or "not ok - NAME" (counted by tests/run.sh).
# Tests run from the repository root with KILN pointing at the built binary.
set -u
KILN=${KILN:-$PWD/bin/kiln}
# The guest agent that goes with $KILN (e.g. KILN=/usr/bin/kiln): $KILN_AGENT,
# else what its installation or checkout holds, where vm/locate.c looks.
kiln_top=$(dirname "$(dirname "$(readlink -f "$(command -v "$KILN" || echo "$KILN")")")")
if [ -n "${KILN_AGENT:-}" ]; then
	KILN_AGENT_BIN=$KILN_AGENT
elif [ -x "$kiln_top/lib/kiln/kiln-agent" ]; then
	KILN_AGENT_BIN=$kiln_top/lib/kiln/kiln-agent
else
	KILN_AGENT_BIN=$kiln_top/bin/kiln-agent
fi
T_TMP=$(mktemp -d "${TMPDIR:-/tmp}/kiln-e2e.XXXXXX")
trap 'rm -rf "$T_TMP"' EXIT
export KILN_HOME="$T_TMP/home"

ok() { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; }
# skip NAME WHY: a check that cannot run here (no root, no KVM, ...): counted
# as skipped by tests/run.sh, never as passed.
skip() { echo "ok - $1 # skip $2"; }

# A test of a stale binary tests old code: refuse bin/kiln (or bin/kiln-agent)
# older than a source it is built from.  An installed KILN (say /usr/bin/kiln)
# is taken as it is.
stale_binary() { # BINARY SOURCES...
	local bin=$1 newer
	shift
	[ -e "$bin" ] || return 1
	newer=$(find "$@" -maxdepth 1 -name '*.[ch]' -newer "$bin" -print -quit 2>/dev/null)
	[ -n "$newer" ] && echo "$newer"
}
if [ -e "$PWD/bin/kiln" ] && [ "$KILN" -ef "$PWD/bin/kiln" ]; then
	# what the Makefile builds each from
	for b in kiln kiln-agent; do
		# (bin/kiln: the Makefile's STAGES, read from it so a new stage is watched too, and cli/)
		if [ $b = kiln ]; then srcs="$(sed -n 's/^STAGES *:= *//p' Makefile) cli"
		else srcs="guest/agent $(echo guest/proto*.c guest/*.h)"; fi
		# shellcheck disable=SC2086
		if f=$(stale_binary "$PWD/bin/$b" $srcs); then
			not_ok "bin/$b is older than its source $f: run make all (or set KILN=/path/to/kiln)"
			exit 1
		fi
	done
fi

# need_tools TOOL...: each on PATH, or the test fails saying which (make deps installs them)
need_tools() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null || { not_ok "$t is installed (make deps)"; exit 1; }
	done
}

# expect_exit CODE NAME CMD... : run CMD, check its exit status; output kept
# in $T_TMP/out and $T_TMP/err for later checks.
expect_exit() {
	local want=$1 name=$2 rc
	shift 2
	"$@" >"$T_TMP/out" 2>"$T_TMP/err"
	rc=$?
	if [ "$rc" -eq "$want" ]; then ok "$name"; else
		not_ok "$name (exit $rc, want $want)"
		sed 's/^/#   stderr: /' "$T_TMP/err" | head -20
	fi
}

# expect_grep NAME PATTERN FILE : FILE contains a line matching PATTERN (grep -E).
expect_grep() {
	if grep -Eq -- "$2" "$3"; then ok "$1"; else
		not_ok "$1 (no line matching /$2/ in $(basename "$3"))"
		sed 's/^/#   /' "$3" | head -20
	fi
}

# expect_eq NAME GOT WANT
expect_eq() {
	if [ "$2" = "$3" ]; then ok "$1"; else
		not_ok "$1"
		echo "#   got:  $2"
		echo "#   want: $3"
	fi
}

# misnamed_blobs FILE... : how many FILEs do not hash (sha256) to their own
# name, as a content-addressed store names them (one sha256sum for all; a
# file that cannot be read counts too).
misnamed_blobs() {
	local good
	[ $# -gt 0 ] || { echo 0; return; }
	good=$(sha256sum -- "$@" 2>/dev/null | awk '{ n = split($2, p, "/"); if ($1 == p[n]) k++ } END { print k + 0 }')
	echo $(($# - good))
}
