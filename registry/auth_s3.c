/* auth_s3.c — with the S3 backend, tokens, the HMAC key of issued tokens and
 * the public flags live in the bucket too (_auth/...), so every replica
 * accepts the same secrets, the tokens any replica issued, and a revocation
 * made anywhere (read through on each request, like the repositories). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "registry/internal.h"

#define KEY_OBJ "_auth/key"

int reg_s3a_key(const reg_store *st, unsigned char key[32], kiln_error **err)
{
	kiln_buf b = KILN_BUF_INIT;
	int r;

	for (int round = 0; round < 2; round++) {
		kiln_buf_reset(&b);
		r = reg_s3_get_small(&st->s3, KEY_OBJ, 64, &b, NULL, err);
		if (r < 0)
			goto out;
		if (r == 1 && b.len == 32) {
			memcpy(key, b.buf, 32);
			kiln_buf_free(&b);
			return 0;
		}
		if (round == 1)
			break;
		/* First start on this bucket: make one, then use whatever is stored
		 * (replicas starting together converge on the last write, before any
		 * token was issued). */
		if (getrandom(key, 32, 0) != 32) {
			kiln_err_errno(err, errno, "getrandom");
			goto out;
		}
		if (reg_s3_put(&st->s3, KEY_OBJ, key, 32, err) < 0)
			goto out;
		kiln_sleep_ms(200);
	}
	kiln_err(err, KILN_E_INVALID, "s3 %s: not a 32-byte key", KEY_OBJ);
out:
	kiln_buf_free(&b);
	return -1;
}

static char *hash_key(const char *hash)
{
	return kiln_xasprintf("_auth/hashes/%s", kiln_digest_hex(hash));
}

/* A token record: 1 found and valid (id, scopes), 0 missing or expired. */
static int read_token(const reg_store *st, const char *key, int64_t *id, char **scopes, json_t **rec, kiln_error **err)
{
	kiln_buf b = KILN_BUF_INIT;
	json_t *j = NULL;
	int r = reg_s3_get_small(&st->s3, key, 4096, &b, NULL, err);
	int64_t exp;

	if (r <= 0)
		goto out;
	j = json_loadb(b.buf ? b.buf : "", b.len, 0, NULL);
	if (j == NULL || !json_is_string(json_object_get(j, "scopes"))) {
		r = kiln_err(err, KILN_E_INVALID, "s3 %s: not a token record", key);
		goto out;
	}
	exp = json_integer_value(json_object_get(j, "expires"));
	if (!rec && exp != 0 && exp <= (int64_t)time(NULL)) {
		r = 0;
		goto out;
	}
	if (id)
		*id = json_integer_value(json_object_get(j, "id"));
	if (scopes)
		*scopes = kiln_xstrdup(json_string_value(json_object_get(j, "scopes")));
	if (rec) {
		*rec = j;
		j = NULL;
	}
out:
	json_decref(j);
	kiln_buf_free(&b);
	return r;
}

int reg_s3a_lookup_secret(const reg_store *st, const char *secret, int64_t *id, char **scopes, kiln_error **err)
{
	char h[KILN_DIGEST_MAX], *key;
	int r;

	kiln_digest_buf(KILN_SHA256, secret, strlen(secret), h);
	key = hash_key(h);
	r = read_token(st, key, id, scopes, NULL, err);
	free(key);
	return r;
}

int reg_s3a_lookup_id(const reg_store *st, int64_t id, char **scopes, kiln_error **err)
{
	char *key = kiln_xasprintf("_auth/ids/%" PRId64, id);
	int r = read_token(st, key, NULL, scopes, NULL, err);

	free(key);
	return r;
}

int reg_s3a_token_put(const reg_store *st, const char *label, const char *hash, const char *scopes, int64_t expires,
		      kiln_error **err)
{
	char *lkey = kiln_xasprintf("_auth/tokens/%s", label), *hkey = hash_key(hash), *ikey = NULL, *body = NULL;
	uint64_t rnd;
	json_t *rec = NULL;
	int r, ret = -1;

	r = reg_s3_stat(&st->s3, lkey, NULL, NULL, err);
	if (r != 0) {
		if (r > 0)
			kiln_err(err, KILN_E_EXISTS, "a token labelled '%s' exists already", label);
		goto out;
	}
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		kiln_err_errno(err, errno, "getrandom");
		goto out;
	}
	rnd = (rnd >> 12) | 1; /* positive, fits a JSON integer; 0 is the anonymous id */
	rec = json_pack("{s:I,s:s,s:s,s:s,s:I,s:I}", "id", (json_int_t)rnd, "label", label, "hash", hash, "scopes", scopes,
			"created", (json_int_t)time(NULL), "expires", (json_int_t)expires);
	body = json_dumps(rec, JSON_COMPACT | JSON_SORT_KEYS);
	ikey = kiln_xasprintf("_auth/ids/%" PRIu64, rnd);
	/* The lookup records first, the label (what ls shows, revoke finds) last. */
	if (reg_s3_put(&st->s3, ikey, body, strlen(body), err) < 0 || reg_s3_put(&st->s3, hkey, body, strlen(body), err) < 0 ||
	    reg_s3_put(&st->s3, lkey, body, strlen(body), err) < 0)
		goto out;
	ret = 0;
out:
	json_decref(rec);
	free(body);
	free(lkey);
	free(hkey);
	free(ikey);
	return ret;
}

struct list {
	const reg_store *st;
	kiln_buf *out;
	kiln_error **err;
};

static int list_cb(void *ud, const char *key, int64_t size, int64_t mtime)
{
	struct list *l = ud;
	json_t *rec = NULL;
	int r = read_token(l->st, key, NULL, NULL, &rec, l->err);
	time_t cr, ex;
	char cs[KILN_TIME_MAX], es[KILN_TIME_MAX] = "never";

	if (r <= 0)
		return r;
	cr = (time_t)json_integer_value(json_object_get(rec, "created"));
	ex = (time_t)json_integer_value(json_object_get(rec, "expires"));
	kiln_time_rfc3339(cr, cs);
	if (ex)
		kiln_time_rfc3339(ex, es);
	kiln_buf_addf(l->out, "%-20s %-40s created %s expires %s%s\n", key + strlen("_auth/tokens/"),
		      json_string_value(json_object_get(rec, "scopes")), cs, es,
		      ex && ex <= time(NULL) ? " (expired)" : "");
	json_decref(rec);
	return 0;
}

int reg_s3a_token_list(const reg_store *st, kiln_buf *out, kiln_error **err)
{
	struct list l = { st, out, err };

	return reg_s3_list(&st->s3, "_auth/tokens/", NULL, 0, list_cb, &l, NULL, err);
}

int reg_s3a_token_revoke(const reg_store *st, const char *label, kiln_error **err)
{
	char *lkey = kiln_xasprintf("_auth/tokens/%s", label), *hkey = NULL, *ikey = NULL;
	json_t *rec = NULL;
	int r, ret = -1;

	r = read_token(st, lkey, NULL, NULL, &rec, err);
	if (r <= 0) {
		if (r == 0)
			kiln_err(err, KILN_E_NOTFOUND, "no token labelled '%s'", label);
		goto out;
	}
	hkey = hash_key(json_string_value(json_object_get(rec, "hash")));
	ikey = kiln_xasprintf("_auth/ids/%" PRId64, (int64_t)json_integer_value(json_object_get(rec, "id")));
	/* What requests check goes first: revoked from the first delete on. */
	if (reg_s3_delete(&st->s3, hkey, err) < 0 || reg_s3_delete(&st->s3, ikey, err) < 0 ||
	    reg_s3_delete(&st->s3, lkey, err) < 0)
		goto out;
	ret = 0;
out:
	json_decref(rec);
	free(lkey);
	free(hkey);
	free(ikey);
	return ret;
}

int reg_s3a_public(const reg_store *st, const char *repo, kiln_error **err)
{
	char *key = kiln_xasprintf("_auth/public/%s", repo);
	int r = reg_s3_stat(&st->s3, key, NULL, NULL, err);

	free(key);
	return r;
}

int reg_s3a_set_public(const reg_store *st, const char *repo, int public_, kiln_error **err)
{
	char *key = kiln_xasprintf("_auth/public/%s", repo);
	int r = public_ ? reg_s3_put(&st->s3, key, "", 0, err) : reg_s3_delete(&st->s3, key, err);

	free(key);
	return r;
}
