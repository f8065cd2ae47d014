/* sandbox_api.c — the sandbox service on `kiln serve --sandboxes`: its one
 * route set on the registry's listener (E2B's control plane by path, envd's
 * plane by path or Host), and the control plane itself: create, list, get,
 * kill, timeout, connect/resume and pause, with E2B's JSON shapes and
 * errors; auth by a token with the sandbox action (X-API-Key). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "service/sandbox_api.h"

/* ---- routing ---- */

/* /v2/sandboxes/ID/connect (SDK 2.51's connect) without taking an OCI
 * repository named "sandboxes": no registry route ends that way. */
static bool v2_connect(const char *p)
{
	const char *id = p + 14, *slash;

	return strncmp(p, "/v2/sandboxes/", 14) == 0 && (slash = strchr(id, '/')) != NULL && slash > id &&
	       strcmp(slash, "/connect") == 0;
}

static bool is_control(const char *p)
{
	return strcmp(p, "/sandboxes") == 0 || strncmp(p, "/sandboxes/", 11) == 0 || strcmp(p, "/v2/sandboxes") == 0 ||
	       v2_connect(p);
}

static bool match(void *ud, reg_req *r)
{
	struct svc_sandboxes *s = ud;
	char *id = NULL;
	bool envd = sbx_envd_match(s, r, &id);

	free(id);
	return envd || is_control(reg_req_path(r));
}

static void begin(void *ud, reg_req *r)
{
	struct svc_sandboxes *s = ud;
	struct sbx_req *q = kiln_xcalloc(1, sizeof(*q));
	const char *cl = reg_req_header(r, "Content-Length");

	q->plane = sbx_envd_match(s, r, &q->sandbox) ? SBX_ENVD : SBX_CONTROL;
	reg_req_set_state(r, q);
	if (!svc_body_start(&q->body, r,
			    q->plane == SBX_CONTROL			     ? SBX_MAX_CONTROL_BODY
			    : strcmp(reg_req_path(r), "/files") == 0 || sbx_port_of(s, r) ? s->max_upload
								     : RT_MAX_MESSAGE + RT_ENVELOPE_HEADER))
		e2b_reply_error(r, 413, "the request body is %s bytes, over the limit of %llu", cl,
				(unsigned long long)q->body.max);
}

static int body(void *ud, reg_req *r, const char *data, size_t len)
{
	struct sbx_req *q = reg_req_state(r);

	svc_body_add(&q->body, data, len);
	return 0;
}

static void end(void *ud, reg_req *r)
{
	struct sbx_req *q = reg_req_state(r);

	if (q->body.over) {
		char msg[96];
		return e2b_reply_error(r, 413, "%s", svc_body_limit_msg(&q->body, msg, sizeof(msg)));
	}
	if (q->plane == SBX_ENVD)
		sbx_envd_serve(ud, r, q);
	else
		sbx_control_serve(ud, r, q);
}

static void done(void *ud, reg_req *r)
{
	struct sbx_req *q = reg_req_state(r);

	if (q) {
		svc_body_free(&q->body);
		free(q->sandbox);
		free(q);
	}
}

/* ---- the control plane ---- */

static json_t *time_ms(int64_t ms)
{
	return ms > 0 ? e2b_json_time(ms / 1000) : json_string("9999-12-31T23:59:59Z");
}

/* E2B's Sandbox (create and connect answers). */
static json_t *sandbox_json(struct svc_sandboxes *s, const struct rt_info *in)
{
	return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:n}", "templateID", in->template_id, "sandboxID", in->id,
			 "clientID", SBX_CLIENT_ID, "envdVersion", SBX_ENVD_VERSION, "envdAccessToken", in->token,
			 "domain", s->domain, "trafficAccessToken");
}

/* E2B's ListedSandbox, and with detail its SandboxDetail. */
static json_t *listed_json(struct svc_sandboxes *s, const struct rt_info *in, bool detail)
{
	json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:o,s:i,s:I,s:i,s:s,s:s,s:O}", "templateID", in->template_id,
			      "sandboxID", in->id, "clientID", SBX_CLIENT_ID, "startedAt", in->started, "endAt",
			      time_ms(in->end_ms), "cpuCount", (int)(in->cpus ? in->cpus : 1), "memoryMB",
			      (json_int_t)in->memory_mib, "diskSizeMB", 0, "state", in->state, "envdVersion",
			      SBX_ENVD_VERSION, "metadata", in->metadata);
	if (detail) {
		json_object_set_new(j, "envdAccessToken", json_string(in->token));
		json_object_set_new(j, "domain", json_string(s->domain));
	}
	return j;
}

/* A failure from rt_host: its kind picks E2B's status. */
static void reply_host_err(reg_req *r, kiln_error **errp, bool host_limit, const char *what)
{
	kiln_error *err = *errp;

	/* a limit of running sandboxes is a rate (429), or the host's (503) */
	unsigned st = err->kind == KILN_E_LIMIT ? (host_limit ? 503 : 429) : svc_err_status(err);
	char *where = kiln_xasprintf("sandboxes: %s", what);

	e2b_reply_error(r, st, "%s", svc_err_reply(err, st, where));
	free(where);
	kiln_error_clear(errp);
}

static int int_of(const json_t *body, const char *key, int64_t lo, int64_t hi, int64_t fallback, int64_t *out,
		  reg_req *r)
{
	const json_t *v = json_object_get(body, key);

	*out = fallback;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
		e2b_reply_error(r, 400, "%s: want a whole number from %lld to %lld", key, (long long)lo, (long long)hi);
		return -1;
	}
	*out = json_integer_value(v);
	return 0;
}

/* The template reference templateID names for team: the team's E2B
 * template (built here), else a kiln template reference; one on this
 * server's registry is the caller's only with pull on its namespace. */
static char *template_ref(struct svc_sandboxes *s, reg_req *r, const char *team, const char *tid, kiln_error **err)
{
	char *repo = NULL, *ref = NULL;
	struct kiln_ref kr = { 0 };
	int found = e2b_sandbox_template(s->templates, team, tid, &repo, err);

	if (found < 0)
		return NULL;
	if (found)
		ref = kiln_xasprintf("%s/%s", s->self, repo);
	else if (kiln_ref_parse(tid, &kr, err) < 0)
		return NULL;
	else if (kr.host && strcmp(kr.host, s->self) == 0) {
		char *ns = kiln_xstrndup(kr.name, strcspn(kr.name, "/"));
		if (!reg_req_allows(r, ns, REG_PULL))
			kiln_err(err, KILN_E_NOTFOUND, "templateID \"%.200s\": no such template", tid);
		else
			ref = kiln_xstrdup(tid);
		free(ns);
	} else {
		ref = kiln_xstrdup(tid);
	}
	kiln_ref_free(&kr);
	free(repo);
	return ref;
}

/* ---- /metrics ---- */

static void count_start(struct svc_sandboxes *s, const struct snap_create_stats *st)
{
	__atomic_fetch_add(&s->metrics.starts[st->pooled], 1, __ATOMIC_RELAXED);
	reg_histogram_observe(&s->metrics.start[st->pooled], st->total_ms / 1000.0);
	if (!st->pooled && s->pool_size > 0)
		__atomic_fetch_add(&s->metrics.misses, 1, __ATOMIC_RELAXED);
}

static void count_refusal(struct svc_sandboxes *s, const kiln_error *err, bool host_limit)
{
	uint64_t *c = err->kind == KILN_E_LIMIT	   ? &s->metrics.refused[host_limit]
		      : err->kind == KILN_E_NOTFOUND ? &s->metrics.refused[2]
						     : &s->metrics.failed;
	__atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

static uint64_t load(const uint64_t *c)
{
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}

/* The teams' sandboxes by state, and the warm pools (every pooled sandbox on
 * this host, by template), as they are at the scrape. */
static void state_families(struct svc_sandboxes *s, kiln_buf *out)
{
	struct rt_info *v = NULL;
	size_t n = 0;
	kiln_error *err = NULL;
	json_t *all, *it;
	size_t i;

	reg_metric_head(out, "kiln_sandboxes", "gauge", "Teams' sandboxes on this host, by team and state.");
	if (rt_host_list(s->host, NULL, &v, &n, &err) < 0) {
		kiln_warn("metrics: sandboxes: %s", kiln_error_message(err));
		kiln_error_clear(&err);
	}
	for (i = 0; i < n; i++) {
		size_t same = 1;
		bool seen = false;
		for (size_t k = 0; k < i && !seen; k++)
			seen = strcmp(v[k].team, v[i].team) == 0 && strcmp(v[k].state, v[i].state) == 0;
		if (seen)
			continue;
		for (size_t k = i + 1; k < n; k++)
			same += strcmp(v[k].team, v[i].team) == 0 && strcmp(v[k].state, v[i].state) == 0;
		kiln_buf_addf(out, "kiln_sandboxes{team=\"");
		reg_metric_label(out, v[i].team);
		kiln_buf_addf(out, "\",state=\"%s\"} %zu\n", v[i].state, same);
	}
	rt_info_list_free(v, n);
	reg_metric_head(out, "kiln_sandbox_pool_ready", "gauge",
			"Restored, warmed-up and paused sandboxes waiting to be claimed, by template digest.");
	if ((all = snap_sandbox_list(&err)) == NULL) {
		kiln_warn("metrics: pools: %s", kiln_error_message(err));
		kiln_error_clear(&err);
		return;
	}
	json_t *per = json_object();
	json_array_foreach(all, i, it) {
		const char *t = kiln_json_str(it, "template");
		if (t && strcmp(kiln_json_str(it, "state") ?: "", "pooled") == 0)
			json_object_set_new(per, t, json_integer(json_integer_value(json_object_get(per, t)) + 1));
	}
	const char *k;
	json_object_foreach(per, k, it) {
		kiln_buf_addf(out, "kiln_sandbox_pool_ready{template=\"");
		reg_metric_label(out, k);
		kiln_buf_addf(out, "\"} %lld\n", (long long)json_integer_value(it));
	}
	json_decref(per);
	json_decref(all);
}

static void sbx_metrics(void *ud, kiln_buf *out)
{
	struct svc_sandboxes *s = ud;
	static const char *const source[2] = { "restore", "pool" };
	static const char *const why[3] = { "team_limit", "host_limit", "unknown_template" };

	state_families(s, out);
	reg_metric_counters(out, "kiln_sandbox_starts_total",
			    "Sandboxes created through the API, by source (a full restore, or claimed from a pool).", "source",
			    source, s->metrics.starts, 2);
	reg_metric_histograms(out, "kiln_sandbox_start_duration_seconds",
			      "From a create's request to a sandbox that answers, by source.", "source", source,
			      s->metrics.start, 2);
	reg_metric_head(out, "kiln_sandbox_pool_misses_total", "counter",
			"Creates a full restore served while pools are kept (the template's pool was empty or not made yet).");
	kiln_buf_addf(out, "kiln_sandbox_pool_misses_total %llu\n", (unsigned long long)load(&s->metrics.misses));
	reg_metric_head(out, "kiln_sandbox_pool_size", "gauge", "Warm sandboxes kept per template once it is used.");
	kiln_buf_addf(out, "kiln_sandbox_pool_size %d\n", s->pool_size);
	reg_metric_counters(out, "kiln_sandbox_creates_refused_total",
			    "Creates refused, by reason (a team's or the host's limit, an unknown template).", "reason", why,
			    s->metrics.refused, 3);
	reg_metric_head(out, "kiln_sandbox_creates_failed_total", "counter", "Creates that failed for another reason.");
	kiln_buf_addf(out, "kiln_sandbox_creates_failed_total %llu\n", (unsigned long long)load(&s->metrics.failed));
}

static void sbx_h_create(struct svc_sandboxes *s, reg_req *r, const char *team, const char *id, json_t *body, int arg)
{
	const char *tid = kiln_json_str(body, "templateID");
	json_t *meta = json_object_get(body, "metadata"), *envs = json_object_get(body, "envVars"), *v;
	kiln_strv env = KILN_STRV_INIT;
	struct rt_info in;
	kiln_error *err = NULL;
	char *ref;
	const char *k;
	int64_t timeout;

	if (tid == NULL || *tid == '\0' || strlen(tid) > 512)
		return e2b_reply_error(r, 400, "templateID: want a template name or reference of 1-512 characters");
	if (int_of(body, "timeout", 1, 7 * 86400, SNAP_DEFAULT_TIMEOUT_S, &timeout, r) < 0)
		return;
	if ((meta && !json_is_null(meta) && !json_is_object(meta)) || (envs && !json_is_null(envs) && !json_is_object(envs)))
		return e2b_reply_error(r, 400, "%s: want an object of strings", json_is_object(meta) ? "envVars" : "metadata");
	json_object_foreach(envs, k, v) {
		if (!json_is_string(v) || *k == '\0' || strchr(k, '=') || strlen(k) > 256) {
			kiln_strv_free(&env);
			return e2b_reply_error(r, 400, "envVars \"%.64s\": want a name without '=' and a string", k);
		}
		kiln_strv_push_owned(&env, kiln_xasprintf("%s=%s", k, json_string_value(v)));
	}
	if ((ref = template_ref(s, r, team, tid, &err)) == NULL) {
		kiln_strv_free(&env);
		return reply_host_err(r, &err, false, "create");
	}
	struct rt_create c = { team, ref, tid, (const char *const *)env.v, json_is_object(meta) ? meta : NULL, timeout };
	if (rt_host_create(s->host, &c, &in, &err) < 0) {
		bool hl = in.host_limit;
		count_refusal(s, err, hl);
		if (err->kind == KILN_E_NOTFOUND)
			kiln_error_wrap(&err, "templateID \"%.200s\"", tid);
		reply_host_err(r, &err, hl, "create");
	} else {
		count_start(s, &in.stats);
		e2b_reply_json(r, 201, sandbox_json(s, &in));
	}
	rt_info_free(&in);
	kiln_strv_free(&env);
	free(ref);
}

/* metadata=k%3Dv%26k2%3Dv2: one query value (unescaped once by the
 * server) of pairs whose keys and values are escaped again. */
static char *unescape(const char *s)
{
	int n = 0;
	char *u = curl_easy_unescape(NULL, s, 0, &n), *out;

	out = u && (size_t)n == strlen(u) ? kiln_xstrdup(u) : NULL; /* no NUL bytes in a key or value */
	curl_free(u);
	return out;
}

static bool metadata_match(const json_t *md, const char *q)
{
	char *copy = kiln_xstrdup(q), *save = NULL;
	bool ok = true;

	for (char *kv = strtok_r(copy, "&", &save); kv && ok; kv = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(kv, '=');
		if (eq)
			*eq++ = '\0';
		char *k = unescape(kv), *v = eq ? unescape(eq) : NULL;
		const char *have = k ? kiln_json_str(md, k) : NULL;
		ok = have && (eq == NULL || (v && strcmp(have, v) == 0));
		free(k);
		free(v);
	}
	free(copy);
	return ok;
}

/* Whether the comma-separated list has item. */
static bool csv_has(const char *list, const char *item)
{
	size_t n = strlen(item);

	for (const char *p = list; *p;) {
		size_t l = strcspn(p, ",");
		if (l == n && strncmp(p, item, n) == 0)
			return true;
		p += l + (p[l] == ',');
	}
	return false;
}

/* Newest first; the id breaks ties so that paging is stable. */
static int by_started_desc(const void *a, const void *b)
{
	const struct rt_info *x = a, *y = b;
	int c = strcmp(y->started, x->started);
	return c ? c : strcmp(x->id, y->id);
}

static void sbx_h_list(struct svc_sandboxes *s, reg_req *r, const char *team, const char *id, json_t *body, int v2)
{
	const char *state = reg_query(r, "state"), *md = reg_query(r, "metadata"), *next = reg_query(r, "nextToken");
	const char *lim = reg_query(r, "limit"), *order = reg_query(r, "order");
	struct rt_info *v = NULL;
	kiln_error *err = NULL;
	size_t n = 0, shown = 0, limit = 100;
	char *more = NULL;
	json_t *out;

	if (lim && (strspn(lim, "0123456789") != strlen(lim) || strlen(lim) > 3 || atoi(lim) < 1 || atoi(lim) > 100))
		return e2b_reply_error(r, 400, "limit: want a number from 1 to 100");
	if (order && strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0)
		return e2b_reply_error(r, 400, "order: want asc or desc");
	if (state)
		for (const char *p = state; *p;) {
			size_t l = strcspn(p, ",");
			if (!((l == 7 && !strncmp(p, "running", 7)) || (l == 6 && !strncmp(p, "paused", 6))))
				return e2b_reply_error(r, 400, "state: want running, paused or both (comma-separated)");
			p += l + (p[l] == ',');
		}
	if (lim)
		limit = (size_t)atoi(lim);
	if (rt_host_list(s->host, team, &v, &n, &err) < 0)
		return reply_host_err(r, &err, false, "list");
	qsort(v, n, sizeof(*v), by_started_desc);
	out = json_array();
	for (size_t k = 0; k < n; k++) {
		size_t i = order && strcmp(order, "asc") == 0 ? n - 1 - k : k;
		if ((state && !csv_has(state, v[i].state)) || (!v2 && strcmp(v[i].state, "running") != 0) ||
		    (md && !metadata_match(v[i].metadata, md)))
			continue;
		/* the token is the id the next page starts at */
		if (next && *next) {
			if (strcmp(v[i].id, next) != 0)
				continue;
			next = NULL;
		}
		if (shown == limit) {
			more = kiln_xstrdup(v[i].id);
			break;
		}
		json_array_append_new(out, listed_json(s, &v[i], false));
		shown++;
	}
	rt_info_list_free(v, n);
	e2b_reply_json(r, 200, out);
	if (more)
		reg_header(r, "X-Next-Token", more);
	free(more);
}

static void sbx_h_get(struct svc_sandboxes *s, reg_req *r, const char *team, const char *id, json_t *body, int arg)
{
	struct rt_info in;
	kiln_error *err = NULL;

	if (rt_host_get(s->host, team, id, &in, &err) < 0)
		return reply_host_err(r, &err, false, "get");
	e2b_reply_json(r, 200, listed_json(s, &in, true));
	rt_info_free(&in);
}

static void sbx_h_connect(struct svc_sandboxes *s, reg_req *r, const char *team, const char *id, json_t *body,
			  int legacy_resume)
{
	struct rt_info in, now;
	kiln_error *err = NULL;
	int64_t timeout;
	bool resumed;

	if (int_of(body, "timeout", 0, 7 * 86400, SNAP_DEFAULT_TIMEOUT_S, &timeout, r) < 0)
		return;
	if (legacy_resume) {
		/* E2B's /resume: a running sandbox is a conflict */
		if (rt_host_get(s->host, team, id, &now, &err) < 0)
			return reply_host_err(r, &err, false, "resume");
		bool running = strcmp(now.state, "running") == 0;
		rt_info_free(&now);
		if (running)
			return e2b_reply_error(r, 409, "sandbox %s is running already", id);
	}
	if (rt_host_connect(s->host, team, id, timeout, &resumed, &in, &err) < 0) {
		bool hl = in.host_limit;
		rt_info_free(&in);
		return reply_host_err(r, &err, hl, "connect");
	}
	e2b_reply_json(r, resumed ? 201 : 200, sandbox_json(s, &in));
	rt_info_free(&in);
}

/* 204 when rc says done, else the host's error */
static void reply_done(reg_req *r, int rc, kiln_error **err, const char *what)
{
	if (rc < 0)
		reply_host_err(r, err, false, what);
	else
		reg_respond(r, 204, NULL, 0, NULL);
}

static void sbx_h_kill(struct svc_sandboxes *s, reg_req *r, const char *team, const char *id, json_t *body, int arg)
{
	kiln_error *err = NULL;

	reply_done(r, rt_host_kill(s->host, team, id, &err), &err, "kill");
}

static void sbx_h_timeout(struct svc_sandboxes *s, reg_req *r, const char *team, const char *id, json_t *body, int arg)
{
	kiln_error *err = NULL;
	int64_t t;

	if (json_object_get(body, "timeout") == NULL)
		e2b_reply_error(r, 400, "timeout: required (seconds)");
	else if (int_of(body, "timeout", 0, 7 * 86400, 0, &t, r) == 0)
		reply_done(r, rt_host_set_timeout(s->host, team, id, t, false, &err), &err, "timeout");
}

static void sbx_h_pause(struct svc_sandboxes *s, reg_req *r, const char *team, const char *id, json_t *body, int arg)
{
	kiln_error *err = NULL;

	reply_done(r, rt_host_pause(s->host, team, id, &err), &err, "pause");
}

/* E2B's SandboxMetric[]: one sample, taken now from the guest (E2B keeps a
 * series every 5 s; kiln samples on demand).  A paused sandbox has none. */
static void sbx_h_metrics(struct svc_sandboxes *s, reg_req *r, const char *team, const char *id, json_t *body,
			  int arg)
{
	struct rt_info in;
	struct rt_metrics m;
	kiln_error *err = NULL;
	rt_sandbox *sb;
	time_t now = time(NULL);

	if (rt_host_get(s->host, team, id, &in, &err) < 0)
		return reply_host_err(r, &err, false, "metrics");
	rt_info_free(&in);
	if ((sb = rt_host_sandbox(s->host, id, &err)) == NULL) {
		kiln_error_free(err);
		return e2b_reply_json(r, 200, json_array());
	}
	int rc = rt_sandbox_metrics(sb, &m, &err);
	rt_host_release(s->host, sb);
	if (rc < 0) {
		e2b_reply_error(r, 502, "metrics of sandbox %s: %s", id, kiln_error_message(err));
		kiln_error_free(err);
		return;
	}
	e2b_reply_json(r, 200,
		       json_pack("[{s:o,s:I,s:I,s:f,s:I,s:I,s:I,s:I,s:I}]", "timestamp", e2b_json_time(now), "timestampUnix",
				 (json_int_t)now, "cpuCount", (json_int_t)m.cpus, "cpuUsedPct", m.cpu_pct, "memUsed",
				 (json_int_t)m.mem_used, "memTotal", (json_int_t)m.mem_total, "memCache",
				 (json_int_t)m.mem_cache, "diskUsed", (json_int_t)m.disk_used, "diskTotal",
				 (json_int_t)m.disk_total));
}

static void sbx_h_unimplemented(struct svc_sandboxes *s, reg_req *r, const char *team, const char *id, json_t *body,
				int arg)
{
	e2b_reply_error(r, 501, "%s %s: not implemented by kiln (docs/sandbox-api.md)", reg_req_method(r), reg_req_path(r));
}

/* E2B's control plane; a POST's body is a JSON object (none: {}). */
struct sbx_route {
	struct svc_route rt;
	void (*h)(struct svc_sandboxes *s, reg_req *r, const char *team, const char *id, json_t *body, int arg);
	int arg;
};

static const struct sbx_route CONTROL[] = {
	{ { "POST", "/sandboxes" }, sbx_h_create, 0 },
	{ { "POST", "/v2/sandboxes" }, sbx_h_create, 0 },
	{ { "GET", "/sandboxes" }, sbx_h_list, 0 },
	{ { "GET", "/v2/sandboxes" }, sbx_h_list, 1 },
	{ { "GET", "/sandboxes/{id}" }, sbx_h_get, 0 },
	{ { "DELETE", "/sandboxes/{id}" }, sbx_h_kill, 0 },
	{ { "POST", "/sandboxes/{id}/timeout" }, sbx_h_timeout, 0 },
	{ { "POST", "/sandboxes/{id}/connect" }, sbx_h_connect, 0 },
	{ { "POST", "/v2/sandboxes/{id}/connect" }, sbx_h_connect, 0 },
	{ { "POST", "/sandboxes/{id}/resume" }, sbx_h_connect, 1 }, /* E2B's older resume: 409 when running */
	{ { "POST", "/sandboxes/{id}/pause" }, sbx_h_pause, 0 },
	{ { "GET", "/sandboxes/{id}/metrics" }, sbx_h_metrics, 0 },
	{ { "*", "/sandboxes/{id}/network" }, sbx_h_unimplemented, 0 },
	{ { "*", "/sandboxes/{id}/fork" }, sbx_h_unimplemented, 0 },
	{ { "*", "/sandboxes/{id}/snapshots" }, sbx_h_unimplemented, 0 },
	{ { "*", "/sandboxes/{id}/refreshes" }, sbx_h_unimplemented, 0 },
};

void sbx_control_serve(struct svc_sandboxes *s, reg_req *r, struct sbx_req *q)
{
	const char *m = reg_req_method(r), *path = reg_req_path(r), *id;
	const struct sbx_route *rt;
	struct svc_route_match rm;
	char *team;
	unsigned status;
	kiln_error *err = NULL;
	json_t *body = NULL;

	if ((team = svc_auth_team_for(r, NULL, REG_SANDBOX, &status, &err)) == NULL) {
		if (status != 429)
			e2b_reply_error(r, status, "%s", kiln_error_message(err));
		kiln_error_free(err);
		return;
	}
	rt = (const struct sbx_route *)SVC_ROUTE_FIND(CONTROL, m, path, &rm);
	id = rm.n ? rm.param[0] : NULL;
	if (rt == NULL) {
		e2b_reply_error(r, strcmp(m, "GET") == 0 || strcmp(m, "POST") == 0 || strcmp(m, "DELETE") == 0 ? 404 : 405,
				"%s %.200s: no such route", m, path);
		goto out;
	}
	if (id && (strlen(id) > 64 || strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789") != strlen(id))) {
		e2b_reply_error(r, 404, "no sandbox '%.64s'", id);
		goto out;
	}
	if (strcmp(m, "POST") == 0) {
		body = q->body.buf.len ? kiln_json_loadb(q->body.buf.buf, q->body.buf.len, "the request body", &err) : json_object();
		if (body == NULL || !json_is_object(body)) {
			e2b_reply_error(r, 400, "%s", err ? kiln_error_message(err) : "the request body: want a JSON object");
			goto out;
		}
	}
	rt->h(s, r, team, id, body, rt->arg);
out:
	svc_route_match_free(&rm);
	json_decref(body);
	kiln_error_free(err);
	free(team);
}

/* ---- the service ---- */

static int get_limits(const json_t *o, const char *key, struct rt_limits *l, kiln_error **err)
{
	const json_t *v = json_object_get(o, key), *x;
	const char *k;

	if (v == NULL)
		return 0;
	if (!json_is_object(v))
		return kiln_err(err, KILN_E_INVALID, "sandboxes.%s: want an object", key);
	json_object_foreach((json_t *)v, k, x) {
		if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > (1ll << 40))
			return kiln_err(err, KILN_E_INVALID, "sandboxes.%s.%s: want a number of 0 or more", key, k);
		if (strcmp(k, "sandboxes") == 0)
			l->sandboxes = (unsigned)json_integer_value(x);
		else if (strcmp(k, "memory_mib") == 0)
			l->memory_mib = (uint64_t)json_integer_value(x);
		else if (strcmp(k, "vcpus") == 0)
			l->vcpus = (unsigned)json_integer_value(x);
		else
			return kiln_err(err, KILN_E_INVALID, "sandboxes.%s: unknown key '%s' (sandboxes, memory_mib, vcpus)",
					key, k);
	}
	return 0;
}

/* A team's sandbox quotas (registry/quota.c) over the config's team_limits. */
static void team_quota(void *ud, const char *team, struct rt_limits *l)
{
	static const enum reg_quota_key k[3] = { REG_QUOTA_SANDBOXES, REG_QUOTA_SANDBOX_MEMORY, REG_QUOTA_SANDBOX_VCPUS };
	struct svc_sandboxes *s = ud;
	kiln_error *err = NULL;
	struct reg_quota q;
	int64_t v[3];

	if (!reg_quota_team_valid(team) || reg_server_quota(s->srv, team, &q, &err) < 0) {
		if (err)
			kiln_warn("sandboxes: quotas of team '%s': %s (its configured limits apply)", team,
				  kiln_error_message(err));
		kiln_error_free(err);
		return;
	}
	for (int i = 0; i < 3; i++)
		v[i] = q.src[k[i]] == REG_QUOTA_UNSET ? -2 : q.v[k[i]] == REG_QUOTA_NONE ? 0 : q.v[k[i]];
	if (v[0] != -2)
		l->sandboxes = (unsigned)(v[0] > 1 << 30 ? 1 << 30 : v[0]);
	if (v[1] != -2)
		l->memory_mib = (uint64_t)v[1];
	if (v[2] != -2)
		l->vcpus = (unsigned)(v[2] > 1 << 30 ? 1 << 30 : v[2]);
}

/* GET /kiln/v1/usage's sandbox quotas of a team, as a create checks them. */
static int sbx_usage(void *ud, const char *team, json_t *quotas, kiln_error **err)
{
	struct svc_sandboxes *s = ud;
	struct rt_limits used, lim;

	(void)err;
	rt_host_team_usage(s->host, team, &used, &lim);
	reg_usage_set(quotas, "sandboxes", used.sandboxes, lim.sandboxes ? (int64_t)lim.sandboxes : -1);
	reg_usage_set(quotas, "sandbox_memory_mib", (int64_t)used.memory_mib, lim.memory_mib ? (int64_t)lim.memory_mib : -1);
	reg_usage_set(quotas, "sandbox_vcpus", used.vcpus, lim.vcpus ? (int64_t)lim.vcpus : -1);
	return 0;
}

svc_sandboxes *svc_sandboxes_start(reg_server *srv, const json_t *config, e2b *templates,
				   int (*ensure)(void *ud, const char *ref, kiln_error **err), void *ud,
				   kiln_error **err)
{
	struct svc_sandboxes *s = kiln_xcalloc(1, sizeof(*s));
	const struct reg_config *rc = reg_server_config(srv);
	struct rt_host_config hc = { 0 };
	const json_t *o = json_is_object(config) ? config : NULL, *v;
	const char *k, *host = rc->host;
	char *key = kiln_path_join(rc->data_dir, "sandboxes.key");
	size_t i;

	s->srv = srv;
	s->templates = templates;
	s->max_upload = 256u << 20;
	s->domain = kiln_xstrdup("kiln.localhost");
	json_object_foreach((json_t *)o, k, v) {
		if (strcmp(k, "domain") == 0 && json_is_string(v) && *json_string_value(v)) {
			free(s->domain);
			s->domain = kiln_xstrdup(json_string_value(v));
		} else if (strcmp(k, "pool_size") == 0 && json_is_integer(v) && json_integer_value(v) >= 0 &&
			   json_integer_value(v) <= 64) {
			s->pool_size = hc.pool_size = (int)json_integer_value(v);
		} else if (strcmp(k, "pool") == 0 && json_is_array(v)) {
			json_t *t;
			json_array_foreach(v, i, t)
				if (json_is_string(t))
					kiln_strv_push(&s->pool, json_string_value(t));
		} else if (strcmp(k, "max_upload") == 0 && json_is_integer(v) && json_integer_value(v) > 0) {
			s->max_upload = (uint64_t)json_integer_value(v);
		} else if ((strcmp(k, "host_limits") == 0 || strcmp(k, "team_limits") == 0)) {
			if (get_limits(o, k, k[0] == 'h' ? &hc.host : &hc.team, err) < 0)
				goto fail;
		} else {
			kiln_err(err, KILN_E_INVALID,
				 "sandboxes.%s: unknown key or bad value (domain, pool_size 0-64, pool [...], max_upload, "
				 "host_limits, team_limits)", k);
			goto fail;
		}
	}
	/* templates built here are pulled from this server itself */
	if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0)
		host = "127.0.0.1";
	s->self = kiln_xasprintf(strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, reg_server_port(srv));
	hc.key_path = key;
	hc.pool_templates = (const char *const *)s->pool.v;
	hc.ensure_template = ensure;
	hc.ud = ud;
	hc.team_limits = team_quota;
	hc.limits_ud = s;
	if ((s->host = rt_host_open(&hc, err)) == NULL)
		goto fail;
	s->routes = (struct reg_routes){ .prefix = NULL, .match = match, .name = "sandbox", .ud = s, .begin = begin, .body = body,
					 .end = end, .done = done };
	if (reg_server_mount(srv, &s->routes, err) < 0)
		goto fail;
	s->observer = (struct reg_observer){ .name = "sandboxes", .ud = s, .metrics = sbx_metrics, .usage = sbx_usage };
	if (reg_server_observe(srv, &s->observer, err) < 0)
		goto fail;
	free(key);
	return s;
fail:
	free(key);
	svc_sandboxes_stop(s);
	return NULL;
}

void svc_sandboxes_stop(svc_sandboxes *s)
{
	if (s == NULL)
		return;
	rt_host_close(s->host);
	kiln_strv_free(&s->pool);
	free(s->domain);
	free(s->self);
	free(s);
}
