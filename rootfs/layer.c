/* layer.c — apply one layer tar to the merged tree, with OCI whiteouts
 * (".wh.NAME", ".wh..wh..opq", read by rootfs_whiteout_kind, which the
 * builder uses too), hardlinks (also to lower layers), and the
 * limits that stop a tar bomb.  File contents are not read here: a regular
 * file records which layer entry holds its bytes. */
#include <stdlib.h>
#include <string.h>

#include "rootfs/internal.h"

enum rootfs_whiteout rootfs_whiteout_kind(const char *base, const char **victim)
{
	const char *name = base + strlen(ROOTFS_WH_PREFIX);

	if (strncmp(base, ROOTFS_WH_PREFIX, strlen(ROOTFS_WH_PREFIX)) != 0)
		return ROOTFS_WH_NONE;
	if (strcmp(base, ROOTFS_WH_OPAQUE_NAME) == 0)
		return ROOTFS_WH_OPAQUE;
	if (strncmp(name, ROOTFS_WH_PREFIX, strlen(ROOTFS_WH_PREFIX)) == 0)
		return ROOTFS_WH_META;
	if (*name == '\0' || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strchr(name, '/'))
		return ROOTFS_WH_INVALID;
	if (victim)
		*victim = name;
	return ROOTFS_WH_FILE;
}

char *rootfs_whiteout_path(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? kiln_xasprintf("%.*s/" ROOTFS_WH_PREFIX "%s", (int)(slash - path), path, slash + 1)
		     : kiln_xasprintf(ROOTFS_WH_PREFIX "%s", path);
}

static const char *entry_path(struct archive_entry *e)
{
	const char *p = archive_entry_pathname(e);

	return p ? p : archive_entry_pathname_utf8(e);
}

/* Remove what lower layers put under `dir`; keep what this layer put there. */
static void make_opaque(rootfs_tree *t, struct rootfs_node *dir, unsigned layer)
{
	size_t i = 0;

	while (i < dir->nkids) {
		struct rootfs_node *kid = dir->kids[i];
		if (kid->layer < layer) {
			rootfs_node_remove(t, kid); /* moves the last kid into slot i */
			continue;
		}
		if (S_ISDIR(kid->inode->mode))
			make_opaque(t, kid, layer);
		i++;
	}
}

static int set_meta(rootfs_tree *t, struct rootfs_inode *ino, struct archive_entry *e,
		    kiln_error **err)
{
	const char *name;
	const void *value;
	size_t len;
	la_int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);

	if (uid < 0 || uid > UINT32_MAX || gid < 0 || gid > UINT32_MAX)
		return kiln_err(err, KILN_E_INVALID, "owner %lld:%lld out of range", (long long)uid,
				(long long)gid);
	ino->mode = (ino->mode & S_IFMT) | (archive_entry_perm(e) & 07777);
	ino->uid = (uint32_t)uid;
	ino->gid = (uint32_t)gid;
	ino->mtime = archive_entry_mtime_is_set(e) ? archive_entry_mtime(e) : t->default_mtime;
	ino->mtime_ns = archive_entry_mtime_is_set(e) ? (uint32_t)archive_entry_mtime_nsec(e) : 0;
	for (size_t i = 0; i < ino->nxattrs; i++) {
		free(ino->xattrs[i].name);
		free(ino->xattrs[i].value);
	}
	ino->nxattrs = 0;
	size_t n = (size_t)archive_entry_xattr_reset(e);
	if (n == 0)
		return 0;
	ino->xattrs = kiln_xrealloc(ino->xattrs, n * sizeof(*ino->xattrs));
	while (archive_entry_xattr_next(e, &name, &value, &len) == ARCHIVE_OK && ino->nxattrs < n) {
		if (len > t->limits.max_xattr)
			return kiln_err(err, KILN_E_LIMIT, "xattr %s of %zu bytes is over the limit of %u",
					name, len, t->limits.max_xattr);
		if (strlen(name) > 255)
			return kiln_err(err, KILN_E_INVALID, "xattr name longer than 255 bytes");
		struct rootfs_xattr *x = &ino->xattrs[ino->nxattrs++];
		x->name = kiln_xstrdup(name);
		x->value = kiln_xmalloc(len ? len : 1);
		memcpy(x->value, value, len);
		x->len = len;
	}
	return 0;
}

static int file_content(rootfs_tree *t, struct rootfs_inode *ino, struct archive_entry *e,
			unsigned layer, uint64_t ordinal, kiln_error **err)
{
	la_int64_t size = archive_entry_size(e), off, len;
	int n;

	if (size < 0 || (uint64_t)size > t->limits.max_file_size)
		return kiln_err(err, KILN_E_LIMIT, "file size %lld is over the limit of %llu bytes",
				(long long)size, (unsigned long long)t->limits.max_file_size);
	t->bytes += (uint64_t)size;
	if (t->bytes > t->limits.max_bytes)
		return kiln_err(err, KILN_E_LIMIT, "layers declare more than %llu bytes of file content",
				(unsigned long long)t->limits.max_bytes);
	ino->size = (uint64_t)size;
	ino->src = SRC_LAYER;
	ino->src_layer = layer;
	ino->src_entry = ordinal;
	n = archive_entry_sparse_reset(e);
	if (n > 0) {
		ino->exts = kiln_xcalloc((size_t)n, sizeof(*ino->exts));
		while (archive_entry_sparse_next(e, &off, &len) == ARCHIVE_OK && ino->nexts < (size_t)n) {
			if (off < 0 || len < 0 || off > size || len > size - off)
				return kiln_err(err, KILN_E_INVALID, "sparse map entry %lld+%lld outside the file",
						(long long)off, (long long)len);
			if (len > 0) {
				ino->exts[ino->nexts].off = (uint64_t)off;
				ino->exts[ino->nexts++].len = (uint64_t)len;
			}
		}
	} else if (size > 0) {
		ino->exts = kiln_xcalloc(1, sizeof(*ino->exts));
		ino->exts[0].len = (uint64_t)size;
		ino->nexts = 1;
	}
	return 0;
}

static int whiteout(rootfs_tree *t, unsigned layer, char **comps, size_t n, enum rootfs_whiteout kind,
		    const char *victim_name, kiln_error **err)
{
	const char *base = comps[n - 1];
	struct rootfs_node *dir, *victim;
	kiln_error *miss = NULL;

	switch (kind) {
	case ROOTFS_WH_OPAQUE:
		dir = rootfs_tree_mkparents(t, comps, n - 1, layer, 1, err);
		if (dir == NULL)
			return -1;
		make_opaque(t, dir, layer);
		return 0;
	case ROOTFS_WH_META:
		kiln_warn("ignoring AUFS metadata entry '%s'", base);
		return 0;
	case ROOTFS_WH_INVALID:
		return kiln_err(err, KILN_E_INVALID, "invalid whiteout name '%s'", base);
	case ROOTFS_WH_FILE: case ROOTFS_WH_NONE:
		break;
	}
	dir = rootfs_tree_mkparents(t, comps, n - 1, layer, 0, &miss);
	if (dir == NULL) {
		/* whiting out something under a path that does not exist is a no-op */
		kiln_error_free(miss);
		return 0;
	}
	victim = rootfs_node_lookup(t, dir, victim_name);
	/* A whiteout hides lower layers only, never its own layer's entries. */
	if (victim && victim->layer < layer)
		rootfs_node_remove(t, victim);
	return 0;
}

static int hardlink(rootfs_tree *t, unsigned layer, struct rootfs_node *dir, const char *base,
		    const char *target, kiln_error **err)
{
	char **tc = NULL;
	size_t tn = 0;
	struct rootfs_node *tdir, *tnode, *existing, *n;
	struct rootfs_inode *ino;
	int rc = -1;

	if (rootfs_path_split(t, target, &tc, &tn, err) < 0) {
		kiln_error_wrap(err, "hardlink target");
		goto out;
	}
	if (tn == 0) {
		kiln_err(err, KILN_E_INVALID, "hardlink to the root directory");
		goto out;
	}
	tdir = rootfs_tree_mkparents(t, tc, tn - 1, layer, 0, err);
	tnode = tdir ? rootfs_node_lookup(t, tdir, tc[tn - 1]) : NULL;
	if (tnode == NULL) {
		kiln_error_clear(err);
		kiln_err(err, KILN_E_INVALID, "hardlink target '%s' does not exist", target);
		goto out;
	}
	if (S_ISDIR(tnode->inode->mode)) {
		kiln_err(err, KILN_E_INVALID, "hardlink target '%s' is a directory", target);
		goto out;
	}
	existing = rootfs_node_lookup(t, dir, base);
	if (existing == tnode) {
		rc = 0;
		goto out;
	}
	ino = tnode->inode;
	ino->refs++; /* the removal below may drop the target's last name */
	if (existing)
		rootfs_node_remove(t, existing);
	n = rootfs_node_add(t, dir, base, ino);
	rootfs_inode_unref(ino);
	n->layer = layer;
	n->declared = 1;
	rc = 0;
out:
	rootfs_path_free(tc, tn);
	return rc;
}

static int apply_entry(rootfs_tree *t, unsigned layer, uint64_t ordinal, struct archive_entry *e,
		       struct rootfs_inode **placed, kiln_error **err)
{
	const char *path = entry_path(e);
	char **comps = NULL;
	size_t n = 0;
	struct rootfs_node *dir, *existing, *node;
	struct rootfs_inode *ino = NULL;
	mode_t type = archive_entry_filetype(e);
	int rc = -1;

	if (path == NULL)
		return kiln_err(err, KILN_E_INVALID, "entry %llu has no readable path",
				(unsigned long long)ordinal);
	if (rootfs_path_split(t, path, &comps, &n, err) < 0)
		return -1;
	if (n == 0) { /* "./": the root directory's own metadata */
		if (type == AE_IFDIR && archive_entry_hardlink(e) == NULL)
			rc = set_meta(t, t->root->inode, e, err);
		else
			rc = kiln_err(err, KILN_E_INVALID, "the root can only be a directory");
		goto out;
	}
	const char *victim = NULL;
	enum rootfs_whiteout wh = rootfs_whiteout_kind(comps[n - 1], &victim);
	if (wh != ROOTFS_WH_NONE) {
		rc = whiteout(t, layer, comps, n, wh, victim, err);
		goto out;
	}
	if (archive_entry_hardlink(e) == NULL && type == AE_IFSOCK) {
		kiln_warn("skipping socket '%s'", path);
		rc = 0;
		goto out;
	}
	dir = rootfs_tree_mkparents(t, comps, n - 1, layer, 1, err);
	if (dir == NULL)
		goto out;
	if (archive_entry_hardlink(e)) {
		rc = hardlink(t, layer, dir, comps[n - 1], archive_entry_hardlink(e), err);
		goto out;
	}
	existing = rootfs_node_lookup(t, dir, comps[n - 1]);
	if (type == AE_IFDIR && existing && S_ISDIR(existing->inode->mode)) {
		existing->layer = layer;
		existing->declared = 1;
		rc = set_meta(t, existing->inode, e, err);
		goto out;
	}
	switch (type) {
	case AE_IFREG: case AE_IFDIR: case AE_IFLNK: case AE_IFCHR: case AE_IFBLK: case AE_IFIFO:
		break;
	default:
		kiln_err(err, KILN_E_INVALID, "unsupported entry type 0%o", (unsigned)type);
		goto out;
	}
	ino = rootfs_inode_new(type);
	if (set_meta(t, ino, e, err) < 0)
		goto out;
	if (type == AE_IFREG && file_content(t, ino, e, layer, ordinal, err) < 0)
		goto out;
	if (type == AE_IFLNK) {
		const char *target = archive_entry_symlink(e);
		if (target == NULL)
			target = archive_entry_symlink_utf8(e);
		if (target == NULL || *target == '\0' || strlen(target) >= 4096) {
			kiln_err(err, KILN_E_INVALID, "symlink target is empty or longer than 4095 bytes");
			goto out;
		}
		ino->symlink = kiln_xstrdup(target);
	}
	if (type == AE_IFCHR || type == AE_IFBLK) {
		ino->rdev_major = (uint32_t)archive_entry_rdevmajor(e);
		ino->rdev_minor = (uint32_t)archive_entry_rdevminor(e);
	}
	if (existing)
		rootfs_node_remove(t, existing);
	node = rootfs_node_add(t, dir, comps[n - 1], ino);
	node->layer = layer;
	node->declared = 1;
	if (t->data_fd >= 0 && type == AE_IFREG && ino->nexts > 0)
		*placed = ino;
	ino = NULL;
	rc = 0;
out:
	if (ino) {
		ino->refs = 1;
		rootfs_inode_unref(ino);
	}
	rootfs_path_free(comps, n);
	return rc;
}

/* Pass-1 placement: the entry's bytes go to their final blocks right away. */
static int place_data(rootfs_tree *t, struct rootfs_inode *ino, struct archive *a, kiln_error **err)
{
	const void *buf;
	size_t len;
	la_int64_t off;
	int r;

	rootfs_place(t, ino);
	while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
		if (len == 0)
			continue;
		if (off < 0 || rootfs_runs_write(t->data_fd, t->data_name, ino, (uint64_t)off, buf, len, err) < 0) {
			if (*err == NULL)
				kiln_err(err, KILN_E_INVALID, "negative data offset");
			return -1;
		}
		t->data_bytes += len;
	}
	if (r != ARCHIVE_EOF)
		return kiln_err(err, KILN_E_INVALID, "%s", archive_error_string(a));
	return 0;
}

int rootfs_layer_apply(rootfs_tree *t, unsigned layer, struct archive *a, const char *name,
		       kiln_error **err)
{
	struct archive_entry *e;
	uint64_t ordinal = 0;
	int r;

	while ((r = kiln_tar_next(a, &e)) == ARCHIVE_OK) {
		if (++t->entries > t->limits.max_entries)
			return kiln_err(err, KILN_E_LIMIT, "%s: more than %llu entries in the image's layers",
					name, (unsigned long long)t->limits.max_entries);
		struct rootfs_inode *placed = NULL;
		if (apply_entry(t, layer, ordinal, e, &placed, err) < 0 ||
		    (placed && place_data(t, placed, a, err) < 0)) {
			const char *p = entry_path(e);
			return kiln_error_wrap(err, "%s: entry '%s'", name, p ? p : "?");
		}
		ordinal++;
	}
	if (r != ARCHIVE_EOF)
		return kiln_err(err, KILN_E_INVALID, "%s: %s", name, archive_error_string(a));
	return 0;
}

int rootfs_tree_apply_buffer(rootfs_tree *t, unsigned layer, const void *data, size_t len,
			     const char *name, kiln_error **err)
{
	struct archive *a = kiln_tar_reader_new();
	int rc;

	archive_read_support_format_empty(a);
	if (archive_read_open_memory(a, data, len) != ARCHIVE_OK) {
		rc = kiln_err(err, KILN_E_INVALID, "%s: %s", name, archive_error_string(a));
	} else {
		rc = rootfs_layer_apply(t, layer, a, name, err);
	}
	archive_read_free(a);
	return rc;
}
