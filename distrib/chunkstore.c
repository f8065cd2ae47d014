/* chunkstore.c — the host's content-addressed chunk store ($KILN_HOME/chunks),
 * shared by every template pushed from or pulled to this host: chunks appear
 * only verified and whole (temp file, rename), every read is verified, and
 * eviction (least recently used first, by mtime, which every use refreshes)
 * never removes a chunk named by a live pin: the chunk list of a template being
 * pushed, pulled or assembled, held with an flock by the process doing it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "distrib/distrib.h"

struct dist_chunks {
	char *dir;
	kiln_cas *cas;   /* the chunks: a cache, so no fsync; every read verifies */
	int pin_fd;      /* our pin file, flock'd exclusively while held */
	char *pin_path;
};

dist_chunks *dist_chunks_open(const char *dir, kiln_error **err)
{
	dist_chunks *cs = kiln_xcalloc(1, sizeof(*cs));
	char *sub = NULL;

	cs->pin_fd = -1;
	cs->dir = dir ? kiln_xstrdup(dir) : kiln_home_path(NULL, KILN_PATH_CHUNKS, NULL);
	/* No fsync: every read is verified, so a chunk torn by a crash is found,
	 * removed and fetched again — while an fsync per chunk (thousands per
	 * template) costs ~6 ms each here. */
	const struct kiln_cas_layout lay = { .fanout = true, .mode = 0444, .sync = KILN_CAS_SYNC_NONE };
	sub = kiln_path_join(cs->dir, "pins");
	if (kiln_cas_open(cs->dir, &lay, &cs->cas, err) < 0 || kiln_mkdir_p(sub, 0755, err) < 0) {
		free(sub);
		kiln_error_wrap(err, "chunk store %s", cs->dir);
		dist_chunks_close(cs);
		return NULL;
	}
	free(sub);
	return cs;
}

void dist_chunks_close(dist_chunks *cs)
{
	if (cs == NULL)
		return;
	dist_chunks_unpin(cs);
	kiln_cas_close(cs->cas);
	free(cs->dir);
	free(cs);
}

const char *dist_chunks_dir(const dist_chunks *cs) { return cs->dir; }

static int sha256_digest(const char *digest, kiln_error **err)
{
	enum kiln_digest_algo a;

	if (kiln_digest_parse(digest, &a, err) < 0)
		return -1;
	if (a != KILN_SHA256)
		return kiln_err(err, KILN_E_INVALID, "chunk digest %.80s: only sha256 chunks are stored", digest);
	return 0;
}

char *dist_chunks_path(const dist_chunks *cs, const char *digest)
{
	return kiln_cas_path(cs->cas, digest);
}

int dist_chunks_has(dist_chunks *cs, const char *digest)
{
	if (sha256_digest(digest, NULL) < 0)
		return 0;
	char *p = dist_chunks_path(cs, digest);
	/* A use: the chunk becomes the most recently used (LRU by mtime). */
	int r = utimensat(AT_FDCWD, p, NULL, 0) == 0;
	free(p);
	return r;
}

char *dist_chunks_tmp(dist_chunks *cs, int *fd, kiln_error **err)
{
	char *p = kiln_xasprintf("%s/tmp/%ld-XXXXXX", cs->dir, (long)getpid());

	if ((*fd = mkostemp(p, O_CLOEXEC)) < 0) {
		kiln_err_errno(err, errno, "create %s", p);
		free(p);
		return NULL;
	}
	return p;
}

int dist_chunks_commit(dist_chunks *cs, const char *tmp, const char *digest, kiln_error **err)
{
	if (sha256_digest(digest, err) < 0) {
		unlink(tmp);
		return -1;
	}
	if (kiln_cas_adopt(cs->cas, tmp, digest, KILN_CAS_VERIFY, err) < 0)
		return kiln_error_wrap(err, "chunk %s", digest);
	return 0;
}

int dist_chunks_put(dist_chunks *cs, const void *data, size_t len, char digest[KILN_DIGEST_MAX], kiln_error **err)
{
	kiln_digest_buf(KILN_SHA256, data, len, digest);
	if (dist_chunks_has(cs, digest))
		return 0;
	return kiln_cas_put_as(cs->cas, digest, data, len, err); /* hashed again as written: verified */
}

int dist_chunks_get(dist_chunks *cs, const char *digest, char **data, size_t *len, kiln_error **err)
{
	char *path;

	*data = NULL;
	if (sha256_digest(digest, err) < 0)
		return -1;
	/* A corrupt chunk is removed by the read, so the next pull fetches it afresh. */
	if (kiln_cas_read(cs->cas, digest, 0, data, len, err) < 0)
		return -1;
	path = dist_chunks_path(cs, digest);
	utimensat(AT_FDCWD, path, NULL, 0);
	free(path);
	return 0;
}

/* The store-wide lock: shared while a pin is written, exclusive for eviction. */
static int store_lock(dist_chunks *cs, int how, kiln_error **err)
{
	char *p = kiln_path_join(cs->dir, "lock");
	int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);

	if (fd < 0)
		kiln_err_errno(err, errno, "open %s", p);
	else if (flock(fd, how) < 0) {
		kiln_err_errno(err, errno, "lock %s", p);
		close(fd);
		fd = -1;
	}
	free(p);
	return fd;
}

int dist_chunks_pin(dist_chunks *cs, const char *const *digests, size_t n, kiln_error **err)
{
	kiln_buf b = KILN_BUF_INIT;
	int lock = -1, rc = -1;

	dist_chunks_unpin(cs);
	for (size_t i = 0; i < n; i++)
		if (digests[i])
			kiln_buf_addf(&b, "%s\n", digests[i]);
	if ((lock = store_lock(cs, LOCK_SH, err)) < 0)
		goto out;
	cs->pin_path = kiln_xasprintf("%s/pins/%ld-XXXXXX", cs->dir, (long)getpid());
	if ((cs->pin_fd = mkostemp(cs->pin_path, O_CLOEXEC)) < 0) {
		kiln_err_errno(err, errno, "create %s", cs->pin_path);
		goto out;
	}
	if (flock(cs->pin_fd, LOCK_EX) < 0 || write(cs->pin_fd, b.buf, b.len) != (ssize_t)b.len) {
		kiln_err_errno(err, errno, "write %s", cs->pin_path);
		goto out;
	}
	/* Chunks present now stay: eviction waits for the shared lock we hold. */
	for (size_t i = 0; i < n; i++)
		if (digests[i])
			dist_chunks_has(cs, digests[i]);
	rc = 0;
out:
	if (rc < 0)
		dist_chunks_unpin(cs);
	if (lock >= 0)
		close(lock);
	kiln_buf_free(&b);
	return rc;
}

void dist_chunks_unpin(dist_chunks *cs)
{
	if (cs->pin_path) {
		unlink(cs->pin_path);
		free(cs->pin_path);
		cs->pin_path = NULL;
	}
	if (cs->pin_fd >= 0)
		close(cs->pin_fd);
	cs->pin_fd = -1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Hex digests named by live pins (sorted); stale pins of dead processes are removed. */
static void live_pins(dist_chunks *cs, kiln_strv *out)
{
	char *dir = kiln_path_join(cs->dir, "pins");
	DIR *d = opendir(dir);
	struct dirent *de;

	while (d && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char *p = kiln_path_join(dir, de->d_name), *data = NULL;
		size_t len = 0;
		int fd = open(p, O_RDONLY | O_CLOEXEC);
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {
			unlink(p); /* its holder is gone */
		} else if (fd >= 0 && kiln_read_file(p, &data, &len, 0, NULL) == 0) {
			for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n"))
				if (strncmp(line, "sha256:", 7) == 0)
					kiln_strv_push(out, line + 7);
		}
		if (fd >= 0)
			close(fd);
		free(data);
		free(p);
	}
	if (d)
		closedir(d);
	free(dir);
	if (out->n)
		qsort(out->v, out->n, sizeof(char *), cmp_str);
}

struct chunk_file {
	char *path;
	const char *hex;
	uint64_t bytes;
	struct timespec mtime;
};

static int cmp_age(const void *a, const void *b)
{
	const struct chunk_file *x = a, *y = b;
	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->hex, y->hex);
}

struct chunk_list {
	struct chunk_file *v;
	size_t n, cap;
	struct dist_chunks_stats s;
};

/* Each chunk noted for the eviction (a download's .part is no chunk: it is
 * kept for its resume). */
static int note_chunk(const char *path, const char *hex, const struct stat *sb, void *ctx, kiln_error **err)
{
	struct chunk_list *l = ctx;
	struct chunk_file *f;

	if (l->n == l->cap)
		l->v = kiln_xrealloc(l->v, (l->cap = l->cap ? l->cap * 2 : 256) * sizeof(*l->v));
	f = &l->v[l->n++];
	f->path = kiln_xstrdup(path);
	f->hex = strrchr(f->path, '/') + 1;
	f->bytes = (uint64_t)sb->st_blocks * 512;
	f->mtime = sb->st_mtim;
	l->s.chunks++;
	l->s.bytes += f->bytes;
	return 0;
}

int dist_chunks_evict(dist_chunks *cs, uint64_t max_bytes, struct dist_chunks_stats *st, kiln_error **err)
{
	kiln_strv pins = KILN_STRV_INIT;
	struct chunk_list l = { 0 };
	char *root = kiln_path_join(cs->dir, "sha256");
	int lock = store_lock(cs, LOCK_EX, err), rc = -1;

	if (lock < 0)
		goto out;
	live_pins(cs, &pins);
	if (kiln_cas_each(root, KILN_SHA256, note_chunk, &l, err) < 0)
		goto out;
	if (l.n)
		qsort(l.v, l.n, sizeof(*l.v), cmp_age);
	for (size_t i = 0; i < l.n && l.s.bytes > max_bytes; i++) {
		const char *key = l.v[i].hex;
		if (pins.n && bsearch(&key, pins.v, pins.n, sizeof(char *), cmp_str)) {
			l.s.pinned++;
			continue;
		}
		if (unlink(l.v[i].path) < 0 && errno != ENOENT) {
			kiln_err_errno(err, errno, "evict %s", l.v[i].path);
			goto out;
		}
		l.s.bytes -= l.v[i].bytes;
		l.s.chunks--;
		l.s.evicted++;
		l.s.evicted_bytes += l.v[i].bytes;
	}
	rc = 0;
out:
	if (st)
		*st = l.s;
	for (size_t i = 0; i < l.n; i++)
		free(l.v[i].path);
	free(l.v);
	kiln_strv_free(&pins);
	free(root);
	if (lock >= 0)
		close(lock);
	return rc;
}

uint64_t dist_chunks_limit(void)
{
	const char *e = getenv("KILN_CHUNKS_MAX");
	uint64_t v = 0;

	if (e && *e && kiln_parse_size(e, &v, NULL) == 0)
		return v;
	return (uint64_t)20 << 30;
}
