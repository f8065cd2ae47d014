/* source.c — image sources on local disk: OCI layout directories (oci:),
 * OCI layout tarballs (oci-archive:) and `docker save` tarballs
 * (docker-archive:, presented as a synthesized OCI manifest whose layer
 * digests are the config's diff_ids).  Sources only move bytes; image.c
 * verifies digests. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rootfs/internal.h"

#define JSON_MAX (16u << 20)

/* ---- references --------------------------------------------------------- */
int rootfs_ref_parse(const char *ref, const struct rootfs_source_ops **ops, char **location,
		     char **tag, kiln_error **err)
{
	static const struct rootfs_source_ops *const all[] = {
		&rootfs_source_oci, &rootfs_source_oci_archive, &rootfs_source_docker_archive
	};
	const char *colon = strchr(ref, ':');

	*ops = NULL;
	*location = *tag = NULL;
	if (colon == NULL)
		return kiln_err(err, KILN_E_USAGE,
				"image reference '%s': expected TRANSPORT:LOCATION (oci:DIR[:TAG], "
				"oci-archive:FILE[:TAG], docker-archive:FILE)", ref);
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (strlen(all[i]->transport) == (size_t)(colon - ref) &&
		    strncmp(ref, all[i]->transport, (size_t)(colon - ref)) == 0)
			*ops = all[i];
	if (*ops == NULL)
		return kiln_err(err, KILN_E_USAGE, "image reference '%s': unknown transport '%.*s'", ref,
				(int)(colon - ref), ref);
	const char *loc = colon + 1;
	const char *tagc = *ops == &rootfs_source_docker_archive ? NULL : strrchr(loc, ':');
	if (tagc != NULL && strchr(tagc, '/') == NULL) {
		*location = kiln_xstrndup(loc, (size_t)(tagc - loc));
		*tag = tagc[1] ? kiln_xstrdup(tagc + 1) : NULL;
	} else {
		*location = kiln_xstrdup(loc);
	}
	if (**location == '\0') {
		free(*location);
		free(*tag);
		*location = *tag = NULL;
		return kiln_err(err, KILN_E_USAGE, "image reference '%s': empty location", ref);
	}
	return 0;
}

/* Blob paths come from digests we validated, so they cannot escape. */
static int digest_path(const char *digest, char **rel, kiln_error **err)
{
	enum kiln_digest_algo algo;

	if (kiln_digest_parse(digest, &algo, err) < 0)
		return -1;
	*rel = kiln_xasprintf("blobs/%s/%s", kiln_digest_algo_name(algo), kiln_digest_hex(digest));
	return 0;
}

/* ---- oci: a layout directory --------------------------------------------- */
struct fd_blob {
	int fd;
	char *path;
};

static int oci_open(const char *location, void **src, kiln_error **err)
{
	struct stat st;
	char *layout = kiln_path_join(location, "oci-layout");
	int rc = stat(layout, &st);

	free(layout);
	if (rc < 0)
		return kiln_err_errno(err, errno, "oci:%s: not an OCI image layout (no oci-layout file)",
				      location);
	*src = kiln_xstrdup(location);
	return 0;
}

static int oci_root(void *src, const char *tag, char **json, size_t *len, kiln_error **err)
{
	char *path = kiln_path_join(src, "index.json");
	int rc = kiln_read_file(path, json, len, JSON_MAX, err);

	free(path);
	return rc;
}

static int oci_blob_open(void *src, const char *digest, void **blob, kiln_error **err)
{
	char *rel = NULL;
	struct fd_blob *b;

	if (digest_path(digest, &rel, err) < 0)
		return -1;
	b = kiln_xcalloc(1, sizeof(*b));
	b->path = kiln_path_join(src, rel);
	free(rel);
	b->fd = open(b->path, O_RDONLY | O_CLOEXEC);
	if (b->fd < 0) {
		kiln_err_errno(err, errno, "blob %s: %s", digest, b->path);
		if (errno == ENOENT)
			(*err)->kind = KILN_E_NOTFOUND;
		free(b->path);
		free(b);
		return -1;
	}
	posix_fadvise(b->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	*blob = b;
	return 0;
}

static ssize_t fd_blob_read(void *blob, void *buf, size_t len, kiln_error **err)
{
	struct fd_blob *b = blob;
	ssize_t n = kiln_read_full(b->fd, buf, len);

	if (n < 0)
		return kiln_err_errno(err, errno, "read %s", b->path);
	return n;
}

static void fd_blob_close(void *blob)
{
	struct fd_blob *b = blob;

	if (b) {
		close(b->fd);
		free(b->path);
		free(b);
	}
}

static void str_close(void *src) { free(src); }

const struct rootfs_source_ops rootfs_source_oci = {
	.transport = "oci",
	.open = oci_open,
	.root = oci_root,
	.blob_open = oci_blob_open,
	.blob_read = fd_blob_read,
	.blob_close = fd_blob_close,
	.close = str_close,
};

/* ---- tarballs: find a member by name, stream it ------------------------- */
struct tar_member {
	struct archive *a;
	char *name;
};

/* Member names may carry a "./" prefix. */
static const char *member_name(struct archive_entry *e)
{
	const char *p = archive_entry_pathname(e);

	if (p == NULL)
		return "";
	while (p[0] == '.' && p[1] == '/')
		p += 2;
	return p;
}

static int tar_find(const char *file, const char *name, struct tar_member **out, kiln_error **err)
{
	struct archive *a = kiln_tar_reader_new();
	struct archive_entry *e;
	int r;

	if (archive_read_open_filename(a, file, 1 << 16) != ARCHIVE_OK) {
		kiln_err(err, KILN_E_IO, "%s: %s", file, archive_error_string(a));
		goto fail;
	}
	while ((r = kiln_tar_next(a, &e)) == ARCHIVE_OK) {
		if (strcmp(member_name(e), name) == 0 && archive_entry_filetype(e) == AE_IFREG) {
			*out = kiln_xcalloc(1, sizeof(**out));
			(*out)->a = a;
			(*out)->name = kiln_xasprintf("%s:%s", file, name);
			return 0;
		}
	}
	if (r == ARCHIVE_EOF)
		kiln_err(err, KILN_E_NOTFOUND, "%s: no member '%s'", file, name);
	else
		kiln_err(err, KILN_E_INVALID, "%s: %s", file, archive_error_string(a));
fail:
	archive_read_free(a);
	return -1;
}

static ssize_t tar_member_read(void *blob, void *buf, size_t len, kiln_error **err)
{
	struct tar_member *m = blob;
	la_ssize_t n = archive_read_data(m->a, buf, len);

	if (n < 0)
		return kiln_err(err, KILN_E_IO, "%s: %s", m->name, archive_error_string(m->a));
	return n;
}

static void tar_member_close(void *blob)
{
	struct tar_member *m = blob;

	if (m) {
		archive_read_free(m->a);
		free(m->name);
		free(m);
	}
}

static int tar_read_all(const char *file, const char *name, char **data, size_t *len,
			kiln_error **err)
{
	struct tar_member *m = NULL;
	kiln_buf b = KILN_BUF_INIT;
	char chunk[65536];
	ssize_t n;

	if (tar_find(file, name, &m, err) < 0)
		return -1;
	while ((n = tar_member_read(m, chunk, sizeof(chunk), err)) > 0) {
		if (b.len + (size_t)n > JSON_MAX) {
			kiln_err(err, KILN_E_LIMIT, "%s: %s is larger than %u bytes", file, name, JSON_MAX);
			n = -1;
			break;
		}
		kiln_buf_add(&b, chunk, (size_t)n);
	}
	tar_member_close(m);
	if (n < 0) {
		kiln_buf_free(&b);
		return -1;
	}
	*len = b.len;
	*data = kiln_buf_detach(&b);
	return 0;
}

static int file_open(const char *location, void **src, kiln_error **err)
{
	struct stat st;

	if (stat(location, &st) < 0)
		return kiln_err_errno(err, errno, "%s", location);
	if (!S_ISREG(st.st_mode))
		return kiln_err(err, KILN_E_INVALID, "%s: not a regular file", location);
	*src = kiln_xstrdup(location);
	return 0;
}

/* ---- oci-archive: a tarball of a layout --------------------------------- */
static int ocia_root(void *src, const char *tag, char **json, size_t *len, kiln_error **err)
{
	return tar_read_all(src, "index.json", json, len, err);
}

static int ocia_blob_open(void *src, const char *digest, void **blob, kiln_error **err)
{
	char *rel = NULL;
	struct tar_member *m = NULL;
	int rc;

	if (digest_path(digest, &rel, err) < 0)
		return -1;
	rc = tar_find(src, rel, &m, err);
	free(rel);
	*blob = m;
	return rc;
}

const struct rootfs_source_ops rootfs_source_oci_archive = {
	.transport = "oci-archive",
	.open = file_open,
	.root = ocia_root,
	.blob_open = ocia_blob_open,
	.blob_read = tar_member_read,
	.blob_close = tar_member_close,
	.close = str_close,
};

/* ---- docker-archive: `docker save` ------------------------------------- */
struct docker_src {
	char *file;
	json_t *paths; /* digest -> member name */
};

static int docker_open(const char *location, void **src, kiln_error **err)
{
	void *name = NULL;
	struct docker_src *d;

	if (file_open(location, &name, err) < 0)
		return -1;
	d = kiln_xcalloc(1, sizeof(*d));
	d->file = name;
	d->paths = json_object();
	*src = d;
	return 0;
}

/* manifest.json lists images; the first one (or the one whose RepoTags has
 * `tag`) becomes an OCI manifest with config and layers addressed by digest. */
static int docker_root(void *src, const char *tag, char **json, size_t *len, kiln_error **err)
{
	struct docker_src *d = src;
	char *data = NULL, *cfg = NULL;
	size_t dlen = 0, clen = 0;
	json_t *list = NULL, *config = NULL, *man = NULL, *layers;
	char cdigest[KILN_DIGEST_MAX];
	int rc = -1;

	if (tar_read_all(d->file, "manifest.json", &data, &dlen, err) < 0)
		goto out;
	list = kiln_json_loadb(data, dlen, "manifest.json", err);
	if (list == NULL)
		goto out;
	json_t *img = json_is_array(list) ? json_array_get(list, 0) : NULL;
	if (img == NULL || kiln_json_str(img, "Config") == NULL ||
	    !json_is_array(json_object_get(img, "Layers"))) {
		kiln_err(err, KILN_E_INVALID, "%s: manifest.json: expected [{Config, Layers}]", d->file);
		goto out;
	}
	if (tar_read_all(d->file, kiln_json_str(img, "Config"), &cfg, &clen, err) < 0)
		goto out;
	kiln_digest_buf(KILN_SHA256, cfg, clen, cdigest);
	json_object_set_new(d->paths, cdigest, json_string(kiln_json_str(img, "Config")));
	config = kiln_json_loadb(cfg, clen, "docker-archive config", err);
	if (config == NULL)
		goto out;
	json_t *diffs = json_object_get(json_object_get(config, "rootfs"), "diff_ids");
	json_t *paths = json_object_get(img, "Layers");
	if (!json_is_array(diffs) || json_array_size(diffs) != json_array_size(paths)) {
		kiln_err(err, KILN_E_INVALID, "%s: config rootfs.diff_ids does not match Layers",
			 d->file);
		goto out;
	}
	man = json_pack("{s:i, s:s, s:{s:s, s:s, s:I}}", "schemaVersion", 2, "mediaType",
			"application/vnd.oci.image.manifest.v1+json", "config", "mediaType",
			"application/vnd.oci.image.config.v1+json", "digest", cdigest, "size",
			(json_int_t)clen);
	layers = json_array();
	for (size_t i = 0; i < json_array_size(paths); i++) {
		const char *dg = json_string_value(json_array_get(diffs, i));
		const char *p = json_string_value(json_array_get(paths, i));
		if (dg == NULL || p == NULL || kiln_digest_parse(dg, NULL, err) < 0) {
			if (*err == NULL)
				kiln_err(err, KILN_E_INVALID, "%s: bad layer %zu", d->file, i);
			json_decref(layers);
			goto out;
		}
		json_object_set_new(d->paths, dg, json_string(p));
		json_array_append_new(layers, json_pack("{s:s, s:s}", "mediaType",
							"application/vnd.oci.image.layer.v1.tar",
							"digest", dg));
	}
	json_object_set_new(man, "layers", layers);
	*json = kiln_json_dumps_canonical(man);
	*len = strlen(*json);
	rc = 0;
out:
	free(data);
	free(cfg);
	json_decref(list);
	json_decref(config);
	json_decref(man);
	return rc;
}

static int docker_blob_open(void *src, const char *digest, void **blob, kiln_error **err)
{
	struct docker_src *d = src;
	const char *p = kiln_json_str(d->paths, digest);
	struct tar_member *m = NULL;

	if (p == NULL)
		return kiln_err(err, KILN_E_NOTFOUND, "%s: no blob %s", d->file, digest);
	if (tar_find(d->file, p, &m, err) < 0)
		return -1;
	*blob = m;
	return 0;
}

static void docker_close(void *src)
{
	struct docker_src *d = src;

	if (d) {
		free(d->file);
		json_decref(d->paths);
		free(d);
	}
}

const struct rootfs_source_ops rootfs_source_docker_archive = {
	.transport = "docker-archive",
	.open = docker_open,
	.root = docker_root,
	.blob_open = docker_blob_open,
	.blob_read = tar_member_read,
	.blob_close = tar_member_close,
	.close = docker_close,
};
