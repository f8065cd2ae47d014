/* copy.c — COPY and ADD source resolution as BuildKit does it: sources are
 * context paths (globs allowed, never escaping the root), a directory source
 * copies its contents, the destination is a directory when it ends in "/" or
 * is ".", when several sources are given or when it already is one. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "builder/internal.h"

static void item_clear(struct build_item *it)
{
	free(it->dest);
	free(it->src);
	free(it->data);
	free(it->link);
	free(it->hardlink);
	for (size_t i = 0; i < it->n_xattrs; i++) {
		free(it->xattrs[i].name);
		free(it->xattrs[i].value);
	}
	free(it->xattrs);
}

void build_item_add_xattr(struct build_item *it, const char *name, const void *value, size_t len)
{
	it->xattrs = kiln_xrealloc(it->xattrs, (it->n_xattrs + 1) * sizeof(*it->xattrs));
	struct build_xattr *x = &it->xattrs[it->n_xattrs++];
	x->name = kiln_xstrdup(name);
	x->value = kiln_xmalloc(len ? len : 1);
	memcpy(x->value, value, len);
	x->len = len;
}

void build_changes_free(struct build_changes *c)
{
	for (size_t i = 0; i < c->n; i++)
		item_clear(&c->v[i]);
	free(c->v);
	for (size_t i = 0; i < c->tmpdirs.n; i++) {
		kiln_error *err = NULL;
		if (kiln_rm_rf(c->tmpdirs.v[i], &err) < 0)
			kiln_error_free(err);
	}
	kiln_strv_free(&c->tmpdirs);
	memset(c, 0, sizeof(*c));
}

static struct build_item *add_item(struct build_changes *c, const char *dest)
{
	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 32;
		c->v = kiln_xrealloc(c->v, c->cap * sizeof(*c->v));
	}
	struct build_item *it = &c->v[c->n++];
	memset(it, 0, sizeof(*it));
	it->dest = kiln_xstrdup(dest);
	return it;
}

static int cmp_item(const void *a, const void *b)
{
	const struct build_item *x = a, *y = b;
	int c = strcmp(x->dest, y->dest);
	/* stable on equal paths: the later item sorts last */
	return c ? c : (x < y ? -1 : 1);
}

void build_changes_finish(struct build_changes *c)
{
	size_t w = 0;

	if (c->n)
		qsort(c->v, c->n, sizeof(*c->v), cmp_item);
	for (size_t i = 0; i < c->n; i++) {
		if (i + 1 < c->n && strcmp(c->v[i].dest, c->v[i + 1].dest) == 0) {
			item_clear(&c->v[i]);
			continue;
		}
		c->v[w++] = c->v[i];
	}
	c->n = w;
}

static int cmp_dest(const void *key, const void *item)
{
	return strcmp(key, ((const struct build_item *)item)->dest);
}

void build_changes_add_parents(struct build_changes *c, const build_fsindex *idx)
{
	size_t n = c->n; /* sorted by build_changes_finish; added ones go after */
	kiln_strv added = KILN_STRV_INIT;

	for (size_t i = 0; i < n; i++) {
		char *p = kiln_xstrdup(c->v[i].dest);
		for (char *s = strrchr(p, '/'); s; s = strrchr(p, '/')) {
			*s = '\0';
			bool have = bsearch(p, c->v, n, sizeof(*c->v), cmp_dest) != NULL;
			for (size_t j = 0; j < added.n && !have; j++)
				have = strcmp(added.v[j], p) == 0;
			if (have)
				break; /* its own parents are (or will be) there too */
			const struct build_fsnode *nd = build_fsindex_get(idx, p);
			if (!nd || !S_ISDIR(nd->mode))
				break;
			kiln_strv_push(&added, p);
			struct build_item *it = add_item(c, p);
			it->mode = it->src_mode = nd->mode;
			it->uid = it->src_uid = nd->uid;
			it->gid = it->src_gid = nd->gid;
		}
		free(p);
	}
	kiln_strv_free(&added);
	if (c->n > n)
		build_changes_finish(c);
}

static const char *skip_space(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

/* Look NAME up in a passwd/group text: field 0 name, field `idf` the id;
 * for passwd also field 3, the primary group. */
static int lookup_name(const char *text, const char *name, long *id, long *gid)
{
	const char *p = text;

	while (p && *p) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		char *line = kiln_xstrndup(p, len);
		char *f[4] = { 0 };
		char *s = line;

		for (int i = 0; i < 4 && s; i++) {
			f[i] = s;
			s = strchr(s, ':');
			if (s)
				*s++ = '\0';
		}
		if (f[0] && f[2] && strcmp(f[0], name) == 0) {
			*id = strtol(f[2], NULL, 10);
			if (gid)
				*gid = f[3] ? strtol(f[3], NULL, 10) : *id;
			free(line);
			return 0;
		}
		free(line);
		p = eol ? eol + 1 : NULL;
	}
	return -1;
}

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

int build_chown_parse(const char *spec, const char *passwd, const char *group, uid_t *uid, gid_t *gid,
		      kiln_error **err)
{
	char *user = kiln_xstrdup(skip_space(spec)), *grp = strchr(user, ':');
	long u = 0, g = -1;
	int rc = -1;

	if (grp)
		*grp++ = '\0';
	if (user[0] == '\0') {
		kiln_err(err, KILN_E_INVALID, "--chown=%s: no user", spec);
		goto out;
	}
	if (all_digits(user)) {
		u = strtol(user, NULL, 10);
	} else if (!passwd || lookup_name(passwd, user, &u, &g) < 0) {
		kiln_err(err, KILN_E_NOTFOUND, "--chown=%s: unable to find user %s: no matching entries in passwd file",
			 spec, user);
		goto out;
	}
	if (grp && grp[0]) {
		if (all_digits(grp)) {
			g = strtol(grp, NULL, 10);
		} else if (!group || lookup_name(group, grp, &g, NULL) < 0) {
			kiln_err(err, KILN_E_NOTFOUND,
				 "--chown=%s: unable to find group %s: no matching entries in group file", spec, grp);
			goto out;
		}
	} else if (g < 0) {
		g = u; /* a lone uid is also the gid */
	}
	if (u < 0 || u > 0x7fffffff || g < 0 || g > 0x7fffffff) {
		kiln_err(err, KILN_E_INVALID, "--chown=%s: id out of range", spec);
		goto out;
	}
	*uid = (uid_t)u;
	*gid = (gid_t)g;
	rc = 0;
out:
	free(user);
	return rc;
}

struct ctx {
	const build_tree *tree;
	const struct build_copy_opts *o;
	const build_fsindex *img;
	struct build_changes *out;
	bool chown;
	uid_t uid;
	gid_t gid;
	bool chmod;
	mode_t mode;
	build_ignore *exclude;
};

static char *join(const char *a, const char *b)
{
	if (!a[0])
		return kiln_xstrdup(b);
	if (!b[0])
		return kiln_xstrdup(a);
	return kiln_xasprintf("%s/%s", a, b);
}

/* The source's extended attributes (file capabilities, ACLs, user.*), kept
 * by COPY and ADD as BuildKit keeps them; none where the filesystem has none. */
static void source_xattrs(struct build_item *it, const char *host)
{
	char names[65536], *value = NULL;
	ssize_t n = llistxattr(host, names, sizeof(names));

	for (char *nm = names; n > 0 && nm < names + n; nm += strlen(nm) + 1) {
		ssize_t vl = lgetxattr(host, nm, NULL, 0);
		if (vl < 0 || strncmp(nm, "trusted.overlay.", 16) == 0)
			continue;
		value = kiln_xrealloc(value, (size_t)vl + 1);
		vl = lgetxattr(host, nm, value, (size_t)vl);
		if (vl >= 0)
			build_item_add_xattr(it, nm, value, (size_t)vl);
	}
	free(value);
}

/* Add one item from a tree entry (or a plain host file) at image path `dest`. */
static void put_entry(struct ctx *c, const char *host, const struct stat *st, const char *link, const char *dest,
		      bool keep_owner)
{
	struct build_item *it = add_item(c->out, dest);

	it->mode = st->st_mode;
	it->src_mode = st->st_mode;
	it->src_uid = st->st_uid;
	it->src_gid = st->st_gid;
	keep_owner = keep_owner || c->o->keep_owner;
	it->uid = keep_owner ? st->st_uid : 0;
	it->gid = keep_owner ? st->st_gid : 0;
	if (c->chown) {
		it->uid = c->uid;
		it->gid = c->gid;
	}
	if (c->chmod && !S_ISLNK(st->st_mode))
		it->mode = (st->st_mode & S_IFMT) | c->mode;
	if (S_ISREG(st->st_mode)) {
		it->src = kiln_xstrdup(host);
		it->size = (uint64_t)st->st_size;
	}
	if (link)
		it->link = kiln_xstrdup(link);
	if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode))
		it->rdev = st->st_rdev;
	source_xattrs(it, host);
}

static char *host_path(const build_tree *t, const char *rel)
{
	return rel[0] && strcmp(rel, ".") ? kiln_path_join(build_tree_root(t), rel) : kiln_xstrdup(build_tree_root(t));
}

/* Make sure every directory from the image root to `dir` exists: those
 * missing in the image become items (owned by the --chown user, 0755). */
static void ensure_dirs(struct ctx *c, const char *dir)
{
	char *p = kiln_xstrdup(dir);

	for (char *q = p;; q++) {
		if (*q == '/' || *q == '\0') {
			char save = *q;
			*q = '\0';
			if (p[0] && !build_fsindex_get(c->img, p)) {
				bool have = false;
				for (size_t i = 0; i < c->out->n && !have; i++)
					have = strcmp(c->out->v[i].dest, p) == 0;
				if (!have) {
					struct build_item *it = add_item(c->out, p);
					it->mode = S_IFDIR | 0755;
					it->src_mode = it->mode;
					it->uid = c->chown ? c->uid : 0;
					it->gid = c->chown ? c->gid : 0;
				}
			}
			*q = save;
			if (save == '\0')
				break;
		}
	}
	free(p);
}

/* Is the tar at `path` an archive ADD extracts (tar, possibly compressed)? */
static bool is_archive(const char *path)
{
	struct archive *a = kiln_tar_reader_new();
	struct archive_entry *e;
	bool yes = false;

	if (archive_read_open_filename(a, path, 65536) == ARCHIVE_OK)
		yes = kiln_tar_next(a, &e) == ARCHIVE_OK;
	archive_read_free(a);
	return yes;
}

static int extract_archive(const char *path, const char *dir, kiln_error **err)
{
	struct archive *a = kiln_tar_reader_new(), *w = archive_write_disk_new();
	struct archive_entry *e;
	int r, rc = -1;

	archive_write_disk_set_options(w, ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_ACL |
						  ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT);
	if (archive_read_open_filename(a, path, 65536) != ARCHIVE_OK) {
		kiln_err(err, KILN_E_INVALID, "ADD %s: %s", path, archive_error_string(a));
		goto out;
	}
	while ((r = kiln_tar_next(a, &e)) == ARCHIVE_OK) {
		char *rel = build_layer_path(archive_entry_pathname(e));
		char *what = kiln_xasprintf("ADD %s", path);
		int er = build_extract_entry(a, w, e, dir, rel, what, err);
		free(what);
		free(rel);
		if (er < 0)
			goto out;
	}
	if (r != ARCHIVE_EOF) {
		kiln_err(err, KILN_E_INVALID, "ADD %s: %s", path, archive_error_string(a));
		goto out;
	}
	rc = 0;
out:
	archive_read_free(a);
	archive_write_free(w);
	return rc;
}

static int copy_tree_contents(struct ctx *c, const build_tree *t, const char *srcdir, const char *destdir,
			      bool keep_owner);

/* ADD of a local archive: extract it to scratch, then copy that tree. */
static int add_archive(struct ctx *c, const char *host, const char *destdir, kiln_error **err)
{
	char *dir = kiln_xasprintf("%s/extract-%zu", c->o->scratch, c->out->tmpdirs.n);
	build_tree *t = NULL;
	int rc = -1;

	kiln_strv_push(&c->out->tmpdirs, dir);
	if (kiln_mkdir_p(dir, 0755, err) < 0 || extract_archive(host, dir, err) < 0 ||
	    build_tree_open(dir, NULL, &t, err) < 0)
		goto out;
	ensure_dirs(c, destdir);
	/* as buildah: extracted entries keep the archive's owners and modes;
	 * --chown/--chmod only reach the directories created for them */
	bool chown = c->chown, chmod = c->chmod;
	c->chown = c->chmod = false;
	rc = copy_tree_contents(c, t, ".", destdir, true);
	c->chown = chown;
	c->chmod = chmod;
out:
	build_tree_free(t);
	free(dir);
	return rc;
}

/* Copy the entries below `srcdir` of tree t into image directory destdir. */
static int copy_tree_contents(struct ctx *c, const build_tree *t, const char *srcdir, const char *destdir,
			      bool keep_owner)
{
	size_t b, e;
	size_t plen = strcmp(srcdir, ".") == 0 ? 0 : strlen(srcdir) + 1;

	build_tree_children(t, srcdir, &b, &e);
	for (size_t i = b; i < e; i++) {
		const struct build_entry *en = build_tree_entry(t, i);
		const char *rel = en->path + plen;
		if (c->exclude && build_ignore_match(c->exclude, rel))
			continue;
		char *dest = join(destdir, rel), *host = host_path(t, en->path);
		put_entry(c, host, &en->st, en->link, dest, keep_owner);
		free(dest);
		free(host);
	}
	return 0;
}

/* Follow a source symlink inside the tree, as BuildKit does for the named
 * source itself (its contents keep their symlinks). */
static const struct build_entry *follow(const build_tree *t, const struct build_entry *e, char **relp)
{
	for (int hops = 0; e && e->link && hops < 40; hops++) {
		char *dir = kiln_xstrdup(e->path), *slash = strrchr(dir, '/');
		char *joined;
		if (slash)
			*slash = '\0';
		else
			strcpy(dir, "");
		joined = e->link[0] == '/' ? kiln_xstrdup(e->link) : kiln_xasprintf("/%s/%s", dir, e->link);
		char *clean = kiln_path_clean(joined);
		free(*relp);
		*relp = build_layer_path(clean);
		free(clean);
		free(joined);
		free(dir);
		e = (*relp)[0] ? build_tree_find(t, *relp) : NULL;
		if (!(*relp)[0])
			return NULL; /* the root: handled by the caller as a directory */
	}
	return e;
}

/* The --parents destination part of a source path: after "/./" if present. */
static const char *parents_part(const char *orig, const char *rel)
{
	const char *pivot = strstr(orig, "/./");
	if (!pivot)
		return rel;
	char *p = kiln_path_clean(pivot + 3);
	size_t n = strlen(p);
	free(p);
	size_t rl = strlen(rel);
	return rl >= n ? rel + rl - n : rel;
}

static int copy_one(struct ctx *c, const char *orig, const char *rel, const struct build_entry *e, bool dest_dir,
		    const char *dest, kiln_error **err)
{
	char *relf = kiln_xstrdup(rel);
	int rc = -1;

	if (e && e->link)
		e = follow(c->tree, e, &relf);
	bool is_root = relf[0] == '\0' || strcmp(relf, ".") == 0;
	if (!e && !is_root) {
		kiln_err(err, KILN_E_NOTFOUND, "%s: not found in the build context (or excluded by .dockerignore)",
			 orig);
		goto out;
	}
	const char *ppart = c->o->parents ? parents_part(orig, relf) : NULL;
	if (is_root || S_ISDIR(e->st.st_mode)) {
		char *d = ppart && !is_root ? join(dest, ppart) : kiln_xstrdup(dest);
		ensure_dirs(c, d);
		rc = copy_tree_contents(c, c->tree, is_root ? "." : relf, d, false);
		free(d);
		goto out;
	}
	const char *base = strrchr(relf, '/');
	base = base ? base + 1 : relf;
	char *target = ppart ? join(dest, ppart) : dest_dir ? join(dest, base) : kiln_xstrdup(dest);
	char *host = host_path(c->tree, relf);
	if (c->o->add && c->o->unpack != 0 && S_ISREG(e->st.st_mode) && is_archive(host)) {
		rc = add_archive(c, host, dest, err);
	} else if (c->exclude && build_ignore_match(c->exclude, base)) {
		rc = 0;
	} else {
		char *slash = strrchr(target, '/');
		if (slash) {
			*slash = '\0';
			ensure_dirs(c, target);
			*slash = '/';
		}
		put_entry(c, host, &e->st, e->link, target, false);
		rc = 0;
	}
	free(host);
	free(target);
out:
	free(relf);
	return rc;
}

static bool is_url(const char *s)
{
	return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
}

static int add_url(struct ctx *c, const char *url, bool dest_dir, const char *dest, kiln_error **err)
{
	/* a directory of the step's scratch (removed with its changes), so two
	 * ADD URL steps of one build never meet in one name */
	char *dir = kiln_xasprintf("%s/url-%zu", c->o->scratch, c->out->tmpdirs.n);
	char *path = kiln_path_join(dir, "download");
	const char *q = strpbrk(url + 8, "?#");
	char *noq = q ? kiln_xstrndup(url, (size_t)(q - url)) : kiln_xstrdup(url);
	const char *base = strrchr(noq + 8, '/');
	char *target = NULL;
	struct stat st;
	int rc = -1;

	base = base ? base + 1 : "";
	if (dest_dir && !base[0]) {
		kiln_err(err, KILN_E_INVALID, "ADD %s: cannot determine a file name from the URL; give one in the destination",
			 url);
		goto out;
	}
	kiln_strv_push(&c->out->tmpdirs, dir);
	if (kiln_mkdir_p(dir, 0700, err) < 0 || build_fetch_url(url, path, c->o->checksum, c->o->public_urls, err) < 0)
		goto out;
	if (stat(path, &st) < 0) {
		kiln_err_errno(err, errno, "ADD %s", url);
		goto out;
	}
	if (c->o->unpack == 1 && is_archive(path)) {
		rc = add_archive(c, path, dest, err);
		goto out;
	}
	st.st_mode = S_IFREG | 0600; /* as BuildKit: downloads are 0600 */
	st.st_uid = st.st_gid = 0;
	target = dest_dir ? join(dest, base) : kiln_xstrdup(dest);
	char *slash = strrchr(target, '/');
	if (slash) {
		*slash = '\0';
		ensure_dirs(c, target);
		*slash = '/';
	}
	put_entry(c, path, &st, NULL, target, false);
	rc = 0;
out:
	free(target);
	free(path);
	free(dir);
	free(noq);
	return rc;
}

static int heredoc_source(struct ctx *c, const char *name, bool dest_dir, const char *dest, kiln_error **err)
{
	const char *body = NULL;
	for (size_t i = 0; i < c->o->n_heredocs; i++)
		if (strcmp(c->o->heredoc_names[i], name) == 0)
			body = c->o->heredoc_bodies[i];
	if (!body)
		return kiln_err(err, KILN_E_INVALID, "heredoc <<%s has no body", name);
	char *path = kiln_xasprintf("%s/heredoc-%zu", c->o->scratch, c->out->n);
	struct stat st;
	int rc = -1;
	if (kiln_write_atomic(path, body, strlen(body), 0644, err) < 0 || stat(path, &st) < 0)
		goto out;
	st.st_mode = S_IFREG | 0644;
	st.st_uid = st.st_gid = 0;
	char *target = dest_dir ? join(dest, name) : kiln_xstrdup(dest);
	char *slash = strrchr(target, '/');
	if (slash) {
		*slash = '\0';
		ensure_dirs(c, target);
		*slash = '/';
	}
	put_entry(c, path, &st, NULL, target, false);
	free(target);
	rc = 0;
out:
	free(path);
	return rc;
}

int build_copy_resolve(const build_tree *tree, const char *const *srcs, size_t n_srcs, const char *dest,
		       const struct build_copy_opts *o, const build_fsindex *img, struct build_changes *out,
		       kiln_error **err)
{
	struct ctx c = { .tree = tree, .o = o, .img = img, .out = out };
	size_t dl = strlen(dest);
	bool dest_dir = dl == 0 || strcmp(dest, ".") == 0 || dest[dl - 1] == '/' ||
			(dl >= 2 && strcmp(dest + dl - 2, "/.") == 0);
	char *abs = NULL, *destp = NULL;
	int rc = -1;

	if (n_srcs == 0)
		return kiln_err(err, KILN_E_INVALID, "no source files were specified");
	if (o->chown && build_chown_parse(o->chown, build_fsindex_file(img, "etc/passwd"),
					  build_fsindex_file(img, "etc/group"), &c.uid, &c.gid, err) < 0)
		return -1;
	c.chown = o->chown != NULL;
	if (o->chmod) {
		char *end;
		unsigned long m = strtoul(o->chmod, &end, 8);
		if (!o->chmod[0] || *end || m > 07777)
			return kiln_err(err, KILN_E_INVALID, "--chmod=%s: not an octal mode", o->chmod);
		c.chmod = true;
		c.mode = (mode_t)m;
	}
	if (o->n_excludes && build_ignore_new(o->excludes, o->n_excludes, "--exclude", &c.exclude, err) < 0)
		return -1;
	abs = dest[0] == '/' ? kiln_xstrdup(dest) : kiln_xasprintf("%s/%s", o->workdir ? o->workdir : "/", dest);
	/* the destination directory itself may be reached through symlinks */
	destp = build_fsindex_resolve(img, abs, true);
	const struct build_fsnode *dn = destp[0] ? build_fsindex_get(img, destp) : NULL;
	if (!destp[0] || (dn && S_ISDIR(dn->mode)))
		dest_dir = true;
	if (n_srcs > 1 && !dest_dir) {
		kiln_err(err, KILN_E_INVALID,
			 "when using %s with more than one source file, the destination must be a directory and end with a /",
			 o->add ? "ADD" : "COPY");
		goto out;
	}
	if (!dest_dir) {
		/* a file destination: resolve its parent only */
		free(destp);
		destp = build_fsindex_resolve(img, abs, false);
	}
	for (size_t i = 0; i < n_srcs; i++) {
		const char *s = srcs[i];
		if (strncmp(s, "<<", 2) == 0 && o->n_heredocs) {
			if (heredoc_source(&c, s + 2, dest_dir, destp, err) < 0)
				goto out;
			continue;
		}
		if (is_url(s)) {
			if (!o->add) {
				kiln_err(err, KILN_E_INVALID, "COPY %s: source can't be a URL (use ADD)", s);
				goto out;
			}
			if (add_url(&c, s, dest_dir, destp, err) < 0)
				goto out;
			continue;
		}
		char *rooted = kiln_xasprintf("/%s", s), *rel = build_layer_path(rooted);
		free(rooted);
		if (build_glob_has_meta(rel)) {
			size_t found = 0, n = build_tree_count(tree);
			for (size_t k = 0; k < n; k++) {
				const struct build_entry *e = build_tree_entry(tree, k);
				int m = build_glob_match(rel, e->path);
				if (m < 0) {
					kiln_err(err, KILN_E_INVALID, "%s: syntax error in pattern", s);
					free(rel);
					goto out;
				}
				if (m == 1)
					found++;
			}
			bool many = found > 1 || dest_dir;
			for (size_t k = 0; k < n; k++) {
				const struct build_entry *e = build_tree_entry(tree, k);
				if (build_glob_match(rel, e->path) == 1 &&
				    copy_one(&c, s, e->path, e, many, destp, err) < 0) {
					free(rel);
					goto out;
				}
			}
		} else {
			const struct build_entry *e = rel[0] ? build_tree_find(tree, rel) : NULL;
			if (copy_one(&c, s, rel, e, dest_dir, destp, err) < 0) {
				free(rel);
				goto out;
			}
		}
		free(rel);
	}
	rc = 0;
out:
	build_ignore_free(c.exclude);
	free(abs);
	free(destp);
	return rc;
}
