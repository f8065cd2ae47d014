/* test_registry_streams.c — FIFO admission of large blob responses: at most
 * N slots, waiters served in arrival order, a slot handed straight to the
 * first waiter, and a waiter that times out leaves the queue intact. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registry/internal.h"
#include "test.h"

static reg_streams s;
static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
static int order[8], norder;

struct arg {
	int id;
	unsigned wait_s;
	int got;
};

static void *waiter(void *p)
{
	struct arg *a = p;

	a->got = reg_streams_acquire(&s, a->wait_s);
	pthread_mutex_lock(&order_lock);
	order[norder++] = a->id;
	pthread_mutex_unlock(&order_lock);
	return NULL;
}

static unsigned queued(void)
{
	unsigned n;

	pthread_mutex_lock(&s.lock);
	n = s.waiting;
	pthread_mutex_unlock(&s.lock);
	return n;
}

static int done(void)
{
	int n;

	pthread_mutex_lock(&order_lock);
	n = norder;
	pthread_mutex_unlock(&order_lock);
	return n;
}

/* Waits (bounded, generous under load) until cond holds. */
#define WAIT_FOR(cond) \
	for (int w_ = 0; w_ < 2000 && !(cond); w_++) \
		usleep(10 * 1000)

static void test_fifo(void)
{
	pthread_t t[4];
	struct arg a[4];

	reg_streams_init(&s, 2);
	CHECK_INT(reg_streams_acquire(&s, 1), 1);
	CHECK_INT(reg_streams_acquire(&s, 1), 1);
	/* Four waiters queue in a known order. */
	for (int i = 0; i < 4; i++) {
		a[i] = (struct arg){ i, 30, -1 };
		pthread_create(&t[i], NULL, waiter, &a[i]);
		WAIT_FOR(queued() == (unsigned)i + 1);
		CHECK_INT(queued(), i + 1);
	}
	CHECK_INT(done(), 0);
	for (int i = 0; i < 4; i++) {
		reg_streams_release(&s);
		WAIT_FOR(done() == i + 1);
		CHECK_INT(done(), i + 1);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK_INT(a[i].got, 1);
		CHECK_INT(order[i], i);
	}
	/* Slots handed over, never freed in between: still 2 held. */
	CHECK_INT(s.active, 2);
	reg_streams_release(&s);
	reg_streams_release(&s);
	CHECK_INT(s.active, 0);
	reg_streams_destroy(&s);
}

static void test_timeout(void)
{
	pthread_t t;
	struct arg a = { 7, 1, -1 }, b = { 8, 30, -1 };

	reg_streams_init(&s, 1);
	norder = 0;
	CHECK_INT(reg_streams_acquire(&s, 1), 1);
	CHECK_INT(reg_streams_acquire(&s, 1), 0); /* gave up after 1 s, unqueued */
	/* A waiter behind one that times out still gets the slot. */
	pthread_create(&t, NULL, waiter, &a);
	WAIT_FOR(queued() == 1);
	{
		pthread_t t2;
		pthread_create(&t2, NULL, waiter, &b);
		WAIT_FOR(queued() == 2);
		pthread_join(t, NULL); /* a gives up after its second */
		CHECK_INT(a.got, 0);
		CHECK_INT(queued(), 1);
		reg_streams_release(&s);
		pthread_join(t2, NULL);
		CHECK_INT(b.got, 1);
	}
	reg_streams_release(&s);
	CHECK_INT(s.active, 0);
	CHECK(s.head == NULL);
	reg_streams_destroy(&s);
}

static void test_unlimited(void)
{
	reg_streams_init(&s, 0);
	for (int i = 0; i < 100; i++)
		CHECK_INT(reg_streams_acquire(&s, 1), 0);
	reg_streams_destroy(&s);
}

int main(void)
{
	RUN(test_fifo);
	RUN(test_timeout);
	RUN(test_unlimited);
	return test_done();
}
