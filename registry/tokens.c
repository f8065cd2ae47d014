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
	int ok, star;

	if (colon == NULL || colon == s || strchr(s, ';'))
		return 0;
	ns = kiln_xstrndup(s, (size_t)(colon - s));
	star = strcmp(ns, "*") == 0;
	ok = star || oci_name_valid(ns);
	free(ns);
	for (const char *p = colon + 1; ok && *p;) {
		size_t n = strcspn(p, ",");
		ok = (n == 4 && (!strncmp(p, "pull", 4) || !strncmp(p, "push", 4))) || (n == 6 && !strncmp(p, "delete", 6)) ||
		     (n == 5 && !strncmp(p, "build", 5)) || (n == 7 && !strncmp(p, "sandbox", 7)) ||
		     (n == 7 && star && !strncmp(p, "metrics", 7)) || (n == 1 && *p == '*');
		p += n + (p[n] == ',');
	}
	return ok && colon[1] != '\0';
}

int reg_token_create(const struct reg_config *c, const char *label, const char *const *scopes, int64_t ttl_s,
		     char **token_out, kiln_error **err)
{
	return reg_token_create_as(c, label, scopes, ttl_s, "kiln_", token_out, err);
}

int reg_token_create_as(const struct reg_config *c, const char *label, const char *const *scopes, int64_t ttl_s,
			const char *prefix, char **token_out, kiln_error **err)
{
	unsigned char rnd[32];
	char secret[80], h[KILN_DIGEST_MAX];
	kiln_buf sc = KILN_BUF_INIT;
	struct reg_admin adm;
	int ret = -1;

	*token_out = NULL;
	if (label[0] == '\0' || strlen(label) > 100)
		return kiln_err(err, KILN_E_USAGE, "token label must be 1-100 characters");
	for (size_t i = 0; scopes[i]; i++) {
		if (!scope_valid(scopes[i])) {
			kiln_err(err, KILN_E_USAGE, "scope '%s': want NAMESPACE:ACTIONS (actions pull,push,delete,build,sandbox or *;"
				 " metrics only as *:metrics)",
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
	if (strcmp(prefix, "kiln_") != 0 && strcmp(prefix, "e2b_") != 0) {
		kiln_err(err, KILN_E_USAGE, "a token's prefix is kiln_ or e2b_, not '%.16s'", prefix);
		goto out;
	}
	strcpy(secret, prefix);
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(secret + strlen(prefix) + 2 * i, 3, "%02x", rnd[i]);
	kiln_digest_buf(KILN_SHA256, secret, strlen(secret), h);
	if (reg_admin_open(&adm, c, err) < 0)
		goto out;
	ret = adm.st.ops->token_put(&adm.st, adm.db, label, h, sc.buf, ttl_s > 0 ? reg_db_now() + ttl_s : 0, err);
	reg_admin_close(&adm);
	if (ret == 0)
		*token_out = kiln_xstrdup(secret);
out:
	kiln_buf_free(&sc);
	return ret;
}

/* The filesystem backend's token rows (its table's token_*, backend_fs.c). */
int reg_db_token_put(reg_db *db, const char *label, const char *hash, const char *scopes, int64_t expires,
		     kiln_error **err)
{
	sqlite3_stmt *st = reg_db_prep(db, "INSERT INTO tokens(label, hash, scopes, created, expires) VALUES(?, ?, ?, ?, ?)",
				       err);
	int rc, ret = -1;

	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, label, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, hash, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, scopes, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, reg_db_now());
	sqlite3_bind_int64(st, 5, expires);
	rc = sqlite3_step(st);
	if (rc == SQLITE_CONSTRAINT)
		kiln_err(err, KILN_E_EXISTS, "a token labelled '%s' exists already", label);
	else if (rc != SQLITE_DONE)
		reg_db_fail(db, err, "create token");
	else
		ret = 0;
	sqlite3_finalize(st);
	return ret;
}

int reg_db_token_list(reg_db *db, kiln_buf *out, kiln_error **err)
{
	sqlite3_stmt *st = reg_db_prep(db, "SELECT label, scopes, created, expires FROM tokens ORDER BY label", err);
	int ret, rc;

	if (st == NULL)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		time_t cr = (time_t)sqlite3_column_int64(st, 2), ex = (time_t)sqlite3_column_int64(st, 3);
		char cs[KILN_TIME_MAX], es[KILN_TIME_MAX] = "never";

		kiln_time_rfc3339(cr, cs);
		if (ex)
			kiln_time_rfc3339(ex, es);
		kiln_buf_addf(out, "%-20s %-40s created %s expires %s%s\n", (const char *)sqlite3_column_text(st, 0),
			      (const char *)sqlite3_column_text(st, 1), cs, es, ex && ex <= time(NULL) ? " (expired)" : "");
	}
	ret = rc == SQLITE_DONE ? 0 : reg_db_fail(db, err, "list tokens");
	sqlite3_finalize(st);
	return ret;
}

int reg_db_token_revoke(reg_db *db, const char *label, kiln_error **err)
{
	sqlite3_stmt *st = reg_db_prep(db, "DELETE FROM tokens WHERE label = ?", err);
	int ret = -1;

	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, label, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		reg_db_fail(db, err, "revoke token");
	else if (sqlite3_changes(db->h) == 0)
		kiln_err(err, KILN_E_NOTFOUND, "no token labelled '%s'", label);
	else
		ret = 0;
	sqlite3_finalize(st);
	return ret;
}

int reg_token_list(const struct reg_config *c, kiln_buf *out, kiln_error **err)
{
	struct reg_admin a;
	int ret;

	if (reg_admin_open(&a, c, err) < 0)
		return -1;
	ret = a.st.ops->token_list(&a.st, a.db, out, err);
	reg_admin_close(&a);
	return ret;
}

int reg_token_revoke(const struct reg_config *c, const char *label, kiln_error **err)
{
	struct reg_admin a;
	int ret;

	if (reg_admin_open(&a, c, err) < 0)
		return -1;
	ret = a.st.ops->token_revoke(&a.st, a.db, label, err);
	reg_admin_close(&a);
	return ret;
}
