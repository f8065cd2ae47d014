/* chunkfs.c — the host's template file server (`kiln chunkfs serve`): a FUSE
 * file system at $KILN_HOME/chunkfs/mnt where HEX/{rootfs,memory,disk} are the
 * files of a lazily pulled template, read chunk by chunk from the host's chunk
 * store; a chunk the store lacks is fetched from the registry on first touch,
 * verified against its digest and stored, while a background prefetch fills
 * in the rest.  QEMU maps memory share=off and backs its disk on rootfs
 * (docs/distribution.md "Lazy templates"). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FUSE_USE_VERSION 35
#include <fuse.h>
#include <zstd.h>

#include "distrib/internal.h"

#define CACHE_SLOTS 32   /* decompressed chunks kept (a 128 KiB read of a 256 KiB chunk comes twice) */
#define POOL_MAX 8       /* registry clients kept per template for on-demand fetches */
#define PREFETCH_BATCH 64

static const char *const SERVED[] = { "rootfs", "memory", "disk" };
#define NSERVED (sizeof(SERVED) / sizeof(SERVED[0]))

/* paths and mount state: chunkfs_ctl.c */

/* ---- the daemon's templates ---- */
struct cfs_tmpl {
	char hex[65];
	struct dist_tmpl t;
	char *host, *repo;
	dist_chunks *cs;               /* pinned: the served chunks are not evicted while we run */
	pthread_mutex_t lock;         /* the client pool */
	rc_client *pool[POOL_MAX];
	int npool;
	/* a local template served from its stored files while its working set
	 * is recorded (chunkfs_record.c): every read is logged */
	bool local;
	int fd[NSERVED];
	FILE *reads;
	struct cfs_tmpl *next;
};

static struct {
	pthread_mutex_t lock;         /* templates, cache */
	struct cfs_tmpl *tmpls;
	struct { char digest[KILN_DIGEST_MAX]; unsigned char *data; size_t len; uint64_t used; } cache[CACHE_SLOTS];
	uint64_t tick;
	bool prefetch;
	char *mnt;                    /* our mount (the page-cache warm-up reads through it) */
	double last_fault_ms;         /* when a read last had to fetch: the prefetch yields */
	double last_read_ms;          /* when any read came: the prefetch starts once a start is over */
	unsigned long faults;         /* chunks fetched on first touch */
	/* chunks fetched but not stored (a full chunk store): served from memory */
	unsigned long unstored;
	char *unstored_why;           /* the first store error of the streak */
	double unstored_logged_ms;
} S = { .lock = PTHREAD_MUTEX_INITIALIZER };

void dist_cfs_logf(const char *fmt, ...)
{
	char ts[KILN_TIME_MAX];
	va_list ap;

	kiln_time_rfc3339(time(NULL), ts);
	fprintf(stderr, "%s chunkfs[%ld]: ", ts, (long)getpid());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
}

static const struct dist_tmpl_part *find_part(const struct cfs_tmpl *T, const char *role)
{
	return dist_tmpl_part_find(&T->t, role);
}

static void *prefetch_main(void *arg);

/* A local template being recorded: its stored files, opened read-only. */
static struct cfs_tmpl *load_local(struct cfs_tmpl *T, json_t *rec, char *path, char *data, kiln_error **err)
{
	const json_t *loc = json_object_get(rec, "local");
	char *log = kiln_xasprintf("%.*s.reads", (int)(strlen(path) - 5), path);

	T->local = true;
	T->t.parts = kiln_xcalloc(NSERVED, sizeof(*T->t.parts));
	for (size_t i = 0; i < NSERVED; i++)
		T->fd[i] = -1;
	for (size_t i = 0; i < NSERVED; i++) {
		const char *f = kiln_json_str(loc, SERVED[i]);
		struct stat st;
		struct dist_tmpl_part *p = &T->t.parts[T->t.nparts];
		if (f == NULL || (T->fd[i] = open(f, O_RDONLY | O_CLOEXEC)) < 0 || fstat(T->fd[i], &st) < 0) {
			kiln_err_errno(err, errno, "%s: the %s %s", path, SERVED[i], f ? f : "(none)");
			goto fail;
		}
		p->role = kiln_xstrdup(SERVED[i]);
		p->size = (uint64_t)st.st_size;
		p->chunk_size = 65536;
		T->t.nparts++;
	}
	if ((T->reads = fopen(log, "ae")) == NULL) {
		kiln_err_errno(err, errno, "create %s", log);
		goto fail;
	}
	free(log);
	free(path);
	free(data);
	json_decref(rec);
	return T;
fail:
	for (size_t i = 0; i < NSERVED; i++)
		if (T->fd[i] >= 0)
			close(T->fd[i]);
	dist_tmpl_free(&T->t);
	free(T);
	free(log);
	free(path);
	free(data);
	json_decref(rec);
	return NULL;
}

static struct cfs_tmpl *load_tmpl(const char *hex, kiln_error **err)
{
	char *path = dist_cfs_record_path(hex), *data = NULL;
	size_t len = 0;
	json_t *rec = NULL;
	struct cfs_tmpl *T = kiln_xcalloc(1, sizeof(*T));
	const char *m, *ix;

	snprintf(T->hex, sizeof(T->hex), "%s", hex);
	pthread_mutex_init(&T->lock, NULL);
	if (kiln_read_file(path, &data, &len, 64 << 20, err) < 0 ||
	    (rec = kiln_json_loadb(data, len, path, err)) == NULL)
		goto fail;
	if (json_is_object(json_object_get(rec, "local")))
		return load_local(T, rec, path, data, err);
	m = kiln_json_str(rec, "manifest");
	ix = kiln_json_str(rec, "index");
	if (!ix || !kiln_json_str(rec, "registry") || !kiln_json_str(rec, "repo")) {
		kiln_err(err, KILN_E_INVALID, "%s: not a chunkfs template record", path);
		goto fail;
	}
	/* The pull checked the index against the manifest; a record without the
	 * manifest (4647 layer descriptors took ~100 ms of CPU to parse) takes
	 * the index's blob list. */
	if (m ? dist_tmpl_parse(&T->t, m, strlen(m), err) < 0 || dist_tmpl_parse_index(&T->t, ix, strlen(ix), err) < 0
	      : dist_tmpl_parse_index_only(&T->t, ix, strlen(ix), err) < 0)
		goto fail;
	T->host = kiln_xstrdup(kiln_json_str(rec, "registry"));
	T->repo = kiln_xstrdup(kiln_json_str(rec, "repo"));
	if ((T->cs = dist_chunks_open(NULL, err)) == NULL)
		goto fail;
	const char **v = kiln_xcalloc(T->t.nblobs + 1, sizeof(char *));
	for (size_t i = 0; i < T->t.nblobs; i++)
		v[i] = T->t.blobs[i].digest;
	int r = dist_chunks_pin(T->cs, v, T->t.nblobs, err);
	free(v);
	if (r < 0)
		goto fail;
	free(path);
	free(data);
	json_decref(rec);
	return T;
fail:
	kiln_error_wrap(err, "template %.12s", hex);
	dist_chunks_close(T->cs);
	dist_tmpl_free(&T->t);
	free(T->host);
	free(T->repo);
	free(T);
	free(path);
	free(data);
	json_decref(rec);
	return NULL;
}

/* The template HEX (loaded on first use, its prefetch started), or NULL. */
static struct cfs_tmpl *get_tmpl(const char *hex)
{
	struct cfs_tmpl *T;
	kiln_error *e = NULL;

	if (!dist_cfs_valid_hex(hex))
		return NULL;
	pthread_mutex_lock(&S.lock);
	for (T = S.tmpls; T && strcmp(T->hex, hex) != 0; T = T->next)
		;
	if (T == NULL) {
		char *p = dist_cfs_record_path(hex);
		bool exists = access(p, F_OK) == 0;
		free(p);
		if (exists && (T = load_tmpl(hex, &e)) != NULL) {
			T->next = S.tmpls;
			S.tmpls = T;
			if (T->local)
				dist_cfs_logf("serving template %.12s from its stored files, recording its reads", hex);
			else
				dist_cfs_logf("serving template %.12s from %s/%s (%zu chunks)", hex, T->host, T->repo, T->t.nblobs);
			pthread_t th;
			if (!T->local && S.prefetch && pthread_create(&th, NULL, prefetch_main, T) == 0)
				pthread_detach(th);
			if (!T->local && S.mnt) {
				char *f = kiln_xasprintf("%s/%s/memory", S.mnt, hex);
				dist_cfs_warm_start(f, hex, find_part(T, "memory"), T->cs);
				free(f);
			}
		} else if (exists) {
			dist_cfs_logf("%s", kiln_error_message(e));
			kiln_error_free(e);
		}
	}
	pthread_mutex_unlock(&S.lock);
	return T;
}

static rc_client *pool_take(struct cfs_tmpl *T, kiln_error **err)
{
	rc_client *c = NULL;

	pthread_mutex_lock(&T->lock);
	if (T->npool > 0)
		c = T->pool[--T->npool];
	pthread_mutex_unlock(&T->lock);
	return c ? c : rc_client_new(T->host, NULL, err);
}

static void pool_give(struct cfs_tmpl *T, rc_client *c)
{
	pthread_mutex_lock(&T->lock);
	if (T->npool < POOL_MAX) {
		T->pool[T->npool++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&T->lock);
	rc_client_free(c);
}

/* A verified chunk that the store could not take (a full disk, most often)
 * is still served: a running sandbox must not see the host's trouble as an
 * I/O error.  The streak is logged when it starts (every 30 s while it lasts)
 * and when a chunk is stored again, so the line naming the full disk reaches
 * the log once there is room for it. */
static void stored(struct cfs_tmpl *T, kiln_error *e)
{
	pthread_mutex_lock(&S.lock);
	if (e) {
		S.unstored++;
		if (!S.unstored_why)
			S.unstored_why = kiln_xstrdup(kiln_error_message(e));
		if (kiln_now_ms() - S.unstored_logged_ms > 30000) {
			S.unstored_logged_ms = kiln_now_ms();
			dist_cfs_logf("template %.12s: the chunk store cannot take fetched chunks (%s); serving them from "
				      "memory without storing them", T->hex, kiln_error_message(e));
		}
		kiln_error_free(e);
	} else if (S.unstored_why) {
		dist_cfs_logf("template %.12s: chunks are stored again; %lu chunks were served from memory without being "
			      "stored (%s)", T->hex, S.unstored, S.unstored_why);
		free(S.unstored_why);
		S.unstored_why = NULL;
		S.unstored = 0;
		S.unstored_logged_ms = 0;
	}
	pthread_mutex_unlock(&S.lock);
}

/* The compressed chunk: from the store, or fetched (verified) and stored. */
static int chunk_bytes(struct cfs_tmpl *T, const char *digest, uint64_t max, char **comp, size_t *clen,
		       kiln_error **err)
{
	kiln_error *e = NULL;
	char got[KILN_DIGEST_MAX];

	if (dist_chunks_has(T->cs, digest)) {
		if (dist_chunks_get(T->cs, digest, comp, clen, &e) == 0)
			return 0;
		/* a stored chunk that fails its digest was removed by the read: fetch it */
		dist_cfs_logf("template %.12s: %s; fetching it again", T->hex, kiln_error_message(e));
		kiln_error_free(e);
	}
	pthread_mutex_lock(&S.lock);
	S.last_fault_ms = kiln_now_ms();
	S.faults++;
	pthread_mutex_unlock(&S.lock);
	rc_client *c = pool_take(T, err);
	if (c == NULL)
		return -1;
	int r = rc_blob_get_mem(c, T->repo, digest, (size_t)max, comp, clen, err);
	pool_give(T, c);
	if (r < 0)
		return kiln_error_wrap(err, "fetching chunk %s from %s/%s", digest, T->host, T->repo);
	r = dist_chunks_put(T->cs, *comp, *clen, got, &e);
	if (strcmp(got, digest) != 0) {
		kiln_error_free(e);
		free(*comp);
		*comp = NULL;
		return kiln_err(err, KILN_E_INVALID, "chunk %s from %s does not hash to its name", digest, T->host);
	}
	stored(T, r < 0 ? e : NULL);
	return 0;
}

static int have_cb(void *ud, const char *digest);

/* The chunks of a read the store lacks, fetched at once: a 1 MiB read of
 * memory spans 16 chunks, and one round trip each, in turn, was what a first
 * exec's faults cost.  What fails here is fetched again (and logged) one by
 * one by the read. */
static void fetch_missing(struct cfs_tmpl *T, const struct dist_tmpl_part *p, uint64_t off, size_t size)
{
	struct rc_blob b[64];
	size_t n = 0;
	kiln_error *e = NULL;

	for (size_t i = (size_t)(off / p->chunk_size); i < p->nchunks && i * p->chunk_size < off + size && n < 64; i++) {
		const char *d = p->chunks[i];
		bool dup = false;
		for (size_t k = 0; d && k < n && !dup; k++)
			dup = strcmp(b[k].digest, d) == 0;
		if (d == NULL || dup || dist_chunks_has(T->cs, d))
			continue;
		memset(&b[n], 0, sizeof(b[n]));
		snprintf(b[n].digest, KILN_DIGEST_MAX, "%s", d);
		b[n].size = -1;
		b[n].path = dist_chunks_path(T->cs, d);
		n++;
	}
	if (n >= 2) {
		pthread_mutex_lock(&S.lock);
		S.last_fault_ms = kiln_now_ms();
		S.faults += n;
		pthread_mutex_unlock(&S.lock);
		rc_client *c = pool_take(T, &e);
		struct rc_xfer_opts xo = { .parallel = n < 8 ? (unsigned)n : 8, .have = have_cb, .ud = T, .no_fsync = 1 };
		if (c) {
			rc_blobs_pull(c, T->repo, b, n, &xo, &e);
			pool_give(T, c);
		}
		kiln_error_free(e);
	}
	for (size_t k = 0; k < n; k++)
		free((char *)b[k].path);
}

/* Chunk i of part p, decompressed, into out (p->chunk_size bytes). */
static int chunk_data(struct cfs_tmpl *T, const struct dist_tmpl_part *p, size_t i, unsigned char *out, size_t len,
		      kiln_error **err)
{
	const char *d = p->chunks[i];
	char *comp = NULL;
	size_t clen = 0, n;

	pthread_mutex_lock(&S.lock);
	for (int k = 0; k < CACHE_SLOTS; k++)
		if (S.cache[k].data && S.cache[k].len == len && strcmp(S.cache[k].digest, d) == 0) {
			memcpy(out, S.cache[k].data, len);
			S.cache[k].used = ++S.tick;
			pthread_mutex_unlock(&S.lock);
			return 0;
		}
	pthread_mutex_unlock(&S.lock);
	if (chunk_bytes(T, d, ZSTD_compressBound(p->chunk_size), &comp, &clen, err) < 0)
		return -1;
	n = ZSTD_decompress(out, len, comp, clen);
	free(comp);
	if (ZSTD_isError(n) || n != len)
		return kiln_err(err, KILN_E_INVALID, "chunk %s does not decompress to %zu bytes: %s", d, len,
				ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong length");
	pthread_mutex_lock(&S.lock);
	int slot = 0;
	for (int k = 1; k < CACHE_SLOTS; k++)
		if (S.cache[k].used < S.cache[slot].used)
			slot = k;
	free(S.cache[slot].data);
	S.cache[slot].data = kiln_xmalloc(len);
	memcpy(S.cache[slot].data, out, len);
	S.cache[slot].len = len;
	snprintf(S.cache[slot].digest, KILN_DIGEST_MAX, "%s", d);
	S.cache[slot].used = ++S.tick;
	pthread_mutex_unlock(&S.lock);
	return 0;
}

/* ---- background prefetch: the working set first, then every other chunk ---- */
static int have_cb(void *ud, const char *digest) { return dist_chunks_has(((struct cfs_tmpl *)ud)->cs, digest); }

static void *prefetch_main(void *arg)
{
	struct cfs_tmpl *T = arg;
	kiln_strv order = KILN_STRV_INIT;
	double t0 = kiln_now_ms();
	unsigned wait_s = 1;

	/* background work: the sandboxes' own faults come first */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
	/* Not while a sandbox starts: under TCG on a loaded host the transfers,
	 * their hashing and the registry's work took the CPU from the lazy
	 * pull and the guest's first exec (seconds of it). Once the pull has
	 * brought the working set and then no read came for 2 s (the start is
	 * over), or after 30 s at most. */
	for (size_t p = 0, k = 0; p < T->t.nparts && kiln_now_ms() - t0 < 30000;) {
		const struct dist_tmpl_part *pt = &T->t.parts[p];
		if (k >= pt->nfirst) {
			p++, k = 0;
		} else if (!pt->chunks[pt->first[k]] || dist_chunks_has(T->cs, pt->chunks[pt->first[k]])) {
			k++;
		} else {
			kiln_sleep_ms(100);
		}
	}
	double pulled = kiln_now_ms();
	for (;;) {
		pthread_mutex_lock(&S.lock);
		double last = S.last_read_ms > pulled ? S.last_read_ms : pulled;
		pthread_mutex_unlock(&S.lock);
		if (kiln_now_ms() - last > 2000 || kiln_now_ms() - t0 > 30000)
			break;
		kiln_sleep_ms(100);
	}
	for (size_t p = 0; p < T->t.nparts; p++)
		for (size_t k = 0; k < T->t.parts[p].nfirst; k++)
			if (T->t.parts[p].chunks[T->t.parts[p].first[k]])
				kiln_strv_push(&order, T->t.parts[p].chunks[T->t.parts[p].first[k]]);
	for (size_t s = 0; s < NSERVED; s++) {
		const struct dist_tmpl_part *p = find_part(T, SERVED[s]);
		for (size_t i = 0; p && i < p->nchunks; i++)
			if (p->chunks[i])
				kiln_strv_push(&order, p->chunks[i]);
	}
	for (size_t i = 0; i < order.n;) {
		struct rc_blob b[PREFETCH_BATCH];
		size_t n = 0;
		for (; i < order.n && n < PREFETCH_BATCH; i++) {
			if (dist_chunks_has(T->cs, order.v[i]))
				continue;
			memset(&b[n], 0, sizeof(b[n]));
			snprintf(b[n].digest, KILN_DIGEST_MAX, "%s", order.v[i]);
			b[n].size = -1;
			b[n].path = dist_chunks_path(T->cs, order.v[i]);
			char *dir = kiln_xstrdup(b[n].path);
			*strrchr(dir, '/') = '\0';
			kiln_mkdir_p(dir, 0755, NULL);
			free(dir);
			n++;
		}
		if (n == 0)
			continue;
		/* a sandbox is starting (its reads fetch chunks): let it have the
		 * link and the CPU, then go on */
		for (int w = 0; w < 100; w++) {
			pthread_mutex_lock(&S.lock);
			double since = kiln_now_ms() - S.last_fault_ms;
			pthread_mutex_unlock(&S.lock);
			if (since > 1000)
				break;
			kiln_sleep_ms(100);
		}
		kiln_error *e = NULL;
		rc_client *c = rc_client_new(T->host, NULL, &e);
		struct rc_xfer_opts xo = { .parallel = 4, .have = have_cb, .ud = T, .no_fsync = 1 };
		int r = c ? rc_blobs_pull(c, T->repo, b, n, &xo, &e) : -1;
		rc_client_free(c);
		for (size_t k = 0; k < n; k++)
			free((char *)b[k].path);
		if (r < 0) {
			dist_cfs_logf("template %.12s: prefetch from %s/%s: %s; retrying in %us", T->hex, T->host, T->repo,
			      kiln_error_message(e), wait_s);
			kiln_error_free(e);
			sleep(wait_s);
			wait_s = wait_s < 30 ? wait_s * 2 : 30;
			i = 0; /* start over: what arrived is skipped */
			continue;
		}
		wait_s = 1;
	}
	dist_cfs_logf("template %.12s: every chunk is local (prefetch %.1f s; %lu chunks fetched on first touch so far)",
	      T->hex, (kiln_now_ms() - t0) / 1000.0, S.faults);
	kiln_strv_free(&order);
	return NULL;
}

/* ---- FUSE operations ---- */
/* path "/HEX/ROLE" → template and part; "/HEX" → template (part NULL). */
static int resolve(const char *path, struct cfs_tmpl **T, const struct dist_tmpl_part **p)
{
	char hex[65];
	const char *s = path + 1, *slash = strchr(s, '/');
	size_t n = slash ? (size_t)(slash - s) : strlen(s);

	*T = NULL;
	*p = NULL;
	if (n != 64)
		return -ENOENT;
	memcpy(hex, s, 64);
	hex[64] = '\0';
	if ((*T = get_tmpl(hex)) == NULL)
		return -ENOENT;
	if (!slash)
		return 0;
	for (size_t i = 0; i < NSERVED; i++)
		if (strcmp(slash + 1, SERVED[i]) == 0 && (*p = find_part(*T, SERVED[i])) != NULL)
			return 0;
	return -ENOENT;
}

static int op_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	struct cfs_tmpl *T;
	const struct dist_tmpl_part *p;
	int r;

	(void)fi;
	memset(st, 0, sizeof(*st));
	if (strcmp(path, "/") == 0) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return 0;
	}
	if ((r = resolve(path, &T, &p)) < 0)
		return r;
	if (p == NULL) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)p->size;
		st->st_blksize = (blksize_t)p->chunk_size;
	}
	return 0;
}

static int op_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi,
		      enum fuse_readdir_flags fl)
{
	struct cfs_tmpl *T;
	const struct dist_tmpl_part *p;

	(void)off, (void)fi, (void)fl;
	fill(buf, ".", NULL, 0, 0);
	fill(buf, "..", NULL, 0, 0);
	if (strcmp(path, "/") == 0) {
		pthread_mutex_lock(&S.lock);
		for (T = S.tmpls; T; T = T->next)
			fill(buf, T->hex, NULL, 0, 0);
		pthread_mutex_unlock(&S.lock);
		return 0;
	}
	if (resolve(path, &T, &p) < 0 || p)
		return -ENOENT;
	for (size_t i = 0; i < NSERVED; i++)
		if (find_part(T, SERVED[i]))
			fill(buf, SERVED[i], NULL, 0, 0);
	return 0;
}

static int op_open(const char *path, struct fuse_file_info *fi)
{
	struct cfs_tmpl *T;
	const struct dist_tmpl_part *p;
	int r = resolve(path, &T, &p);

	if (r < 0)
		return r;
	if (p == NULL)
		return -EISDIR;
	/* QEMU 7.2 opens a memory-backend-file read-write even for share=off
	 * (a private mapping: nothing is ever written back); every write and
	 * truncation is refused below, so a writable descriptor is harmless. */
	if ((fi->flags & O_ACCMODE) != O_RDONLY && strcmp(p->role, "memory") != 0)
		return -EROFS;
	if (fi->flags & O_TRUNC)
		return -EROFS;
	fi->keep_cache = 1; /* immutable: the page cache is shared by every sandbox */
	return 0;
}

static int op_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct cfs_tmpl *T;
	const struct dist_tmpl_part *p;
	unsigned char *raw = NULL;
	size_t done = 0;
	int r = resolve(path, &T, &p);

	(void)fi;
	if (r < 0 || p == NULL)
		return r < 0 ? r : -EISDIR;
	if (off < 0 || (uint64_t)off >= p->size)
		return 0;
	if ((uint64_t)off + size > p->size)
		size = (size_t)(p->size - (uint64_t)off);
	pthread_mutex_lock(&S.lock);
	S.last_read_ms = kiln_now_ms();
	pthread_mutex_unlock(&S.lock);
	if (T->local) {
		size_t k = 0;
		while (strcmp(SERVED[k], p->role) != 0)
			k++;
		ssize_t n = pread(T->fd[k], buf, size, off);
		if (n < 0)
			return -errno;
		pthread_mutex_lock(&T->lock);
		fprintf(T->reads, "%s %llu %zd\n", p->role, (unsigned long long)off, n);
		fflush(T->reads);
		pthread_mutex_unlock(&T->lock);
		return (int)n;
	}
	fetch_missing(T, p, (uint64_t)off, size);
	raw = kiln_xmalloc(p->chunk_size);
	while (done < size) {
		uint64_t pos = (uint64_t)off + done;
		size_t i = (size_t)(pos / p->chunk_size), in = (size_t)(pos % p->chunk_size);
		size_t clen = (size_t)(p->size - i * p->chunk_size < p->chunk_size ? p->size - i * p->chunk_size
										     : p->chunk_size);
		size_t take = clen - in < size - done ? clen - in : size - done;
		if (p->chunks[i] == NULL) {
			memset(buf + done, 0, take);
		} else {
			kiln_error *e = NULL;
			if (chunk_data(T, p, i, raw, clen, &e) < 0) {
				/* QEMU maps the memory: a failed read of it is a SIGBUS there */
				dist_cfs_logf("template %.12s: the %s at offset %llu (chunk %zu) cannot be read: %s; %s", T->hex,
					      p->role, (unsigned long long)pos, i, kiln_error_message(e),
					      strcmp(p->role, "memory") == 0
						      ? "the QEMU whose guest touched it gets SIGBUS: its sandbox stops"
						      : "the sandbox reading it gets an I/O error");
				kiln_error_free(e);
				free(raw);
				return -EIO;
			}
			memcpy(buf + done, raw + in, take);
		}
		done += take;
	}
	free(raw);
	return (int)done;
}

static int op_write(const char *path, const char *buf, size_t n, off_t off, struct fuse_file_info *fi)
{
	(void)path, (void)buf, (void)n, (void)off, (void)fi;
	return -EROFS;
}

static int op_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	(void)path, (void)size, (void)fi;
	return -EROFS;
}

static void *op_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	(void)conn;
	/* templates never change: cache names, attributes and data for long */
	cfg->kernel_cache = 1;
	cfg->entry_timeout = cfg->attr_timeout = 3600;
	cfg->negative_timeout = 0;
	return NULL;
}

static const struct fuse_operations ops = {
	.init = op_init, .getattr = op_getattr, .readdir = op_readdir, .open = op_open,
	.read = op_read, .write = op_write, .truncate = op_truncate,
};

/* ---- the daemon and its callers ---- */
int dist_chunkfs_serve(kiln_error **err)
{
	char *dir = dist_cfs_dir(), *mnt = dist_cfs_sub("mnt"), *lockp = dist_cfs_sub("lock"), *pidp = dist_cfs_sub("pid");
	char *argv0 = "kiln-chunkfs", *argv1 = "-o",
	     *argv2 = "allow_other,fsname=kiln-chunkfs,subtype=kiln";
	char *args_v[] = { argv0, argv1, argv2, NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, args_v);
	struct fuse *f = NULL;
	int lock = -1, rc = -1;
	bool stale;

	if (kiln_mkdir_p(mnt, 0755, err) < 0 || chmod(dir, 0700) < 0)
		goto out;
	if ((lock = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
		kiln_err_errno(err, errno, "open %s", lockp);
		goto out;
	}
	if (flock(lock, LOCK_EX | LOCK_NB) < 0) {
		rc = 0; /* another server runs (or is starting) */
		goto out;
	}
	if (dist_cfs_is_mounted(mnt, &stale))
		umount2(mnt, MNT_DETACH); /* a server that died: its mount is dead */
	S.prefetch = !getenv("KILN_CHUNKFS_PREFETCH") || strcmp(getenv("KILN_CHUNKFS_PREFETCH"), "0") != 0;
	if ((f = fuse_new(&args, &ops, sizeof(ops), NULL)) == NULL || fuse_mount(f, mnt) != 0) {
		kiln_err(err, KILN_E_IO, "chunkfs: cannot mount FUSE at %s (/dev/fuse, fuse3)", mnt);
		goto out;
	}
	char pid[32];
	snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (kiln_write_atomic(pidp, pid, strlen(pid), 0644, err) < 0)
		goto out;
	S.mnt = mnt;
	fuse_set_signal_handlers(fuse_get_session(f));
	dist_cfs_logf("serving %s", mnt);
	struct fuse_loop_config lc = { .clone_fd = 0, .max_idle_threads = 8 };
	/* a signal handled by fuse_set_signal_handlers (SIGTERM, SIGINT: a normal
	 * stop) ends the loop with that signal's number; only < 0 is a failure */
	int r = fuse_loop_mt(f, &lc);
	rc = r < 0 ? -1 : 0;
	if (r > 0)
		dist_cfs_logf("stopped (signal %d)", r);
	else
		dist_cfs_logf("stopped");
	S.mnt = NULL;
	fuse_remove_signal_handlers(fuse_get_session(f));
	unlink(pidp);
	if (rc < 0)
		kiln_err(err, KILN_E_IO, "chunkfs: the FUSE loop failed");
out:
	if (f) {
		fuse_unmount(f);
		fuse_destroy(f);
	}
	fuse_opt_free_args(&args);
	if (lock >= 0)
		close(lock);
	free(dir);
	free(mnt);
	free(lockp);
	free(pidp);
	return rc;
}
