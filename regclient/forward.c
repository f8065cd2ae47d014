/* forward.c — one HTTP request over a unix socket the caller made for it
 * (a sandbox's port reached through its agent): libcurl writes the request
 * and reads the answer (chunked bodies, 1xx, status line), the caller
 * relays it.  No redirects, no decoding of the body, no reuse. */
#include <stdlib.h>
#include <string.h>

#include "regclient/internal.h"

struct fw_state {
	struct rc_forward_answer *a;
	size_t max;
	bool over;
};

static size_t fw_header(char *p, size_t size, size_t n, void *ud)
{
	struct fw_state *st = ud;
	size_t len = size * n, end = len;

	while (end > 0 && (p[end - 1] == '\r' || p[end - 1] == '\n'))
		end--;
	if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
		/* a status line: an earlier block was a 1xx */
		kiln_strv_free(&st->a->headers);
	} else if (end > 0 && memchr(p, ':', end)) {
		kiln_strv_push_owned(&st->a->headers, kiln_xstrndup(p, end));
	}
	return len;
}

static size_t fw_write(char *p, size_t size, size_t n, void *ud)
{
	struct fw_state *st = ud;
	size_t len = size * n;

	if (st->a->body.len + len > st->max) {
		st->over = true;
		return 0;
	}
	kiln_buf_add(&st->a->body, p, len);
	return len;
}

int rc_forward(const char *socket_name, const struct rc_forward *f, struct rc_forward_answer *a, kiln_error **err)
{
	struct fw_state st = { a, f->max_answer ? f->max_answer : (64u << 20), false };
	struct curl_slist *hs = NULL;
	CURL *h;
	CURLcode rc;
	int ret = -1;

	memset(a, 0, sizeof(*a));
	rc_global_init();
	if ((h = curl_easy_init()) == NULL)
		return kiln_err(err, KILN_E_IO, "curl_easy_init failed");
	for (size_t i = 0; f->headers && f->headers[i]; i++)
		hs = curl_slist_append(hs, f->headers[i]);
	/* the client's own Expect and Accept are passed on or none at all */
	hs = curl_slist_append(hs, "Expect:");
	curl_easy_setopt(h, CURLOPT_URL, f->url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, f->method);
	if (strcmp(f->method, "HEAD") == 0)
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	if (f->body_len || (strcmp(f->method, "GET") != 0 && strcmp(f->method, "HEAD") != 0)) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, f->body ? (const char *)f->body : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)f->body_len);
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hs);
	curl_easy_setopt(h, CURLOPT_PROXY, "");
	curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
	curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
	curl_easy_setopt(h, CURLOPT_HTTP_CONTENT_DECODING, 0L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, f->timeout_ms > 0 ? f->timeout_ms : 60000L);
	curl_easy_setopt(h, CURLOPT_ABSTRACT_UNIX_SOCKET, socket_name);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, fw_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, &st);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fw_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &st);
	rc = curl_easy_perform(h);
	if (st.over)
		kiln_err(err, KILN_E_LIMIT, "the answer is over the limit of %zu bytes", st.max);
	else if (rc != CURLE_OK)
		kiln_err(err, KILN_E_IO, "%s", curl_easy_strerror(rc));
	else {
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &a->status);
		ret = 0;
	}
	curl_slist_free_all(hs);
	curl_easy_cleanup(h);
	if (ret < 0)
		rc_forward_answer_free(a);
	return ret;
}

void rc_forward_answer_free(struct rc_forward_answer *a)
{
	kiln_strv_free(&a->headers);
	kiln_buf_free(&a->body);
}
