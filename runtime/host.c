/* host.c — the sandbox service of one runtime host: the sandboxes it made
 * for teams (snapshots/ sandboxes labelled with their team and metadata, so
 * a restarted daemon finds them all again), the limits that refuse a create
 * before the host runs short, each sandbox's envd plane held while it runs,
 * and the background refill of warm pools.  No HTTP: service/ serves it. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "runtime/internal.h"
#include "snapshots/snapshots.h"

/* ---- identity of a sandbox ---- */

int rt_host_load_key(const char *path, unsigned char key[32], kiln_error **err)
{
	char *data = NULL;
	size_t len = 0;

	if (kiln_read_file(path, &data, &len, 64, NULL) == 0 && len == 32) {
		memcpy(key, data, 32);
		free(data);
		return 0;
	}
	free(data);
	if (getrandom(key, 32, 0) != 32)
		return kiln_err_errno(err, errno, "getrandom");
	return kiln_write_atomic(path, key, 32, 0600, err);
}

void rt_host_token(const rt_host *h, const char *id, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	HMAC(EVP_sha256(), h->key, sizeof(h->key), (const unsigned char *)id, strlen(id), md, &n);
	for (unsigned i = 0; i < 32 && i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	out[64] = '\0';
}

static bool token_ok(const rt_host *h, const char *id, const char *token)
{
	char want[65];
	unsigned char diff = 0;

	if (token == NULL || strlen(token) != 64)
		return false;
	rt_host_token(h, id, want);
	for (size_t i = 0; i < 64; i++)
		diff |= (unsigned char)(want[i] ^ token[i]);
	return diff == 0;
}

/* ---- what a sandbox is, from its snapshots/ record ---- */

void rt_info_free(struct rt_info *in)
{
	if (in == NULL)
		return;
	free(in->id);
	free(in->team);
	free(in->template_id);
	free(in->template_digest);
	free(in->state);
	free(in->started);
	json_decref(in->metadata);
	memset(in, 0, sizeof(*in));
}

static const char *label(const json_t *item, const char *key)
{
	return kiln_json_str(json_object_get(item, "labels"), key);
}

/* 1 with out filled when item is a sandbox of team (any team: NULL) that is
 * running or paused, else 0. */
static int info_from(const rt_host *h, const json_t *item, const char *team, struct rt_info *out)
{
	const char *state = kiln_json_str(item, "state"), *t = label(item, LABEL_TEAM), *key;
	json_t *labels = json_object_get(item, "labels"), *v;

	memset(out, 0, sizeof(*out));
	if (t == NULL || (team && strcmp(t, team) != 0) || state == NULL ||
	    (strcmp(state, "running") != 0 && strcmp(state, "paused") != 0))
		return 0;
	out->id = kiln_xstrdup(kiln_json_str(item, "id"));
	out->team = kiln_xstrdup(t);
	out->template_id = kiln_xstrdup(label(item, LABEL_TEMPLATE) ? label(item, LABEL_TEMPLATE) : "");
	out->template_digest = kiln_xstrdup(kiln_json_str(item, "template") ? kiln_json_str(item, "template") : "");
	out->state = kiln_xstrdup(state);
	out->started = kiln_xstrdup(kiln_json_str(item, "created") ? kiln_json_str(item, "created") : "");
	out->end_ms = kiln_json_int(item, "expires_ms", 0);
	out->cpus = (unsigned)kiln_json_int(item, "cpus", 0);
	out->memory_mib = (uint64_t)kiln_json_int(item, "memory_mib", 0);
	out->metadata = json_object();
	json_object_foreach(labels, key, v)
		if (strncmp(key, LABEL_META, strlen(LABEL_META)) == 0 && json_is_string(v))
			json_object_set(out->metadata, key + strlen(LABEL_META), v);
	rt_host_token(h, out->id, out->token);
	return 1;
}

int rt_host_list(rt_host *h, const char *team, struct rt_info **out, size_t *n, kiln_error **err)
{
	json_t *all = snap_sandbox_list(err), *item;
	size_t i;

	*out = NULL;
	*n = 0;
	if (all == NULL)
		return -1;
	*out = kiln_xcalloc(json_array_size(all) + 1, sizeof(**out));
	json_array_foreach(all, i, item)
		*n += (size_t)info_from(h, item, team, &(*out)[*n]);
	json_decref(all);
	return 0;
}

void rt_info_list_free(struct rt_info *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		rt_info_free(&v[i]);
	free(v);
}

int rt_host_get(rt_host *h, const char *team, const char *id, struct rt_info *out, kiln_error **err)
{
	kiln_error *e = NULL;
	json_t *item = snap_sandbox_info(id, &e);
	int found = item ? info_from(h, item, team, out) : 0;

	json_decref(item);
	if (item == NULL && e->kind != KILN_E_NOTFOUND) {
		*err = e;
		return -1;
	}
	kiln_error_free(e);
	if (!found)
		/* another team's sandbox is answered as one that does not exist */
		return kiln_err(err, KILN_E_NOTFOUND, "no sandbox '%.64s'", id);
	return 0;
}

/* ---- limits ---- */

struct usage {
	unsigned sandboxes, cpus;
	uint64_t memory_mib;
};

/* What the running sandboxes and the creates under way hold, on the host
 * and for team (lock held). */
static void usage_locked(rt_host *h, const char *team, struct usage *host, struct usage *mine)
{
	struct rt_info *v = NULL;
	size_t n = 0;
	kiln_error *e = NULL;

	memset(host, 0, sizeof(*host));
	memset(mine, 0, sizeof(*mine));
	if (rt_host_list(h, NULL, &v, &n, &e) < 0)
		kiln_error_free(e);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(v[i].state, "running") != 0)
			continue; /* a paused sandbox holds disk, not memory or CPUs */
		struct usage *u[2] = { host, strcmp(v[i].team, team) == 0 ? mine : NULL };
		for (int k = 0; k < 2; k++)
			if (u[k]) {
				u[k]->sandboxes++;
				u[k]->cpus += v[i].cpus;
				u[k]->memory_mib += v[i].memory_mib;
			}
	}
	rt_info_list_free(v, n);
	for (struct rt_pending *p = h->pending; p; p = p->next) {
		struct usage *u[2] = { host, strcmp(p->team, team) == 0 ? mine : NULL };
		for (int k = 0; k < 2; k++)
			if (u[k]) {
				u[k]->sandboxes++;
				u[k]->cpus += p->cpus;
				u[k]->memory_mib += p->memory_mib;
			}
	}
}

void rt_host_team_usage(rt_host *h, const char *team, struct rt_limits *used, struct rt_limits *limit)
{
	struct usage host, mine;

	pthread_mutex_lock(&h->mu);
	*limit = h->cfg.team;
	if (h->cfg.team_limits)
		h->cfg.team_limits(h->cfg.limits_ud, team, limit);
	usage_locked(h, team, &host, &mine);
	pthread_mutex_unlock(&h->mu);
	*used = (struct rt_limits){ .sandboxes = mine.sandboxes, .memory_mib = mine.memory_mib, .vcpus = mine.cpus };
}

/* Refuse a create that would pass a limit, naming it (KILN_E_LIMIT, with
 * *host_limit telling the host's from the team's: 503 and 429). */
int rt_host_check_limits_locked(rt_host *h, const char *team, unsigned cpus, uint64_t mem, bool *host_limit,
			       kiln_error **err)
{
	const struct rt_limits *hl = &h->cfg.host;
	struct rt_limits own = h->cfg.team, *tl = &own;
	struct usage host, mine;

	if (h->cfg.team_limits)
		h->cfg.team_limits(h->cfg.limits_ud, team, &own);

	usage_locked(h, team, &host, &mine);
	*host_limit = true;
	if (hl->sandboxes && host.sandboxes + 1 > hl->sandboxes)
		return kiln_err(err, KILN_E_LIMIT, "the host runs %u sandboxes, its limit (sandboxes %u)",
				host.sandboxes, hl->sandboxes);
	if (hl->memory_mib && host.memory_mib + mem > hl->memory_mib)
		return kiln_err(err, KILN_E_LIMIT,
				"the host's sandboxes hold %llu MiB and this one needs %llu: over its limit (memory %llu MiB)",
				(unsigned long long)host.memory_mib, (unsigned long long)mem,
				(unsigned long long)hl->memory_mib);
	if (hl->vcpus && host.cpus + cpus > hl->vcpus)
		return kiln_err(err, KILN_E_LIMIT, "the host's sandboxes hold %u vCPUs and this one needs %u: over its limit (vcpus %u)",
				host.cpus, cpus, hl->vcpus);
	*host_limit = false;
	if (tl->sandboxes && mine.sandboxes + 1 > tl->sandboxes)
		return kiln_err(err, KILN_E_LIMIT, "team '%s' runs %u sandboxes, its limit (sandboxes %u per team)", team,
				mine.sandboxes, tl->sandboxes);
	if (tl->memory_mib && mine.memory_mib + mem > tl->memory_mib)
		return kiln_err(err, KILN_E_LIMIT,
				"team '%s' holds %llu MiB and this sandbox needs %llu: over its limit (memory %llu MiB per team)",
				team, (unsigned long long)mine.memory_mib, (unsigned long long)mem,
				(unsigned long long)tl->memory_mib);
	if (tl->vcpus && mine.cpus + cpus > tl->vcpus)
		return kiln_err(err, KILN_E_LIMIT, "team '%s' holds %u vCPUs and this sandbox needs %u: over its limit (vcpus %u per team)",
				team, mine.cpus, cpus, tl->vcpus);
	return 0;
}

/* ---- create ---- */

static int check_kv(const char *what, const char *k, const char *v, kiln_error **err)
{
	if (k == NULL || *k == '\0' || strlen(k) > 256 || strchr(k, '='))
		return kiln_err(err, KILN_E_INVALID, "%s key '%.64s': want 1-256 characters without '='", what, k ? k : "");
	if (v == NULL || strlen(v) > RT_MAX_STRING)
		return kiln_err(err, KILN_E_INVALID, "%s '%.64s': the value is over %u bytes", what, k, RT_MAX_STRING);
	return 0;
}

void rt_host_queue_refill(rt_host *h, const char *ref)
{
	if (h->cfg.pool_size <= 0 || !h->refill_started)
		return;
	pthread_mutex_lock(&h->mu);
	for (size_t i = 0; i < h->refill_q.n; i++)
		if (strcmp(h->refill_q.v[i], ref) == 0)
			goto out;
	kiln_strv_push(&h->refill_q, ref);
	pthread_cond_signal(&h->refill_cv);
out:
	pthread_mutex_unlock(&h->mu);
}

static void sweep_broken(rt_host *h);

int rt_host_create(rt_host *h, const struct rt_create *c, struct rt_info *out, kiln_error **err)
{
	snap_template *t = NULL;
	struct rt_pending *p = NULL, **pp;
	kiln_strv labels = KILN_STRV_INIT;
	struct snap_create_opts co = { 0 };
	guest_conn *conn = NULL;
	char *id = NULL;
	const char *k;
	json_t *v;
	bool host_limit = false;
	int rc = -1;

	double t0 = kiln_now_ms(), t_open, t_limits, t_made;

	memset(out, 0, sizeof(*out));
	sweep_broken(h);
	if (c->timeout_s < 0)
		return kiln_err(err, KILN_E_INVALID, "timeout: want a number of seconds above 0");
	json_object_foreach(c->metadata, k, v) {
		if (!json_is_string(v))
			return kiln_err(err, KILN_E_INVALID, "metadata '%.64s': want a string", k);
		if (check_kv("metadata", k, json_string_value(v), err) < 0)
			return -1;
	}
	if (json_object_size(c->metadata) > 64)
		return kiln_err(err, KILN_E_INVALID, "metadata: at most 64 keys");
	if (h->cfg.ensure_template && h->cfg.ensure_template(h->cfg.ud, c->template_ref, err) < 0)
		return -1;
	if ((t = snap_template_open(c->template_ref, err)) == NULL)
		return -1;
	t_open = kiln_now_ms();
	const struct snap_config *cfg = snap_template_config(t);
	unsigned cpus = cfg->cpus ? cfg->cpus : 1;
	uint64_t mem = cfg->memory_mib ? cfg->memory_mib : 512;

	pthread_mutex_lock(&h->mu);
	if (rt_host_check_limits_locked(h, c->team, cpus, mem, &host_limit, err) < 0) {
		pthread_mutex_unlock(&h->mu);
		out->host_limit = host_limit;
		goto done;
	}
	t_limits = kiln_now_ms();
	p = kiln_xcalloc(1, sizeof(*p));
	p->team = kiln_xstrdup(c->team);
	p->cpus = cpus;
	p->memory_mib = mem;
	p->next = h->pending;
	h->pending = p;
	pthread_mutex_unlock(&h->mu);

	kiln_strv_push_owned(&labels, kiln_xasprintf(LABEL_TEAM "=%s", c->team));
	kiln_strv_push_owned(&labels, kiln_xasprintf(LABEL_TEMPLATE "=%s", c->template_id ? c->template_id : c->template_ref));
	json_object_foreach(c->metadata, k, v)
		kiln_strv_push_owned(&labels, kiln_xasprintf(LABEL_META "%s=%s", k, json_string_value(v)));
	co.env = c->env;
	co.labels = (const char *const *)labels.v;
	co.timeout_s = c->timeout_s;
	co.identity_unawaited = true;
	id = snap_sandbox_create_with(c->template_ref, &co, &out->stats, &conn, err);
	t_made = kiln_now_ms();

	pthread_mutex_lock(&h->mu);
	for (pp = &h->pending; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	pthread_mutex_unlock(&h->mu);
	free(p->team);
	free(p);
	if (id == NULL)
		goto done;
	/* the create's agent connection becomes the envd plane: no second handshake */
	if (conn && rt_host_adopt(h, id, conn, err) < 0) {
		snap_sandbox_kill(id, NULL);
		goto done;
	}
	struct snap_create_stats st = out->stats;
	if (rt_host_get(h, c->team, id, out, err) < 0)
		goto done;
	out->stats = st;
	rt_host_queue_refill(h, c->template_ref);
	kiln_debug("sandbox %s: made in %.1f ms (template %.1f, limits %.1f, restore %.1f%s [check %.1f jail %.1f spawn %.1f load %.1f agent %.1f setup %.1f], plane %.1f)", id,
		   kiln_now_ms() - t0, t_open - t0, t_limits - t_open, t_made - t_limits,
		   out->stats.pooled ? " pooled" : "", out->stats.check_ms, out->stats.jail_ms, out->stats.spawn_ms,
		   out->stats.load_ms, out->stats.agent_ms, out->stats.setup_ms, kiln_now_ms() - t_made);
	rc = 0;
done:
	free(id);
	kiln_strv_free(&labels);
	snap_template_free(t);
	return rc;
}

/* ---- each sandbox's envd plane ---- */

static rt_sandbox *plane_new(const char *id, guest_conn *conn, kiln_error **err)
{
	json_t *info = snap_sandbox_info(id, err), *e;
	kiln_strv env = KILN_STRV_INIT;
	rt_sandbox *sb;
	size_t i;

	if (info == NULL) {
		guest_close(conn);
		return NULL;
	}
	json_array_foreach(json_object_get(info, "env"), i, e)
		if (json_is_string(e))
			kiln_strv_push(&env, json_string_value(e));
	sb = rt_sandbox_new(conn, (const char *const *)env.v, kiln_json_str(info, "user"), kiln_json_str(info, "workdir"),
			    err);
	kiln_strv_free(&env);
	json_decref(info);
	return sb;
}

int rt_host_adopt(rt_host *h, const char *id, guest_conn *conn, kiln_error **err)
{
	rt_sandbox *sb = plane_new(id, conn, err);
	struct rt_entry *en;

	if (sb == NULL)
		return -1;
	en = kiln_xcalloc(1, sizeof(*en));
	en->id = kiln_xstrdup(id);
	en->sb = sb;
	pthread_mutex_lock(&h->mu);
	en->next = h->live;
	h->live = en;
	pthread_mutex_unlock(&h->mu);
	return 0;
}

void rt_entry_free(struct rt_entry *en)
{
	rt_sandbox_free(en->sb);
	free(en->id);
	free(en);
}

/* Unlink id's entry (lock held): returned to be freed now, or kept on the
 * gone list until its last user releases it. */
static struct rt_entry *drop_locked(rt_host *h, const char *id)
{
	for (struct rt_entry **pp = &h->live; *pp; pp = &(*pp)->next) {
		struct rt_entry *en = *pp;
		if (strcmp(en->id, id) == 0) {
			*pp = en->next;
			en->gone = true;
			if (en->refs == 0)
				return en;
			en->next = h->gone;
			h->gone = en;
			return NULL;
		}
	}
	return NULL;
}

void rt_host_drop(rt_host *h, const char *id)
{
	pthread_mutex_lock(&h->mu);
	struct rt_entry *en = drop_locked(h, id);
	pthread_mutex_unlock(&h->mu);
	if (en)
		rt_entry_free(en);
}

static bool plane_broken(rt_sandbox *sb)
{
	pthread_mutex_lock(&sb->mu);
	bool b = sb->broken;
	pthread_mutex_unlock(&sb->mu);
	return b;
}

/* Planes whose connection failed (the sandbox was killed by its timeout,
 * its QEMU died): dropped, so their fds go and a new one is made. */
static void sweep_broken(rt_host *h)
{
	struct rt_entry *free_list = NULL;

	pthread_mutex_lock(&h->mu);
	for (struct rt_entry *en = h->live, *next; en; en = next) {
		next = en->next;
		if (plane_broken(en->sb)) {
			struct rt_entry *f = drop_locked(h, en->id);
			if (f) {
				f->next = free_list;
				free_list = f;
			}
		}
	}
	pthread_mutex_unlock(&h->mu);
	while (free_list) {
		struct rt_entry *f = free_list;
		free_list = f->next;
		rt_entry_free(f);
	}
}

rt_sandbox *rt_host_envd(rt_host *h, const char *id, const char *token, kiln_error **err)
{
	if (id == NULL || strlen(id) > 64 || !token_ok(h, id, token)) {
		kiln_err(err, KILN_E_NOTFOUND, "the sandbox was not found");
		return NULL;
	}
	return rt_host_sandbox(h, id, err);
}

rt_sandbox *rt_host_sandbox(rt_host *h, const char *id, kiln_error **err)
{
	struct rt_entry *en;
	kiln_error *e = NULL;
	json_t *info;
	const char *state;
	guest_conn *c;

	if (id == NULL || strlen(id) > 64 || strspn(id, "0123456789abcdefghijklmnopqrstuvwxyz") != strlen(id))
		goto missing;
	sweep_broken(h);
	for (int tries = 0; tries < 2; tries++) {
		pthread_mutex_lock(&h->mu);
		for (en = h->live; en; en = en->next)
			if (strcmp(en->id, id) == 0) {
				en->refs++;
				pthread_mutex_unlock(&h->mu);
				return en->sb;
			}
		pthread_mutex_unlock(&h->mu);
		if (tries)
			break;
		/* made before this daemon started, or resumed: connect now */
		info = snap_sandbox_info(id, &e);
		state = info ? kiln_json_str(info, "state") : NULL;
		if (state == NULL || strcmp(state, "running") != 0 || label(info, LABEL_TEAM) == NULL) {
			json_decref(info);
			kiln_error_free(e);
			goto missing;
		}
		json_decref(info);
		pthread_mutex_lock(&h->connect_mu); /* one connection per sandbox: a second HELLO ends the first's processes */
		pthread_mutex_lock(&h->mu);
		for (en = h->live; en && strcmp(en->id, id) != 0; en = en->next)
			;
		pthread_mutex_unlock(&h->mu);
		if (en == NULL) {
			c = snap_sandbox_connect(id, 10000, err);
			if (c == NULL || rt_host_adopt(h, id, c, err) < 0) {
				pthread_mutex_unlock(&h->connect_mu);
				return NULL;
			}
		}
		pthread_mutex_unlock(&h->connect_mu);
	}
missing:
	kiln_err(err, KILN_E_NOTFOUND, "the sandbox was not found");
	return NULL;
}

void rt_host_release(rt_host *h, rt_sandbox *sb)
{
	struct rt_entry *en, **pp, *done = NULL;

	if (sb == NULL)
		return;
	pthread_mutex_lock(&h->mu);
	for (en = h->live; en; en = en->next)
		if (en->sb == sb) {
			en->refs--;
			break;
		}
	if (en == NULL)
		for (pp = &h->gone; *pp; pp = &(*pp)->next)
			if ((*pp)->sb == sb) {
				if (--(*pp)->refs == 0) {
					done = *pp;
					*pp = done->next;
				}
				break;
			}
	pthread_mutex_unlock(&h->mu);
	if (done)
		rt_entry_free(done);
}
