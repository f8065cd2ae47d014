/* chunkfs_warm.c — the file server reads a lazy template's memory working set
 * through its own mount as soon as it learns the template, so the page cache
 * holds it (keep_cache) before the restored guest runs: the guest's first
 * page faults become page-cache hits instead of one round trip to the server
 * each (docs/distribution.md "Lazy templates"). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "distrib/internal.h"

#define WARM_PIECE (1u << 20) /* the kernel's largest FUSE read here */
#define WARM_GAP 16           /* zero chunks between two working-set chunks read along */
#define WARM_THREADS 2
#define WARM_WAIT_MS 10000    /* for chunks the lazy pull is still fetching */

struct piece {
	uint64_t off, len;
};

struct warm {
	char *path, hex[13];
	const struct dist_tmpl_part *part;
	dist_chunks *cs;
	struct piece *v;
	size_t n, next;
	uint64_t step;                /* bytes per read */
	pthread_mutex_t lock;
	int running;
	uint64_t bytes;
	double t0;
};

/* Every chunk of the piece is local (or zero), or the wait is over. */
static void wait_local(struct warm *w, const struct piece *pc)
{
	const struct dist_tmpl_part *p = w->part;
	size_t a = (size_t)(pc->off / p->chunk_size), b = (size_t)((pc->off + pc->len - 1) / p->chunk_size);

	for (size_t i = a; i <= b && i < p->nchunks; i++)
		while (p->chunks[i] && !dist_chunks_has(w->cs, p->chunks[i]) && kiln_now_ms() - w->t0 < WARM_WAIT_MS)
			kiln_sleep_ms(10);
}

static void *warm_main(void *arg)
{
	struct warm *w = arg;
	char *buf = kiln_xmalloc((size_t)w->step);
	int fd = open(w->path, O_RDONLY | O_CLOEXEC);
	uint64_t got = 0;

	for (;;) {
		pthread_mutex_lock(&w->lock);
		size_t k = w->next < w->n ? w->next++ : w->n;
		pthread_mutex_unlock(&w->lock);
		if (fd < 0 || k == w->n)
			break;
		wait_local(w, &w->v[k]);
		ssize_t r = pread(fd, buf, (size_t)w->v[k].len, (off_t)w->v[k].off);
		if (r < 0)
			break; /* the server is stopping, or a chunk cannot be had (logged by the read) */
		got += (uint64_t)r;
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	pthread_mutex_lock(&w->lock);
	w->bytes += got;
	bool last = --w->running == 0;
	pthread_mutex_unlock(&w->lock);
	if (last) {
		dist_cfs_logf("template %s: memory working set in the page cache (%.1f MiB read in %.0f ms)", w->hex,
			      (double)w->bytes / 1048576.0, kiln_now_ms() - w->t0);
		pthread_mutex_destroy(&w->lock);
		free(w->path);
		free(w->v);
		free(w);
	}
	return NULL;
}

void dist_cfs_warm_start(const char *path, const char *hex, const struct dist_tmpl_part *p, dist_chunks *cs)
{
	const char *e = getenv("KILN_CHUNKFS_WARM");
	struct warm *w;
	size_t cap = 0;

	if ((e && strcmp(e, "0") == 0) || p == NULL || p->nfirst == 0 || p->chunk_size == 0)
		return;
	w = kiln_xcalloc(1, sizeof(*w));
	w->path = kiln_xstrdup(path);
	snprintf(w->hex, sizeof(w->hex), "%.12s", hex);
	w->part = p;
	w->cs = cs;
	w->t0 = kiln_now_ms();
	pthread_mutex_init(&w->lock, NULL);
	w->step = p->chunk_size > WARM_PIECE ? p->chunk_size : WARM_PIECE / p->chunk_size * p->chunk_size;
	/* runs of working-set chunks, short runs of zero chunks read along (the
	 * guest touches those pages too, and they cost no fetch); a chunk outside
	 * the working set is not read: it may not be local */
	bool *in = kiln_xcalloc(p->nchunks + 1, sizeof(bool));
	for (size_t k = 0; k < p->nfirst; k++)
		if (p->first[k] < p->nchunks)
			in[p->first[k]] = true;
	for (size_t i = 0; i < p->nchunks;) {
		if (!in[i]) {
			i++;
			continue;
		}
		size_t a = i, b = i, zeros = 0;
		for (i++; i < p->nchunks && zeros <= WARM_GAP; i++) {
			if (in[i]) {
				b = i;
				zeros = 0;
			} else if (p->chunks[i] == NULL) {
				zeros++;
			} else {
				break;
			}
		}
		uint64_t off = (uint64_t)a * p->chunk_size, end = (uint64_t)(b + 1) * p->chunk_size;
		if (end > p->size)
			end = p->size;
		for (uint64_t step = w->step; off < end; off += step) {
			if (w->n == cap)
				w->v = kiln_xrealloc(w->v, (cap = cap ? 2 * cap : 64) * sizeof(*w->v));
			w->v[w->n++] = (struct piece){ off, end - off < step ? end - off : step };
		}
	}
	free(in);
	w->running = WARM_THREADS;
	for (int t = 0; t < WARM_THREADS; t++) {
		pthread_t th;
		if (pthread_create(&th, NULL, warm_main, w) == 0) {
			pthread_detach(th);
			continue;
		}
		pthread_mutex_lock(&w->lock);
		bool none = --w->running == 0;
		pthread_mutex_unlock(&w->lock);
		if (none) {
			pthread_mutex_destroy(&w->lock);
			free(w->path);
			free(w->v);
			free(w);
		}
	}
}
