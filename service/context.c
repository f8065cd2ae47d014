/* context.c — build contexts by content: each team's files live once in a
 * content-addressed store of its own (common/cas.c, STATE/teams/TEAM/context),
 * uploads are decoded (zstd) and verified while written; one context
 * directory per file list (made by context_make.c), held while builds read
 * it; and the prune of a team's files and their linked copies. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "service/internal.h"

struct svc_blob_writer {
	kiln_cas *cas;
	kiln_cas_writer *w;
	char digest[KILN_DIGEST_MAX];
	ZSTD_DStream *z;
	uint64_t written, max;
};

int svc_blobs_missing(svc *s, const char *team, const char *const *digests, size_t n, kiln_strv *missing,
		      kiln_error **err)
{
	kiln_cas *cas;

	if (svc_team_cas(s, team, &cas, err) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (!svc_digest_ok(digests[i])) {
			kiln_cas_close(cas);
			return kiln_err(err, KILN_E_INVALID, "'%s' is not a digest", digests[i]);
		}
		if (!kiln_cas_has(cas, digests[i]))
			kiln_strv_push(missing, digests[i]);
	}
	kiln_cas_close(cas);
	return 0;
}

int svc_blob_begin(svc *s, const char *team, const char *digest, enum svc_encoding enc, uint64_t max,
		   svc_blob_writer **out, kiln_error **err)
{
	svc_blob_writer *w;

	*out = NULL;
	if (!svc_digest_ok(digest) || strncmp(digest, "sha256:", 7) != 0)
		return kiln_err(err, KILN_E_INVALID, "'%s' is not a sha256 digest", digest);
	if (enc == SVC_ENC_GZIP)
		return kiln_err(err, KILN_E_INVALID, "gzip transfer encoding is not supported (send zstd or plain)");
	w = kiln_xcalloc(1, sizeof(*w));
	snprintf(w->digest, sizeof(w->digest), "%s", digest);
	w->max = max ? max : s->cfg.context_max;
	if (svc_team_cas(s, team, &w->cas, err) < 0 || kiln_cas_begin(w->cas, KILN_SHA256, false, &w->w, err) < 0) {
		svc_blob_abort(w);
		return -1;
	}
	if (enc == SVC_ENC_ZSTD) {
		w->z = ZSTD_createDStream();
		ZSTD_initDStream(w->z);
	}
	*out = w;
	return 0;
}

static int put(svc_blob_writer *w, const void *data, size_t len, kiln_error **err)
{
	w->written += len;
	if (w->written > w->max)
		return kiln_err(err, KILN_E_LIMIT, "blob %s: larger than the limit of %llu bytes", w->digest,
				(unsigned long long)w->max);
	return kiln_cas_write(w->w, data, len, err);
}

int svc_blob_write(svc_blob_writer *w, const void *data, size_t len, kiln_error **err)
{
	char buf[64 << 10];
	ZSTD_inBuffer in = { data, len, 0 };

	if (w->z == NULL)
		return put(w, data, len, err);
	while (in.pos < in.size) {
		ZSTD_outBuffer o = { buf, sizeof(buf), 0 };
		size_t rc = ZSTD_decompressStream(w->z, &o, &in);
		if (ZSTD_isError(rc))
			return kiln_err(err, KILN_E_INVALID, "blob %s: zstd: %s", w->digest, ZSTD_getErrorName(rc));
		if (o.pos && put(w, buf, o.pos, err) < 0)
			return -1;
	}
	return 0;
}

int svc_blob_commit(svc_blob_writer *w, kiln_error **err)
{
	char got[KILN_DIGEST_MAX];
	int ret = kiln_cas_commit(w->w, w->digest, got, NULL, err);

	w->w = NULL;
	if (ret < 0)
		kiln_error_wrap(err, "blob %s: not stored", w->digest);
	svc_blob_abort(w);
	return ret;
}

void svc_blob_abort(svc_blob_writer *w)
{
	if (w == NULL)
		return;
	if (w->w)
		kiln_cas_abort(w->w);
	if (w->z)
		ZSTD_freeDStream(w->z);
	kiln_cas_close(w->cas);
	free(w);
}

/* ---- one context directory per file list ---- */
/* STATE/teams/TEAM/contexts/HEX/context is the context made for the file
 * list whose key (list_key) is HEX, beside it digests.json (its files'
 * digests, for the build's --context-digests), shared by every build of
 * that list, so a rebuild
 * links nothing: as with the linked copies, sharing is safe because a build
 * only reads its context.  A build holds its directory under a shared flock
 * while it runs; a prune or a server's start removes only a directory no
 * build holds (LOCK_EX | LOCK_NB), renamed away first, so a build that had
 * opened it checks, once it holds its lock, that the name still leads there.
 * A directory is made under .tmp-* and renamed into place complete; one
 * left by a crash, or torn by one, is removed at the next start. */

static char *contexts_dir(svc *s, const char *team)
{
	return svc_team_dir(s, team, "contexts");
}

/* Opened and held shared, or -1 with errno ENOENT when it is not there (or
 * was being removed). */
static int hold(const char *dir)
{
	for (int i = 0; i < 3; i++) {
		struct stat a, b;
		int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return -1;
		if (flock(fd, LOCK_SH) == 0 && fstat(fd, &a) == 0 && stat(dir, &b) == 0 && a.st_ino == b.st_ino &&
		    a.st_dev == b.st_dev) {
			futimens(fd, NULL); /* its last use, for prune */
			return fd;
		}
		close(fd);
	}
	errno = ENOENT;
	return -1;
}

/* DIR/digests.json: each context file's digest, its name in the team's
 * store its hard link was made from, so the build takes it instead of
 * hashing the file again (the client hashed it; the store verified it on
 * upload).  Files extracted from a tar are hashed. */
static int write_digests(const char *dir, const json_t *files, kiln_error **err)
{
	json_t *map = json_object(), *f;
	char *path = kiln_path_join(dir, "digests.json"), *text;
	size_t i;
	int ret;

	json_array_foreach(files, i, f) {
		const char *p = json_string_value(json_object_get(f, "path"));
		const char *d = json_string_value(json_object_get(f, "digest"));
		mode_t mode = (mode_t)json_integer_value(json_object_get(f, "mode"));
		if (p && d && S_ISREG(mode) && !json_is_true(json_object_get(f, "tar")))
			json_object_set_new(map, p, json_string(d));
	}
	text = json_dumps(map, JSON_COMPACT);
	ret = svc_write_scratch(path, text, err);
	free(text);
	free(path);
	json_decref(map);
	return ret;
}

/* The list's name: the sha256 of what svc_context_make reads of each entry,
 * each field length-prefixed. */
static void list_key(const json_t *files, char d[KILN_DIGEST_MAX])
{
	static const char *const keys[] = { "path", "digest", "link" };
	kiln_hasher *h = kiln_hasher_new(KILN_SHA256);
	const json_t *f;
	size_t i;

	json_array_foreach(files, i, f) {
		char b[64];
		for (size_t k = 0; k < 3; k++) {
			const char *v = json_string_value(json_object_get(f, keys[k]));
			int n = snprintf(b, sizeof(b), "%zu:", v ? strlen(v) : (size_t)0);
			kiln_hasher_update(h, b, (size_t)n);
			if (v)
				kiln_hasher_update(h, v, strlen(v));
		}
		int n = snprintf(b, sizeof(b), "%lld %d\n", (long long)json_integer_value(json_object_get(f, "mode")),
				 json_is_true(json_object_get(f, "tar")));
		kiln_hasher_update(h, b, (size_t)n);
	}
	kiln_hasher_final(h, d);
}

int svc_context_use(svc *s, const char *team, const json_t *files, char **dir, int *lockfd, kiln_error **err)
{
	char d[KILN_DIGEST_MAX], *root = contexts_dir(s, team), *tmp = NULL;
	int ret = -1;

	*lockfd = -1;
	list_key(files, d);
	*dir = kiln_path_join(root, kiln_digest_hex(d));
	for (int i = 0;; i++) {
		if ((*lockfd = hold(*dir)) >= 0)
			break;
		if (errno != ENOENT) {
			kiln_err_errno(err, errno, "open %s", *dir);
			goto out;
		}
		if (i == 3) {
			kiln_err(err, KILN_E_IO, "context %s: removed each time it was made", *dir);
			goto out;
		}
		free(tmp);
		tmp = kiln_xasprintf("%s/.tmp-%d-%d", root, (int)getpid(), (int)gettid());
		char *ctx = kiln_path_join(tmp, "context");
		int mrc = kiln_rm_rf(tmp, err) < 0 || kiln_mkdir_p(root, 0700, err) < 0 || svc_context_make(s, team, files, ctx, err) < 0 ||
			  write_digests(tmp, files, err) < 0 ? -1 : 0;
		free(ctx);
		if (mrc < 0) {
			kiln_rm_rf(tmp, NULL);
			goto out;
		}
		/* another build of the same list may have won: its directory serves */
		if (rename(tmp, *dir) < 0 && errno != EEXIST && errno != ENOTEMPTY) {
			kiln_err_errno(err, errno, "rename %s", tmp);
			kiln_rm_rf(tmp, NULL);
			goto out;
		}
		kiln_rm_rf(tmp, NULL);
	}
	ret = 0;
out:
	if (ret < 0) {
		free(*dir);
		*dir = NULL;
	}
	free(tmp);
	free(root);
	return ret;
}

/* Each regular file under fd: its inode's last use is at least when. */
static void note_uses(int fd, int64_t when, json_t *uses)
{
	DIR *d = fdopendir(fd);
	struct dirent *e;

	if (d == NULL) {
		close(fd);
		return;
	}
	while ((e = readdir(d)) != NULL) {
		struct stat sb;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(sb.st_mode)) {
			int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0)
				note_uses(sub, when, uses);
		} else if (S_ISREG(sb.st_mode)) {
			char key[48];
			snprintf(key, sizeof(key), "%llu:%llu", (unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino);
			json_t *v = json_object_get(uses, key);
			if (v == NULL || json_integer_value(v) < when)
				json_object_set_new(uses, key, json_integer(when));
		}
	}
	closedir(d);
}

/* The team's context directories no build holds, removed (a ".tmp-" one
 * only when stale: older than an hour, or any at start).  uses, when not
 * NULL, gets each of their files' inodes with the directory's last use. */
static void contexts_clear(svc *s, const char *team, bool start, json_t *uses)
{
	char *root = contexts_dir(s, team);
	DIR *d = opendir(root);
	struct dirent *e;
	int64_t now = svc_now();

	while (d && (e = readdir(d)) != NULL) {
		struct stat sb;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char *p = kiln_path_join(root, e->d_name), *gone = NULL;
		bool hex = strlen(e->d_name) == 64 && strspn(e->d_name, "0123456789abcdef") == 64;
		if (!hex) {
			/* being made, or left by a crash or a cut removal */
			if (lstat(p, &sb) == 0 && (start || strncmp(e->d_name, ".rm-", 4) == 0 || sb.st_mtime < now - 3600))
				kiln_rm_rf(p, NULL);
			free(p);
			continue;
		}
		int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &sb) == 0) {
			if (uses) {
				int dup_fd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
				if (dup_fd >= 0)
					note_uses(dup_fd, (int64_t)sb.st_mtime, uses);
			}
			gone = kiln_xasprintf("%s/.rm-%s-%d-%d", root, e->d_name, (int)getpid(), (int)gettid());
			if (rename(p, gone) < 0) {
				free(gone);
				gone = NULL;
			}
		}
		if (fd >= 0)
			close(fd);
		if (gone)
			kiln_rm_rf(gone, NULL);
		free(gone);
		free(p);
	}
	if (d)
		closedir(d);
	free(root);
}

void svc_contexts_clear_all(svc *s)
{
	char *teams = kiln_path_join(s->state_dir, "teams");
	DIR *d = opendir(teams);
	struct dirent *e;

	while (d && (e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			contexts_clear(s, e->d_name, true, NULL);
	if (d)
		closedir(d);
	free(teams);
}

/* ---- prune: the team's uploaded files and their linked copies ---- */

struct used {
	int64_t last;          /* the newest ctime of the blob and its linked copies (a link bumps it) */
	uint64_t bytes;
	bool busy, keep;       /* linked into a running build's context; named by a queued one */
	kiln_strv paths;       /* the blob and its linked copies */
};

struct usage {
	json_t *index;         /* hex digest -> position in v */
	struct used *v;
	size_t n, cap;
};

static struct used *used_of(struct usage *g, const char *hex)
{
	json_t *i = json_object_get(g->index, hex);

	if (i)
		return &g->v[json_integer_value(i)];
	if (g->n == g->cap) {
		g->cap = g->cap ? 2 * g->cap : 256;
		g->v = kiln_xrealloc(g->v, g->cap * sizeof(*g->v));
	}
	memset(&g->v[g->n], 0, sizeof(g->v[g->n]));
	g->v[g->n].paths = (kiln_strv)KILN_STRV_INIT;
	json_object_set_new(g->index, hex, json_integer((json_int_t)g->n));
	return &g->v[g->n++];
}

struct scan {
	struct usage *g;
	bool linked;           /* the tree of linked copies: a second link is a build's */
};

/* One file of the store or of the linked copies, noted under its digest. */
static int note_file(const char *path, const char *hex, const struct stat *sb, void *ctx, kiln_error **err)
{
	struct scan *sc = ctx;
	struct used *u = used_of(sc->g, hex);

	if (sb->st_ctime > u->last)
		u->last = sb->st_ctime;
	u->bytes += (uint64_t)sb->st_blocks * 512;
	u->busy = u->busy || (sc->linked && sb->st_nlink > 1);
	kiln_strv_push(&u->paths, path);
	return 0;
}

/* The digests the team's queued and running builds name. */
static int keep_queued(svc *s, const char *team, struct usage *g, kiln_error **err)
{
	struct svc_rows r;
	const char *p[] = { team };

	if (svc_db_q(s->db, &r, "SELECT request FROM svc_builds WHERE team = $1 AND state IN ('queued', 'building')", p,
		     1, err) < 0)
		return -1;
	for (size_t i = 0; i < r.n; i++) {
		json_t *j = json_loads(svc_row(&r, i, 0) ? svc_row(&r, i, 0) : "", 0, NULL), *f;
		size_t k;
		json_array_foreach(json_object_get(j, "files"), k, f) {
			const char *d = json_string_value(json_object_get(f, "digest"));
			if (d && svc_digest_ok(d))
				used_of(g, kiln_digest_hex(d))->keep = true;
		}
		json_decref(j);
	}
	svc_rows_free(&r);
	return 0;
}

static int by_last(const void *a, const void *b)
{
	const struct used *x = *(struct used *const *)a, *y = *(struct used *const *)b;

	return x->last < y->last ? -1 : x->last > y->last;
}

int svc_context_prune(svc *s, const char *team, uint64_t budget, int64_t older_than_s, uint64_t *removed,
		      uint64_t *bytes, kiln_error **err)
{
	char *store = svc_team_dir(s, team, "context"), *linked = svc_team_dir(s, team, "linked");
	char *blobs = kiln_path_join(store, "sha256");
	struct usage g = { .index = json_object() };
	json_t *uses = json_object();
	struct used **order = NULL;
	uint64_t total = 0;
	int64_t now = svc_now();
	int ret = -1;

	*removed = 0;
	/* STORE/sha256/XX/HEX and LINKED/MODE/HEX: a ".tmp-" copy being made is skipped */
	if (kiln_cas_each(blobs, KILN_SHA256, note_file, &(struct scan){ &g, false }, err) < 0 ||
	    kiln_cas_each(linked, KILN_SHA256, note_file, &(struct scan){ &g, true }, err) < 0)
		goto out;
	/* the context directories no build holds go first; a file's last use
	 * is also its directories' (a rebuild through one links nothing), and
	 * it is busy only while linked elsewhere (a build holding one) */
	contexts_clear(s, team, false, uses);
	for (size_t i = 0; i < g.n; i++) {
		g.v[i].busy = false;
		for (size_t p = 0; p < g.v[i].paths.n; p++) {
			struct stat sb;
			char key[48];
			if (strncmp(g.v[i].paths.v[p], linked, strlen(linked)) != 0 || lstat(g.v[i].paths.v[p], &sb) < 0)
				continue;
			g.v[i].busy = g.v[i].busy || sb.st_nlink > 1;
			snprintf(key, sizeof(key), "%llu:%llu", (unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino);
			json_t *when = json_object_get(uses, key);
			if (when && json_integer_value(when) > g.v[i].last)
				g.v[i].last = json_integer_value(when);
		}
	}
	if (keep_queued(s, team, &g, err) < 0)
		goto out;
	order = kiln_xcalloc(g.n + 1, sizeof(*order));
	for (size_t i = 0; i < g.n; i++) {
		order[i] = &g.v[i];
		total += g.v[i].bytes;
	}
	qsort(order, g.n, sizeof(*order), by_last);
	/* unused that long, then the least recently used while over budget */
	for (size_t i = 0; i < g.n; i++) {
		struct used *u = order[i];
		if (u->busy || u->keep || u->paths.n == 0)
			continue;
		if (u->last > now - older_than_s && total <= budget)
			break;
		for (size_t p = 0; p < u->paths.n; p++)
			if (unlink(u->paths.v[p]) == 0)
				(*removed)++;
		total = total > u->bytes ? total - u->bytes : 0;
	}
	*bytes = total;
	ret = 0;
out:
	for (size_t i = 0; i < g.n; i++)
		kiln_strv_free(&g.v[i].paths);
	free(g.v);
	free(order);
	json_decref(g.index);
	json_decref(uses);
	free(blobs);
	free(store);
	free(linked);
	return ret;
}
