/* store.c — the content-addressed blob store on the local filesystem:
 * blobs/ALGO/XX/HEX, written only whole (temp + fsync + rename) so a reader
 * never sees a partial blob.  Upload sessions stage under uploads/. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry/internal.h"

int reg_store_open(reg_store *st, const char *root, kiln_error **err)
{
	memset(st, 0, sizeof(*st));
	st->root = kiln_xstrdup(root);
	st->blobs = kiln_path_join(root, "blobs");
	st->uploads = kiln_path_join(root, "uploads");
	if (kiln_mkdir_p(st->blobs, 0755, err) < 0 || kiln_mkdir_p(st->uploads, 0700, err) < 0) {
		reg_store_close(st);
		return kiln_error_wrap(err, "blob store %s", root);
	}
	return 0;
}

void reg_store_close(reg_store *st)
{
	free(st->root);
	free(st->blobs);
	free(st->uploads);
	memset(st, 0, sizeof(*st));
}

/* The digest must already be valid (kiln_digest_parse), which keeps the path
 * inside the store. */
char *reg_store_blob_path(const reg_store *st, const char *digest)
{
	const char *hex = kiln_digest_hex(digest);
	int algolen = (int)(hex - 1 - digest);

	return kiln_xasprintf("%s/%.*s/%.2s/%s", st->blobs, algolen, digest, hex, hex);
}

int reg_store_blob_stat(const reg_store *st, const char *digest, int64_t *size, kiln_error **err)
{
	char *path = reg_store_blob_path(st, digest);
	struct stat sb;
	int ret = 1;

	if (stat(path, &sb) < 0) {
		ret = errno == ENOENT ? 0 : kiln_err_errno(err, errno, "stat %s", path);
	} else {
		*size = sb.st_size;
	}
	free(path);
	return ret;
}

static int mkparent(const char *path, kiln_error **err)
{
	char *dir = kiln_xstrdup(path);
	int ret;

	*strrchr(dir, '/') = '\0';
	ret = kiln_mkdir_p(dir, 0755, err);
	free(dir);
	return ret;
}

int reg_store_put_bytes(const reg_store *st, const char *digest, const void *data, size_t len, kiln_error **err)
{
	char *path = reg_store_blob_path(st, digest);
	struct stat sb;
	int ret = 0;

	if (stat(path, &sb) == 0 && (size_t)sb.st_size == len)
		goto out; /* content-addressed: same digest, same bytes */
	if (mkparent(path, err) < 0 || kiln_write_atomic(path, data, len, 0644, err) < 0)
		ret = -1;
out:
	free(path);
	return ret;
}

int reg_store_read(const reg_store *st, const char *digest, size_t max, char **data, size_t *len, kiln_error **err)
{
	char *path = reg_store_blob_path(st, digest);
	int ret = kiln_read_file(path, data, len, max, err);

	free(path);
	return ret;
}

/* Moves a verified, fsync'd file into place; the rename is the commit point. */
int reg_store_adopt(const reg_store *st, const char *digest, const char *src, kiln_error **err)
{
	char *path = reg_store_blob_path(st, digest);
	char *dir = NULL;
	int ret = -1, dfd;

	if (mkparent(path, err) < 0)
		goto out;
	if (rename(src, path) < 0) {
		kiln_err_errno(err, errno, "rename %s to %s", src, path);
		goto out;
	}
	dir = kiln_xstrdup(path);
	*strrchr(dir, '/') = '\0';
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	ret = 0;
out:
	free(dir);
	free(path);
	return ret;
}
