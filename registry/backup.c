/* backup.c — `kiln registry backup|restore`: a consistent copy of a
 * filesystem data directory's metadata taken while it serves (sqlite's online
 * backup API), the list of blobs that copy needs and, optionally, those blobs;
 * and its restore onto a fresh data directory, refused when a blob is lacking. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "registry/internal.h"

#define BACKUP_FORMAT 1

/* The files besides blobs that make a data directory whole: the metadata
 * (registry, build queue) and E2B's names, each a sqlite database; the keys
 * tokens and sandbox access tokens are signed with. */
static const char *const dbs[] = { "meta.db", "e2b/e2b.db" };
static const char *const keys[] = { "auth.key", "sandboxes.key" };

/* A copy of the database at src as one consistent snapshot (a reader's view
 * while writers go on) into dst, via dst.part renamed. */
static int db_copy(const char *src, const char *dst, kiln_error **err)
{
	char *part = kiln_xasprintf("%s.part", dst);
	sqlite3 *s = NULL, *d = NULL;
	sqlite3_backup *b;
	int rc, ret = -1;

	unlink(part);
	if (sqlite3_open_v2(src, &s, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		kiln_err(err, KILN_E_IO, "%s: %s", src, sqlite3_errmsg(s));
		goto out;
	}
	sqlite3_busy_timeout(s, 10000);
	if (sqlite3_open_v2(part, &d, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) {
		kiln_err(err, KILN_E_IO, "%s: %s", part, sqlite3_errmsg(d));
		goto out;
	}
	if ((b = sqlite3_backup_init(d, "main", s, "main")) == NULL) {
		kiln_err(err, KILN_E_IO, "backup of %s: %s", src, sqlite3_errmsg(d));
		goto out;
	}
	/* all pages in one step: one read transaction, so one point in time */
	do
		rc = sqlite3_backup_step(b, -1);
	while (rc == SQLITE_BUSY || rc == SQLITE_LOCKED);
	sqlite3_backup_finish(b);
	if (rc != SQLITE_DONE) {
		kiln_err(err, KILN_E_IO, "backup of %s: %s", src, sqlite3_errstr(rc));
		if ((rc & 0xff) == SQLITE_FULL)
			(*err)->errnum = ENOSPC;
		goto out;
	}
	if (sqlite3_exec(d, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL) != SQLITE_OK) {
		kiln_err(err, KILN_E_IO, "%s: %s", part, sqlite3_errmsg(d));
		goto out;
	}
	if (sqlite3_close(d) != SQLITE_OK) {
		kiln_err(err, KILN_E_IO, "%s: %s", part, sqlite3_errmsg(d));
		goto out;
	}
	d = NULL;
	if (rename(part, dst) < 0) {
		kiln_err_errno(err, errno, "rename %s", part);
		goto out;
	}
	ret = kiln_fsync_parent(dst, err);
out:
	if (d)
		sqlite3_close(d);
	if (s)
		sqlite3_close(s);
	if (ret < 0)
		unlink(part);
	return ret;
}

static int key_copy(const char *src, const char *dst, kiln_error **err)
{
	char *data = NULL;
	size_t len;
	int ret;

	if (access(src, F_OK) != 0)
		return 0;
	if (kiln_read_file(src, &data, &len, 1 << 16, err) < 0)
		return -1;
	ret = kiln_write_atomic(dst, data, len, 0600, err);
	free(data);
	return ret;
}

/* Every blob (layers, configs, chunks, manifests) the metadata at path
 * names, as "DIGEST SIZE" lines, sorted. */
static int needed_blobs(const char *path, kiln_buf *out, uint64_t *n, uint64_t *bytes, kiln_error **err)
{
	sqlite3 *h = NULL;
	sqlite3_stmt *st = NULL;
	int rc, ret = -1;

	*n = *bytes = 0;
	if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(h,
			       "SELECT digest, max(size) FROM (SELECT digest, size FROM blob_links"
			       " UNION ALL SELECT digest, size FROM manifests) GROUP BY digest ORDER BY digest",
			       -1, &st, NULL) != SQLITE_OK) {
		kiln_err(err, KILN_E_IO, "%s: %s", path, sqlite3_errmsg(h));
		goto out;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		kiln_buf_addf(out, "%s %lld\n", (const char *)sqlite3_column_text(st, 0),
			      (long long)sqlite3_column_int64(st, 1));
		(*n)++;
		*bytes += (uint64_t)sqlite3_column_int64(st, 1);
	}
	if (rc != SQLITE_DONE) {
		kiln_err(err, KILN_E_IO, "%s: %s", path, sqlite3_errmsg(h));
		goto out;
	}
	ret = 0;
out:
	sqlite3_finalize(st);
	sqlite3_close(h);
	return ret;
}

static int open_blobs(const char *dir, const char *tmp, kiln_cas **out, kiln_error **err)
{
	const struct kiln_cas_layout lay = { .fanout = true, .mode = 0644, .sync = KILN_CAS_SYNC_FULL, .tmp = tmp };

	if (kiln_mkdir_p(tmp, 0700, err) < 0)
		return -1;
	return kiln_cas_open(dir, &lay, out, err);
}

/* A backup goes to a new or empty directory, or over an earlier backup
 * (whose blobs are kept: a later one copies only the new). */
static int check_dest(const char *dest, kiln_error **err)
{
	DIR *d = opendir(dest);
	struct dirent *e;
	char *marker;
	bool empty = true, ok;

	if (d == NULL)
		return errno == ENOENT ? kiln_mkdir_p(dest, 0700, err) : kiln_err_errno(err, errno, "%s", dest);
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			empty = false;
	closedir(d);
	marker = kiln_path_join(dest, "backup.json");
	ok = empty || access(marker, F_OK) == 0;
	free(marker);
	if (!ok)
		return kiln_err(err, KILN_E_EXISTS,
				"%s is not empty and holds no kiln backup: a backup goes to a new directory", dest);
	return 0;
}

static int blob_size_ok(kiln_cas *c, const char *digest, int64_t size)
{
	char *p = kiln_cas_path(c, digest);
	struct stat sb;
	int ok = stat(p, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == size;

	free(p);
	return ok;
}

/* Each "DIGEST SIZE" line of list in dst, copied (and so verified) from src
 * when dst lacks it; the ones neither has go to missing. */
static int place_blobs(const char *list, kiln_cas *src, kiln_cas *dst, struct reg_backup_stats *st, kiln_error **err)
{
	const char *p = list;

	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		char line[KILN_DIGEST_MAX + 32], digest[KILN_DIGEST_MAX];
		long long size;

		if (len >= sizeof(line) || (memcpy(line, p, len), line[len] = '\0',
					     sscanf(line, "%135s %lld", digest, &size) != 2))
			return kiln_err(err, KILN_E_INVALID, "blobs.txt: a bad line: %.80s", line);
		p += len + (nl != NULL);
		if (blob_size_ok(dst, digest, size))
			continue;
		if (src && blob_size_ok(src, digest, size)) {
			char *from = kiln_cas_path(src, digest);
			int rc = kiln_cas_import(dst, from, digest, false, NULL, NULL, err);
			free(from);
			if (rc < 0)
				return kiln_error_wrap(err, "blob %s", digest);
			st->copied++;
			st->copied_bytes += (uint64_t)size;
			continue;
		}
		kiln_strv_push(&st->missing, digest);
	}
	return 0;
}

int reg_backup(const struct reg_config *c, const char *dest, bool with_blobs, struct reg_backup_stats *st,
	       kiln_error **err)
{
	kiln_buf list = KILN_BUF_INIT;
	kiln_cas *src = NULL, *dst = NULL;
	char *path = NULL, *to = NULL, when[KILN_TIME_MAX];
	json_t *info = NULL;
	int ret = -1;

	memset(st, 0, sizeof(*st));
	if (c->s3_endpoint)
		return kiln_err(err, KILN_E_USAGE,
				"kiln registry backup copies a filesystem data directory; with S3 the metadata is in the "
				"bucket (use the bucket's versioning or replication)");
	path = kiln_path_join(c->data_dir, "meta.db");
	if (access(path, F_OK) != 0) {
		kiln_err_errno(err, errno, "%s: no registry here", path);
		goto out;
	}
	free(path);
	path = NULL;
	if (check_dest(dest, err) < 0)
		goto out;
	kiln_time_rfc3339(time(NULL), when);
	for (size_t i = 0; i < sizeof(dbs) / sizeof(dbs[0]); i++) {
		path = kiln_path_join(c->data_dir, dbs[i]);
		to = kiln_path_join(dest, dbs[i]);
		if (access(path, F_OK) == 0) {
			char *dir = kiln_xstrdup(to);
			*strrchr(dir, '/') = '\0';
			int rc = kiln_mkdir_p(dir, 0700, err) < 0 || db_copy(path, to, err) < 0 ? -1 : 0;
			free(dir);
			if (rc < 0)
				goto out;
		} else if (unlink(to) < 0 && errno != ENOENT) { /* an earlier backup's, since moved away */
			kiln_err_errno(err, errno, "remove %s", to);
			goto out;
		}
		free(path);
		free(to);
		path = to = NULL;
	}
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		path = kiln_path_join(c->data_dir, keys[i]);
		to = kiln_path_join(dest, keys[i]);
		if (key_copy(path, to, err) < 0)
			goto out;
		free(path);
		free(to);
		path = to = NULL;
	}
	/* the list from the copy, so it names exactly what the copy needs */
	path = kiln_path_join(dest, "meta.db");
	if (needed_blobs(path, &list, &st->blobs, &st->bytes, err) < 0)
		goto out;
	free(path);
	path = kiln_path_join(dest, "blobs.txt");
	if (kiln_write_atomic(path, list.buf ? list.buf : "", list.len, 0644, err) < 0)
		goto out;
	if (with_blobs) {
		char *sb = kiln_path_join(c->data_dir, "blobs"), *db = kiln_path_join(dest, "blobs"),
		     *tmp = kiln_path_join(dest, "tmp");
		const struct kiln_cas_layout lay = { .fanout = true, .mode = 0644, .sync = KILN_CAS_SYNC_FULL };
		int rc = kiln_cas_open(sb, &lay, &src, err) < 0 || open_blobs(db, tmp, &dst, err) < 0 ? -1 : 0;
		free(sb);
		free(db);
		free(tmp);
		if (rc < 0 || place_blobs(list.buf ? list.buf : "", src, dst, st, err) < 0)
			goto out;
		if (st->missing.n) {
			/* gc removed one after the copy was taken: its grace period is shorter than the backup */
			kiln_err(err, KILN_E_NOTFOUND, "%zu blobs the metadata names are not in %s/blobs (first: %s)",
				 st->missing.n, c->data_dir, st->missing.v[0]);
			goto out;
		}
	}
	info = json_pack("{s:i,s:s,s:s,s:I,s:I,s:b}", "format", BACKUP_FORMAT, "created", when, "kiln", KILN_VERSION,
			 "blobs", (json_int_t)st->blobs, "bytes", (json_int_t)st->bytes, "with_blobs", with_blobs);
	free(path);
	path = kiln_path_join(dest, "backup.json");
	ret = kiln_json_write_file(path, info, err); /* last: a backup without it is not one */
out:
	json_decref(info);
	kiln_cas_close(src);
	kiln_cas_close(dst);
	kiln_buf_free(&list);
	free(path);
	free(to);
	if (ret < 0)
		kiln_error_wrap(err, "backup to %s", dest);
	return ret;
}

/* A backup a newer kiln made is refused before anything is placed. */
static int schema_check(const char *path, kiln_error **err)
{
	sqlite3 *h = NULL;
	int rc;

	if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		rc = kiln_err(err, KILN_E_IO, "%s: %s", path, h ? sqlite3_errmsg(h) : "out of memory");
	} else {
		rc = reg_db_schema_read(h, err) < 0 ? kiln_error_wrap(err, "restore %s", path) : 0;
	}
	sqlite3_close(h);
	return rc;
}

int reg_restore(const struct reg_config *c, const char *from, struct reg_backup_stats *st, kiln_error **err)
{
	kiln_cas *src = NULL, *dst = NULL;
	char *path = NULL, *to = NULL, *list = NULL;
	json_t *info = NULL;
	size_t len;
	int ret = -1;

	memset(st, 0, sizeof(*st));
	if (c->s3_endpoint)
		return kiln_err(err, KILN_E_USAGE, "kiln registry restore fills a filesystem data directory, not S3");
	path = kiln_path_join(from, "backup.json");
	if ((info = kiln_json_load_file(path, err)) == NULL) {
		kiln_error_wrap(err, "%s is not a complete kiln backup", from);
		goto out;
	}
	if (kiln_json_int(info, "format", 0) != BACKUP_FORMAT) {
		kiln_err(err, KILN_E_INVALID, "%s: backup format %lld, this kiln reads %d", path,
			 (long long)kiln_json_int(info, "format", 0), BACKUP_FORMAT);
		goto out;
	}
	free(path);
	path = kiln_path_join(c->data_dir, "meta.db");
	if (access(path, F_OK) == 0) {
		kiln_err(err, KILN_E_EXISTS, "%s exists: a restore goes to a fresh data directory (nothing was changed)",
			 path);
		goto out;
	}
	free(path);
	path = kiln_path_join(from, "meta.db");
	if (schema_check(path, err) < 0)
		goto out;
	free(path);
	path = kiln_path_join(from, "blobs.txt");
	if (kiln_read_file(path, &list, &len, 0, err) < 0)
		goto out;
	{
		char *sb = kiln_path_join(from, "blobs"), *db = kiln_path_join(c->data_dir, "blobs"),
		     *tmp = kiln_path_join(c->data_dir, "uploads");
		const struct kiln_cas_layout lay = { .fanout = true, .mode = 0644, .sync = KILN_CAS_SYNC_FULL };
		int rc = (access(sb, F_OK) == 0 && kiln_cas_open(sb, &lay, &src, err) < 0) ||
				 kiln_mkdir_p(c->data_dir, 0755, err) < 0 || open_blobs(db, tmp, &dst, err) < 0
			 ? -1
			 : 0;
		free(sb);
		free(db);
		free(tmp);
		if (rc < 0 || place_blobs(list, src, dst, st, err) < 0)
			goto out;
	}
	if (st->missing.n) {
		kiln_buf b = KILN_BUF_INIT;
		for (size_t i = 0; i < st->missing.n && i < 10; i++)
			kiln_buf_addf(&b, "%s%s", i ? ", " : "", st->missing.v[i]);
		kiln_err(err, KILN_E_NOTFOUND,
			 "%zu blobs the backup's metadata needs are in neither %s/blobs nor %s/blobs: %s%s; no metadata "
			 "restored (copy them into %s/blobs and run it again)",
			 st->missing.n, c->data_dir, from, b.buf, st->missing.n > 10 ? ", ..." : "", c->data_dir);
		kiln_buf_free(&b);
		goto out;
	}
	st->blobs = (uint64_t)kiln_json_int(info, "blobs", 0);
	st->bytes = (uint64_t)kiln_json_int(info, "bytes", 0);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		free(path);
		free(to);
		path = kiln_path_join(from, keys[i]);
		to = kiln_path_join(c->data_dir, keys[i]);
		if (key_copy(path, to, err) < 0)
			goto out;
	}
	/* meta.db last: until it is there, the directory serves nothing */
	for (size_t i = sizeof(dbs) / sizeof(dbs[0]); i-- > 0;) {
		free(path);
		free(to);
		path = kiln_path_join(from, dbs[i]);
		to = kiln_path_join(c->data_dir, dbs[i]);
		if (access(path, F_OK) != 0)
			continue;
		char *dir = kiln_xstrdup(to);
		*strrchr(dir, '/') = '\0';
		int rc = kiln_mkdir_p(dir, 0755, err) < 0 || db_copy(path, to, err) < 0 ? -1 : 0;
		free(dir);
		if (rc < 0)
			goto out;
	}
	ret = 0;
out:
	json_decref(info);
	kiln_cas_close(src);
	kiln_cas_close(dst);
	free(list);
	free(path);
	free(to);
	if (ret < 0)
		kiln_error_wrap(err, "restore from %s", from);
	return ret;
}

void reg_backup_stats_free(struct reg_backup_stats *st)
{
	kiln_strv_free(&st->missing);
}
