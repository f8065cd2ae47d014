/* store.c — kiln's local content-addressed store: blobs by digest, written
 * atomically (temp file, fsync, rename, directory fsync) and verified on
 * read, plus the image names.  A shared/exclusive flock lets builds run side
 * by side while prune waits for them.  Blobs are common/cas.c's. */
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
	kiln_cas *blobs;
	char *known_root;       /* build_store_known_digests */
	json_t *known;
};

int build_store_open(const char *home, build_store **out, kiln_error **err)
{
	build_store *s = kiln_xcalloc(1, sizeof(*s));
	char *blobs = NULL, *tmp = NULL, *cache = NULL;
	int rc = -1;

	s->home = home ? kiln_xstrdup(home) : kiln_home();
	s->lockfd = -1;
	blobs = kiln_home_path(s->home, KILN_PATH_BLOBS, NULL);
	tmp = kiln_home_path(s->home, KILN_PATH_TMP, NULL);
	cache = kiln_home_path(s->home, KILN_PATH_CACHE, NULL);
	/* Image blobs are the build's results: durable before they are named. */
	const struct kiln_cas_layout lay = { .mode = 0644, .sync = KILN_CAS_SYNC_FULL, .tmp = tmp };
	if (kiln_cas_open(blobs, &lay, &s->blobs, err) < 0 || kiln_mkdir_p(cache, 0755, err) < 0) {
		kiln_error_wrap(err, "store %s", home ? home : "");
		build_store_close(s);
		goto out;
	}
	*out = s;
	rc = 0;
out:
	free(blobs);
	free(tmp);
	free(cache);
	return rc;
}

void build_store_close(build_store *s)
{
	if (!s)
		return;
	if (s->lockfd >= 0)
		close(s->lockfd);
	kiln_cas_close(s->blobs);
	json_decref(s->known);
	free(s->known_root);
	free(s->home);
	free(s);
}

const char *build_store_home(const build_store *s)
{
	return s->home;
}

void build_store_known_digests(build_store *s, const char *root, json_t *map)
{
	json_decref(s->known);
	free(s->known_root);
	s->known = json_incref(map);
	s->known_root = kiln_xstrdup(root);
}

const char *build_store_known_digest(const build_store *s, const char *path)
{
	size_t n = s && s->known_root ? strlen(s->known_root) : 0;

	if (n == 0 || strncmp(path, s->known_root, n) != 0 || path[n] != '/')
		return NULL;
	return json_string_value(json_object_get(s->known, path + n + 1));
}

int build_store_lock(build_store *s, bool exclusive, kiln_error **err)
{
	if (s->lockfd < 0) {
		char *p = kiln_home_path(s->home, KILN_PATH_LOCK, NULL);
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

/* The blob operations are the common content store's (common/cas.c). */
char *build_store_blob_path(const build_store *s, const char *digest)
{
	return kiln_cas_path(s->blobs, digest);
}

bool build_store_has_blob(const build_store *s, const char *digest)
{
	return kiln_cas_has(s->blobs, digest);
}

int build_blob_begin(build_store *s, build_blob_writer **w, kiln_error **err)
{
	return kiln_cas_begin(s->blobs, KILN_SHA256, false, w, err);
}

int build_blob_write(build_blob_writer *w, const void *data, size_t len, kiln_error **err)
{
	return kiln_cas_write(w, data, len, err);
}

void build_blob_abort(build_blob_writer *w)
{
	kiln_cas_abort(w);
}

int build_blob_commit(build_blob_writer *w, const char *expect, char digest[KILN_DIGEST_MAX], int64_t *size,
		      kiln_error **err)
{
	return kiln_cas_commit(w, expect, digest, size, err);
}

int build_store_put(build_store *s, const void *data, size_t len, char digest[KILN_DIGEST_MAX], kiln_error **err)
{
	return kiln_cas_put(s->blobs, data, len, digest, err);
}

int build_store_read(const build_store *s, const char *digest, char **data, size_t *len, size_t max,
		     kiln_error **err)
{
	return kiln_cas_read(s->blobs, digest, max, data, len, err);
}

int build_store_import_file(build_store *s, const char *path, const char *expect, kiln_error **err)
{
	return kiln_cas_import(s->blobs, path, expect, false, NULL, NULL, err);
}

int build_store_adopt(build_store *s, const char *path, const char *expect, kiln_error **err)
{
	return kiln_cas_adopt(s->blobs, path, expect, KILN_CAS_VERIFY, err);
}

static int images_lock(const build_store *s, kiln_error **err)
{
	char *p = kiln_home_path(s->home, KILN_PATH_IMAGES_LOCK, NULL);
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
	char *p = kiln_home_path(s->home, KILN_PATH_IMAGES, NULL);
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
	char *ref = kiln_ref_normalize(name, err), *p = kiln_home_path(s->home, KILN_PATH_IMAGES, NULL);
	int fd = ref ? images_lock(s, err) : -1, rc = -1;
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
