/* api.c — kiln's own HTTP API of the build service, under /build/v1/ on the
 * registry's daemon (docs/service.md): which blobs are missing, blob upload
 * (zstd), submit, status, list, the log as a chunked stream with a cursor,
 * cancel, cache prune.  Every call names its team (?team=, or the token's
 * only team) and needs a token with the build action on it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "service/internal.h"

#define PREFIX "/build/v1/"
#define BODY_MAX (64u << 20)

struct areq;
/* A route of the API: its handler runs when the request is whole; a blob
 * route's body is written to the content store as it comes, another's is
 * read (up to BODY_MAX) and parsed when the row says so. */
struct api_route {
	struct svc_route rt;
	void (*end)(svc *s, reg_req *r, struct areq *q, json_t *body);
	enum { BODY_NONE, BODY_JSON, BODY_BLOB } body;
};

struct areq {
	const struct api_route *route;
	char *team, *id; /* id: the route's {id} or {digest} */
	struct svc_body body; /* a JSON body (svc_body: the core's limit) */
	svc_blob_writer *w;
	kiln_error *err;      /* a failed blob write: answered at the end */
};

static void answer(reg_req *r, unsigned status, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);

	reg_respond(r, status, s, strlen(s), "application/json");
	free(s);
	json_decref(j);
}

static void fail(reg_req *r, unsigned status, const char *msg)
{
	answer(r, status, json_pack("{s:s,s:i}", "error", msg, "status", (int)status));
}

static void fail_err(reg_req *r, kiln_error *e)
{
	unsigned st = svc_err_status(e);
	char *what = kiln_xasprintf("build service: %s %s", reg_req_method(r), reg_req_path(r));

	fail(r, st, svc_err_reply(e, st, what));
	free(what);
	kiln_error_free(e);
}

json_t *svc_status_json(const struct svc_status *st)
{
	json_t *j = json_pack("{s:s,s:s,s:s,s:i,s:i,s:I,s:I,s:I}", "id", st->id, "team", st->team, "state",
			      svc_state_name(st->state), "step", st->step, "total", st->total, "created",
			      (json_int_t)st->created, "started", (json_int_t)st->started, "ended", (json_int_t)st->ended);
#define SETS(k, v) if (v) json_object_set_new(j, k, json_string(v))
	SETS("name", st->name);
	SETS("instruction", st->instruction);
	SETS("reason", st->reason);
	SETS("location", st->location);
	SETS("image", st->image);
	SETS("image_digest", st->image_digest);
	SETS("template_ref", st->template_ref);
	SETS("template_digest", st->template_digest);
	SETS("host", st->host);
#undef SETS
	return j;
}

/* The log as it grows: one JSON event per line; a keep-alive newline every
 * 10 s of silence so no proxy or idle timer cuts it; ends with the build. */
struct stream {
	svc *s;
	char *team, *id;
	int64_t cursor;
	kiln_buf pending;
	size_t off;
	int follow, ended, idle;
};

static long stream_read(void *ud, uint64_t pos, char *buf, size_t max)
{
	struct stream *st = ud;

	while (st->off >= st->pending.len) {
		kiln_strv lines = KILN_STRV_INIT;
		kiln_error *err = NULL;
		bool ended = false;
		int64_t next;

		if (st->ended || st->s->stopping)
			return 0;
		st->pending.len = 0;
		st->off = 0;
		if (svc_logs(st->s, st->team, st->id, st->cursor, st->follow ? 1000 : 0, &lines, &next, &ended, &err) < 0) {
			kiln_error_free(err);
			return -1;
		}
		for (size_t i = 0; i < lines.n; i++)
			kiln_buf_addf(&st->pending, "%s\n", lines.v[i]);
		kiln_strv_free(&lines);
		st->cursor = next;
		if (ended || !st->follow)
			st->ended = 1;
		if (st->pending.len == 0 && !st->ended && ++st->idle >= 10) {
			kiln_buf_addf(&st->pending, "\n");
			st->idle = 0;
		}
		if (st->pending.len)
			st->idle = 0;
	}
	size_t n = st->pending.len - st->off < max ? st->pending.len - st->off : max;
	memcpy(buf, st->pending.buf + st->off, n);
	st->off += n;
	return (long)n;
}

static void stream_free(void *ud)
{
	struct stream *st = ud;

	kiln_buf_free(&st->pending);
	free(st->team);
	free(st->id);
	free(st);
}

static int body(void *ud, reg_req *r, const char *data, size_t len)
{
	struct areq *q = reg_req_state(r);

	if (q->route && q->route->body == BODY_BLOB) {
		if (q->w && q->err == NULL && svc_blob_write(q->w, data, len, &q->err) < 0) {
			svc_blob_abort(q->w);
			q->w = NULL;
		}
		return 0;
	}
	svc_body_add(&q->body, data, len);
	return 0;
}

/* A query's whole number of at least 0 (absent or empty: dflt); -1 when it
 * is not one.  strtoll alone reads "7d" as 7 and "abc" as 0: a prune given either
 * would take every cache entry older than that many seconds — all of them. */
static int64_t query_count(reg_req *r, const char *key, int64_t dflt)
{
	const char *v = reg_query(r, key);
	char *end = NULL;
	long long n;

	if (v == NULL || *v == '\0')
		return dflt;
	if (*v < '0' || *v > '9')
		return -1;
	errno = 0;
	n = strtoll(v, &end, 10);
	return *end || errno ? -1 : (int64_t)n;
}

static json_t *body_json(reg_req *r, struct areq *q)
{
	json_error_t je;
	json_t *j;

	if (q->body.over) {
		char msg[96];
		fail(r, 413, svc_body_limit_msg(&q->body, msg, sizeof(msg)));
		return NULL;
	}
	j = json_loadb(q->body.buf.buf ? q->body.buf.buf : "", q->body.buf.len, 0, &je);
	if (!json_is_object(j)) {
		json_decref(j);
		fail(r, 400, "want a JSON object");
		return NULL;
	}
	return j;
}

static json_t *strv_json(const kiln_strv *v)
{
	json_t *a = json_array();

	for (size_t k = 0; k < v->n; k++)
		json_array_append_new(a, json_string(v->v[k]));
	return a;
}

/* POST missing {"digests": [...]}: which of them the team's store lacks */
static void on_missing(svc *s, reg_req *r, struct areq *q, json_t *j)
{
	kiln_strv want = KILN_STRV_INIT, missing = KILN_STRV_INIT;
	kiln_error *err = NULL;
	json_t *d;
	size_t i;

	json_array_foreach(json_object_get(j, "digests"), i, d)
		kiln_strv_push(&want, json_string_value(d) ? json_string_value(d) : "");
	if (svc_blobs_missing(s, q->team, (const char *const *)want.v, want.n, &missing, &err) < 0)
		fail_err(r, err);
	else
		answer(r, 200, json_pack("{s:o}", "missing", strv_json(&missing)));
	kiln_strv_free(&want);
	kiln_strv_free(&missing);
}

/* PUT blobs/DIGEST: the body was written as it came; stored if it hashed right */
static void on_blob(svc *s, reg_req *r, struct areq *q, json_t *j)
{
	kiln_error *err = NULL;

	if (q->err) {
		fail_err(r, q->err);
		q->err = NULL;
	} else if (svc_blob_commit(q->w, &err) < 0) {
		q->w = NULL;
		fail_err(r, err);
	} else {
		q->w = NULL;
		answer(r, 201, json_pack("{s:s}", "digest", q->id));
	}
}

/* POST builds: a build request */
static void on_submit(svc *s, reg_req *r, struct areq *q, json_t *j)
{
	char id[SVC_ID_MAX];
	kiln_error *err = NULL;
	kiln_strv missing = KILN_STRV_INIT;
	/* ?missing=1: the files' blobs the team lacks come back (409) instead
	 * of an error, so a client submits without asking first; they are
	 * looked for as the request is checked (one look at each file) */
	const char *mq = reg_query(r, "missing");

	/* the submit's id (X-Request-Id) goes with the build into its log */
	json_object_set_new(j, "request_id", json_string(reg_req_id(r)));
	int src = svc_submit_json(s, q->team, j, id, mq && strcmp(mq, "0") != 0 ? &missing : NULL, &err);
	if (src < 0)
		fail_err(r, err);
	else if (src == 1)
		answer(r, 409, json_pack("{s:s,s:i,s:o}", "error", "the context has files the server lacks", "status", 409,
					 "missing", strv_json(&missing)));
	else
		answer(r, 202, json_pack("{s:s,s:s,s:s}", "id", id, "team", q->team, "state", src == 2 ? "done" : "queued"));
	kiln_strv_free(&missing);
}

/* GET builds/ID */
static void on_status(svc *s, reg_req *r, struct areq *q, json_t *j)
{
	struct svc_status st;
	kiln_error *err = NULL;

	if (svc_status(s, q->team, q->id, &st, &err) < 0) {
		fail_err(r, err);
		return;
	}
	answer(r, 200, svc_status_json(&st));
	svc_status_free(&st);
}

/* GET builds[?name=]: the team's latest 100 */
static void on_list(svc *s, reg_req *r, struct areq *q, json_t *j)
{
	struct svc_status *v = NULL;
	size_t n = 0;
	kiln_error *err = NULL;

	if (svc_list(s, q->team, reg_query(r, "name"), 100, &v, &n, &err) < 0) {
		fail_err(r, err);
		return;
	}
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, svc_status_json(&v[i]));
	answer(r, 200, json_pack("{s:o}", "builds", a));
	svc_list_free(v, n);
}

/* GET builds/ID/logs[?cursor=N&follow=1]: a stream of the log's events */
static void on_logs(svc *s, reg_req *r, struct areq *q, json_t *j)
{
	struct svc_status st;
	kiln_error *err = NULL;
	const char *f = reg_query(r, "follow");
	int64_t cursor = query_count(r, "cursor", 0);

	if (cursor < 0) {
		fail(r, 400, "cursor: want the number of log lines already read");
		return;
	}
	if (svc_status(s, q->team, q->id, &st, &err) < 0) {
		fail_err(r, err);
		return;
	}
	svc_status_free(&st);
	struct stream *ls = kiln_xcalloc(1, sizeof(*ls));
	ls->s = s;
	ls->team = kiln_xstrdup(q->team);
	ls->id = kiln_xstrdup(q->id);
	ls->cursor = cursor;
	ls->follow = f && strcmp(f, "0") != 0;
	ls->pending = (kiln_buf)KILN_BUF_INIT;
	reg_respond_stream(r, 200, "application/x-ndjson", stream_read, ls, stream_free);
}

/* POST builds/ID/cancel */
static void on_cancel(svc *s, reg_req *r, struct areq *q, json_t *j)
{
	kiln_error *err = NULL;

	if (svc_cancel(s, q->team, q->id, &err) < 0)
		fail_err(r, err);
	else
		answer(r, 202, json_pack("{s:s,s:s}", "id", q->id, "cancel", "requested"));
}

/* POST cache/prune[?max_bytes=&older_than_s=] */
static void on_prune(svc *s, reg_req *r, struct areq *q, json_t *j)
{
	struct svc_prune_stats ps;
	kiln_error *err = NULL;
	const char *mb = reg_query(r, "max_bytes");
	int64_t age = query_count(r, "older_than_s", -2);
	uint64_t max = 0;

	if (mb && kiln_parse_size(mb, &max, &err) < 0) {
		fail_err(r, err);
		return;
	}
	if (age == -1) {
		fail(r, 400, "older_than_s: want a number of seconds");
		return;
	}
	if (svc_cache_prune(s, q->team, max, age < 0 ? -1 : age, &ps, &err) < 0)
		fail_err(r, err);
	else
		answer(r, 200, json_pack("{s:I,s:I,s:I,s:I}", "entries_removed", (json_int_t)ps.entries_removed,
					 "files_removed", (json_int_t)ps.files_removed, "bytes_before",
					 (json_int_t)ps.bytes_before, "bytes_after", (json_int_t)ps.bytes_after));
}

static const struct api_route ROUTES[] = {
	{ { "POST", "missing" }, on_missing, BODY_JSON },
	{ { "PUT", "blobs/{digest*}" }, on_blob, BODY_BLOB },
	{ { "POST", "builds" }, on_submit, BODY_JSON },
	{ { "GET", "builds" }, on_list, BODY_NONE },
	{ { "POST", "cache/prune" }, on_prune, BODY_NONE },
	{ { "GET", "builds/{id}" }, on_status, BODY_NONE },
	{ { "GET", "builds/{id}/logs" }, on_logs, BODY_NONE },
	{ { "POST", "builds/{id}/cancel" }, on_cancel, BODY_NONE },
};

static void begin(void *ud, reg_req *r)
{
	svc *s = ud;
	struct areq *q = kiln_xcalloc(1, sizeof(*q));
	struct svc_route_match m;
	kiln_error *err = NULL;
	unsigned st;

	reg_req_set_state(r, q);
	svc_body_start(&q->body, r, BODY_MAX); /* over: answered 413 at the end (a blob's has its own limit) */
	q->route = (const struct api_route *)SVC_ROUTE_FIND(ROUTES, reg_req_method(r), reg_req_path(r) + strlen(PREFIX), &m);
	if (q->route == NULL) {
		fail(r, 404, "no such build service endpoint");
		return;
	}
	if (m.n) {
		q->id = m.param[0];
		m.param[0] = NULL;
	}
	svc_route_match_free(&m);
	q->team = svc_auth_team(r, reg_query(r, "team"), &st, &err);
	if (q->team == NULL) {
		fail(r, st, err ? kiln_error_message(err) : "not allowed");
		kiln_error_free(err);
		return;
	}
	if (q->route->body == BODY_BLOB) {
		const char *enc = reg_req_header(r, "Content-Encoding");
		enum svc_encoding e = enc && strcmp(enc, "zstd") == 0 ? SVC_ENC_ZSTD
				      : enc && strcmp(enc, "gzip") == 0 ? SVC_ENC_GZIP : SVC_ENC_IDENTITY;
		if (enc && e == SVC_ENC_IDENTITY && strcmp(enc, "identity") != 0) {
			fail(r, 400, "Content-Encoding: want zstd or identity");
			return;
		}
		if (svc_blob_begin(s, q->team, q->id, e, 0, &q->w, &err) < 0)
			fail_err(r, err);
	}
}

static void end(void *ud, reg_req *r)
{
	struct areq *q = reg_req_state(r);
	json_t *j = NULL;

	if (q->route->body == BODY_JSON && (j = body_json(r, q)) == NULL)
		return;
	q->route->end(ud, r, q, j);
	json_decref(j);
}

/* Also when the client went away mid-upload: the writer is aborted, nothing stored. */
static void done(void *ud, reg_req *r)
{
	struct areq *q = reg_req_state(r);

	if (q == NULL)
		return;
	svc_blob_abort(q->w);
	kiln_error_free(q->err);
	svc_body_free(&q->body);
	free(q->team);
	free(q->id);
	free(q);
}

static int api_start(svc *s, void **state, kiln_error **err)
{
	s->routes = (struct reg_routes){ .prefix = "/build/", .name = "build", .ud = s, .begin = begin, .body = body, .end = end, .done = done };
	*state = s;
	return reg_server_mount(s->srv, &s->routes, err);
}

const struct svc_frontend svc_api_frontend = { .name = "build API", .start = api_start };
