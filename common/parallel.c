/* parallel.c — one job list worked through by a few threads (this one among
 * them): what hashing a context, linking one and uploading its files share.
 * Each item is taken once; the first failure stops the others from taking
 * more and is the error returned. */
#include <pthread.h>
#include <stdatomic.h>

#include "kiln.h"

struct pool {
	size_t n;
	atomic_size_t next;
	int (*fn)(void *ud, size_t i, unsigned worker, kiln_error **err);
	void *ud;
	pthread_mutex_t lock;
	kiln_error *err; /* the first failure */
};

struct worker {
	struct pool *p;
	unsigned id;
};

static void *work(void *ud)
{
	struct worker *w = ud;
	struct pool *p = w->p;

	for (size_t i; (i = atomic_fetch_add(&p->next, 1)) < p->n;) {
		kiln_error *e = NULL;
		if (p->fn(p->ud, i, w->id, &e) < 0) {
			pthread_mutex_lock(&p->lock);
			if (p->err == NULL)
				p->err = e;
			else
				kiln_error_free(e);
			pthread_mutex_unlock(&p->lock);
			atomic_store(&p->next, p->n);
		}
	}
	return NULL;
}

int kiln_parallel(size_t n, unsigned workers, int (*fn)(void *ud, size_t i, unsigned worker, kiln_error **err),
		  void *ud, kiln_error **err)
{
	struct pool p = { .n = n, .fn = fn, .ud = ud };
	struct worker w[KILN_PARALLEL_MAX];
	pthread_t th[KILN_PARALLEL_MAX];
	unsigned started = 1;

	if (workers > KILN_PARALLEL_MAX)
		workers = KILN_PARALLEL_MAX;
	atomic_init(&p.next, 0);
	pthread_mutex_init(&p.lock, NULL);
	for (unsigned k = 0; k < KILN_PARALLEL_MAX; k++)
		w[k] = (struct worker){ .p = &p, .id = k };
	for (; started < workers; started++) /* one that cannot start: fewer threads, as many items */
		if (pthread_create(&th[started], NULL, work, &w[started]) != 0)
			break;
	work(&w[0]);
	for (unsigned k = 1; k < started; k++)
		pthread_join(th[k], NULL);
	pthread_mutex_destroy(&p.lock);
	if (p.err) {
		*err = p.err;
		return -1;
	}
	return 0;
}
