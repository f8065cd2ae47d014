/* route.c — the service core's route table: a frontend's rows of method
 * and path pattern ("builds/{id}/logs"), matched in order against a request
 * path below the frontend's prefix, the {name} segments captured.  One
 * matcher for every frontend, so none parses its paths by hand; and the one
 * body reader with its size limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/service.h"

/* Does one pattern match path?  Captures into m (freed by the caller). */
static bool match_one(const char *pat, const char *path, struct svc_route_match *m)
{
	m->n = 0;
	while (*pat) {
		if (*pat == '{') {
			const char *close = strchr(pat, '}');
			if (close == NULL || m->n >= SVC_ROUTE_PARAMS)
				return false;
			bool rest = close > pat + 1 && close[-1] == '*'; /* {name*}: the rest, slashes too */
			size_t len = rest ? strlen(path) : strcspn(path, "/");
			if (len == 0)
				return false;
			m->param[m->n++] = kiln_xstrndup(path, len);
			path += len;
			pat = close + 1;
		} else if (*pat++ != *path++) {
			return false;
		}
	}
	return *path == '\0';
}

/* "*" takes any method; a GET row takes HEAD too (RFC 9110 9.3.2: the
 * server sends the headers GET would, libmicrohttpd drops the body). */
static bool method_ok(const char *row, const char *method)
{
	return strcmp(row, "*") == 0 || strcmp(row, method) == 0 ||
	       (strcmp(row, "GET") == 0 && strcmp(method, "HEAD") == 0);
}

const struct svc_route *svc_route_find(const void *rows, size_t n, size_t stride, const char *method, const char *path,
				       struct svc_route_match *m)
{
	memset(m, 0, sizeof(*m));
	for (size_t i = 0; i < n; i++) {
		const struct svc_route *rt = (const struct svc_route *)((const char *)rows + i * stride);
		bool ok = match_one(rt->pattern, path, m);
		if (ok && method_ok(rt->method, method))
			return m->route = rt;
		if (ok)
			m->other_method = true;
		svc_route_match_free(m);
	}
	return NULL;
}

void svc_route_match_free(struct svc_route_match *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->param[i]);
	m->n = 0;
	m->route = NULL;
}

/* ---- request bodies ---- */

bool svc_body_start(struct svc_body *b, reg_req *r, uint64_t max)
{
	uint64_t n;

	b->buf = (kiln_buf)KILN_BUF_INIT;
	b->max = max;
	b->over = reg_req_content_length(r, &n) && n > max;
	return !b->over;
}

void svc_body_add(struct svc_body *b, const char *data, size_t len)
{
	if (b->over || b->buf.len + len > b->max) {
		b->over = true;
		return;
	}
	kiln_buf_add(&b->buf, data, len);
}

const char *svc_body_limit_msg(const struct svc_body *b, char *buf, size_t n)
{
	snprintf(buf, n, "the request body is over the limit of %llu bytes", (unsigned long long)b->max);
	return buf;
}

void svc_body_free(struct svc_body *b)
{
	kiln_buf_free(&b->buf);
}
