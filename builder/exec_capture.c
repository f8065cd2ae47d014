/* exec_capture.c — moving layers between the host and the builder VM: a
 * step's overlay upper directory (streamed as a tar) becomes a change list
 * with OCI whiteouts, and a layer made on the host (COPY, ADD, WORKDIR) a
 * plain tar the guest extracts as one more overlay lower directory. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "builder/internal.h"
#include "guest/guest.h"
#include "rootfs/rootfs.h"

static struct build_item *push_item(struct build_changes *ch)
{
	if (ch->n == ch->cap) {
		ch->cap = ch->cap ? 2 * ch->cap : 32;
		ch->v = kiln_xrealloc(ch->v, ch->cap * sizeof(*ch->v));
	}
	struct build_item *it = &ch->v[ch->n++];
	memset(it, 0, sizeof(*it));
	return it;
}

/* as docker: the runtime's files, never part of a layer */
static bool runtime_file(const char *path)
{
	return strcmp(path, "etc/resolv.conf") == 0 || strcmp(path, "etc/hosts") == 0 ||
	       strcmp(path, "etc/hostname") == 0;
}

/* The dump's attributes of path (the list is sorted by path). */
static void xattrs_of(const struct guest_xattr_list *xl, const char *path, size_t *begin, size_t *end)
{
	size_t lo = kiln_lower_bound(xl->v, xl->n, sizeof(xl->v[0]), offsetof(struct guest_path_xattr, path), path);

	*begin = lo;
	while (lo < xl->n && strcmp(xl->v[lo].path, path) == 0)
		lo++;
	*end = lo;
}

/* The step's files arrive as a tar stream and go straight into the change
 * list: small files kept in memory, bigger ones in numbered files of the
 * scratch directory, so no name the guest chose is ever created on the host
 * (and no 20,000 files are written there to be read back). */
#define MEM_FILE_MAX (1u << 20)
#define MEM_TOTAL_MAX (256u << 20)

struct stream {
	struct build_changes *ch;
	const char *dir;
	uint64_t in_memory;
	unsigned spilled;
};

static int read_content(struct stream *st, struct archive *ar, struct build_item *it, kiln_error **err)
{
	const void *buf;
	size_t len;
	la_int64_t off;
	int r, fd = -1;
	uint64_t got = 0;

	if (it->size <= MEM_FILE_MAX && st->in_memory + it->size <= MEM_TOTAL_MAX) {
		it->data = kiln_xmalloc(it->size ? it->size : 1);
		st->in_memory += it->size;
	} else {
		it->src = kiln_xasprintf("%s/%06u", st->dir, st->spilled++);
		if ((fd = open(it->src, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
			return kiln_err_errno(err, errno, "create %s", it->src);
	}
	while ((r = archive_read_data_block(ar, &buf, &len, &off)) == ARCHIVE_OK) {
		/* the stream has no holes: blocks come in order */
		if ((uint64_t)off != got || got + len > it->size) {
			r = ARCHIVE_FATAL;
			break;
		}
		if (it->data) {
			memcpy(it->data + got, buf, len);
		} else if (kiln_write_full(fd, buf, len) < 0) {
			kiln_err_errno(err, errno, "write %s", it->src);
			close(fd);
			return -1;
		}
		got += len;
	}
	if (fd >= 0 && close(fd) < 0 && r == ARCHIVE_EOF)
		return kiln_err_errno(err, errno, "write %s", it->src);
	if (r != ARCHIVE_EOF || got != it->size)
		return kiln_err(err, KILN_E_INVALID, "the guest's tar: %s: %s", it->dest,
				r == ARCHIVE_EOF ? "short data" : archive_error_string(ar));
	return 0;
}

static int on_entry(void *user, struct archive *ar, struct archive_entry *e, kiln_error **err)
{
	struct stream *st = user;
	const char *path = archive_entry_pathname(e);
	mode_t mode = archive_entry_mode(e);
	unsigned type = archive_entry_filetype(e);

	if (runtime_file(path) || type == AE_IFSOCK)
		return 0; /* as buildah and docker: sockets are not put in layers */
	struct build_item *it = push_item(st->ch);
	it->dest = kiln_xstrdup(path);
	if (type == AE_IFCHR && archive_entry_rdevmajor(e) == 0 && archive_entry_rdevminor(e) == 0 &&
	    !archive_entry_hardlink(e)) {
		/* overlayfs whiteout: the path was deleted */
		free(it->dest);
		it->dest = rootfs_whiteout_path(path);
		it->mode = S_IFREG | 0644;
		return 0;
	}
	if (archive_entry_hardlink(e)) {
		/* type, owner and content are the target's (fixed in link_groups) */
		it->hardlink = kiln_xstrdup(archive_entry_hardlink(e));
		mode = S_IFREG | (mode & 07777);
	} else if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK && type != AE_IFCHR && type != AE_IFBLK &&
		   type != AE_IFIFO) {
		return kiln_err(err, KILN_E_INVALID, "the guest's tar: %s: an entry of unknown type", path);
	}
	it->mode = it->src_mode = mode;
	it->uid = it->src_uid = (uid_t)archive_entry_uid(e);
	it->gid = it->src_gid = (gid_t)archive_entry_gid(e);
	if (type == AE_IFLNK && !it->hardlink)
		it->link = kiln_xstrdup(archive_entry_symlink(e) ? archive_entry_symlink(e) : "");
	if (type == AE_IFCHR || type == AE_IFBLK)
		it->rdev = archive_entry_rdev(e);
	if (type == AE_IFREG && !it->hardlink) {
		la_int64_t size = archive_entry_size(e);
		if (size < 0)
			return kiln_err(err, KILN_E_INVALID, "the guest's tar: %s: a negative size", path);
		it->size = (uint64_t)size;
		return read_content(st, ar, it, err);
	}
	return 0;
}

static int cmp_dest(const void *key, const void *item)
{
	return strcmp(key, ((const struct build_item *)item)->dest);
}

/* The first item at or after key (the list is sorted by dest). */
static size_t lower_bound(const struct build_changes *ch, const char *key)
{
	return kiln_lower_bound(ch->v, ch->n, sizeof(ch->v[0]), offsetof(struct build_item, dest), key);
}

/* Hard links (after sorting): each group's content goes to its smallest
 * path, which the layer lists first, and the others link to it; a link to a
 * path the step did not send fails. */
static int link_groups(struct build_changes *ch, kiln_error **err)
{
	size_t *root = NULL, *first = NULL;
	int rc = -1;

	for (size_t i = 0; i < ch->n; i++) {
		if (!ch->v[i].hardlink)
			continue;
		if (!root) {
			root = kiln_xcalloc(ch->n, sizeof(*root));
			first = kiln_xcalloc(ch->n, sizeof(*first));
			for (size_t k = 0; k < ch->n; k++)
				root[k] = first[k] = k;
		}
		const struct build_item *t = bsearch(ch->v[i].hardlink, ch->v, ch->n, sizeof(*ch->v), cmp_dest);
		if (!t || t->hardlink || !S_ISREG(t->mode)) {
			kiln_err(err, KILN_E_INVALID, "the guest's tar: %s: a hard link to %s, not a file of the step",
				 ch->v[i].dest, ch->v[i].hardlink);
			goto out;
		}
		root[i] = (size_t)(t - ch->v);
		if (i < first[root[i]])
			first[root[i]] = i;
	}
	for (size_t i = 0; root && i < ch->n; i++) {
		size_t r = root[i], f = first[r];
		if (r == i && f != i) {
			/* the content moves to the group's first path */
			struct build_item *to = &ch->v[f], *from = &ch->v[i];
			free(to->hardlink);
			to->hardlink = NULL;
			to->src = from->src, to->data = from->data, to->size = from->size;
			to->mode = to->src_mode = from->mode;
			to->uid = to->src_uid = from->uid;
			to->gid = to->src_gid = from->gid;
			from->src = NULL, from->data = NULL, from->size = 0;
			from->hardlink = kiln_xstrdup(to->dest);
		}
	}
	for (size_t i = 0; root && i < ch->n; i++) {
		size_t f = first[root[i]];
		if (ch->v[i].hardlink && f != i) {
			free(ch->v[i].hardlink);
			ch->v[i].hardlink = kiln_xstrdup(ch->v[f].dest);
			ch->v[i].mode = ch->v[i].src_mode = ch->v[f].mode;
			ch->v[i].uid = ch->v[i].src_uid = ch->v[f].uid;
			ch->v[i].gid = ch->v[i].src_gid = ch->v[f].gid;
		}
	}
	rc = 0;
out:
	free(root);
	free(first);
	return rc;
}

int build_upper_changes(guest_conn *conn, const char *guest_upper, const char *dir, struct build_changes *ch,
			kiln_error **err)
{
	struct guest_xattr_list xl = { 0 };
	struct stream st = { .ch = ch, .dir = dir };
	struct build_changes opq = { 0 };

	if (kiln_mkdir_p(dir, 0700, err) < 0 || guest_download_each(conn, guest_upper, on_entry, &st, 600000, err) < 0)
		return -1;
	build_changes_finish(ch);
	/* an overlay upper dir has nothing below a non-directory: a stream that
	 * does would make a layer that writes through a symlink */
	for (size_t i = 0; i < ch->n; i++) {
		if (S_ISDIR(ch->v[i].mode))
			continue;
		char *below = kiln_xasprintf("%s/", ch->v[i].dest);
		size_t k = lower_bound(ch, below);
		bool bad = k < ch->n && strncmp(ch->v[k].dest, below, strlen(below)) == 0;
		free(below);
		if (bad)
			return kiln_err(err, KILN_E_INVALID, "the guest's tar: %s below %s, which is no directory",
					ch->v[k].dest, ch->v[i].dest);
	}
	if (link_groups(ch, err) < 0)
		return -1;
	/* busybox tar keeps no xattrs: the agent lists them (opaque markers too) */
	if (guest_xattrs_dump(conn, guest_upper, &xl, 60000, err) < 0)
		return -1;
	for (size_t i = 0; i < ch->n; i++) {
		struct build_item *it = &ch->v[i];
		size_t xb, xe;
		xattrs_of(&xl, it->dest, &xb, &xe);
		for (size_t k = xb; k < xe; k++) {
			const struct guest_xattr *x = &xl.v[k].x;
			if (strncmp(x->name, "trusted.overlay.", 16) != 0) {
				build_item_add_xattr(it, x->name, x->value, x->len);
			} else if (S_ISDIR(it->mode) && strcmp(x->name, "trusted.overlay.opaque") == 0 && x->len >= 1 &&
				   x->value[0] == 'y') {
				/* an opaque directory hides everything below it in the lower layers */
				struct build_item *op = push_item(&opq);
				op->dest = kiln_xasprintf("%s/" ROOTFS_WH_OPAQUE_NAME, it->dest);
				op->mode = S_IFREG | 0644;
			}
		}
	}
	for (size_t i = 0; i < opq.n; i++)
		*push_item(ch) = opq.v[i];
	free(opq.v);
	guest_xattr_list_free(&xl);
	return 0;
}

/* One layer's entries into w under "PREFIX/"; 1 if it holds whiteouts. */
static int append_layer(build_store *s, const struct build_layer *l, const char *prefix, struct archive *w,
			const char *out, struct guest_xattr_list *xattrs, kiln_error **err)
{
	char *blob = build_store_blob_path(s, l->digest);
	struct archive *a = kiln_tar_reader_new();
	struct archive_entry *e;
	const void *buf;
	size_t len;
	la_int64_t off;
	int r, rc = -1;

	if (archive_read_open_filename(a, blob, 65536) != ARCHIVE_OK) {
		kiln_err(err, KILN_E_INVALID, "layer %s: %s", l->digest, archive_error_string(a));
		goto out;
	}
	/* the layer's own directory, so an empty layer still makes one */
	e = archive_entry_new();
	archive_entry_set_pathname(e, prefix);
	archive_entry_set_filetype(e, AE_IFDIR);
	archive_entry_set_perm(e, 0755);
	r = kiln_tar_write_header(w, e);
	archive_entry_free(e);
	if (r != ARCHIVE_OK) {
		kiln_tar_err(err, KILN_E_IO, w, "%s", out);
		goto out;
	}
	while ((r = kiln_tar_next(a, &e)) == ARCHIVE_OK) {
		char *rel = build_layer_path(archive_entry_pathname(e));
		const char *slash = strrchr(rel, '/'), *base = slash ? slash + 1 : rel;
		if (rootfs_whiteout_kind(base, NULL) != ROOTFS_WH_NONE) {
			free(rel);
			rc = 1; /* the guest cannot be given this as a plain directory */
			goto out;
		}
		if (!rel[0]) {
			free(rel);
			continue;
		}
		char *name = kiln_xasprintf("%s/%s", prefix, rel);
		archive_entry_set_pathname(e, name);
		/* the guest's tar drops these: they are set after it (guest_xattrs_apply) */
		const char *xn;
		const void *xv;
		size_t xlen;
		archive_entry_xattr_reset(e);
		while (archive_entry_xattr_next(e, &xn, &xv, &xlen) == ARCHIVE_OK)
			guest_xattr_list_add(xattrs, name, xn, xv, xlen);
		free(name);
		free(rel);
		if (archive_entry_hardlink(e)) {
			char *h = build_layer_path(archive_entry_hardlink(e)), *hn = kiln_xasprintf("%s/%s", prefix, h);
			archive_entry_set_hardlink(e, hn);
			free(h);
			free(hn);
		}
		if (kiln_tar_write_header(w, e) != ARCHIVE_OK) {
			kiln_tar_err(err, KILN_E_IO, w, "%s", out);
			goto out;
		}
		while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK)
			if (archive_write_data(w, buf, len) < 0) {
				kiln_tar_err(err, KILN_E_IO, w, "%s", out);
				goto out;
			}
		if (r != ARCHIVE_EOF) {
			kiln_err(err, KILN_E_INVALID, "layer %s: %s", l->digest, archive_error_string(a));
			goto out;
		}
	}
	if (r != ARCHIVE_EOF) {
		kiln_err(err, KILN_E_INVALID, "layer %s: %s", l->digest, archive_error_string(a));
		goto out;
	}
	rc = 0;
out:
	archive_read_free(a);
	free(blob);
	return rc;
}

int build_layers_plain_tar(build_store *s, const struct build_layer *layers, const char *const *prefixes, size_t n,
			   const char *out, struct guest_xattr_list *xattrs, kiln_error **err)
{
	struct archive *w = kiln_tar_writer_new();
	int rc = -1;

	if (archive_write_open_filename(w, out) != ARCHIVE_OK) {
		kiln_tar_err(err, KILN_E_IO, w, "%s", out);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if ((rc = append_layer(s, &layers[i], prefixes[i], w, out, xattrs, err)) != 0)
			goto out;
	rc = -1;
	if (archive_write_close(w) != ARCHIVE_OK) {
		kiln_tar_err(err, KILN_E_IO, w, "%s", out);
		goto out;
	}
	rc = 0;
out:
	archive_write_free(w);
	return rc;
}

int build_upload_tar_file(guest_conn *conn, const char *tar, const char *guest_dir, kiln_error **err)
{
	int fd = open(tar, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return kiln_err_errno(err, errno, "open %s", tar);
	int rc = guest_upload_tar(conn, guest_dir, fd, 600000, err);
	close(fd);
	return rc;
}
