# pg-lib.sh — a real PostgreSQL server for a test (initdb + pg_ctl as the
# postgres user, on 127.0.0.1 and a port of its own, in a directory of its own).
# pg_start: sets PGBIN, PGDIR, PGPORT, PSQL, PG_CONNINFO; skips the test (exit 0)
# where no server is installed or not root; pg_stop removes it.

pg_start() {
	PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
	if [ -z "$PGBIN" ] || ! id postgres >/dev/null 2>&1; then
		skip "PostgreSQL queue" "no PostgreSQL server installed (deps/service.txt)"
		exit 0
	fi
	if [ "$(id -u)" -ne 0 ] && [ "$(id -un)" != postgres ]; then
		skip "PostgreSQL queue" "initdb must run as the postgres user: needs root"
		exit 0
	fi
	PGDIR=$(mktemp -d /tmp/kiln-pg.XXXXXX)
	chmod 755 "$PGDIR"
	[ "$(id -u)" -eq 0 ] && chown postgres "$PGDIR"
	PGPORT=$((20000 + RANDOM % 20000))
	pg_as "$PGBIN/initdb -D $PGDIR/db -A trust -U kiln" >"$T_TMP/initdb.log" 2>&1
	pg_as "$PGBIN/pg_ctl -D $PGDIR/db -w -t 30 -l $PGDIR/log -o '-c listen_addresses=127.0.0.1 -p $PGPORT -k $PGDIR' start" \
		>"$T_TMP/pgctl.log" 2>&1
	if ! psql -h 127.0.0.1 -p "$PGPORT" -U kiln -d postgres -Atc 'select 1' >/dev/null 2>&1; then
		not_ok "PostgreSQL started"
		sed 's/^/#   /' "$T_TMP/initdb.log" "$T_TMP/pgctl.log" "$PGDIR/log" 2>/dev/null | tail -20
		exit 1
	fi
	ok "PostgreSQL started on 127.0.0.1:$PGPORT"
	PSQL="psql -h 127.0.0.1 -p $PGPORT -U kiln -d postgres -At"
	PG_CONNINFO="host=127.0.0.1 port=$PGPORT user=kiln dbname=postgres"
}
pg_as() { if [ "$(id -u)" -eq 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }
pg_stop() {
	[ -n "${PGDIR:-}" ] || return 0
	pg_as "$PGBIN/pg_ctl -D $PGDIR/db -m immediate stop" >/dev/null 2>&1
	rm -rf "$PGDIR"
}
