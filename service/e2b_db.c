/* e2b_db.c — what E2B's API names and kiln's build service does not:
 * templates (an id per team and name), their builds (an E2B build id, the
 * service's build once triggered, the Dockerfile line of each step), tags,
 * and the team's uploaded files by E2B files hash.  One sqlite file in the
 * registry's data directory (DATA/e2b/e2b.db, WAL), so a restart keeps it. */
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/random.h>
#include <time.h>

#include <sqlite3.h>

#include "service/e2b.h"

struct e2b_db {
	sqlite3 *h;
	pthread_mutex_t lock;
};

static const char *schema =
	"PRAGMA journal_mode=WAL;"
	"CREATE TABLE IF NOT EXISTS templates (id TEXT PRIMARY KEY, team TEXT NOT NULL, name TEXT NOT NULL,"
	" cpus INTEGER NOT NULL, memory INTEGER NOT NULL, created INTEGER NOT NULL, updated INTEGER NOT NULL,"
	" UNIQUE(team, name));"
	"CREATE TABLE IF NOT EXISTS builds (id TEXT PRIMARY KEY, template TEXT NOT NULL, team TEXT NOT NULL,"
	" tag TEXT NOT NULL, svc_id TEXT, error TEXT, lines TEXT, cpus INTEGER NOT NULL, memory INTEGER NOT NULL,"
	" created INTEGER NOT NULL, updated INTEGER NOT NULL);"
	"CREATE INDEX IF NOT EXISTS builds_by_template ON builds(template, created);"
	"CREATE TABLE IF NOT EXISTS tags (template TEXT NOT NULL, tag TEXT NOT NULL, build TEXT NOT NULL,"
	" created INTEGER NOT NULL, PRIMARY KEY(template, tag));"
	"CREATE TABLE IF NOT EXISTS files (team TEXT NOT NULL, hash TEXT NOT NULL, digest TEXT NOT NULL,"
	" size INTEGER NOT NULL, created INTEGER NOT NULL, PRIMARY KEY(team, hash));";

static int fail(e2b_db *db, kiln_error **err, const char *what)
{
	return kiln_err(err, KILN_E_IO, "e2b database: %s: %s", what, sqlite3_errmsg(db->h));
}

int e2b_db_open(const char *path, e2b_db **out, kiln_error **err)
{
	e2b_db *db = kiln_xcalloc(1, sizeof(*db));
	char *msg = NULL;

	pthread_mutex_init(&db->lock, NULL);
	if (sqlite3_open_v2(path, &db->h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) !=
	    SQLITE_OK) {
		kiln_err(err, KILN_E_IO, "e2b database %s: %s", path, db->h ? sqlite3_errmsg(db->h) : "cannot open");
		e2b_db_close(db);
		return -1;
	}
	sqlite3_busy_timeout(db->h, 10000);
	if (sqlite3_exec(db->h, schema, NULL, NULL, &msg) != SQLITE_OK) {
		kiln_err(err, KILN_E_IO, "e2b database %s: %s", path, msg ? msg : "schema");
		sqlite3_free(msg);
		e2b_db_close(db);
		return -1;
	}
	*out = db;
	return 0;
}

void e2b_db_close(e2b_db *db)
{
	if (db == NULL)
		return;
	sqlite3_close(db->h);
	pthread_mutex_destroy(&db->lock);
	free(db);
}

static int64_t now_s(void)
{
	return (int64_t)time(NULL);
}

/* n random characters of alphabet. */
static char *random_id(const char *alphabet, size_t n)
{
	unsigned char r[64];
	size_t k = strlen(alphabet);
	char *s = kiln_xmalloc(n + 1);

	if (n > sizeof(r) || getrandom(r, n, 0) != (ssize_t)n)
		abort(); /* the kernel's CSPRNG does not fail for 64 bytes */
	for (size_t i = 0; i < n; i++)
		s[i] = alphabet[r[i] % k];
	s[n] = '\0';
	return s;
}

char *e2b_new_template_id(void)
{
	return random_id("abcdefghijklmnopqrstuvwxyz0123456789", 20);
}

char *e2b_new_build_id(void)
{
	char *h = random_id("0123456789abcdef", 32);
	char *id;

	h[12] = '4';                              /* a version 4 UUID, as E2B's */
	h[16] = "89ab"[(unsigned char)h[16] % 4]; /* RFC 4122 variant */
	id = kiln_xasprintf("%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12, h + 16, h + 20);
	free(h);
	return id;
}

static sqlite3_stmt *prep(e2b_db *db, const char *sql, kiln_error **err)
{
	sqlite3_stmt *st = NULL;

	if (sqlite3_prepare_v2(db->h, sql, -1, &st, NULL) != SQLITE_OK) {
		fail(db, err, "prepare");
		return NULL;
	}
	return st;
}

/* Bind each string of v (NULL binds NULL). */
static void bind_strs(sqlite3_stmt *st, const char *const *v, int n)
{
	for (int i = 0; i < n; i++)
		sqlite3_bind_text(st, i + 1, v[i], -1, SQLITE_TRANSIENT);
}

static char *col_str(sqlite3_stmt *st, int i)
{
	const unsigned char *s = sqlite3_column_text(st, i);
	return s ? kiln_xstrdup((const char *)s) : NULL;
}

/* Runs sql over string parameters, handing each row to each(st, ud); with
 * one, only the first row.  Returns the rows handed (so 1/0 with one), -1. */
static int query(e2b_db *db, const char *sql, const char *const *v, int n, bool one,
		 void (*each)(sqlite3_stmt *st, void *ud), void *ud, kiln_error **err)
{
	sqlite3_stmt *st;
	int rows = 0, s;

	pthread_mutex_lock(&db->lock);
	if ((st = prep(db, sql, err)) == NULL) {
		rows = -1;
		goto out;
	}
	bind_strs(st, v, n);
	while ((s = sqlite3_step(st)) == SQLITE_ROW) {
		each(st, ud);
		rows++;
		if (one)
			break;
	}
	if (s != SQLITE_ROW && s != SQLITE_DONE)
		rows = fail(db, err, "query");
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rows;
}

/* A growable array of rows of one struct type. */
struct rows {
	void *v;
	size_t n, size;
	void (*of)(sqlite3_stmt *st, void *row);
};

static void add_row(sqlite3_stmt *st, void *ud)
{
	struct rows *r = ud;

	r->v = kiln_xrealloc(r->v, (r->n + 1) * r->size);
	memset((char *)r->v + r->n * r->size, 0, r->size);
	r->of(st, (char *)r->v + r->n++ * r->size);
}

static void str_of(sqlite3_stmt *st, void *ud)
{
	*(char **)ud = col_str(st, 0);
}

#define TEMPLATE_COLS "id, team, name, cpus, memory, created, updated"

static void template_of(sqlite3_stmt *st, void *ud)
{
	struct e2b_template *t = ud;

	t->id = col_str(st, 0);
	t->team = col_str(st, 1);
	t->name = col_str(st, 2);
	t->cpus = sqlite3_column_int(st, 3);
	t->memory = sqlite3_column_int(st, 4);
	t->created = sqlite3_column_int64(st, 5);
	t->updated = sqlite3_column_int64(st, 6);
}

void e2b_template_free(struct e2b_template *t)
{
	free(t->id);
	free(t->team);
	free(t->name);
	memset(t, 0, sizeof(*t));
}

int e2b_db_template_find(e2b_db *db, const char *team, const char *id_or_name, struct e2b_template *out,
			 kiln_error **err)
{
	const char *v[] = { team, id_or_name, id_or_name };

	memset(out, 0, sizeof(*out));
	return query(db, "SELECT " TEMPLATE_COLS " FROM templates WHERE team = ?1 AND (id = ?2 OR name = ?3)", v, 3,
		     true, template_of, out, err);
}

int e2b_db_template_ensure(e2b_db *db, const char *team, const char *name, int cpus, int memory,
			   struct e2b_template *out, kiln_error **err)
{
	char *id = e2b_new_template_id(), c[16], m[16], t[24];
	const char *v[] = { id, team, name, c, m, t };
	sqlite3_stmt *st;
	int rc = -1;

	snprintf(c, sizeof(c), "%d", cpus);
	snprintf(m, sizeof(m), "%d", memory);
	snprintf(t, sizeof(t), "%lld", (long long)now_s());
	pthread_mutex_lock(&db->lock);
	st = prep(db, "INSERT INTO templates (id, team, name, cpus, memory, created, updated) "
		      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT(team, name) DO UPDATE SET cpus = ?4, "
		      "memory = ?5, updated = ?6",
		  err);
	if (st == NULL)
		goto out;
	bind_strs(st, v, 6);
	if (sqlite3_step(st) != SQLITE_DONE) {
		fail(db, err, "template");
		goto out;
	}
	rc = 0;
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	free(id);
	if (rc == 0 && e2b_db_template_find(db, team, name, out, err) != 1)
		return kiln_err(err, KILN_E_IO, "e2b database: template %s vanished", name);
	return rc;
}

int e2b_db_templates(e2b_db *db, const char *team, struct e2b_template **v, size_t *n, kiln_error **err)
{
	struct rows r = { .size = sizeof(**v), .of = template_of };
	int rc = query(db, "SELECT " TEMPLATE_COLS " FROM templates WHERE team = ?1 ORDER BY created, id", &team, 1,
		       false, add_row, &r, err);

	*v = r.v;
	*n = r.n;
	return rc < 0 ? -1 : 0;
}

/* Run one statement over string parameters: the rows it changed, or -1. */
static int change(e2b_db *db, const char *sql, const char *const *v, int n, kiln_error **err)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	if ((st = prep(db, sql, err)) == NULL)
		goto out;
	bind_strs(st, v, n);
	if (sqlite3_step(st) != SQLITE_DONE) {
		fail(db, err, "update");
		goto out;
	}
	rc = sqlite3_changes(db->h);
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int e2b_db_template_delete(e2b_db *db, const char *team, const char *id, kiln_error **err)
{
	const char *v[] = { team, id };
	int n = change(db, "DELETE FROM templates WHERE team = ?1 AND id = ?2", v, 2, err);

	if (n > 0 && (change(db, "DELETE FROM builds WHERE team = ?1 AND template = ?2", v, 2, err) < 0 ||
		      change(db, "DELETE FROM tags WHERE template = ?1", v + 1, 1, err) < 0))
		return -1;
	return n;
}

/* ---- builds ---- */

#define BUILD_COLS "id, template, team, tag, svc_id, error, lines, cpus, memory, created, updated"

static void build_of(sqlite3_stmt *st, void *ud)
{
	struct e2b_build *b = ud;

	b->id = col_str(st, 0);
	b->template_id = col_str(st, 1);
	b->team = col_str(st, 2);
	b->tag = col_str(st, 3);
	b->svc_id = col_str(st, 4);
	b->error = col_str(st, 5);
	b->lines = col_str(st, 6);
	b->cpus = sqlite3_column_int(st, 7);
	b->memory = sqlite3_column_int(st, 8);
	b->created = sqlite3_column_int64(st, 9);
	b->updated = sqlite3_column_int64(st, 10);
}

void e2b_build_free(struct e2b_build *b)
{
	free(b->id);
	free(b->template_id);
	free(b->team);
	free(b->tag);
	free(b->svc_id);
	free(b->error);
	free(b->lines);
	memset(b, 0, sizeof(*b));
}

int e2b_db_build_new(e2b_db *db, const struct e2b_template *t, const char *tag, char **id, kiln_error **err)
{
	char c[16], m[16], now[24];
	const char *v[7];

	*id = e2b_new_build_id();
	snprintf(c, sizeof(c), "%d", t->cpus);
	snprintf(m, sizeof(m), "%d", t->memory);
	snprintf(now, sizeof(now), "%lld", (long long)now_s());
	v[0] = *id, v[1] = t->id, v[2] = t->team, v[3] = tag, v[4] = c, v[5] = m, v[6] = now;
	if (change(db, "INSERT INTO builds (id, template, team, tag, cpus, memory, created, updated) "
		       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
		   v, 7, err) < 0) {
		free(*id);
		*id = NULL;
		return -1;
	}
	return 0;
}

int e2b_db_build_get(e2b_db *db, const char *team, const char *template_id, const char *id, struct e2b_build *out,
		     kiln_error **err)
{
	const char *v[] = { team, template_id, id };

	memset(out, 0, sizeof(*out));
	return query(db, "SELECT " BUILD_COLS " FROM builds WHERE team = ?1 AND template = ?2 AND id = ?3", v, 3, true,
		     build_of, out, err);
}

/* Newest first. */
int e2b_db_builds(e2b_db *db, const char *team, const char *template_id, struct e2b_build **v, size_t *n,
		  kiln_error **err)
{
	const char *p[] = { team, template_id };
	struct rows r = { .size = sizeof(**v), .of = build_of };
	int rc = query(db, "SELECT " BUILD_COLS " FROM builds WHERE team = ?1 AND template = ?2 "
			   "ORDER BY created DESC, rowid DESC",
		       p, 2, false, add_row, &r, err);

	*v = r.v;
	*n = r.n;
	return rc < 0 ? -1 : 0;
}

void e2b_builds_free(struct e2b_build *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		e2b_build_free(&v[i]);
	free(v);
}

/* Triggered: the service's build id and the step of each Dockerfile line;
 * only once (a second trigger of the same build is refused: 0). */
int e2b_db_build_started(e2b_db *db, const char *id, const char *svc_id, const char *lines, kiln_error **err)
{
	char now[24];
	const char *v[4] = { id, svc_id, lines, now };

	snprintf(now, sizeof(now), "%lld", (long long)now_s());
	return change(db, "UPDATE builds SET svc_id = ?2, lines = ?3, updated = ?4 WHERE id = ?1 AND svc_id = ''",
		      v, 4, err);
}

/* A build that failed before the service had it (a bad request, missing files). */
int e2b_db_build_failed(e2b_db *db, const char *id, const char *msg, kiln_error **err)
{
	char now[24];
	const char *v[3] = { id, msg, now };

	snprintf(now, sizeof(now), "%lld", (long long)now_s());
	return change(db, "UPDATE builds SET error = ?2, updated = ?3 WHERE id = ?1 AND svc_id IS NULL", v, 3, err);
}

/* Claim the build for a trigger (so two triggers cannot both submit):
 * 1 claimed, 0 already started or failed. */
int e2b_db_build_claim(e2b_db *db, const char *id, kiln_error **err)
{
	const char *v[1] = { id };

	return change(db, "UPDATE builds SET svc_id = '' WHERE id = ?1 AND svc_id IS NULL AND error IS NULL", v, 1,
		      err);
}

int e2b_db_build_unclaim(e2b_db *db, const char *id, const char *msg, kiln_error **err)
{
	const char *v[2] = { id, msg };

	return change(db, "UPDATE builds SET svc_id = NULL, error = ?2 WHERE id = ?1 AND svc_id = ''", v, 2, err);
}

/* ---- tags ---- */

int e2b_db_tag_set(e2b_db *db, const char *template_id, const char *tag, const char *build_id, kiln_error **err)
{
	char now[24];
	const char *v[4] = { template_id, tag, build_id, now };

	snprintf(now, sizeof(now), "%lld", (long long)now_s());
	return change(db, "INSERT INTO tags (template, tag, build, created) VALUES (?1, ?2, ?3, ?4) "
			  "ON CONFLICT(template, tag) DO UPDATE SET build = ?3, created = ?4",
		      v, 4, err);
}

int e2b_db_tag_delete(e2b_db *db, const char *template_id, const char *tag, kiln_error **err)
{
	const char *v[2] = { template_id, tag };

	return change(db, "DELETE FROM tags WHERE template = ?1 AND tag = ?2", v, 2, err);
}

/* The build a tag names: 1 (build set, caller frees), 0 none. */
int e2b_db_tag_get(e2b_db *db, const char *template_id, const char *tag, char **build, kiln_error **err)
{
	const char *v[] = { template_id, tag };

	*build = NULL;
	return query(db, "SELECT build FROM tags WHERE template = ?1 AND tag = ?2", v, 2, true, str_of, build, err);
}

/* [{"tag","buildID","createdAt"(unix)}] of a template, by tag. */
static void tag_of(sqlite3_stmt *st, void *ud)
{
	json_array_append_new(ud, json_pack("{s:s,s:s,s:I}", "tag", sqlite3_column_text(st, 0), "buildID",
					    sqlite3_column_text(st, 1), "created",
					    (json_int_t)sqlite3_column_int64(st, 2)));
}

json_t *e2b_db_tags(e2b_db *db, const char *template_id, kiln_error **err)
{
	json_t *a = json_array();

	if (query(db, "SELECT tag, build, created FROM tags WHERE template = ?1 ORDER BY tag", &template_id, 1,
		  false, tag_of, a, err) < 0) {
		json_decref(a);
		return NULL;
	}
	return a;
}

/* ---- uploaded files ---- */

struct file_row {
	char *digest;
	int64_t size;
};

static void file_of(sqlite3_stmt *st, void *ud)
{
	struct file_row *f = ud;

	f->digest = col_str(st, 0);
	f->size = sqlite3_column_int64(st, 1);
}

int e2b_db_file_get(e2b_db *db, const char *team, const char *hash, char digest[KILN_DIGEST_MAX], int64_t *size,
		    kiln_error **err)
{
	const char *v[] = { team, hash };
	struct file_row f = { 0 };
	int rc = query(db, "SELECT digest, size FROM files WHERE team = ?1 AND hash = ?2", v, 2, true, file_of, &f,
		       err);

	if (rc == 1) {
		snprintf(digest, KILN_DIGEST_MAX, "%s", f.digest ? f.digest : "");
		if (size)
			*size = f.size;
	}
	free(f.digest);
	return rc;
}

int e2b_db_file_put(e2b_db *db, const char *team, const char *hash, const char *digest, int64_t size,
		    kiln_error **err)
{
	char sz[24], now[24];
	const char *v[5] = { team, hash, digest, sz, now };

	snprintf(sz, sizeof(sz), "%lld", (long long)size);
	snprintf(now, sizeof(now), "%lld", (long long)now_s());
	return change(db, "INSERT INTO files (team, hash, digest, size, created) VALUES (?1, ?2, ?3, ?4, ?5) "
			  "ON CONFLICT(team, hash) DO UPDATE SET digest = ?3, size = ?4, created = ?5",
		      v, 5, err) < 0
		       ? -1
		       : 0;
}

int e2b_db_file_forget(e2b_db *db, const char *team, const char *hash, kiln_error **err)
{
	const char *v[2] = { team, hash };

	return change(db, "DELETE FROM files WHERE team = ?1 AND hash = ?2", v, 2, err);
}
