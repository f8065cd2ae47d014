/* s3.c — a small S3 client for the registry's object-storage backend: AWS
 * Signature V4 (openssl HMAC-SHA256) over libcurl, path-style URLs, objects
 * put whole or by multipart upload, ranged GETs, HEAD and DELETE.  Zero-byte
 * objects are ordinary objects (no Range on them). */
#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "registry/internal.h"

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static void hexify(const unsigned char *in, size_t n, char *out)
{
	static const char h[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = h[in[i] >> 4];
		out[2 * i + 1] = h[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static void hmac(const void *key, size_t keylen, const char *msg, unsigned char out[32])
{
	unsigned int len = 32;

	HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg, strlen(msg), out, &len);
}

static void sha256_hex(const void *data, size_t len, char out[65])
{
	char d[KILN_DIGEST_MAX];

	kiln_digest_buf(KILN_SHA256, data, len, d);
	memcpy(out, d + 7, 65);
}

/* RFC 3986 unreserved characters stay; '/' stays in paths. */
void reg_s3_uri_encode(kiln_buf *b, const char *s, int keep_slash)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/'))
			kiln_buf_addc(b, (char)c);
		else
			kiln_buf_addf(b, "%%%02X", c);
	}
}

static int cmp_hdr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

char *reg_s3_authorization(const struct reg_s3_cfg *s3, const char *method, const char *path, const char *query,
			   const char *const *headers, const char *payload_sha256, const char *amz_date)
{
	kiln_buf canon = KILN_BUF_INIT, signed_h = KILN_BUF_INIT, sts = KILN_BUF_INIT;
	kiln_strv hv = KILN_STRV_INIT;
	char creq_hash[65], date[9], sig[65];
	unsigned char k[32], k2[32];
	char *secret, *out;

	/* Canonical headers: lowercase names, trimmed values, sorted by name. */
	for (size_t i = 0; headers[i]; i++) {
		const char *colon = strchr(headers[i], ':'), *v;
		kiln_buf h = KILN_BUF_INIT;

		if (colon == NULL)
			continue;
		for (const char *p = headers[i]; p < colon; p++)
			kiln_buf_addc(&h, (char)tolower((unsigned char)*p));
		kiln_buf_addc(&h, ':');
		for (v = colon + 1; *v == ' '; v++)
			;
		kiln_buf_adds(&h, v);
		while (h.len && h.buf[h.len - 1] == ' ')
			h.buf[--h.len] = '\0';
		kiln_strv_push_owned(&hv, kiln_buf_detach(&h));
	}
	qsort(hv.v, hv.n, sizeof(char *), cmp_hdr);
	kiln_buf_addf(&canon, "%s\n%s\n%s\n", method, path, query ? query : "");
	for (size_t i = 0; i < hv.n; i++) {
		kiln_buf_addf(&canon, "%s\n", hv.v[i]);
		kiln_buf_addf(&signed_h, "%s%.*s", i ? ";" : "", (int)strcspn(hv.v[i], ":"), hv.v[i]);
	}
	kiln_buf_addf(&canon, "\n%s\n%s", signed_h.buf, payload_sha256);
	sha256_hex(canon.buf, canon.len, creq_hash);
	snprintf(date, sizeof(date), "%.8s", amz_date);
	kiln_buf_addf(&sts, "AWS4-HMAC-SHA256\n%s\n%s/%s/s3/aws4_request\n%s", amz_date, date, s3->region, creq_hash);
	secret = kiln_xasprintf("AWS4%s", s3->secret_key);
	hmac(secret, strlen(secret), date, k);
	hmac(k, 32, s3->region, k2);
	hmac(k2, 32, "s3", k);
	hmac(k, 32, "aws4_request", k2);
	hmac(k2, 32, sts.buf, k);
	hexify(k, 32, sig);
	out = kiln_xasprintf("AWS4-HMAC-SHA256 Credential=%s/%s/%s/s3/aws4_request, SignedHeaders=%s, Signature=%s",
			     s3->access_key, date, s3->region, signed_h.buf, sig);
	free(secret);
	kiln_strv_free(&hv);
	kiln_buf_free(&canon);
	kiln_buf_free(&signed_h);
	kiln_buf_free(&sts);
	return out;
}

/* ---- requests ---- */

struct s3_req {
	const char *body;           /* request body in memory */
	size_t body_len, body_off;
	kiln_buf *resp;             /* response body, or NULL to use `sink` */
	int (*sink)(void *ud, const void *data, size_t len);
	void *ud;
	char etag[128];
	int64_t length;
	const char *put_type;       /* Content-Type of a PUT body, or NULL */
	char type[256];             /* Content-Type of the answer */
	int64_t mtime, date;        /* Last-Modified, Date of the answer (-1: none) */
};

/* An HTTP date (RFC 1123) as Unix time, -1 when absent or unparsable. */
static int64_t header_time(const char *v)
{
	return v ? (int64_t)curl_getdate(v, NULL) : -1;
}

/* S3 requests ride on the registry client's transport (regclient/http.c):
 * keep-alive connections, retries with backoff after connection errors, 429
 * and 5xx.  A client serves one caller at a time, so the server's threads
 * take one from this pool (or make one) per request and give it back. */
enum { POOL_MAX = 16 };
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pooled {
	rc_client *c;
	char *endpoint;
	struct pooled *next;
} *pool;
static size_t pool_n;

static rc_client *client_take(const struct reg_s3_cfg *s3, kiln_error **err)
{
	struct pooled **pp, *hit = NULL;
	rc_client *c;

	pthread_mutex_lock(&pool_mu);
	for (pp = &pool; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->endpoint, s3->endpoint) == 0) {
			hit = *pp;
			*pp = hit->next;
			pool_n--;
			break;
		}
	pthread_mutex_unlock(&pool_mu);
	if (hit) {
		c = hit->c;
		free(hit->endpoint);
		free(hit);
		return c;
	}
	const char *host = strstr(s3->endpoint, "://");
	host = host ? host + 3 : s3->endpoint;
	char *h = kiln_xstrndup(host, strcspn(host, "/"));
	size_t blen = strlen(s3->endpoint);
	while (blen > 0 && s3->endpoint[blen - 1] == '/')
		blen--;
	char *base = kiln_xstrndup(s3->endpoint, blen);
	/* anonymous: SigV4 headers authorise each request, not the client */
	const struct rc_client_opts o = { .anonymous = 1, .base = base };
	c = rc_client_new(h, &o, err);
	free(h);
	free(base);
	return c;
}

static void client_give(const struct reg_s3_cfg *s3, rc_client *c)
{
	struct pooled *p = NULL;

	pthread_mutex_lock(&pool_mu);
	if (pool_n < POOL_MAX) {
		p = kiln_xcalloc(1, sizeof(*p));
		p->c = c;
		p->endpoint = kiln_xstrdup(s3->endpoint);
		p->next = pool;
		pool = p;
		pool_n++;
	}
	pthread_mutex_unlock(&pool_mu);
	if (!p)
		rc_client_free(c);
}

/* The answer's body: a retried attempt starts over, so the bytes an earlier
 * attempt already handed on are skipped, never delivered twice. */
struct s3_body {
	struct s3_req *q;
	unsigned attempt;
	uint64_t pos, delivered;
};

static int on_body(void *ud, struct rc_http *r, const char *p, size_t n)
{
	struct s3_body *b = ud;
	uint64_t end;

	if (b->attempt != r->attempts) {
		b->attempt = r->attempts;
		b->pos = 0;
	}
	end = b->pos + n;
	if (end > b->delivered) {
		size_t skip = b->delivered > b->pos ? (size_t)(b->delivered - b->pos) : 0;
		if (b->q->resp)
			kiln_buf_add(b->q->resp, p + skip, n - skip);
		else if (b->q->sink && b->q->sink(b->q->ud, p + skip, n - skip) < 0)
			return -1;
		b->delivered = end;
	}
	b->pos = end;
	return 0;
}

/* One signed request; returns the HTTP status or -1 (transport error). */
static long s3_do(const struct reg_s3_cfg *s3, const char *method, const char *key, const char *query,
		  const char *range, struct s3_req *q, kiln_error **err)
{
	kiln_buf path = KILN_BUF_INIT, url = KILN_BUF_INIT;
	char amz_date[17], payload[65];
	const char *host = strstr(s3->endpoint, "://");
	const char *hdrs[5];
	char *h_host, *h_date, *h_sha, *h_range = NULL, *auth, *h_auth;
	time_t now = time(NULL);
	struct tm tm;
	struct rc_http r;
	struct s3_body body = { .q = q };
	rc_client *c;
	long status = -1;
	int nh = 0;

	q->length = -1;
	q->mtime = q->date = -1;
	q->type[0] = '\0';
	q->etag[0] = '\0';
	if ((c = client_take(s3, err)) == NULL)
		return -1;
	host = host ? host + 3 : s3->endpoint;
	strftime(amz_date, sizeof(amz_date), "%Y%m%dT%H%M%SZ", gmtime_r(&now, &tm));
	if (q->body && q->body_len)
		sha256_hex(q->body, q->body_len, payload);
	else
		strcpy(payload, EMPTY_SHA256);
	kiln_buf_addc(&path, '/');
	reg_s3_uri_encode(&path, s3->bucket, 0);
	if (key) {
		kiln_buf_addc(&path, '/');
		reg_s3_uri_encode(&path, key, 1);
	}
	kiln_buf_addf(&url, "%s%s%s%s", s3->endpoint, path.buf, query ? "?" : "", query ? query : "");
	h_host = kiln_xasprintf("host:%.*s", (int)strcspn(host, "/"), host);
	h_date = kiln_xasprintf("x-amz-date:%s", amz_date);
	h_sha = kiln_xasprintf("x-amz-content-sha256:%s", payload);
	hdrs[nh++] = h_host;
	hdrs[nh++] = h_date;
	hdrs[nh++] = h_sha;
	if (range) {
		h_range = kiln_xasprintf("range:%s", range);
		hdrs[nh++] = h_range;
	}
	hdrs[nh] = NULL;
	auth = reg_s3_authorization(s3, method, path.buf, query, hdrs, payload, amz_date);
	h_auth = kiln_xasprintf("Authorization: %s", auth);

	/* Signed once: a retry within S3's 15-minute window carries the same signature. */
	rc_http_init(&r, c, method, kiln_xstrdup(url.buf), NULL);
	for (int i = 1; i < nh; i++)
		r.headers = curl_slist_append(r.headers, hdrs[i]);
	r.headers = curl_slist_append(r.headers, h_auth);
	if (q->put_type) {
		char *ct = kiln_xasprintf("Content-Type: %s", q->put_type);
		r.headers = curl_slist_append(r.headers, ct);
		free(ct);
	}
	if (strcmp(method, "PUT") == 0 || strcmp(method, "POST") == 0) {
		r.body_mem = q->body ? q->body : "";
		r.body_len = q->body_len;
		r.has_body = 1;
	}
	r.sink = on_body;
	r.sink_ud = &body;
	if (rc_http_do(&r, err) < 0) {
		kiln_error_wrap(err, "s3 %s %s", method, url.buf);
		goto out;
	}
	status = r.status;
	q->length = r.clen;
	if (r.ctype)
		snprintf(q->type, sizeof(q->type), "%s", r.ctype);
	if (r.etag)
		snprintf(q->etag, sizeof(q->etag), "%s", r.etag);
	q->mtime = header_time(r.last_modified);
	q->date = header_time(r.date);
	/* Error answers' bodies (S3's XML) for the caller's message. */
	if ((status < 200 || status >= 300) && q->resp && r.errbody.len)
		kiln_buf_add(q->resp, r.errbody.buf, r.errbody.len);
out:
	rc_http_free(&r);
	client_give(s3, c);
	free(h_host);
	free(h_date);
	free(h_sha);
	free(h_range);
	free(auth);
	free(h_auth);
	kiln_buf_free(&path);
	kiln_buf_free(&url);
	return status;
}

static int status_err(long st, const char *what, const char *key, const kiln_buf *body, kiln_error **err)
{
	return kiln_err(err, st == 404 ? KILN_E_NOTFOUND : KILN_E_IO, "s3 %s %s: HTTP %ld %.200s", what,
			key ? key : "", st, body && body->len ? body->buf : "");
}

int reg_s3_create_bucket(const struct reg_s3_cfg *s3, kiln_error **err)
{
	kiln_buf body = KILN_BUF_INIT;
	struct s3_req q = { .resp = &body };
	long st = s3_do(s3, "PUT", NULL, NULL, NULL, &q, err);
	int ret = 0;

	/* 409 BucketAlreadyOwnedByYou: fine. */
	if (st < 0)
		ret = -1;
	else if (st != 200 && !(st == 409 && strstr(body.buf, "BucketAlreadyOwnedByYou")))
		ret = status_err(st, "create bucket", s3->bucket, &body, err);
	kiln_buf_free(&body);
	return ret;
}

int reg_s3_put(const struct reg_s3_cfg *s3, const char *key, const void *data, size_t len, kiln_error **err)
{
	return reg_s3_put_type(s3, key, data, len, NULL, err);
}

int reg_s3_put_type(const struct reg_s3_cfg *s3, const char *key, const void *data, size_t len, const char *type,
		    kiln_error **err)
{
	kiln_buf body = KILN_BUF_INIT;
	struct s3_req q = { .body = data, .body_len = len, .resp = &body, .put_type = type };
	long st = s3_do(s3, "PUT", key, NULL, NULL, &q, err);
	int ret = st == 200 ? 0 : st < 0 ? -1 : status_err(st, "put", key, &body, err);

	kiln_buf_free(&body);
	return ret;
}

/* The text of <TAG>...</TAG> in a small S3 XML answer (UploadId): S3's
 * replies put it on its own, so no general XML parser is needed. */
static char *xml_text(const char *xml, const char *tag)
{
	char *open = kiln_xasprintf("<%s>", tag), *close = kiln_xasprintf("</%s>", tag);
	const char *a = strstr(xml, open), *b = a ? strstr(a, close) : NULL;
	char *out = a && b ? kiln_xstrndup(a + strlen(open), (size_t)(b - a - strlen(open))) : NULL;

	free(open);
	free(close);
	return out;
}

int reg_s3_multipart_start(const struct reg_s3_cfg *s3, const char *key, char **upload_id, kiln_error **err)
{
	kiln_buf body = KILN_BUF_INIT;
	struct s3_req q = { .resp = &body };
	long st = s3_do(s3, "POST", key, "uploads=", NULL, &q, err);
	int ret = 0;

	*upload_id = NULL;
	if (st != 200 || (*upload_id = xml_text(body.buf, "UploadId")) == NULL) {
		if (st >= 0)
			status_err(st, "start multipart upload", key, &body, err);
		ret = -1;
	}
	kiln_buf_free(&body);
	return ret;
}

int reg_s3_put_multipart(const struct reg_s3_cfg *s3, const char *key, const void *data, size_t len, size_t part_size,
			 kiln_error **err)
{
	kiln_buf body = KILN_BUF_INIT, done = KILN_BUF_INIT, qs = KILN_BUF_INIT;
	struct s3_req q = { .resp = &body };
	char *upload_id = NULL;
	long st;
	int ret = -1, part = 0;

	if (reg_s3_multipart_start(s3, key, &upload_id, err) < 0)
		goto out;
	kiln_buf_adds(&done, "<CompleteMultipartUpload>");
	for (size_t off = 0; off < len || part == 0; off += part_size) {
		size_t n = len - off < part_size ? len - off : part_size;
		struct s3_req pq = { .body = (const char *)data + off, .body_len = n, .resp = &body };

		part++;
		kiln_buf_reset(&body);
		kiln_buf_reset(&qs);
		kiln_buf_addf(&qs, "partNumber=%d&uploadId=", part);
		reg_s3_uri_encode(&qs, upload_id, 0);
		st = s3_do(s3, "PUT", key, qs.buf, NULL, &pq, err);
		if (st != 200) {
			if (st >= 0)
				status_err(st, "upload part", key, &body, err);
			goto abort;
		}
		kiln_buf_addf(&done, "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>", part, pq.etag);
		if (n < part_size)
			break;
	}
	kiln_buf_adds(&done, "</CompleteMultipartUpload>");
	kiln_buf_reset(&qs);
	kiln_buf_adds(&qs, "uploadId=");
	reg_s3_uri_encode(&qs, upload_id, 0);
	kiln_buf_reset(&body);
	q = (struct s3_req){ .body = done.buf, .body_len = done.len, .resp = &body };
	st = s3_do(s3, "POST", key, qs.buf, NULL, &q, err);
	/* S3 may answer 200 with an <Error> body when completion fails late. */
	if (st != 200 || strstr(body.buf, "<Error>")) {
		if (st >= 0)
			status_err(st, "complete multipart upload", key, &body, err);
		goto abort;
	}
	ret = 0;
	goto out;
abort:
	{
		kiln_error *e2 = NULL;
		struct s3_req aq = { .resp = &body };
		s3_do(s3, "DELETE", key, qs.buf, NULL, &aq, &e2);
		kiln_error_free(e2);
	}
out:
	free(upload_id);
	kiln_buf_free(&body);
	kiln_buf_free(&done);
	kiln_buf_free(&qs);
	return ret;
}

int reg_s3_head(const struct reg_s3_cfg *s3, const char *key, int64_t *size, kiln_error **err)
{
	return reg_s3_stat(s3, key, size, NULL, err);
}


int reg_s3_stat(const struct reg_s3_cfg *s3, const char *key, int64_t *size, int64_t *mtime, kiln_error **err)
{
	struct s3_req q = { 0 };
	long st = s3_do(s3, "HEAD", key, NULL, NULL, &q, err);

	if (st == 200) {
		if (size)
			*size = q.length;
		if (mtime)
			*mtime = q.mtime;
		return 1;
	}
	return st == 404 ? 0 : st < 0 ? -1 : status_err(st, "head", key, NULL, err);
}

int reg_s3_get(const struct reg_s3_cfg *s3, const char *key, int64_t off, int64_t len,
	       int (*sink)(void *ud, const void *data, size_t len), void *ud, kiln_error **err)
{
	kiln_buf body = KILN_BUF_INIT;
	struct s3_req q = { .sink = sink, .ud = ud };
	char range[64];
	long st;

	/* A zero-length read needs no request: a Range on an empty object is 416. */
	if (len == 0)
		return 0;
	if (len > 0)
		snprintf(range, sizeof(range), "bytes=%" PRId64 "-%" PRId64, off, off + len - 1);
	else if (off > 0)
		snprintf(range, sizeof(range), "bytes=%" PRId64 "-", off);
	st = s3_do(s3, "GET", key, NULL, len > 0 || off > 0 ? range : NULL, &q, err);
	if (st == 200 || st == 206)
		return 0;
	if (st >= 0)
		status_err(st, "get", key, &body, err);
	kiln_buf_free(&body);
	return -1;
}

int reg_s3_delete(const struct reg_s3_cfg *s3, const char *key, kiln_error **err)
{
	kiln_buf body = KILN_BUF_INIT;
	struct s3_req q = { .resp = &body };
	long st = s3_do(s3, "DELETE", key, NULL, NULL, &q, err);
	int ret = st == 204 || st == 200 || st == 404 ? 0 : st < 0 ? -1 : status_err(st, "delete", key, &body, err);

	kiln_buf_free(&body);
	return ret;
}

int reg_s3_get_small(const struct reg_s3_cfg *s3, const char *key, size_t max, kiln_buf *out, char **type,
		     kiln_error **err)
{
	struct s3_req q = { .resp = out };
	long st = s3_do(s3, "GET", key, NULL, NULL, &q, err);

	if (st == 404)
		return 0;
	if (st != 200)
		return st < 0 ? -1 : status_err(st, "get", key, out, err);
	if (out->len > max)
		return kiln_err(err, KILN_E_INVALID, "s3 get %s: %zu bytes, more than %zu", key, out->len, max);
	if (type)
		*type = q.type[0] ? kiln_xstrdup(q.type) : NULL;
	return 1;
}

int reg_s3_time(const struct reg_s3_cfg *s3, int64_t *now, kiln_error **err)
{
	struct s3_req q = { 0 };
	long st = s3_do(s3, "HEAD", NULL, NULL, NULL, &q, err);

	if (st != 200)
		return st < 0 ? -1 : status_err(st, "head bucket", s3->bucket, NULL, err);
	if (q.date < 0)
		return kiln_err(err, KILN_E_IO, "s3: no Date header from %s", s3->endpoint);
	*now = q.date;
	return 0;
}

/* S3's XML escapes only these five in the values we read. */
static char *xml_unescape(const char *s, size_t n)
{
	static const struct { const char *ent; char c; } ents[] = {
		{ "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' }, { "&quot;", '"' }, { "&apos;", '\'' },
	};
	kiln_buf b = KILN_BUF_INIT;

	for (size_t i = 0; i < n; i++) {
		size_t k;
		for (k = 0; k < 5; k++) {
			size_t el = strlen(ents[k].ent);
			if (i + el <= n && strncmp(s + i, ents[k].ent, el) == 0) {
				kiln_buf_addc(&b, ents[k].c);
				i += el - 1;
				break;
			}
		}
		if (k == 5)
			kiln_buf_addc(&b, s[i]);
	}
	if (b.buf == NULL)
		kiln_buf_adds(&b, "");
	return kiln_buf_detach(&b);
}

/* The unescaped text of <tag> inside [p, end), or NULL. */
static char *xml_field(const char *p, const char *end, const char *tag)
{
	char open[64], close[64];
	const char *a, *b;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	a = strstr(p, open);
	if (a == NULL || a >= end)
		return NULL;
	a += strlen(open);
	b = strstr(a, close);
	if (b == NULL || b > end)
		return NULL;
	return xml_unescape(a, (size_t)(b - a));
}

/* "2026-11-30T07:00:00.000Z" as Unix time. */
static int64_t iso_time(const char *s)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	if (s == NULL || strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) == NULL)
		return -1;
	return (int64_t)timegm(&tm);
}

/* Walks the <ELEM>...</ELEM> blocks of one listing page. */
typedef int (*elem_fn)(void *ud, const char *p, const char *end);
static int each_elem(const char *xml, const char *elem, elem_fn fn, void *ud)
{
	char open[64], close[64];
	const char *p = xml;

	snprintf(open, sizeof(open), "<%s>", elem);
	snprintf(close, sizeof(close), "</%s>", elem);
	while ((p = strstr(p, open)) != NULL) {
		const char *end = strstr(p, close);
		int r;
		if (end == NULL)
			break;
		r = fn(ud, p, end);
		if (r != 0)
			return r;
		p = end + strlen(close);
	}
	return 0;
}

int reg_s3_page_size = 1000;

struct list_walk {
	reg_s3_list_fn fn;
	void *ud;
	long max, count;
	int more, failed;
	char *last;
};

static int list_elem(void *ud, const char *p, const char *end)
{
	struct list_walk *w = ud;
	char *key = xml_field(p, end, "Key"), *size = xml_field(p, end, "Size"), *lm = xml_field(p, end, "LastModified");
	int r = 0;

	if (key == NULL) {
		r = 0;
	} else if (w->max > 0 && w->count >= w->max) {
		w->more = 1;
		r = 1;
	} else {
		w->count++;
		free(w->last);
		w->last = kiln_xstrdup(key);
		if (w->fn(w->ud, key, size ? strtoll(size, NULL, 10) : 0, iso_time(lm)) < 0) {
			w->failed = 1;
			r = 1;
		}
	}
	free(key);
	free(size);
	free(lm);
	return r;
}

int reg_s3_list(const struct reg_s3_cfg *s3, const char *prefix, const char *start_after, long max, reg_s3_list_fn fn,
		void *ud, int *more, kiln_error **err)
{
	struct list_walk w = { .fn = fn, .ud = ud, .max = max };
	kiln_buf body = KILN_BUF_INIT, qs = KILN_BUF_INIT;
	char *token = NULL, *trunc = NULL;
	int ret = -1;

	for (;;) {
		struct s3_req q = { .resp = &body };
		long want = max > 0 ? max - w.count + 1 : reg_s3_page_size, st;

		if (want > reg_s3_page_size)
			want = reg_s3_page_size;
		kiln_buf_reset(&body);
		kiln_buf_reset(&qs);
		/* Canonical order: parameters sorted by name. */
		if (token) {
			kiln_buf_adds(&qs, "continuation-token=");
			reg_s3_uri_encode(&qs, token, 0);
			kiln_buf_addc(&qs, '&');
		}
		kiln_buf_addf(&qs, "list-type=2&max-keys=%ld&prefix=", want);
		reg_s3_uri_encode(&qs, prefix, 0);
		if (start_after && !token) {
			kiln_buf_adds(&qs, "&start-after=");
			reg_s3_uri_encode(&qs, start_after, 0);
		}
		st = s3_do(s3, "GET", NULL, qs.buf, NULL, &q, err);
		if (st != 200) {
			if (st >= 0)
				status_err(st, "list", prefix, &body, err);
			goto out;
		}
		if (each_elem(body.buf ? body.buf : "", "Contents", list_elem, &w) != 0 || w.more)
			break;
		if (w.failed)
			break;
		free(trunc);
		trunc = xml_field(body.buf, body.buf + body.len, "IsTruncated");
		free(token);
		token = xml_field(body.buf, body.buf + body.len, "NextContinuationToken");
		if (trunc == NULL || strcmp(trunc, "true") != 0 || token == NULL)
			break;
	}
	if (w.failed) {
		kiln_err(err, KILN_E_IO, "s3 list %s: stopped", prefix);
		goto out;
	}
	if (more)
		*more = w.more;
	ret = 0;
out:
	free(w.last);
	free(token);
	free(trunc);
	kiln_buf_free(&body);
	kiln_buf_free(&qs);
	return ret;
}

struct mp_walk {
	reg_s3_upload_fn fn;
	void *ud;
	int failed;
};

static int mp_elem(void *ud, const char *p, const char *end)
{
	struct mp_walk *w = ud;
	char *key = xml_field(p, end, "Key"), *id = xml_field(p, end, "UploadId"), *at = xml_field(p, end, "Initiated");

	if (key && id && w->fn(w->ud, key, id, iso_time(at)) < 0)
		w->failed = 1;
	free(key);
	free(id);
	free(at);
	return w->failed;
}

int reg_s3_list_multipart(const struct reg_s3_cfg *s3, reg_s3_upload_fn fn, void *ud, kiln_error **err)
{
	struct mp_walk w = { .fn = fn, .ud = ud };
	kiln_buf body = KILN_BUF_INIT, qs = KILN_BUF_INIT;
	char *kmark = NULL, *umark = NULL, *trunc = NULL;
	int ret = -1;

	for (;;) {
		struct s3_req q = { .resp = &body };
		long st;

		kiln_buf_reset(&body);
		kiln_buf_reset(&qs);
		/* Canonical order: parameters sorted by name. */
		if (kmark) {
			kiln_buf_adds(&qs, "key-marker=");
			reg_s3_uri_encode(&qs, kmark, 0);
			kiln_buf_addc(&qs, '&');
		}
		kiln_buf_addf(&qs, "max-uploads=%d", reg_s3_page_size);
		if (kmark) {
			kiln_buf_adds(&qs, "&upload-id-marker=");
			reg_s3_uri_encode(&qs, umark ? umark : "", 0);
		}
		kiln_buf_adds(&qs, "&uploads=");
		st = s3_do(s3, "GET", NULL, qs.buf, NULL, &q, err);
		if (st != 200) {
			if (st >= 0)
				status_err(st, "list multipart uploads", s3->bucket, &body, err);
			goto out;
		}
		each_elem(body.buf ? body.buf : "", "Upload", mp_elem, &w);
		if (w.failed) {
			kiln_err(err, KILN_E_IO, "s3 list multipart uploads: stopped");
			goto out;
		}
		free(trunc);
		trunc = xml_field(body.buf, body.buf + body.len, "IsTruncated");
		free(kmark);
		free(umark);
		kmark = xml_field(body.buf, body.buf + body.len, "NextKeyMarker");
		umark = xml_field(body.buf, body.buf + body.len, "NextUploadIdMarker");
		if (trunc == NULL || strcmp(trunc, "true") != 0 || kmark == NULL)
			break;
	}
	ret = 0;
out:
	free(kmark);
	free(umark);
	free(trunc);
	kiln_buf_free(&body);
	kiln_buf_free(&qs);
	return ret;
}

int reg_s3_abort_multipart(const struct reg_s3_cfg *s3, const char *key, const char *upload_id, kiln_error **err)
{
	kiln_buf body = KILN_BUF_INIT, qs = KILN_BUF_INIT;
	struct s3_req q = { .resp = &body };
	long st;
	int ret;

	kiln_buf_adds(&qs, "uploadId=");
	reg_s3_uri_encode(&qs, upload_id, 0);
	st = s3_do(s3, "DELETE", key, qs.buf, NULL, &q, err);
	ret = st == 204 || st == 200 || st == 404 ? 0 : st < 0 ? -1 : status_err(st, "abort multipart", key, &body, err);
	kiln_buf_free(&body);
	kiln_buf_free(&qs);
	return ret;
}
