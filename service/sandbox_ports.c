/* sandbox_ports.c — E2B's getHost(port): a request whose Host is
 * PORT-ID.DOMAIN, PORT not envd's, goes to the sandbox's own 127.0.0.1:PORT
 * through a runtime tunnel (the agent's --connect helper) and comes back as
 * the sandbox's server answered it.  Whole answers, not streamed. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "regclient/regclient.h"
#include "service/sandbox_api.h"

/* Hop-by-hop headers (RFC 9110 7.6.1) and what the transport sets itself. */
static bool hop(const char *k)
{
	static const char *const names[] = { "Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer",
					     "Transfer-Encoding", "Upgrade", "Content-Length", "Expect",
					     "Proxy-Authorization", NULL };
	for (size_t i = 0; names[i]; i++)
		if (strcasecmp(k, names[i]) == 0)
			return true;
	return false;
}

static void add_header(void *ud, const char *k, const char *v)
{
	if (!hop(k) && !strchr(k, '\r') && !strchr(k, '\n') && !(v && (strchr(v, '\r') || strchr(v, '\n'))))
		kiln_strv_push_owned(ud, kiln_xasprintf("%s: %s", k, v ? v : ""));
}

static void add_escaped(kiln_buf *b, const char *s, bool keep_slash)
{
	while (*s) {
		size_t n = keep_slash ? strcspn(s, "/") : strlen(s);
		if (n) { /* curl takes a length of 0 as strlen */
			char *e = curl_easy_escape(NULL, s, (int)n);
			kiln_buf_adds(b, e ? e : "");
			curl_free(e);
		}
		s += n;
		if (*s == '/') {
			kiln_buf_addc(b, '/');
			s++;
		}
	}
}

struct query {
	kiln_buf *url;
	bool first;
};

static void add_arg(void *ud, const char *k, const char *v)
{
	struct query *q = ud;

	kiln_buf_addc(q->url, q->first ? '?' : '&');
	q->first = false;
	add_escaped(q->url, k, false);
	if (v) {
		kiln_buf_addc(q->url, '=');
		add_escaped(q->url, v, false);
	}
}

void sbx_port_serve(struct svc_sandboxes *s, reg_req *r, struct sbx_req *q, rt_sandbox *sb, unsigned port)
{
	kiln_buf url = KILN_BUF_INIT;
	kiln_strv hs = { 0 };
	struct query qa = { &url, true };
	struct rc_forward_answer a;
	kiln_error *err = NULL;
	rt_tunnel *t;
	char *why;
	const char *sock;
	int rc;

	(void)s;
	if ((t = rt_tunnel_open(sb, port, &sock, &err)) == NULL) {
		e2b_reply_error(r, 502, "port %u of sandbox %.64s: %s", port, q->sandbox, kiln_error_message(err));
		kiln_error_free(err);
		return;
	}
	kiln_buf_adds(&url, "http://127.0.0.1");
	kiln_buf_addf(&url, ":%u", port);
	add_escaped(&url, reg_req_path(r), true);
	reg_req_each(r, true, add_arg, &qa);
	reg_req_each(r, false, add_header, &hs);
	struct rc_forward f = { .method = reg_req_method(r),
				.url = url.buf,
				.headers = (const char *const *)hs.v,
				.body = q->body.buf.buf,
				.body_len = q->body.buf.len };
	rc = rc_forward(sock, &f, &a, &err);
	why = rt_tunnel_close(t);
	if (rc < 0 && why) {
		/* E2B's proxy answer for a closed port, with what the guest said */
		json_t *j = json_pack("{s:s,s:s,s:i,s:i}", "sandboxId", q->sandbox, "message",
				      "The sandbox is running but port is not open", "port", (int)port, "code", 502);
		json_object_set_new(j, "detail", json_string(why));
		e2b_reply_json(r, 502, j);
	} else if (rc < 0) {
		e2b_reply_error(r, err->kind == KILN_E_LIMIT ? 502 : 504, "port %u of sandbox %.64s: %s", port,
				q->sandbox, kiln_error_message(err));
	} else if (a.status < 200 || a.status > 599) {
		e2b_reply_error(r, 502, "port %u of sandbox %.64s answered with status %ld", port, q->sandbox, a.status);
		rc_forward_answer_free(&a);
	} else {
		const char *type = NULL;
		for (size_t i = 0; i < a.headers.n; i++)
			if (strncasecmp(a.headers.v[i], "Content-Type:", 13) == 0)
				type = a.headers.v[i] + 13 + strspn(a.headers.v[i] + 13, " \t");
		reg_respond(r, (unsigned)a.status, a.body.buf ? a.body.buf : "", a.body.len, type);
		for (size_t i = 0; i < a.headers.n; i++) {
			char *h = a.headers.v[i], *colon = strchr(h, ':');
			*colon = '\0';
			if (!hop(h) && strcasecmp(h, "Content-Type") != 0)
				reg_header(r, h, colon + 1 + strspn(colon + 1, " \t"));
		}
		rc_forward_answer_free(&a);
	}
	free(why);
	kiln_error_free(err);
	kiln_strv_free(&hs);
	kiln_buf_free(&url);
}
