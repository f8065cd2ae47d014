/* e2b_db.c — what E2B's API names and kiln's build service does not:
 * templates (an id per team and name), their builds (an E2B build id, the
 * service's build once triggered, the Dockerfile line of each step), tags,
 * and the team's uploaded files by E2B files hash.  The e2b_ tables of the
 * service's database (db.c: meta.db, or the PostgreSQL several hosts share),
 * so every host of a shared queue answers for every template; a data
 * directory of an older kiln has them in DATA/e2b/e2b.db, moved in once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <sqlite3.h>

#include "service/e2b.h"
#include "service/internal.h"

struct e2b_db {
	svc_db *db; /* the service's: not owned */
};

static int fail(kiln_error **err, const char *what)
{
	return kiln_error_wrap(err, "e2b state: %s", what);
}

/* A query's rows (out may be NULL); the rows changed or returned, or -1. */
static int q(e2b_db *e, struct svc_rows *out, const char *sql, const char *const *p, size_t n, const char *what,
	     kiln_error **err)
{
	int rc = svc_db_q(e->db, out, sql, p, n, err);

	if (rc < 0)
		return fail(err, what);
	return out ? (int)out->n : rc;
}

static char *row_str(const struct svc_rows *r, size_t row, size_t col)
{
	const char *s = svc_row(r, row, col);
	return s ? kiln_xstrdup(s) : NULL;
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

/* ---- an older kiln's DATA/e2b/e2b.db, moved in ---- */

static const struct {
	const char *table, *cols, *insert;
} legacy[] = {
	{ "templates", "id, team, name, cpus, memory, created, updated",
	  "INSERT INTO e2b_templates(id, team, name, cpus, memory, created, updated) VALUES($1, $2, $3, $4, $5, $6, $7) "
	  "ON CONFLICT DO NOTHING" },
	{ "builds", "id, template, team, tag, svc_id, error, lines, cpus, memory, created, updated, rowid",
	  "INSERT INTO e2b_builds(id, template, team, tag, svc_id, error, lines, cpus, memory, created, updated, seq) "
	  "VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING" },
	{ "tags", "template, tag, build, created",
	  "INSERT INTO e2b_tags(template, tag, build, created) VALUES($1, $2, $3, $4) ON CONFLICT DO NOTHING" },
	{ "files", "team, hash, digest, size, created",
	  "INSERT INTO e2b_files(team, hash, digest, size, created) VALUES($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING" },
};

/* Every row of the old file into the service's tables in one transaction
 * (rows already there, from another host's move, are kept), then the file
 * renamed to e2b.db.moved: nothing is lost if this stops half-way. */
static int move_legacy(e2b_db *e, const char *path, kiln_error **err)
{
	sqlite3 *h = NULL;
	size_t moved = 0;
	int ret = -1;
	char *to;

	if (access(path, F_OK) != 0)
		return 0;
	if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
		kiln_err(err, KILN_E_IO, "%s: %s", path, h ? sqlite3_errmsg(h) : "cannot open");
		sqlite3_close(h);
		return -1;
	}
	if (svc_db_begin(e->db, err) < 0)
		goto out;
	for (size_t t = 0; t < sizeof(legacy) / sizeof(*legacy); t++) {
		char *sql = kiln_xasprintf("SELECT %s FROM %s", legacy[t].cols, legacy[t].table);
		sqlite3_stmt *st = NULL;
		int rc = sqlite3_prepare_v2(h, sql, -1, &st, NULL);
		free(sql);
		if (rc != SQLITE_OK) {
			kiln_err(err, KILN_E_IO, "%s: %s", path, sqlite3_errmsg(h));
			goto rollback;
		}
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			const char *v[12];
			int n = sqlite3_column_count(st);
			for (int c = 0; c < n; c++)
				v[c] = (const char *)sqlite3_column_text(st, c);
			if (svc_db_q(e->db, NULL, legacy[t].insert, v, (size_t)n, err) < 0) {
				sqlite3_finalize(st);
				goto rollback;
			}
			moved++;
		}
		sqlite3_finalize(st);
		if (rc != SQLITE_DONE) {
			kiln_err(err, KILN_E_IO, "%s: %s", path, sqlite3_errmsg(h));
			goto rollback;
		}
	}
	if (svc_db_commit(e->db, err) < 0)
		goto out;
	sqlite3_close(h); /* its WAL checkpointed into the file before it is renamed */
	h = NULL;
	to = kiln_xasprintf("%s.moved", path);
	if (rename(path, to) < 0) {
		kiln_err_errno(err, errno, "rename %s to %s", path, to);
		free(to);
		goto out;
	}
	kiln_info("E2B state: %zu rows moved from %s into the service's database (the file kept as %s)",
		 moved, path, to);
	free(to);
	ret = 0;
	goto out;
rollback:
	svc_db_rollback(e->db);
out:
	sqlite3_close(h);
	return ret < 0 ? kiln_error_wrap(err, "move the E2B state of %s", path) : 0;
}

int e2b_db_open(svc_db *db, const char *legacy_path, e2b_db **out, kiln_error **err)
{
	e2b_db *e = kiln_xcalloc(1, sizeof(*e));

	e->db = db;
	if (move_legacy(e, legacy_path, err) < 0) {
		free(e);
		return -1;
	}
	*out = e;
	return 0;
}

void e2b_db_close(e2b_db *e)
{
	free(e);
}

/* ---- templates ---- */

#define TEMPLATE_COLS "id, team, name, cpus, memory, created, updated"

static void template_of(const struct svc_rows *r, size_t i, struct e2b_template *t)
{
	t->id = row_str(r, i, 0);
	t->team = row_str(r, i, 1);
	t->name = row_str(r, i, 2);
	t->cpus = (int)svc_row_int(r, i, 3);
	t->memory = (int)svc_row_int(r, i, 4);
	t->created = svc_row_int(r, i, 5);
	t->updated = svc_row_int(r, i, 6);
}

void e2b_template_free(struct e2b_template *t)
{
	free(t->id);
	free(t->team);
	free(t->name);
	memset(t, 0, sizeof(*t));
}

int e2b_db_template_find(e2b_db *e, const char *team, const char *id_or_name, struct e2b_template *out,
			 kiln_error **err)
{
	const char *v[] = { team, id_or_name };
	struct svc_rows r;
	int n;

	memset(out, 0, sizeof(*out));
	n = q(e, &r, "SELECT " TEMPLATE_COLS " FROM e2b_templates WHERE team = $1 AND (id = $2 OR name = $2) "
		     "ORDER BY id = $2 DESC LIMIT 1", v, 2, "template", err);
	if (n > 0)
		template_of(&r, 0, out);
	if (n >= 0)
		svc_rows_free(&r);
	return n < 0 ? -1 : n > 0;
}

int e2b_db_template_ensure(e2b_db *e, const char *team, const char *name, int cpus, int memory,
			   struct e2b_template *out, kiln_error **err)
{
	char *id = e2b_new_template_id(), c[24], m[24], t[24];
	const char *v[] = { id, team, name, c, m, t };
	int rc;

	svc_i64(c, cpus);
	svc_i64(m, memory);
	svc_i64(t, svc_now());
	rc = q(e, NULL, "INSERT INTO e2b_templates(id, team, name, cpus, memory, created, updated) "
			"VALUES($1, $2, $3, $4, $5, $6, $6) ON CONFLICT(team, name) DO UPDATE SET cpus = excluded.cpus, "
			"memory = excluded.memory, updated = excluded.updated",
	       v, 6, "template", err);
	free(id);
	if (rc < 0)
		return -1;
	if ((rc = e2b_db_template_find(e, team, name, out, err)) != 1)
		return rc < 0 ? -1 : kiln_err(err, KILN_E_IO, "e2b state: template %s vanished", name);
	return 0;
}

int e2b_db_templates(e2b_db *e, const char *team, struct e2b_template **v, size_t *n, kiln_error **err)
{
	struct svc_rows r;

	*v = NULL;
	*n = 0;
	if (q(e, &r, "SELECT " TEMPLATE_COLS " FROM e2b_templates WHERE team = $1 ORDER BY created, id", &team, 1,
	      "templates", err) < 0)
		return -1;
	*v = kiln_xcalloc(r.n + 1, sizeof(**v));
	for (size_t i = 0; i < r.n; i++)
		template_of(&r, i, &(*v)[i]);
	*n = r.n;
	svc_rows_free(&r);
	return 0;
}

int e2b_db_template_delete(e2b_db *e, const char *team, const char *id, kiln_error **err)
{
	const char *v[] = { team, id };
	int n;

	if (svc_db_begin(e->db, err) < 0)
		return fail(err, "delete template");
	if ((n = q(e, NULL, "DELETE FROM e2b_templates WHERE team = $1 AND id = $2", v, 2, "delete template", err)) < 0)
		goto fail;
	if (n > 0 && (q(e, NULL, "DELETE FROM e2b_builds WHERE team = $1 AND template = $2", v, 2, "delete template",
			err) < 0 ||
		      q(e, NULL, "DELETE FROM e2b_tags WHERE template = $1", v + 1, 1, "delete template", err) < 0))
		goto fail;
	if (svc_db_commit(e->db, err) < 0)
		return fail(err, "delete template");
	return n;
fail:
	svc_db_rollback(e->db);
	return -1;
}

/* ---- builds ---- */

#define BUILD_COLS "id, template, team, tag, svc_id, error, lines, cpus, memory, created, updated"

static void build_of(const struct svc_rows *r, size_t i, struct e2b_build *b)
{
	b->id = row_str(r, i, 0);
	b->template_id = row_str(r, i, 1);
	b->team = row_str(r, i, 2);
	b->tag = row_str(r, i, 3);
	b->svc_id = row_str(r, i, 4);
	b->error = row_str(r, i, 5);
	b->lines = row_str(r, i, 6);
	b->cpus = (int)svc_row_int(r, i, 7);
	b->memory = (int)svc_row_int(r, i, 8);
	b->created = svc_row_int(r, i, 9);
	b->updated = svc_row_int(r, i, 10);
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

int e2b_db_build_new(e2b_db *e, const struct e2b_template *t, const char *tag, char **id, kiln_error **err)
{
	char c[24], m[24], now[24], ms[24];
	const char *v[8];

	*id = e2b_new_build_id();
	svc_i64(c, t->cpus);
	svc_i64(m, t->memory);
	svc_i64(now, svc_now());
	svc_i64(ms, svc_now_ms());
	v[0] = *id, v[1] = t->id, v[2] = t->team, v[3] = tag, v[4] = c, v[5] = m, v[6] = now, v[7] = ms;
	if (q(e, NULL, "INSERT INTO e2b_builds(id, template, team, tag, cpus, memory, created, updated, seq) "
		       "VALUES($1, $2, $3, $4, $5, $6, $7, $7, $8)",
	      v, 8, "build", err) < 0) {
		free(*id);
		*id = NULL;
		return -1;
	}
	return 0;
}

int e2b_db_build_get(e2b_db *e, const char *team, const char *template_id, const char *id, struct e2b_build *out,
		     kiln_error **err)
{
	const char *v[] = { team, template_id, id };
	struct svc_rows r;
	int n;

	memset(out, 0, sizeof(*out));
	n = q(e, &r, "SELECT " BUILD_COLS " FROM e2b_builds WHERE team = $1 AND template = $2 AND id = $3", v, 3, "build",
	      err);
	if (n > 0)
		build_of(&r, 0, out);
	if (n >= 0)
		svc_rows_free(&r);
	return n < 0 ? -1 : n > 0;
}

/* Newest first. */
int e2b_db_builds(e2b_db *e, const char *team, const char *template_id, struct e2b_build **v, size_t *n,
		  kiln_error **err)
{
	const char *p[] = { team, template_id };
	struct svc_rows r;

	*v = NULL;
	*n = 0;
	if (q(e, &r, "SELECT " BUILD_COLS " FROM e2b_builds WHERE team = $1 AND template = $2 "
		     "ORDER BY created DESC, seq DESC, id",
	      p, 2, "builds", err) < 0)
		return -1;
	*v = kiln_xcalloc(r.n + 1, sizeof(**v));
	for (size_t i = 0; i < r.n; i++)
		build_of(&r, i, &(*v)[i]);
	*n = r.n;
	svc_rows_free(&r);
	return 0;
}

void e2b_builds_free(struct e2b_build *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		e2b_build_free(&v[i]);
	free(v);
}

/* Triggered: the service's build id and the step of each Dockerfile line;
 * only once (a second trigger of the same build is refused: 0). */
int e2b_db_build_started(e2b_db *e, const char *id, const char *svc_id, const char *lines, kiln_error **err)
{
	char now[24];
	const char *v[4] = { id, svc_id, lines, now };

	svc_i64(now, svc_now());
	return q(e, NULL, "UPDATE e2b_builds SET svc_id = $2, lines = $3, updated = $4 WHERE id = $1 AND svc_id = ''",
		 v, 4, "build", err);
}

/* A build that failed before the service had it (a bad request, missing files). */
int e2b_db_build_failed(e2b_db *e, const char *id, const char *msg, kiln_error **err)
{
	char now[24];
	const char *v[3] = { id, msg, now };

	svc_i64(now, svc_now());
	return q(e, NULL, "UPDATE e2b_builds SET error = $2, updated = $3 WHERE id = $1 AND svc_id IS NULL", v, 3,
		 "build", err);
}

/* Claim the build for a trigger (so two triggers, on any hosts, cannot both
 * submit): 1 claimed, 0 already started or failed. */
int e2b_db_build_claim(e2b_db *e, const char *id, kiln_error **err)
{
	return q(e, NULL, "UPDATE e2b_builds SET svc_id = '' WHERE id = $1 AND svc_id IS NULL AND error IS NULL", &id,
		 1, "build", err);
}

int e2b_db_build_unclaim(e2b_db *e, const char *id, const char *msg, kiln_error **err)
{
	const char *v[2] = { id, msg };

	return q(e, NULL, "UPDATE e2b_builds SET svc_id = NULL, error = $2 WHERE id = $1 AND svc_id = ''", v, 2,
		 "build", err);
}

/* ---- tags ---- */

int e2b_db_tag_set(e2b_db *e, const char *template_id, const char *tag, const char *build_id, kiln_error **err)
{
	char now[24];
	const char *v[4] = { template_id, tag, build_id, now };

	svc_i64(now, svc_now());
	return q(e, NULL, "INSERT INTO e2b_tags(template, tag, build, created) VALUES($1, $2, $3, $4) "
			  "ON CONFLICT(template, tag) DO UPDATE SET build = excluded.build, created = excluded.created",
		 v, 4, "tag", err);
}

int e2b_db_tag_delete(e2b_db *e, const char *template_id, const char *tag, kiln_error **err)
{
	const char *v[2] = { template_id, tag };

	return q(e, NULL, "DELETE FROM e2b_tags WHERE template = $1 AND tag = $2", v, 2, "tag", err);
}

/* The build a tag names: 1 (build set, caller frees), 0 none. */
int e2b_db_tag_get(e2b_db *e, const char *template_id, const char *tag, char **build, kiln_error **err)
{
	const char *v[] = { template_id, tag };
	struct svc_rows r;
	int n;

	*build = NULL;
	if ((n = q(e, &r, "SELECT build FROM e2b_tags WHERE template = $1 AND tag = $2", v, 2, "tag", err)) < 0)
		return -1;
	if (n > 0)
		*build = row_str(&r, 0, 0);
	svc_rows_free(&r);
	return n > 0;
}

/* [{"tag","buildID","created"(unix)}] of a template, by tag. */
json_t *e2b_db_tags(e2b_db *e, const char *template_id, kiln_error **err)
{
	struct svc_rows r;
	json_t *a;

	if (q(e, &r, "SELECT tag, build, created FROM e2b_tags WHERE template = $1 ORDER BY tag", &template_id, 1,
	      "tags", err) < 0)
		return NULL;
	a = json_array();
	for (size_t i = 0; i < r.n; i++)
		json_array_append_new(a, json_pack("{s:s,s:s,s:I}", "tag", svc_row(&r, i, 0), "buildID",
						   svc_row(&r, i, 1), "created", (json_int_t)svc_row_int(&r, i, 2)));
	svc_rows_free(&r);
	return a;
}

/* ---- uploaded files ---- */

int e2b_db_file_get(e2b_db *e, const char *team, const char *hash, char digest[KILN_DIGEST_MAX], int64_t *size,
		    kiln_error **err)
{
	const char *v[] = { team, hash };
	struct svc_rows r;
	int n;

	if ((n = q(e, &r, "SELECT digest, size FROM e2b_files WHERE team = $1 AND hash = $2", v, 2, "file", err)) < 0)
		return -1;
	if (n > 0) {
		snprintf(digest, KILN_DIGEST_MAX, "%s", svc_row(&r, 0, 0) ? svc_row(&r, 0, 0) : "");
		if (size)
			*size = svc_row_int(&r, 0, 1);
	}
	svc_rows_free(&r);
	return n > 0;
}

int e2b_db_file_put(e2b_db *e, const char *team, const char *hash, const char *digest, int64_t size,
		    kiln_error **err)
{
	char sz[24], now[24];
	const char *v[5] = { team, hash, digest, sz, now };

	svc_i64(sz, size);
	svc_i64(now, svc_now());
	return q(e, NULL, "INSERT INTO e2b_files(team, hash, digest, size, created) VALUES($1, $2, $3, $4, $5) "
			  "ON CONFLICT(team, hash) DO UPDATE SET digest = excluded.digest, size = excluded.size, "
			  "created = excluded.created",
		 v, 5, "file", err) < 0
		       ? -1
		       : 0;
}

int e2b_db_file_forget(e2b_db *e, const char *team, const char *hash, kiln_error **err)
{
	const char *v[2] = { team, hash };

	return q(e, NULL, "DELETE FROM e2b_files WHERE team = $1 AND hash = $2", v, 2, "file", err);
}
