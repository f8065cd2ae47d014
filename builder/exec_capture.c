/* exec_capture.c — moving layers between the host and the builder VM: a
 * step's overlay upper directory (downloaded) becomes a change list with OCI
 * whiteouts, and a layer made on the host (COPY, ADD, WORKDIR) becomes a
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
	size_t lo = 0, hi = xl->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(xl->v[mid].path, path) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*begin = lo;
	while (lo < xl->n && strcmp(xl->v[lo].path, path) == 0)
		lo++;
	*end = lo;
}

struct inode_ref {
	dev_t dev;
	ino_t ino;
	size_t i;
};

static int cmp_inode(const void *a, const void *b)
{
	const struct inode_ref *x = a, *y = b;
	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/* link_of[i]: the tree index of the first (smallest) path of entry i's
 * inode when it has several names, else i. */
static size_t *hardlinks(const build_tree *t)
{
	size_t n = build_tree_count(t), k = 0, *link_of = kiln_xcalloc(n ? n : 1, sizeof(*link_of));
	struct inode_ref *v = kiln_xcalloc(n ? n : 1, sizeof(*v));

	for (size_t i = 0; i < n; i++) {
		const struct build_entry *e = build_tree_entry(t, i);
		link_of[i] = i;
		if (S_ISREG(e->st.st_mode) && e->st.st_nlink > 1)
			v[k++] = (struct inode_ref){ e->st.st_dev, e->st.st_ino, i };
	}
	if (k > 1)
		qsort(v, k, sizeof(*v), cmp_inode);
	for (size_t j = 1; j < k; j++)
		if (v[j].dev == v[j - 1].dev && v[j].ino == v[j - 1].ino)
			link_of[v[j].i] = link_of[v[j - 1].i];
	free(v);
	return link_of;
}

int build_upper_changes(guest_conn *conn, const char *guest_upper, const char *dir, struct build_changes *ch,
			kiln_error **err)
{
	struct guest_xattr_list xl = { 0 };
	build_tree *t = NULL;
	size_t *link_of = NULL;
	int rc = -1;

	/* busybox tar keeps no xattrs: the agent lists them (opaque markers too) */
	if (build_tree_open(dir, NULL, &t, err) < 0 || guest_xattrs_dump(conn, guest_upper, &xl, 60000, err) < 0)
		goto out;
	link_of = hardlinks(t);
	for (size_t i = 0; i < build_tree_count(t); i++) {
		const struct build_entry *e = build_tree_entry(t, i);
		size_t xb, xe;
		if (runtime_file(e->path))
			continue;
		if (S_ISCHR(e->st.st_mode) && major(e->st.st_rdev) == 0 && minor(e->st.st_rdev) == 0) {
			/* overlayfs whiteout: the path was deleted */
			struct build_item *it = push_item(ch);
			it->dest = rootfs_whiteout_path(e->path);
			it->mode = S_IFREG | 0644;
			continue;
		}
		xattrs_of(&xl, e->path, &xb, &xe);
		if (S_ISDIR(e->st.st_mode)) {
			/* an opaque directory hides everything below it in the lower layers */
			for (size_t k = xb; k < xe; k++) {
				const struct guest_xattr *x = &xl.v[k].x;
				if (strcmp(x->name, "trusted.overlay.opaque") == 0 && x->len >= 1 && x->value[0] == 'y') {
					struct build_item *op = push_item(ch);
					op->dest = kiln_xasprintf("%s/" ROOTFS_WH_OPAQUE_NAME, e->path);
					op->mode = S_IFREG | 0644;
				}
			}
		}
		if (S_ISSOCK(e->st.st_mode))
			continue; /* as buildah and docker: sockets are not put in layers */
		struct build_item *it = push_item(ch);
		it->dest = kiln_xstrdup(e->path);
		it->mode = it->src_mode = e->st.st_mode;
		it->uid = it->src_uid = e->st.st_uid;
		it->gid = it->src_gid = e->st.st_gid;
		it->link = e->link ? kiln_xstrdup(e->link) : NULL;
		it->rdev = e->st.st_rdev;
		for (size_t k = xb; k < xe; k++)
			if (strncmp(xl.v[k].x.name, "trusted.overlay.", 16) != 0)
				build_item_add_xattr(it, xl.v[k].x.name, xl.v[k].x.value, xl.v[k].x.len);
		if (link_of[i] != i) {
			it->hardlink = kiln_xstrdup(build_tree_entry(t, link_of[i])->path);
		} else if (S_ISREG(e->st.st_mode)) {
			it->src = kiln_path_join(dir, e->path);
			it->size = (uint64_t)e->st.st_size;
		}
	}
	rc = 0;
out:
	free(link_of);
	guest_xattr_list_free(&xl);
	build_tree_free(t);
	return rc;
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
		kiln_err(err, KILN_E_IO, "%s: %s", out, archive_error_string(w));
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
			kiln_err(err, KILN_E_IO, "%s: %s", out, archive_error_string(w));
			goto out;
		}
		while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK)
			if (archive_write_data(w, buf, len) < 0) {
				kiln_err(err, KILN_E_IO, "%s: %s", out, archive_error_string(w));
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
		kiln_err(err, KILN_E_IO, "%s: %s", out, archive_error_string(w));
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if ((rc = append_layer(s, &layers[i], prefixes[i], w, out, xattrs, err)) != 0)
			goto out;
	rc = -1;
	if (archive_write_close(w) != ARCHIVE_OK) {
		kiln_err(err, KILN_E_IO, "%s: %s", out, archive_error_string(w));
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
