/* db.c — the registry's metadata in sqlite (WAL, synchronous=FULL): which
 * blobs each repository holds, manifests and what they reference, tags and
 * their history, tokens.  Blob bytes are never here, only in the store.  One
 * connection per process, serialised by a mutex; other processes (gc, ls)
 * share the file through WAL. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "registry/internal.h"

static const char schema[] =
	"CREATE TABLE IF NOT EXISTS repos(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
	" public INTEGER NOT NULL DEFAULT 0, created INTEGER NOT NULL);"
	"CREATE TABLE IF NOT EXISTS blob_links(repo INTEGER NOT NULL, digest TEXT NOT NULL,"
	" size INTEGER NOT NULL, created INTEGER NOT NULL, PRIMARY KEY(repo, digest)) WITHOUT ROWID;"
	"CREATE INDEX IF NOT EXISTS blob_links_digest ON blob_links(digest);"
	"CREATE TABLE IF NOT EXISTS manifests(repo INTEGER NOT NULL, digest TEXT NOT NULL,"
	" media_type TEXT NOT NULL, size INTEGER NOT NULL, artifact_type TEXT, subject TEXT,"
	" annotations TEXT, created INTEGER NOT NULL, PRIMARY KEY(repo, digest)) WITHOUT ROWID;"
	"CREATE INDEX IF NOT EXISTS manifests_subject ON manifests(repo, subject);"
	"CREATE INDEX IF NOT EXISTS manifests_digest ON manifests(digest);"
	"CREATE TABLE IF NOT EXISTS manifest_refs(repo INTEGER NOT NULL, manifest TEXT NOT NULL,"
	" digest TEXT NOT NULL, kind INTEGER NOT NULL, PRIMARY KEY(repo, manifest, digest, kind)) WITHOUT ROWID;"
	"CREATE INDEX IF NOT EXISTS manifest_refs_digest ON manifest_refs(digest);"
	"CREATE TABLE IF NOT EXISTS tags(repo INTEGER NOT NULL, name TEXT NOT NULL, digest TEXT NOT NULL,"
	" updated INTEGER NOT NULL, PRIMARY KEY(repo, name)) WITHOUT ROWID;"
	/* the tags of a manifest (its DELETE, retention's "does a tag hold it") */
	"CREATE INDEX IF NOT EXISTS tags_digest ON tags(repo, digest);"
	"CREATE TABLE IF NOT EXISTS tag_history(id INTEGER PRIMARY KEY, repo INTEGER NOT NULL,"
	" tag TEXT NOT NULL, digest TEXT, at INTEGER NOT NULL);"
	/* what another module says about a change of a tag (the build service: its build id) */
	"CREATE TABLE IF NOT EXISTS tag_notes(history INTEGER PRIMARY KEY, note TEXT NOT NULL);"
	"CREATE TABLE IF NOT EXISTS tokens(id INTEGER PRIMARY KEY, label TEXT UNIQUE NOT NULL,"
	" hash TEXT UNIQUE NOT NULL, scopes TEXT NOT NULL, created INTEGER NOT NULL, expires INTEGER NOT NULL);"
	/* `kiln registry quota` (quota.c): team "*" for every team */
	"CREATE TABLE IF NOT EXISTS quotas(team TEXT NOT NULL, key TEXT NOT NULL, value INTEGER NOT NULL,"
	" PRIMARY KEY(team, key)) WITHOUT ROWID;"
	/* gc runs counted by source ("cli", "timer") and outcome (gc.c), for /metrics */
	"CREATE TABLE IF NOT EXISTS gc_runs(source TEXT NOT NULL, outcome TEXT NOT NULL, runs INTEGER NOT NULL,"
	" blobs INTEGER NOT NULL, bytes INTEGER NOT NULL, tags INTEGER NOT NULL, manifests INTEGER NOT NULL,"
	" last INTEGER NOT NULL, PRIMARY KEY(source, outcome)) WITHOUT ROWID;";

/* The schema's version, kept in PRAGMA user_version (docs/operations.md
 * "Upgrades"): 0 is a database made before versions were kept, which the
 * statements above complete (every change up to 1 added tables or indexes).
 * A later change that is not additive becomes a step from N to N+1 here. */
#define REG_DB_SCHEMA 1

/* sqlite says SQLITE_FULL for a full disk; it becomes ENOSPC here so every
 * caller up the stack (and the HTTP answer) tells a full disk from a bug. */
static void db_note_full(sqlite3 *h, kiln_error *e)
{
	if (e != NULL && e->errnum == 0 && (sqlite3_errcode(h) & 0xff) == SQLITE_FULL)
		e->errnum = ENOSPC;
}

int reg_db_fail(reg_db *db, kiln_error **err, const char *what)
{
	kiln_err(err, KILN_E_IO, "metadata db: %s: %s", what, sqlite3_errmsg(db->h));
	db_note_full(db->h, err ? *err : NULL);
	return -1;
}

sqlite3_stmt *reg_db_prep(reg_db *db, const char *sql, kiln_error **err)
{
	sqlite3_stmt *st = NULL;

	if (sqlite3_prepare_v2(db->h, sql, -1, &st, NULL) != SQLITE_OK) {
		reg_db_fail(db, err, "prepare");
		return NULL;
	}
	return st;
}

int reg_db_exec(reg_db *db, const char *sql, kiln_error **err)
{
	char *msg = NULL;

	if (sqlite3_exec(db->h, sql, NULL, NULL, &msg) != SQLITE_OK) {
		kiln_err(err, KILN_E_IO, "metadata db: %s", msg ? msg : sqlite3_errmsg(db->h));
		db_note_full(db->h, err ? *err : NULL);
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

/* The version of an open database, or KILN_E_INVALID when a newer kiln wrote it. */
int reg_db_schema_read(sqlite3 *h, kiln_error **err)
{
	sqlite3_stmt *st = NULL;
	int v = -1;

	if (sqlite3_prepare_v2(h, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	if (v < 0)
		return kiln_err(err, KILN_E_IO, "cannot read its schema version: %s", sqlite3_errmsg(h));
	if (v > REG_DB_SCHEMA)
		return kiln_err(err, KILN_E_INVALID,
				"its schema version %d is newer than this kiln's %d (kiln %s): a newer kiln wrote it; "
				"run that kiln or a later one, or restore a backup taken before the upgrade "
				"(nothing was changed)",
				v, REG_DB_SCHEMA, KILN_VERSION);
	return v;
}

/* Older databases are brought to REG_DB_SCHEMA in one transaction; two
 * processes opening one at once are serialised by its write lock, and the
 * second finds the work done. */
static int migrate(reg_db *db, const char *path, kiln_error **err)
{
	int v = reg_db_schema_read(db->h, err);
	char set[40];

	if (v < 0)
		return -1;
	if (v == REG_DB_SCHEMA)
		return 0;
	if (reg_db_exec(db, "BEGIN IMMEDIATE", err) < 0)
		return -1;
	if ((v = reg_db_schema_read(db->h, err)) < 0)
		goto rollback;
	snprintf(set, sizeof(set), "PRAGMA user_version = %d", REG_DB_SCHEMA);
	if (v < REG_DB_SCHEMA && (reg_db_exec(db, schema, err) < 0 || reg_db_exec(db, set, err) < 0))
		goto rollback;
	if (reg_db_exec(db, "COMMIT", err) < 0)
		goto rollback;
	if (v < REG_DB_SCHEMA)
		kiln_info("metadata db %s: schema version %d -> %d", path, v, REG_DB_SCHEMA);
	return 0;
rollback:
	sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
	return kiln_error_wrap(err, "migrate schema version %d to %d", v, REG_DB_SCHEMA);
}

reg_db *reg_db_open(const char *path, kiln_error **err)
{
	reg_db *db = kiln_xcalloc(1, sizeof(*db));

	pthread_mutex_init(&db->lock, NULL);
	reg_db_group_init(db);
	if (sqlite3_open_v2(path, &db->h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) !=
	    SQLITE_OK) {
		kiln_err(err, KILN_E_IO, "open metadata db %s: %s", path, db->h ? sqlite3_errmsg(db->h) : "out of memory");
		goto fail;
	}
	sqlite3_busy_timeout(db->h, 10000);
	/* the version first: a newer kiln's database is refused before anything here writes to it */
	if (reg_db_schema_read(db->h, err) < 0 ||
	    reg_db_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;", err) < 0 || migrate(db, path, err) < 0) {
		kiln_error_wrap(err, "open metadata db %s", path);
		goto fail;
	}
	return db;
fail:
	reg_db_close(db);
	return NULL;
}

void reg_db_close(reg_db *db)
{
	if (db == NULL)
		return;
	sqlite3_close(db->h);
	pthread_mutex_destroy(&db->lock);
	reg_db_group_destroy(db);
	free(db);
}

int64_t reg_db_now(void)
{
	return (int64_t)time(NULL);
}

/* Caller holds the lock. */
int reg_db_repo_locked(reg_db *db, const char *name, int create, int64_t *id, kiln_error **err)
{
	sqlite3_stmt *st = reg_db_prep(db, "SELECT id FROM repos WHERE name = ?", err);
	int rc;

	*id = 0;
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		*id = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return reg_db_fail(db, err, "repo lookup");
	if (*id || !create)
		return 0;
	if (reg_db_quota_repo_locked(db, name, err) < 0)
		return -1;
	st = reg_db_prep(db, "INSERT INTO repos(name, created) VALUES(?, ?)", err);
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, reg_db_now());
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return reg_db_fail(db, err, "create repo");
	*id = sqlite3_last_insert_rowid(db->h);
	return 0;
}

int reg_db_repo(reg_db *db, const char *name, int create, int64_t *id, kiln_error **err)
{
	int ret;

	pthread_mutex_lock(&db->lock);
	ret = reg_db_repo_locked(db, name, create, id, err);
	pthread_mutex_unlock(&db->lock);
	return ret;
}

/* Already linked in repo id (a mount onto itself): 1/0. */
int reg_db_blob_linked_locked(reg_db *db, int64_t id, const char *digest)
{
	sqlite3_stmt *st = reg_db_prep(db, "SELECT 1 FROM blob_links WHERE repo = ? AND digest = ?", NULL);
	int ret;

	if (st == NULL)
		return 0;
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_text(st, 2, digest, -1, SQLITE_STATIC);
	ret = sqlite3_step(st) == SQLITE_ROW;
	sqlite3_finalize(st);
	return ret;
}

int reg_db_blob_linked(reg_db *db, const char *repo, const char *digest, int64_t *size, kiln_error **err)
{
	sqlite3_stmt *st;
	int ret = -1, rc;

	pthread_mutex_lock(&db->lock);
	st = reg_db_prep(db, "SELECT b.size FROM blob_links b JOIN repos r ON r.id = b.repo"
			     " WHERE r.name = ? AND b.digest = ?", err);
	if (st == NULL)
		goto out;
	sqlite3_bind_text(st, 1, repo, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, digest, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		if (size)
			*size = sqlite3_column_int64(st, 0);
		ret = 1;
	} else if (rc == SQLITE_DONE) {
		ret = 0;
	} else {
		reg_db_fail(db, err, "blob lookup");
	}
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return ret;
}

/* Runs one statement binding (repo id, text a[, text b]); returns rows changed or -1. */
int reg_db_change(reg_db *db, const char *sql, int64_t id, const char *a, const char *b, kiln_error **err)
{
	sqlite3_stmt *st = reg_db_prep(db, sql, err);
	int ret;

	if (st == NULL)
		return -1;
	sqlite3_bind_int64(st, 1, id);
	if (a)
		sqlite3_bind_text(st, 2, a, -1, SQLITE_STATIC);
	if (b)
		sqlite3_bind_text(st, 3, b, -1, SQLITE_STATIC);
	ret = sqlite3_step(st) == SQLITE_DONE ? sqlite3_changes(db->h) : reg_db_fail(db, err, "update");
	sqlite3_finalize(st);
	return ret;
}

int reg_db_blob_unlink(reg_db *db, const char *repo, const char *digest, kiln_error **err)
{
	int64_t id;
	int ret = -1;

	pthread_mutex_lock(&db->lock);
	if (reg_db_repo_locked(db, repo, 0, &id, err) < 0)
		goto out;
	ret = id ? reg_db_change(db, "DELETE FROM blob_links WHERE repo = ? AND digest = ?", id, digest, NULL, err) : 0;
out:
	pthread_mutex_unlock(&db->lock);
	return ret;
}

static int add_history(reg_db *db, int64_t id, const char *tag, const char *digest, kiln_error **err)
{
	sqlite3_stmt *st = reg_db_prep(db, "INSERT INTO tag_history(repo, tag, digest, at) VALUES(?, ?, ?, ?)", err);
	int ret;

	if (st == NULL)
		return -1;
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_text(st, 2, tag, -1, SQLITE_STATIC);
	if (digest)
		sqlite3_bind_text(st, 3, digest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, reg_db_now());
	ret = sqlite3_step(st) == SQLITE_DONE ? 0 : reg_db_fail(db, err, "tag history");
	sqlite3_finalize(st);
	return ret;
}

static int put_tag(reg_db *db, int64_t id, const char *tag, const char *digest, kiln_error **err)
{
	sqlite3_stmt *st = reg_db_prep(db, "SELECT digest FROM tags WHERE repo = ? AND name = ?", err);
	int same = 0, ret;

	if (st == NULL)
		return -1;
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_text(st, 2, tag, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		same = strcmp((const char *)sqlite3_column_text(st, 0), digest) == 0;
	sqlite3_finalize(st);
	if (same)
		return 0;
	st = reg_db_prep(db, "INSERT OR REPLACE INTO tags(repo, name, digest, updated) VALUES(?, ?, ?, ?)", err);
	if (st == NULL)
		return -1;
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_text(st, 2, tag, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, digest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, reg_db_now());
	ret = sqlite3_step(st) == SQLITE_DONE ? 0 : reg_db_fail(db, err, "set tag");
	sqlite3_finalize(st);
	return ret < 0 ? -1 : add_history(db, id, tag, digest, err);
}

/* Inside the manifest's transaction, so gc (which unlinks in its own write
 * transaction) can never remove what a manifest is being made to reference.
 * Returns the index of the first missing ref, nrefs when all exist, -1 error. */
static long missing_ref(reg_db *db, int64_t id, const struct oci_manifest *m, kiln_error **err)
{
	sqlite3_stmt *blob = reg_db_prep(db, "SELECT 1 FROM blob_links WHERE repo = ? AND digest = ?", err);
	sqlite3_stmt *man = blob ? reg_db_prep(db, "SELECT 1 FROM manifests WHERE repo = ? AND digest = ?", err) : NULL;
	long ret = -1;
	size_t i;

	if (man == NULL)
		goto out;
	for (i = 0; i < m->nrefs; i++) {
		sqlite3_stmt *st = m->refs[i].kind == OCI_REF_MANIFEST ? man : blob;
		int rc;

		if (m->refs[i].external)
			continue;
		sqlite3_reset(st);
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_text(st, 2, m->refs[i].digest, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
		if (rc == SQLITE_DONE)
			break;
		if (rc != SQLITE_ROW) {
			reg_db_fail(db, err, "reference lookup");
			goto out;
		}
	}
	ret = (long)i;
out:
	sqlite3_finalize(blob);
	sqlite3_finalize(man);
	return ret;
}

int reg_db_manifest_put(reg_db *db, const char *repo, const char *digest, int64_t size,
			const struct oci_manifest *m, const char *tag, reg_db_place_fn place, void *ud, long *missing,
			kiln_error **err)
{
	sqlite3_stmt *st = NULL;
	char *ann = NULL;
	int64_t id;
	int ret = -1;

	pthread_mutex_lock(&db->lock);
	if (reg_db_exec(db, "BEGIN IMMEDIATE", err) < 0)
		goto unlock;
	if (reg_db_repo_locked(db, repo, 1, &id, err) < 0)
		goto rollback;
	*missing = missing_ref(db, id, m, err);
	if (*missing < 0)
		goto rollback;
	if ((size_t)*missing < m->nrefs) {
		ret = 0;
		goto rollback;
	}
	if (reg_db_quota_add_locked(db, &(struct reg_quota_acc){ 0 }, repo, digest, size, true, err) < 0)
		goto rollback;
	/* The bytes go in under the same lock gc takes to remove a blob file. */
	if (place && place(ud, err) < 0)
		goto rollback;
	st = reg_db_prep(db, "INSERT OR REPLACE INTO manifests(repo, digest, media_type, size, artifact_type, subject,"
			     " annotations, created) VALUES(?, ?, ?, ?, ?, ?, ?, ?)", err);
	if (st == NULL)
		goto rollback;
	if (m->annotations)
		ann = json_dumps(m->annotations, JSON_COMPACT | JSON_SORT_KEYS);
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_text(st, 2, digest, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, m->media_type, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, size);
	if (m->artifact_type)
		sqlite3_bind_text(st, 5, m->artifact_type, -1, SQLITE_STATIC);
	if (m->subject[0])
		sqlite3_bind_text(st, 6, m->subject, -1, SQLITE_STATIC);
	if (ann)
		sqlite3_bind_text(st, 7, ann, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 8, reg_db_now());
	if (sqlite3_step(st) != SQLITE_DONE) {
		reg_db_fail(db, err, "store manifest");
		goto rollback;
	}
	sqlite3_finalize(st);
	st = reg_db_prep(db, "INSERT OR IGNORE INTO manifest_refs(repo, manifest, digest, kind) VALUES(?, ?, ?, ?)", err);
	if (st == NULL)
		goto rollback;
	for (size_t i = 0; i < m->nrefs; i++) {
		sqlite3_reset(st);
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_text(st, 2, digest, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, m->refs[i].digest, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 4, (int)m->refs[i].kind);
		if (sqlite3_step(st) != SQLITE_DONE) {
			reg_db_fail(db, err, "store manifest references");
			goto rollback;
		}
	}
	if (tag && put_tag(db, id, tag, digest, err) < 0)
		goto rollback;
	if (reg_db_exec(db, "COMMIT", err) < 0)
		goto rollback;
	ret = 1;
	goto unlock;
rollback:
	sqlite3_finalize(st);
	st = NULL;
	sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
unlock:
	sqlite3_finalize(st);
	free(ann);
	pthread_mutex_unlock(&db->lock);
	return ret;
}

int reg_db_manifest_get(reg_db *db, const char *repo, const char *ref, char digest[KILN_DIGEST_MAX],
			char **media_type, int64_t *size, kiln_error **err)
{
	int by_digest = strchr(ref, ':') != NULL;
	sqlite3_stmt *st;
	int ret = -1, rc;

	pthread_mutex_lock(&db->lock);
	st = reg_db_prep(db, by_digest ? "SELECT m.digest, m.media_type, m.size FROM manifests m JOIN repos r ON r.id = m.repo"
					 " WHERE r.name = ? AND m.digest = ?"
				       : "SELECT m.digest, m.media_type, m.size FROM tags t JOIN repos r ON r.id = t.repo"
					 " JOIN manifests m ON m.repo = t.repo AND m.digest = t.digest"
					 " WHERE r.name = ? AND t.name = ?",
			 err);
	if (st == NULL)
		goto out;
	sqlite3_bind_text(st, 1, repo, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, ref, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		snprintf(digest, KILN_DIGEST_MAX, "%s", (const char *)sqlite3_column_text(st, 0));
		if (media_type)
			*media_type = kiln_xstrdup((const char *)sqlite3_column_text(st, 1));
		if (size)
			*size = sqlite3_column_int64(st, 2);
		ret = 1;
	} else {
		ret = rc == SQLITE_DONE ? 0 : reg_db_fail(db, err, "manifest lookup");
	}
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return ret;
}

/* The caller holds the lock inside a write transaction (a user's DELETE,
 * retention): 1 removed, 0 not there, -1 error. */
int reg_db_manifest_delete_locked(reg_db *db, int64_t id, const char *digest, kiln_error **err)
{
	sqlite3_stmt *st;
	int n = reg_db_change(db, "DELETE FROM manifests WHERE repo = ? AND digest = ?", id, digest, NULL, err);

	if (n <= 0)
		return n;
	/* Record the untagging of every tag that pointed here. */
	st = reg_db_prep(db, "INSERT INTO tag_history(repo, tag, digest, at) SELECT repo, name, NULL, ? FROM tags"
			     " WHERE repo = ? AND digest = ?", err);
	if (st == NULL)
		return -1;
	sqlite3_bind_int64(st, 1, reg_db_now());
	sqlite3_bind_int64(st, 2, id);
	sqlite3_bind_text(st, 3, digest, -1, SQLITE_STATIC);
	n = sqlite3_step(st);
	sqlite3_finalize(st);
	if (n != SQLITE_DONE)
		return reg_db_fail(db, err, "tag history");
	if (reg_db_change(db, "DELETE FROM tags WHERE repo = ? AND digest = ?", id, digest, NULL, err) < 0 ||
	    reg_db_change(db, "DELETE FROM manifest_refs WHERE repo = ? AND manifest = ?", id, digest, NULL, err) < 0)
		return -1;
	return 1;
}

int reg_db_manifest_delete(reg_db *db, const char *repo, const char *digest, kiln_error **err)
{
	int64_t id;
	int ret = -1;

	pthread_mutex_lock(&db->lock);
	if (reg_db_exec(db, "BEGIN IMMEDIATE", err) < 0)
		goto unlock;
	if (reg_db_repo_locked(db, repo, 0, &id, err) < 0)
		goto rollback;
	ret = id ? reg_db_manifest_delete_locked(db, id, digest, err) : 0;
	if (ret > 0 && reg_db_exec(db, "COMMIT", err) == 0)
		goto unlock;
	ret = ret > 0 ? -1 : ret;
rollback:
	sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
unlock:
	pthread_mutex_unlock(&db->lock);
	return ret;
}

/* The caller holds the lock: 1 removed, 0 no such tag, -1 error. */
int reg_db_tag_delete_locked(reg_db *db, int64_t id, const char *tag, kiln_error **err)
{
	int ret = reg_db_change(db, "DELETE FROM tags WHERE repo = ? AND name = ?", id, tag, NULL, err);

	return ret > 0 ? (add_history(db, id, tag, NULL, err) < 0 ? -1 : 1) : ret;
}

int reg_db_tag_delete(reg_db *db, const char *repo, const char *tag, kiln_error **err)
{
	int64_t id;
	int ret = -1;

	pthread_mutex_lock(&db->lock);
	if (reg_db_repo_locked(db, repo, 0, &id, err) == 0)
		ret = id ? reg_db_tag_delete_locked(db, id, tag, err) : 0;
	pthread_mutex_unlock(&db->lock);
	return ret;
}

int reg_db_blob_mount(reg_db *db, const char *repo, const char *from, const char *digest, kiln_error **err)
{
	sqlite3_stmt *st = NULL;
	int64_t id;
	int ret = -1;

	pthread_mutex_lock(&db->lock);
	if (reg_db_repo_locked(db, repo, 1, &id, err) < 0)
		goto out;
	/* a mount from another team's repository stores the blob for this one too */
	st = reg_db_prep(db, "SELECT b.size FROM blob_links b JOIN repos r ON r.id = b.repo WHERE r.name = ? AND b.digest = ?",
			 err);
	if (st == NULL)
		goto out;
	sqlite3_bind_text(st, 1, from, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, digest, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW &&
	    reg_db_quota_add_locked(db, &(struct reg_quota_acc){ 0 }, repo, digest, sqlite3_column_int64(st, 0), false,
				    err) < 0)
		goto out;
	sqlite3_finalize(st);
	/* One statement: the link is copied only if the source still has it. */
	st = reg_db_prep(db, "INSERT OR IGNORE INTO blob_links(repo, digest, size, created) SELECT ?, b.digest, b.size, ?"
			     " FROM blob_links b JOIN repos r ON r.id = b.repo WHERE r.name = ? AND b.digest = ?", err);
	if (st == NULL)
		goto out;
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, reg_db_now());
	sqlite3_bind_text(st, 3, from, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, digest, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE) {
		reg_db_fail(db, err, "mount blob");
		goto out;
	}
	ret = sqlite3_changes(db->h) > 0 ? 1 : reg_db_blob_linked_locked(db, id, digest);
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return ret;
}
