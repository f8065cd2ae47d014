/* tree.c — the in-memory merged filesystem tree: nodes (names) pointing at
 * shared inodes (so hardlinks are one inode), a hash table for (dir, name)
 * lookups, path splitting and symlink resolution scoped to the root, so no
 * layer can make a path lead outside the image. */
#include <stdlib.h>
#include <string.h>

#include "rootfs/internal.h"

#define MAX_SYMLINK_HOPS 40

void rootfs_limits_default(struct rootfs_limits *l)
{
	l->max_entries = 4000000;
	l->max_bytes = 256ULL << 30;
	l->max_file_size = 64ULL << 30;
	l->max_path = 4096;
	l->max_xattr = 65536;
}

struct rootfs_inode *rootfs_inode_new(mode_t mode)
{
	struct rootfs_inode *ino = kiln_xcalloc(1, sizeof(*ino));

	ino->mode = mode;
	return ino;
}

void rootfs_inode_unref(struct rootfs_inode *ino)
{
	if (ino == NULL || --ino->refs > 0)
		return;
	for (size_t i = 0; i < ino->nxattrs; i++) {
		free(ino->xattrs[i].name);
		free(ino->xattrs[i].value);
	}
	free(ino->xattrs);
	free(ino->exts);
	free(ino->symlink);
	free(ino->src_path);
	free(ino->runs);
	free(ino);
}

static size_t hash_of(const struct rootfs_node *dir, const char *name)
{
	uint64_t h = 1469598103934665603ULL ^ (uint64_t)(uintptr_t)dir;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 1099511628211ULL;
	return (size_t)(h ^ (h >> 29));
}

static void htab_grow(rootfs_tree *t)
{
	size_t nsize = t->hsize ? t->hsize * 2 : 1024;
	struct rootfs_node **n = kiln_xcalloc(nsize, sizeof(*n));

	for (size_t i = 0; i < t->hsize; i++) {
		struct rootfs_node *x = t->htab[i], *next;
		for (; x; x = next) {
			next = x->hnext;
			size_t b = hash_of(x->parent, x->name) & (nsize - 1);
			x->hnext = n[b];
			n[b] = x;
		}
	}
	free(t->htab);
	t->htab = n;
	t->hsize = nsize;
}

rootfs_tree *rootfs_tree_new(const struct rootfs_limits *limits)
{
	rootfs_tree *t = kiln_xcalloc(1, sizeof(*t));

	if (limits)
		t->limits = *limits;
	else
		rootfs_limits_default(&t->limits);
	t->data_fd = -1;
	t->root = kiln_xcalloc(1, sizeof(*t->root));
	t->root->name = kiln_xstrdup("");
	t->root->inode = rootfs_inode_new(S_IFDIR | 0755);
	t->root->inode->refs = 1;
	t->root->inode->nlink = 1;
	htab_grow(t);
	return t;
}

static void node_free(struct rootfs_node *n)
{
	for (size_t i = 0; i < n->nkids; i++)
		node_free(n->kids[i]);
	free(n->kids);
	if (n->inode) {
		n->inode->nlink--;
		rootfs_inode_unref(n->inode);
	}
	free(n->name);
	free(n);
}

void rootfs_tree_free(rootfs_tree *t)
{
	if (t == NULL)
		return;
	node_free(t->root);
	free(t->htab);
	free(t);
}

struct rootfs_node *rootfs_node_lookup(rootfs_tree *t, struct rootfs_node *dir, const char *name)
{
	struct rootfs_node *x = t->htab[hash_of(dir, name) & (t->hsize - 1)];

	for (; x; x = x->hnext)
		if (x->parent == dir && strcmp(x->name, name) == 0)
			return x;
	return NULL;
}

struct rootfs_node *rootfs_node_add(rootfs_tree *t, struct rootfs_node *dir, const char *name,
				    struct rootfs_inode *ino)
{
	struct rootfs_node *n = kiln_xcalloc(1, sizeof(*n));
	size_t b;

	n->name = kiln_xstrdup(name);
	n->parent = dir;
	n->inode = ino;
	ino->refs++;
	ino->nlink++;
	if (dir->nkids == dir->capkids) {
		dir->capkids = dir->capkids ? dir->capkids * 2 : 4;
		dir->kids = kiln_xrealloc(dir->kids, dir->capkids * sizeof(*dir->kids));
	}
	dir->kids[dir->nkids++] = n;
	if (t->hcount + 1 > t->hsize)
		htab_grow(t);
	b = hash_of(dir, name) & (t->hsize - 1);
	n->hnext = t->htab[b];
	t->htab[b] = n;
	t->hcount++;
	t->nnodes++;
	return n;
}

static void unhash(rootfs_tree *t, struct rootfs_node *n)
{
	struct rootfs_node **pp = &t->htab[hash_of(n->parent, n->name) & (t->hsize - 1)];

	for (; *pp; pp = &(*pp)->hnext)
		if (*pp == n) {
			*pp = n->hnext;
			t->hcount--;
			t->nnodes--;
			break;
		}
	for (size_t i = 0; i < n->nkids; i++)
		unhash(t, n->kids[i]);
}

void rootfs_node_remove(rootfs_tree *t, struct rootfs_node *n)
{
	struct rootfs_node *dir = n->parent;

	if (dir == NULL)
		return; /* the root stays */
	unhash(t, n);
	for (size_t i = 0; i < dir->nkids; i++)
		if (dir->kids[i] == n) {
			dir->kids[i] = dir->kids[--dir->nkids];
			break;
		}
	node_free(n);
}

/* ---- paths ------------------------------------------------------------- */
void rootfs_path_free(char **comps, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(comps[i]);
	free(comps);
}

int rootfs_path_split(const rootfs_tree *t, const char *path, char ***comps, size_t *n,
		      kiln_error **err)
{
	size_t len = strlen(path), cap = 8;
	const char *p = path;
	char **v;

	*comps = NULL;
	*n = 0;
	if (len > t->limits.max_path)
		return kiln_err(err, KILN_E_LIMIT, "path of %zu bytes is longer than the limit of %u",
				len, t->limits.max_path);
	v = kiln_xcalloc(cap, sizeof(*v));
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t l = slash ? (size_t)(slash - p) : strlen(p);
		if (l == 2 && p[0] == '.' && p[1] == '.') {
			rootfs_path_free(v, *n);
			*n = 0;
			return kiln_err(err, KILN_E_INVALID, "path '%s' contains '..'", path);
		}
		if (l > 255) {
			rootfs_path_free(v, *n);
			*n = 0;
			return kiln_err(err, KILN_E_LIMIT, "path '%.100s...' has a name longer than 255 bytes", path);
		}
		if (l > 0 && !(l == 1 && p[0] == '.')) {
			if (*n + 1 == cap) {
				cap *= 2;
				v = kiln_xrealloc(v, cap * sizeof(*v));
			}
			v[(*n)++] = kiln_xstrndup(p, l);
		}
		p += l;
		if (*p == '/')
			p++;
	}
	*comps = v;
	return 0;
}

static struct rootfs_node *implied_dir(rootfs_tree *t, struct rootfs_node *dir, const char *name,
				       unsigned layer)
{
	struct rootfs_inode *ino = rootfs_inode_new(S_IFDIR | 0755);
	struct rootfs_node *n;

	ino->mtime = t->default_mtime;
	n = rootfs_node_add(t, dir, name, ino);
	n->layer = layer;
	return n;
}

/* Walk `comps` from `dir`; symlinks met on the way are expanded in place (a
 * target is split and walked from the root or the link's directory). */
static struct rootfs_node *walk(rootfs_tree *t, struct rootfs_node *dir, char **comps, size_t n,
				unsigned layer, int create, int *hops, kiln_error **err)
{
	for (size_t i = 0; i < n; i++) {
		struct rootfs_node *next = rootfs_node_lookup(t, dir, comps[i]);
		if (next == NULL) {
			if (!create) {
				kiln_err(err, KILN_E_NOTFOUND, "'%s' does not exist", comps[i]);
				return NULL;
			}
			next = implied_dir(t, dir, comps[i], layer);
		} else if (S_ISLNK(next->inode->mode)) {
			char **sub = NULL;
			size_t nsub = 0;
			const char *target = next->inode->symlink;
			if (++*hops > MAX_SYMLINK_HOPS) {
				kiln_err(err, KILN_E_INVALID, "too many levels of symbolic links at '%s'", comps[i]);
				return NULL;
			}
			/* ".." in a target is legal: resolve it lexically, stopping at the root. */
			struct rootfs_node *base = target[0] == '/' ? t->root : dir;
			const char *p = target;
			kiln_buf clean = KILN_BUF_INIT;
			while (*p) {
				const char *slash = strchr(p, '/');
				size_t l = slash ? (size_t)(slash - p) : strlen(p);
				if (l == 2 && p[0] == '.' && p[1] == '.' && clean.len == 0)
					base = base->parent ? base->parent : base;
				else if (l == 2 && p[0] == '.' && p[1] == '.') {
					/* drop the last component already collected */
					char *last = strrchr(clean.buf, '/');
					clean.len = last ? (size_t)(last - clean.buf) : 0;
					clean.buf[clean.len] = '\0';
				} else if (l > 0 && !(l == 1 && p[0] == '.')) {
					if (clean.len)
						kiln_buf_addc(&clean, '/');
					kiln_buf_add(&clean, p, l);
				}
				p += l;
				if (*p == '/')
					p++;
			}
			int rc = rootfs_path_split(t, clean.buf, &sub, &nsub, err);
			kiln_buf_free(&clean);
			if (rc < 0)
				return NULL;
			next = walk(t, base, sub, nsub, layer, create, hops, err);
			rootfs_path_free(sub, nsub);
			if (next == NULL)
				return NULL;
		}
		if (!S_ISDIR(next->inode->mode)) {
			kiln_err(err, KILN_E_INVALID, "'%s' is not a directory", comps[i]);
			return NULL;
		}
		/* A layer that puts something under a directory has that directory
		 * too: an opaque marker above must keep it (overlayfs semantics). */
		if (create)
			next->layer = layer;
		dir = next;
	}
	return dir;
}

struct rootfs_node *rootfs_tree_mkparents(rootfs_tree *t, char **comps, size_t n, unsigned layer,
					  int create, kiln_error **err)
{
	int hops = 0;

	return walk(t, t->root, comps, n, layer, create, &hops, err);
}

/* ---- listing and order --------------------------------------------------- */
static int kid_cmp(const void *a, const void *b)
{
	const struct rootfs_node *x = *(const struct rootfs_node *const *)a;
	const struct rootfs_node *y = *(const struct rootfs_node *const *)b;

	return strcmp(x->name, y->name);
}

static void sort_node(struct rootfs_node *n)
{
	if (n->nkids > 1)
		qsort(n->kids, n->nkids, sizeof(*n->kids), kid_cmp);
	for (size_t i = 0; i < n->nkids; i++)
		sort_node(n->kids[i]);
}

void rootfs_tree_sort(rootfs_tree *t) { sort_node(t->root); }

static char type_char(mode_t m)
{
	switch (m & S_IFMT) {
	case S_IFDIR: return 'd';
	case S_IFREG: return 'f';
	case S_IFLNK: return 'l';
	case S_IFCHR: return 'c';
	case S_IFBLK: return 'b';
	case S_IFIFO: return 'p';
	default: return '?';
	}
}

static void list_node(const struct rootfs_node *n, kiln_buf *path, kiln_buf *out)
{
	size_t keep = path->len;
	const struct rootfs_inode *i = n->inode;

	if (n->parent) {
		if (path->len)
			kiln_buf_addc(path, '/');
		kiln_buf_adds(path, n->name);
	}
	kiln_buf_addf(out, "%s %c %04o %u %u %llu %u", path->len ? path->buf : ".", type_char(i->mode),
		      (unsigned)(i->mode & 07777), i->uid, i->gid,
		      S_ISREG(i->mode) ? (unsigned long long)i->size : 0ULL,
		      S_ISDIR(i->mode) ? 0 : i->nlink);
	if (i->symlink)
		kiln_buf_addf(out, " -> %s", i->symlink);
	if (S_ISCHR(i->mode) || S_ISBLK(i->mode))
		kiln_buf_addf(out, " %u,%u", i->rdev_major, i->rdev_minor);
	for (size_t x = 0; x < i->nxattrs; x++)
		kiln_buf_addf(out, " xattr=%s", i->xattrs[x].name);
	kiln_buf_addc(out, '\n');
	for (size_t k = 0; k < n->nkids; k++)
		list_node(n->kids[k], path, out);
	path->len = keep;
	path->buf[keep] = '\0';
}

void rootfs_tree_list(const rootfs_tree *t, kiln_buf *out)
{
	kiln_buf path = KILN_BUF_INIT;

	sort_node(t->root);
	kiln_buf_grow(&path, 64);
	list_node(t->root, &path, out);
	kiln_buf_free(&path);
}

uint64_t rootfs_tree_entries(const rootfs_tree *t) { return t->entries; }

/* ---- placement ---------------------------------------------------------- */
/* sparse_super keeps backups in groups 0, 1 and powers of 3, 5 and 7 */
int rootfs_backup_group(uint64_t g)
{
	if (g <= 1)
		return 1;
	for (uint64_t b = 3; b <= 7; b += 2) {
		uint64_t p = b;
		while (p < g)
			p *= b;
		if (p == g)
			return 1;
	}
	return 0;
}

static void add_run(struct rootfs_inode *ino, uint64_t lblk, uint64_t pblk, uint64_t len, size_t *cap)
{
	struct rootfs_run *last = ino->nruns ? &ino->runs[ino->nruns - 1] : NULL;

	if (last && last->lblk + last->len == lblk && last->pblk + last->len == pblk) {
		last->len += len;
		return;
	}
	if (ino->nruns == *cap) {
		*cap = *cap ? *cap * 2 : 2;
		ino->runs = kiln_xrealloc(ino->runs, *cap * sizeof(*ino->runs));
	}
	ino->runs[ino->nruns].lblk = lblk;
	ino->runs[ino->nruns].pblk = pblk;
	ino->runs[ino->nruns++].len = len;
}

void rootfs_place(rootfs_tree *t, struct rootfs_inode *ino)
{
	uint64_t last_end = 0;
	size_t cap = 0;

	for (size_t i = 0; i < ino->nexts; i++) {
		uint64_t a = ino->exts[i].off / 4096, b = (ino->exts[i].off + ino->exts[i].len + 4095) / 4096;
		if (a < last_end)
			a = last_end;
		while (a < b) {
			uint64_t g = t->data_next / ROOTFS_GROUP_BLOCKS, gstart = g * ROOTFS_GROUP_BLOCKS;
			if (rootfs_backup_group(g) && t->data_next < gstart + ROOTFS_BACKUP_RESERVE) {
				t->data_next = gstart + ROOTFS_BACKUP_RESERVE;
				continue;
			}
			uint64_t gb = g + 1;
			while (!rootfs_backup_group(gb))
				gb++;
			uint64_t room = gb * ROOTFS_GROUP_BLOCKS - t->data_next;
			uint64_t n = b - a < room ? b - a : room;
			add_run(ino, a, t->data_next, n, &cap);
			t->data_next += n;
			a += n;
		}
		if (b > last_end)
			last_end = b;
	}
}
