/* tree.c — a source tree: a directory on disk listed once through a
 * .dockerignore matcher, never following symlinks (so nothing outside the
 * root is ever read), sorted so that lookups and layer order are stable. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "builder/builder.h"

struct build_tree {
	char *root;
	struct build_entry *v;
	size_t n, cap;
};

static void push_entry(build_tree *t, const char *path, const struct stat *st, char *link)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 64;
		t->v = kiln_xrealloc(t->v, t->cap * sizeof(*t->v));
	}
	t->v[t->n].path = kiln_xstrdup(path);
	t->v[t->n].st = *st;
	t->v[t->n].link = link;
	t->n++;
}

static void pop_entry(build_tree *t)
{
	t->n--;
	free(t->v[t->n].path);
	free(t->v[t->n].link);
}

static int walk(build_tree *t, int dirfd, const char *rel, const build_ignore *ig, kiln_error **err)
{
	DIR *d = fdopendir(dirfd);
	struct dirent *de;
	int rc = -1;

	if (!d) {
		close(dirfd);
		return kiln_err_errno(err, errno, "context: open %s", rel[0] ? rel : ".");
	}
	while ((errno = 0, de = readdir(d)) != NULL) {
		struct stat st;
		char *path, *link = NULL;
		bool excluded;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		path = rel[0] ? kiln_xasprintf("%s/%s", rel, de->d_name) : kiln_xstrdup(de->d_name);
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			kiln_err_errno(err, errno, "context: stat %s", path);
			free(path);
			goto out;
		}
		if (S_ISSOCK(st.st_mode)) {
			free(path);
			continue;
		}
		excluded = build_ignore_match(ig, path);
		if (S_ISDIR(st.st_mode)) {
			size_t mark = t->n;
			int fd;

			if (excluded && !build_ignore_has_exclusions(ig)) {
				free(path);
				continue;
			}
			push_entry(t, path, &st, NULL);
			fd = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0) {
				kiln_err_errno(err, errno, "context: open %s", path);
				free(path);
				goto out;
			}
			if (walk(t, fd, path, ig, err) < 0) {
				free(path);
				goto out;
			}
			/* an excluded directory stays only as the parent of an exception */
			if (excluded && t->n == mark + 1)
				pop_entry(t);
			free(path);
			continue;
		}
		if (!excluded) {
			if (S_ISLNK(st.st_mode)) {
				char buf[PATH_MAX];
				ssize_t n = readlinkat(dirfd, de->d_name, buf, sizeof(buf) - 1);
				if (n < 0) {
					kiln_err_errno(err, errno, "context: readlink %s", path);
					free(path);
					goto out;
				}
				link = kiln_xstrndup(buf, (size_t)n);
			}
			push_entry(t, path, &st, link);
		}
		free(path);
	}
	if (errno) {
		kiln_err_errno(err, errno, "context: read directory %s", rel[0] ? rel : ".");
		goto out;
	}
	rc = 0;
out:
	closedir(d);
	return rc;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct build_entry *)a)->path, ((const struct build_entry *)b)->path);
}

int build_tree_open(const char *root, const build_ignore *ig, build_tree **out, kiln_error **err)
{
	build_tree *t = kiln_xcalloc(1, sizeof(*t));
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	t->root = kiln_xstrdup(root);
	if (fd < 0) {
		kiln_err_errno(err, errno, "context %s", root);
		build_tree_free(t);
		return -1;
	}
	if (walk(t, fd, "", ig, err) < 0) {
		build_tree_free(t);
		return -1;
	}
	if (t->n)
		qsort(t->v, t->n, sizeof(*t->v), cmp_entry);
	*out = t;
	return 0;
}

void build_tree_free(build_tree *t)
{
	if (!t)
		return;
	while (t->n)
		pop_entry(t);
	free(t->v);
	free(t->root);
	free(t);
}

const char *build_tree_root(const build_tree *t)
{
	return t->root;
}

size_t build_tree_count(const build_tree *t)
{
	return t->n;
}

const struct build_entry *build_tree_entry(const build_tree *t, size_t i)
{
	return i < t->n ? &t->v[i] : NULL;
}

/* First index whose path is >= key. */
static size_t lower_bound(const build_tree *t, const char *key)
{
	return kiln_lower_bound(t->v, t->n, sizeof(t->v[0]), offsetof(struct build_entry, path), key);
}

const struct build_entry *build_tree_find(const build_tree *t, const char *path)
{
	size_t i = lower_bound(t, path);

	return i < t->n && strcmp(t->v[i].path, path) == 0 ? &t->v[i] : NULL;
}

void build_tree_children(const build_tree *t, const char *dir, size_t *begin, size_t *end)
{
	if (strcmp(dir, ".") == 0) {
		*begin = 0;
		*end = t->n;
		return;
	}
	/* all paths with the prefix "dir/" are contiguous in strcmp order */
	char *lo = kiln_xasprintf("%s/", dir), *hi = kiln_xasprintf("%s0", dir); /* '0' follows '/' */
	*begin = lower_bound(t, lo);
	*end = lower_bound(t, hi);
	free(lo);
	free(hi);
}
