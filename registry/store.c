/* store.c — the content-addressed blob store: on the local filesystem
 * blobs/ALGO/XX/HEX, written only whole (temp + fsync + rename) so a reader
 * never sees a partial blob; or the same keys in an S3 bucket, each object
 * put whole after verification.  Upload sessions stage under uploads/. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry/internal.h"

#define S3_MULTIPART_MIN ((int64_t)16 << 20)
#define S3_PART ((size_t)8 << 20)
#define S3_CHUNK ((int64_t)2 << 20) /* bytes per ranged read when serving */

int reg_store_open(reg_store *st, const struct reg_config *c, kiln_error **err)
{
	const char *root = c->data_dir;

	memset(st, 0, sizeof(*st));
	st->root = kiln_xstrdup(root);
	st->blobs = kiln_path_join(root, "blobs");
	st->uploads = kiln_path_join(root, "uploads");
	/* The registry's blobs are what clients pushed: durable once acknowledged. */
	const struct kiln_cas_layout lay = { .fanout = true, .mode = 0644, .sync = KILN_CAS_SYNC_FULL, .tmp = st->uploads };
	if (kiln_mkdir_p(st->uploads, 0700, err) < 0 || (!c->s3_endpoint && kiln_cas_open(st->blobs, &lay, &st->cas, err) < 0)) {
		reg_store_close(st);
		return kiln_error_wrap(err, "blob store %s", root);
	}
	if (c->s3_endpoint) {
		st->use_s3 = 1;
		st->pin_s = c->gc_pin_s;
		st->s3.endpoint = kiln_xstrdup(c->s3_endpoint);
		st->s3.region = kiln_xstrdup(c->s3_region ? c->s3_region : "us-east-1");
		st->s3.bucket = kiln_xstrdup(c->s3_bucket);
		st->s3.access_key = kiln_xstrdup(c->s3_access_key);
		st->s3.secret_key = kiln_xstrdup(c->s3_secret_key);
		if (reg_s3_create_bucket(&st->s3, err) < 0) {
			reg_store_close(st);
			return kiln_error_wrap(err, "blob store s3 %s/%s", c->s3_endpoint, c->s3_bucket);
		}
	}
	return 0;
}

void reg_store_close(reg_store *st)
{
	kiln_cas_close(st->cas);
	free(st->root);
	free(st->blobs);
	free(st->uploads);
	free(st->s3.endpoint);
	free(st->s3.region);
	free(st->s3.bucket);
	free(st->s3.access_key);
	free(st->s3.secret_key);
	memset(st, 0, sizeof(*st));
}

/* The object key of a blob in S3: the same layout as on disk. */
static char *s3_key(const char *digest)
{
	const char *hex = kiln_digest_hex(digest);

	return kiln_xasprintf("blobs/%.*s/%.2s/%s", (int)(hex - 1 - digest), digest, hex, hex);
}

/* The digest must already be valid (kiln_digest_parse), which keeps the path
 * inside the store. */
char *reg_store_blob_path(const reg_store *st, const char *digest)
{
	return kiln_cas_path(st->cas, digest);
}

int reg_store_blob_stat(const reg_store *st, const char *digest, int64_t *size, kiln_error **err)
{
	char *path;
	struct stat sb;
	int ret = 1;

	if (st->use_s3) {
		char *key = s3_key(digest);
		ret = reg_s3_head(&st->s3, key, size, err);
		free(key);
		return ret;
	}
	path = reg_store_blob_path(st, digest);
	if (stat(path, &sb) < 0) {
		ret = errno == ENOENT ? 0 : kiln_err_errno(err, errno, "stat %s", path);
	} else {
		*size = sb.st_size;
	}
	free(path);
	return ret;
}

int reg_store_put_bytes(const reg_store *st, const char *digest, const void *data, size_t len, kiln_error **err)
{
	if (st->use_s3) {
		char *key = s3_key(digest);
		int ret = reg_s3_put(&st->s3, key, data, len, err);
		free(key);
		return ret;
	}
	return kiln_cas_put_as(st->cas, digest, data, len, err);
}

static int to_buf(void *ud, const void *data, size_t len)
{
	kiln_buf *b = ud;

	if (b->len + len > (size_t)16 << 20)
		return -1; /* manifests are small: refuse to buffer more */
	kiln_buf_add(b, data, len);
	return 0;
}

int reg_store_read(const reg_store *st, const char *digest, size_t max, char **data, size_t *len, kiln_error **err)
{
	char *path;
	int ret;

	if (st->use_s3) {
		char *key = s3_key(digest);
		kiln_buf b = KILN_BUF_INIT;
		ret = reg_s3_get(&st->s3, key, 0, (int64_t)max, to_buf, &b, err);
		free(key);
		*len = b.len;
		*data = kiln_buf_detach(&b);
		if (ret < 0) {
			free(*data);
			*data = NULL;
		}
		return ret;
	}
	path = reg_store_blob_path(st, digest);
	ret = kiln_read_file(path, data, len, max, err);
	free(path);
	return ret;
}

/* Moves a verified, fsync'd file into place; the rename is the commit point. */
/* The verified upload goes to S3 in one PUT or, when large, in parts; only
 * after S3 acknowledged the whole object is the local copy dropped. */
static int adopt_s3(const reg_store *st, const char *digest, const char *src, kiln_error **err)
{
	char *key = s3_key(digest);
	void *map = NULL;
	struct stat sb;
	int fd = open(src, O_RDONLY | O_CLOEXEC), ret = -1;

	if (fd < 0 || fstat(fd, &sb) < 0) {
		kiln_err_errno(err, errno, "open %s", src);
		goto out;
	}
	if (sb.st_size > 0) {
		map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED) {
			map = NULL;
			kiln_err_errno(err, errno, "mmap %s", src);
			goto out;
		}
	}
	if (sb.st_size > S3_MULTIPART_MIN)
		ret = reg_s3_put_multipart(&st->s3, key, map, (size_t)sb.st_size, S3_PART, err);
	else
		ret = reg_s3_put(&st->s3, key, map ? map : "", (size_t)sb.st_size, err);
	if (ret == 0)
		unlink(src);
out:
	if (map)
		munmap(map, (size_t)sb.st_size);
	if (fd >= 0)
		close(fd);
	free(key);
	return ret;
}

int reg_store_adopt(const reg_store *st, const char *digest, const char *src, kiln_error **err)
{
	if (st->use_s3)
		return adopt_s3(st, digest, src, err);
	return kiln_cas_adopt(st->cas, src, digest, 0, err);
}

/* ---- serving ---- */

struct s3_stream {
	const reg_store *st;
	char *key;
	int64_t off, len;    /* the slice of the object this response sends */
	kiln_buf buf;        /* bytes [buf_off, buf_off + buf.len) of the object */
	int64_t buf_off;
};

static int stream_sink(void *ud, const void *data, size_t len)
{
	kiln_buf_add(ud, data, len);
	return 0;
}

static ssize_t s3_reader(void *cls, uint64_t pos, char *out, size_t max)
{
	struct s3_stream *s = cls;
	int64_t abs = s->off + (int64_t)pos, avail;

	if (abs < s->buf_off || abs >= s->buf_off + (int64_t)s->buf.len) {
		int64_t n = s->off + s->len - abs;
		kiln_error *err = NULL;

		if (n <= 0)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (n > S3_CHUNK)
			n = S3_CHUNK;
		kiln_buf_reset(&s->buf);
		s->buf_off = abs;
		if (reg_s3_get(&s->st->s3, s->key, abs, n, stream_sink, &s->buf, &err) < 0 || s->buf.len == 0) {
			kiln_warn("registry: %s", err ? kiln_error_message(err) : "s3: short read");
			kiln_error_free(err);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
	}
	avail = s->buf_off + (int64_t)s->buf.len - abs;
	if ((int64_t)max > avail)
		max = (size_t)avail;
	memcpy(out, s->buf.buf + (abs - s->buf_off), max);
	return (ssize_t)max;
}

static void s3_stream_free(void *cls)
{
	struct s3_stream *s = cls;

	kiln_buf_free(&s->buf);
	free(s->key);
	free(s);
}

struct MHD_Response *reg_store_response(const reg_store *st, const char *digest, int64_t off, int64_t len,
					kiln_error **err)
{
	struct MHD_Response *resp;
	char *path;
	int fd;

	if (len == 0)
		return MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (st->use_s3) {
		struct s3_stream *s = kiln_xcalloc(1, sizeof(*s));
		s->st = st;
		s->key = s3_key(digest);
		s->off = off;
		s->len = len;
		s->buf = (kiln_buf)KILN_BUF_INIT;
		s->buf_off = -1;
		resp = MHD_create_response_from_callback((uint64_t)len, 256 << 10, s3_reader, s, s3_stream_free);
		if (resp == NULL)
			s3_stream_free(s);
	} else {
		path = reg_store_blob_path(st, digest);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			kiln_err_errno(err, errno, "open %s", path);
			free(path);
			return NULL;
		}
		free(path);
		resp = MHD_create_response_from_fd_at_offset64((uint64_t)len, fd, (uint64_t)off);
		if (resp == NULL)
			close(fd);
	}
	if (resp == NULL)
		kiln_err(err, KILN_E_IO, "cannot create a response for %s", digest);
	return resp;
}
