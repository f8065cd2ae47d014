/* metrics.c — what an operator watches `kiln serve` by: request counters and
 * latency histograms per route class kept lock-free as requests end, GET
 * /metrics in Prometheus' text format (with what the store holds per team and
 * what mounted modules add), /healthz (alive) and /readyz (store and metadata
 * reachable, and every module's own check). */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registry/internal.h"

static const char *const route_names[REG_METRIC_ROUTES] = {
	[R_NONE] = "unknown", [R_BASE] = "base", [R_CATALOG] = "catalog", [R_TAGS] = "tags",
	[R_MANIFEST] = "manifest", [R_BLOB] = "blob", [R_UPLOAD_START] = "upload_start", [R_UPLOAD] = "upload",
	[R_REFERRERS] = "referrers", [R_TOKEN] = "token", [R_BLOBS_EXIST] = "blobs_exist",
	[R_BLOBS_BATCH] = "blobs_batch", [R_METRICS] = "metrics", [R_HEALTHZ] = "healthz", [R_READYZ] = "readyz",
	[R_UI] = "ui", [R_OVERVIEW] = "overview",
};

static const char *const method_names[REG_METRIC_METHODS] = { "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OTHER" };

/* The codes kiln answers with, each its own label value; any other is counted
 * under its class ("5xx"), and 0 is a request that ended with no answer sent
 * (the client went away, or the connection was cut). */
static const unsigned codes[] = {
	0, 200, 201, 202, 204, 206, 301, 302, 304, 307, 308, 400, 401, 403, 404, 405, 409, 413, 415, 416, 429,
	500, 501, 502, 503, 504,
};

_Static_assert(sizeof(codes) / sizeof(codes[0]) + 5 == REG_METRIC_CODES, "a label per code, then 1xx..5xx");

/* Upper bounds of the duration buckets, in seconds (a pull of a large blob,
 * a build log followed live or a build itself lands in the last ones). */
static const double buckets[REG_HIST_BUCKETS] = { 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
						  2.5, 5, 10, 30, 60, 300, 900, 3600 };

static unsigned route_index(const reg_req *r)
{
	if (r->route == R_EXT) {
		for (unsigned i = 0; i < r->srv->nroutes; i++)
			if (r->srv->routes[i] == r->ext)
				return R_METRIC_EXT0 + i;
		return R_NONE;
	}
	return (unsigned)r->route < R_METRIC_EXT0 ? (unsigned)r->route : R_NONE;
}

static unsigned method_index(const char *m)
{
	for (unsigned i = 0; i + 1 < REG_METRIC_METHODS; i++)
		if (strcmp(m, method_names[i]) == 0)
			return i;
	return REG_METRIC_METHODS - 1;
}

static unsigned code_index(unsigned status)
{
	unsigned n = sizeof(codes) / sizeof(codes[0]);

	for (unsigned i = 0; i < n; i++)
		if (codes[i] == status)
			return i;
	return status >= 100 && status < 600 ? n + status / 100 - 1 : 0;
}

static void add(uint64_t *c, uint64_t n)
{
	__atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}

static uint64_t get(const uint64_t *c)
{
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}

void reg_metrics_begin(reg_req *r)
{
	struct reg_metrics *m = &r->srv->metrics;

	add(&m->in_flight, 1);
	if (r->route == R_UPLOAD || r->route == R_UPLOAD_START) {
		add(&m->uploads_in_flight, 1);
		r->counted_upload = 1;
	}
	r->counted = 1;
}

void reg_metrics_end(reg_req *r)
{
	struct reg_metrics *m = &r->srv->metrics;
	unsigned ri = route_index(r);

	if (!r->counted)
		return;
	__atomic_fetch_sub(&m->in_flight, 1, __ATOMIC_RELAXED);
	if (r->counted_upload)
		__atomic_fetch_sub(&m->uploads_in_flight, 1, __ATOMIC_RELAXED);
	add(&m->requests[ri][method_index(r->method)][code_index(r->resp ? r->status : 0)], 1);
	reg_histogram_observe(&m->latency[ri], (kiln_now_ms() - r->t0_ms) / 1000.0);
	add(&m->received[ri], r->received + r->discarded);
	if (r->resp && strcmp(r->method, "HEAD") != 0)
		add(&m->sent[ri], r->sent);
}

void reg_histogram_observe(struct reg_histogram *h, double secs)
{
	unsigned b = 0;

	while (b < REG_HIST_BUCKETS && secs > buckets[b])
		b++;
	add(&h->n[b], 1);
	add(&h->sum_us, secs > 0 ? (uint64_t)(secs * 1e6) : 0);
}

void reg_metrics_auth_failed(reg_server *s)
{
	add(&s->metrics.auth_failures, 1);
}

void reg_metrics_auth_limited(reg_server *s)
{
	add(&s->metrics.auth_limited, 1);
}

void reg_metrics_streamed(reg_server *s, uint64_t n)
{
	add(&s->metrics.streamed, n);
}

/* ---- the text format ---- */

void reg_metric_head(kiln_buf *out, const char *name, const char *type, const char *help)
{
	kiln_buf_addf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value as the text format quotes it. */
void reg_metric_label(kiln_buf *out, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			kiln_buf_addf(out, "\\%c", *v);
		else if (*v == '\n')
			kiln_buf_add(out, "\\n", 2);
		else
			kiln_buf_add(out, v, 1);
	}
}

void reg_metric_histogram(kiln_buf *out, const char *name, const char *labels, const struct reg_histogram *h)
{
	uint64_t n[REG_HIST_BUCKETS + 1], cum = 0, total = 0;
	const char *sep = labels && *labels ? "," : "";

	labels = labels ? labels : "";
	for (unsigned b = 0; b <= REG_HIST_BUCKETS; b++)
		total += n[b] = get(&h->n[b]); /* one read each: the cumulative counts agree */
	if (total == 0)
		return;
	for (unsigned b = 0; b < REG_HIST_BUCKETS; b++) {
		cum += n[b];
		kiln_buf_addf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, buckets[b],
			      (unsigned long long)cum);
	}
	kiln_buf_addf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)total);
	kiln_buf_addf(out, "%s_sum%s%s%s %.6f\n", name, *labels ? "{" : "", labels, *labels ? "}" : "",
		      (double)get(&h->sum_us) / 1e6);
	kiln_buf_addf(out, "%s_count%s%s%s %llu\n", name, *labels ? "{" : "", labels, *labels ? "}" : "",
		      (unsigned long long)total);
}

static const char *route_name(const reg_server *s, unsigned ri)
{
	if (ri >= R_METRIC_EXT0) {
		const struct reg_routes *rt = s->routes[ri - R_METRIC_EXT0];
		return rt->name ? rt->name : rt->prefix ? rt->prefix : "module";
	}
	return route_names[ri] ? route_names[ri] : "unknown";
}

void reg_metric_counters(kiln_buf *out, const char *name, const char *help, const char *label,
			 const char *const *values, const uint64_t *counters, size_t n)
{
	reg_metric_head(out, name, "counter", help);
	for (size_t i = 0; i < n; i++) {
		kiln_buf_addf(out, "%s{%s=\"", name, label);
		reg_metric_label(out, values[i]);
		kiln_buf_addf(out, "\"} %llu\n", (unsigned long long)get(&counters[i]));
	}
}

void reg_metric_histograms(kiln_buf *out, const char *name, const char *help, const char *label,
			   const char *const *values, const struct reg_histogram *h, size_t n)
{
	kiln_buf l = KILN_BUF_INIT;

	reg_metric_head(out, name, "histogram", help);
	for (size_t i = 0; i < n; i++) {
		l.len = 0;
		kiln_buf_addf(&l, "%s=\"", label);
		reg_metric_label(&l, values[i]);
		kiln_buf_add(&l, "\"", 1);
		reg_metric_histogram(out, name, l.buf, &h[i]);
	}
	kiln_buf_free(&l);
}

const char *reg_metrics_route_name(const reg_req *r)
{
	return route_name(r->srv, route_index(r));
}

static void code_label(unsigned ci, char out[8])
{
	unsigned n = sizeof(codes) / sizeof(codes[0]);

	if (ci < n)
		snprintf(out, 8, "%u", codes[ci]);
	else
		snprintf(out, 8, "%uxx", ci - n + 1);
}

/* A counter family by route class, the classes with nothing counted left out. */
static void per_route(const reg_server *s, kiln_buf *out, const char *name, const char *help, const uint64_t *v)
{
	reg_metric_head(out, name, "counter", help);
	for (unsigned ri = 0; ri < R_METRIC_EXT0 + s->nroutes; ri++)
		if (get(&v[ri]))
			kiln_buf_addf(out, "%s{route=\"%s\"} %llu\n", name, route_name(s, ri), (unsigned long long)get(&v[ri]));
}

static void http_families(const reg_server *s, kiln_buf *out)
{
	const struct reg_metrics *m = &s->metrics;
	unsigned nr = R_METRIC_EXT0 + s->nroutes;
	char code[8];

	reg_metric_head(out, "kiln_http_requests_total", "counter",
			"HTTP requests ended, by route class, method and status code (0: no answer sent).");
	for (unsigned ri = 0; ri < nr; ri++)
		for (unsigned mi = 0; mi < REG_METRIC_METHODS; mi++)
			for (unsigned ci = 0; ci < REG_METRIC_CODES; ci++) {
				uint64_t v = get(&m->requests[ri][mi][ci]);
				if (v == 0)
					continue;
				code_label(ci, code);
				kiln_buf_addf(out, "kiln_http_requests_total{route=\"%s\",method=\"%s\",code=\"%s\"} %llu\n",
					      route_name(s, ri), method_names[mi], code, (unsigned long long)v);
			}
	reg_metric_head(out, "kiln_http_request_duration_seconds", "histogram",
			"Time from a request's headers to the end of its answer, by route class.");
	for (unsigned ri = 0; ri < nr; ri++) {
		char labels[96];
		snprintf(labels, sizeof(labels), "route=\"%s\"", route_name(s, ri));
		reg_metric_histogram(out, "kiln_http_request_duration_seconds", labels, &m->latency[ri]);
	}
	per_route(s, out, "kiln_http_received_bytes_total", "Request body bytes received, by route class.", m->received);
	per_route(s, out, "kiln_http_sent_bytes_total",
		  "Response body bytes of known length queued, by route class (streamed bodies: kiln_http_streamed_bytes_total).",
		  m->sent);
	reg_metric_head(out, "kiln_http_streamed_bytes_total", "counter",
			"Bytes of streamed (chunked) response bodies sent.");
	kiln_buf_addf(out, "kiln_http_streamed_bytes_total %llu\n", (unsigned long long)get(&m->streamed));
	reg_metric_head(out, "kiln_http_requests_in_flight", "gauge", "Requests begun and not yet ended.");
	kiln_buf_addf(out, "kiln_http_requests_in_flight %llu\n", (unsigned long long)get(&m->in_flight));
	reg_metric_head(out, "kiln_registry_uploads_in_flight", "gauge", "Blob upload requests in progress.");
	kiln_buf_addf(out, "kiln_registry_uploads_in_flight %llu\n", (unsigned long long)get(&m->uploads_in_flight));
	reg_metric_head(out, "kiln_auth_failures_total", "counter",
			"Requests whose credentials were invalid, expired or revoked.");
	kiln_buf_addf(out, "kiln_auth_failures_total %llu\n", (unsigned long long)get(&m->auth_failures));
	reg_metric_head(out, "kiln_auth_rate_limited_total", "counter",
			"Requests refused (429) for too many failed authentications.");
	kiln_buf_addf(out, "kiln_auth_rate_limited_total %llu\n", (unsigned long long)get(&m->auth_limited));
	reg_metric_head(out, "kiln_process_start_time_seconds", "gauge", "When this server started, in unix seconds.");
	kiln_buf_addf(out, "kiln_process_start_time_seconds %lld\n", (long long)m->started);
	reg_metric_head(out, "kiln_build_info", "gauge", "The kiln version serving (always 1).");
	kiln_buf_addf(out, "kiln_build_info{version=\"%s\"} 1\n", KILN_VERSION);
}

static void usage_family(kiln_buf *out, const struct reg_team_usage *u, size_t n, const char *name,
			 const char *help, size_t off)
{
	reg_metric_head(out, name, "gauge", help);
	for (size_t i = 0; i < n; i++) {
		kiln_buf_addf(out, "%s{team=\"", name);
		reg_metric_label(out, u[i].team);
		kiln_buf_addf(out, "\"} %lld\n", (long long)*(const int64_t *)((const char *)&u[i] + off));
	}
}

/* What the store holds per team (a repository's first path segment): the
 * filesystem backend's metadata answers it in one pass; with S3 metadata
 * nothing is listed (a scrape must not walk a bucket). */
static int usage_families(reg_server *s, kiln_buf *out, kiln_error **err)
{
	struct reg_team_usage *u = NULL;
	size_t n = 0;

	if (s->store.ops != &reg_backend_fs || s->db == NULL)
		return 0;
	if (reg_db_team_usage(s->db, &u, &n, err) < 0)
		return -1;
	usage_family(out, u, n, "kiln_registry_repositories", "Repositories, per team.",
		     offsetof(struct reg_team_usage, repos));
	usage_family(out, u, n, "kiln_registry_tags", "Tags, per team.", offsetof(struct reg_team_usage, tags));
	usage_family(out, u, n, "kiln_registry_blobs", "Distinct blobs (layers, chunks, configs) linked, per team.",
		     offsetof(struct reg_team_usage, blobs));
	usage_family(out, u, n, "kiln_registry_stored_bytes",
		     "Bytes of distinct blobs and manifests, per team (each counted once per team).",
		     offsetof(struct reg_team_usage, bytes));
	reg_team_usage_free(u, n);
	return 0;
}

/* Garbage collections, from meta.db's gc_runs (gc.c): the CLI's runs in other
 * processes are there too, and the counts outlive a restart. */
static int gc_families(reg_server *s, kiln_buf *out, kiln_error **err)
{
	static const struct {
		const char *name, *type, *help;
		int col;
	} fam[] = {
		{ "kiln_registry_gc_runs_total", "counter", "Garbage collections (retention, then the sweep) ended.", 2 },
		{ "kiln_registry_gc_removed_blobs_total", "counter", "Blobs garbage collections removed.", 3 },
		{ "kiln_registry_gc_freed_bytes_total", "counter", "Bytes of the blobs garbage collections removed.", 4 },
		{ "kiln_registry_retention_removed_tags_total", "counter", "Tags the retention rules removed.", 5 },
		{ "kiln_registry_retention_removed_manifests_total", "counter", "Manifests the retention rules removed.",
		  6 },
		{ "kiln_registry_gc_last_run_timestamp_seconds", "gauge", "When the last garbage collection ended.", 7 },
	};
	sqlite3_stmt *st;
	int rc = 0;

	if (s->db == NULL)
		return 0;
	pthread_mutex_lock(&s->db->lock);
	st = reg_db_prep(s->db,
			 "SELECT source, outcome, runs, blobs, bytes, tags, manifests, last FROM gc_runs ORDER BY 1, 2",
			 err);
	for (size_t f = 0; st != NULL && f < sizeof(fam) / sizeof(fam[0]); f++) {
		reg_metric_head(out, fam[f].name, fam[f].type, fam[f].help);
		sqlite3_reset(st);
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			kiln_buf_addf(out, "%s{source=\"", fam[f].name);
			reg_metric_label(out, (const char *)sqlite3_column_text(st, 0));
			kiln_buf_addf(out, "\",outcome=\"");
			reg_metric_label(out, (const char *)sqlite3_column_text(st, 1));
			kiln_buf_addf(out, "\"} %lld\n", (long long)sqlite3_column_int64(st, fam[f].col));
		}
		if (rc != SQLITE_DONE)
			break;
	}
	if (st != NULL && rc != SQLITE_DONE)
		reg_db_fail(s->db, err, "gc runs");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->db->lock);
	return st == NULL || rc != SQLITE_DONE ? -1 : 0;
}

/* ---- the endpoints ---- */

int reg_server_observe(reg_server *s, const struct reg_observer *o, kiln_error **err)
{
	if (s->nobservers == REG_OBSERVERS_MAX)
		return kiln_err(err, KILN_E_LIMIT, "at most %d observers can be added", REG_OBSERVERS_MAX);
	s->observers[s->nobservers] = o;
	__atomic_store_n(&s->nobservers, s->nobservers + 1, __ATOMIC_RELEASE);
	return 0;
}

void reg_metrics_handle(reg_req *r)
{
	reg_server *s = r->srv;
	kiln_buf out = KILN_BUF_INIT;
	kiln_error *err = NULL;
	unsigned no = __atomic_load_n(&s->nobservers, __ATOMIC_ACQUIRE);

	if (strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0) {
		reg_error(r, 405, "UNSUPPORTED", "method %s not allowed here", r->method);
		return;
	}
	http_families(s, &out);
	if (usage_families(s, &out, &err) < 0 || gc_families(s, &out, &err) < 0) {
		kiln_buf_free(&out);
		reg_internal(r, err);
		return;
	}
	for (unsigned i = 0; i < no; i++)
		if (s->observers[i]->metrics)
			s->observers[i]->metrics(s->observers[i]->ud, &out);
	reg_respond(r, 200, out.buf ? out.buf : "", out.len, "text/plain; version=0.0.4; charset=utf-8");
	kiln_buf_free(&out);
}

/* Is the store there and writable, and does its metadata answer? */
static int store_ready(reg_server *s, kiln_error **err)
{
	kiln_strv names = KILN_STRV_INIT;
	int more = 0, rc;

	if (s->store.ops == &reg_backend_fs) {
		/* where a push makes its files: root passes every permission bit,
		 * not a read-only or immutable filesystem */
		const char *const dirs[] = { s->cfg.data_dir, s->store.blobs, s->store.uploads };
		for (size_t i = 0; i < 3; i++)
			if (access(dirs[i], W_OK) != 0)
				return kiln_err_errno(err, errno, "%s is not writable", dirs[i]);
	}
	rc = s->store.ops->catalog(&s->store, s->db, NULL, 1, &names, &more, err);
	kiln_strv_free(&names);
	return rc < 0 ? -1 : 0;
}

void reg_health_handle(reg_req *r)
{
	reg_server *s = r->srv;
	kiln_buf out = KILN_BUF_INIT;
	kiln_error *err = NULL;
	unsigned no = __atomic_load_n(&s->nobservers, __ATOMIC_ACQUIRE);
	bool ok = true;

	if (r->route == R_HEALTHZ) {
		reg_respond(r, 200, "ok\n", 3, "text/plain; charset=utf-8");
		return;
	}
	if (store_ready(s, &err) < 0) {
		kiln_buf_addf(&out, "store: FAILING: %s\n", kiln_error_message(err));
		kiln_error_clear(&err);
		ok = false;
	} else {
		kiln_buf_addf(&out, "store: ok (%s)\n", s->store.ops == &reg_backend_fs ? "filesystem" : "s3");
	}
	for (unsigned i = 0; i < no; i++) {
		const struct reg_observer *o = s->observers[i];
		if (o->ready == NULL)
			continue;
		if (o->ready(o->ud, &err) < 0) {
			kiln_buf_addf(&out, "%s: FAILING: %s\n", o->name, kiln_error_message(err));
			kiln_error_clear(&err);
			ok = false;
		} else {
			kiln_buf_addf(&out, "%s: ok\n", o->name);
		}
	}
	reg_respond(r, ok ? 200 : 503, out.buf, out.len, "text/plain; charset=utf-8");
	kiln_buf_free(&out);
}
