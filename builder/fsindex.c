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
	char *c = kiln_path_clean(rooted);
	char *r = kiln_xstrdup(c + 1);

	free(rooted);
	free(c);
	return r;
}

/* ---- applying a layer: its tar headers, or their record ----
 * A layer's entries are what the index needs of it: each path with its
 * whiteout, mode, owner, hard link and symlink targets (and /etc/passwd's
 * and /etc/group's bytes).  Applying them depends on what is below (a hard
 * link takes its target's mode, a non-directory replaces a directory's
 * tree), so the record keeps the entries, not their effect, and replaying
 * it on any stack is applying the layer: no inflating of its bytes. */

struct entry {
	char op;                  /* 'O' opaque whiteout of path, 'W' whiteout of path, 'E' an entry */
	const char *path, *hardlink, *symlink, *data;
	size_t data_len;
	mode_t mode;
	uid_t uid;
	gid_t gid;
};

static void apply_entry(build_fsindex *x, const struct entry *en)
{
	if (en->op == 'O' || en->op == 'W') {
		remove_tree(x, en->path, en->op == 'W');
		return;
	}
	mode_t mode = en->mode;
	if (en->hardlink) {
		const struct build_fsnode *t = build_fsindex_get(x, en->hardlink);
		mode = t ? t->mode : (S_IFREG | 0644);
	}
	const struct build_fsnode *old = build_fsindex_get(x, en->path);
	if (old && S_ISDIR(old->mode) && !S_ISDIR(mode))
		remove_tree(x, en->path, false);
	build_fsindex_put(x, en->path, mode, en->uid, en->gid, en->symlink);
	if (en->data && S_ISREG(mode))
		build_fsindex_set_file(x, en->path, en->data, en->data_len);
}

static void rec_str(kiln_buf *b, const char *s, size_t n)
{
	kiln_buf_addf(b, "%zu:", n);
	kiln_buf_add(b, s, n);
	kiln_buf_addc(b, '\n');
}

static void record(kiln_buf *b, const struct entry *en)
{
	if (en->op == 'E')
		kiln_buf_addf(b, "E %o %u %u %d %d %d\n", (unsigned)en->mode, (unsigned)en->uid, (unsigned)en->gid,
			      en->hardlink != NULL, en->symlink != NULL, en->data != NULL);
	else
		kiln_buf_addf(b, "%c\n", en->op);
	rec_str(b, en->path, strlen(en->path));
	if (en->op != 'E')
		return;
	if (en->hardlink)
		rec_str(b, en->hardlink, strlen(en->hardlink));
	if (en->symlink)
		rec_str(b, en->symlink, strlen(en->symlink));
	if (en->data)
		rec_str(b, en->data, en->data_len);
}

static int from_tar(build_fsindex *x, const char *blob, kiln_buf *rec, kiln_error **err)
{
	struct archive *a = kiln_tar_reader_new();
	struct archive_entry *e;
	int r, rc = -1;
	size_t n = 0;

	if (archive_read_open_filename(a, blob, 65536) != ARCHIVE_OK) {
		kiln_err(err, KILN_E_INVALID, "layer %s: %s", blob, archive_error_string(a));
		goto out;
	}
	while ((r = kiln_tar_next(a, &e)) == ARCHIVE_OK) {
		char *path = build_layer_path(archive_entry_pathname(e)), *own = NULL, *target = NULL, *buf = NULL;
		char *slash = strrchr(path, '/');
		const char *base = slash ? slash + 1 : path, *name = NULL;
		enum rootfs_whiteout wh = rootfs_whiteout_kind(base, &name);
		struct entry en = { .op = 'E', .path = path };

		if (wh == ROOTFS_WH_INVALID) {
			kiln_err(err, KILN_E_INVALID, "layer %s: entry '%s': invalid whiteout name '%s'", blob, path,
				 base);
			free(path);
			goto out;
		}
		if (wh == ROOTFS_WH_OPAQUE || wh == ROOTFS_WH_FILE) {
			own = slash ? kiln_xstrndup(path, (size_t)(slash - path)) : kiln_xstrdup("");
			if (wh == ROOTFS_WH_FILE) {
				char *victim = own[0] ? kiln_xasprintf("%s/%s", own, name) : kiln_xstrdup(name);
				free(own);
				own = victim;
			}
			en.op = wh == ROOTFS_WH_OPAQUE ? 'O' : 'W';
			en.path = own;
		} else if (wh != ROOTFS_WH_NONE || path[0] == '\0') {
			free(path);
			continue;
		} else {
			const char *hl = archive_entry_hardlink(e);
			en.mode = archive_entry_mode(e);
			en.uid = (uid_t)archive_entry_uid(e);
			en.gid = (gid_t)archive_entry_gid(e);
			en.symlink = archive_entry_symlink(e);
			if (hl)
				en.hardlink = target = build_layer_path(hl);
			la_int64_t size = archive_entry_size(e);
			if ((strcmp(path, "etc/passwd") == 0 || strcmp(path, "etc/group") == 0) && size >= 0 &&
			    size < (1 << 20) && (hl || S_ISREG(en.mode))) {
				buf = kiln_xmalloc((size_t)size + 1);
				la_ssize_t got = archive_read_data(a, buf, (size_t)size);
				en.data = buf;
				en.data_len = got > 0 ? (size_t)got : 0;
			}
		}
		apply_entry(x, &en);
		if (rec)
			record(rec, &en);
		n++;
		free(buf);
		free(target);
		free(own);
		free(path);
	}
	if (r != ARCHIVE_EOF) {
		kiln_err(err, KILN_E_INVALID, "layer %s: %s", blob, archive_error_string(a));
		goto out;
	}
	if (rec)
		kiln_buf_addf(rec, "end %zu\n", n);
	rc = 0;
out:
	archive_read_free(a);
	return rc;
}

static const char rec_magic[] = "kiln-layer-index/1\n";

/* A length-prefixed string at *p ("N:BYTES\n"); false when the record is cut or bad. */
static bool take_str(const char **p, const char *end, const char **s, size_t *n)
{
	char *colon;
	unsigned long long v = strtoull(*p, &colon, 10);

	if (colon == *p || colon >= end || *colon != ':' || v > (unsigned long long)(end - colon - 1) ||
	    colon[1 + v] != '\n')
		return false;
	*s = colon + 1;
	*n = (size_t)v;
	*p = colon + 2 + v;
	return true;
}

/* Replay a record; false (the index untouched) when it is not a whole one. */
static bool from_record(build_fsindex *x, const char *data, size_t len)
{
	const char *p = data + strlen(rec_magic), *end = data + len;
	struct entry *v = NULL;
	kiln_strv strs = KILN_STRV_INIT;
	size_t n = 0, cap = 0;
	bool ok = false;

	if (len < strlen(rec_magic) || memcmp(data, rec_magic, strlen(rec_magic)) != 0 || data[len - 1] != '\n')
		return false;
	/* parsed whole first: a cut record changes nothing */
	while (p < end) {
		struct entry en = { 0 };
		const char *s;
		size_t sl;
		unsigned mode = 0, uid = 0, gid = 0;
		int hl = 0, ln = 0, dt = 0, used = 0;
		if (strncmp(p, "end ", 4) == 0) {
			ok = strtoull(p + 4, NULL, 10) == n && memchr(p, '\n', (size_t)(end - p)) == end - 1;
			break;
		}
		en.op = *p;
		if (en.op == 'E' && sscanf(p, "E %o %u %u %d %d %d\n%n", &mode, &uid, &gid, &hl, &ln, &dt, &used) == 6 &&
		    used > 0)
			p += used;
		else if ((en.op == 'O' || en.op == 'W') && p + 1 < end && p[1] == '\n')
			p += 2;
		else
			break;
		const char **fields[4] = { &en.path, hl ? &en.hardlink : NULL, ln ? &en.symlink : NULL, dt ? &en.data : NULL };
		bool bad = false;
		for (int k = 0; k < 4 && !bad; k++) {
			if (!fields[k])
				continue;
			if (!take_str(&p, end, &s, &sl)) {
				bad = true;
				break;
			}
			kiln_strv_push_owned(&strs, kiln_xstrndup(s, sl));
			*fields[k] = strs.v[strs.n - 1];
			if (k == 3)
				en.data_len = sl;
		}
		if (bad)
			break;
		en.mode = (mode_t)mode;
		en.uid = (uid_t)uid;
		en.gid = (gid_t)gid;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			v = kiln_xrealloc(v, cap * sizeof(*v));
		}
		v[n++] = en;
	}
	if (ok)
		for (size_t i = 0; i < n; i++)
			apply_entry(x, &v[i]);
	free(v);
	kiln_strv_free(&strs);
	return ok;
}

int build_fsindex_apply_layer_cached(build_fsindex *x, const char *blob, const char *record_path, kiln_error **err)
{
	char *data = NULL;
	size_t len = 0;
	kiln_error *e = NULL;
	kiln_buf rec = KILN_BUF_INIT;
	int rc;

	if (record_path && kiln_read_file(record_path, &data, &len, 256u << 20, &e) == 0 && from_record(x, data, len)) {
		free(data);
		return 0;
	}
	kiln_error_free(e);
	e = NULL;
	free(data);
	if (record_path)
		kiln_buf_add(&rec, rec_magic, strlen(rec_magic));
	rc = from_tar(x, blob, record_path ? &rec : NULL, err);
	if (rc == 0 && record_path) {
		/* only a cache: a failure to keep it costs the next build the inflating */
		char *dir = kiln_xstrdup(record_path), *slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
		if (kiln_mkdir_p(dir, 0755, &e) < 0 || kiln_write_atomic(record_path, rec.buf, rec.len, 0644, &e) < 0)
			kiln_error_free(e);
		free(dir);
	}
	kiln_buf_free(&rec);
	return rc;
}

int build_fsindex_apply_layer(build_fsindex *x, const char *blob, kiln_error **err)
{
	return build_fsindex_apply_layer_cached(x, blob, NULL, err);
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
