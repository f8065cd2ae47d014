/* db_query.c — the read side of the metadata: paginated tag and repository
 * lists, referrers of a subject, and the administrative listings behind
 * `kiln registry ls|history|public`. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "registry/internal.h"

/* Collects column 0 of st into out, at most n rows (n < 0: all). */
static int collect(reg_db *db, sqlite3_stmt *st, long n, kiln_strv *out, int *more, kiln_error **err)
{
	int rc;

	*more = 0;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n >= 0 && (long)out->n >= n) {
			*more = 1;
			break;
		}
		kiln_strv_push(out, (const char *)sqlite3_column_text(st, 0));
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return reg_db_fail(db, err, "list");
	return 0;
}

int reg_db_tags(reg_db *db, const char *repo, const char *last, long n, kiln_strv *out, int *more, kiln_error **err)
{
	sqlite3_stmt *st;
	int ret = -1;

	pthread_mutex_lock(&db->lock);
	st = reg_db_prep(db, "SELECT t.name FROM tags t JOIN repos r ON r.id = t.repo WHERE r.name = ? AND t.name > ?"
			     " ORDER BY t.name LIMIT ?", err);
	if (st) {
		sqlite3_bind_text(st, 1, repo, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, last ? last : "", -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, n < 0 ? -1 : n + 1);
		ret = collect(db, st, n, out, more, err);
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return ret;
}

int reg_db_catalog(reg_db *db, const char *last, long n, kiln_strv *out, int *more, kiln_error **err)
{
	sqlite3_stmt *st;
	int ret = -1;

	/* Only repositories that hold something: a deleted one disappears. */
	pthread_mutex_lock(&db->lock);
	st = reg_db_prep(db, "SELECT r.name FROM repos r WHERE r.name > ? AND (EXISTS(SELECT 1 FROM manifests m"
			     " WHERE m.repo = r.id) OR EXISTS(SELECT 1 FROM blob_links b WHERE b.repo = r.id))"
			     " ORDER BY r.name LIMIT ?", err);
	if (st) {
		sqlite3_bind_text(st, 1, last ? last : "", -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, n < 0 ? -1 : n + 1);
		ret = collect(db, st, n, out, more, err);
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return ret;
}

int reg_db_blob_holders(reg_db *db, const char *digest, long max, kiln_strv *out, kiln_error **err)
{
	sqlite3_stmt *st;
	int more = 0, ret = -1;

	pthread_mutex_lock(&db->lock);
	st = reg_db_prep(db, "SELECT r.name FROM blob_links b JOIN repos r ON r.id = b.repo WHERE b.digest = ?"
			     " ORDER BY r.name LIMIT ?", err);
	if (st) {
		sqlite3_bind_text(st, 1, digest, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, max + 1);
		ret = collect(db, st, max, out, &more, err);
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return ret;
}

int reg_db_referrers(reg_db *db, const char *repo, const char *subject, const char *artifact_type,
		     json_t *out, kiln_error **err)
{
	sqlite3_stmt *st;
	int ret = -1, rc;

	pthread_mutex_lock(&db->lock);
	st = reg_db_prep(db, "SELECT m.digest, m.media_type, m.size, m.artifact_type, m.annotations FROM manifests m"
			     " JOIN repos r ON r.id = m.repo WHERE r.name = ? AND m.subject = ?"
			     " AND (?3 IS NULL OR m.artifact_type = ?3) ORDER BY m.created, m.digest", err);
	if (st == NULL)
		goto out;
	sqlite3_bind_text(st, 1, repo, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, subject, -1, SQLITE_STATIC);
	if (artifact_type)
		sqlite3_bind_text(st, 3, artifact_type, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		json_t *d = json_object();
		const char *at = (const char *)sqlite3_column_text(st, 3);
		const char *ann = (const char *)sqlite3_column_text(st, 4);

		json_object_set_new(d, "mediaType", json_string((const char *)sqlite3_column_text(st, 1)));
		json_object_set_new(d, "digest", json_string((const char *)sqlite3_column_text(st, 0)));
		json_object_set_new(d, "size", json_integer(sqlite3_column_int64(st, 2)));
		if (at)
			json_object_set_new(d, "artifactType", json_string(at));
		if (ann) {
			json_t *a = json_loads(ann, 0, NULL);
			if (a)
				json_object_set_new(d, "annotations", a);
		}
		json_array_append_new(out, d);
	}
	ret = rc == SQLITE_DONE ? 0 : reg_db_fail(db, err, "referrers");
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return ret;
}

int reg_db_repo_public(reg_db *db, const char *repo, kiln_error **err)
{
	sqlite3_stmt *st;
	int ret = -1, rc;

	pthread_mutex_lock(&db->lock);
	st = reg_db_prep(db, "SELECT public FROM repos WHERE name = ?", err);
	if (st) {
		sqlite3_bind_text(st, 1, repo, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
		ret = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) != 0 : rc == SQLITE_DONE ? 0
											   : reg_db_fail(db, err, "repo");
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return ret;
}

/* ---- administration (own connection on the data directory) ---- */

reg_db *reg_db_open_cfg(const struct reg_config *c, kiln_error **err)
{
	char *path = kiln_path_join(c->data_dir, "meta.db");
	reg_db *db = NULL;

	if (kiln_mkdir_p(c->data_dir, 0755, err) == 0)
		db = reg_db_open(path, err);
	if (db)
		db->quotas = c->quotas;
	free(path);
	return db;
}

int reg_db_list_repos(reg_db *db, const char *prefix, struct reg_repo_info **out, size_t *n, kiln_error **err)
{
	sqlite3_stmt *st = NULL;
	struct reg_repo_info *v = NULL;
	size_t cnt = 0;
	int ret = -1, rc;

	*out = NULL;
	*n = 0;
	st = reg_db_prep(db, "SELECT r.name, r.public, (SELECT count(*) FROM tags t WHERE t.repo = r.id),"
			     " (SELECT count(*) FROM manifests m WHERE m.repo = r.id) FROM repos r"
			     " WHERE substr(r.name, 1, length(?1)) = ?1 ORDER BY r.name", err);
	if (st == NULL)
		goto out;
	sqlite3_bind_text(st, 1, prefix ? prefix : "", -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		v = kiln_xrealloc(v, (cnt + 1) * sizeof(*v));
		v[cnt].name = kiln_xstrdup((const char *)sqlite3_column_text(st, 0));
		v[cnt].public_ = sqlite3_column_int(st, 1);
		v[cnt].tags = sqlite3_column_int64(st, 2);
		v[cnt].manifests = sqlite3_column_int64(st, 3);
		cnt++;
	}
	if (rc != SQLITE_DONE) {
		reg_db_fail(db, err, "list repositories");
		reg_repo_info_free(v, cnt);
		goto out;
	}
	*out = v;
	*n = cnt;
	ret = 0;
out:
	sqlite3_finalize(st);
	return ret;
}

int reg_list_repos(const struct reg_config *c, const char *prefix, struct reg_repo_info **out, size_t *n,
		   kiln_error **err)
{
	struct reg_admin a;
	int ret;

	*out = NULL;
	*n = 0;
	if (reg_admin_open(&a, c, err) < 0)
		return -1;
	ret = a.st.ops->list_repos(&a.st, a.db, prefix, out, n, err);
	reg_admin_close(&a);
	return ret;
}

void reg_repo_info_free(struct reg_repo_info *r, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(r[i].name);
	free(r);
}

int reg_db_history(reg_db *db, const char *repo, const char *tag, kiln_buf *out, kiln_error **err)
{
	sqlite3_stmt *st = NULL;
	int ret = -1, rc, rows = 0;

	st = reg_db_prep(db, "SELECT h.at, h.digest, h.tag, n.note FROM tag_history h JOIN repos r ON r.id = h.repo"
			     " LEFT JOIN tag_notes n ON n.history = h.id"
			     " WHERE r.name = ? AND (?2 IS NULL OR h.tag = ?2) ORDER BY h.id", err);
	if (st == NULL)
		goto out;
	sqlite3_bind_text(st, 1, repo, -1, SQLITE_STATIC);
	if (tag)
		sqlite3_bind_text(st, 2, tag, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		time_t t = (time_t)sqlite3_column_int64(st, 0);
		const char *d = (const char *)sqlite3_column_text(st, 1);
		char when[KILN_TIME_MAX];

		kiln_time_rfc3339(t, when);
		const char *note = (const char *)sqlite3_column_text(st, 3);
		kiln_buf_addf(out, "%s %s %s%s%s\n", when, (const char *)sqlite3_column_text(st, 2), d ? d : "(deleted)",
			      note ? " " : "", note ? note : "");
		rows++;
	}
	if (rc != SQLITE_DONE) {
		reg_db_fail(db, err, "tag history");
		goto out;
	}
	if (rows == 0) {
		kiln_err(err, KILN_E_NOTFOUND, "no history for %s%s%s", repo, tag ? ":" : "", tag ? tag : "");
		goto out;
	}
	ret = 0;
out:
	sqlite3_finalize(st);
	return ret;
}

int reg_tag_history(const struct reg_config *c, const char *repo, const char *tag, kiln_buf *out, kiln_error **err)
{
	struct reg_admin a;
	int ret;

	if (reg_admin_open(&a, c, err) < 0)
		return -1;
	ret = a.st.ops->history(&a.st, a.db, repo, tag, out, err);
	reg_admin_close(&a);
	return ret;
}

int reg_db_set_public(reg_db *db, const char *repo, int public_, kiln_error **err)
{
	sqlite3_stmt *st;
	int64_t id;
	int ret;

	if (reg_db_repo_locked(db, repo, 1, &id, err) < 0)
		return -1;
	st = reg_db_prep(db, "UPDATE repos SET public = ? WHERE id = ?", err);
	if (st == NULL)
		return -1;
	sqlite3_bind_int(st, 1, public_ ? 1 : 0);
	sqlite3_bind_int64(st, 2, id);
	ret = sqlite3_step(st) == SQLITE_DONE ? 0 : reg_db_fail(db, err, "set public");
	sqlite3_finalize(st);
	return ret;
}

int reg_set_public(const struct reg_config *c, const char *repo, int public_, kiln_error **err)
{
	struct reg_admin a;
	int ret;

	if (!oci_name_valid(repo))
		return kiln_err(err, KILN_E_INVALID, "invalid repository name '%s'", repo);
	if (reg_admin_open(&a, c, err) < 0)
		return -1;
	ret = a.st.ops->set_public(&a.st, a.db, repo, public_, err);
	reg_admin_close(&a);
	return ret;
}

int reg_db_tag_note(reg_db *db, const char *repo, const char *tag, const char *digest, const char *note,
		    kiln_error **err)
{
	sqlite3_stmt *st = NULL;
	int ret = -1;

	st = reg_db_prep(db, "INSERT OR REPLACE INTO tag_notes(history, note) SELECT max(h.id), ?4 FROM tag_history h"
			     " JOIN repos r ON r.id = h.repo WHERE r.name = ?1 AND h.tag = ?2 AND h.digest = ?3"
			     " HAVING max(h.id) IS NOT NULL", err);
	if (st == NULL)
		goto out;
	sqlite3_bind_text(st, 1, repo, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, tag, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, digest, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, note, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE) {
		reg_db_fail(db, err, "tag note");
		goto out;
	}
	if (sqlite3_changes(db->h) == 0) {
		kiln_err(err, KILN_E_NOTFOUND, "%s:%s was never %s", repo, tag, digest);
		goto out;
	}
	ret = 0;
out:
	sqlite3_finalize(st);
	return ret;
}

int reg_tag_note(const struct reg_config *c, const char *repo, const char *tag, const char *digest, const char *note,
		 kiln_error **err)
{
	struct reg_admin a;
	int ret;

	if (reg_admin_open(&a, c, err) < 0)
		return -1;
	ret = a.st.ops->tag_note(&a.st, a.db, repo, tag, digest, note, err);
	reg_admin_close(&a);
	return ret;
}

/* ---- usage per team (metrics.c) ---- */

static struct reg_team_usage *team_slot(struct reg_team_usage **v, size_t *n, const char *team)
{
	for (size_t i = 0; i < *n; i++)
		if (strcmp((*v)[i].team, team) == 0)
			return &(*v)[i];
	*v = kiln_xrealloc(*v, (*n + 1) * sizeof(**v));
	(*v)[*n] = (struct reg_team_usage){ .team = kiln_xstrdup(team) };
	return &(*v)[(*n)++];
}

static int cmp_team(const void *a, const void *b)
{
	return strcmp(((const struct reg_team_usage *)a)->team, ((const struct reg_team_usage *)b)->team);
}

int reg_db_team_usage(reg_db *db, struct reg_team_usage **out, size_t *n, kiln_error **err)
{
	/* A team is a name's first segment; a blob or manifest two of its
	 * repositories share is stored once, so it counts once for the team. */
#define TEAM_OF "CASE WHEN instr(name, '/') > 0 THEN substr(name, 1, instr(name, '/') - 1) ELSE name END"
	static const char *const sql[] = {
		"SELECT " TEAM_OF ", count(*), 0 FROM repos GROUP BY 1",
		"SELECT t.team, count(*), 0 FROM tags g JOIN (SELECT id, " TEAM_OF " AS team FROM repos) t"
		" ON t.id = g.repo GROUP BY 1",
		"SELECT team, count(*), coalesce(sum(size), 0) FROM (SELECT DISTINCT t.team, l.digest, l.size"
		" FROM blob_links l JOIN (SELECT id, " TEAM_OF " AS team FROM repos) t ON t.id = l.repo) GROUP BY 1",
		"SELECT team, 0, coalesce(sum(size), 0) FROM (SELECT DISTINCT t.team, m.digest, m.size"
		" FROM manifests m JOIN (SELECT id, " TEAM_OF " AS team FROM repos) t ON t.id = m.repo) GROUP BY 1",
	};
#undef TEAM_OF
	struct reg_team_usage *v = NULL;
	size_t cnt = 0;
	int ret = 0;

	pthread_mutex_lock(&db->lock);
	for (size_t q = 0; q < sizeof(sql) / sizeof(sql[0]) && ret == 0; q++) {
		sqlite3_stmt *st = reg_db_prep(db, sql[q], err);
		int rc;

		if (st == NULL) {
			ret = -1;
			break;
		}
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			struct reg_team_usage *u = team_slot(&v, &cnt, (const char *)sqlite3_column_text(st, 0));
			int64_t a = sqlite3_column_int64(st, 1), b = sqlite3_column_int64(st, 2);
			if (q == 0)
				u->repos = a;
			else if (q == 1)
				u->tags = a;
			else if (q == 2)
				u->blobs = a;
			u->bytes += b;
		}
		if (rc != SQLITE_DONE)
			ret = reg_db_fail(db, err, "usage per team");
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&db->lock);
	if (ret < 0) {
		reg_team_usage_free(v, cnt);
		return -1;
	}
	qsort(v, cnt, sizeof(*v), cmp_team);
	*out = v;
	*n = cnt;
	return 0;
}

int reg_usage(const struct reg_config *c, struct reg_team_usage **out, size_t *n, kiln_error **err)
{
	reg_db *db;
	int ret;

	if (c->s3_endpoint)
		return kiln_err(err, KILN_E_USAGE, "usage per team is counted from the filesystem metadata (meta.db);"
				" with s3 the bucket holds it: not supported yet");
	if ((db = reg_db_open_cfg(c, err)) == NULL)
		return -1;
	ret = reg_db_team_usage(db, out, n, err);
	reg_db_close(db);
	return ret;
}

void reg_team_usage_free(struct reg_team_usage *u, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(u[i].team);
	free(u);
}
