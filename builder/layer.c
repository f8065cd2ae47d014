/* layer.c — write one OCI layer from a change list in one pass: a tar
 * writer (libarchive, pax) whose output is hashed for the diff_id and fed to
 * a second libarchive writer (raw + gzip/zstd) that streams into the store.
 * Fixed timestamps, numeric owners only, sorted paths: reproducible bytes. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "builder/builder.h"

struct pipe {
	struct archive *inner;   /* NULL when uncompressed */
	build_blob_writer *w;
	kiln_hasher *diff;
	kiln_error *err;
};

const char *build_layer_media_type(enum build_compression c)
{
	switch (c) {
	case BUILD_GZIP: return "application/vnd.oci.image.layer.v1.tar+gzip";
	case BUILD_ZSTD: return "application/vnd.oci.image.layer.v1.tar+zstd";
	case BUILD_NONE: break;
	}
	return "application/vnd.oci.image.layer.v1.tar";
}

static la_ssize_t inner_write(struct archive *a, void *ud, const void *buf, size_t len)
{
	struct pipe *p = ud;

	/* libarchive keeps only a string: the store's own message (a full disk
	 * and its path) goes into it, or the user would read "write failed". */
	if (build_blob_write(p->w, buf, len, &p->err) < 0) {
		archive_set_error(a, p->err->errnum ? p->err->errnum : EIO, "%s", kiln_error_message(p->err));
		return -1;
	}
	return (la_ssize_t)len;
}

static la_ssize_t outer_write(struct archive *a, void *ud, const void *buf, size_t len)
{
	struct pipe *p = ud;

	kiln_hasher_update(p->diff, buf, len);
	if (!p->inner)
		return inner_write(a, ud, buf, len);
	if (archive_write_data(p->inner, buf, len) < 0) {
		archive_set_error(a, EIO, "compress: %s", archive_error_string(p->inner));
		return -1;
	}
	return (la_ssize_t)len;
}

static int copy_file(struct archive *a, const struct build_item *it, kiln_error **err)
{
	char buf[65536];
	uint64_t left = it->size;
	int fd = open(it->src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return kiln_err_errno(err, errno, "open %s", it->src);
	while (left > 0) {
		ssize_t n = kiln_read_full(fd, buf, left < sizeof(buf) ? left : sizeof(buf));
		if (n <= 0) {
			close(fd);
			/* a file that shrank while we read would make a corrupt tar */
			return n < 0 ? kiln_err_errno(err, errno, "read %s", it->src)
				     : kiln_err(err, KILN_E_IO, "%s changed size during the build", it->src);
		}
		if (archive_write_data(a, buf, (size_t)n) != n) {
			close(fd);
			return kiln_err(err, KILN_E_IO, "layer: %s", archive_error_string(a));
		}
		left -= (uint64_t)n;
	}
	close(fd);
	return 0;
}

int build_layer_write(build_store *s, const struct build_changes *ch, enum build_compression comp, int64_t mtime,
		      struct build_layer *out, kiln_error **err)
{
	struct pipe p = { 0 };
	struct archive *a = kiln_tar_writer_new();
	struct archive_entry *e = archive_entry_new();
	int rc = -1;

	if (build_blob_begin(s, &p.w, err) < 0)
		goto out;
	p.diff = kiln_hasher_new(KILN_SHA256);
	if (comp != BUILD_NONE) {
		p.inner = archive_write_new();
		archive_write_set_format_raw(p.inner);
		if (comp == BUILD_GZIP) {
			archive_write_add_filter_gzip(p.inner);
			/* no timestamp/name in the gzip header: reproducible */
			archive_write_set_filter_option(p.inner, "gzip", "timestamp", NULL);
			/* level 1: compression time, not size, bounds a COPY of big files
			 * (level 6 took 2.4x buildah's time on 100 MiB, bench/build.sh) */
			archive_write_set_filter_option(p.inner, "gzip", "compression-level", "1");
		} else {
			archive_write_add_filter_zstd(p.inner);
		}
		archive_write_set_bytes_in_last_block(p.inner, 1);
		if (archive_write_open2(p.inner, &p, NULL, inner_write, NULL, NULL) != ARCHIVE_OK) {
			kiln_err(err, KILN_E_IO, "layer: %s", archive_error_string(p.inner));
			goto out;
		}
		struct archive_entry *raw = archive_entry_new();
		archive_entry_set_pathname(raw, "layer.tar");
		archive_entry_set_filetype(raw, AE_IFREG);
		archive_entry_set_perm(raw, 0644);
		if (archive_write_header(p.inner, raw) != ARCHIVE_OK) {
			archive_entry_free(raw);
			kiln_err(err, KILN_E_IO, "layer: %s", archive_error_string(p.inner));
			goto out;
		}
		archive_entry_free(raw);
	}
	archive_write_set_bytes_in_last_block(a, 1);
	if (archive_write_open2(a, &p, NULL, outer_write, NULL, NULL) != ARCHIVE_OK) {
		kiln_err(err, KILN_E_IO, "layer: %s", archive_error_string(a));
		goto out;
	}
	for (size_t i = 0; i < ch->n; i++) {
		const struct build_item *it = &ch->v[i];
		char *name = S_ISDIR(it->mode) ? kiln_xasprintf("%s/", it->dest) : kiln_xstrdup(it->dest);

		archive_entry_clear(e);
		archive_entry_set_pathname(e, name);
		free(name);
		archive_entry_set_mode(e, it->mode);
		archive_entry_set_uid(e, it->uid);
		archive_entry_set_gid(e, it->gid);
		archive_entry_set_mtime(e, mtime, 0);
		if (S_ISLNK(it->mode))
			archive_entry_set_symlink(e, it->link);
		if (S_ISCHR(it->mode) || S_ISBLK(it->mode))
			archive_entry_set_rdev(e, it->rdev);
		for (size_t k = 0; k < it->n_xattrs; k++)
			archive_entry_xattr_add_entry(e, it->xattrs[k].name, it->xattrs[k].value, it->xattrs[k].len);
		if (it->hardlink)
			archive_entry_set_hardlink(e, it->hardlink);
		archive_entry_set_size(e, S_ISREG(it->mode) && !it->hardlink ? (la_int64_t)it->size : 0);
		if (kiln_tar_write_header(a, e) != ARCHIVE_OK) {
			kiln_err(err, KILN_E_IO, "layer: %s: %s", it->dest, archive_error_string(a));
			goto out;
		}
		if (S_ISREG(it->mode) && !it->hardlink && it->size > 0 && it->data &&
		    archive_write_data(a, it->data, (size_t)it->size) != (la_ssize_t)it->size) {
			kiln_err(err, KILN_E_IO, "layer: %s", archive_error_string(a));
			goto out;
		}
		if (S_ISREG(it->mode) && !it->hardlink && it->size > 0 && !it->data && copy_file(a, it, err) < 0)
			goto out;
	}
	if (archive_write_close(a) != ARCHIVE_OK ||
	    (p.inner && archive_write_close(p.inner) != ARCHIVE_OK)) {
		if (p.err) {
			*err = p.err;
			p.err = NULL;
		} else {
			kiln_err(err, KILN_E_IO, "layer: %s", archive_error_string(a));
		}
		goto out;
	}
	kiln_hasher_final(p.diff, out->diff_id);
	p.diff = NULL;
	if (build_blob_commit(p.w, NULL, out->digest, &out->size, err) < 0) {
		p.w = NULL;
		goto out;
	}
	p.w = NULL;
	out->media_type = build_layer_media_type(comp);
	rc = 0;
out:
	archive_entry_free(e);
	archive_write_free(a);
	if (p.inner)
		archive_write_free(p.inner);
	if (p.diff)
		kiln_hasher_free(p.diff);
	build_blob_abort(p.w);
	kiln_error_free(p.err);
	return rc;
}
