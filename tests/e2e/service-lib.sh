# service-lib.sh — a `kiln serve --build` for a test: serve_build DATA CONFIG
# starts it on 127.0.0.1 (a port of its own), its stderr in $T_TMP/serve.log,
# and sets SRV (its pid), HOST (127.0.0.1:PORT) and URL; it fails when the
# server does not say it listens.
serve_build() {
	: >"$T_TMP/serve.log" # there before the loop below reads it
	$KILN serve --addr 127.0.0.1:0 --data "$1" --config "$2" 2>"$T_TMP/serve.log" &
	SRV=$!
	for _ in $(seq 100); do grep -q listening "$T_TMP/serve.log" && break; sleep 0.1; done
	HOST=$(grep -o '127.0.0.1:[0-9]*' "$T_TMP/serve.log" | head -1)
	URL=http://$HOST
	[ -n "$HOST" ]
}
