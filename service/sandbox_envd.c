/* sandbox_envd.c — envd's plane over HTTP/1.1: requests routed to a sandbox
 * by the E2b-Sandbox-Id header or a Host of 49983-<id>.<domain>, checked
 * against its X-Access-Token, then served by runtime/ (Connect methods,
 * unary or streamed through a thread), /files (multipart or raw) and
 * /health.  A sandbox that is unknown, paused or not the token's gets 502. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "service/sandbox_api.h"

static bool envd_path(const char *p)
{
	return strncmp(p, "/process.Process/", 17) == 0 || strncmp(p, "/filesystem.Filesystem/", 23) == 0 ||
	       strcmp(p, "/files") == 0 || strcmp(p, "/health") == 0;
}

/* Host "<port>-<id>.<domain>[:P]": the port (0 if not that shape) and id. */
static unsigned host_route(const struct svc_sandboxes *s, const char *host, char **id)
{
	size_t dl = strlen(s->domain), hl;
	const char *dash, *dot;
	unsigned port = 0;

	*id = NULL;
	if (host == NULL)
		return 0;
	hl = strcspn(host, ":");
	dash = strchr(host, '-');
	dot = strchr(host, '.');
	if (dash == NULL || dot == NULL || dash > dot || hl <= dl + 1 || host[hl - dl - 1] != '.' ||
	    strncmp(host + hl - dl, s->domain, dl) != 0 || (size_t)(dot - host) != hl - dl - 1)
		return 0;
	for (const char *p = host; p < dash; p++) {
		if (*p < '0' || *p > '9' || port > 65535)
			return 0;
		port = port * 10 + (unsigned)(*p - '0');
	}
	*id = kiln_xstrndup(dash + 1, (size_t)(dot - dash - 1));
	return port;
}

unsigned sbx_port_of(struct svc_sandboxes *s, reg_req *r)
{
	char *id = NULL;
	unsigned port = host_route(s, reg_req_header(r, "Host"), &id);

	free(id);
	return port == SBX_ENVD_PORT ? 0 : port;
}

bool sbx_envd_match(struct svc_sandboxes *s, reg_req *r, char **id)
{
	const char *hdr = reg_req_header(r, "E2b-Sandbox-Id");
	unsigned port = host_route(s, reg_req_header(r, "Host"), id);

	if (port)
		return true;
	if (!envd_path(reg_req_path(r)))
		return false;
	*id = hdr ? kiln_xstrdup(hdr) : NULL;
	return true;
}

/* E2B's proxy answer for a sandbox it cannot reach; the SDK reads it as
 * "not running" (isRunning() false, RPCs a TimeoutError). */
static void not_found(reg_req *r, const char *id)
{
	json_t *j = json_pack("{s:s,s:s,s:i}", "sandboxId", id ? id : "", "message", "The sandbox was not found", "code",
			      502);
	e2b_reply_json(r, 502, j);
}

/* Authorization: Basic base64("user:") names who runs the request. */
static int call_user(reg_req *r, char **user)
{
	const char *h = reg_req_header(r, "Authorization");
	char *dec, *colon;

	*user = NULL;
	if (h == NULL)
		return 0;
	if (strncmp(h, "Basic ", 6) != 0 || strlen(h) > 512 || (dec = kiln_b64_decode(h + 6)) == NULL)
		return -1;
	colon = strchr(dec, ':');
	if (colon)
		*colon = '\0';
	if (*dec == '\0' || strlen(dec) > 64 || strspn(dec, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != strlen(dec)) {
		free(dec);
		return -1;
	}
	*user = dec;
	return 0;
}

/* ---- Connect: a unary answer is collected, a stream goes through a pipe
 * that a thread running the handler fills and the response drains ---- */

struct unary {
	int status;
	char type[64];
	kiln_buf out;
};

static int u_begin(void *ctx, int status, const char *type)
{
	struct unary *u = ctx;
	u->status = status;
	snprintf(u->type, sizeof(u->type), "%s", type);
	return 0;
}

static int u_write(void *ctx, const void *data, size_t len)
{
	kiln_buf_add(&((struct unary *)ctx)->out, data, len);
	return 0;
}

struct pipe {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	kiln_buf buf;
	size_t off;
	bool done, gone;
	int refs;                /* the thread and the response */
	/* the call */
	rt_host *host;
	rt_sandbox *sb;
	const struct rt_route *route;
	struct rt_call call;
	char *user;
	kiln_buf body;
};

static void pipe_unref(struct pipe *p)
{
	pthread_mutex_lock(&p->mu);
	bool last = --p->refs == 0;
	pthread_mutex_unlock(&p->mu);
	if (!last)
		return;
	kiln_buf_free(&p->buf);
	kiln_buf_free(&p->body);
	free(p->user);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

static int p_begin(void *ctx, int status, const char *type)
{
	return 0; /* a stream is always 200 application/connect+json, sent already */
}

#define PIPE_MAX (4u << 20) /* unread bytes before the handler waits for the client */

static int p_write(void *ctx, const void *data, size_t len)
{
	struct pipe *p = ctx;
	int rc;

	pthread_mutex_lock(&p->mu);
	while (!p->gone && p->buf.len - p->off > PIPE_MAX)
		pthread_cond_wait(&p->cv, &p->mu);
	if (!p->gone) {
		kiln_buf_add(&p->buf, data, len);
		pthread_cond_broadcast(&p->cv);
	}
	rc = p->gone ? -1 : 0;
	pthread_mutex_unlock(&p->mu);
	return rc;
}

static void *pipe_main(void *arg)
{
	struct pipe *p = arg;
	struct rt_writer w = { p_begin, p_write, p };

	rt_serve(p->sb, p->route, &p->call, p->body.buf, p->body.len, &w);
	rt_host_release(p->host, p->sb);
	pthread_mutex_lock(&p->mu);
	p->done = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pipe_unref(p);
	return NULL;
}

static long pipe_read(void *ud, uint64_t pos, char *buf, size_t max)
{
	struct pipe *p = ud;
	long n = 0;

	pthread_mutex_lock(&p->mu);
	while (p->buf.len == p->off && !p->done)
		pthread_cond_wait(&p->cv, &p->mu);
	if (p->buf.len > p->off) {
		n = (long)(p->buf.len - p->off < max ? p->buf.len - p->off : max);
		memcpy(buf, p->buf.buf + p->off, (size_t)n);
		p->off += (size_t)n;
		if (p->off == p->buf.len)
			p->buf.len = p->off = 0;
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
	return n;
}

/* The response is over (sent, or the client went away): the handler stops
 * at its next write; background processes stay with the sandbox. */
static void pipe_gone(void *ud)
{
	struct pipe *p = ud;

	pthread_mutex_lock(&p->mu);
	p->gone = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pipe_unref(p);
}

static void serve_connect(struct svc_sandboxes *s, reg_req *r, struct sbx_req *q, rt_sandbox *sb,
			  const struct rt_route *route, char *user)
{
	const char *tmo = reg_req_header(r, "Connect-Timeout-Ms"), *ka = reg_req_header(r, "Keepalive-Ping-Interval");
	struct rt_call call = { user, tmo ? strtoull(tmo, NULL, 10) : 0, ka ? (uint32_t)strtoul(ka, NULL, 10) : 0 };

	if (!route->streaming) {
		struct unary u = { 500, "application/json", KILN_BUF_INIT };
		struct rt_writer w = { u_begin, u_write, &u };
		rt_serve(sb, route, &call, q->body.buf.buf, q->body.buf.len, &w);
		rt_host_release(s->host, sb);
		reg_respond(r, (unsigned)u.status, u.out.buf, u.out.len, u.type);
		kiln_buf_free(&u.out);
		free(user);
		return;
	}
	struct pipe *p = kiln_xcalloc(1, sizeof(*p));
	pthread_t t;

	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->buf = (kiln_buf)KILN_BUF_INIT;
	p->body = q->body.buf;
	q->body.buf = (kiln_buf)KILN_BUF_INIT;
	p->host = s->host;
	p->sb = sb;
	p->route = route;
	p->user = user;
	p->call = call;
	p->call.user = user;
	p->refs = 2;
	if (pthread_create(&t, NULL, pipe_main, p) != 0) {
		rt_host_release(s->host, sb);
		p->refs = 1;
		pipe_unref(p);
		return e2b_reply_error(r, 503, "cannot start a thread for the stream");
	}
	pthread_detach(t);
	reg_respond_stream(r, 200, "application/connect+json", pipe_read, p, pipe_gone);
}

/* ---- /files ---- */

static void files_error(reg_req *r, kiln_error *err)
{
	/* envd answers a permission refused with 401 */
	unsigned st = err->kind == KILN_E_USAGE && !kiln_error_disk_full(err) ? 401 : svc_err_status(err);

	e2b_reply_error(r, st, "%s", st == 507 ? kiln_error_message(err) : svc_err_reply(err, st, "envd files"));
	kiln_error_free(err);
}

/* The parts of a multipart/form-data body named "file": their data and
 * filename.  Parsed by the boundary the Content-Type gives (RFC 7578). */
struct part {
	const char *data;
	size_t len;
	char *filename;
};

static const char *mem_find(const char *h, size_t hl, const char *n, size_t nl)
{
	return nl <= hl ? memmem(h, hl, n, nl) : NULL;
}

static int multipart(const char *type, const kiln_buf *b, struct part **parts, size_t *n, kiln_error **err)
{
	const char *bp = strstr(type, "boundary=");
	char delim[256];
	size_t dl, off;

	*parts = NULL;
	*n = 0;
	if (bp == NULL)
		return kiln_err(err, KILN_E_INVALID, "multipart/form-data without a boundary");
	bp += 9;
	size_t bl = strcspn(bp, ";");
	if (bl >= 2 && bp[0] == '"' && bp[bl - 1] == '"') {
		bp++;
		bl -= 2;
	}
	if (bl == 0 || bl > 200)
		return kiln_err(err, KILN_E_INVALID, "multipart/form-data: a boundary of %zu characters (1-200)", bl);
	dl = (size_t)snprintf(delim, sizeof(delim), "--%.*s", (int)bl, bp);
	const char *p = mem_find(b->buf, b->len, delim, dl);
	if (p == NULL)
		return kiln_err(err, KILN_E_INVALID, "multipart/form-data: the boundary is not in the body");
	off = (size_t)(p - b->buf) + dl;
	while (off + 2 <= b->len && memcmp(b->buf + off, "--", 2) != 0) {
		const char *head = b->buf + off, *hend = mem_find(head, b->len - off, "\r\n\r\n", 4);
		if (hend == NULL)
			return kiln_err(err, KILN_E_INVALID, "multipart/form-data: a part without the end of its headers");
		const char *data = hend + 4;
		const char *next = mem_find(data, b->len - (size_t)(data - b->buf), delim, dl);
		if (next == NULL || next - data < 2)
			return kiln_err(err, KILN_E_INVALID, "multipart/form-data: a part without its closing boundary");
		char *h = kiln_xstrndup(head, (size_t)(hend - head));
		const char *name = strstr(h, "name=\""), *fn = strstr(h, "filename=\"");
		if (name && strncmp(name + 6, "file\"", 5) == 0 && (name == h || name[-1] != 'e')) {
			*parts = kiln_xrealloc(*parts, (*n + 1) * sizeof(**parts));
			(*parts)[*n].data = data;
			(*parts)[*n].len = (size_t)(next - data) - 2; /* the CRLF before the delimiter */
			(*parts)[*n].filename = fn ? kiln_xstrndup(fn + 10, strcspn(fn + 10, "\"")) : NULL;
			(*n)++;
		}
		free(h);
		off = (size_t)(next - b->buf) + dl;
	}
	if (*n == 0)
		return kiln_err(err, KILN_E_INVALID, "multipart/form-data: no part named \"file\"");
	return 0;
}

static void files_post(struct svc_sandboxes *s, reg_req *r, rt_sandbox *sb, const char *user, struct sbx_req *q)
{
	const char *type = reg_req_header(r, "Content-Type"), *path = reg_query(r, "path");
	const char *enc = reg_req_header(r, "Content-Encoding");
	struct part *parts = NULL, one;
	kiln_error *err = NULL;
	kiln_buf plain = KILN_BUF_INIT;
	const kiln_buf *body = &q->body.buf;
	size_t n = 0;
	json_t *out = json_array();

	if (enc && strcasecmp(enc, "identity") != 0 && strcasecmp(enc, "gzip") != 0) {
		json_decref(out);
		return e2b_reply_error(r, 415, "Content-Encoding %.32s: kiln takes uploads as they are or gzip", enc);
	}
	if (enc && strcasecmp(enc, "gzip") == 0) {
		/* the SDK's gzip upload; inflated within the same limit as a plain one */
		if (kiln_gunzip(body->buf ? body->buf : "", body->len, s->max_upload, &plain, &err) < 0) {
			json_decref(out);
			e2b_reply_error(r, err->kind == KILN_E_LIMIT ? 413 : 400, "%s", kiln_error_message(err));
			kiln_error_free(err);
			kiln_buf_free(&plain);
			return;
		}
		body = &plain;
	}
	if (type && strncmp(type, "multipart/form-data", 19) == 0) {
		if (multipart(type, body, &parts, &n, &err) < 0)
			goto fail;
	} else {
		if (path == NULL) {
			err = NULL;
			kiln_err(&err, KILN_E_INVALID, "an upload of %s needs ?path=", type ? type : "raw bytes");
			goto fail;
		}
		one = (struct part){ body->buf ? body->buf : "", body->len, NULL };
		parts = kiln_xmalloc(sizeof(one));
		parts[0] = one;
		n = 1;
	}
	for (size_t i = 0; i < n; i++) {
		const char *dest = path && *path ? path : parts[i].filename;
		char *abs = NULL;
		if (dest == NULL || *dest == '\0') {
			kiln_err(&err, KILN_E_INVALID, "file %zu: no path (?path= or the part's filename)", i + 1);
			goto fail;
		}
		if (rt_file_write(sb, user, dest, parts[i].data, parts[i].len, &abs, &err) < 0)
			goto fail;
		const char *base = strrchr(abs, '/');
		json_array_append_new(out, json_pack("{s:s,s:s,s:s}", "path", abs, "name", base ? base + 1 : abs, "type",
						     "file"));
		free(abs);
	}
	e2b_reply_json(r, 200, out);
	out = NULL;
fail:
	if (err)
		files_error(r, err);
	json_decref(out);
	for (size_t i = 0; i < n; i++)
		free(parts[i].filename);
	free(parts);
	kiln_buf_free(&plain);
}

static void files_get(reg_req *r, rt_sandbox *sb, const char *user)
{
	kiln_buf data = KILN_BUF_INIT;
	kiln_error *err = NULL;
	const char *path = reg_query(r, "path");

	const char *acc = reg_req_header(r, "Accept-Encoding");
	kiln_buf gz = KILN_BUF_INIT;

	if (rt_file_read(sb, user, path ? path : "", &data, &err) < 0) {
		files_error(r, err);
	} else if (acc && strstr(acc, "gzip") && data.len > 0 && kiln_gzip(data.buf, data.len, 1, &gz, &err) == 0) {
		/* as envd: gzip only when asked (level 1: the guest link, not the
		 * ratio, is what a download waits on) */
		reg_respond(r, 200, gz.buf, gz.len, "application/octet-stream");
		reg_header(r, "Content-Encoding", "gzip");
		reg_header(r, "Vary", "Accept-Encoding");
	} else {
		kiln_error_free(err);
		reg_respond(r, 200, data.buf ? data.buf : "", data.len, "application/octet-stream");
	}
	kiln_buf_free(&gz);
	kiln_buf_free(&data);
}

void sbx_envd_serve(struct svc_sandboxes *s, reg_req *r, struct sbx_req *q)
{
	const char *path = reg_req_path(r), *m = reg_req_method(r), *uq;
	char *hid = NULL, *user = NULL;
	unsigned port = host_route(s, reg_req_header(r, "Host"), &hid);
	kiln_error *err = NULL;
	rt_sandbox *sb;

	free(hid);
	if (port && port != SBX_ENVD_PORT) {
		/* a sandbox's own server: public, as E2B's getHost traffic is */
		if ((sb = rt_host_sandbox(s->host, q->sandbox, &err)) == NULL) {
			kiln_error_free(err);
			return not_found(r, q->sandbox);
		}
		sbx_port_serve(s, r, q, sb, port);
		rt_host_release(s->host, sb);
		return;
	}
	if (q->sandbox == NULL)
		return e2b_reply_error(r, 400, "missing header E2b-Sandbox-Id (or a Host of %u-ID.%s)", SBX_ENVD_PORT,
				       s->domain);
	if ((sb = rt_host_envd(s->host, q->sandbox, reg_req_header(r, "X-Access-Token"), &err)) == NULL) {
		if (err->kind != KILN_E_NOTFOUND)
			kiln_warn("sandbox %.64s: %s", q->sandbox, kiln_error_message(err));
		kiln_error_free(err);
		return not_found(r, q->sandbox);
	}
	if (call_user(r, &user) < 0) {
		rt_host_release(s->host, sb);
		return e2b_reply_json(r, 401, json_pack("{s:s,s:s}", "code", "unauthenticated", "message",
							"Authorization: want Basic base64(\"USER:\")"));
	}
	/* /files names its user in the query */
	uq = reg_query(r, "username");
	if (strcmp(path, "/files") == 0 && uq && *uq && user == NULL)
		user = kiln_xstrdup(uq);
	if (strcmp(path, "/health") == 0) {
		reg_respond(r, 204, NULL, 0, NULL);
	} else if (strcmp(path, "/files") == 0 && strcmp(m, "GET") == 0) {
		files_get(r, sb, user);
	} else if (strcmp(path, "/files") == 0 && strcmp(m, "POST") == 0) {
		files_post(s, r, sb, user, q);
	} else if (strcmp(path, "/files") == 0) {
		e2b_reply_error(r, 405, "/files: GET or POST, not %.16s", m);
	} else {
		const struct rt_route *route = rt_route_find(path);
		if (route == NULL || strcmp(m, "POST") != 0) {
			char *b = rt_error_body(RT_UNIMPLEMENTED, route ? "Connect methods are POSTed" : "no such method");
			reg_respond(r, route ? 405 : 404, b, strlen(b), "application/json");
			free(b);
		} else {
			serve_connect(s, r, q, sb, route, user); /* takes user and the plane */
			return;
		}
	}
	rt_host_release(s->host, sb);
	free(user);
}
