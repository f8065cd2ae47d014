/* e2b_reply.c — what every E2B handler answers with: JSON bodies, E2B's
 * {"code","message"} errors from kiln's errors, RFC 3339 times, a build's
 * state as E2B names it, and the host a request was addressed to (for the
 * links it hands out). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "service/e2b.h"

/* ---- answers ---- */

void e2b_reply_json(reg_req *r, unsigned status, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);

	reg_respond(r, status, s, strlen(s), "application/json");
	free(s);
	json_decref(j);
}

/* E2B's error body: {"code": STATUS, "message": "..."}. */
void e2b_reply_error(reg_req *r, unsigned status, const char *fmt, ...)
{
	kiln_buf b = KILN_BUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	kiln_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	e2b_reply_json(r, status, json_pack("{s:i,s:s}", "code", (int)status, "message", b.buf));
	kiln_buf_free(&b);
}

/* An error from below: its kind picks the status. */
void e2b_reply_err(reg_req *r, kiln_error *err, const char *what)
{
	unsigned st = svc_err_status(err);
	char *where = kiln_xasprintf("e2b: %s", what);

	e2b_reply_error(r, st, "%s: %s", what, svc_err_reply(err, st, where));
	free(where);
	kiln_error_free(err);
}

json_t *e2b_json_time(int64_t t)
{
	char buf[KILN_TIME_MAX];

	return json_string(kiln_time_rfc3339(t, buf));
}

/* E2B's status of a build and, for the service's, its status (st->id set). */
const char *e2b_build_state(e2b *e, const struct e2b_build *b, struct svc_status *st, kiln_error **err)
{
	memset(st, 0, sizeof(*st));
	if (b->error)
		return "error";
	if (b->svc_id == NULL || b->svc_id[0] == '\0')
		return "waiting";
	if (svc_status(e->svc, b->team, b->svc_id, st, err) < 0)
		return NULL;
	switch (st->state) {
	case SVC_QUEUED: return "waiting";
	case SVC_BUILDING: return "building";
	case SVC_DONE: return "ready";
	default: return "error";
	}
}

const char *e2b_req_host(reg_req *r)
{
	const char *host = reg_req_header(r, "Host");

	if (host == NULL || !*host ||
	    strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") != strlen(host))
		return NULL;
	return host;
}
