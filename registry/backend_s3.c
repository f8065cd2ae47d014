/* backend_s3.c — the S3 backend's table: blobs and every record as objects
 * of one bucket (meta_s3.c, auth_s3.c, gc_s3.c), so replicas sharing the
 * bucket agree; blob bytes are read in ranges and written whole (multipart
 * when large).  meta.db is not used for any of it. */
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

/* The object key of a blob in S3: the same layout as on disk. */
static char *s3_key(const char *digest)
{
	const char *hex = kiln_digest_hex(digest);

	return kiln_xasprintf("blobs/%.*s/%.2s/%s", (int)(hex - 1 - digest), digest, hex, hex);
}

static int s3_blob_stat(const reg_store *st, const char *digest, int64_t *size, kiln_error **err)
{
	char *key = s3_key(digest);
	int ret = reg_s3_head(&st->s3, key, size, err);

	free(key);
	return ret;
}

static int s3_blob_put(const reg_store *st, const char *digest, const void *data, size_t len, kiln_error **err)
{
	char *key = s3_key(digest);
	int ret = reg_s3_put(&st->s3, key, data, len, err);

	free(key);
	return ret;
}

static int to_buf(void *ud, const void *data, size_t len)
{
	kiln_buf *b = ud;

	if (b->len + len > (size_t)16 << 20)
		return -1; /* manifests are small: refuse to buffer more */
	kiln_buf_add(b, data, len);
	return 0;
}

static int s3_blob_read(const reg_store *st, const char *digest, size_t max, char **data, size_t *len,
			kiln_error **err)
{
	char *key = s3_key(digest);
	kiln_buf b = KILN_BUF_INIT;
	int ret = reg_s3_get(&st->s3, key, 0, (int64_t)max, to_buf, &b, err);

	free(key);
	*len = b.len;
	*data = kiln_buf_detach(&b);
	if (ret < 0) {
		free(*data);
		*data = NULL;
	}
	return ret;
}

/* The verified upload goes to S3 in one PUT or, when large, in parts; only
 * after S3 acknowledged the whole object is the local copy dropped. */
static int s3_blob_adopt(const reg_store *st, const char *digest, const char *src, kiln_error **err)
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

static struct MHD_Response *s3_blob_response(const reg_store *st, const char *digest, int64_t off, int64_t len,
					     kiln_error **err)
{
	struct MHD_Response *resp;
	struct s3_stream *s;

	if (len == 0)
		return MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	s = kiln_xcalloc(1, sizeof(*s));
	s->st = st;
	s->key = s3_key(digest);
	s->off = off;
	s->len = len;
	s->buf = (kiln_buf)KILN_BUF_INIT;
	s->buf_off = -1;
	resp = MHD_create_response_from_callback((uint64_t)len, 256 << 10, s3_reader, s, s3_stream_free);
	if (resp == NULL) {
		s3_stream_free(s);
		kiln_err(err, KILN_E_IO, "cannot create a response for %s", digest);
	}
	return resp;
}

static int s3_blob_linked(const reg_store *st, reg_db *db, const char *repo, const char *digest, int64_t *size,
			  kiln_error **err)
{
	return reg_s3m_blob_linked(st, repo, digest, size, err);
}

static int s3_blob_unlink(const reg_store *st, reg_db *db, const char *repo, const char *digest, kiln_error **err)
{
	return reg_s3m_blob_unlink(st, repo, digest, err);
}

static int s3_blob_commit(const reg_store *st, reg_db *db, const char *repo, const char *digest, const char *src,
			  int64_t size, kiln_error **err)
{
	return reg_s3m_blob_commit(st, repo, digest, src, size, err);
}

static int s3_blob_mount(const reg_store *st, reg_db *db, const char *repo, const char *from, const char *digest,
			 kiln_error **err)
{
	return reg_s3m_blob_mount(st, repo, from, digest, err);
}

static int s3_manifest_get(const reg_store *st, reg_db *db, const char *repo, const char *ref,
			   char digest[KILN_DIGEST_MAX], char **media_type, kiln_buf *bytes, kiln_error **err)
{
	return reg_s3m_manifest_get(st, repo, ref, digest, media_type, bytes, err);
}

static int s3_manifest_put(const reg_store *st, reg_db *db, const char *repo, const char *digest,
			   const kiln_buf *bytes, const struct oci_manifest *m, const char *tag, long *missing,
			   kiln_error **err)
{
	return reg_s3m_manifest_put(st, repo, digest, bytes, m, tag, missing, err);
}

static int s3_manifest_delete(const reg_store *st, reg_db *db, const char *repo, const char *digest,
			      kiln_error **err)
{
	return reg_s3m_manifest_delete(st, repo, digest, err);
}

static int s3_tag_delete(const reg_store *st, reg_db *db, const char *repo, const char *tag, kiln_error **err)
{
	return reg_s3m_tag_delete(st, repo, tag, err);
}

static int s3_repo_exists(const reg_store *st, reg_db *db, const char *repo, kiln_error **err)
{
	return reg_s3m_repo_exists(st, repo, err);
}

static int s3_tags(const reg_store *st, reg_db *db, const char *repo, const char *last, long n, kiln_strv *out,
		   int *more, kiln_error **err)
{
	return reg_s3m_tags(st, repo, last, n, out, more, err);
}

static int s3_catalog(const reg_store *st, reg_db *db, const char *last, long n, kiln_strv *out, int *more,
		      kiln_error **err)
{
	return reg_s3m_catalog(st, last, n, out, more, err);
}

static int s3_referrers(const reg_store *st, reg_db *db, const char *repo, const char *subject,
			const char *artifact_type, json_t *out, kiln_error **err)
{
	return reg_s3m_referrers(st, repo, subject, artifact_type, out, err);
}

static int s3_history(const reg_store *st, reg_db *db, const char *repo, const char *tag, kiln_buf *out,
		      kiln_error **err)
{
	return reg_s3m_history(st, repo, tag, out, err);
}

static int s3_tag_note(const reg_store *st, reg_db *db, const char *repo, const char *tag, const char *digest,
		       const char *note, kiln_error **err)
{
	return reg_s3m_tag_note(st, repo, tag, digest, note, err);
}

/* The bucket has no counts: one tags listing per repository (manifests -1). */
static int s3_list_repos(const reg_store *st, reg_db *db, const char *prefix, struct reg_repo_info **out, size_t *n,
			 kiln_error **err)
{
	kiln_strv names = KILN_STRV_INIT, tags = KILN_STRV_INIT;
	int more, ret = -1;

	if (reg_s3m_catalog(st, NULL, -1, &names, &more, err) < 0)
		goto out;
	for (size_t i = 0; i < names.n; i++) {
		if (prefix && strncmp(names.v[i], prefix, strlen(prefix)) != 0)
			continue;
		kiln_strv_free(&tags);
		tags = (kiln_strv)KILN_STRV_INIT;
		if (reg_s3m_tags(st, names.v[i], NULL, -1, &tags, &more, err) < 0) {
			reg_repo_info_free(*out, *n);
			*out = NULL;
			*n = 0;
			goto out;
		}
		*out = kiln_xrealloc(*out, (*n + 1) * sizeof(**out));
		(*out)[*n] = (struct reg_repo_info){ kiln_xstrdup(names.v[i]), (int64_t)tags.n, -1, 0 };
		(*n)++;
	}
	ret = 0;
out:
	kiln_strv_free(&names);
	kiln_strv_free(&tags);
	return ret;
}

static int s3_repo_public(const reg_store *st, reg_db *db, const char *repo, kiln_error **err)
{
	return reg_s3a_public(st, repo, err);
}

static int s3_set_public(const reg_store *st, reg_db *db, const char *repo, int public_, kiln_error **err)
{
	return reg_s3a_set_public(st, repo, public_, err);
}

static int s3_auth_key(const reg_store *st, reg_db *db, unsigned char key[32], kiln_error **err)
{
	return reg_s3a_key(st, key, err);
}

static int s3_token_secret(const reg_store *st, reg_db *db, const char *secret, int64_t *id, char **scopes,
			   kiln_error **err)
{
	return reg_s3a_lookup_secret(st, secret, id, scopes, err);
}

static int s3_token_id(const reg_store *st, reg_db *db, int64_t id, char **scopes, kiln_error **err)
{
	return reg_s3a_lookup_id(st, id, scopes, err);
}

static int s3_token_put(const reg_store *st, reg_db *db, const char *label, const char *hash, const char *scopes,
			int64_t expires, kiln_error **err)
{
	return reg_s3a_token_put(st, label, hash, scopes, expires, err);
}

static int s3_token_list(const reg_store *st, reg_db *db, kiln_buf *out, kiln_error **err)
{
	return reg_s3a_token_list(st, out, err);
}

static int s3_token_revoke(const reg_store *st, reg_db *db, const char *label, kiln_error **err)
{
	return reg_s3a_token_revoke(st, label, err);
}

static int s3_gc(const reg_store *st, reg_db *db, const struct reg_config *c, int dry_run,
		 struct reg_gc_stats *stats, kiln_error **err)
{
	return reg_s3m_gc(st, c, dry_run, stats, err);
}

const struct reg_backend reg_backend_s3 = {
	.name = "s3",
	.blob_stat = s3_blob_stat,
	.blob_put = s3_blob_put,
	.blob_read = s3_blob_read,
	.blob_adopt = s3_blob_adopt,
	.blob_response = s3_blob_response,
	.blob_linked = s3_blob_linked,
	.blob_unlink = s3_blob_unlink,
	.blob_commit = s3_blob_commit,
	.blob_mount = s3_blob_mount,
	.manifest_get = s3_manifest_get,
	.manifest_put = s3_manifest_put,
	.manifest_delete = s3_manifest_delete,
	.tag_delete = s3_tag_delete,
	.repo_exists = s3_repo_exists,
	.tags = s3_tags,
	.catalog = s3_catalog,
	.referrers = s3_referrers,
	.history = s3_history,
	.tag_note = s3_tag_note,
	.list_repos = s3_list_repos,
	.repo_public = s3_repo_public,
	.set_public = s3_set_public,
	.auth_key = s3_auth_key,
	.token_secret = s3_token_secret,
	.token_id = s3_token_id,
	.token_put = s3_token_put,
	.token_list = s3_token_list,
	.token_revoke = s3_token_revoke,
	.gc = s3_gc,
};
