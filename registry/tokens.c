/* tokens.c — administration of access tokens on a data directory: create
 * (the secret is shown once, only its sha256 is kept), list, revoke.  Scope
 * syntax: "NAMESPACE:ACTIONS" with actions pull, push, delete, build
 * (the build service) or "*". */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "registry/internal.h"

static int scope_valid(const char *s)
{
	const char *colon = strchr(s, ':');
	char *ns;
	int ok;

	if (colon == NULL || colon == s || strchr(s, ';'))
		return 0;
	ns = kiln_xstrndup(s, (size_t)(colon - s));
	ok = strcmp(ns, "*") == 0 || oci_name_valid(ns);
	free(ns);
	for (const char *p = colon + 1; ok && *p;) {
		size_t n = strcspn(p, ",");
		ok = (n == 4 && (!strncmp(p, "pull", 4) || !strncmp(p, "push", 4))) || (n == 6 && !strncmp(p, "delete", 6)) ||
		     (n == 5 && !strncmp(p, "build", 5)) ||
		     (n == 1 && *p == '*');
		p += n + (p[n] == ',');
	}
	return ok && colon[1] != '\0';
}

int reg_token_create(const struct reg_config *c, const char *label, const char *const *scopes, int64_t ttl_s,
		     char **token_out, kiln_error **err)
{
	unsigned char rnd[32];
	char secret[80], h[KILN_DIGEST_MAX];
	kiln_buf sc = KILN_BUF_INIT;
	sqlite3_stmt *st = NULL;
	reg_db *db = NULL;
	int ret = -1, rc;

	*token_out = NULL;
	if (label[0] == '\0' || strlen(label) > 100)
		return kiln_err(err, KILN_E_USAGE, "token label must be 1-100 characters");
	for (size_t i = 0; scopes[i]; i++) {
		if (!scope_valid(scopes[i])) {
			kiln_err(err, KILN_E_USAGE, "scope '%s': want NAMESPACE:ACTIONS (actions pull,push,delete,build or *)",
				 scopes[i]);
			goto out;
		}
		kiln_buf_addf(&sc, "%s%s", i ? ";" : "", scopes[i]);
	}
	if (sc.len == 0) {
		kiln_err(err, KILN_E_USAGE, "a token needs at least one --scope");
		goto out;
	}
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		kiln_err_errno(err, errno, "getrandom");
		goto out;
	}
	strcpy(secret, "kiln_");
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(secret + 5 + 2 * i, 3, "%02x", rnd[i]);
	kiln_digest_buf(KILN_SHA256, secret, strlen(secret), h);
	if (c->s3_endpoint) {
		reg_store store;
		if (reg_store_open(&store, c, err) < 0)
			goto out;
		rc = reg_s3a_token_put(&store, label, h, sc.buf, ttl_s > 0 ? reg_db_now() + ttl_s : 0, err);
		reg_store_close(&store);
		if (rc == 0)
			*token_out = kiln_xstrdup(secret);
		ret = rc;
		goto out;
	}
	db = reg_db_open_cfg(c, err);
	if (db == NULL)
		goto out;
	st = reg_db_prep(db, "INSERT INTO tokens(label, hash, scopes, created, expires) VALUES(?, ?, ?, ?, ?)", err);
	if (st == NULL)
		goto out;
	sqlite3_bind_text(st, 1, label, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, h, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, sc.buf, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, reg_db_now());
	sqlite3_bind_int64(st, 5, ttl_s > 0 ? reg_db_now() + ttl_s : 0);
	rc = sqlite3_step(st);
	if (rc == SQLITE_CONSTRAINT) {
		kiln_err(err, KILN_E_EXISTS, "a token labelled '%s' exists already", label);
		goto out;
	}
	if (rc != SQLITE_DONE) {
		reg_db_fail(db, err, "create token");
		goto out;
	}
	*token_out = kiln_xstrdup(secret);
	ret = 0;
out:
	sqlite3_finalize(st);
	reg_db_close(db);
	kiln_buf_free(&sc);
	return ret;
}

/* With the S3 backend the tokens are in the bucket, for every replica. */
static int with_s3(const struct reg_config *c, const char *label, kiln_buf *out, kiln_error **err)
{
	reg_store store;
	int ret;

	if (reg_store_open(&store, c, err) < 0)
		return -1;
	ret = label ? reg_s3a_token_revoke(&store, label, err) : reg_s3a_token_list(&store, out, err);
	reg_store_close(&store);
	return ret;
}

int reg_token_list(const struct reg_config *c, kiln_buf *out, kiln_error **err)
{
	reg_db *db;
	sqlite3_stmt *st = NULL;
	int ret = -1, rc;

	if (c->s3_endpoint)
		return with_s3(c, NULL, out, err);
	db = reg_db_open_cfg(c, err);
	if (db == NULL)
		return -1;
	st = reg_db_prep(db, "SELECT label, scopes, created, expires FROM tokens ORDER BY label", err);
	if (st == NULL)
		goto out;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		time_t cr = (time_t)sqlite3_column_int64(st, 2), ex = (time_t)sqlite3_column_int64(st, 3);
		char cs[32], es[32] = "never";
		struct tm tm;

		strftime(cs, sizeof(cs), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&cr, &tm));
		if (ex)
			strftime(es, sizeof(es), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&ex, &tm));
		kiln_buf_addf(out, "%-20s %-40s created %s expires %s%s\n", (const char *)sqlite3_column_text(st, 0),
			      (const char *)sqlite3_column_text(st, 1), cs, es, ex && ex <= time(NULL) ? " (expired)" : "");
	}
	ret = rc == SQLITE_DONE ? 0 : reg_db_fail(db, err, "list tokens");
out:
	sqlite3_finalize(st);
	reg_db_close(db);
	return ret;
}

int reg_token_revoke(const struct reg_config *c, const char *label, kiln_error **err)
{
	reg_db *db;
	sqlite3_stmt *st = NULL;
	int ret = -1;

	if (c->s3_endpoint)
		return with_s3(c, label, NULL, err);
	db = reg_db_open_cfg(c, err);
	if (db == NULL)
		return -1;
	st = reg_db_prep(db, "DELETE FROM tokens WHERE label = ?", err);
	if (st == NULL)
		goto out;
	sqlite3_bind_text(st, 1, label, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE) {
		reg_db_fail(db, err, "revoke token");
		goto out;
	}
	if (sqlite3_changes(db->h) == 0) {
		kiln_err(err, KILN_E_NOTFOUND, "no token labelled '%s'", label);
		goto out;
	}
	ret = 0;
out:
	sqlite3_finalize(st);
	reg_db_close(db);
	return ret;
}
