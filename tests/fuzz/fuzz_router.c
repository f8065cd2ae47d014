/* fuzz_router.c — the registry's request router (registry/router.c) on
 * arbitrary requests, with the store, db and uploads on a temporary directory
 * and no socket.  An input is requests separated by "\n===\n", each
 *   METHOD SP URL[?QUERY] "\n" (HEADER ":" VALUE "\n")* "\n" BODY
 * fed as libmicrohttpd would (unescaped path, query arguments, the body in
 * pieces).  "@LOC" in a URL is the Location of the last answer that had one
 * (an upload session), "@DIG" the sha256 of the bodies sent since the last
 * upload started, "@TOK" in
 * a header a valid token secret.  A first byte '!' turns auth on. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registry/internal.h"
#include "registry/server_limits.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RESET_EVERY 256

static reg_server *srv;
static char *dir, *secret;
static unsigned runs;

static void server_down(void)
{
	reg_server_stop(srv);
	srv = NULL;
	if (dir) {
		kiln_error *err = NULL;
		if (kiln_rm_rf(dir, &err) < 0)
			kiln_error_free(err);
		free(dir);
		dir = NULL;
	}
	free(secret);
	secret = NULL;
}

/* A fresh data directory on tmpfs (fsync is free there) every RESET_EVERY
 * inputs, so upload sessions and rows do not pile up. */
static void server_up(void)
{
	struct reg_config c;
	kiln_error *err = NULL;
	const char *scopes[] = { "*:*", NULL };
	char tmpl[] = "/dev/shm/kiln-fuzz-router.XXXXXX";

	if (srv && runs % RESET_EVERY != 0)
		return;
	if (srv == NULL)
		atexit(server_down); /* the last data directory goes when the run ends */
	server_down();
	if (mkdtemp(tmpl) == NULL) {
		strcpy(tmpl, "/tmp/kiln-fuzz-router.XXXXXX");
		if (mkdtemp(tmpl) == NULL)
			abort();
	}
	dir = kiln_xstrdup(tmpl);
	reg_config_init(&c);
	free(c.data_dir);
	c.data_dir = kiln_xstrdup(dir);
	c.blob_max = 1 << 20;
	c.manifest_max = 64 << 10;
	c.auth_fail_burst = 3;
	if (reg_token_create(&c, "fuzz", scopes, 0, &secret, &err) < 0 || (srv = reg_server_open(&c, &err)) == NULL) {
		fprintf(stderr, "fuzz_router: %s\n", kiln_error_message(err));
		abort();
	}
	/* auth is switched per input; the key is made now so both work. */
	reg_auth_key(dir, srv->auth_key, &err);
	kiln_error_free(err);
	reg_config_free(&c);
}

/* s with every "@NAME" replaced by val. */
static char *subst(const char *s, const char *name, const char *val)
{
	kiln_buf b = KILN_BUF_INIT;
	size_t n = strlen(name);
	const char *p;

	while ((p = strstr(s, name)) != NULL) {
		kiln_buf_add(&b, s, (size_t)(p - s));
		kiln_buf_addf(&b, "%s", val);
		s = p + n;
	}
	kiln_buf_addf(&b, "%s", s);
	return kiln_buf_detach(&b);
}

struct state {
	char loc[512];
	kiln_buf bodies;  /* the bodies since the last Location */
};

static void one_request(struct state *st, const char *req, size_t len, int auth)
{
	const char *end = req + len, *nl = memchr(req, '\n', len), *p;
	char *line, *url, *query, *method, *hdrs = NULL, dig[KILN_DIGEST_MAX];
	kiln_strv keep = KILN_STRV_INIT;
	reg_req *r;
	size_t body_len;
	const char *body;

	if (nl == NULL)
		return;
	line = kiln_xstrndup(req, (size_t)(nl - req));
	url = strchr(line, ' ');
	if (url == NULL || url == line) {
		free(line);
		return;
	}
	*url++ = '\0';
	method = line;
	/* Headers until an empty line; the body is the rest. */
	p = nl + 1;
	if (p < end && *p == '\n') {
		hdrs = kiln_xstrdup("");
		body = p + 1;
	} else {
		const char *blank = memmem(p, (size_t)(end - p), "\n\n", 2);
		hdrs = kiln_xstrndup(p, (size_t)((blank ? blank : end) - p));
		body = blank ? blank + 2 : end;
	}
	if (body > end)
		body = end;
	body_len = (size_t)(end - body);
	if (body_len)
		kiln_buf_add(&st->bodies, body, body_len);
	kiln_digest_buf(KILN_SHA256, st->bodies.buf ? st->bodies.buf : "", st->bodies.len, dig);
	{
		char *u1 = subst(url, "@LOC", st->loc), *u2 = subst(u1, "@DIG", dig);
		free(u1);
		kiln_strv_push(&keep, u2);
		free(u2);
	}
	url = keep.v[keep.n - 1];
	query = strchr(url, '?');
	if (query)
		*query++ = '\0';
	MHD_http_unescape(url);
	srv->cfg.auth = auth;
	r = reg_req_new(srv, method, url);
	for (char *h = hdrs, *next; h && *h; h = next) {
		char *colon, *v, *full;
		next = strchr(h, '\n');
		if (next)
			*next++ = '\0';
		colon = strchr(h, ':');
		if (colon == NULL)
			continue;
		*colon = '\0';
		for (v = colon + 1; *v == ' '; v++)
			;
		full = subst(v, "@TOK", secret);
		kiln_strv_push(&keep, full);
		free(full);
		reg_req_add_header(r, h, keep.v[keep.n - 1]);
	}
	for (char *a = query, *next; a && *a; a = next) {
		char *eq;
		next = strchr(a, '&');
		if (next)
			*next++ = '\0';
		eq = strchr(a, '=');
		if (eq) {
			*eq++ = '\0';
			MHD_http_unescape(eq);
		}
		MHD_http_unescape(a);
		reg_req_add_arg(r, a, eq);
	}
	snprintf(r->client, sizeof(r->client), "127.0.0.%u", (unsigned)(len % 3) + 1);
	if (reg_router_call(r, NULL, 0) == REG_STEP_CONTINUE) {
		/* The body in two pieces, as a socket might deliver it. */
		size_t half = body_len / 2;
		enum reg_step s = REG_STEP_CONTINUE;
		if (half)
			s = reg_router_call(r, body, half);
		if (s == REG_STEP_CONTINUE && body_len - half)
			s = reg_router_call(r, body + half, body_len - half);
		if (s == REG_STEP_CONTINUE)
			s = reg_router_call(r, NULL, 0);
		if (s == REG_STEP_RESPOND && (r->resp == NULL || r->status < 100 || r->status > 599))
			__builtin_trap();
	} else if (r->resp == NULL) {
		__builtin_trap();
	}
	if (r->resp) {
		const char *loc = MHD_get_response_header(r->resp, "Location");
		if (loc && strlen(loc) < sizeof(st->loc)) {
			snprintf(st->loc, sizeof(st->loc), "%s", loc);
			if (r->route == R_UPLOAD_START)
				st->bodies.len = 0;
		}
	}
	reg_req_free(r);
	kiln_strv_free(&keep);
	free(hdrs);
	free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data, *end = s + size;
	struct state st = { "", KILN_BUF_INIT };
	int auth = 0, n = 0;

	if (size > 1 << 16)
		return 0;
	server_up();
	runs++;
	/* A fresh limiter per input, so an input's answers do not depend on the last. */
	reg_limits_free(srv->limits);
	srv->limits = reg_limits_new(&srv->cfg);
	if (size && s[0] == '!') {
		auth = 1;
		s++;
	}
	while (s < end && n++ < 16) {
		const char *sep = memmem(s, (size_t)(end - s), "\n===\n", 5);
		size_t len = sep ? (size_t)(sep - s) : (size_t)(end - s);
		one_request(&st, s, len, auth);
		s += len + (sep ? 5 : 0);
	}
	kiln_buf_free(&st.bodies);
	return 0;
}
