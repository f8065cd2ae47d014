/* gc.c — garbage collection of a data directory, safe while the server runs:
 * a blob goes when no manifest references it and it is older than the grace
 * period (a push in flight uploads blobs before its manifest); it and its
 * links are dropped in one write transaction that re-checks file and
 * references, the same lock a blob commit or manifest PUT holds while it puts
 * bytes in place and records them, so neither can lose the other's data.  Upload
 * sessions idle past their expiry and stale temp files go too. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "registry/internal.h"

struct gc {
	const struct reg_config *c;
	reg_db *db;
	const reg_store *st;
	int dry;
	time_t now;
	struct reg_gc_stats *stats;
};

int reg_gc_referenced(reg_db *db, const char *digest, kiln_error **err)
{
	sqlite3_stmt *st = reg_db_prep(db, "SELECT 1 FROM manifest_refs WHERE digest = ?1 UNION ALL"
					   " SELECT 1 FROM manifests WHERE digest = ?1 LIMIT 1", err);
	int rc;

	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, digest, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return reg_db_fail(db, err, "reference check");
	return rc == SQLITE_ROW;
}

void (*reg_gc_test_hook)(const char *digest);

/* Everything is decided and done inside one write transaction, the lock a
 * commit takes to rename a blob into place and link it (and a manifest PUT to
 * write its bytes): the file is re-examined there, and set aside under a temp
 * name before the links' deletion commits, so a concurrent commit of the same
 * digest either comes after (and writes the file again) or before (and is
 * seen: fresh mtime).  A failed commit puts the file back. */
static int collect_blob(struct gc *g, const char *digest, const char *path, kiln_error **err)
{
	sqlite3_stmt *st = NULL;
	char *aside = kiln_xasprintf("%s.tmp.gc", path);
	struct stat sb;
	int ref, ret = -1, moved = 0;

	if (reg_db_exec(g->db, "BEGIN IMMEDIATE", err) < 0)
		goto out;
	if (lstat(path, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		ret = 0; /* gone meanwhile */
		goto rollback;
	}
	if (g->now - sb.st_mtime < g->c->gc_grace_s) {
		g->stats->blobs_kept++;
		ret = 0;
		goto rollback;
	}
	ref = reg_gc_referenced(g->db, digest, err);
	if (ref < 0)
		goto rollback;
	if (ref || g->dry) {
		ref ? g->stats->blobs_kept++ : (g->stats->blobs_removed++, g->stats->bytes_removed += (uint64_t)sb.st_size);
		ret = 0;
		goto rollback;
	}
	st = reg_db_prep(g->db, "DELETE FROM blob_links WHERE digest = ?", err);
	if (st == NULL)
		goto rollback;
	sqlite3_bind_text(st, 1, digest, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE) {
		reg_db_fail(g->db, err, "unlink blob");
		goto rollback;
	}
	if (rename(path, aside) < 0) {
		kiln_err_errno(err, errno, "set aside %s", path);
		goto rollback;
	}
	moved = 1;
	if (reg_gc_test_hook)
		reg_gc_test_hook(digest);
	if (reg_db_exec(g->db, "COMMIT", err) < 0)
		goto rollback;
	/* Committed: no link names this blob, and any new commit of it renames a
	 * fresh file over `path`, never `aside`. */
	moved = 0;
	if (unlink(aside) < 0 && errno != ENOENT) {
		kiln_err_errno(err, errno, "remove %s", aside);
		goto out;
	}
	g->stats->blobs_removed++;
	g->stats->bytes_removed += (uint64_t)sb.st_size;
	ret = 0;
	goto out;
rollback:
	sqlite3_exec(g->db->h, "ROLLBACK", NULL, NULL, NULL);
	/* The links are back: so must the bytes be (a commit racing in now
	 * would rename identical content here, so overwriting is harmless). */
	if (moved && rename(aside, path) < 0)
		kiln_warn("registry gc: cannot restore %s: %s", path, strerror(errno));
out:
	sqlite3_finalize(st);
	free(aside);
	return ret;
}

/* Temp files: removed under the commit lock, as blob writers hold it (so only
 * leftovers of a crash can be seen).  A blob gc set aside and then crashed
 * before committing still has its links: it goes back (and is judged again
 * next time) unless the blob exists again. */
static int collect_tmp(struct gc *g, const char *path, kiln_error **err)
{
	static const char sfx[] = ".tmp.gc";
	size_t n = strlen(path), k = sizeof(sfx) - 1;
	int aside = n > k && strcmp(path + n - k, sfx) == 0;
	struct stat sb;

	if (reg_db_exec(g->db, "BEGIN IMMEDIATE", err) < 0)
		return -1;
	if (lstat(path, &sb) == 0 && g->now - sb.st_mtime > g->c->gc_grace_s) {
		char *blob = kiln_xstrndup(path, aside ? n - k : n);
		if (aside && access(blob, F_OK) < 0 && errno == ENOENT)
			rename(path, blob);
		else
			unlink(path);
		free(blob);
	}
	sqlite3_exec(g->db->h, "ROLLBACK", NULL, NULL, NULL);
	return 0;
}

/* blobs/ALGO/XX/NAME */
static int sweep_blobs(struct gc *g, kiln_error **err)
{
	static const char *const algos[] = { "sha256", "sha512" };
	int ret = 0;

	for (size_t a = 0; a < 2 && ret == 0; a++) {
		char *adir = kiln_xasprintf("%s/%s", g->st->blobs, algos[a]);
		DIR *d1 = opendir(adir);
		struct dirent *e1;

		while (d1 && ret == 0 && (e1 = readdir(d1))) {
			char *sub;
			DIR *d2;
			struct dirent *e2;

			if (e1->d_name[0] == '.')
				continue;
			sub = kiln_xasprintf("%s/%s", adir, e1->d_name);
			d2 = opendir(sub);
			while (d2 && ret == 0 && (e2 = readdir(d2))) {
				char *path = kiln_xasprintf("%s/%s", sub, e2->d_name);
				char *digest = kiln_xasprintf("%s:%s", algos[a], e2->d_name);
				struct stat sb;

				if (e2->d_name[0] != '.' && lstat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
					if (kiln_digest_parse(digest, NULL, NULL) == 0) {
						ret = collect_blob(g, digest, path, err);
					} else if (strstr(e2->d_name, ".tmp.") && g->now - sb.st_mtime > g->c->gc_grace_s) {
						if (!g->dry)
							ret = collect_tmp(g, path, err);
					}
				}
				free(digest);
				free(path);
			}
			if (d2)
				closedir(d2);
			free(sub);
		}
		if (d1)
			closedir(d1);
		free(adir);
	}
	return ret;
}

static int sweep_uploads(struct gc *g, kiln_error **err)
{
	DIR *d = opendir(g->st->uploads);
	struct dirent *e;
	int ret = 0;

	if (d == NULL)
		return 0;
	while (ret == 0 && (e = readdir(d))) {
		char *dir, *data;
		struct stat sb;
		time_t last;

		if (e->d_name[0] == '.')
			continue;
		dir = kiln_xasprintf("%s/%s", g->st->uploads, e->d_name);
		data = kiln_xasprintf("%s/data", dir);
		/* Idle since the last byte written (or since creation without data). */
		if (stat(data, &sb) == 0 || stat(dir, &sb) == 0) {
			last = sb.st_mtime;
			if (g->now - last >= g->c->upload_expiry_s) {
				if (!g->dry)
					ret = kiln_rm_rf(dir, err);
				g->stats->uploads_removed++;
			}
		}
		free(data);
		free(dir);
	}
	closedir(d);
	return ret;
}

/* The filesystem backend's blob sweep (its table's gc). */
int reg_gc_fs(const reg_store *st, reg_db *db, const struct reg_config *c, int dry_run, struct reg_gc_stats *stats,
	      kiln_error **err)
{
	struct gc g = { .c = c, .db = db, .st = st, .dry = dry_run, .now = time(NULL), .stats = stats };

	return sweep_blobs(&g, err);
}

int reg_gc(const struct reg_config *c, int dry_run, struct reg_gc_stats *st, kiln_error **err)
{
	struct reg_admin a;
	struct gc g = { .c = c, .dry = dry_run, .now = time(NULL), .stats = st };
	int ret = -1;

	memset(st, 0, sizeof(*st));
	if (reg_admin_open(&a, c, err) < 0)
		return kiln_error_wrap(err, "gc %s", c->data_dir);
	g.st = &a.st;
	g.db = a.db;
	if (sweep_uploads(&g, err) < 0 || a.st.ops->gc(&a.st, a.db, c, dry_run, st, err) < 0)
		kiln_error_wrap(err, "gc %s", c->data_dir);
	else
		ret = 0;
	reg_admin_close(&a);
	return ret;
}

/* Counts are added, never set: the table sums every run since the
 * database was made (Prometheus' counters), whichever process ran it. */
static void gc_record(const struct reg_config *c, const char *source, bool ok, const struct reg_gc_run *run)
{
	kiln_error *err = NULL;
	reg_db *db = reg_db_open_cfg(c, &err);
	sqlite3_stmt *st = NULL;

	if (db != NULL)
		st = reg_db_prep(db,
				 "INSERT INTO gc_runs(source, outcome, runs, blobs, bytes, tags, manifests, last)"
				 " VALUES(?1, ?2, 1, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(source, outcome) DO UPDATE SET"
				 " runs = runs + 1, blobs = blobs + ?3, bytes = bytes + ?4, tags = tags + ?5,"
				 " manifests = manifests + ?6, last = ?7", &err);
	if (st != NULL) {
		sqlite3_bind_text(st, 1, source, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, ok ? "ok" : "failed", -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, (sqlite3_int64)run->gc.blobs_removed);
		sqlite3_bind_int64(st, 4, (sqlite3_int64)run->gc.bytes_removed);
		sqlite3_bind_int64(st, 5, (sqlite3_int64)run->retain.tags_removed);
		sqlite3_bind_int64(st, 6, (sqlite3_int64)run->retain.manifests_removed);
		sqlite3_bind_int64(st, 7, reg_db_now());
		if (sqlite3_step(st) != SQLITE_DONE)
			reg_db_fail(db, &err, "count the gc run");
	}
	sqlite3_finalize(st);
	reg_db_close(db);
	/* the run's own outcome stands; a count that could not be kept is only said */
	if (err != NULL)
		kiln_warn("gc: %s", kiln_error_message(err));
	kiln_error_clear(&err);
}

int reg_gc_run(const struct reg_config *c, const char *source, int dry_run, struct reg_gc_run *run, kiln_error **err)
{
	int ret = 0;

	memset(run, 0, sizeof(*run));
	run->retained = c->retention != NULL;
	if (run->retained && reg_retain(c, dry_run, NULL, NULL, &run->retain, err) < 0)
		ret = -1;
	if (ret == 0 && reg_gc(c, dry_run, &run->gc, err) < 0)
		ret = -1;
	if (!dry_run)
		gc_record(c, source, ret == 0, run);
	return ret;
}
