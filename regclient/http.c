/* http.c — one registry client: a curl share (keep-alive connections
 * and DNS for every handle), request setup (bodies from memory or a file
 * range, bounded answers, the headers the protocol needs), and the
 * synchronous request loop with backoff retries and the auth challenge. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/socket.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "regclient/internal.h"

#define ERRBODY_MAX 65536

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* Once per process, whichever thread comes first (the server's S3 backend
 * makes clients from its request threads). */
static void global_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, curl_init_once);
}

void rc_global_init(void)
{
	global_init();
}

rc_client *rc_client_new(const char *host, const struct rc_client_opts *o, kiln_error **err)
{
	static const struct rc_client_opts none = { 0 };
	rc_client *c;
	const char *env = getenv("KILN_REGISTRY_RETRIES");

	if (!o)
		o = &none;
	if (!host || !*host || strchr(host, '/'))
		return kiln_err(err, KILN_E_INVALID, "bad registry host \"%s\"", host ? host : ""), NULL;
	global_init();
	c = kiln_xcalloc(1, sizeof(*c));
	c->host = kiln_xstrdup(host);
	c->base = o->base ? kiln_xstrdup(o->base)
			  : kiln_xasprintf("%s://%s", oci_host_insecure(host) ? "http" : "https", host);
	c->retries = o->retries ? o->retries : env && *env ? (unsigned)atoi(env) : 4;
	c->timeout_s = o->timeout_s ? o->timeout_s : 30;
	c->max_rate = o->max_rate;
	c->plain = o->plain;
	c->public_only = o->public_only;
	/* the registries' CA bundle is not a web server's (ADD https://...:
	 * the system's CAs, as before it rode this transport) */
	const char *ca = getenv("KILN_REGISTRY_CA_FILE");
	if (ca && *ca && !o->plain)
		c->ca_file = kiln_xstrdup(ca);
	if (o->user) {
		c->user = kiln_xstrdup(o->user);
		c->pass = kiln_xstrdup(o->pass ? o->pass : "");
	} else if (!o->anonymous && !o->plain && rc_auth_lookup(host, &c->user, &c->pass, err) < 0) {
		rc_client_free(c);
		return NULL;
	}
	c->share = curl_share_init();
	c->easy = curl_easy_init();
	if (!c->share || !c->easy) {
		rc_client_free(c);
		return kiln_err(err, KILN_E_GENERIC, "curl initialisation failed"), NULL;
	}
	curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
	curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
	return c;
}

rc_client *rc_client_for_url(const char *url, int public_only, kiln_error **err)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL, *hp = NULL, *base = NULL;
	rc_client *c = NULL;

	/* HOST[:PORT] alone: userinfo in the URL stays in the URL (curl sends
	 * it), out of the client's name and so out of every error message */
	if (!u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
	    (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
		kiln_err(err, KILN_E_INVALID, "not an http:// or https:// URL");
		goto out;
	}
	curl_url_get(u, CURLUPART_PORT, &port, 0);
	hp = port ? kiln_xasprintf("%s:%s", host, port) : kiln_xstrdup(host);
	base = kiln_xasprintf("%s://%s", scheme, hp);
	const struct rc_client_opts o = { .plain = 1, .base = base, .public_only = public_only };
	c = rc_client_new(hp, &o, err);
out:
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	free(hp);
	free(base);
	return c;
}

void rc_client_free(rc_client *c)
{
	if (!c)
		return;
	if (c->easy)
		curl_easy_cleanup(c->easy);
	if (c->share)
		curl_share_cleanup(c->share);
	for (size_t i = 0; i < c->ntokens; i++) {
		free(c->tokens[i].scope);
		free(c->tokens[i].token);
	}
	free(c->tokens);
	free(c->host);
	free(c->base);
	free(c->ca_file);
	free(c->user);
	if (c->pass)
		memset(c->pass, 0, strlen(c->pass));
	free(c->pass);
	free(c);
}

const struct rc_client_stats *rc_client_stats(const rc_client *c)
{
	return &c->stats;
}

char *rc_url(const rc_client *c, const char *fmt, ...)
{
	kiln_buf b = KILN_BUF_INIT;
	va_list ap;

	kiln_buf_adds(&b, c->base);
	va_start(ap, fmt);
	kiln_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	return kiln_buf_detach(&b);
}

char *rc_url_resolve(const rc_client *c, const char *location)
{
	CURLU *u = curl_url();
	char *out = NULL, *res;

	if (u && curl_url_set(u, CURLUPART_URL, c->base, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_URL, location, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_URL, &res, 0) == CURLUE_OK) {
		out = kiln_xstrdup(res);
		curl_free(res);
	}
	curl_url_cleanup(u);
	return out ? out : kiln_xstrdup(location);
}

unsigned rc_backoff_ms(unsigned attempt)
{
	unsigned ms = 200u << (attempt > 6 ? 6 : attempt - 1);
	return ms > 10000 ? 10000 : ms;
}

unsigned rc_retry_delay_ms(const struct rc_http *r, unsigned attempt)
{
	unsigned ms = rc_backoff_ms(attempt);
	if (r->cr == CURLE_OK && r->retry_after && isdigit((unsigned char)r->retry_after[0])) {
		unsigned long s = strtoul(r->retry_after, NULL, 10);
		unsigned ra = s > 60 ? 60000 : (unsigned)s * 1000;
		if (ra > ms)
			ms = ra;
	}
	return ms;
}

void rc_http_init(struct rc_http *r, rc_client *c, const char *method, char *url, const char *scope)
{
	memset(r, 0, sizeof(*r));
	r->c = c;
	r->method = method;
	r->url = url;
	r->scope = scope;
	r->body_fd = -1;
	r->out = (kiln_buf)KILN_BUF_INIT;
	r->errbody = (kiln_buf)KILN_BUF_INIT;
	r->out_max = 4 << 20;
	r->clen = -1;
}

void rc_http_reset(struct rc_http *r)
{
	free(r->www_auth);
	free(r->location);
	free(r->digest);
	free(r->ctype);
	free(r->range);
	free(r->retry_after);
	free(r->etag);
	free(r->last_modified);
	free(r->date);
	r->www_auth = r->location = r->digest = r->ctype = r->range = r->retry_after = NULL;
	r->etag = r->last_modified = r->date = NULL;
	kiln_buf_reset(&r->out);
	kiln_buf_reset(&r->errbody);
	r->status = 0;
	r->cr = CURLE_OK;
	r->refused[0] = '\0';
	r->errbuf[0] = 0;
	r->clen = -1;
	r->body_pos = 0;
	r->sink_failed = 0;
	r->sent_basic = 0;
	if (r->all)
		curl_slist_free_all(r->all);
	r->all = NULL;
}

void rc_http_free(struct rc_http *r)
{
	rc_http_reset(r);
	kiln_buf_free(&r->out);
	kiln_buf_free(&r->errbody);
	curl_slist_free_all(r->headers);
	free(r->url);
	r->url = NULL;
	r->headers = NULL;
}

static char *trimmed(const char *p, size_t n)
{
	while (n && isspace((unsigned char)*p))
		p++, n--;
	while (n && isspace((unsigned char)p[n - 1]))
		n--;
	return kiln_xstrndup(p, n);
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
	struct rc_http *r = ud;
	size_t len = size * n;
	const char *colon = memchr(p, ':', len);
	static const struct {
		const char *name;
		size_t off;
	} keep[] = {
		{ "www-authenticate", offsetof(struct rc_http, www_auth) },
		{ "location", offsetof(struct rc_http, location) },
		{ "docker-content-digest", offsetof(struct rc_http, digest) },
		{ "content-type", offsetof(struct rc_http, ctype) },
		{ "range", offsetof(struct rc_http, range) },
		{ "retry-after", offsetof(struct rc_http, retry_after) },
		{ "etag", offsetof(struct rc_http, etag) },
		{ "last-modified", offsetof(struct rc_http, last_modified) },
		{ "date", offsetof(struct rc_http, date) },
	};

	if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
		/* a new answer (after a redirect or 100): forget the last one's */
		char **fields[] = { &r->www_auth, &r->location, &r->digest, &r->ctype, &r->range, &r->retry_after,
				    &r->etag, &r->last_modified, &r->date };
		for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
			free(*fields[i]);
			*fields[i] = NULL;
		}
		r->clen = -1;
		return len;
	}
	if (!colon)
		return len;
	size_t kl = (size_t)(colon - p);
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
		if (strlen(keep[i].name) == kl && strncasecmp(p, keep[i].name, kl) == 0) {
			char **f = (char **)((char *)r + keep[i].off);
			/* several challenges: the first is used */
			if (!*f)
				*f = trimmed(colon + 1, len - kl - 1);
		}
	if (kl == 14 && strncasecmp(p, "content-length", 14) == 0) {
		char *v = trimmed(colon + 1, len - kl - 1);
		r->clen = strtoll(v, NULL, 10);
		free(v);
	}
	return len;
}

static size_t on_write(char *p, size_t size, size_t n, void *ud)
{
	struct rc_http *r = ud;
	size_t len = size * n;
	long st = 0;

	curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &st);
	r->c->stats.bytes_down += len;
	if (st < 200 || st >= 300) {
		if (r->errbody.len < ERRBODY_MAX)
			kiln_buf_add(&r->errbody, p, len < ERRBODY_MAX - r->errbody.len ? len : ERRBODY_MAX - r->errbody.len);
		return len;
	}
	if (r->sink) {
		if (r->sink(r->sink_ud, r, p, len) < 0) {
			r->sink_failed = 1;
			return 0;
		}
		return len;
	}
	if (r->out.len + len > r->out_max) {
		r->sink_failed = 2;
		return 0;
	}
	kiln_buf_add(&r->out, p, len);
	return len;
}

static size_t on_read(char *p, size_t size, size_t n, void *ud)
{
	struct rc_http *r = ud;
	size_t want = size * n;
	uint64_t left = r->body_len - r->body_pos;

	if (want > left)
		want = (size_t)left;
	if (want == 0)
		return 0;
	if (r->body_read) {
		long got = r->body_read(r->body_ud, p, want);
		if (got <= 0)
			return CURL_READFUNC_ABORT;
		want = (size_t)got;
	} else if (r->body_mem) {
		memcpy(p, r->body_mem + r->body_off + r->body_pos, want);
	} else {
		ssize_t got = kiln_pread_full(r->body_fd, p, want, (off_t)(r->body_off + r->body_pos));
		if (got <= 0)
			return CURL_READFUNC_ABORT;
		want = (size_t)got;
	}
	r->body_pos += want;
	r->c->stats.bytes_up += want;
	return want;
}

static int on_seek(void *ud, curl_off_t off, int origin)
{
	struct rc_http *r = ud;
	if (origin != SEEK_SET || off < 0 || (uint64_t)off > r->body_len)
		return CURL_SEEKFUNC_CANTSEEK;
	if (r->body_read) { /* only from the start */
		if (off != 0 || !r->body_rewind || r->body_rewind(r->body_ud) < 0)
			return CURL_SEEKFUNC_CANTSEEK;
	}
	r->body_pos = (uint64_t)off;
	return CURL_SEEKFUNC_OK;
}

/* A public unicast address: none of loopback, "this network", private
 * (RFC 1918, unique local), shared (CGN), link-local, benchmarking,
 * documentation, multicast or reserved ranges; a v4-mapped v6 as its v4. */
static bool v4_public(const unsigned char *a)
{
	return !(a[0] == 0 || a[0] == 10 || a[0] == 127 || a[0] >= 224 || (a[0] == 100 && (a[1] & 0xc0) == 64) ||
		 (a[0] == 169 && a[1] == 254) || (a[0] == 172 && (a[1] & 0xf0) == 16) || (a[0] == 192 && a[1] == 168) ||
		 (a[0] == 192 && a[1] == 0 && (a[2] == 0 || a[2] == 2)) || (a[0] == 198 && (a[1] & 0xfe) == 18) ||
		 (a[0] == 198 && a[1] == 51 && a[2] == 100) || (a[0] == 203 && a[1] == 0 && a[2] == 113));
}

static bool addr_public(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return v4_public((const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr);
	if (sa->sa_family != AF_INET6)
		return false;
	const unsigned char *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	if (memcmp(a, mapped, 12) == 0)
		return v4_public(a + 12);
	/* global unicast is 2000::/3; of it, not documentation (2001:db8::/32) nor NAT64 (64:ff9b::/96 is outside anyway) */
	return (a[0] & 0xe0) == 0x20 && !(a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8);
}

static curl_socket_t public_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct rc_http *r = ud;

	if (purpose == CURLSOCKTYPE_IPCXN && !addr_public(&a->addr)) {
		char ip[INET6_ADDRSTRLEN] = "?";
		const void *in = a->family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&a->addr)->sin6_addr
						       : (const void *)&((struct sockaddr_in *)&a->addr)->sin_addr;
		inet_ntop(a->family, in, ip, sizeof(ip));
		snprintf(r->refused, sizeof(r->refused), "%s", ip);
		return CURL_SOCKET_BAD;
	}
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

void rc_http_setup(struct rc_http *r, CURL *h)
{
	char *auth;

	rc_http_reset(r);
	r->attempts++;
	r->h = h;
	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_SHARE, r->c->share);
	curl_easy_setopt(h, CURLOPT_URL, r->url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)r->c->timeout_s);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)r->c->timeout_s);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	if (r->c->max_rate) {
		curl_easy_setopt(h, CURLOPT_MAX_RECV_SPEED_LARGE, (curl_off_t)r->c->max_rate);
		curl_easy_setopt(h, CURLOPT_MAX_SEND_SPEED_LARGE, (curl_off_t)r->c->max_rate);
	} else {
		/* larger buffers: fewer callbacks and syscalls per blob (not with a
		 * rate limit: curl 7.88 then stops enforcing it on receive) */
		curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L * 1024);
		curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 256L * 1024);
	}
	curl_easy_setopt(h, CURLOPT_USERAGENT, "kiln/" KILN_VERSION);
	if (r->c->public_only) {
		curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, public_socket);
		curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, r);
	}
	if (r->c->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, r->c->ca_file);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->errbuf);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(h, CURLOPT_PRIVATE, r);
	for (struct curl_slist *l = r->headers; l; l = l->next)
		r->all = curl_slist_append(r->all, l->data);
	r->all = curl_slist_append(r->all, "Expect:");
	auth = r->token_request ? NULL : rc_auth_header(r->c, r->scope);
	if ((r->token_request || (!auth && r->c->basic)) && r->c->user) {
		curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
		curl_easy_setopt(h, CURLOPT_USERNAME, r->c->user);
		curl_easy_setopt(h, CURLOPT_PASSWORD, r->c->pass);
		r->sent_basic = 1;
	}
	if (auth) {
		r->all = curl_slist_append(r->all, auth);
		memset(auth, 0, strlen(auth));
		free(auth);
	}
	if (strcmp(r->method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (strcmp(r->method, "POST") == 0) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(r->has_body ? r->body_len : 0));
		if (!r->has_body)
			curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
	} else if (strcmp(r->method, "PUT") == 0 || strcmp(r->method, "PATCH") == 0) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)(r->has_body ? r->body_len : 0));
		if (strcmp(r->method, "PATCH") == 0)
			curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PATCH");
	} else if (strcmp(r->method, "GET") != 0) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
	}
	if (r->has_body || strcmp(r->method, "PUT") == 0 || strcmp(r->method, "PATCH") == 0) {
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, r);
		curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
		curl_easy_setopt(h, CURLOPT_SEEKDATA, r);
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, r->all);
	r->c->stats.requests++;
}

void rc_http_done(struct rc_http *r)
{
	long conns = 0;
	curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
	if (curl_easy_getinfo(r->h, CURLINFO_NUM_CONNECTS, &conns) == CURLE_OK && conns > 0)
		r->c->stats.connects += (uint64_t)conns;
}

int rc_http_transient(const struct rc_http *r)
{
	if (r->sink_failed || r->refused[0])
		return 0;
	switch (r->cr) {
	case CURLE_OK:
		return r->status == 408 || r->status == 429 || r->status >= 500;
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_PARTIAL_FILE:
	case CURLE_GOT_NOTHING:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_SSL_CONNECT_ERROR:
		return 1;
	default:
		return 0;
	}
}

/* The cause of a failed transfer, in a few words. */
static const char *transport_error(const struct rc_http *r)
{
	return r->errbuf[0] ? r->errbuf : curl_easy_strerror(r->cr);
}

/* What to try when TLS fails: the usual cause is a plain-HTTP registry. */
static const char *tls_hint(const struct rc_http *r)
{
	if (r->cr == CURLE_SSL_CONNECT_ERROR)
		return " (a plain-HTTP registry? list it in KILN_INSECURE_REGISTRIES)";
	if (r->cr == CURLE_PEER_FAILED_VERIFICATION || r->cr == CURLE_SSL_CACERT_BADFILE)
		return " (certificate not trusted: KILN_REGISTRY_CA_FILE may name the CA bundle to trust)";
	return "";
}

int rc_http_fail(const struct rc_http *r, const char *what, kiln_error **err)
{
	json_t *j, *e0;
	const char *code = NULL, *msg = NULL;
	enum kiln_errkind kind = KILN_E_GENERIC;

	if (r->cr != CURLE_OK)
		return kiln_err(err, KILN_E_IO, "%s: registry %s: %s%s", what, r->c->host, transport_error(r),
				tls_hint(r));
	j = r->errbody.len ? json_loadb(r->errbody.buf, r->errbody.len, 0, NULL) : NULL;
	e0 = json_array_get(json_object_get(j, "errors"), 0);
	code = kiln_json_str(e0, "code");
	msg = kiln_json_str(e0, "message");
	if (r->status == 404)
		kind = KILN_E_NOTFOUND;
	else if (r->status == 400 || r->status == 413 || r->status == 416)
		kind = KILN_E_INVALID;
	const char *hint = "";
	if (r->status == 401)
		hint = r->c->user ? ": the credentials were not accepted" : ": authentication required (kiln login)";
	else if (r->status == 403)
		hint = ": access denied";
	kiln_err(err, kind, "%s: registry %s answered HTTP %ld%s%s%s%s%s%s", what, r->c->host, r->status,
		 code ? " " : "", code ? code : "", msg ? " (" : "", msg ? msg : "", msg ? ")" : "", hint);
	json_decref(j);
	return -1;
}

int rc_http_do(struct rc_http *r, kiln_error **err)
{
	unsigned attempt = 0, auths = 0;

	for (;;) {
		rc_http_setup(r, r->c->easy);
		r->cr = curl_easy_perform(r->c->easy);
		rc_http_done(r);
		if (r->cr == CURLE_OK && r->status == 401 && !r->token_request && !r->c->plain && auths < 2) {
			auths++;
			if (rc_http_authorize(r, err) < 0)
				return -1;
			continue;
		}
		if (r->sink_failed == 2)
			return kiln_err(err, KILN_E_LIMIT, "%s %s: answer larger than %zu bytes", r->method, r->url,
					r->out_max);
		if (!rc_http_transient(r) || attempt >= r->c->retries)
			break;
		attempt++;
		r->c->stats.retries++;
		unsigned ms = rc_retry_delay_ms(r, attempt);
		kiln_debug("registry %s: %s %s: %s; retry %u in %u ms", r->c->host, r->method, r->url,
			   r->cr != CURLE_OK ? transport_error(r) : "server error", attempt, ms);
		kiln_sleep_ms(ms);
	}
	if (r->cr != CURLE_OK && r->refused[0])
		return kiln_err(err, KILN_E_INVALID, "%s leads to %s, not a public address: this build fetches from public "
				"addresses only", r->c->host, r->refused);
	if (r->cr != CURLE_OK && !r->sink_failed) {
		char more[48] = "";
		if (attempt)
			snprintf(more, sizeof(more), " (after %u retries)", attempt);
		return kiln_err(err, KILN_E_IO, "%s%s: %s%s%s", r->c->plain ? "" : "registry ", r->c->host,
				transport_error(r), more, r->c->plain ? "" : tls_hint(r));
	}
	return r->sink_failed ? -1 : 0;
}

int rc_client_ping(rc_client *c, kiln_error **err)
{
	struct rc_http r;
	int rc = -1;

	rc_http_init(&r, c, "GET", rc_url(c, "/v2/"), NULL);
	if (rc_http_do(&r, err) < 0)
		goto out;
	if (r.status != 200) {
		rc_http_fail(&r, "GET /v2/", err);
		goto out;
	}
	rc = 0;
out:
	rc_http_free(&r);
	return rc;
}
