# registry-lib.sh — shared helpers for the registry e2e tests (t07NN-*.sh):
# start `kiln serve` on an ephemeral 127.0.0.1 port, make HTTP requests with
# curl and check status codes, headers and error bodies.

# reg_start DATADIR [ARGS...] : starts the server, sets REG_PID, REG_PORT, REG.
reg_start() {
	local data=$1 log i
	shift
	log="$T_TMP/serve.$$.$RANDOM.log"
	"$KILN" serve --addr 127.0.0.1:0 --data "$data" "$@" 2>"$log" &
	REG_PID=$!
	for i in $(seq 1 100); do
		REG_PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
		[ -n "$REG_PORT" ] && break
		kill -0 "$REG_PID" 2>/dev/null || break
		sleep 0.05
	done
	if [ -z "$REG_PORT" ]; then
		echo "# kiln serve did not start:"; sed 's/^/#   /' "$log"
		return 1
	fi
	REG="127.0.0.1:$REG_PORT"
	U="http://$REG"
	REG_LOG=$log # its stderr: the access log among it
}

# reg_start_teams CONFIG-JSON : a server with auth on $T_TMP/data (D), from
# the current directory's auth.json, and three tokens: A (team-a pull,push),
# PULLA (team-a pull), BT (team-b pull,push).  H TOKEN prints its header.
reg_tok() { "$KILN" token create --data "$D" "$@"; }
H() { echo "Authorization: Bearer $1"; }
reg_start_teams() {
	D="$T_TMP/data"
	echo "$1" >auth.json
	A=$(reg_tok --scope team-a:pull,push a)
	PULLA=$(reg_tok --scope team-a:pull pull-a)
	BT=$(reg_tok --scope team-b:pull,push b)
	reg_start "$D" --config auth.json
}

# reg_demo_image TOKEN : a one-file image demo:1 built in $T_TMP/home (KILN_HOME), and
# `kiln login` to $REG with TOKEN, for the tests that push it.
reg_demo_image() {
	export KILN_HOME=$T_TMP/home SOURCE_DATE_EPOCH=1700000000
	mkdir -p "$T_TMP/ctx" && printf 'one\n' >"$T_TMP/ctx/f.txt" &&
		printf 'FROM scratch\nCOPY f.txt /f.txt\n' >"$T_TMP/ctx/Dockerfile"
	"$KILN" build -t demo:1 "$T_TMP/ctx" >/dev/null 2>&1 || not_ok "test image builds"
	printf '%s\n' "$1" | "$KILN" login -u ci --password-stdin "$REG" >/dev/null 2>&1
}

# reg_stop [SIGNAL]
reg_stop() {
	[ -n "${REG_PID:-}" ] || return 0
	kill "-${1:-TERM}" "$REG_PID" 2>/dev/null
	wait "$REG_PID" 2>/dev/null
	REG_PID=
}

# req METHOD URLPATH [CURL ARGS...] : sets CODE; body in $T_TMP/body, headers in $T_TMP/hdr.
req() {
	local m=$1 p=$2
	shift 2
	CODE=$(curl -s -X "$m" -o "$T_TMP/body" -D "$T_TMP/hdr" -w '%{http_code}' --max-time 30 "$@" "$U$p")
	tr -d '\r' <"$T_TMP/hdr" >"$T_TMP/hdr.n" && mv "$T_TMP/hdr.n" "$T_TMP/hdr"
}

# head_req URLPATH : HEAD (curl -I), same outputs as req.
head_req() {
	CODE=$(curl -s -I -o "$T_TMP/hdr" -w '%{http_code}' --max-time 30 "$U$1")
	tr -d '\r' <"$T_TMP/hdr" >"$T_TMP/hdr.n" && mv "$T_TMP/hdr.n" "$T_TMP/hdr"
	: >"$T_TMP/body"
}

# hdr NAME : value of a response header (case-insensitive), empty if absent.
hdr() {
	awk -v n="$(echo "$1" | tr 'A-Z' 'a-z')" 'BEGIN{FS=": "} tolower($1)==n {sub(/^[^:]*: /,""); print; exit}' "$T_TMP/hdr"
}

expect_code() { expect_eq "$1 (status)" "$CODE" "$2"; }

# expect_error NAME STATUS CODE : status and the spec's error body {"errors":[{"code":CODE,...}]}.
expect_error() {
	local got
	got=$(jq -r '.errors[0].code' "$T_TMP/body" 2>/dev/null)
	if [ "$CODE" = "$2" ] && [ "$got" = "$3" ]; then ok "$1"; else
		not_ok "$1 (got $CODE $got, want $2 $3)"
		head -c 300 "$T_TMP/body" | sed 's/^/#   /'; echo
	fi
}

sha256_of() { echo "sha256:$(sha256sum "$1" | cut -d' ' -f1)"; }
sha512_of() { echo "sha512:$(sha512sum "$1" | cut -d' ' -f1)"; }

# push_blob REPO FILE : monolithic upload, checks 201.
push_blob() {
	req POST "/v2/$1/blobs/uploads/?digest=$(sha256_of "$2")" --data-binary @"$2" -H 'Content-Type: application/octet-stream'
	[ "$CODE" = 201 ] || { echo "# push_blob $1 $2: $CODE"; return 1; }
}
