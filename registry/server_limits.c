/* server_limits.c — deadlines and headroom for `kiln serve`'s connections,
 * and the failed-authentication limiter.  libmicrohttpd's own timeout is an
 * idle one (a byte every few seconds resets it), so a watchdog thread closes
 * (shutdown(2); the library then closes and frees it) connections whose headers
 * take too long, whose body trickles, or that sit idle between requests. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "registry/server_limits.h"

/* ---- the failed-authentication table ----
 * Each key is a GCRA bucket: tat ("theoretical arrival time") moves refill_s
 * ahead per failure; more than burst ahead of now means blocked.  A slot whose
 * tat has passed is free.  Lookups probe PROBE slots; when all are taken the
 * one nearest to forgiven is replaced, so memory stays fixed whatever the
 * number of addresses and names an attacker uses. */
#define PROBE 8

struct authlim_slot {
	uint64_t h;    /* keyed hash of kind + key; 0 = never used */
	int64_t tat;   /* seconds */
};

struct reg_authlim {
	pthread_mutex_t lock;
	uint64_t seed;
	unsigned mask, burst, refill_s;
	struct authlim_slot *slot;
};

reg_authlim *reg_authlim_new(unsigned slots, unsigned burst, unsigned refill_s)
{
	reg_authlim *l = kiln_xcalloc(1, sizeof(*l));
	unsigned n = 16;

	while (n < slots && n < (1u << 24))
		n <<= 1;
	l->mask = n - 1;
	l->burst = burst ? burst : 1;
	l->refill_s = refill_s ? refill_s : 1;
	l->slot = kiln_xcalloc(n, sizeof(*l->slot));
	if (getrandom(&l->seed, sizeof(l->seed), 0) != sizeof(l->seed))
		l->seed = (uint64_t)(int64_t)kiln_now_ms() * 0x9e3779b97f4a7c15ull;
	pthread_mutex_init(&l->lock, NULL);
	return l;
}

void reg_authlim_free(reg_authlim *l)
{
	if (l == NULL)
		return;
	pthread_mutex_destroy(&l->lock);
	free(l->slot);
	free(l);
}

size_t reg_authlim_bytes(const reg_authlim *l)
{
	return sizeof(*l) + ((size_t)l->mask + 1) * sizeof(*l->slot);
}

/* FNV-1a over the seed, the kind and the key, then a final mix (splitmix64);
 * the seed keeps an attacker from choosing keys that collide. */
static uint64_t key_hash(const reg_authlim *l, char kind, const char *key)
{
	uint64_t h = 0xcbf29ce484222325ull ^ l->seed;

	h = (h ^ (unsigned char)kind) * 0x100000001b3ull;
	for (const unsigned char *p = (const unsigned char *)key; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebull;
	h ^= h >> 31;
	return h | 1;
}

/* The slot holding h, or NULL; with insert, a free or the nearest-forgiven one. */
static struct authlim_slot *find(reg_authlim *l, uint64_t h, int64_t now, int insert)
{
	struct authlim_slot *victim = NULL;

	for (unsigned i = 0; i < PROBE; i++) {
		struct authlim_slot *s = &l->slot[(h + i) & l->mask];
		if (s->h == h)
			return s;
		if (!insert)
			continue;
		if (s->h == 0 || s->tat <= now) {
			if (victim == NULL || victim->tat > now)
				victim = s;
		} else if (victim == NULL || (victim->tat > now && s->tat < victim->tat)) {
			victim = s;
		}
	}
	if (victim) {
		victim->h = h;
		victim->tat = now;
	}
	return victim;
}

unsigned reg_authlim_blocked(reg_authlim *l, char kind, const char *key, int64_t now)
{
	int64_t ahead, allowed = (int64_t)(l->burst - 1) * l->refill_s;
	struct authlim_slot *s;
	unsigned ret = 0;

	pthread_mutex_lock(&l->lock);
	s = find(l, key_hash(l, kind, key), now, 0);
	if (s && (ahead = s->tat - now) > allowed)
		ret = (unsigned)(ahead - allowed);
	pthread_mutex_unlock(&l->lock);
	return ret;
}

int reg_authlim_failed(reg_authlim *l, char kind, const char *key, int64_t now)
{
	struct authlim_slot *s;
	int ret;

	pthread_mutex_lock(&l->lock);
	s = find(l, key_hash(l, kind, key), now, 0);
	ret = s && s->tat > now;
	pthread_mutex_unlock(&l->lock);
	return ret;
}

void reg_authlim_fail(reg_authlim *l, char kind, const char *key, int64_t now)
{
	struct authlim_slot *s;

	pthread_mutex_lock(&l->lock);
	s = find(l, key_hash(l, kind, key), now, 1);
	if (s)
		s->tat = (s->tat > now ? s->tat : now) + l->refill_s;
	pthread_mutex_unlock(&l->lock);
}

unsigned reg_authlim_used(reg_authlim *l)
{
	unsigned n = 0;

	pthread_mutex_lock(&l->lock);
	for (unsigned i = 0; i <= l->mask; i++)
		n += l->slot[i].h != 0;
	pthread_mutex_unlock(&l->lock);
	return n;
}

/* ---- connections ---- */
enum conn_phase { C_WAIT, C_HEADERS, C_BODY, C_BUSY, C_IDLE };

struct reg_conn {
	int fd;
	enum conn_phase phase;
	int64_t since;        /* ms: start of the phase's deadline */
	int64_t win_start;    /* ms: body rate window */
	uint64_t win_bytes;
	int reused, closing, refuse;
	reg_conn *prev, *next;
};

struct reg_limits {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t thread;
	int running, stop;
	int64_t header_ms, idle_ms, window_ms;
	uint64_t min_rate;      /* bytes/s; 0 = no check */
	unsigned soft;          /* connection_limit - headroom */
	unsigned count;
	reg_conn *head;         /* newest first */
	struct reg_limits_stats st;
	reg_authlim *auth;
};

reg_limits *reg_limits_new(const struct reg_config *c)
{
	reg_limits *l = kiln_xcalloc(1, sizeof(*l));

	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->wake, NULL);
	l->header_ms = (int64_t)c->header_timeout_s * 1000;
	l->idle_ms = (int64_t)c->idle_timeout_s * 1000;
	l->window_ms = (int64_t)(c->body_rate_window_s ? c->body_rate_window_s : 1) * 1000;
	l->min_rate = c->body_min_rate;
	/* At most a quarter of the limit is headroom, so a small limit keeps most
	 * of its connections. */
	l->soft = c->connection_limit - (c->connection_headroom < c->connection_limit / 4 ? c->connection_headroom
											  : c->connection_limit / 4);
	l->auth = reg_authlim_new(c->auth_fail_slots, c->auth_fail_burst, c->auth_fail_refill_s);
	return l;
}

reg_authlim *reg_limits_auth(reg_limits *l)
{
	return l->auth;
}

void reg_limits_stats(reg_limits *l, struct reg_limits_stats *out)
{
	pthread_mutex_lock(&l->lock);
	*out = l->st;
	pthread_mutex_unlock(&l->lock);
}

/* Caller holds l->lock.  The descriptor is still open: the library calls
 * reg_conn_closed (which takes the lock) before it closes it. */
static void conn_close(reg_limits *l, reg_conn *c, uint64_t *counter)
{
	if (c->closing)
		return;
	c->closing = 1;
	shutdown(c->fd, SHUT_RDWR);
	(*counter)++;
}

static int is_idle(const reg_conn *c)
{
	return c->phase == C_WAIT || c->phase == C_HEADERS || c->phase == C_IDLE;
}

reg_conn *reg_conn_open(reg_limits *l, int fd)
{
	reg_conn *c = kiln_xcalloc(1, sizeof(*c)), *oldest = NULL;

	c->fd = fd;
	c->phase = C_WAIT;
	c->since = (int64_t)kiln_now_ms();
	pthread_mutex_lock(&l->lock);
	l->st.accepted++;
	if (++l->count > l->soft) {
		/* Over the headroom: make room by closing the connection that has
		 * waited longest without a request in progress. */
		for (reg_conn *p = l->head; p; p = p->next)
			if (!p->closing && is_idle(p) && (oldest == NULL || p->since <= oldest->since))
				oldest = p;
		if (oldest)
			conn_close(l, oldest, &l->st.closed_headroom);
		else
			c->refuse = 1;
	}
	c->next = l->head;
	if (l->head)
		l->head->prev = c;
	l->head = c;
	pthread_mutex_unlock(&l->lock);
	return c;
}

void reg_conn_closed(reg_limits *l, reg_conn *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&l->lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		l->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	l->count--;
	pthread_mutex_unlock(&l->lock);
	free(c);
}

void reg_conn_request_line(reg_limits *l, reg_conn *c)
{
	int64_t t = (int64_t)kiln_now_ms();

	if (c == NULL)
		return;
	pthread_mutex_lock(&l->lock);
	if (c->phase == C_IDLE && t - c->since > l->st.keepalive_gap_max_ms)
		l->st.keepalive_gap_max_ms = t - c->since;
	/* A fresh connection's header deadline runs from the accept. */
	if (c->reused)
		c->since = t;
	c->phase = C_HEADERS;
	pthread_mutex_unlock(&l->lock);
}

unsigned reg_conn_headers(reg_limits *l, reg_conn *c)
{
	int64_t t = (int64_t)kiln_now_ms();
	unsigned retry = 0;

	if (c == NULL)
		return 0;
	pthread_mutex_lock(&l->lock);
	if (t - c->since > l->st.header_max_ms)
		l->st.header_max_ms = t - c->since;
	c->phase = C_BODY;
	c->since = c->win_start = t;
	c->win_bytes = 0;
	if (c->refuse) {
		l->st.refused_503++;
		retry = 1;
	}
	pthread_mutex_unlock(&l->lock);
	return retry;
}

void reg_conn_body(reg_limits *l, reg_conn *c, size_t n)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&l->lock);
	c->win_bytes += n;
	pthread_mutex_unlock(&l->lock);
}

void reg_conn_busy(reg_limits *l, reg_conn *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&l->lock);
	c->phase = C_BUSY;
	pthread_mutex_unlock(&l->lock);
}

void reg_conn_done(reg_limits *l, reg_conn *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&l->lock);
	c->phase = C_IDLE;
	c->since = (int64_t)kiln_now_ms();
	c->reused = 1;
	pthread_mutex_unlock(&l->lock);
}

/* One pass over the connections: close those past their phase's deadline. */
static void sweep(reg_limits *l)
{
	int64_t t = (int64_t)kiln_now_ms();

	for (reg_conn *c = l->head; c; c = c->next) {
		if (c->closing)
			continue;
		switch (c->phase) {
		case C_WAIT:
		case C_HEADERS:
			if (l->header_ms && t - c->since > l->header_ms)
				conn_close(l, c, &l->st.closed_header);
			break;
		case C_IDLE:
			if (l->idle_ms && t - c->since > l->idle_ms)
				conn_close(l, c, &l->st.closed_idle);
			break;
		case C_BODY:
			if (t - c->win_start < l->window_ms)
				break;
			if (l->min_rate && c->win_bytes * 1000 < l->min_rate * (uint64_t)(t - c->win_start))
				conn_close(l, c, &l->st.closed_body_rate);
			c->win_start = t;
			c->win_bytes = 0;
			break;
		case C_BUSY:
			break;
		}
	}
}

static void *watchdog(void *arg)
{
	reg_limits *l = arg;

	pthread_mutex_lock(&l->lock);
	while (!l->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 250 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&l->wake, &l->lock, &ts);
		if (!l->stop)
			sweep(l);
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

int reg_limits_start(reg_limits *l, kiln_error **err)
{
	int e = pthread_create(&l->thread, NULL, watchdog, l);

	if (e != 0)
		return kiln_err_errno(err, e, "start the connection watchdog");
	l->running = 1;
	return 0;
}

void reg_limits_free(reg_limits *l)
{
	if (l == NULL)
		return;
	if (l->running) {
		pthread_mutex_lock(&l->lock);
		l->stop = 1;
		pthread_cond_signal(&l->wake);
		pthread_mutex_unlock(&l->lock);
		pthread_join(l->thread, NULL);
	}
	/* Connections still listed were left by a daemon that is already stopped. */
	while (l->head) {
		reg_conn *n = l->head->next;
		free(l->head);
		l->head = n;
	}
	reg_authlim_free(l->auth);
	pthread_cond_destroy(&l->wake);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

uint64_t reg_limits_raise_nofile(uint64_t want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
		rlim_t cur = rl.rlim_cur;
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? (rlim_t)want : rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			rl.rlim_cur = cur;
	}
	return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}
