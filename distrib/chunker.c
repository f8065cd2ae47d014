/* chunker.c — cutting one file into the artifact's chunks (docs/distribution.md)
 * on every core: the calling thread reads the file in order (holes found with
 * SEEK_DATA, never read) and hashes all of it, holes from a zero buffer, while
 * worker threads zstd-compress the data chunks and store them in the chunk
 * store (each named by the sha256 of its compressed bytes, written verified). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "distrib/distrib.h"

#define ZSTD_LEVEL 3
#define MAX_WORKERS 16

/* Holes are hashed from this, 64 KiB at a time. */
static const unsigned char zeros[64 << 10];

struct slot {
	unsigned char *raw;
	size_t index, len;
};

struct chunker {
	pthread_mutex_t mu;
	pthread_cond_t work, freed;
	struct slot *slots;
	size_t nslots;
	size_t *todo, ntodo, todo_head; /* ring of slots to compress */
	size_t *free, nfree;            /* stack of empty slots */
	bool done;                      /* the reader has queued every chunk */
	kiln_error *err;                /* the first failure (the reader stops) */
	dist_chunks *cs;
	struct dist_tmpl_part *part;
};

static bool all_zero(const unsigned char *p, size_t n)
{
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

static void *worker(void *arg)
{
	struct chunker *k = arg;
	ZSTD_CCtx *z = ZSTD_createCCtx();
	size_t bound = ZSTD_compressBound(k->part->chunk_size);
	unsigned char *comp = kiln_xmalloc(bound);
	kiln_error *e = NULL;

	if (z == NULL)
		kiln_err(&e, KILN_E_GENERIC, "zstd: cannot make a compression context");
	else {
		ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, ZSTD_LEVEL);
		ZSTD_CCtx_setParameter(z, ZSTD_c_checksumFlag, 1);
	}
	pthread_mutex_lock(&k->mu);
	for (;;) {
		while (k->ntodo == 0 && !k->done && k->err == NULL && e == NULL)
			pthread_cond_wait(&k->work, &k->mu);
		if (k->ntodo == 0 || k->err || e)
			break;
		size_t s = k->todo[k->todo_head];
		k->todo_head = (k->todo_head + 1) % k->nslots;
		k->ntodo--;
		pthread_mutex_unlock(&k->mu);

		struct slot *sl = &k->slots[s];
		char d[KILN_DIGEST_MAX];
		size_t n = ZSTD_compress2(z, comp, bound, sl->raw, sl->len);
		if (ZSTD_isError(n))
			kiln_err(&e, KILN_E_GENERIC, "zstd: %s", ZSTD_getErrorName(n));
		else if (dist_chunks_put(k->cs, comp, n, d, &e) == 0)
			k->part->chunks[sl->index] = kiln_xstrdup(d); /* one slot per index: no other writer */

		pthread_mutex_lock(&k->mu);
		k->free[k->nfree++] = s;
		pthread_cond_signal(&k->freed);
	}
	if (e && k->err == NULL) {
		k->err = e;
		e = NULL;
	}
	pthread_cond_broadcast(&k->freed);
	pthread_cond_broadcast(&k->work);
	pthread_mutex_unlock(&k->mu);
	kiln_error_free(e);
	ZSTD_freeCCtx(z);
	free(comp);
	return NULL;
}

static void hash_zeros(kiln_hasher *h, uint64_t len)
{
	while (len > 0) {
		size_t n = len < sizeof(zeros) ? (size_t)len : sizeof(zeros);
		kiln_hasher_update(h, zeros, n);
		len -= n;
	}
}

/* A slot to read into, or NULL once a worker failed. */
static struct slot *get_slot(struct chunker *k)
{
	struct slot *sl = NULL;

	pthread_mutex_lock(&k->mu);
	while (k->nfree == 0 && k->err == NULL)
		pthread_cond_wait(&k->freed, &k->mu);
	if (k->err == NULL)
		sl = &k->slots[k->free[--k->nfree]];
	pthread_mutex_unlock(&k->mu);
	return sl;
}

static void queue_slot(struct chunker *k, struct slot *sl, bool keep)
{
	pthread_mutex_lock(&k->mu);
	size_t s = (size_t)(sl - k->slots);
	if (keep) {
		k->todo[(k->todo_head + k->ntodo) % k->nslots] = s;
		k->ntodo++;
		pthread_cond_signal(&k->work);
	} else {
		k->free[k->nfree++] = s;
	}
	pthread_mutex_unlock(&k->mu);
}

/* The reader: every chunk in order, hashed; data chunks queued. */
static int read_chunks(struct chunker *k, int fd, const char *path, kiln_hasher *h, kiln_error **err)
{
	struct dist_tmpl_part *part = k->part;
	off_t data = -1;   /* where the data after the last seek's offset starts */
	bool none = false; /* no data after it */

	for (size_t i = 0; i < part->nchunks; i++) {
		uint64_t off = i * part->chunk_size;
		size_t len = (size_t)(part->size - off < part->chunk_size ? part->size - off : part->chunk_size);
		/* Holes are zeros without reading them (memory images are mostly holes). */
		if (!none && data < (off_t)off && (data = lseek(fd, (off_t)off, SEEK_DATA)) < 0) {
			if (errno != ENXIO)
				return kiln_err_errno(err, errno, "seek in %s", path);
			none = true;
		}
		if (none || data >= (off_t)(off + len)) {
			if (h)
				hash_zeros(h, len);
			continue;
		}
		struct slot *sl = get_slot(k);
		if (sl == NULL)
			return -1; /* a worker's error */
		ssize_t n = kiln_pread_full(fd, sl->raw, len, (off_t)off);
		if (n < 0 || (size_t)n < len) {
			queue_slot(k, sl, false);
			if (n < 0)
				return kiln_err_errno(err, errno, "read %s", path);
			return kiln_err(err, KILN_E_IO, "read %s: file shrank while being chunked", path);
		}
		if (h)
			kiln_hasher_update(h, sl->raw, len);
		sl->index = i;
		sl->len = len;
		queue_slot(k, sl, !all_zero(sl->raw, len));
	}
	return 0;
}

static unsigned workers_for(size_t data_chunks)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	const char *e = getenv("KILN_CHUNK_THREADS");

	if (e && *e)
		n = strtol(e, NULL, 10);
	if (n < 1)
		n = 1;
	if (n > MAX_WORKERS)
		n = MAX_WORKERS;
	if ((size_t)n > data_chunks)
		n = data_chunks ? (long)data_chunks : 1;
	return (unsigned)n;
}

static int chunk_file(dist_chunks *cs, const char *path, const char *role, struct dist_tmpl_part *part, bool whole,
		      kiln_error **err)
{
	struct chunker k = { .cs = cs, .part = part };
	kiln_hasher *h = whole ? kiln_hasher_new(KILN_SHA256) : NULL;
	pthread_t th[MAX_WORKERS];
	unsigned nth = 0, want;
	int fd = -1, rc = -1;
	off_t end;

	pthread_mutex_init(&k.mu, NULL);
	pthread_cond_init(&k.work, NULL);
	pthread_cond_init(&k.freed, NULL);
	memset(part, 0, sizeof(*part));
	part->role = kiln_xstrdup(role);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || (end = lseek(fd, 0, SEEK_END)) < 0) {
		kiln_err_errno(err, errno, "open %s", path);
		goto out;
	}
	part->size = (uint64_t)end;
	part->chunk_size = dist_tmpl_chunk_size(part->size, dist_tmpl_chunk_min(role));
	part->nchunks = (size_t)((part->size + part->chunk_size - 1) / part->chunk_size);
	part->chunks = kiln_xcalloc(part->nchunks ? part->nchunks : 1, sizeof(char *));
	want = workers_for(part->nchunks);
	k.nslots = 2 * (size_t)want + 2;
	k.slots = kiln_xcalloc(k.nslots, sizeof(*k.slots));
	k.todo = kiln_xcalloc(k.nslots, sizeof(size_t));
	k.free = kiln_xcalloc(k.nslots, sizeof(size_t));
	for (size_t s = 0; s < k.nslots; s++) {
		k.slots[s].raw = kiln_xmalloc(part->chunk_size);
		k.free[k.nfree++] = s;
	}
	for (; nth < want; nth++)
		if (pthread_create(&th[nth], NULL, worker, &k) != 0)
			break;
	if (nth == 0) {
		kiln_err(err, KILN_E_GENERIC, "cannot start a compression thread");
		goto out;
	}
	int r = read_chunks(&k, fd, path, h, err);
	pthread_mutex_lock(&k.mu);
	k.done = true;
	pthread_cond_broadcast(&k.work);
	pthread_mutex_unlock(&k.mu);
	for (unsigned t = 0; t < nth; t++)
		pthread_join(th[t], NULL);
	nth = 0;
	if (r < 0 && k.err == NULL)
		goto out;
	if (k.err) { /* a worker's error, unless the reader had its own */
		if (err && (r == 0 || *err == NULL)) {
			*err = k.err;
			k.err = NULL;
		}
		goto out;
	}
	if (h)
		kiln_hasher_final(h, part->digest);
	h = NULL;
	rc = 0;
out:
	if (rc < 0)
		kiln_error_wrap(err, "chunking the %s (%s)", role, path);
	kiln_error_free(k.err);
	if (h)
		kiln_hasher_free(h);
	if (fd >= 0)
		close(fd);
	for (size_t s = 0; s < k.nslots; s++)
		free(k.slots[s].raw);
	free(k.slots);
	free(k.todo);
	free(k.free);
	pthread_mutex_destroy(&k.mu);
	pthread_cond_destroy(&k.work);
	pthread_cond_destroy(&k.freed);
	return rc;
}

int dist_tmpl_chunk_file(dist_chunks *cs, const char *path, const char *role, struct dist_tmpl_part *part,
			kiln_error **err)
{
	return chunk_file(cs, path, role, part, true, err);
}

int dist_tmpl_chunk_file_unhashed(dist_chunks *cs, const char *path, const char *role, struct dist_tmpl_part *part,
				  kiln_error **err)
{
	return chunk_file(cs, path, role, part, false, err);
}
