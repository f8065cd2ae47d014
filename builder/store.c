/* store.c — kiln's local content-addressed store: blobs by digest, written
 * atomically (temp file, fsync, rename, directory fsync) and verified on
 * read, plus the image names.  A shared/exclusive flock lets builds run side
 * by side while prune waits for them. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "builder/builder.h"

struct build_store {
	char *home;
	int lockfd;
};

struct build_blob_writer {
	build_store *s;
	char *tmp;
	int fd;
	kiln_hasher *h;
	int64_t size;
};

int build_store_open(const char *home, build_store **out, kiln_error **err)
{
	build_store *s = kiln_xcalloc(1, sizeof(*s));
	static const char *const dirs[] = { "blobs/sha256", "tmp", "cache" };

	s->home = home ? kiln_xstrdup(home) : kiln_home();
	s->lockfd = -1;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		char *d = kiln_path_join(s->home, dirs[i]);
		int rc = kiln_mkdir_p(d, 0755, err);
		free(d);
		if (rc < 0) {
			build_store_close(s);
			return kiln_error_wrap(err, "store %s", home ? home : "");
		}
	}
	*out = s;
	return 0;
}

void build_store_close(build_store *s)
{
	if (!s)
		return;
	if (s->lockfd >= 0)
		close(s->lockfd);
	free(s->home);
	free(s);
}

const char *build_store_home(const build_store *s)
{
	return s->home;
}

int build_store_lock(build_store *s, bool exclusive, kiln_error **err)
{
	if (s->lockfd < 0) {
		char *p = kiln_path_join(s->home, "lock");
		s->lockfd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		free(p);
		if (s->lockfd < 0)
			return kiln_err_errno(err, errno, "store lock");
	}
	while (flock(s->lockfd, exclusive ? LOCK_EX : LOCK_SH) < 0)
		if (errno != EINTR)
			return kiln_err_errno(err, errno, "store lock");
	return 0;
}

char *build_store_blob_path(const build_store *s, const char *digest)
{
	const char *colon = strchr(digest, ':');
	if (!colon)
		return kiln_xasprintf("%s/blobs/invalid", s->home);
	return kiln_xasprintf("%s/blobs/%.*s/%s", s->home, (int)(colon - digest), digest, colon + 1);
}

bool build_store_has_blob(const build_store *s, const char *digest)
{
	char *p = build_store_blob_path(s, digest);
	bool yes = access(p, F_OK) == 0;
	free(p);
	return yes;
}

int build_blob_begin(build_store *s, build_blob_writer **w, kiln_error **err)
{
	build_blob_writer *b = kiln_xcalloc(1, sizeof(*b));

	b->s = s;
	b->tmp = kiln_xasprintf("%s/tmp/blob.XXXXXX", s->home);
	b->fd = mkstemp(b->tmp);
	if (b->fd < 0) {
		int e = errno;
		free(b->tmp);
		free(b);
		return kiln_err_errno(err, e, "store: temp blob");
	}
	b->h = kiln_hasher_new(KILN_SHA256);
	*w = b;
	return 0;
}

int build_blob_write(build_blob_writer *w, const void *data, size_t len, kiln_error **err)
{
	const char *p = data;

	kiln_hasher_update(w->h, data, len);
	w->size += (int64_t)len;
	while (len > 0) {
		ssize_t n = write(w->fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return kiln_err_errno(err, errno, "store: write %s", w->tmp);
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

void build_blob_abort(build_blob_writer *w)
{
	if (!w)
		return;
	close(w->fd);
	unlink(w->tmp);
	if (w->h)
		kiln_hasher_free(w->h);
	free(w->tmp);
	free(w);
}

static void fsync_dir(const char *path)
{
	char *d = kiln_xstrdup(path), *slash = strrchr(d, '/');
	if (slash)
		*slash = '\0';
	int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	free(d);
}

int build_blob_commit(build_blob_writer *w, const char *expect, char digest[KILN_DIGEST_MAX], int64_t *size,
		      kiln_error **err)
{
	char got[KILN_DIGEST_MAX];
	char *dst = NULL;
	int rc = -1;

	kiln_hasher_final(w->h, got);
	w->h = NULL;
	if (expect && strcmp(expect, got) != 0) {
		kiln_err(err, KILN_E_INVALID, "blob digest mismatch: got %s, want %s", got, expect);
		goto out;
	}
	if (fsync(w->fd) < 0 || fchmod(w->fd, 0644) < 0) {
		kiln_err_errno(err, errno, "store: sync %s", w->tmp);
		goto out;
	}
	dst = build_store_blob_path(w->s, got);
	if (rename(w->tmp, dst) < 0) {
		kiln_err_errno(err, errno, "store: rename into %s", dst);
		goto out;
	}
	fsync_dir(dst);
	if (digest)
		memcpy(digest, got, KILN_DIGEST_MAX);
	if (size)
		*size = w->size;
	free(w->tmp);
	w->tmp = NULL;
	rc = 0;
out:
	free(dst);
	if (w->tmp)
		unlink(w->tmp);
	close(w->fd);
	free(w->tmp);
	free(w);
	return rc;
}

int build_store_put(build_store *s, const void *data, size_t len, char digest[KILN_DIGEST_MAX], kiln_error **err)
{
	build_blob_writer *w;

	kiln_digest_buf(KILN_SHA256, data, len, digest);
	if (build_store_has_blob(s, digest))
		return 0;
	if (build_blob_begin(s, &w, err) < 0)
		return -1;
	if (build_blob_write(w, data, len, err) < 0) {
		build_blob_abort(w);
		return -1;
	}
	return build_blob_commit(w, digest, NULL, NULL, err);
}

int build_store_read(const build_store *s, const char *digest, char **data, size_t *len, size_t max,
		     kiln_error **err)
{
	char *p = build_store_blob_path(s, digest);
	char got[KILN_DIGEST_MAX];
	int rc = kiln_read_file(p, data, len, max, err);

	free(p);
	if (rc < 0)
		return kiln_error_wrap(err, "store: blob %s", digest);
	kiln_digest_buf(KILN_SHA256, *data, *len, got);
	if (strcmp(got, digest) != 0) {
		free(*data);
		*data = NULL;
		return kiln_err(err, KILN_E_INVALID, "store: blob %s is corrupt (content hashes to %s)", digest, got);
	}
	return 0;
}

int build_store_import_file(build_store *s, const char *path, const char *expect, kiln_error **err)
{
	build_blob_writer *w;
	char buf[65536];
	int fd;
	ssize_t n;

	if (expect && build_store_has_blob(s, expect))
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return kiln_err_errno(err, errno, "open %s", path);
	if (build_blob_begin(s, &w, err) < 0) {
		close(fd);
		return -1;
	}
	while ((n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			kiln_err_errno(err, errno, "read %s", path);
			goto fail;
		}
		if (build_blob_write(w, buf, (size_t)n, err) < 0)
			goto fail;
	}
	close(fd);
	if (build_blob_commit(w, expect, NULL, NULL, err) < 0)
		return kiln_error_wrap(err, "%s", path);
	return 0;
fail:
	close(fd);
	build_blob_abort(w);
	return -1;
}

int build_store_adopt(build_store *s, const char *path, const char *expect, kiln_error **err)
{
	char got[KILN_DIGEST_MAX], *dst = NULL;
	int fd = -1, rc = -1;

	if (build_store_has_blob(s, expect)) {
		unlink(path);
		return 0;
	}
	if (kiln_digest_file(KILN_SHA256, path, got, err) < 0)
		goto out;
	if (strcmp(got, expect) != 0) {
		unlink(path);
		kiln_err(err, KILN_E_INVALID, "%s: blob digest mismatch: got %s, want %s", path, got, expect);
		goto out;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0 || fchmod(fd, 0644) < 0) {
		kiln_err_errno(err, errno, "store: sync %s", path);
		goto out;
	}
	dst = build_store_blob_path(s, got);
	if (rename(path, dst) < 0) {
		kiln_err_errno(err, errno, "store: rename into %s", dst);
		goto out;
	}
	fsync_dir(dst);
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	free(dst);
	return rc;
}

char *build_ref_normalize(const char *name)
{
	const char *slash = strrchr(name, '/');
	const char *colon = strrchr(slash ? slash : name, ':');

	if (colon || strchr(name, '@'))
		return kiln_xstrdup(name);
	return kiln_xasprintf("%s:latest", name);
}

static int images_lock(const build_store *s, kiln_error **err)
{
	char *p = kiln_path_join(s->home, "images.lock");
	int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	free(p);
	if (fd < 0)
		return kiln_err_errno(err, errno, "images lock");
	while (flock(fd, LOCK_EX) < 0)
		if (errno != EINTR) {
			close(fd);
			return kiln_err_errno(err, errno, "images lock");
		}
	return fd;
}

static json_t *load_images(const build_store *s, kiln_error **err)
{
	char *p = kiln_path_join(s->home, "images.json");
	json_t *j;

	if (access(p, F_OK) < 0) {
		free(p);
		return json_object();
	}
	j = kiln_json_load_file(p, err);
	free(p);
	if (j && !json_is_object(j)) {
		json_decref(j);
		kiln_err(err, KILN_E_INVALID, "images.json: not an object");
		return NULL;
	}
	return j;
}

int build_store_tag(build_store *s, const char *name, const char *manifest_digest, kiln_error **err)
{
	int fd = images_lock(s, err), rc = -1;
	char *ref = build_ref_normalize(name), *p = kiln_path_join(s->home, "images.json");
	json_t *j = NULL;

	if (fd < 0)
		goto out;
	j = load_images(s, err);
	if (!j)
		goto out;
	json_object_set_new(j, ref,
			    json_pack("{s:s,s:I}", "digest", manifest_digest, "created", (json_int_t)time(NULL)));
	rc = kiln_json_write_file(p, j, err);
out:
	json_decref(j);
	if (fd >= 0)
		close(fd);
	free(ref);
	free(p);
	return rc;
}

json_t *build_store_images(const build_store *s, kiln_error **err)
{
	int fd = images_lock(s, err);
	json_t *j;

	if (fd < 0)
		return NULL;
	j = load_images(s, err);
	close(fd);
	return j;
}
