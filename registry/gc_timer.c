/* gc_timer.c — kiln serve's own garbage collection: every gc_interval_s a
 * thread applies the retention rules, then sweeps (reg_gc_run, on its own
 * connections, as `kiln registry gc` would from outside). */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "registry/internal.h"

struct reg_gc_timer {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	int stop;
	const struct reg_config *c;
};

static void gc_once(const struct reg_config *c)
{
	struct reg_gc_run run;
	kiln_error *err = NULL;

	if (reg_gc_run(c, "timer", 0, &run, &err) < 0) {
		kiln_warn("registry gc timer: %s", kiln_error_message(err));
		kiln_error_clear(&err);
		return;
	}
	if (run.retained)
		kiln_info("registry gc timer: retention removed %llu tags, %llu manifests (%llu bytes to free)",
			  (unsigned long long)run.retain.tags_removed, (unsigned long long)run.retain.manifests_removed,
			  (unsigned long long)run.retain.bytes_freed);
	kiln_info("registry gc timer: %llu blobs removed (%llu bytes), %llu uploads", (unsigned long long)run.gc.blobs_removed,
		  (unsigned long long)run.gc.bytes_removed, (unsigned long long)run.gc.uploads_removed);
}

static void *loop(void *ud)
{
	struct reg_gc_timer *t = ud;
	struct timespec at;

	pthread_mutex_lock(&t->lock);
	while (!t->stop) {
		clock_gettime(CLOCK_MONOTONIC, &at);
		at.tv_sec += (time_t)t->c->gc_interval_s;
		while (!t->stop && pthread_cond_timedwait(&t->wake, &t->lock, &at) != ETIMEDOUT)
			;
		if (t->stop)
			break;
		pthread_mutex_unlock(&t->lock);
		gc_once(t->c);
		pthread_mutex_lock(&t->lock);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

int reg_gc_timer_start(reg_server *s, kiln_error **err)
{
	struct reg_gc_timer *t;
	pthread_condattr_t ca;

	if (s->cfg.gc_interval_s <= 0)
		return 0;
	t = kiln_xcalloc(1, sizeof(*t));
	t->c = &s->cfg;
	pthread_mutex_init(&t->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->wake, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&t->thread, NULL, loop, t) != 0) {
		pthread_cond_destroy(&t->wake);
		pthread_mutex_destroy(&t->lock);
		free(t);
		return kiln_err(err, KILN_E_IO, "registry: cannot start the gc timer");
	}
	s->gc_timer = t;
	return 0;
}

/* Waits for a run in progress to end. */
void reg_gc_timer_stop(reg_server *s)
{
	struct reg_gc_timer *t = s->gc_timer;

	if (t == NULL)
		return;
	pthread_mutex_lock(&t->lock);
	t->stop = 1;
	pthread_cond_signal(&t->wake);
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->thread, NULL);
	pthread_cond_destroy(&t->wake);
	pthread_mutex_destroy(&t->lock);
	free(t);
	s->gc_timer = NULL;
}
