/* host_life.c — the sandbox service's lifecycle calls: open (finding the
 * sandboxes an earlier daemon made, removing the ones that died unwatched),
 * kill, timeouts, pause and connect/resume, and the thread that refills
 * warm pools after a create took a member. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/internal.h"
#include "snapshots/snapshots.h"

static void *refill_main(void *arg)
{
	rt_host *h = arg;

	pthread_mutex_lock(&h->mu);
	while (!h->stop) {
		if (h->refill_q.n == 0) {
			pthread_cond_wait(&h->refill_cv, &h->mu);
			continue;
		}
		char *ref = h->refill_q.v[0];
		memmove(h->refill_q.v, h->refill_q.v + 1, (h->refill_q.n - 1) * sizeof(char *));
		h->refill_q.n--;
		pthread_mutex_unlock(&h->mu);
		kiln_error *e = NULL;
		/* the check a create makes (the signing policy: a template that
		 * fails it is never restored, not even into a pool nobody claims) */
		if (h->cfg.ensure_template && h->cfg.ensure_template(h->cfg.ud, ref, &e) < 0)
			kiln_warn("sandbox pool of %s: not restored: %s", ref, kiln_error_message(e));
		else if (snap_pool_fill(ref, h->cfg.pool_size, &e) < 0)
			kiln_warn("sandbox pool of %s: %s", ref, kiln_error_message(e));
		kiln_error_free(e);
		free(ref);
		pthread_mutex_lock(&h->mu);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

/* Sandboxes of teams that died with no daemon to see it (QEMU killed, the
 * host rebooted) are removed and reported; the running and paused stay. */
static void sweep(void)
{
	kiln_error *e = NULL;
	json_t *all = snap_sandbox_list(&e), *item;
	size_t i;

	json_array_foreach(all, i, item) {
		const char *team = kiln_json_str(json_object_get(item, "labels"), LABEL_TEAM);
		const char *state = kiln_json_str(item, "state"), *id = kiln_json_str(item, "id");
		if (team == NULL || id == NULL || state == NULL || strcmp(state, "dead") != 0)
			continue;
		kiln_warn("sandbox %s of team %s ended while no daemon watched it: removed", id, team);
		if (snap_sandbox_kill(id, &e) < 0) {
			kiln_warn("sandbox %s: %s", id, kiln_error_message(e));
			kiln_error_clear(&e);
		}
	}
	kiln_error_free(e);
	json_decref(all);
}

rt_host *rt_host_open(const struct rt_host_config *c, kiln_error **err)
{
	rt_host *h = kiln_xcalloc(1, sizeof(*h));

	h->cfg = *c;
	if (c->key_path == NULL) {
		free(h);
		kiln_err(err, KILN_E_INVALID, "the sandbox service needs a key file");
		return NULL;
	}
	if (rt_host_load_key(c->key_path, h->key, err) < 0) {
		free(h);
		return NULL;
	}
	h->cfg.key_path = NULL;
	h->cfg.pool_templates = NULL;
	pthread_mutex_init(&h->mu, NULL);
	pthread_mutex_init(&h->connect_mu, NULL);
	pthread_cond_init(&h->refill_cv, NULL);
	sweep();
	if (c->pool_size > 0) {
		if (pthread_create(&h->refill, NULL, refill_main, h) == 0)
			h->refill_started = true;
		for (size_t i = 0; c->pool_templates && c->pool_templates[i]; i++)
			rt_host_queue_refill(h, c->pool_templates[i]);
	}
	return h;
}

void rt_host_close(rt_host *h)
{
	if (h == NULL)
		return;
	pthread_mutex_lock(&h->mu);
	h->stop = true;
	pthread_cond_broadcast(&h->refill_cv);
	pthread_mutex_unlock(&h->mu);
	if (h->refill_started)
		pthread_join(h->refill, NULL);
	/* no request runs any more: every plane is unused */
	for (struct rt_entry *lists[2] = { h->live, h->gone }, **l = lists; l < lists + 2; l++)
		while (*l) {
			struct rt_entry *en = *l;
			*l = en->next;
			rt_entry_free(en);
		}
	kiln_strv_free(&h->refill_q);
	pthread_cond_destroy(&h->refill_cv);
	pthread_mutex_destroy(&h->connect_mu);
	pthread_mutex_destroy(&h->mu);
	free(h);
}

int rt_host_kill(rt_host *h, const char *team, const char *id, kiln_error **err)
{
	struct rt_info in;

	if (rt_host_get(h, team, id, &in, err) < 0)
		return -1;
	rt_info_free(&in);
	rt_host_drop(h, id);
	return snap_sandbox_kill(id, err);
}

int rt_host_set_timeout(rt_host *h, const char *team, const char *id, int64_t timeout_s, bool extend_only,
			kiln_error **err)
{
	struct rt_info in;
	int64_t now = (int64_t)time(NULL) * 1000;
	bool keep;

	if (timeout_s < 0)
		return kiln_err(err, KILN_E_INVALID, "timeout: want a number of seconds of 0 or more");
	if (rt_host_get(h, team, id, &in, err) < 0)
		return -1;
	keep = extend_only && (in.end_ms == 0 || in.end_ms >= now + timeout_s * 1000);
	rt_info_free(&in);
	return keep ? 0 : snap_sandbox_set_timeout(id, timeout_s, err);
}

int rt_host_pause(rt_host *h, const char *team, const char *id, kiln_error **err)
{
	struct rt_info in;
	bool paused;

	if (rt_host_get(h, team, id, &in, err) < 0)
		return -1;
	paused = strcmp(in.state, "paused") == 0;
	rt_info_free(&in);
	if (paused)
		return kiln_err(err, KILN_E_EXISTS, "sandbox %s is paused already", id);
	/* its plane goes: the agent connection does not survive QEMU's exit */
	rt_host_drop(h, id);
	return snap_sandbox_pause(id, NULL, err);
}

int rt_host_connect(rt_host *h, const char *team, const char *id, int64_t timeout_s, bool *resumed,
		    struct rt_info *out, kiln_error **err)
{
	struct rt_info in;

	*resumed = false;
	memset(out, 0, sizeof(*out));
	if (rt_host_get(h, team, id, &in, err) < 0)
		return -1;
	if (strcmp(in.state, "paused") == 0) {
		bool host_limit;
		pthread_mutex_lock(&h->mu);
		int rc = rt_host_check_limits_locked(h, team, in.cpus, in.memory_mib, &host_limit, err);
		pthread_mutex_unlock(&h->mu);
		if (rc < 0) {
			out->host_limit = host_limit;
			rt_info_free(&in);
			return -1;
		}
		if (snap_sandbox_resume(id, NULL, err) < 0 || snap_sandbox_set_timeout(id, timeout_s, err) < 0) {
			rt_info_free(&in);
			return -1;
		}
		*resumed = true;
	} else if (rt_host_set_timeout(h, team, id, timeout_s, true, err) < 0) {
		rt_info_free(&in);
		return -1;
	}
	rt_info_free(&in);
	return rt_host_get(h, team, id, out, err);
}
