/* verify.c — a manifest digest against the policy's rule: every required
 * key's valid signature naming that digest and reference, then a trust
 * record ($KILN_HOME/trust/HEX.json) so the next use of the digest costs a
 * file read, and what kiln run checks for a template already on the host. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sign/internal.h"

/* Does a record entry cover what the rule asks (every key, the builder)? */
static bool entry_covers(json_t *e, const struct sign_rule *rule)
{
	json_t *keys = json_object_get(e, "keys"), *k;
	const char *builder = kiln_json_str(e, "builder");
	size_t i;

	/* a pass under repository matching does not answer an exact rule */
	if (json_is_true(json_object_get(e, "repository_identity")) && !rule->match_repository)
		return false;
	for (size_t r = 0; r < rule->nkeys; r++) {
		bool found = false;
		json_array_foreach(keys, i, k)
			if (json_is_string(k) && strcmp(json_string_value(k), sign_key_id(rule->keys[r])) == 0)
				found = true;
		if (!found)
			return false;
	}
	return !rule->builder || (builder && strcmp(builder, rule->builder) == 0);
}

static char *record_path(const char *digest)
{
	return kiln_home_path(NULL, KILN_PATH_TRUST, "%s.json", kiln_digest_hex(digest));
}

/* The record's entry for ref that covers rule (ref NULL: any), or NULL. */
static bool record_covers(const char *digest, const char *ref, const struct sign_rule *rule)
{
	char *p = record_path(digest);
	json_t *j = kiln_json_load_file(p, NULL), *e;
	size_t i;
	bool yes = false;

	json_array_foreach(json_object_get(j, "verified"), i, e) {
		const char *r = kiln_json_str(e, "ref");
		if (r && (!ref || strcmp(r, ref) == 0) && entry_covers(e, rule))
			yes = true;
	}
	json_decref(j);
	free(p);
	return yes;
}

static int record_add(const char *digest, const char *ref, const struct sign_rule *rule, kiln_error **err)
{
	char *p = record_path(digest), *dir = kiln_home_path(NULL, KILN_PATH_TRUST, NULL);
	json_t *j = kiln_json_load_file(p, NULL), *keys = json_array();
	int rc;

	if (!json_is_object(j) || !json_is_array(json_object_get(j, "verified"))) {
		json_decref(j);
		j = json_pack("{s:s, s:[]}", "digest", digest, "verified");
	}
	for (size_t i = 0; i < rule->nkeys; i++)
		json_array_append_new(keys, json_string(sign_key_id(rule->keys[i])));
	json_array_append_new(json_object_get(j, "verified"),
			      json_pack("{s:s, s:o, s:s?, s:b, s:I}", "ref", ref, "keys", keys, "builder", rule->builder,
					"repository_identity", rule->match_repository, "time", (json_int_t)time(NULL)));
	rc = kiln_mkdir_p(dir, 0755, err) < 0 ? -1 : kiln_json_write_file(p, j, err);
	json_decref(j);
	free(p);
	free(dir);
	return rc;
}

/* Why no signature of sigs is key k's valid one for the reference: appended to why. */
static bool signed_by(const struct sign_sigs *sigs, const sign_key *k, const char *host, const char *repo,
		      const char *tag, const char *digest, kiln_buf *why, kiln_error **err)
{
	for (size_t i = 0; i < sigs->n; i++) {
		const struct sign_sig *s = &sigs->v[i];
		kiln_error *e = NULL;
		int ok;

		if (!s->b64) {
			kiln_buf_addf(why, "; signature %zu has no %s annotation", i + 1, SIGN_ANNOTATION);
			continue;
		}
		ok = sign_key_verify(k, s->payload, s->payload_len, s->b64, err);
		if (ok < 0)
			return false;
		if (ok == 0) {
			kiln_buf_addf(why, "; signature %zu is not a valid signature by this key", i + 1);
			continue;
		}
		if (sign_payload_check(s->payload, s->payload_len, host, repo, tag, digest, &e) < 0) {
			kiln_buf_addf(why, "; signature %zu (by this key): %s", i + 1, kiln_error_message(e));
			kiln_error_free(e);
			continue;
		}
		return true;
	}
	return false;
}

/* A provenance statement signed by one of the rule's keys names its builder. */
static int builder_ok(rc_client *c, const struct sign_rule *rule, const char *repo, const char *shown,
		      const char *digest, kiln_error **err)
{
	json_t *prov = sign_provenance_fetch(c, repo, digest, rule->keys, rule->nkeys, err), *e;
	kiln_buf why = KILN_BUF_INIT;
	bool found = false;
	size_t i;

	if (prov == NULL)
		return kiln_error_wrap(err, "%s (%s): cannot verify its provenance", shown, digest);
	json_array_foreach(prov, i, e) {
		json_t *rd = json_object_get(json_object_get(json_object_get(e, "statement"), "predicate"), "runDetails");
		const char *id = kiln_json_str(json_object_get(rd, "builder"), "id");
		if (json_is_null(json_object_get(e, "key")))
			kiln_buf_addf(&why, "; statement %zu is not signed by a required key", i + 1);
		else if (!id || strcmp(id, rule->builder) != 0)
			kiln_buf_addf(&why, "; statement %zu names builder '%s'", i + 1, id ? id : "(none)");
		else
			found = true;
	}
	if (!found)
		kiln_err(err, KILN_E_DENIED, "%s (%s): refused: no signed provenance naming builder %s%s", shown, digest,
			 rule->builder, why.len ? why.buf : " (none attached)");
	json_decref(prov);
	kiln_buf_free(&why);
	return found ? 0 : -1;
}

int sign_verify(rc_client *c, const struct sign_rule *rule, const char *host, const char *repo, const char *tag,
		const char *digest, const char *also_digest, struct sign_verified *v, kiln_error **err)
{
	double t0 = kiln_now_ms();
	char *ref = sign_docker_ref(host, repo, tag), *shown = tag ? kiln_xstrdup(ref) : kiln_xasprintf("%s@%s", ref, digest);
	struct sign_sigs sigs = { 0 };
	kiln_buf why = KILN_BUF_INIT;
	int rc = -1;

	memset(v, 0, sizeof(*v));
	if (rule->reject) {
		kiln_err(err, KILN_E_DENIED, "%s (%s): refused: the signing policy rejects %s", shown, digest,
			 rule->scope ? rule->scope : "every registry it does not name");
		goto out;
	}
	if (record_covers(digest, ref, rule)) {
		v->cached = true;
		rc = 0;
		goto out;
	}
	if (sign_fetch(c, repo, digest, &sigs, err) < 0)
		goto wrap;
	v->found = sigs.found;
	if (sigs.n == 0) {
		kiln_err(err, KILN_E_DENIED, "%s (%s): refused: not signed (no signature %s nor a manifest %s-%s.sig in %s)",
			 shown, digest, sigs.found.api ? "among its referrers" : "referrer (the registry has no referrers API)",
			 "sha256", kiln_digest_hex(digest), repo);
		goto out;
	}
	for (size_t i = 0; i < rule->nkeys; i++) {
		kiln_buf_reset(&why);
		/* repository matching: the payload is checked as if pulled by digest */
		if (!signed_by(&sigs, rule->keys[i], host, repo, rule->match_repository ? NULL : tag, digest, &why,
			       err)) {
			if (!*err)
				kiln_err(err, KILN_E_DENIED, "%s (%s): refused: no valid signature by key %s (%s)%s", shown,
					 digest, sign_key_id(rule->keys[i]), sign_key_path(rule->keys[i]), why.len ? why.buf : "");
			goto out;
		}
	}
	if (rule->builder && builder_ok(c, rule, repo, shown, digest, err) < 0)
		goto out;
	if (record_add(digest, ref, rule, err) < 0 || (also_digest && record_add(also_digest, ref, rule, err) < 0))
		goto wrap;
	rc = 0;
	goto out;
wrap:
	kiln_error_wrap(err, "%s (%s): cannot verify", shown, digest);
out:
	v->ms = kiln_now_ms() - t0;
	sign_sigs_free(&sigs);
	kiln_buf_free(&why);
	free(ref);
	free(shown);
	return rc;
}

int sign_trusted(const struct sign_rule *rule, const char *ref, const char *digest, kiln_error **err)
{
	if (rule->reject)
		return kiln_err(err, KILN_E_DENIED, "%s (%s): refused: the signing policy rejects %s", ref, digest,
				rule->scope ? rule->scope : "every registry it does not name");
	if (record_covers(digest, NULL, rule))
		return 0;
	return kiln_err(err, KILN_E_DENIED,
			"%s (%s): refused: not verified on this host against the signing policy (scope %s needs "
			"signatures by %zu key%s); pull it again from its registry to verify it", ref, digest,
			rule->scope ? rule->scope : "default", rule->nkeys, rule->nkeys == 1 ? "" : "s");
}
