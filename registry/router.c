/* router.c — the request router of `kiln serve`, with no socket in it: a
 * request (method, URL, headers, query arguments, client address) is routed
 * onto the distribution API, fed its body and answered through reg_router_call.
 * The libmicrohttpd callback (http.c) and the fuzzer (tests/fuzz) both drive it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "registry/internal.h"

#define JSON_TYPE "application/json"
#define DISCARD_MAX (16u << 20)

reg_req *reg_req_new(reg_server *s, const char *method, const char *url)
{
	reg_req *r = kiln_xcalloc(1, sizeof(*r));

	r->srv = s;
	r->method = method;
	r->url = url;
	r->mem = (kiln_buf)KILN_BUF_INIT;
	r->t0_ms = kiln_now_ms();
	return r;
}

static void kv_add(struct reg_kvs *v, const char *key, const char *value)
{
	if (v->n == v->cap) {
		v->cap = v->cap ? 2 * v->cap : 16;
		v->kv = kiln_xrealloc(v->kv, v->cap * sizeof(*v->kv));
	}
	v->kv[v->n].key = key;
	v->kv[v->n].value = value;
	v->n++;
}

void reg_req_add_header(reg_req *r, const char *key, const char *value)
{
	kv_add(&r->headers, key, value);
}

void reg_req_add_arg(reg_req *r, const char *key, const char *value)
{
	kv_add(&r->args, key, value);
}

/* The first value of key (case-insensitive, as libmicrohttpd looks them up). */
static const char *kv_get(const struct reg_kvs *v, const char *key)
{
	for (size_t i = 0; i < v->n; i++)
		if (v->kv[i].key && strcasecmp(v->kv[i].key, key) == 0)
			return v->kv[i].value;
	return NULL;
}

const char *reg_query(reg_req *r, const char *key)
{
	return kv_get(&r->args, key);
}

const char *reg_req_header(reg_req *r, const char *key)
{
	return kv_get(&r->headers, key);
}

void reg_req_each(const reg_req *r, bool args, void (*fn)(void *ud, const char *key, const char *value), void *ud)
{
	const struct reg_kvs *v = args ? &r->args : &r->headers;

	for (size_t i = 0; i < v->n; i++)
		if (v->kv[i].key)
			fn(ud, v->kv[i].key, v->kv[i].value);
}

bool reg_req_content_length(reg_req *r, uint64_t *n)
{
	const char *cl = reg_req_header(r, "Content-Length");
	char *end;

	if (cl == NULL || *cl < '0' || *cl > '9')
		return false;
	errno = 0;
	*n = strtoull(cl, &end, 10);
	return errno == 0 && *end == '\0';
}

int reg_page_args(reg_req *r, long *n, const char **last)
{
	const char *s = reg_query(r, "n");
	char *end;

	*n = -1;
	*last = reg_query(r, "last");
	if (s) {
		long v = strtol(s, &end, 10);
		if (*s == '\0' || *end != '\0' || v < 0 || v > 100000) {
			reg_error(r, 400, "PAGINATION_NUMBER_INVALID", "invalid number of results requested: '%s'", s);
			return -1;
		}
		*n = v;
	}
	return 0;
}

/* ---- routing ---- */

/* /v2/NAME/{manifests/REF, blobs/DIGEST, blobs/uploads/[UUID], tags/list, referrers/DIGEST}.
 * The name may itself contain slashes, so the shape is read from the right. */
static void route(reg_req *r, const char *url)
{
	const char *p, *seg[3] = { NULL, NULL, NULL };
	unsigned nroutes = __atomic_load_n(&r->srv->nroutes, __ATOMIC_ACQUIRE);
	char *path;

	for (unsigned i = 0; i < nroutes; i++) {
		const struct reg_routes *rt = r->srv->routes[i];
		if (rt->match ? rt->match(rt->ud, r) : strncmp(url, rt->prefix, strlen(rt->prefix)) == 0) {
			r->route = R_EXT;
			r->ext = rt;
			return;
		}
	}

	if (strcmp(url, "/token") == 0) {
		r->route = R_TOKEN;
		return;
	}
	if (r->srv->cfg.ui && (strcmp(url, "/") == 0 || strcmp(url, "/ui") == 0 || strncmp(url, "/ui/", 4) == 0)) {
		r->route = R_UI;
		return;
	}
	if (r->srv->cfg.ui && strncmp(url, "/kiln/v1/", 9) == 0) {
		r->route = R_OVERVIEW;
		return;
	}
	if (strcmp(url, "/metrics") == 0 || strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0) {
		r->route = url[1] == 'm' ? R_METRICS : url[1] == 'h' ? R_HEALTHZ : R_READYZ;
		return;
	}
	if (strncmp(url, "/v2", 3) != 0 || (url[3] != '\0' && url[3] != '/'))
		return;
	if (url[3] == '\0' || strcmp(url + 3, "/") == 0) {
		r->route = R_BASE;
		return;
	}
	if (strcmp(url, "/v2/_catalog") == 0) {
		r->route = R_CATALOG;
		return;
	}
	path = kiln_xstrdup(url + 4);
	/* Split off up to three trailing segments (a trailing slash is an empty one). */
	for (int i = 0; i < 3; i++) {
		char *slash = strrchr(path, '/');
		if (slash == NULL)
			break;
		seg[i] = slash + 1;
		*slash = '\0';
	}
	/* Reassemble: seg[0] is last, seg[1] second to last, seg[2] third. */
	p = NULL;
	if (seg[1] && strcmp(seg[1], "tags") == 0 && seg[0] && strcmp(seg[0], "list") == 0) {
		r->route = R_TAGS;
		p = seg[2];
	} else if (seg[1] && strcmp(seg[1], "manifests") == 0) {
		r->route = R_MANIFEST;
		r->ref = kiln_xstrdup(seg[0]);
		p = seg[2];
	} else if (seg[1] && strcmp(seg[1], "referrers") == 0) {
		r->route = R_REFERRERS;
		r->ref = kiln_xstrdup(seg[0]);
		p = seg[2];
	} else if (seg[2] && strcmp(seg[2], "blobs") == 0 && seg[1] && strcmp(seg[1], "uploads") == 0) {
		r->route = seg[0][0] ? R_UPLOAD : R_UPLOAD_START;
		r->ref = seg[0][0] ? kiln_xstrdup(seg[0]) : NULL;
	} else if (seg[1] && strcmp(seg[1], "blobs") == 0 && strcmp(seg[0], "_exists") == 0) {
		r->route = R_BLOBS_EXIST; /* "_exists" is no digest: no blob route is shadowed */
		p = seg[2];
	} else if (seg[1] && strcmp(seg[1], "blobs") == 0 && strcmp(seg[0], "_batch") == 0) {
		r->route = R_BLOBS_BATCH; /* nor by "_batch" */
		p = seg[2];
	} else if (seg[1] && strcmp(seg[1], "blobs") == 0) {
		r->route = strcmp(seg[0], "uploads") == 0 ? R_UPLOAD_START : R_BLOB;
		r->ref = r->route == R_BLOB ? kiln_xstrdup(seg[0]) : NULL;
		p = seg[2];
	} else {
		free(path);
		return;
	}
	/* p is the last name segment split off too far: glue it back. */
	if (p)
		r->name = *path ? kiln_xasprintf("%s/%s", path, p) : kiln_xstrdup(p);
	else
		r->name = kiln_xstrdup(path);
	free(path);
}

static int method_is(reg_req *r, const char *m)
{
	return strcmp(r->method, m) == 0;
}

static void begin(reg_req *r)
{
	int get = method_is(r, "GET") || method_is(r, "HEAD");

	if (r->route == R_NONE) {
		reg_error(r, 404, "NOT_FOUND", "no such endpoint");
		return;
	}
	if (r->name && !oci_name_valid(r->name)) {
		reg_error(r, 400, "NAME_INVALID", "invalid repository name '%s'", r->name);
		return;
	}
	if (r->route == R_EXT) {
		r->ext->begin(r->ext->ud, r);
		return;
	}
	if (r->route == R_HEALTHZ || r->route == R_READYZ) { /* for load balancers: no credentials */
		if (!get)
			reg_error(r, 405, "UNSUPPORTED", "method %s not allowed here", r->method);
		else
			reg_health_handle(r);
		return;
	}
	if (r->route == R_UI || r->route == R_OVERVIEW) { /* files for anyone; the JSON asks who is asking */
		if (!get)
			reg_error(r, 405, "UNSUPPORTED", "method %s not allowed here", r->method);
		else if (r->route == R_UI)
			reg_ui_handle(r);
		else
			reg_overview_handle(r);
		return;
	}
	if (reg_auth_request(r) < 0)
		return;
	switch (r->route) {
	case R_METRICS:
		reg_metrics_handle(r);
		return;
	case R_TOKEN:
		reg_token_handle(r);
		return;
	case R_BASE:
		if (!get)
			break;
		reg_respond(r, 200, "{}", 2, JSON_TYPE);
		return;
	case R_CATALOG:
		if (!get)
			break;
		reg_catalog_handle(r);
		return;
	case R_TAGS:
		if (!get)
			break;
		reg_tags_handle(r);
		return;
	case R_REFERRERS:
		if (!get)
			break;
		reg_referrers_handle(r);
		return;
	case R_BLOB:
		if (!get && !method_is(r, "DELETE"))
			break;
		reg_blob_handle(r);
		return;
	case R_BLOBS_EXIST:
		reg_exists_begin(r);
		return;
	case R_BLOBS_BATCH:
		reg_batch_begin(r);
		return;
	case R_MANIFEST:
		if (!get && !method_is(r, "PUT") && !method_is(r, "DELETE"))
			break;
		reg_manifest_begin(r);
		return;
	case R_UPLOAD_START:
		if (!method_is(r, "POST"))
			break;
		reg_upload_begin(r);
		return;
	case R_UPLOAD:
		if (!method_is(r, "GET") && !method_is(r, "PATCH") && !method_is(r, "PUT") && !method_is(r, "DELETE"))
			break;
		reg_upload_begin(r);
		return;
	default:
		break;
	}
	reg_error(r, 405, "UNSUPPORTED", "method %s not allowed here", r->method);
}

static void finish(reg_req *r)
{
	if (r->route == R_EXT)
		r->ext->end(r->ext->ud, r);
	else if (r->route == R_MANIFEST)
		reg_manifest_finish(r);
	else if (r->route == R_BLOBS_EXIST)
		reg_exists_finish(r);
	else if (r->route == R_BLOBS_BATCH)
		reg_batch_finish(r);
	else if (r->route == R_UPLOAD || r->route == R_UPLOAD_START)
		reg_upload_finish(r);
}

static void sink(reg_req *r, const char *data, size_t len)
{
	kiln_error *err = NULL;

	r->received += len;
	switch (r->body) {
	case BODY_MEM:
		if (r->mem.len + len > r->mem_max) {
			reg_error(r, 413, "SIZE_INVALID", "body larger than %llu bytes", (unsigned long long)r->mem_max);
			return;
		}
		kiln_buf_add(&r->mem, data, len);
		return;
	case BODY_UPLOAD:
		if (r->srv->cfg.blob_max && r->up->offset + len > r->srv->cfg.blob_max) {
			reg_error(r, 413, "SIZE_INVALID", "blob larger than %llu bytes",
				  (unsigned long long)r->srv->cfg.blob_max);
			return;
		}
		if (reg_upload_write(r->up, data, len, &err) < 0)
			reg_internal(r, err);
		return;
	case BODY_BATCH:
		reg_batch_body(r, data, len);
		return;
	case BODY_IGNORE:
		return;
	}
}

static int has_body(reg_req *r)
{
	const char *cl = reg_req_header(r, "Content-Length");

	return (cl && strcmp(cl, "0") != 0) || reg_req_header(r, "Transfer-Encoding") != NULL;
}

static int drain_first(reg_req *r)
{
	const char *expect = reg_req_header(r, "Expect");
	uint64_t n;

	if (expect && strcasecmp(expect, "100-continue") == 0)
		return 0;
	return !reg_req_header(r, "Transfer-Encoding") && reg_req_content_length(r, &n) && n <= DISCARD_MAX;
}

enum reg_step reg_router_call(reg_req *r, const char *data, size_t len)
{
	if (!r->begun) {
		r->begun = 1;
		reg_req_take_id(r);
		route(r, r->url);
		reg_metrics_begin(r);
		begin(r);
		/* An answer before a body is sent now when the client waits for it
		 * (Expect: 100-continue) or the body is too large to read, and the
		 * server drops the connection; a body it can afford is read and
		 * dropped first, as after a mid-body error, else closing on unread
		 * bytes resets the connection and the client may never see the
		 * answer. A bodiless request is answered in the last call. */
		if (r->resp && has_body(r) && !drain_first(r)) {
			r->body_error = 1;
			return REG_STEP_RESPOND;
		}
		return REG_STEP_CONTINUE;
	}
	if (len > 0) {
		if (r->resp == NULL && r->route == R_EXT) {
			r->received += len;
			if (r->ext->body(r->ext->ud, r, data, len) < 0)
				return REG_STEP_ABORT;
		} else if (r->resp == NULL)
			sink(r, data, len);
		else
			r->discarded += len;
		/* After an error (e.g. over a limit) the rest of the body is read and
		 * dropped so the client gets the answer, but only so much of it. */
		return r->discarded > DISCARD_MAX ? REG_STEP_ABORT : REG_STEP_CONTINUE;
	}
	if (r->body_error)
		return REG_STEP_CONTINUE;
	if (r->resp == NULL)
		finish(r);
	if (r->resp == NULL)
		reg_error(r, 500, "UNKNOWN", "no response");
	return REG_STEP_RESPOND;
}

void reg_req_free(reg_req *r)
{
	reg_server *s;

	if (r == NULL)
		return;
	s = r->srv;
	reg_metrics_end(r);
	reg_access_log(r);
	if (r->ext && r->ext->done)
		r->ext->done(r->ext->ud, r);
	if (r->up)
		reg_upload_release(&s->uploads, r->up);
	reg_batch_free(r);
	if (r->stream_slot)
		reg_streams_release(&s->streams);
	if (r->resp)
		MHD_destroy_response(r->resp);
	kiln_buf_free(&r->mem);
	free(r->headers.kv);
	free(r->args.kv);
	free(r->scopes);
	free(r->team);
	free(r->name);
	free(r->ref);
	free(r);
}

/* ---- what a mounted module sees of a request (registry.h) ---- */

int reg_server_mount(reg_server *s, const struct reg_routes *rt, kiln_error **err)
{
	if (s->nroutes == REG_ROUTES_MAX)
		return kiln_err(err, KILN_E_LIMIT, "at most %d route prefixes can be mounted", REG_ROUTES_MAX);
	s->routes[s->nroutes] = rt;
	__atomic_store_n(&s->nroutes, s->nroutes + 1, __ATOMIC_RELEASE);
	return 0;
}

const char *reg_req_method(const reg_req *r)
{
	return r->method;
}

const char *reg_req_path(const reg_req *r)
{
	return r->url;
}

const char *reg_req_client(const reg_req *r)
{
	return r->client;
}

void reg_req_set_state(reg_req *r, void *state)
{
	r->ext_state = state;
}

void *reg_req_state(const reg_req *r)
{
	return r->ext_state;
}
