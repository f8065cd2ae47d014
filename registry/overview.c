/* overview.c — what the dashboard (docs/dashboard.md) reads of the registry
 * that the distribution API does not say: who the caller is, its teams'
 * repositories with each tag's digest, time, sizes (referenced, and new to
 * the repository: after deduplication), build note and signatures, a tag's
 * history with chunks new and shared against the version before, and the
 * teams' usage against their quotas.  GET /kiln/v1/..., JSON, read-only; a
 * token sees only the repositories it may pull.  The filesystem backend's
 * metadata is queried here, the S3 bucket's read by overview_s3.c. */
#include <stdlib.h>
#include <string.h>

#include "registry/internal.h"

static void fail(reg_req *r, unsigned status, const char *msg)
{
	reg_respond_json(r, status, json_pack("{s:s,s:I}", "error", msg, "status", (json_int_t)status), NULL);
}

/* 1: the caller may go on (a valid token, or auth off); else answered. */
static int caller(reg_req *r)
{
	kiln_error *err = NULL;
	int who = reg_req_identify(r, &err);

	if (who == -1) {
		reg_internal(r, err);
		return 0;
	}
	if (who == 1)
		return 1;
	if (r->resp == NULL)
		fail(r, 401, who == -2 ? "invalid, expired or revoked token" : "a token is needed");
	return 0;
}

static json_t *namespaces(reg_req *r, enum reg_action a)
{
	char *ns = reg_req_namespaces(r, a), *save = NULL;
	json_t *v = json_array();

	for (char *p = ns ? strtok_r(ns, ";", &save) : NULL; p; p = strtok_r(NULL, ";", &save))
		json_array_append_new(v, json_string(p));
	free(ns);
	return v;
}

static void whoami(reg_req *r)
{
	const struct reg_config *c = &r->srv->cfg;

	reg_respond_json(r, 200,
			 json_pack("{s:b,s:{s:o,s:o,s:o},s:b,s:b,s:b}", "auth", c->auth, "namespaces", "pull",
				   namespaces(r, REG_PULL), "build", namespaces(r, REG_BUILD), "sandbox",
				   namespaces(r, REG_SANDBOX), "build", c->build != NULL, "sandboxes",
				   c->sandboxes != NULL, "metadata", r->srv->db != NULL),
			 NULL);
}

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

json_t *reg_ov_tag_json(const struct reg_ov_tag *t)
{
	return json_pack("{s:s,s:s,s:I,s:o,s:o,s:I,s:I,s:I,s:I,s:I,s:o,s:b,s:o}", "tag", t->tag, "digest", t->digest,
			 "updated", (json_int_t)t->updated, "media_type", str_or_null(t->media_type), "artifact_type",
			 str_or_null(t->artifact_type), "created", (json_int_t)t->created, "size", (json_int_t)t->size,
			 "blobs", (json_int_t)t->blobs, "new_bytes", (json_int_t)t->new_bytes, "manifest_size",
			 (json_int_t)t->manifest_size, "build", str_or_null(t->build), "signed", t->signed_,
			 "attestation", str_or_null(t->attestation));
}

void reg_ov_change(json_t *row, const json_t *prev, const json_t *set)
{
	int64_t nb = 0, nn = 0, sb = 0, sn = 0;
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)set, k, v) {
		if (prev && json_object_get(prev, k)) {
			sn++;
			sb += json_integer_value(v);
		} else {
			nn++;
			nb += json_integer_value(v);
		}
	}
	json_object_update_new(row, json_pack("{s:I,s:I,s:I,s:I,s:b}", "new_blobs", (json_int_t)nn, "new_bytes",
					      (json_int_t)nb, "shared_blobs", (json_int_t)sn, "shared_bytes",
					      (json_int_t)sb, "first", prev == NULL));
}

static int64_t col64(sqlite3_stmt *st, int i)
{
	return sqlite3_column_int64(st, i);
}

static json_t *text_or_null(sqlite3_stmt *st, int i)
{
	const char *s = (const char *)sqlite3_column_text(st, i);
	return s ? json_string(s) : json_null();
}

/* A manifest's blobs: count, bytes, and those no manifest of the repository
 * made earlier references (what storing this version cost). */
#define SQL_SIZES                                                                                            \
	"SELECT count(*), coalesce(sum(l.size), 0),"                                                         \
	" coalesce(sum(CASE WHEN NOT EXISTS (SELECT 1 FROM manifest_refs g JOIN manifests m2"              \
	"  ON m2.repo = g.repo AND m2.digest = g.manifest WHERE g.repo = f.repo AND g.digest = f.digest"   \
	"  AND g.manifest != f.manifest AND (m2.created < ?3 OR (m2.created = ?3 AND m2.digest < f.manifest)))" \
	" THEN l.size ELSE 0 END), 0)"                                                                       \
	" FROM manifest_refs f JOIN blob_links l ON l.repo = f.repo AND l.digest = f.digest"               \
	" WHERE f.repo = ?1 AND f.manifest = ?2 AND f.kind != 2"

static int repo_tags(reg_db *db, int64_t id, json_t *tags, int64_t *logical, kiln_error **err)
{
	sqlite3_stmt *st = reg_db_prep(db,
		"SELECT t.name, t.digest, t.updated, m.media_type, m.artifact_type, m.size, m.created,"
		" (SELECT n.note FROM tag_history h JOIN tag_notes n ON n.history = h.id WHERE h.repo = t.repo"
		"  AND h.tag = t.name AND h.digest = t.digest ORDER BY h.id DESC LIMIT 1),"
		" EXISTS (SELECT 1 FROM tags s WHERE s.repo = t.repo AND s.name = 'sha256-' || substr(t.digest, 8) || '.sig'),"
		" (SELECT a.digest FROM tags a WHERE a.repo = t.repo AND a.name = 'sha256-' || substr(t.digest, 8) || '.att')"
		" FROM tags t JOIN manifests m ON m.repo = t.repo AND m.digest = t.digest WHERE t.repo = ?"
		" AND NOT (t.name GLOB 'sha256-*.sig' OR t.name GLOB 'sha256-*.att') ORDER BY t.updated DESC, t.name", err);
	sqlite3_stmt *sz = st ? reg_db_prep(db, SQL_SIZES, err) : NULL;
	int rc, ret = -1;

	if (sz == NULL)
		goto out;
	sqlite3_bind_int64(st, 1, id);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t msize = col64(st, 5), blobs = 0, bytes = 0, fresh = 0;

		sqlite3_reset(sz);
		sqlite3_bind_int64(sz, 1, id);
		sqlite3_bind_text(sz, 2, (const char *)sqlite3_column_text(st, 1), -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(sz, 3, col64(st, 6));
		if (sqlite3_step(sz) == SQLITE_ROW) {
			blobs = col64(sz, 0);
			bytes = col64(sz, 1);
			fresh = col64(sz, 2);
		}
		*logical += msize + bytes;
		json_array_append_new(tags, reg_ov_tag_json(&(struct reg_ov_tag){
			.tag = (const char *)sqlite3_column_text(st, 0), .digest = (const char *)sqlite3_column_text(st, 1),
			.updated = col64(st, 2), .media_type = (const char *)sqlite3_column_text(st, 3),
			.artifact_type = (const char *)sqlite3_column_text(st, 4), .created = col64(st, 6),
			.size = msize + bytes, .blobs = blobs, .new_bytes = msize + fresh, .manifest_size = msize,
			.build = (const char *)sqlite3_column_text(st, 7), .signed_ = sqlite3_column_int(st, 8) != 0,
			.attestation = (const char *)sqlite3_column_text(st, 9) }));
	}
	if (rc != SQLITE_DONE) {
		reg_db_fail(db, err, "a repository's tags");
		goto out;
	}
	ret = 0;
out:
	sqlite3_finalize(sz);
	sqlite3_finalize(st);
	return ret;
}

static bool in_team(const char *name, const char *team)
{
	size_t n = team ? strlen(team) : 0;

	return team == NULL || (strncmp(name, team, n) == 0 && (name[n] == '\0' || name[n] == '/'));
}

/* The same from the bucket's objects (overview_s3.c). */
static void repos_s3(reg_req *r, const char *team)
{
	kiln_strv names = KILN_STRV_INIT;
	kiln_error *err = NULL;
	json_t *out = json_array(), *repo;

	if (reg_s3m_catalog(&r->srv->store, NULL, -1, &names, NULL, &err) < 0)
		goto fail;
	for (size_t i = 0; i < names.n; i++) {
		if (!in_team(names.v[i], team) || !reg_req_allows(r, names.v[i], REG_PULL))
			continue;
		if (reg_ov_s3_repo(r->srv, names.v[i], &repo, &err) < 0)
			goto fail;
		json_array_append_new(out, repo);
	}
	kiln_strv_free(&names);
	reg_respond_json(r, 200, json_pack("{s:o}", "repositories", out), NULL);
	return;
fail:
	kiln_strv_free(&names);
	json_decref(out);
	reg_internal(r, err);
}

/* GET /kiln/v1/repos[?team=T]: the repositories the caller may pull. */
static void repos(reg_req *r)
{
	const char *team = reg_query(r, "team");
	reg_db *db = r->srv->db;
	kiln_error *err = NULL;
	json_t *out;
	sqlite3_stmt *st;
	int rc;

	if (r->srv->cfg.s3_endpoint) {
		repos_s3(r, team);
		return;
	}
	out = json_array();
	pthread_mutex_lock(&db->lock);
	st = reg_db_prep(db, "SELECT r.id, r.name, r.public, r.created,"
			     " (SELECT coalesce(sum(size), 0) FROM blob_links l WHERE l.repo = r.id),"
			     " (SELECT coalesce(sum(size), 0) FROM manifests m WHERE m.repo = r.id)"
			     " FROM repos r WHERE ?1 IS NULL OR r.name = ?1 OR substr(r.name, 1, length(?1) + 1) = ?1 || '/'"
			     " ORDER BY r.name", &err);
	if (st == NULL)
		goto fail;
	if (team)
		sqlite3_bind_text(st, 1, team, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 1);
		int64_t logical = 0;
		json_t *tags;

		if (!reg_req_allows(r, name, REG_PULL))
			continue;
		tags = json_array();
		if (repo_tags(db, col64(st, 0), tags, &logical, &err) < 0) {
			json_decref(tags);
			goto fail;
		}
		json_array_append_new(out, json_pack("{s:s,s:b,s:I,s:I,s:I,s:o}", "name", name, "public",
						     sqlite3_column_int(st, 2), "created", (json_int_t)col64(st, 3),
						     "stored", (json_int_t)(col64(st, 4) + col64(st, 5)), "logical",
						     (json_int_t)logical, "tags", tags));
	}
	if (rc != SQLITE_DONE) {
		reg_db_fail(db, &err, "repositories");
		goto fail;
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	reg_respond_json(r, 200, json_pack("{s:o}", "repositories", out), NULL);
	return;
fail:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	json_decref(out);
	reg_internal(r, err);
}

/* A manifest's blobs (digest → size), sorted by digest, into refs. */
static json_t *blob_set(reg_db *db, const char *repo, const char *digest, kiln_error **err)
{
	sqlite3_stmt *st = reg_db_prep(db, "SELECT f.digest, l.size FROM manifest_refs f JOIN repos r ON r.id = f.repo"
					   " JOIN blob_links l ON l.repo = f.repo AND l.digest = f.digest"
					   " WHERE r.name = ? AND f.manifest = ? AND f.kind != 2", err);
	json_t *set = json_object();
	int rc;

	if (st == NULL) {
		json_decref(set);
		return NULL;
	}
	sqlite3_bind_text(st, 1, repo, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, digest, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		json_object_set_new(set, (const char *)sqlite3_column_text(st, 0), json_integer(col64(st, 1)));
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		json_decref(set);
		reg_db_fail(db, err, "a manifest's blobs");
		return NULL;
	}
	return set;
}

/* GET /kiln/v1/history?repo=R&tag=T: each change of the tag, oldest first,
 * with its blobs against the version before (new / shared, count and bytes). */
static void history(reg_req *r)
{
	const char *repo = reg_query(r, "repo"), *tag = reg_query(r, "tag");
	reg_db *db = r->srv->db;
	kiln_error *err = NULL;
	json_t *out = json_array(), *prev = NULL;
	sqlite3_stmt *st = NULL;
	int rc;

	if (repo == NULL || tag == NULL || !oci_name_valid(repo) || !oci_tag_valid(tag)) {
		json_decref(out);
		fail(r, 400, "want ?repo=NAME&tag=TAG");
		return;
	}
	if (!reg_req_allows(r, repo, REG_PULL)) { /* as if it did not exist */
		json_decref(out);
		fail(r, 404, "no such repository");
		return;
	}
	if (r->srv->cfg.s3_endpoint) {
		if (reg_ov_s3_history(r->srv, repo, tag, out, &err) < 0) {
			json_decref(out);
			reg_internal(r, err);
			return;
		}
		reg_respond_json(r, 200, json_pack("{s:s,s:s,s:o}", "repo", repo, "tag", tag, "history", out), NULL);
		return;
	}
	pthread_mutex_lock(&db->lock);
	st = reg_db_prep(db, "SELECT h.at, h.digest, n.note FROM tag_history h JOIN repos r ON r.id = h.repo"
			     " LEFT JOIN tag_notes n ON n.history = h.id WHERE r.name = ? AND h.tag = ? ORDER BY h.id", &err);
	if (st == NULL)
		goto fail;
	sqlite3_bind_text(st, 1, repo, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, tag, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *d = (const char *)sqlite3_column_text(st, 1);
		json_t *row = json_pack("{s:I,s:o,s:o}", "at", (json_int_t)col64(st, 0), "digest", text_or_null(st, 1),
					"build", text_or_null(st, 2));
		json_t *set;

		json_array_append_new(out, row);
		if (d == NULL)
			continue;
		if ((set = blob_set(db, repo, d, &err)) == NULL)
			goto fail;
		reg_ov_change(row, prev, set);
		json_decref(prev);
		prev = set;
	}
	if (rc != SQLITE_DONE) {
		reg_db_fail(db, &err, "tag history");
		goto fail;
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	json_decref(prev);
	reg_respond_json(r, 200, json_pack("{s:s,s:s,s:o}", "repo", repo, "tag", tag, "history", out), NULL);
	return;
fail:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	json_decref(prev);
	json_decref(out);
	reg_internal(r, err);
}

void reg_usage_set(json_t *quotas, const char *key, int64_t used, int64_t limit)
{
	json_object_set_new(quotas, key, json_pack("{s:I,s:o}", "used", (json_int_t)used, "limit",
						   limit < 0 ? json_null() : json_integer(limit)));
}

static int64_t limit_of(const struct reg_quota *q, enum reg_quota_key k)
{
	return q->src[k] == REG_QUOTA_UNSET || q->v[k] == REG_QUOTA_NONE ? -1 : q->v[k];
}

/* A team's row: what it holds, and each quota that applies to it with its
 * use, counted where the quota is checked: bytes and repos here, the
 * services' through their observers (builds, build minutes, sandboxes).  A
 * quota set for a service this server does not run has no use ("used": null). */
static json_t *team_row(reg_req *r, const struct reg_team_usage *u, kiln_error **err)
{
	unsigned no = __atomic_load_n(&r->srv->nobservers, __ATOMIC_ACQUIRE);
	json_t *quotas;
	struct reg_quota q;

	if (reg_server_quota(r->srv, u->team, &q, err) < 0)
		return NULL;
	quotas = json_object();
	for (int k = 0; k < REG_QUOTA_N; k++)
		if (q.src[k] != REG_QUOTA_UNSET)
			json_object_set_new(quotas, reg_quota_key_name((enum reg_quota_key)k),
					    json_pack("{s:n,s:o}", "used", "limit",
						      q.v[k] == REG_QUOTA_NONE ? json_null() : json_integer(q.v[k])));
	reg_usage_set(quotas, "bytes", u->bytes, limit_of(&q, REG_QUOTA_BYTES));
	reg_usage_set(quotas, "repos", u->repos, limit_of(&q, REG_QUOTA_REPOS));
	for (unsigned i = 0; i < no; i++) {
		const struct reg_observer *o = r->srv->observers[i];
		if (o->usage && o->usage(o->ud, u->team, quotas, err) < 0) {
			json_decref(quotas);
			return NULL;
		}
	}
	return json_pack("{s:s,s:I,s:I,s:I,s:I,s:o}", "team", u->team, "repos", (json_int_t)u->repos, "tags",
			 (json_int_t)u->tags, "blobs", (json_int_t)u->blobs, "bytes", (json_int_t)u->bytes, "quotas", quotas);
}

static int cmp_team(const void *a, const void *b)
{
	return strcmp(((const struct reg_team_usage *)a)->team, ((const struct reg_team_usage *)b)->team);
}

/* The teams of the caller's own namespaces that hold nothing yet: their
 * builds and sandboxes count too. */
static void caller_teams(reg_req *r, struct reg_team_usage **u, size_t *n)
{
	char *ns = reg_req_namespaces(r, REG_PULL), *save = NULL;
	size_t had = *n;

	for (char *p = ns ? strtok_r(ns, ";", &save) : NULL; p; p = strtok_r(NULL, ";", &save)) {
		bool seen = false;

		p[strcspn(p, "/")] = '\0';
		if (!reg_quota_team_valid(p))
			continue;
		for (size_t i = 0; i < *n && !seen; i++)
			seen = strcmp((*u)[i].team, p) == 0;
		if (seen)
			continue;
		*u = kiln_xrealloc(*u, (*n + 1) * sizeof(**u));
		(*u)[(*n)++] = (struct reg_team_usage){ .team = kiln_xstrdup(p) };
	}
	free(ns);
	if (*n != had)
		qsort(*u, *n, sizeof(**u), cmp_team);
}

/* The teams of the bucket's catalog, nothing counted yet (reg_ov_s3_team
 * counts those the caller may see). */
static int s3_teams(reg_req *r, struct reg_team_usage **u, size_t *n, kiln_error **err)
{
	kiln_strv names = KILN_STRV_INIT;

	if (reg_s3m_catalog(&r->srv->store, NULL, -1, &names, NULL, err) < 0)
		return -1;
	for (size_t i = 0; i < names.n; i++) {
		char *t = names.v[i];

		t[strcspn(t, "/")] = '\0';
		if (*n == 0 || strcmp((*u)[*n - 1].team, t) != 0) { /* the catalog is sorted */
			*u = kiln_xrealloc(*u, (*n + 1) * sizeof(**u));
			(*u)[(*n)++] = (struct reg_team_usage){ .team = kiln_xstrdup(t) };
		}
	}
	kiln_strv_free(&names);
	return 0;
}

/* GET /kiln/v1/usage: what each team the caller may pull from holds, and its quotas. */
static void usage(reg_req *r)
{
	struct reg_team_usage *u = NULL;
	kiln_error *err = NULL;
	json_t *out = json_array(), *row;
	size_t n = 0;
	bool s3 = r->srv->cfg.s3_endpoint != NULL;

	if (s3 ? s3_teams(r, &u, &n, &err) < 0 : reg_db_team_usage(r->srv->db, &u, &n, &err) < 0)
		goto fail;
	caller_teams(r, &u, &n);
	for (size_t i = 0; i < n; i++) {
		if (!reg_req_allows(r, u[i].team, REG_PULL))
			continue;
		if ((s3 && reg_ov_s3_team(r->srv, &u[i], &err) < 0) || (row = team_row(r, &u[i], &err)) == NULL)
			goto fail;
		json_array_append_new(out, row);
	}
	reg_team_usage_free(u, n);
	reg_respond_json(r, 200, json_pack("{s:o}", "teams", out), NULL);
	return;
fail:
	reg_team_usage_free(u, n);
	json_decref(out);
	reg_internal(r, err);
}

void reg_overview_handle(reg_req *r)
{
	const char *what = r->url + strlen("/kiln/v1/");

	if (!caller(r))
		goto out;
	if (strcmp(what, "whoami") == 0) {
		whoami(r);
		goto out;
	}
	if (r->srv->db == NULL) {
		fail(r, 501, "no metadata open");
		goto out;
	}
	if (strcmp(what, "repos") == 0)
		repos(r);
	else if (strcmp(what, "history") == 0)
		history(r);
	else if (strcmp(what, "usage") == 0)
		usage(r);
	else
		fail(r, 404, "no such endpoint");
out:
	if (r->resp) {
		MHD_add_response_header(r->resp, "X-Content-Type-Options", "nosniff");
		MHD_add_response_header(r->resp, "Cache-Control", "no-store");
	}
}
