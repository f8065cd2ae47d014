/* fetch.c — ADD URL: a download over kiln's one HTTP transport (regclient's
 * rc_http: redirects, timeouts, retries with backoff on transient errors)
 * into a scratch file, hashed as it arrives so --checksum is verified
 * without a second read; an attempt cut short starts the file over. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "builder/builder.h"
#include "regclient/regclient.h"

struct sink {
	int fd;
	const char *path;
	enum kiln_digest_algo algo;
	kiln_hasher *h;
	unsigned attempt;   /* the transport's attempt the file holds */
	int64_t len;
	kiln_error **err;   /* the caller's: the transport adds nothing when the sink refuses */
};

/* The file and the hash hold the body of the transport's current attempt
 * (a retry sends the body from its start again). */
static int sink_attempt(struct sink *s, const struct rc_http *r)
{
	if (s->attempt == r->attempts)
		return 0;
	s->attempt = r->attempts;
	if (s->len > 0 && ftruncate(s->fd, 0) < 0)
		return kiln_err_errno(s->err, errno, "truncate %s", s->path);
	kiln_hasher_free(s->h);
	s->h = kiln_hasher_new(s->algo);
	s->len = 0;
	return 0;
}

static int on_data(void *ud, struct rc_http *r, const char *p, size_t n)
{
	struct sink *s = ud;

	if (sink_attempt(s, r) < 0)
		return -1;
	if (kiln_pwrite_full(s->fd, p, n, (off_t)s->len) < 0)
		return kiln_err_errno(s->err, errno, "write %s", s->path);
	kiln_hasher_update(s->h, p, n);
	s->len += (int64_t)n;
	return 0;
}

int build_fetch_url(const char *url, const char *path, const char *checksum, bool public_only, kiln_error **err)
{
	struct sink s = { .fd = -1, .path = path, .algo = KILN_SHA256, .err = err };
	struct rc_http r;
	rc_client *c = NULL;
	char got[KILN_DIGEST_MAX];
	int rc = -1;

	if (checksum && kiln_digest_parse(checksum, &s.algo, err) < 0)
		return kiln_error_wrap(err, "ADD --checksum");
	if ((c = rc_client_for_url(url, public_only, err)) == NULL)
		return kiln_error_wrap(err, "ADD %s", url);
	rc_http_init(&r, c, "GET", kiln_xstrdup(url), NULL);
	s.fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (s.fd < 0) {
		kiln_err_errno(err, errno, "ADD %s: create %s", url, path);
		goto out;
	}
	s.h = kiln_hasher_new(s.algo);
	r.sink = on_data;
	r.sink_ud = &s;
	/* after it, sink_attempt: an empty body after a cut one keeps nothing of that one */
	if (rc_http_do(&r, err) < 0 || sink_attempt(&s, &r) < 0) {
		kiln_error_wrap(err, "ADD %s", url);
		goto out;
	}
	if (r.status >= 400) {
		kiln_err(err, KILN_E_NOTFOUND, "ADD %s: HTTP status %ld", url, r.status);
		goto out;
	}
	if (r.status < 200 || r.status >= 300) {
		kiln_err(err, KILN_E_IO, "ADD %s: HTTP status %ld", url, r.status);
		goto out;
	}
	kiln_hasher_final(s.h, got);
	s.h = NULL;
	if (checksum && strcmp(got, checksum) != 0) {
		kiln_err(err, KILN_E_INVALID, "ADD %s: checksum mismatch: got %s, want %s", url, got, checksum);
		goto out;
	}
	rc = 0;
out:
	if (s.h)
		kiln_hasher_free(s.h);
	if (s.fd >= 0)
		close(s.fd);
	rc_http_free(&r);
	rc_client_free(c);
	return rc;
}
