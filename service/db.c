/* db.c — the queue's database: the registry's meta.db (sqlite, its own
 * svc_ tables beside the registry's) on one host, or PostgreSQL (libpq) when
 * several `kiln serve` hosts share the work.  One small interface over both:
 * statements with $1..$N text parameters, rows as strings, transactions
 * (sqlite: BEGIN IMMEDIATE; PostgreSQL: claims use FOR UPDATE SKIP LOCKED). */
#include <stdarg.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include "service/internal.h"

struct svc_db {
	pthread_mutex_t lock;  /* recursive: held across a transaction */
	sqlite3 *lite;
	PGconn *pg;
	char *conninfo;
	int relaxed;           /* sqlite: this transaction runs with synchronous=NORMAL */
	struct { char *sql; sqlite3_stmt *st; } stmts[96]; /* sqlite: each statement prepared once */
	size_t nstmts;
};

static const char *const schema[] = {
	"CREATE TABLE IF NOT EXISTS svc_builds(id TEXT PRIMARY KEY, team TEXT NOT NULL, name TEXT,"
	" state TEXT NOT NULL, request TEXT NOT NULL, created BIGINT NOT NULL, started BIGINT NOT NULL DEFAULT 0,"
	" ended BIGINT NOT NULL DEFAULT 0, heartbeat BIGINT NOT NULL DEFAULT 0, host TEXT,"
	" step INTEGER NOT NULL DEFAULT 0, total INTEGER NOT NULL DEFAULT 0, instruction TEXT, reason TEXT,"
	" location TEXT, image TEXT, image_digest TEXT, template_ref TEXT, template_digest TEXT,"
	" cancel INTEGER NOT NULL DEFAULT 0, time_limit BIGINT NOT NULL, nlog BIGINT NOT NULL DEFAULT 0,"
	" qms BIGINT NOT NULL DEFAULT 0)", /* queued at (ms): the order of the queue and of lists */
	"CREATE INDEX IF NOT EXISTS svc_builds_state ON svc_builds(state, qms)",
	"CREATE INDEX IF NOT EXISTS svc_builds_team ON svc_builds(team, qms)",
	"CREATE TABLE IF NOT EXISTS svc_logs(build TEXT NOT NULL, n BIGINT NOT NULL, line TEXT NOT NULL,"
	" PRIMARY KEY(build, n))",
	/* the schema's version (svc_meta k = 'schema'); none: 1, the tables above */
	"CREATE TABLE IF NOT EXISTS svc_meta(k TEXT PRIMARY KEY, v TEXT NOT NULL)",
	NULL,
};

/* What takes version N-1 to N (index N), in one transaction with the new
 * number.  A database newer than this kiln is refused, never written. */
static const char *const *const migrations[] = {
	NULL,
	NULL,
	/* 2: a build whose secrets only one host holds (in memory) is pinned to it */
	(const char *const[]){ "ALTER TABLE svc_builds ADD COLUMN pin TEXT", NULL },
	/* 3: the client's key for a request, so a retried submit queues nothing twice */
	(const char *const[]){ "ALTER TABLE svc_builds ADD COLUMN client_key TEXT",
			       "CREATE UNIQUE INDEX svc_builds_client_key ON svc_builds(team, client_key)", NULL },
	/* 4: the replay key of a build that ran with every step from the cache (replay.c) */
	(const char *const[]){ "ALTER TABLE svc_builds ADD COLUMN replay TEXT",
			       "CREATE INDEX svc_builds_replay ON svc_builds(team, replay)", NULL },
	/* 5: E2B's templates, builds, tags and uploaded files (e2b_db.c), here so
	 * that hosts sharing a queue share them (before: DATA/e2b/e2b.db, moved in) */
	(const char *const[]){
		"CREATE TABLE e2b_templates(id TEXT PRIMARY KEY, team TEXT NOT NULL, name TEXT NOT NULL,"
		" cpus INTEGER NOT NULL, memory INTEGER NOT NULL, created BIGINT NOT NULL, updated BIGINT NOT NULL,"
		" UNIQUE(team, name))",
		"CREATE TABLE e2b_builds(id TEXT PRIMARY KEY, template TEXT NOT NULL, team TEXT NOT NULL,"
		" tag TEXT NOT NULL, svc_id TEXT, error TEXT, lines TEXT, cpus INTEGER NOT NULL, memory INTEGER NOT NULL,"
		" created BIGINT NOT NULL, updated BIGINT NOT NULL, seq BIGINT NOT NULL DEFAULT 0)",
		"CREATE INDEX e2b_builds_by_template ON e2b_builds(team, template, created)",
		"CREATE TABLE e2b_tags(template TEXT NOT NULL, tag TEXT NOT NULL, build TEXT NOT NULL,"
		" created BIGINT NOT NULL, PRIMARY KEY(template, tag))",
		"CREATE TABLE e2b_files(team TEXT NOT NULL, hash TEXT NOT NULL, digest TEXT NOT NULL,"
		" size BIGINT NOT NULL, created BIGINT NOT NULL, PRIMARY KEY(team, hash))",
		NULL },
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])) - 1)

static int migrate(svc_db *db, kiln_error **err)
{
	struct svc_rows r;
	int have;

	if (svc_db_q(db, &r, "SELECT v FROM svc_meta WHERE k = 'schema'", NULL, 0, err) < 0)
		return -1;
	have = r.n ? (int)svc_row_int(&r, 0, 0) : 1;
	svc_rows_free(&r);
	if (have > SCHEMA_VERSION)
		return kiln_err(err, KILN_E_INVALID,
				"its svc_ tables are at schema version %d, newer than this kiln's %d: run a newer kiln "
				"(nothing was changed)", have, SCHEMA_VERSION);
	for (int v = have + 1; v <= SCHEMA_VERSION; v++) {
		char num[24];
		const char *p[] = { num };
		svc_i64(num, v);
		if (svc_db_begin(db, err) < 0)
			return -1;
		for (size_t i = 0; migrations[v][i]; i++)
			if (svc_db_q(db, NULL, migrations[v][i], NULL, 0, err) < 0)
				goto fail;
		if (svc_db_q(db, NULL, "INSERT INTO svc_meta(k, v) VALUES('schema', $1) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
			     p, 1, err) < 0)
			goto fail;
		if (svc_db_commit(db, err) < 0)
			return kiln_error_wrap(err, "schema version %d", v);
		continue;
fail:
		svc_db_rollback(db);
		return kiln_error_wrap(err, "schema version %d", v);
	}
	return 0;
}

int svc_db_schema_version(void)
{
	return SCHEMA_VERSION;
}

void svc_rows_free(struct svc_rows *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->n * r->cols; i++)
		free(r->v[i]);
	free(r->v);
	memset(r, 0, sizeof(*r));
}

const char *svc_row(const struct svc_rows *r, size_t row, size_t col)
{
	return row < r->n && col < r->cols ? r->v[row * r->cols + col] : NULL;
}

int64_t svc_row_int(const struct svc_rows *r, size_t row, size_t col)
{
	const char *s = svc_row(r, row, col);

	return s ? strtoll(s, NULL, 10) : 0;
}

/* The statement for sql, prepared the first time (a cached build runs some
 * thirty, each parsed again before); *kept when it stays for the next. */
static sqlite3_stmt *lite_stmt(svc_db *db, const char *sql, bool *kept)
{
	sqlite3_stmt *st = NULL;
	size_t cap = sizeof(db->stmts) / sizeof(*db->stmts);

	for (size_t i = 0; i < db->nstmts; i++)
		if (strcmp(db->stmts[i].sql, sql) == 0) {
			*kept = true;
			return db->stmts[i].st;
		}
	*kept = db->nstmts < cap;
	if (sqlite3_prepare_v3(db->lite, sql, -1, *kept ? SQLITE_PREPARE_PERSISTENT : 0, &st, NULL) != SQLITE_OK)
		return NULL;
	if (*kept && st) {
		db->stmts[db->nstmts].sql = kiln_xstrdup(sql);
		db->stmts[db->nstmts++].st = st;
	}
	return st;
}

/* A failed statement; a full disk (sqlite's SQLITE_FULL, PostgreSQL's
 * disk_full 53100) keeps ENOSPC, so the frontends answer 507, not 500. */
static int lite_fail(svc_db *db, kiln_error **err)
{
	kiln_err(err, KILN_E_IO, "queue db: %s", sqlite3_errmsg(db->lite));
	if (err && *err && (sqlite3_errcode(db->lite) & 0xff) == SQLITE_FULL)
		(*err)->errnum = ENOSPC;
	return -1;
}

static int lite_q(svc_db *db, struct svc_rows *out, const char *sql, const char *const *p, size_t n, kiln_error **err)
{
	sqlite3_stmt *st = NULL;
	int rc, ret = -1;
	size_t cap = 0;
	bool kept = false;

	if ((st = lite_stmt(db, sql, &kept)) == NULL)
		return lite_fail(db, err);
	for (size_t i = 0; i < n; i++) {
		char name[32];
		snprintf(name, sizeof(name), "$%zu", i + 1);
		int idx = sqlite3_bind_parameter_index(st, name);
		if (idx > 0)
			sqlite3_bind_text(st, idx, p[i], -1, SQLITE_STATIC);
	}
	if (out)
		memset(out, 0, sizeof(*out));
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (out == NULL)
			continue;
		if (out->cols == 0)
			out->cols = (size_t)sqlite3_column_count(st);
		if ((out->n + 1) * out->cols > cap) {
			cap = cap ? 2 * cap : 16 * out->cols;
			out->v = kiln_xrealloc(out->v, cap * sizeof(char *));
		}
		for (size_t c = 0; c < out->cols; c++) {
			const unsigned char *t = sqlite3_column_text(st, (int)c);
			out->v[out->n * out->cols + c] = t ? kiln_xstrdup((const char *)t) : NULL;
		}
		out->n++;
	}
	if (rc != SQLITE_DONE) {
		lite_fail(db, err);
		svc_rows_free(out);
		goto out;
	}
	ret = sqlite3_changes(db->lite);
out:
	if (kept) {
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
	} else {
		sqlite3_finalize(st);
	}
	return ret;
}

static int pg_q(svc_db *db, struct svc_rows *out, const char *sql, const char *const *p, size_t n, kiln_error **err)
{
	PGresult *res;
	ExecStatusType es;
	int ret = -1;

	if (PQstatus(db->pg) != CONNECTION_OK)
		PQreset(db->pg);
	res = PQexecParams(db->pg, sql, (int)n, NULL, p, NULL, NULL, 0);
	es = PQresultStatus(res);
	if (out)
		memset(out, 0, sizeof(*out));
	if (es != PGRES_COMMAND_OK && es != PGRES_TUPLES_OK) {
		/* the primary message alone: one line (the full one adds "ERROR:"
		 * and HINT lines) */
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
		kiln_err(err, KILN_E_IO, "queue db (PostgreSQL): %s", primary ? primary : PQresultErrorMessage(res));
		if (err && *err && state && strcmp(state, "53100") == 0)
			(*err)->errnum = ENOSPC;
		goto out;
	}
	if (out && es == PGRES_TUPLES_OK) {
		out->n = (size_t)PQntuples(res);
		out->cols = (size_t)PQnfields(res);
		out->v = kiln_xcalloc(out->n * out->cols + 1, sizeof(char *));
		for (size_t r = 0; r < out->n; r++)
			for (size_t c = 0; c < out->cols; c++)
				if (!PQgetisnull(res, (int)r, (int)c))
					out->v[r * out->cols + c] = kiln_xstrdup(PQgetvalue(res, (int)r, (int)c));
	}
	ret = es == PGRES_TUPLES_OK ? PQntuples(res) : atoi(PQcmdTuples(res));
out:
	PQclear(res);
	return ret;
}

int svc_db_q(svc_db *db, struct svc_rows *out, const char *sql, const char *const *p, size_t n, kiln_error **err)
{
	int ret;

	pthread_mutex_lock(&db->lock);
	ret = db->pg ? pg_q(db, out, sql, p, n, err) : lite_q(db, out, sql, p, n, err);
	pthread_mutex_unlock(&db->lock);
	return ret;
}

int svc_db_is_pg(const svc_db *db)
{
	return db->pg != NULL;
}

static void relax_end(svc_db *db)
{
	kiln_error *err = NULL;

	if (!db->relaxed)
		return;
	db->relaxed = 0;
	if (svc_db_q(db, NULL, "PRAGMA synchronous=FULL", NULL, 0, &err) < 0) {
		kiln_warn("queue db: %s", kiln_error_message(err));
		kiln_error_free(err);
	}
}

int svc_db_begin(svc_db *db, kiln_error **err)
{
	pthread_mutex_lock(&db->lock);
	if (svc_db_q(db, NULL, db->pg ? "BEGIN" : "BEGIN IMMEDIATE", NULL, 0, err) < 0) {
		pthread_mutex_unlock(&db->lock);
		return -1;
	}
	return 0;
}

/* A transaction whose commit need not wait for the disk (log lines: the
 * worker appends a dozen per cached build, an fsync each was most of their
 * cost).  Still atomic and consistent, and durable against a crash of kiln;
 * a power loss may lose the last ones — and the next ordinary commit
 * (the build's end, at the latest) makes them durable.  sqlite:
 * synchronous=NORMAL for this transaction only (WAL); PostgreSQL:
 * synchronous_commit off for it. */
int svc_db_begin_relaxed(svc_db *db, kiln_error **err)
{
	pthread_mutex_lock(&db->lock);
	if (db->lite && svc_db_q(db, NULL, "PRAGMA synchronous=NORMAL", NULL, 0, err) < 0) {
		pthread_mutex_unlock(&db->lock);
		return -1;
	}
	db->relaxed = db->lite != NULL;
	if (svc_db_begin(db, err) < 0)
		goto fail;
	if (db->pg && svc_db_q(db, NULL, "SET LOCAL synchronous_commit TO OFF", NULL, 0, err) < 0) {
		svc_db_rollback(db);
		goto fail;
	}
	pthread_mutex_unlock(&db->lock); /* svc_db_begin holds it */
	return 0;
fail:
	relax_end(db);
	pthread_mutex_unlock(&db->lock);
	return -1;
}

int svc_db_commit(svc_db *db, kiln_error **err)
{
	int ret = svc_db_q(db, NULL, "COMMIT", NULL, 0, err);

	if (ret < 0)
		svc_db_q(db, NULL, "ROLLBACK", NULL, 0, NULL);
	relax_end(db);
	pthread_mutex_unlock(&db->lock);
	return ret < 0 ? -1 : 0;
}

void svc_db_rollback(svc_db *db)
{
	kiln_error *err = NULL;

	svc_db_q(db, NULL, "ROLLBACK", NULL, 0, &err);
	kiln_error_free(err);
	relax_end(db);
	pthread_mutex_unlock(&db->lock);
}

/* "relation already exists, skipping" and the like: not for the log. */
static void quiet(void *ud, const char *msg)
{
	kiln_debug("PostgreSQL: %s", msg);
}

svc_db *svc_db_open(const char *where, kiln_error **err)
{
	svc_db *db = kiln_xcalloc(1, sizeof(*db));
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&db->lock, &a);
	pthread_mutexattr_destroy(&a);
	if (strncmp(where, "postgresql:", 11) == 0 || strncmp(where, "postgres:", 9) == 0 || strchr(where, '=')) {
		db->pg = PQconnectdb(where);
		PQsetNoticeProcessor(db->pg, quiet, NULL);
		if (PQstatus(db->pg) != CONNECTION_OK) {
			kiln_err(err, KILN_E_IO, "queue db: cannot connect to PostgreSQL: %s", PQerrorMessage(db->pg));
			goto fail;
		}
		/* Two hosts creating the schema at once: serialised by an advisory lock. */
		if (svc_db_q(db, NULL, "SELECT pg_advisory_lock(7072011)", NULL, 0, err) < 0)
			goto fail;
	} else {
		if (sqlite3_open_v2(where, &db->lite, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
				    NULL) != SQLITE_OK) {
			kiln_err(err, KILN_E_IO, "queue db %s: %s", where, db->lite ? sqlite3_errmsg(db->lite) : "cannot open");
			goto fail;
		}
		sqlite3_busy_timeout(db->lite, 10000);
		if (svc_db_q(db, NULL, "PRAGMA journal_mode=WAL", NULL, 0, err) < 0 ||
		    svc_db_q(db, NULL, "PRAGMA synchronous=FULL", NULL, 0, err) < 0)
			goto fail;
	}
	for (size_t i = 0; schema[i]; i++)
		if (svc_db_q(db, NULL, schema[i], NULL, 0, err) < 0)
			goto fail;
	if (migrate(db, err) < 0)
		goto fail;
	if (db->pg && svc_db_q(db, NULL, "SELECT pg_advisory_unlock(7072011)", NULL, 0, err) < 0)
		goto fail;
	return db;
fail:
	kiln_error_wrap(err, "queue db");
	svc_db_close(db);
	return NULL;
}

void svc_db_close(svc_db *db)
{
	if (db == NULL)
		return;
	if (db->pg)
		PQfinish(db->pg);
	for (size_t i = 0; i < db->nstmts; i++) {
		sqlite3_finalize(db->stmts[i].st);
		free(db->stmts[i].sql);
	}
	if (db->lite)
		sqlite3_close(db->lite);
	pthread_mutex_destroy(&db->lock);
	free(db);
}

/* ---- numbers as the queue stores them ---- */

int64_t svc_now(void)
{
	return (int64_t)time(NULL);
}

int64_t svc_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void svc_i64(char buf[24], int64_t v)
{
	snprintf(buf, 24, "%" PRId64, v);
}
