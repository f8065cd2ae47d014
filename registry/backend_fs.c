/* backend_fs.c — the filesystem backend's table: blobs as files of the
 * content-addressed store (blobs/ALGO/XX/HEX) and every record in meta.db
 * (sqlite, db*.c).  A blob's bytes are put in place inside the write
 * transaction that records them, which gc's removal also takes
 * (docs/registry.md, "Locking rule"). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry/internal.h"

static int fs_blob_stat(const reg_store *st, const char *digest, int64_t *size, kiln_error **err)
{
	char *path = reg_store_blob_path(st, digest);
	struct stat sb;
	int ret = 1;

	if (stat(path, &sb) < 0)
		ret = errno == ENOENT ? 0 : kiln_err_errno(err, errno, "stat %s", path);
	else
		*size = sb.st_size;
	free(path);
	return ret;
}

static int fs_blob_put(const reg_store *st, const char *digest, const void *data, size_t len, kiln_error **err)
{
	return kiln_cas_put_as(st->cas, digest, data, len, err);
}

static int fs_blob_read(const reg_store *st, const char *digest, size_t max, char **data, size_t *len,
			kiln_error **err)
{
	char *path = reg_store_blob_path(st, digest);
	int ret = kiln_read_file(path, data, len, max, err);

	free(path);
	return ret;
}

/* Moves a verified, fsync'd file into place; the rename is the commit point. */
static int fs_blob_adopt(const reg_store *st, const char *digest, const char *src, kiln_error **err)
{
	return kiln_cas_adopt(st->cas, src, digest, 0, err);
}

static struct MHD_Response *fs_blob_response(const reg_store *st, const char *digest, int64_t off, int64_t len,
					     kiln_error **err)
{
	struct MHD_Response *resp;
	char *path;
	int fd;

	if (len == 0)
		return MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	path = reg_store_blob_path(st, digest);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		kiln_err_errno(err, errno, "open %s", path);
		free(path);
		return NULL;
	}
	free(path);
	resp = MHD_create_response_from_fd_at_offset64((uint64_t)len, fd, (uint64_t)off);
	if (resp == NULL) {
		close(fd);
		kiln_err(err, KILN_E_IO, "cannot create a response for %s", digest);
	}
	return resp;
}

static int fs_blob_linked(const reg_store *st, reg_db *db, const char *repo, const char *digest, int64_t *size,
			  kiln_error **err)
{
	int linked = reg_db_blob_linked(db, repo, digest, size, err);

	return linked > 0 ? fs_blob_stat(st, digest, size, err) : linked;
}

static int fs_blob_unlink(const reg_store *st, reg_db *db, const char *repo, const char *digest, kiln_error **err)
{
	return reg_db_blob_unlink(db, repo, digest, err);
}

struct adopt {
	const reg_store *st;
	const char *digest, *src;
	const void *data;
	size_t len;
};

/* The upload's file is fsync'd already; the group fsyncs the directory. */
static int adopt_cb(void *ud, kiln_error **err)
{
	struct adopt *a = ud;

	return kiln_cas_adopt(a->st->cas, a->src, a->digest, KILN_CAS_DEFER_SYNC, err);
}

static int fs_blob_commit(const reg_store *st, reg_db *db, const char *repo, const char *digest, const char *src,
			  int64_t size, kiln_error **err)
{
	struct adopt a = { st, digest, src, NULL, 0 };
	char *path = reg_store_blob_path(st, digest);
	int ret = reg_db_blob_link(db, repo, digest, size, adopt_cb, &a, path, err);

	free(path);
	return ret;
}

/* The batch's files were synced together (syncfs) before it came here; the
 * group syncs the directories of their renames. */
static int fs_blob_commit_batch(const reg_store *st, reg_db *db, const char *repo, const struct reg_staged *v,
				size_t n, kiln_error **err)
{
	struct adopt *a = kiln_xcalloc(n ? n : 1, sizeof(*a));
	struct reg_db_link *l = kiln_xcalloc(n ? n : 1, sizeof(*l));
	int ret;

	for (size_t i = 0; i < n; i++) {
		a[i] = (struct adopt){ st, v[i].digest, v[i].src, NULL, 0 };
		l[i] = (struct reg_db_link){ .digest = v[i].digest, .size = v[i].size, .place = adopt_cb, .ud = &a[i],
					     .sync_path = reg_store_blob_path(st, v[i].digest) };
	}
	ret = reg_db_blob_link_many(db, repo, l, n, err);
	for (size_t i = 0; i < n; i++)
		free((char *)l[i].sync_path);
	free(l);
	free(a);
	return ret;
}

static int fs_blob_mount(const reg_store *st, reg_db *db, const char *repo, const char *from, const char *digest,
			 kiln_error **err)
{
	int64_t size;
	int have = fs_blob_stat(st, digest, &size, err);

	return have == 1 ? reg_db_blob_mount(db, repo, from, digest, err) : have;
}

static int fs_blob_holders(const reg_store *st, reg_db *db, const char *digest, long max, kiln_strv *out,
			   kiln_error **err)
{
	return reg_db_blob_holders(db, digest, max, out, err);
}

static int fs_manifest_get(const reg_store *st, reg_db *db, const char *repo, const char *ref,
			   char digest[KILN_DIGEST_MAX], char **media_type, kiln_buf *bytes, kiln_error **err)
{
	int64_t size = 0;
	char *data = NULL;
	size_t len = 0;
	int found = reg_db_manifest_get(db, repo, ref, digest, media_type, &size, err);

	if (found <= 0)
		return found;
	if (fs_blob_read(st, digest, (size_t)size + 1, &data, &len, err) < 0) {
		free(*media_type);
		*media_type = NULL;
		return -1;
	}
	kiln_buf_add(bytes, data, len);
	free(data);
	return 1;
}

static int put_bytes_cb(void *ud, kiln_error **err)
{
	struct adopt *a = ud;

	return fs_blob_put(a->st, a->digest, a->data, a->len, err);
}

static int fs_manifest_put(const reg_store *st, reg_db *db, const char *repo, const char *digest,
			   const kiln_buf *bytes, const struct oci_manifest *m, const char *tag, long *missing,
			   kiln_error **err)
{
	struct adopt a = { st, digest, NULL, bytes->buf, bytes->len };

	return reg_db_manifest_put(db, repo, digest, (int64_t)bytes->len, m, tag, put_bytes_cb, &a, missing, err);
}

static int fs_manifest_delete(const reg_store *st, reg_db *db, const char *repo, const char *digest,
			      kiln_error **err)
{
	return reg_db_manifest_delete(db, repo, digest, err);
}

static int fs_tag_delete(const reg_store *st, reg_db *db, const char *repo, const char *tag, kiln_error **err)
{
	return reg_db_tag_delete(db, repo, tag, err);
}

static int fs_repo_exists(const reg_store *st, reg_db *db, const char *repo, kiln_error **err)
{
	int64_t id;

	return reg_db_repo(db, repo, 0, &id, err) < 0 ? -1 : id != 0;
}

static int fs_tags(const reg_store *st, reg_db *db, const char *repo, const char *last, long n, kiln_strv *out,
		   int *more, kiln_error **err)
{
	return reg_db_tags(db, repo, last, n, out, more, err);
}

static int fs_catalog(const reg_store *st, reg_db *db, const char *last, long n, kiln_strv *out, int *more,
		      kiln_error **err)
{
	return reg_db_catalog(db, last, n, out, more, err);
}

static int fs_referrers(const reg_store *st, reg_db *db, const char *repo, const char *subject,
			const char *artifact_type, json_t *out, kiln_error **err)
{
	return reg_db_referrers(db, repo, subject, artifact_type, out, err);
}

static int fs_history(const reg_store *st, reg_db *db, const char *repo, const char *tag, kiln_buf *out,
		      kiln_error **err)
{
	return reg_db_history(db, repo, tag, out, err);
}

static int fs_tag_note(const reg_store *st, reg_db *db, const char *repo, const char *tag, const char *digest,
		       const char *note, kiln_error **err)
{
	return reg_db_tag_note(db, repo, tag, digest, note, err);
}

static int fs_list_repos(const reg_store *st, reg_db *db, const char *prefix, struct reg_repo_info **out,
			 size_t *n, kiln_error **err)
{
	return reg_db_list_repos(db, prefix, out, n, err);
}

static int fs_repo_public(const reg_store *st, reg_db *db, const char *repo, kiln_error **err)
{
	return reg_db_repo_public(db, repo, err);
}

static int fs_set_public(const reg_store *st, reg_db *db, const char *repo, int public_, kiln_error **err)
{
	return reg_db_set_public(db, repo, public_, err);
}

static int fs_auth_key(const reg_store *st, reg_db *db, unsigned char key[32], kiln_error **err)
{
	return reg_auth_key(st->root, key, err);
}

static int fs_token_secret(const reg_store *st, reg_db *db, const char *secret, int64_t *id, char **scopes,
			   kiln_error **err)
{
	return reg_db_token_secret(db, secret, id, scopes, err);
}

static int fs_token_id(const reg_store *st, reg_db *db, int64_t id, char **scopes, kiln_error **err)
{
	return reg_db_token_id(db, id, scopes, err);
}

static int fs_token_put(const reg_store *st, reg_db *db, const char *label, const char *hash, const char *scopes,
			int64_t expires, kiln_error **err)
{
	return reg_db_token_put(db, label, hash, scopes, expires, err);
}

static int fs_token_list(const reg_store *st, reg_db *db, kiln_buf *out, kiln_error **err)
{
	return reg_db_token_list(db, out, err);
}

static int fs_token_revoke(const reg_store *st, reg_db *db, const char *label, kiln_error **err)
{
	return reg_db_token_revoke(db, label, err);
}

const struct reg_backend reg_backend_fs = {
	.name = "filesystem",
	.blob_stat = fs_blob_stat,
	.blob_put = fs_blob_put,
	.blob_read = fs_blob_read,
	.blob_adopt = fs_blob_adopt,
	.blob_response = fs_blob_response,
	.blob_linked = fs_blob_linked,
	.blob_unlink = fs_blob_unlink,
	.blob_commit = fs_blob_commit,
	.blob_commit_batch = fs_blob_commit_batch,
	.blob_mount = fs_blob_mount,
	.blob_holders = fs_blob_holders,
	.manifest_get = fs_manifest_get,
	.manifest_put = fs_manifest_put,
	.manifest_delete = fs_manifest_delete,
	.tag_delete = fs_tag_delete,
	.repo_exists = fs_repo_exists,
	.tags = fs_tags,
	.catalog = fs_catalog,
	.referrers = fs_referrers,
	.history = fs_history,
	.tag_note = fs_tag_note,
	.list_repos = fs_list_repos,
	.repo_public = fs_repo_public,
	.set_public = fs_set_public,
	.auth_key = fs_auth_key,
	.token_secret = fs_token_secret,
	.token_id = fs_token_id,
	.token_put = fs_token_put,
	.token_list = fs_token_list,
	.token_revoke = fs_token_revoke,
	.gc = reg_gc_fs,
};
