/* base.c — base images for FROM and COPY --from=<image>: read through the
 * rootfs stage's image reader (oci:, oci-archive:, docker-archive:), taken
 * from kiln's own store by name, or pulled from a registry (remote.c), their
 * blobs copied into the store with digests verified; and a stage's layers
 * extracted to a directory (whiteouts applied) when COPY --from needs them. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "builder/internal.h"
#include "regclient/regclient.h"
#include "rootfs/rootfs.h"
#include "snapshots/snapshots.h"

void build_image_free(struct build_image *im)
{
	if (!im)
		return;
	free(im->layers);
	json_decref(im->config);
	free(im);
}

/* Docker media types of layers become their OCI equivalents. */
static const char *oci_layer_type(const char *mt)
{
	if (mt && strstr(mt, "zstd"))
		return build_layer_media_type(BUILD_ZSTD);
	if (mt && strstr(mt, "gzip"))
		return build_layer_media_type(BUILD_GZIP);
	return build_layer_media_type(BUILD_NONE);
}

static int copy_blob(build_store *s, const struct rootfs_source_ops *ops, void *src, const char *digest,
		     int64_t *size, kiln_error **err)
{
	build_blob_writer *w = NULL;
	void *blob = NULL;
	char buf[65536];
	ssize_t n;

	if (build_store_has_blob(s, digest)) {
		char *p = build_store_blob_path(s, digest);
		struct stat st;
		if (stat(p, &st) == 0)
			*size = st.st_size;
		free(p);
		return 0;
	}
	if (ops->blob_open(src, digest, &blob, err) < 0)
		return -1;
	if (build_blob_begin(s, &w, err) < 0)
		goto fail;
	while ((n = ops->blob_read(blob, buf, sizeof(buf), err)) > 0)
		if (build_blob_write(w, buf, (size_t)n, err) < 0)
			goto fail;
	if (n < 0)
		goto fail;
	ops->blob_close(blob);
	return build_blob_commit(w, digest, NULL, size, err);
fail:
	ops->blob_close(blob);
	build_blob_abort(w);
	return kiln_error_wrap(err, "blob %s", digest);
}

/* A layer's diff_id: the config's rootfs.diff_ids[i]. */
static const char *diff_id_at(const json_t *config, size_t i)
{
	json_t *ids = json_object_get(json_object_get(config, "rootfs"), "diff_ids");
	return json_string_value(json_array_get(ids, i));
}

static int import_rootfs(build_store *s, const char *ref, struct build_image *im, kiln_error **err)
{
	const struct rootfs_source_ops *ops;
	char *loc = NULL, *tag = NULL;
	void *src = NULL;
	rootfs_image *img = NULL;
	int rc = -1;

	if (rootfs_ref_parse(ref, &ops, &loc, &tag, err) < 0 || ops->open(loc, &src, err) < 0)
		goto out;
	if (rootfs_image_open_source(ops, src, tag, ref, &img, err) < 0)
		goto out; /* the image closed the source */
	snprintf(im->manifest_digest, sizeof(im->manifest_digest), "%s", rootfs_image_manifest_digest(img));
	im->config = json_deep_copy(rootfs_image_config(img));
	im->n_layers = rootfs_image_layer_count(img);
	im->layers = kiln_xcalloc(im->n_layers ? im->n_layers : 1, sizeof(*im->layers));
	for (size_t i = 0; i < im->n_layers; i++) {
		const struct rootfs_layer_desc *d = rootfs_image_layer(img, i);
		const char *diff = diff_id_at(im->config, i);
		struct build_layer *l = &im->layers[i];
		if (!diff) {
			kiln_err(err, KILN_E_INVALID, "%s: config has no diff_id for layer %zu", ref, i);
			goto out;
		}
		if (copy_blob(s, ops, src, d->digest, &l->size, err) < 0)
			goto out;
		snprintf(l->digest, sizeof(l->digest), "%s", d->digest);
		snprintf(l->diff_id, sizeof(l->diff_id), "%s", diff);
		l->media_type = oci_layer_type(d->media_type);
	}
	rc = 0;
out:
	rootfs_image_close(img);
	free(loc);
	free(tag);
	return rc;
}

static int import_local(build_store *s, const char *name, const char *manifest, struct build_image *im,
			kiln_error **err)
{
	char *data = NULL;
	size_t len = 0;
	json_t *m = NULL, *c = NULL;
	int rc = -1;

	if (build_store_read(s, manifest, &data, &len, 16 << 20, err) < 0)
		goto out;
	m = kiln_json_loadb(data, len, manifest, err);
	free(data);
	data = NULL;
	if (!m)
		goto out;
	const char *cd = kiln_json_str(json_object_get(m, "config"), "digest");
	if (!cd || build_store_read(s, cd, &data, &len, 16 << 20, err) < 0) {
		if (!*err)
			kiln_err(err, KILN_E_INVALID, "%s: manifest without config", name);
		goto out;
	}
	c = kiln_json_loadb(data, len, cd, err);
	if (!c)
		goto out;
	snprintf(im->manifest_digest, sizeof(im->manifest_digest), "%s", manifest);
	json_t *layers = json_object_get(m, "layers");
	im->n_layers = json_array_size(layers);
	im->layers = kiln_xcalloc(im->n_layers ? im->n_layers : 1, sizeof(*im->layers));
	for (size_t i = 0; i < im->n_layers; i++) {
		json_t *d = json_array_get(layers, i);
		const char *dg = kiln_json_str(d, "digest"), *diff = diff_id_at(c, i);
		if (!dg || !diff || !build_store_has_blob(s, dg)) {
			kiln_err(err, KILN_E_INVALID, "%s: layer %zu missing from the store", name, i);
			goto out;
		}
		snprintf(im->layers[i].digest, KILN_DIGEST_MAX, "%s", dg);
		snprintf(im->layers[i].diff_id, KILN_DIGEST_MAX, "%s", diff);
		im->layers[i].size = kiln_json_int(d, "size", 0);
		im->layers[i].media_type = oci_layer_type(kiln_json_str(d, "mediaType"));
	}
	im->config = c;
	c = NULL;
	rc = 0;
out:
	free(data);
	json_decref(m);
	json_decref(c);
	return rc;
}

static bool is_template(const char *ref)
{
	kiln_error *e = NULL;
	snap_template *t = snap_template_open(ref, &e);

	kiln_error_free(e);
	snap_template_free(t);
	return t != NULL;
}

int build_image_load(build_store *s, const char *ref, struct build_image **out, kiln_error **err)
{
	struct build_image *im = kiln_xcalloc(1, sizeof(*im));
	int rc;

	if (strncmp(ref, "oci:", 4) == 0 || strncmp(ref, "oci-archive:", 12) == 0 ||
	    strncmp(ref, "docker-archive:", 15) == 0) {
		rc = import_rootfs(s, ref, im, err);
	} else {
		json_t *images = build_store_images(s, err);
		kiln_error *e = NULL;
		char *norm = kiln_ref_normalize(ref, &e); /* NULL: the pull below says why */
		const char *dg = images && norm ? kiln_json_str(json_object_get(images, norm), "digest") : NULL;
		const char *at = strchr(ref, '@');
		char pulled[KILN_DIGEST_MAX];
		if (!images)
			rc = -1;
		else if (at && build_store_has_blob(s, at + 1))
			rc = import_local(s, ref, at + 1, im, err); /* pinned: the stored copy is the image */
		else if (dg && !kiln_ref_has_host(ref))
			rc = import_local(s, ref, dg, im, err);
		else if ((rc = build_image_pull(s, ref, NULL, pulled, err)) == 0)
			/* an explicit registry is asked every time: a moved tag re-resolves */
			rc = import_local(s, ref, pulled, im, err);
		else if (!kiln_ref_has_host(ref) && is_template(ref))
			kiln_error_wrap(err, "%s is a template here, not an image (FROM takes images: build one with "
				       "kiln build -t %s, or kiln pull the image it was made from); not on Docker Hub either",
					ref, ref);
		else if (!kiln_ref_has_host(ref))
			kiln_error_wrap(err, "not a local kiln image, and pulling it failed");
		json_decref(images);
		kiln_error_free(e);
		free(norm);
	}
	if (rc < 0) {
		build_image_free(im);
		return kiln_error_wrap(err, "FROM %s", ref);
	}
	if (!json_is_object(im->config))
		json_decref(im->config), im->config = json_object();
	*out = im;
	return 0;
}

/* The real path of dir/rel's parent when it resolves inside dir (symlinks on
 * the way followed, as the kernel would), else NULL: removals go through
 * this so that a layer's symlink can never aim one outside the tree. */
static char *parent_inside(const char *dir, const char *rel)
{
	const char *slash = strrchr(rel, '/');
	char *p = slash ? kiln_xasprintf("%s/%.*s", dir, (int)(slash - rel), rel) : kiln_xstrdup(dir);
	char *root = realpath(dir, NULL), *real = realpath(p, NULL);
	size_t n = root ? strlen(root) : 0;

	if (!root || !real || strncmp(real, root, n) != 0 || (real[n] != '\0' && real[n] != '/')) {
		free(real);
		real = NULL;
	}
	free(root);
	free(p);
	return real;
}

/* Remove dir/rel (a tree, never followed) if its parent is inside dir. */
static void remove_inside(const char *dir, const char *rel)
{
	const char *slash = strrchr(rel, '/');
	char *parent = parent_inside(dir, rel);

	if (parent) {
		char *victim = kiln_path_join(parent, slash ? slash + 1 : rel);
		kiln_rm_rf(victim, NULL);
		free(victim);
	}
	free(parent);
}

int build_extract_entry(struct archive *a, struct archive *w, struct archive_entry *e, const char *dir,
			const char *rel, const char *what, kiln_error **err)
{
	char *full = kiln_xasprintf("%s/%s", dir, rel);
	const char *hl = archive_entry_hardlink(e);
	const void *buf;
	size_t len;
	la_int64_t off;
	struct stat st;
	int r;

	/* an entry replaces what is at its path: a directory too (file→dir→file) */
	if (rel[0] && (archive_entry_filetype(e) != AE_IFDIR || hl) && lstat(full, &st) == 0 && S_ISDIR(st.st_mode))
		remove_inside(dir, rel);
	archive_entry_set_pathname(e, full);
	free(full);
	if (hl) {
		char *hr = build_layer_path(hl), *hf = kiln_xasprintf("%s/%s", dir, hr);
		archive_entry_set_hardlink(e, hf);
		free(hr);
		free(hf);
	}
	if (archive_write_header(w, e) != ARCHIVE_OK)
		return kiln_err(err, KILN_E_INVALID, "%s: %s", what, archive_error_string(w));
	while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK)
		if (archive_write_data_block(w, buf, len, off) != ARCHIVE_OK)
			return kiln_tar_err(err, KILN_E_IO, w, "%s", what);
	if (r != ARCHIVE_EOF)
		return kiln_err(err, KILN_E_INVALID, "%s: %s", what, archive_error_string(a));
	archive_write_finish_entry(w);
	/* libarchive's disk writer skips POSIX ACLs carried as xattrs (as
	 * SCHILY.xattr.system.posix_acl_*, buildah's form): set those here, on the
	 * path it just wrote (never through a symlink: SECURE_SYMLINKS) */
	const char *xn;
	const void *xv;
	size_t xl;
	archive_entry_xattr_reset(e);
	while (archive_entry_xattr_next(e, &xn, &xv, &xl) == ARCHIVE_OK)
		if (strncmp(xn, "system.posix_acl_", 17) == 0 &&
		    lsetxattr(archive_entry_pathname(e), xn, xv, xl, 0) < 0)
			kiln_warn("%s: %s: %s", what, xn, strerror(errno));
	return 0;
}

/* Empty directory dir/rel (opaque whiteout) if it is inside dir; keep it. */
static void empty_inside(const char *dir, const char *rel)
{
	char *parent = rel[0] ? parent_inside(dir, rel) : realpath(dir, NULL);
	const char *slash = strrchr(rel, '/');
	char *pd = parent && rel[0] ? kiln_path_join(parent, slash ? slash + 1 : rel) : parent ? kiln_xstrdup(parent) : NULL;
	struct stat st;
	build_tree *t = NULL;
	kiln_error *err = NULL;

	/* a symlink there is not followed: only a real directory is emptied */
	if (pd && lstat(pd, &st) == 0 && S_ISDIR(st.st_mode) && build_tree_open(pd, NULL, &t, &err) == 0) {
		for (size_t i = 0; i < build_tree_count(t); i++) {
			const char *p = build_tree_entry(t, i)->path;
			if (!strchr(p, '/')) {
				char *full = kiln_path_join(pd, p);
				kiln_rm_rf(full, NULL);
				free(full);
			}
		}
	}
	kiln_error_free(err);
	build_tree_free(t);
	free(pd);
	free(parent);
}

/* Where rel stands to the paths a partial extraction wants: 3 one of them,
 * 2 under one, 1 on the way to one (an ancestor), 0 none of these. */
static int wanted(const char *rel, const char *const *only, size_t n)
{
	size_t rl = strlen(rel);
	int w = 0;

	for (size_t i = 0; i < n && w < 3; i++) {
		size_t ol = strlen(only[i]);
		if (rl >= ol && !strncmp(rel, only[i], ol) && (rel[ol] == '\0' || rel[ol] == '/'))
			w = rel[ol] == '\0' ? 3 : w > 2 ? w : 2;
		else if (ol > rl && !strncmp(rel, only[i], rl) && (rl == 0 || only[i][rl] == '/') && w < 1)
			w = 1;
	}
	return w;
}

/* Apply one layer blob to a directory: whiteouts delete (only inside it),
 * the rest is extracted with owners and modes, never through symlinks or "..".
 * With only[]: just those paths, what is under them and their ancestors;
 * returns 1 (stopped) when a symlink on the way or as one of them, or a hard
 * link to a file left out, needs the whole tree. */
static int extract_layer(const char *blob, const char *dir, const char *const *only, size_t n_only,
			 kiln_error **err)
{
	struct archive *a = kiln_tar_reader_new(), *w = archive_write_disk_new();
	struct archive_entry *e;
	int r, rc = -1;

	archive_write_disk_set_options(w, ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_ACL |
						  ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
						  ARCHIVE_EXTRACT_UNLINK);
	if (archive_read_open_filename(a, blob, 65536) != ARCHIVE_OK) {
		kiln_err(err, KILN_E_INVALID, "layer %s: %s", blob, archive_error_string(a));
		goto out;
	}
	while ((r = kiln_tar_next(a, &e)) == ARCHIVE_OK) {
		char *rel = build_layer_path(archive_entry_pathname(e));
		char *slash = strrchr(rel, '/');
		const char *base = slash ? slash + 1 : rel, *name = NULL;
		enum rootfs_whiteout wh = rootfs_whiteout_kind(base, &name);
		if (wh == ROOTFS_WH_INVALID) {
			kiln_err(err, KILN_E_INVALID, "layer %s: entry '%s': invalid whiteout name '%s'", blob, rel, base);
			free(rel);
			goto out;
		}
		if (wh == ROOTFS_WH_FILE || wh == ROOTFS_WH_OPAQUE) {
			char *parent = slash ? kiln_xstrndup(rel, (size_t)(slash - rel)) : kiln_xstrdup("");
			if (wh == ROOTFS_WH_FILE) {
				char *victim = parent[0] ? kiln_xasprintf("%s/%s", parent, name) : kiln_xstrdup(name);
				remove_inside(dir, victim);
				free(victim);
			} else {
				empty_inside(dir, parent);
			}
			free(parent);
		}
		if (wh != ROOTFS_WH_NONE) {
			free(rel);
			continue;
		}
		if (only) {
			int wt = wanted(rel, only, n_only);
			const char *hl = archive_entry_hardlink(e);
			char *hr = hl ? build_layer_path(hl) : NULL;
			bool full = (archive_entry_filetype(e) == AE_IFLNK && (wt == 1 || wt == 3)) ||
				    (wt && hr && wanted(hr, only, n_only) < 2);
			free(hr);
			if (full || !wt) {
				free(rel);
				if (!full)
					continue;
				rc = 1;
				goto out;
			}
		}
		char *what = kiln_xasprintf("layer %s", blob);
		int er = build_extract_entry(a, w, e, dir, rel, what, err);
		free(what);
		free(rel);
		if (er < 0)
			goto out;
	}
	if (r != ARCHIVE_EOF) {
		kiln_err(err, KILN_E_INVALID, "layer %s: %s", blob, archive_error_string(a));
		goto out;
	}
	rc = 0;
out:
	archive_read_free(a);
	archive_write_free(w);
	return rc;
}

int build_layers_extract_only(build_store *s, const struct build_layer *layers, size_t n, const char *dir,
			      const char *const *only, size_t n_only, kiln_error **err)
{
	if (kiln_mkdir_p(dir, 0755, err) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		char *p = build_store_blob_path(s, layers[i].digest);
		int rc = extract_layer(p, dir, only, n_only, err);
		free(p);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int build_layers_extract(build_store *s, const struct build_layer *layers, size_t n, const char *dir,
			 kiln_error **err)
{
	return build_layers_extract_only(s, layers, n, dir, NULL, 0, err);
}
