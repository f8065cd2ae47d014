/* db_group.c — group commit of blob links (filesystem backend).  Each upload
 * used to cost its own write transaction: a directory fsync after its rename
 * and a sqlite commit (WAL fsync), one blob after another under the commit
 * lock.  Now the links that arrive while a group commits wait and go together
 * in the next one: every rename, one fsync per distinct directory (one
 * syncfs when there are many: a batch upload's), one commit.  No window is waited for: a lone upload commits at once.  A caller
 * returns (and the client gets its 201) only after its group's commit. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registry/internal.h"

struct reg_db_commit {
	const char *repo;
	struct reg_db_link l;
	size_t set;         /* on the first link of a set: its size (the links that stand or fall together) */
	int done, rc;
	kiln_error *err;
	struct reg_db_commit *next;
};

/* More distinct directories than this in a group: one syncfs(2) of the
 * store's filesystem instead of an fsync of each (a batch upload places its
 * blobs in up to 256 fan-out directories; 256 fsyncs took 160-290 ms here,
 * one syncfs 2-8 ms). */
#define SYNCFS_DIRS 8

/* Test hook: the leader calls it before it commits a group (tests/unit). */
void (*reg_db_group_test_hook)(reg_db *db, size_t n);

void reg_db_group_init(reg_db *db)
{
	pthread_mutex_init(&db->glock, NULL);
	pthread_cond_init(&db->gdone, NULL);
	db->gqueue = NULL;
	db->gtail = &db->gqueue;
}

void reg_db_group_destroy(reg_db *db)
{
	pthread_cond_destroy(&db->gdone);
	pthread_mutex_destroy(&db->glock);
}

/* A set of links (one upload, or a batch's) inside the group's transaction,
 * under its own savepoint: a failed one undoes its whole set, and only it.
 * Caller holds db->lock. */
static void link_set(reg_db *db, sqlite3_stmt *ins, struct reg_db_commit *first)
{
	struct reg_db_commit *c = first, *bad = NULL;
	struct reg_quota_acc quota = { 0 };
	kiln_error *err = NULL;
	int64_t id;

	if (reg_db_exec(db, "SAVEPOINT blob", &err) < 0 || reg_db_repo_locked(db, first->repo, 1, &id, &err) < 0) {
		bad = first;
		goto fail;
	}
	for (size_t i = 0; i < first->set; i++, c = c->next) {
		if (reg_db_quota_add_locked(db, &quota, first->repo, c->l.digest, c->l.size, false, &err) < 0 ||
		    (c->l.place && c->l.place(c->l.ud, &err) < 0)) {
			bad = c;
			goto undo;
		}
		sqlite3_reset(ins);
		sqlite3_bind_int64(ins, 1, id);
		sqlite3_bind_text(ins, 2, c->l.digest, -1, SQLITE_STATIC);
		sqlite3_bind_int64(ins, 3, c->l.size);
		sqlite3_bind_int64(ins, 4, reg_db_now());
		if (sqlite3_step(ins) != SQLITE_DONE) {
			reg_db_fail(db, &err, "link blob");
			bad = c;
			goto undo;
		}
	}
	if (reg_db_exec(db, "RELEASE blob", &err) == 0)
		return;
	bad = first;
undo:
	sqlite3_exec(db->h, "ROLLBACK TO blob; RELEASE blob", NULL, NULL, NULL);
fail:
	if (err == NULL)
		kiln_err(&err, KILN_E_IO, "linking blob %s failed", bad->l.digest);
	c = first;
	for (size_t i = 0; i < first->set; i++, c = c->next) {
		c->rc = -1;
		if (c == bad)
			c->err = err;
		else
			kiln_err(&c->err, err ? err->kind : KILN_E_IO, "blob %s: not linked (%s failed: %s)", c->l.digest,
				 bad->l.digest, err ? kiln_error_message(err) : "?");
	}
}

/* fsync the directory of path unless an earlier link of the group did. */
static int sync_dir(kiln_strv *done, const char *path, kiln_error **err)
{
	char *dir = kiln_xstrndup(path, (size_t)(strrchr(path, '/') - path));
	int fd, rc = 0;

	for (size_t i = 0; i < done->n; i++)
		if (strcmp(done->v[i], dir) == 0) {
			free(dir);
			return 0;
		}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		rc = kiln_err_errno(err, errno, "fsync %s", dir);
	if (fd >= 0)
		close(fd);
	kiln_strv_push_owned(done, dir);
	return rc;
}

/* An fd on the directory above path's (blobs/ALGO, the fan-out directories'
 * parent), opened before the renames so that syncfs reports any writeback
 * error from then on; -1 when it does not exist yet (per-directory fsyncs). */
static int store_fd(const char *path)
{
	char *d = kiln_xstrdup(path), *slash;
	int fd = -1;

	for (int i = 0; i < 2 && (slash = strrchr(d, '/')) != NULL; i++)
		*slash = '\0';
	if (slash)
		fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(d);
	return fd;
}

/* How many distinct directories the group's renames go to (up to SYNCFS_DIRS + 1). */
static size_t count_dirs(const struct reg_db_commit *g)
{
	kiln_strv seen = KILN_STRV_INIT;

	for (const struct reg_db_commit *c = g; c && seen.n <= SYNCFS_DIRS; c = c->next) {
		if (!c->l.sync_path)
			continue;
		char *dir = kiln_xstrndup(c->l.sync_path, (size_t)(strrchr(c->l.sync_path, '/') - c->l.sync_path));
		size_t i = 0;
		while (i < seen.n && strcmp(seen.v[i], dir) != 0)
			i++;
		if (i == seen.n)
			kiln_strv_push_owned(&seen, dir);
		else
			free(dir);
	}
	size_t n = seen.n;
	kiln_strv_free(&seen);
	return n;
}

static void run_group(reg_db *db, struct reg_db_commit *g)
{
	kiln_strv dirs = KILN_STRV_INIT;
	kiln_error *err = NULL;
	sqlite3_stmt *ins = NULL;
	size_t n = 0;
	int sfd = -1;

	if (count_dirs(g) > SYNCFS_DIRS)
		for (struct reg_db_commit *c = g; c && sfd < 0; c = c->next)
			if (c->l.sync_path)
				sfd = store_fd(c->l.sync_path);
	pthread_mutex_lock(&db->lock);
	/* The write transaction is the blob commit lock that gc also takes. */
	if (reg_db_exec(db, "BEGIN IMMEDIATE", &err) < 0)
		goto fail;
	ins = reg_db_prep(db, "INSERT OR IGNORE INTO blob_links(repo, digest, size, created) VALUES(?, ?, ?, ?)", &err);
	if (ins == NULL)
		goto rollback;
	for (struct reg_db_commit *c = g; c; c = c->next, n++)
		if (c->set)
			link_set(db, ins, c);
	/* the renames reach the disk before the links that name them */
	if (sfd >= 0) {
		if (syncfs(sfd) < 0) {
			kiln_err_errno(&err, errno, "syncfs of the blob store");
			goto rollback;
		}
	} else {
		for (struct reg_db_commit *c = g; c; c = c->next)
			if (c->rc == 0 && c->l.sync_path && sync_dir(&dirs, c->l.sync_path, &err) < 0)
				goto rollback;
	}
	if (reg_db_group_test_hook)
		reg_db_group_test_hook(db, n);
	sqlite3_finalize(ins);
	ins = NULL;
	if (reg_db_exec(db, "COMMIT", &err) < 0)
		goto rollback;
	db->groups++;
	db->grouped += n;
	if (n > 1)
		kiln_debug("registry: group commit of %zu blob links%s", n, sfd >= 0 ? " (one syncfs)" : "");
	goto out;
rollback:
	sqlite3_finalize(ins);
	ins = NULL;
	sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
fail:
	/* nothing of the group is linked (placed files stay unreferenced: gc's) */
	for (struct reg_db_commit *c = g; c; c = c->next)
		if (c->rc == 0) {
			c->rc = -1;
			kiln_err(&c->err, err ? err->kind : KILN_E_IO, "%s", err ? kiln_error_message(err) : "group commit failed");
		}
	kiln_error_free(err);
out:
	pthread_mutex_unlock(&db->lock);
	if (sfd >= 0)
		close(sfd);
	kiln_strv_free(&dirs);
}

int reg_db_blob_link_many(reg_db *db, const char *repo, const struct reg_db_link *links, size_t n,
			  kiln_error **err)
{
	struct reg_db_commit *v = kiln_xcalloc(n ? n : 1, sizeof(*v)), *last = &v[n ? n - 1 : 0];
	int rc = 0;

	if (n == 0) {
		free(v);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		v[i].repo = repo;
		v[i].l = links[i];
		v[i].next = i + 1 < n ? &v[i + 1] : NULL;
	}
	v[0].set = n;
	pthread_mutex_lock(&db->glock);
	*db->gtail = &v[0];
	db->gtail = &last->next;
	while (!last->done) {
		if (db->gleader) {
			pthread_cond_wait(&db->gdone, &db->glock);
			continue;
		}
		/* lead: take everything queued so far (this set included) */
		struct reg_db_commit *g = db->gqueue;
		db->gqueue = NULL;
		db->gtail = &db->gqueue;
		db->gleader = 1;
		pthread_mutex_unlock(&db->glock);
		run_group(db, g);
		pthread_mutex_lock(&db->glock);
		for (struct reg_db_commit *c = g, *next; c; c = next) {
			next = c->next;
			c->done = 1;
		}
		db->gleader = 0;
		pthread_cond_broadcast(&db->gdone);
	}
	pthread_mutex_unlock(&db->glock);
	/* the set's error: the link that failed (the others say so too) */
	for (size_t i = 0; i < n; i++) {
		if (v[i].rc < 0 && rc == 0) {
			rc = -1;
			if (err)
				*err = v[i].err;
			else
				kiln_error_free(v[i].err);
			v[i].err = NULL;
		}
		kiln_error_free(v[i].err);
	}
	free(v);
	return rc;
}

int reg_db_blob_link(reg_db *db, const char *repo, const char *digest, int64_t size, reg_db_place_fn place,
		     void *ud, const char *sync_path, kiln_error **err)
{
	struct reg_db_link l = { .digest = digest, .sync_path = sync_path, .size = size, .place = place, .ud = ud };

	return reg_db_blob_link_many(db, repo, &l, 1, err);
}
