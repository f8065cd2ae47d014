/* fromdir.c — build the merged tree from a plain directory (for
 * `kiln rootfs --from-dir`): types, modes, owners, times, xattrs, hardlinks by
 * (device, inode), and sparse files' data segments via SEEK_DATA/SEEK_HOLE. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "rootfs/internal.h"

struct hl {
	dev_t dev;
	ino_t ino;
	struct rootfs_inode *inode;
	struct hl *next;
};

struct walker {
	rootfs_tree *t;
	struct hl *links[4096];
};

static int read_xattrs(rootfs_tree *t, const char *path, struct rootfs_inode *ino, kiln_error **err)
{
	char names[65536], *value = NULL;
	ssize_t n = llistxattr(path, names, sizeof(names));

	if (n < 0)
		return (errno == ENOTSUP || errno == ENODATA) ? 0 : kiln_err_errno(err, errno, "listxattr %s", path);
	for (char *p = names; p < names + n; p += strlen(p) + 1) {
		ssize_t len = lgetxattr(path, p, NULL, 0);
		if (len < 0)
			continue;
		if ((uint64_t)len > t->limits.max_xattr)
			return kiln_err(err, KILN_E_LIMIT, "%s: xattr %s is over the limit", path, p);
		value = kiln_xmalloc((size_t)len + 1);
		len = lgetxattr(path, p, value, (size_t)len);
		if (len < 0) {
			free(value);
			continue;
		}
		ino->xattrs = kiln_xrealloc(ino->xattrs, (ino->nxattrs + 1) * sizeof(*ino->xattrs));
		ino->xattrs[ino->nxattrs].name = kiln_xstrdup(p);
		ino->xattrs[ino->nxattrs].value = value;
		ino->xattrs[ino->nxattrs++].len = (size_t)len;
	}
	return 0;
}

static int data_map(const char *path, const struct stat *st, struct rootfs_inode *ino, kiln_error **err)
{
	size_t cap = 4;
	off_t pos = 0;
	int fd;

	if (st->st_size == 0)
		return 0;
	if ((uint64_t)st->st_blocks * 512 >= (uint64_t)st->st_size) { /* dense: one segment */
		ino->exts = kiln_xcalloc(1, sizeof(*ino->exts));
		ino->exts[0].len = (uint64_t)st->st_size;
		ino->nexts = 1;
		return 0;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return kiln_err_errno(err, errno, "open %s", path);
	ino->exts = kiln_xcalloc(cap, sizeof(*ino->exts));
	while (pos < st->st_size) {
		off_t d = lseek(fd, pos, SEEK_DATA), h;
		if (d < 0)
			break; /* ENXIO: only a hole remains */
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0)
			h = st->st_size;
		if (ino->nexts == cap) {
			cap *= 2;
			ino->exts = kiln_xrealloc(ino->exts, cap * sizeof(*ino->exts));
		}
		ino->exts[ino->nexts].off = (uint64_t)d;
		ino->exts[ino->nexts++].len = (uint64_t)(h - d);
		pos = h;
	}
	close(fd);
	return 0;
}

static int walk_dir(struct walker *wk, const char *path, struct rootfs_node *dir, kiln_error **err)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int rc = 0;

	if (d == NULL)
		return kiln_err_errno(err, errno, "opendir %s", path);
	while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
		struct stat st;
		struct rootfs_inode *ino;
		struct rootfs_node *node;
		struct hl **slot = NULL;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		char *sub = kiln_path_join(path, de->d_name);
		if (lstat(sub, &st) < 0) {
			rc = kiln_err_errno(err, errno, "lstat %s", sub);
			free(sub);
			break;
		}
		if (++wk->t->entries > wk->t->limits.max_entries) {
			rc = kiln_err(err, KILN_E_LIMIT, "%s: more than %llu entries", path,
				      (unsigned long long)wk->t->limits.max_entries);
			free(sub);
			break;
		}
		if (S_ISSOCK(st.st_mode)) {
			kiln_warn("skipping socket %s", sub);
			free(sub);
			continue;
		}
		if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) {
			slot = &wk->links[(st.st_ino ^ st.st_dev) % 4096];
			for (struct hl *h = *slot; h; h = h->next)
				if (h->dev == st.st_dev && h->ino == st.st_ino) {
					rootfs_node_add(wk->t, dir, de->d_name, h->inode);
					free(sub);
					goto next;
				}
		}
		ino = rootfs_inode_new(st.st_mode & (S_IFMT | 07777));
		ino->uid = st.st_uid;
		ino->gid = st.st_gid;
		ino->mtime = st.st_mtim.tv_sec;
		ino->mtime_ns = (uint32_t)st.st_mtim.tv_nsec;
		if (S_ISREG(st.st_mode)) {
			ino->size = (uint64_t)st.st_size;
			ino->src = SRC_PATH;
			ino->src_path = kiln_xstrdup(sub);
			rc = data_map(sub, &st, ino, err);
		} else if (S_ISLNK(st.st_mode)) {
			char target[4096];
			ssize_t n = readlink(sub, target, sizeof(target) - 1);
			if (n <= 0)
				rc = kiln_err_errno(err, n < 0 ? errno : EINVAL, "readlink %s", sub);
			else {
				target[n] = '\0';
				ino->symlink = kiln_xstrdup(target);
			}
		} else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
			ino->rdev_major = major(st.st_rdev);
			ino->rdev_minor = minor(st.st_rdev);
		}
		if (rc == 0)
			rc = read_xattrs(wk->t, sub, ino, err);
		node = rootfs_node_add(wk->t, dir, de->d_name, ino);
		if (slot) {
			struct hl *h = kiln_xcalloc(1, sizeof(*h));
			h->dev = st.st_dev;
			h->ino = st.st_ino;
			h->inode = ino;
			h->next = *slot;
			*slot = h;
		}
		if (rc == 0 && S_ISDIR(st.st_mode))
			rc = walk_dir(wk, sub, node, err);
		free(sub);
next:;
	}
	if (rc == 0 && errno != 0)
		rc = kiln_err_errno(err, errno, "readdir %s", path);
	closedir(d);
	return rc;
}

int rootfs_tree_from_dir(rootfs_tree *t, const char *dir, kiln_error **err)
{
	struct walker *wk = kiln_xcalloc(1, sizeof(*wk));
	struct stat st;
	int rc = -1;

	wk->t = t;
	if (stat(dir, &st) < 0) {
		kiln_err_errno(err, errno, "%s", dir);
		goto out;
	}
	if (!S_ISDIR(st.st_mode)) {
		kiln_err(err, KILN_E_INVALID, "%s: not a directory", dir);
		goto out;
	}
	t->root->inode->mode = S_IFDIR | (st.st_mode & 07777);
	t->root->inode->uid = st.st_uid;
	t->root->inode->gid = st.st_gid;
	t->root->inode->mtime = st.st_mtim.tv_sec;
	t->root->inode->mtime_ns = (uint32_t)st.st_mtim.tv_nsec;
	if (read_xattrs(t, dir, t->root->inode, err) < 0)
		goto out;
	rc = walk_dir(wk, dir, t->root, err);
out:
	for (size_t i = 0; i < 4096; i++)
		for (struct hl *h = wk->links[i], *next; h; h = next) {
			next = h->next;
			free(h);
		}
	free(wk);
	return rc;
}
