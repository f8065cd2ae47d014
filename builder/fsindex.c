/* fsindex.c — what the image being built holds so far, path by path, built
 * from layer tar headers (whiteouts applied).  COPY needs it to resolve its
 * destination like docker (an existing directory, symlinks on the way) and
 * --chown names need the image's /etc/passwd and /etc/group, kept here. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "builder/internal.h"
#include "rootfs/rootfs.h"

struct node {
	struct build_fsnode n;
	struct node *next;
};

struct build_fsindex {
	struct node **buckets;
	size_t nb, count;
	char *passwd, *group; /* latest contents, NULL if absent */
};

static size_t hash(const char *s)
{
	size_t h = 1469598103934665603ULL;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

build_fsindex *build_fsindex_new(void)
{
	build_fsindex *x = kiln_xcalloc(1, sizeof(*x));
	x->nb = 1024;
	x->buckets = kiln_xcalloc(x->nb, sizeof(*x->buckets));
	return x;
}

static void free_node(struct node *nd)
{
	free(nd->n.path);
	free(nd->n.link);
	free(nd);
}

void build_fsindex_free(build_fsindex *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < x->nb; i++)
		for (struct node *nd = x->buckets[i], *nx; nd; nd = nx) {
			nx = nd->next;
			free_node(nd);
		}
	free(x->buckets);
	free(x->passwd);
	free(x->group);
	free(x);
}

static void rehash(build_fsindex *x)
{
	size_t nb = x->nb * 4;
	struct node **b = kiln_xcalloc(nb, sizeof(*b));

	for (size_t i = 0; i < x->nb; i++)
		for (struct node *nd = x->buckets[i], *nx; nd; nd = nx) {
			nx = nd->next;
			size_t h = hash(nd->n.path) % nb;
			nd->next = b[h];
			b[h] = nd;
		}
	free(x->buckets);
	x->buckets = b;
	x->nb = nb;
}

const struct build_fsnode *build_fsindex_get(const build_fsindex *x, const char *path)
{
	for (struct node *nd = x->buckets[hash(path) % x->nb]; nd; nd = nd->next)
		if (strcmp(nd->n.path, path) == 0)
			return &nd->n;
	return NULL;
}

void build_fsindex_put(build_fsindex *x, const char *path, mode_t mode, uid_t uid, gid_t gid, const char *link)
{
	size_t h = hash(path) % x->nb;
	struct node *nd;

	for (nd = x->buckets[h]; nd; nd = nd->next)
		if (strcmp(nd->n.path, path) == 0)
			break;
	if (!nd) {
		nd = kiln_xcalloc(1, sizeof(*nd));
		nd->n.path = kiln_xstrdup(path);
		nd->next = x->buckets[h];
		x->buckets[h] = nd;
		if (++x->count > 2 * x->nb)
			rehash(x);
	} else {
		free(nd->n.link);
	}
	nd->n.mode = mode;
	nd->n.uid = uid;
	nd->n.gid = gid;
	nd->n.link = link ? kiln_xstrdup(link) : NULL;
}

/* Remove `path` and everything below it (below only, when `self` is false). */
static void remove_tree(build_fsindex *x, const char *path, bool self)
{
	size_t len = strlen(path);

	for (size_t i = 0; i < x->nb; i++)
		for (struct node **pp = &x->buckets[i]; *pp;) {
			const char *p = (*pp)->n.path;
			bool below = len == 0 || (strncmp(p, path, len) == 0 && p[len] == '/');
			if (below || (self && strcmp(p, path) == 0)) {
				struct node *dead = *pp;
				*pp = dead->next;
				free_node(dead);
				x->count--;
			} else {
				pp = &(*pp)->next;
			}
		}
	if (self && strcmp(path, "etc/passwd") == 0) {
		free(x->passwd);
		x->passwd = NULL;
	}
	if (self && strcmp(path, "etc/group") == 0) {
		free(x->group);
		x->group = NULL;
	}
}

void build_fsindex_set_file(build_fsindex *x, const char *path, const char *data, size_t len)
{
	char **slot = strcmp(path, "etc/passwd") == 0 ? &x->passwd
		      : strcmp(path, "etc/group") == 0 ? &x->group : NULL;
	if (!slot)
		return;
	free(*slot);
	*slot = data ? kiln_xstrndup(data, len) : NULL;
}

const char *build_fsindex_file(const build_fsindex *x, const char *path)
{
	return strcmp(path, "etc/passwd") == 0 ? x->passwd : strcmp(path, "etc/group") == 0 ? x->group : NULL;
}

/* Layer paths as they appear in tars ("./a/b/", "/a") in the index's form ("a/b"). */
char *build_layer_path(const char *name)
{
	/* cleaned as if rooted, so ".." can never climb above the root */
	char *rooted = kiln_xasprintf("/%s", name);
	char *c = build_path_clean(rooted);
	char *r = kiln_xstrdup(c + 1);

	free(rooted);
	free(c);
	return r;
}

int build_fsindex_apply_layer(build_fsindex *x, const char *blob, kiln_error **err)
{
	struct archive *a = kiln_tar_reader_new();
	struct archive_entry *e;
	int r, rc = -1;

	if (archive_read_open_filename(a, blob, 65536) != ARCHIVE_OK) {
		kiln_err(err, KILN_E_INVALID, "layer %s: %s", blob, archive_error_string(a));
		goto out;
	}
	while ((r = kiln_tar_next(a, &e)) == ARCHIVE_OK) {
		char *path = build_layer_path(archive_entry_pathname(e));
		char *slash = strrchr(path, '/');
		const char *base = slash ? slash + 1 : path, *name = NULL;
		enum rootfs_whiteout wh = rootfs_whiteout_kind(base, &name);

		if (wh == ROOTFS_WH_INVALID) {
			kiln_err(err, KILN_E_INVALID, "layer %s: entry '%s': invalid whiteout name '%s'", blob, path,
				 base);
			free(path);
			goto out;
		}
		if (wh != ROOTFS_WH_NONE) {
			char *dir = slash ? kiln_xstrndup(path, (size_t)(slash - path)) : kiln_xstrdup("");
			if (wh == ROOTFS_WH_OPAQUE) {
				remove_tree(x, dir, false);
			} else if (wh == ROOTFS_WH_FILE) {
				char *victim = dir[0] ? kiln_xasprintf("%s/%s", dir, name) : kiln_xstrdup(name);
				remove_tree(x, victim, true);
				free(victim);
			}
			free(dir);
			free(path);
			continue;
		}
		if (path[0] == '\0') {
			free(path);
			continue;
		}
		const char *hl = archive_entry_hardlink(e);
		mode_t mode = archive_entry_mode(e);
		if (hl) {
			char *target = build_layer_path(hl);
			const struct build_fsnode *t = build_fsindex_get(x, target);
			mode = t ? t->mode : (S_IFREG | 0644);
			free(target);
		}
		const struct build_fsnode *old = build_fsindex_get(x, path);
		if (old && S_ISDIR(old->mode) && !S_ISDIR(mode))
			remove_tree(x, path, false);
		build_fsindex_put(x, path, mode, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e),
				  archive_entry_symlink(e));
		if ((strcmp(path, "etc/passwd") == 0 || strcmp(path, "etc/group") == 0) && S_ISREG(mode)) {
			la_int64_t size = archive_entry_size(e);
			if (size >= 0 && size < (1 << 20)) {
				char *buf = kiln_xmalloc((size_t)size + 1);
				la_ssize_t n = archive_read_data(a, buf, (size_t)size);
				build_fsindex_set_file(x, path, buf, n > 0 ? (size_t)n : 0);
				free(buf);
			}
		}
		free(path);
	}
	if (r != ARCHIVE_EOF) {
		kiln_err(err, KILN_E_INVALID, "layer %s: %s", blob, archive_error_string(a));
		goto out;
	}
	rc = 0;
out:
	archive_read_free(a);
	return rc;
}

/* Resolve an image path following symlinks (scoped to the image root) in
 * every component, or all but the last.  Returns the path in index form. */
char *build_fsindex_resolve(const build_fsindex *x, const char *path, bool follow_last)
{
	kiln_buf done = KILN_BUF_INIT;
	char *todo = build_layer_path(path);
	int hops = 0;

	for (;;) {
		if (todo[0] == '\0')
			break;
		char *slash = strchr(todo, '/');
		char *comp = slash ? kiln_xstrndup(todo, (size_t)(slash - todo)) : kiln_xstrdup(todo);
		char *rest = kiln_xstrdup(slash ? slash + 1 : "");
		char *cand = done.len ? kiln_xasprintf("%s/%s", done.buf, comp) : kiln_xstrdup(comp);
		const struct build_fsnode *nd = build_fsindex_get(x, cand);

		free(todo);
		if (nd && S_ISLNK(nd->mode) && nd->link && (rest[0] || follow_last) && hops++ < 40) {
			char *joined;
			if (nd->link[0] == '/')
				joined = kiln_xasprintf("%s/%s", nd->link, rest);
			else
				joined = kiln_xasprintf("%s/%s/%s", done.len ? done.buf : ".", nd->link, rest);
			todo = build_layer_path(joined);
			/* lexical ".." above the root stays at the root */
			while (strncmp(todo, "../", 3) == 0 || strcmp(todo, "..") == 0)
				memmove(todo, todo + (todo[2] ? 3 : 2), strlen(todo) - (todo[2] ? 2 : 1));
			free(joined);
			kiln_buf_reset(&done);
		} else {
			kiln_buf_reset(&done);
			kiln_buf_adds(&done, cand);
			todo = kiln_xstrdup(rest);
		}
		free(comp);
		free(rest);
		free(cand);
	}
	free(todo);
	return kiln_buf_detach(&done);
}
