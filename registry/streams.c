/* streams.c — FIFO admission for large blob responses: at most N are sent at
 * once, the others wait in arrival order.  With hundreds of concurrent pulls
 * the kernel and the scheduler share bandwidth unevenly, so latencies spread
 * (some finish in a fraction of the fair time, some take many times it);
 * queueing in order makes every request wait about as long as the ones before
 * it — a tight latency distribution — and fewer concurrent senders thrash
 * less.  A waiter gives up after a bound and is sent unqueued, so slow
 * clients holding slots cannot starve the rest. */
#include <errno.h>
#include <time.h>

#include "registry/internal.h"

struct reg_waiter {
	pthread_cond_t cond;
	int granted;
	struct reg_waiter *next;
};

void reg_streams_init(reg_streams *s, unsigned max)
{
	pthread_mutex_init(&s->lock, NULL);
	s->max = max;
	s->active = s->waiting = 0;
	s->head = NULL;
	s->tail = &s->head;
}

void reg_streams_destroy(reg_streams *s)
{
	pthread_mutex_destroy(&s->lock);
}

int reg_streams_acquire(reg_streams *s, unsigned wait_s)
{
	struct reg_waiter w = { .granted = 0, .next = NULL };
	struct timespec deadline;
	int rc = 0;

	if (s->max == 0)
		return 0;
	pthread_mutex_lock(&s->lock);
	if (s->active < s->max && s->head == NULL) {
		s->active++;
		pthread_mutex_unlock(&s->lock);
		return 1;
	}
	pthread_cond_init(&w.cond, NULL);
	*s->tail = &w;
	s->tail = &w.next;
	s->waiting++;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += wait_s;
	while (!w.granted && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&w.cond, &s->lock, &deadline);
	if (!w.granted) {
		/* Timed out: leave the queue and go unqueued. */
		struct reg_waiter **pp;
		for (pp = &s->head; *pp != &w; pp = &(*pp)->next)
			;
		*pp = w.next;
		if (s->tail == &w.next)
			s->tail = pp;
		s->waiting--;
	}
	pthread_mutex_unlock(&s->lock);
	pthread_cond_destroy(&w.cond);
	return w.granted;
}

void reg_streams_release(reg_streams *s)
{
	pthread_mutex_lock(&s->lock);
	if (s->head) {
		/* The slot passes straight to the first waiter. */
		struct reg_waiter *w = s->head;
		s->head = w->next;
		if (s->head == NULL)
			s->tail = &s->head;
		s->waiting--;
		w->granted = 1;
		pthread_cond_signal(&w->cond);
	} else {
		s->active--;
	}
	pthread_mutex_unlock(&s->lock);
}
