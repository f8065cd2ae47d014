/* upload_store.c — upload sessions: each is a directory uploads/UUID with the
 * received bytes (data) and its repository (repo), so a session survives a
 * restart.  In memory we keep a running sha256 to avoid re-reading the data
 * at the end; after a restart it is recomputed from the file. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "registry/internal.h"

#define WRITEBACK_STEP ((uint64_t)8 << 20)

void reg_uploads_init(reg_uploads *u, const reg_store *st)
{
	u->st = st;
	u->list = NULL;
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->released, NULL);
}

static void upload_free(reg_upload *up)
{
	if (up->fd >= 0)
		close(up->fd);
	kiln_hasher_free(up->h);
	free(up->repo);
	free(up);
}

void reg_uploads_destroy(reg_uploads *u)
{
	reg_upload *up, *next;

	for (up = u->list; up; up = next) {
		next = up->next;
		upload_free(up);
	}
	u->list = NULL;
	pthread_cond_destroy(&u->released);
	pthread_mutex_destroy(&u->lock);
}

static char *updir(const reg_uploads *u, const char *uuid, const char *file)
{
	return file ? kiln_xasprintf("%s/%s/%s", u->st->uploads, uuid, file) : kiln_xasprintf("%s/%s", u->st->uploads, uuid);
}

static int uuid_valid(const char *s)
{
	size_t i;

	for (i = 0; s[i]; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || s[i] == '-'))
			return 0;
	return i == 36;
}

static void unlink_locked(reg_uploads *u, reg_upload *up)
{
	for (reg_upload **pp = &u->list; *pp; pp = &(*pp)->next) {
		if (*pp == up) {
			*pp = up->next;
			return;
		}
	}
}

/* Sessions idle for an hour leave memory (their state stays on disk and is
 * reloaded, hash recomputed, if the client comes back): abandoned uploads
 * must not grow the server. */
static void prune_locked(reg_uploads *u, int64_t now)
{
	reg_upload **pp = &u->list;

	while (*pp) {
		reg_upload *up = *pp;
		if (!up->busy && now - up->last_used > 3600) {
			*pp = up->next;
			upload_free(up);
		} else {
			pp = &up->next;
		}
	}
}

/* A monolithic upload's session is one file, uploads/UUID.once, that its
 * commit renames into the store: no directory or repo file created and
 * removed per blob (ext4 slows down on thousands of recently deleted inodes:
 * half the server's CPU in a template push went to the inode allocator). */
static char *data_path(const reg_uploads *u, const reg_upload *up)
{
	return up->once ? kiln_xasprintf("%s/%s.once", u->st->uploads, up->uuid) : updir(u, up->uuid, "data");
}

static reg_upload *upload_new(reg_uploads *u, const char *repo, int once, kiln_error **err)
{
	unsigned char rnd[16];
	reg_upload *up = kiln_xcalloc(1, sizeof(*up));
	char *dir = NULL, *path = NULL;

	up->fd = -1;
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		kiln_err_errno(err, errno, "getrandom");
		goto fail;
	}
	rnd[6] = (rnd[6] & 0x0f) | 0x40;
	rnd[8] = (rnd[8] & 0x3f) | 0x80;
	snprintf(up->uuid, sizeof(up->uuid), "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7], rnd[8], rnd[9], rnd[10], rnd[11],
		 rnd[12], rnd[13], rnd[14], rnd[15]);
	up->once = once;
	if (!once) {
		dir = updir(u, up->uuid, NULL);
		if (mkdir(dir, 0700) < 0) {
			kiln_err_errno(err, errno, "create upload %s", dir);
			goto fail;
		}
		path = updir(u, up->uuid, "repo");
		if (kiln_write_atomic(path, repo, strlen(repo), 0600, err) < 0)
			goto fail;
		free(path);
	}
	path = data_path(u, up);
	up->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
	if (up->fd < 0) {
		kiln_err_errno(err, errno, "create %s", path);
		goto fail;
	}
	up->repo = kiln_xstrdup(repo);
	up->h = kiln_hasher_new(KILN_SHA256);
	up->busy = 1;
	up->last_used = (int64_t)time(NULL);
	if (once) { /* never acquired by its UUID: not in the list */
		free(path);
		return up;
	}
	pthread_mutex_lock(&u->lock);
	prune_locked(u, up->last_used);
	up->next = u->list;
	u->list = up;
	pthread_mutex_unlock(&u->lock);
	free(path);
	free(dir);
	return up;
fail:
	if (dir) {
		kiln_error *e2 = NULL;
		kiln_rm_rf(dir, &e2);
		kiln_error_free(e2);
	}
	free(path);
	free(dir);
	upload_free(up);
	return NULL;
}

reg_upload *reg_upload_new(reg_uploads *u, const char *repo, kiln_error **err)
{
	return upload_new(u, repo, 0, err);
}

reg_upload *reg_upload_new_once(reg_uploads *u, const char *repo, kiln_error **err)
{
	return upload_new(u, repo, 1, err);
}

reg_upload *reg_upload_acquire(reg_uploads *u, const char *repo, const char *uuid, kiln_error **err)
{
	reg_upload *up;
	char *path = NULL, *data = NULL;
	size_t len;
	struct stat sb;

	if (!uuid_valid(uuid)) {
		kiln_err(err, KILN_E_NOTFOUND, "upload %s: unknown", uuid);
		return NULL;
	}
	pthread_mutex_lock(&u->lock);
	for (;;) {
		struct timespec deadline;

		for (up = u->list; up; up = up->next)
			if (strcmp(up->uuid, uuid) == 0)
				break;
		if (up == NULL || !up->busy)
			break;
		/* A client may send the next chunk before the previous request is
		 * fully wound down: give that request a moment to let go. */
		clock_gettime(CLOCK_REALTIME, &deadline);
		deadline.tv_sec += 5;
		if (pthread_cond_timedwait(&u->released, &u->lock, &deadline) != 0)
			break;
	}
	if (up && up->busy) {
		pthread_mutex_unlock(&u->lock);
		kiln_err(err, KILN_E_EXISTS, "upload %s: in use by another request", uuid);
		return NULL;
	}
	if (up == NULL) {
		/* Not seen since start: the on-disk state is the truth. */
		path = updir(u, uuid, "repo");
		if (kiln_read_file(path, &data, &len, 4096, err) < 0) {
			kiln_error_clear(err);
			goto notfound;
		}
		up = kiln_xcalloc(1, sizeof(*up));
		up->fd = -1;
		snprintf(up->uuid, sizeof(up->uuid), "%s", uuid);
		up->repo = data;
		data = NULL;
		up->next = u->list;
		u->list = up;
	}
	if (strcmp(up->repo, repo) != 0)
		goto notfound;
	free(path);
	path = updir(u, uuid, "data");
	up->fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (up->fd < 0 || fstat(up->fd, &sb) < 0) {
		/* Removed under us (cancel, gc): forget it. */
		unlink_locked(u, up);
		upload_free(up);
		goto notfound;
	}
	if ((uint64_t)sb.st_size != up->offset || (up->h == NULL && sb.st_size == 0)) {
		kiln_hasher_free(up->h);
		up->h = sb.st_size == 0 ? kiln_hasher_new(KILN_SHA256) : NULL;
		up->offset = (uint64_t)sb.st_size;
	}
	up->busy = 1;
	pthread_mutex_unlock(&u->lock);
	free(path);
	return up;
notfound:
	pthread_mutex_unlock(&u->lock);
	free(path);
	free(data);
	kiln_err(err, KILN_E_NOTFOUND, "upload %s: unknown", uuid);
	return NULL;
}

int reg_upload_write(reg_upload *up, const void *data, size_t len, kiln_error **err)
{
	const char *p = data;
	size_t left = len;

	while (left > 0) {
		ssize_t n = write(up->fd, p, left);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			/* Keep offset honest: the file may hold part of this chunk. */
			kiln_hasher_free(up->h);
			up->h = NULL;
			return kiln_err_errno(err, errno, "upload %s: write", up->uuid);
		}
		if (up->h)
			kiln_hasher_update(up->h, p, (size_t)n);
		p += n;
		left -= (size_t)n;
		/* Start writeback of each full 8 MiB as it completes, so the fsync at
		 * commit waits only for the tail (measured: ~11 ms -> ~2 ms per
		 * 20 MB layer), and dirty pages never pile up. */
		if ((up->offset + (uint64_t)n) / WRITEBACK_STEP != up->offset / WRITEBACK_STEP) {
			uint64_t end = (up->offset + (uint64_t)n) / WRITEBACK_STEP * WRITEBACK_STEP;
			sync_file_range(up->fd, (off64_t)(end - WRITEBACK_STEP), (off64_t)WRITEBACK_STEP,
					SYNC_FILE_RANGE_WRITE);
		}
		up->offset += (uint64_t)n;
	}
	return 0;
}

static void remove_session(reg_uploads *u, reg_upload *up);

void reg_upload_release(reg_uploads *u, reg_upload *up)
{
	if (up->once) { /* a monolithic upload that did not end in its commit */
		remove_session(u, up);
		return;
	}
	pthread_mutex_lock(&u->lock);
	if (up->fd >= 0)
		close(up->fd);
	up->fd = -1;
	up->busy = 0;
	up->last_used = (int64_t)time(NULL);
	pthread_cond_broadcast(&u->released);
	pthread_mutex_unlock(&u->lock);
}

static void remove_session(reg_uploads *u, reg_upload *up)
{
	char *dir = up->once ? data_path(u, up) : updir(u, up->uuid, NULL);
	kiln_error *err = NULL;

	if (kiln_rm_rf(dir, &err) < 0) {
		kiln_warn("registry: %s", kiln_error_message(err));
		kiln_error_free(err);
	}
	free(dir);
	pthread_mutex_lock(&u->lock);
	unlink_locked(u, up);
	pthread_cond_broadcast(&u->released);
	pthread_mutex_unlock(&u->lock);
	upload_free(up);
}

void reg_upload_cancel(reg_uploads *u, reg_upload *up)
{
	remove_session(u, up);
}

char *reg_upload_path(const reg_uploads *u, const reg_upload *up)
{
	return data_path(u, up);
}

int reg_upload_verify(reg_uploads *u, reg_upload *up, const char *digest, kiln_error **err)
{
	enum kiln_digest_algo algo;
	char got[KILN_DIGEST_MAX];
	int rc = -1;

	if (kiln_digest_parse(digest, &algo, err) < 0)
		return -1;
	if (up->h && algo == KILN_SHA256) {
		kiln_hasher_final(up->h, got);
		up->h = NULL;
	} else {
		char *path = data_path(u, up);
		rc = kiln_digest_file(algo, path, got, err);
		free(path);
		if (rc < 0)
			return -1;
	}
	if (strcmp(got, digest) != 0)
		return kiln_err(err, KILN_E_INVALID, "digest mismatch: content is %s, client said %s", got, digest);
	return 0;
}

int64_t reg_upload_commit(reg_uploads *u, reg_upload *up, const char *digest, reg_db *db, kiln_error **err)
{
	char *path = data_path(u, up);
	int64_t ret = -1;

	if (kiln_digest_parse(digest, NULL, err) < 0)
		goto out_release;
	/* Fresh mtime: gc's grace period counts from the commit, not the first byte. */
	if (futimens(up->fd, NULL) < 0 || fsync(up->fd) < 0) {
		kiln_err_errno(err, errno, "upload %s: fsync", up->uuid);
		goto out_release;
	}
	if (reg_upload_verify(u, up, digest, err) < 0) {
		if (!err || !*err || (*err)->kind != KILN_E_INVALID)
			goto out_release;
		remove_session(u, up);
		goto out;
	}
	/* On disk the rename happens inside the link's write transaction (gc may
	 * be removing an identical blob); in S3, gc and writers meet through pins
	 * and tombs in the bucket (meta_s3.c). */
	if (u->st->ops->blob_commit(u->st, db, up->repo, digest, path, (int64_t)up->offset, err) < 0) {
		if (err && *err && (*err)->kind == KILN_E_QUOTA) {
			remove_session(u, up); /* refused for good: its bytes go now */
			goto out;
		}
		goto out_release;
	}
	ret = (int64_t)up->offset;
	remove_session(u, up);
	goto out;
out_release:
	reg_upload_release(u, up);
out:
	free(path);
	return ret;
}
