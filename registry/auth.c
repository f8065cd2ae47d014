/* auth.c — who may do what.  Tokens are random secrets created by `kiln token
 * create`; only their sha256 is stored, with scopes "NAMESPACE:ACTIONS".  A
 * client presents the secret (Basic or Bearer) or a short-lived token from
 * the /token endpoint (the standard Bearer challenge flow): "kt1.ID.EXP.MAC",
 * an HMAC-SHA256 under the server's key, whose grants are read from the db at
 * each request so a revocation takes effect at once. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "registry/internal.h"
#include "registry/server_limits.h"

int reg_auth_key(const char *data_dir, unsigned char key[32], kiln_error **err)
{
	char *path = kiln_path_join(data_dir, "auth.key"), *data = NULL;
	size_t len = 0;
	int ret = -1;

	if (kiln_read_file(path, &data, &len, 64, err) == 0 && len == 32) {
		memcpy(key, data, 32);
		ret = 0;
		goto out;
	}
	kiln_error_clear(err);
	if (getrandom(key, 32, 0) != 32) {
		kiln_err_errno(err, errno, "getrandom");
		goto out;
	}
	/* O_EXCL-like race between two first starts is harmless: last writer wins
	 * before any token was issued. */
	ret = kiln_write_atomic(path, key, 32, 0600, err);
out:
	free(data);
	free(path);
	return ret;
}

static void hex(const unsigned char *in, size_t n, char *out)
{
	static const char h[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = h[in[i] >> 4];
		out[2 * i + 1] = h[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static void mac(const unsigned char key[32], int64_t id, int64_t exp, char out[65])
{
	char msg[64];
	unsigned char md[32];
	unsigned int mdlen = 0;

	snprintf(msg, sizeof(msg), "%" PRId64 ".%" PRId64, id, exp);
	HMAC(EVP_sha256(), key, 32, (const unsigned char *)msg, strlen(msg), md, &mdlen);
	hex(md, 32, out);
}

/* The filesystem backend's token lookups (its table's token_secret and
 * token_id): 1 valid (id, scopes set), 0 unknown or expired, -1 error. */
int reg_db_token_secret(reg_db *db, const char *secret, int64_t *id, char **scopes, kiln_error **err)
{
	char h[KILN_DIGEST_MAX];
	sqlite3_stmt *st;
	int ret = -1, rc;

	kiln_digest_buf(KILN_SHA256, secret, strlen(secret), h);
	pthread_mutex_lock(&db->lock);
	st = reg_db_prep(db, "SELECT id, scopes FROM tokens WHERE hash = ? AND (expires = 0 OR expires > ?)", err);
	if (st) {
		sqlite3_bind_text(st, 1, h, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, reg_db_now());
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			*id = sqlite3_column_int64(st, 0);
			*scopes = kiln_xstrdup((const char *)sqlite3_column_text(st, 1));
			ret = 1;
		} else {
			ret = rc == SQLITE_DONE ? 0 : reg_db_fail(db, err, "token lookup");
		}
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return ret;
}

int reg_db_token_id(reg_db *db, int64_t id, char **scopes, kiln_error **err)
{
	sqlite3_stmt *st;
	int ret = -1, rc;

	pthread_mutex_lock(&db->lock);
	st = reg_db_prep(db, "SELECT scopes FROM tokens WHERE id = ? AND (expires = 0 OR expires > ?)", err);
	if (st) {
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_int64(st, 2, reg_db_now());
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW)
			*scopes = kiln_xstrdup((const char *)sqlite3_column_text(st, 0));
		ret = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : reg_db_fail(db, err, "token lookup");
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return ret;
}

/* A secret through the backend: 1 valid (r's identity set), 0 unknown or expired. */
static int lookup_secret(reg_req *r, const char *secret, kiln_error **err)
{
	const reg_store *st = &r->srv->store;

	return st->ops->token_secret(st, r->srv->db, secret, &r->tok_id, &r->scopes, err);
}

/* An issued token "kt1.ID.EXP.MAC": 1 valid, 0 not. */
static int check_issued(reg_req *r, const char *tok, kiln_error **err)
{
	long long id, exp;
	char want[65], got[65];
	int n = 0;

	if (sscanf(tok, "kt1.%lld.%lld.%64[0-9a-f]%n", &id, &exp, got, &n) != 3 || tok[n] != '\0' || id < 0)
		return 0;
	mac(r->srv->auth_key, id, exp, want);
	if (CRYPTO_memcmp(want, got, 64) != 0 || exp <= reg_db_now())
		return 0;
	r->tok_id = id;
	if (id == 0)
		return 1; /* anonymous token: valid, grants nothing beyond public pulls */
	return r->srv->store.ops->token_id(&r->srv->store, r->srv->db, id, &r->scopes, err);
}

/* The name a credential claims, for the limiter: the Basic user name, or
 * "kt1.ID" of an issued token; "" when it names nothing. */
static void claimed_name(const char *h, const char *user, char out[128])
{
	long long id;

	out[0] = '\0';
	if (user)
		snprintf(out, 128, "u:%s", user);
	else if (strncasecmp(h, "Bearer ", 7) == 0 && sscanf(h + 7, "kt1.%lld.", &id) == 1)
		snprintf(out, 128, "kt1.%lld", id);
}

/* Failed authentications are limited per client address and per claimed
 * name (server_limits.c): 429 with Retry-After instead of checking.  A name
 * that is out of tries stays open to addresses with no failure on record, so
 * guessing at a name from elsewhere never locks out its rightful user. */
static int limited(reg_req *r, const char *name)
{
	reg_authlim *l = reg_limits_auth(r->srv->limits);
	int64_t now = reg_db_now();
	unsigned wait = reg_authlim_blocked(l, 'a', r->client, now);
	char s[16];

	if (wait == 0 && name[0] && reg_authlim_failed(l, 'a', r->client, now))
		wait = reg_authlim_blocked(l, 'n', name, now);
	if (wait == 0)
		return 0;
	reg_metrics_auth_limited(r->srv);
	reg_error(r, 429, "TOOMANYREQUESTS", "too many failed authentications, retry in %u s", wait);
	snprintf(s, sizeof(s), "%u", wait);
	reg_header(r, "Retry-After", s);
	return 1;
}

/* Decodes the Authorization header.  1 valid identity, 0 none given, -2 bad,
 * -3 answered (429: too many failures). */
static int identify(reg_req *r, kiln_error **err)
{
	const char *h = reg_req_header(r, "Authorization"), *key = reg_req_header(r, "X-API-Key");
	char *user = NULL, *pass = NULL, name[128], *bearer = NULL;
	int ret;

	/* E2B's clients send the API key as X-API-Key: the same secret as a Bearer. */
	if (h == NULL && key != NULL)
		h = bearer = kiln_xasprintf("Bearer %s", key);
	if (h == NULL)
		return 0;
	if (strncasecmp(h, "Basic ", 6) == 0) {
		user = kiln_b64_decode(h + 6);
		pass = user ? strchr(user, ':') : NULL;
		if (pass)
			*pass++ = '\0';
	}
	claimed_name(h, pass ? user : NULL, name);
	if (limited(r, name)) {
		free(user);
		free(bearer);
		return -3;
	}
	if (strncasecmp(h, "Bearer ", 7) == 0) {
		const char *tok = h + 7;
		ret = strncmp(tok, "kt1.", 4) == 0 ? check_issued(r, tok, err) : lookup_secret(r, tok, err);
	} else {
		ret = pass ? lookup_secret(r, pass, err) : 0;
	}
	free(user);
	free(bearer);
	if (ret < 0)
		return -1;
	r->authed = ret == 1;
	if (ret == 1)
		return 1;
	reg_metrics_auth_failed(r->srv);
	reg_authlim_fail(reg_limits_auth(r->srv->limits), 'a', r->client, reg_db_now());
	if (name[0])
		reg_authlim_fail(reg_limits_auth(r->srv->limits), 'n', name, reg_db_now());
	return -2;
}

static int actions_of(const char *s, size_t len)
{
	int a = 0;

	while (len > 0) {
		size_t n = 0;
		while (n < len && s[n] != ',')
			n++;
		if (n == 4 && strncmp(s, "pull", 4) == 0)
			a |= REG_PULL;
		else if (n == 4 && strncmp(s, "push", 4) == 0)
			a |= REG_PUSH;
		else if (n == 6 && strncmp(s, "delete", 6) == 0)
			a |= REG_DELETE;
		else if (n == 5 && strncmp(s, "build", 5) == 0)
			a |= REG_BUILD;
		else if (n == 7 && strncmp(s, "sandbox", 7) == 0)
			a |= REG_SANDBOX;
		else if (n == 7 && strncmp(s, "metrics", 7) == 0)
			a |= REG_METRICS;
		else if (n == 1 && s[0] == '*')
			a |= REG_PULL | REG_PUSH | REG_DELETE | REG_BUILD | REG_SANDBOX | REG_METRICS;
		s += n;
		len -= n;
		if (len) {
			s++;
			len--;
		}
	}
	return a;
}

/* Does "NS:ACTIONS;NS:ACTIONS" grant action a on repo?  NS "*" is every
 * repository; NS "team" covers "team" and "team/...". */
static int grants(const char *scopes, const char *repo, enum reg_action a)
{
	const char *p = scopes;

	while (p && *p) {
		const char *end = strchr(p, ';'), *colon;
		size_t len = end ? (size_t)(end - p) : strlen(p);

		colon = memchr(p, ':', len);
		if (colon) {
			size_t nslen = (size_t)(colon - p);
			int match = (nslen == 1 && p[0] == '*') ||
				    (repo && a != REG_METRICS && strncmp(repo, p, nslen) == 0 && (repo[nslen] == '\0' || repo[nslen] == '/'));
			if (match && (actions_of(colon + 1, len - nslen - 1) & (int)a))
				return 1;
		}
		p = end ? end + 1 : NULL;
	}
	return 0;
}

static void challenge(reg_req *r, const char *scope)
{
	const char *host = reg_req_header(r, "Host");
	kiln_buf b = KILN_BUF_INIT;

	if (r->srv->cfg.realm)
		kiln_buf_addf(&b, "Bearer realm=\"%s\"", r->srv->cfg.realm);
	else
		kiln_buf_addf(&b, "Bearer realm=\"http://%s/token\"", host ? host : "127.0.0.1");
	kiln_buf_addf(&b, ",service=\"%s\"", r->srv->cfg.service);
	if (scope)
		kiln_buf_addf(&b, ",scope=\"%s\"", scope);
	reg_header(r, "WWW-Authenticate", b.buf);
	kiln_buf_free(&b);
}

static enum reg_action action_of(reg_req *r)
{
	/* the batch query is a read, as the HEADs it replaces */
	if (strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0 || r->route == R_BLOBS_EXIST)
		return REG_PULL;
	if (strcmp(r->method, "DELETE") == 0 && r->route != R_UPLOAD)
		return REG_DELETE;
	return REG_PUSH;
}

int reg_auth_allows(reg_req *r, const char *repo, enum reg_action a)
{
	kiln_error *err = NULL;
	int pub;

	if (!r->srv->cfg.auth)
		return 1;
	if (r->scopes && grants(r->scopes, repo, a))
		return 1;
	if (a != REG_PULL)
		return 0;
	pub = r->srv->store.ops->repo_public(&r->srv->store, r->srv->db, repo, &err);
	kiln_error_free(err);
	return pub == 1;
}

int reg_auth_request(reg_req *r)
{
	enum reg_action a = action_of(r);
	kiln_error *err = NULL;
	char scope[400];
	int who;

	if (!r->srv->cfg.auth || r->route == R_TOKEN || r->route == R_NONE)
		return 0;
	who = identify(r, &err);
	if (who == -1) {
		reg_internal(r, err);
		return -1;
	}
	if (who == -3)
		return -1;
	if (r->route == R_BASE || r->route == R_CATALOG || r->route == R_METRICS)
		snprintf(scope, sizeof(scope), "%s", r->route == R_CATALOG ? "registry:catalog:*" : "");
	else
		snprintf(scope, sizeof(scope), "repository:%s:%s", r->name,
			 a == REG_PULL ? "pull" : a == REG_PUSH ? "pull,push" : "delete");
	if (who == -2) {
		reg_error(r, 401, "UNAUTHORIZED", "invalid, expired or revoked credentials");
		challenge(r, scope[0] ? scope : NULL);
		return -1;
	}
	if (r->route == R_BASE) {
		if (who == 1)
			return 0;
	} else if (r->route == R_CATALOG) {
		if (r->scopes && grants(r->scopes, NULL, REG_PULL))
			return 0;
	} else if (r->route == R_METRICS) {
		if (r->scopes && grants(r->scopes, NULL, REG_METRICS))
			return 0;
		if (who == 1) {
			reg_error(r, 403, "DENIED", "token does not grant metrics (a scope of \"*:metrics\")");
			return -1;
		}
	} else if (reg_auth_allows(r, r->name, a)) {
		return 0;
	}
	if (who == 1 && r->tok_id != 0) {
		reg_error(r, 403, "DENIED", "token does not grant %s on %s", scope, r->name ? r->name : "the catalog");
		return -1;
	}
	reg_error(r, 401, "UNAUTHORIZED", "authentication required");
	challenge(r, scope[0] ? scope : NULL);
	return -1;
}

/* ---- for mounted modules (registry.h) ---- */

int reg_req_identify(reg_req *r, kiln_error **err)
{
	if (!r->srv->cfg.auth)
		return 1;
	if (r->identified == 0) {
		int who = identify(r, err);
		if (who == -1)
			return -1;
		r->identified = who == 0 ? 2 : who == 1 ? 1 : who;
	}
	return r->identified == 2 ? 0 : r->identified;
}

int reg_req_allows(reg_req *r, const char *repo, enum reg_action a)
{
	if (!r->srv->cfg.auth)
		return 1;
	return r->authed && r->scopes && grants(r->scopes, repo, a);
}

char *reg_req_namespaces(reg_req *r, enum reg_action a)
{
	kiln_buf b = KILN_BUF_INIT;
	const char *p;

	if (!r->srv->cfg.auth)
		return kiln_xstrdup("*");
	for (p = r->authed ? r->scopes : NULL; p && *p;) {
		const char *end = strchr(p, ';'), *colon;
		size_t len = end ? (size_t)(end - p) : strlen(p);

		colon = memchr(p, ':', len);
		if (colon && (actions_of(colon + 1, len - (size_t)(colon - p) - 1) & (int)a))
			kiln_buf_addf(&b, "%s%.*s", b.len ? ";" : "", (int)(colon - p), p);
		p = end ? end + 1 : NULL;
	}
	if (b.len == 0) {
		kiln_buf_free(&b);
		return NULL;
	}
	return kiln_buf_detach(&b);
}

/* GET /token?service=&scope=: exchange credentials (Basic with the secret as
 * password, or none for an anonymous token) for a short-lived Bearer token. */
void reg_token_handle(reg_req *r)
{
	kiln_error *err = NULL;
	int64_t exp = reg_db_now() + r->srv->cfg.token_ttl_s;
	char m[65], *tok, issued[KILN_TIME_MAX];
	time_t now = time(NULL);
	int who;

	if (strcmp(r->method, "GET") != 0) {
		reg_error(r, 405, "UNSUPPORTED", "method %s not allowed here", r->method);
		return;
	}
	who = identify(r, &err);
	if (who == -1) {
		reg_internal(r, err);
		return;
	}
	if (who == -3)
		return;
	if (who == -2) {
		reg_error(r, 401, "UNAUTHORIZED", "invalid, expired or revoked credentials");
		return;
	}
	mac(r->srv->auth_key, r->tok_id, exp, m);
	tok = kiln_xasprintf("kt1.%" PRId64 ".%" PRId64 ".%s", r->tok_id, exp, m);
	kiln_time_rfc3339(now, issued);
	reg_respond_json(r, 200, json_pack("{s:s,s:s,s:I,s:s}", "token", tok, "access_token", tok, "expires_in",
					   (json_int_t)r->srv->cfg.token_ttl_s, "issued_at", issued), NULL);
	free(tok);
}
