/* db_group.c — group commit of blob links (filesystem backend).  Each upload
 * used to cost its own write transaction: a directory fsync after its rename
 * and a sqlite commit (WAL fsync), one blob after another under the commit
 * lock.  Now the links that arrive while a group commits wait and go together
 * in the next one: every rename, one fsync per distinct directory, one
 * commit.  No window is waited for: a lone upload commits at once.  A caller
 * returns (and the client gets its 201) only after its group's commit. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registry/internal.h"

struct reg_db_commit {
	const char *repo, *digest, *sync_path;
	int64_t size;
	reg_db_place_fn place;
	void *ud;
	int done, rc;
	kiln_error *err;
	struct reg_db_commit *next;
};

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

/* One link inside the group's transaction, under its own savepoint: a failed
 * one is undone alone.  Caller holds db->lock. */
static int link_one(reg_db *db, sqlite3_stmt *ins, struct reg_db_commit *c)
{
	int64_t id;

	if (reg_db_exec(db, "SAVEPOINT blob", &c->err) < 0)
		return -1;
	if (reg_db_repo_locked(db, c->repo, 1, &id, &c->err) < 0 || (c->place && c->place(c->ud, &c->err) < 0))
		goto undo;
	sqlite3_reset(ins);
	sqlite3_bind_int64(ins, 1, id);
	sqlite3_bind_text(ins, 2, c->digest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(ins, 3, c->size);
	sqlite3_bind_int64(ins, 4, reg_db_now());
	if (sqlite3_step(ins) != SQLITE_DONE) {
		reg_db_fail(db, &c->err, "link blob");
		goto undo;
	}
	return reg_db_exec(db, "RELEASE blob", &c->err);
undo:
	sqlite3_exec(db->h, "ROLLBACK TO blob; RELEASE blob", NULL, NULL, NULL);
	return -1;
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

static void run_group(reg_db *db, struct reg_db_commit *g)
{
	kiln_strv dirs = KILN_STRV_INIT;
	kiln_error *err = NULL;
	sqlite3_stmt *ins = NULL;
	size_t n = 0;

	pthread_mutex_lock(&db->lock);
	/* The write transaction is the blob commit lock that gc also takes. */
	if (reg_db_exec(db, "BEGIN IMMEDIATE", &err) < 0)
		goto fail;
	ins = reg_db_prep(db, "INSERT OR IGNORE INTO blob_links(repo, digest, size, created) VALUES(?, ?, ?, ?)", &err);
	if (ins == NULL)
		goto rollback;
	for (struct reg_db_commit *c = g; c; c = c->next, n++)
		c->rc = link_one(db, ins, c);
	/* the renames reach the disk before the links that name them */
	for (struct reg_db_commit *c = g; c; c = c->next)
		if (c->rc == 0 && c->sync_path && sync_dir(&dirs, c->sync_path, &err) < 0)
			goto rollback;
	if (reg_db_group_test_hook)
		reg_db_group_test_hook(db, n);
	sqlite3_finalize(ins);
	ins = NULL;
	if (reg_db_exec(db, "COMMIT", &err) < 0)
		goto rollback;
	db->groups++;
	db->grouped += n;
	if (n > 1)
		kiln_debug("registry: group commit of %zu blob links", n);
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
	kiln_strv_free(&dirs);
}

int reg_db_blob_link(reg_db *db, const char *repo, const char *digest, int64_t size, reg_db_place_fn place,
		     void *ud, const char *sync_path, kiln_error **err)
{
	struct reg_db_commit me = { .repo = repo, .digest = digest, .sync_path = sync_path, .size = size,
				    .place = place, .ud = ud };

	pthread_mutex_lock(&db->glock);
	*db->gtail = &me;
	db->gtail = &me.next;
	while (!me.done) {
		if (db->gleader) {
			pthread_cond_wait(&db->gdone, &db->glock);
			continue;
		}
		/* lead: take everything queued so far (me included) */
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
	if (me.rc < 0) {
		if (err)
			*err = me.err;
		else
			kiln_error_free(me.err);
	}
	return me.rc < 0 ? -1 : 0;
}
