/* auth.c — the registry auth challenge flow: WWW-Authenticate parsed
 * as RFC 7235 says (quoted strings, escapes, commas inside quotes, several
 * challenges), Bearer tokens fetched from the realm (with Basic credentials
 * when known, anonymously otherwise) and cached per scope; Basic challenges. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "regclient/internal.h"

void rc_challenge_free(struct rc_challenge *ch)
{
	free(ch->scheme);
	free(ch->realm);
	free(ch->service);
	free(ch->scope);
	memset(ch, 0, sizeof(*ch));
}

static int tchar(int c)
{
	return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

int rc_challenge_parse(const char *h, struct rc_challenge *ch, kiln_error **err)
{
	const char *p = h;
	kiln_buf val = KILN_BUF_INIT;

	memset(ch, 0, sizeof(*ch));
	while (*p == ' ' || *p == '\t' || *p == ',')
		p++;
	const char *s0 = p;
	while (tchar((unsigned char)*p))
		p++;
	if (p == s0) {
		kiln_err(err, KILN_E_INVALID, "WWW-Authenticate \"%s\": no auth scheme", h);
		goto fail;
	}
	ch->scheme = kiln_xstrndup(s0, (size_t)(p - s0));
	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		if (!*p)
			break;
		const char *n0 = p;
		while (tchar((unsigned char)*p))
			p++;
		size_t nl = (size_t)(p - n0);
		const char *q = p;
		while (*q == ' ' || *q == '\t')
			q++;
		if (nl == 0 || *q != '=') {
			if (nl && n0 != s0)
				break; /* a bare token: the next challenge begins */
			kiln_err(err, KILN_E_INVALID, "WWW-Authenticate \"%s\": expected NAME=VALUE at offset %zu", h,
				 (size_t)(n0 - h));
			goto fail;
		}
		p = q + 1;
		while (*p == ' ' || *p == '\t')
			p++;
		kiln_buf_reset(&val);
		if (*p == '"') {
			p++;
			while (*p && *p != '"') {
				if (*p == '\\' && p[1])
					p++;
				kiln_buf_addc(&val, *p++);
			}
			if (*p != '"') {
				kiln_err(err, KILN_E_INVALID, "WWW-Authenticate \"%s\": unterminated quoted string", h);
				goto fail;
			}
			p++;
		} else {
			while (tchar((unsigned char)*p) || *p == '/' || *p == ':' || *p == '=')
				kiln_buf_addc(&val, *p++);
		}
		char **dst = NULL;
		if (nl == 5 && strncasecmp(n0, "realm", 5) == 0)
			dst = &ch->realm;
		else if (nl == 7 && strncasecmp(n0, "service", 7) == 0)
			dst = &ch->service;
		else if (nl == 5 && strncasecmp(n0, "scope", 5) == 0)
			dst = &ch->scope;
		if (dst) {
			free(*dst);
			*dst = kiln_xstrdup(val.buf);
		}
		if (*p && *p != ',' && *p != ' ' && *p != '\t') {
			kiln_err(err, KILN_E_INVALID, "WWW-Authenticate \"%s\": unexpected '%c' at offset %zu", h, *p,
				 (size_t)(p - h));
			goto fail;
		}
	}
	kiln_buf_free(&val);
	return 0;
fail:
	kiln_buf_free(&val);
	rc_challenge_free(ch);
	return -1;
}

static struct rc_token *find_token(rc_client *c, const char *scope)
{
	for (size_t i = 0; i < c->ntokens; i++)
		if (strcmp(c->tokens[i].scope, scope ? scope : "") == 0)
			return &c->tokens[i];
	return NULL;
}

char *rc_auth_header(rc_client *c, const char *scope)
{
	struct rc_token *t = find_token(c, scope);
	if (!t || t->expires <= (int64_t)time(NULL))
		return NULL;
	return kiln_xasprintf("Authorization: Bearer %s", t->token);
}

static void put_token(rc_client *c, const char *scope, const char *token, int64_t ttl)
{
	struct rc_token *t = find_token(c, scope);
	if (!t) {
		c->tokens = kiln_xrealloc(c->tokens, (c->ntokens + 1) * sizeof(*c->tokens));
		t = &c->tokens[c->ntokens++];
		t->scope = kiln_xstrdup(scope ? scope : "");
		t->token = NULL;
	}
	free(t->token);
	t->token = kiln_xstrdup(token);
	/* renew a little early rather than be refused mid-transfer */
	t->expires = (int64_t)time(NULL) + (ttl > 30 ? ttl - 10 : ttl);
}

static char *token_url(rc_client *c, const struct rc_challenge *ch, const char *scope)
{
	kiln_buf b = KILN_BUF_INIT;
	char sep = strchr(ch->realm, '?') ? '&' : '?';

	kiln_buf_adds(&b, ch->realm);
	if (ch->service) {
		char *e = curl_easy_escape(c->easy, ch->service, 0);
		kiln_buf_addf(&b, "%cservice=%s", sep, e);
		curl_free(e);
		sep = '&';
	}
	for (const char *p = scope; p && *p;) {
		size_t n = strcspn(p, " ");
		if (n) {
			char *one = kiln_xstrndup(p, n), *e = curl_easy_escape(c->easy, one, 0);
			kiln_buf_addf(&b, "%cscope=%s", sep, e);
			curl_free(e);
			free(one);
			sep = '&';
		}
		p += n;
		while (*p == ' ')
			p++;
	}
	return kiln_buf_detach(&b);
}

static int fetch_token(rc_client *c, const struct rc_challenge *ch, const char *scope, kiln_error **err)
{
	struct rc_http t;
	json_t *j = NULL;
	const char *tok;
	int rc = -1;

	if (strncmp(ch->realm, "https://", 8) != 0 && strncmp(ch->realm, "http://", 7) != 0)
		return kiln_err(err, KILN_E_INVALID, "registry %s: token realm \"%s\" is not an http(s) URL", c->host,
				ch->realm);
	rc_http_init(&t, c, "GET", token_url(c, ch, scope), NULL);
	t.token_request = 1;
	t.out_max = 1 << 20;
	if (rc_http_do(&t, err) < 0)
		goto out;
	if (t.status != 200) {
		kiln_buf_reset(&t.out);
		rc_http_fail(&t, "token", err);
		goto out;
	}
	j = kiln_json_loadb(t.out.buf, t.out.len, "token answer", err);
	if (!j)
		goto out;
	tok = kiln_json_str(j, "token");
	if (!tok || !*tok)
		tok = kiln_json_str(j, "access_token");
	if (!tok || !*tok) {
		kiln_err(err, KILN_E_INVALID, "registry %s: token answer from %s has no token", c->host, ch->realm);
		goto out;
	}
	put_token(c, scope, tok, kiln_json_int(j, "expires_in", 60));
	rc = 0;
out:
	json_decref(j);
	rc_http_free(&t);
	return rc;
}

int rc_http_authorize(struct rc_http *r, kiln_error **err)
{
	rc_client *c = r->c;
	struct rc_challenge ch;
	int rc = -1;

	if (!r->www_auth)
		return kiln_err(err, KILN_E_GENERIC, "registry %s: HTTP 401 without a WWW-Authenticate challenge",
				c->host);
	if (rc_challenge_parse(r->www_auth, &ch, err) < 0)
		return kiln_error_wrap(err, "registry %s", c->host);
	if (strcasecmp(ch.scheme, "Basic") == 0) {
		if (!c->user)
			kiln_err(err, KILN_E_GENERIC, "registry %s requires a login (kiln login %s)", c->host, c->host);
		else if (r->sent_basic)
			kiln_err(err, KILN_E_GENERIC, "registry %s: credentials for user %s were not accepted", c->host,
				 c->user);
		else
			c->basic = 1, rc = 0;
	} else if (strcasecmp(ch.scheme, "Bearer") == 0) {
		if (!ch.realm)
			kiln_err(err, KILN_E_INVALID, "registry %s: Bearer challenge without a realm", c->host);
		else {
			const char *scope = r->scope ? r->scope : ch.scope;
			struct rc_token *old = find_token(c, scope);
			if (old)
				old->expires = 0;
			rc = fetch_token(c, &ch, scope, err);
			if (rc < 0)
				kiln_error_wrap(err, "authenticating to %s%s", c->host,
						c->user ? "" : " anonymously");
		}
	} else {
		kiln_err(err, KILN_E_GENERIC, "registry %s: unsupported auth scheme \"%s\"", c->host, ch.scheme);
	}
	rc_challenge_free(&ch);
	return rc;
}
