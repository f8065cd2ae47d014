/* verify.c — where push, pull and run meet sign/: signing what kiln push
 * stored, checking a pulled manifest against the host's signing policy
 * before any of it is fetched, and a local template against its trust
 * record before kiln run or kiln sandbox create use it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder/builder.h"
#include "cli/xfer.h"
#include "sign/sign.h"

int cli_sign_pushed(const char *key_path, const char *dest, const char *digest, kiln_error **err)
{
	struct oci_imgref r = { 0 };
	rc_client *c = NULL;
	sign_key *k = NULL;
	char *ref = NULL;
	int rc = -1;

	if ((k = sign_key_load_private(key_path, err)) == NULL || oci_imgref_parse(dest, &r, err) < 0 ||
	    (c = rc_client_new(r.host, NULL, err)) == NULL)
		goto out;
	ref = sign_docker_ref(r.host, r.repo, r.tag);
	if (sign_push(c, r.repo, ref, digest, k, err) < 0)
		goto out;
	fprintf(stderr, "signed %s (%s) with key %s\n", ref, digest, sign_key_id(k));
	rc = 0;
out:
	free(ref);
	sign_key_free(k);
	rc_client_free(c);
	oci_imgref_free(&r);
	return rc;
}

int cli_sign_check_key(const char *key_path, kiln_error **err)
{
	sign_key *k = key_path ? sign_key_load_private(key_path, err) : NULL;

	sign_key_free(k);
	return key_path && !k ? -1 : 0;
}

/* The config digest of a template artifact's manifest (what the template
 * store names it by), or "". */
static void config_digest(const struct rc_doc *m, char out[KILN_DIGEST_MAX])
{
	struct oci_manifest om = { 0 };

	out[0] = 0;
	if (oci_manifest_parse(m->data, m->len, m->media_type, &om, NULL) == 0)
		for (size_t i = 0; i < om.nrefs; i++)
			if (om.refs[i].kind == OCI_REF_CONFIG)
				memcpy(out, om.refs[i].digest, KILN_DIGEST_MAX);
	oci_manifest_free(&om);
}

int cli_verify_pulled(rc_client *c, const struct oci_imgref *r, const struct rc_doc *m, const char *policy,
		      kiln_error **err)
{
	sign_policy *p = sign_policy_load(policy, err);
	struct sign_rule rule;
	struct sign_verified v;
	char cfg[KILN_DIGEST_MAX];
	int rc = -1;

	if (p == NULL)
		return -1;
	sign_policy_rule(p, r->host, r->repo, &rule);
	if (!sign_rule_active(&rule)) {
		rc = 0;
		goto out;
	}
	config_digest(m, cfg);
	if (sign_verify(c, &rule, r->host, r->repo, r->digest ? NULL : r->tag, m->digest,
			oci_tmpl_is_artifact(m->data, m->len) && cfg[0] ? cfg : NULL, &v, err) < 0)
		goto out;
	char where[96];
	snprintf(where, sizeof(where), "%zu referrer%s%s", v.found.referrers, v.found.referrers == 1 ? "" : "s",
		 v.found.tagged ? " and the .sig tag" : "");
	fprintf(stderr, "kiln: %s/%s (%s): signed by %zu key%s the policy requires (%s%s%s, %.1f ms)\n", r->host,
		r->repo, m->digest, rule.nkeys, rule.nkeys == 1 ? "" : "s", v.cached ? "trust record" : "verified",
		v.cached ? "" : ": signatures from ", v.cached ? "" : (v.found.api ? where : "the .sig tag (no referrers API)"),
		v.ms);
	rc = 0;
out:
	sign_policy_free(p);
	return rc;
}

int cli_verify_local(const char *ref, const char *digest, kiln_error **err)
{
	sign_policy *p = sign_policy_load(NULL, err);
	struct kiln_ref kr = { 0 };
	struct sign_rule rule;
	int rc = -1;

	if (p == NULL || kiln_ref_parse(ref, &kr, err) < 0)
		goto out;
	sign_policy_rule(p, kr.host ? kr.host : "", kr.name, &rule);
	rc = sign_rule_active(&rule) ? sign_trusted(&rule, ref, digest, err) : 0;
out:
	kiln_ref_free(&kr);
	sign_policy_free(p);
	return rc;
}

int cli_provenance_record(const struct build_options *o, const struct build_result *res, double started,
			  double finished, const char *builder_id, kiln_error **err)
{
	char dfd[KILN_DIGEST_MAX] = "", *df = NULL;
	kiln_strv args = KILN_STRV_INIT, refs = KILN_STRV_INIT, digests = KILN_STRV_INIT;
	json_t *pred = NULL;
	int rc = -1;

	if (!o->dockerfile || strcmp(o->dockerfile, "-") != 0) {
		df = o->dockerfile ? kiln_xstrdup(o->dockerfile) : kiln_xasprintf("%s/Dockerfile", o->context);
		if (kiln_digest_file(KILN_SHA256, df, dfd, err) < 0)
			goto out;
	}
	for (size_t i = 0; i < o->n_build_args; i++)
		kiln_strv_push_owned(&args, kiln_xasprintf("%s=%s", o->build_args[i].key,
							   o->build_args[i].value ? o->build_args[i].value : ""));
	for (size_t i = 0; i < res->n_bases; i++) {
		kiln_strv_push(&refs, res->bases[i].ref);
		kiln_strv_push(&digests, res->bases[i].digest);
	}
	struct sign_build_info b = { .dockerfile_digest = dfd[0] ? dfd : NULL,
				     .context_digest = res->context_digest[0] ? res->context_digest : NULL,
				     .base_refs = (const char *const *)refs.v, .base_digests = (const char *const *)digests.v,
				     .n_bases = res->n_bases, .args = (const char *const *)args.v,
				     .n_args = args.n, .target = o->target, .builder_id = builder_id,
				     .started = started, .finished = finished };
	pred = sign_provenance_predicate(&b);
	/* under the template's digest and the image's: either may be pushed (the service pushes both) */
	rc = sign_provenance_save(res->manifest, pred, err);
	if (rc == 0 && res->template_digest[0])
		rc = sign_provenance_save(res->template_digest, pred, err);
out:
	json_decref(pred);
	kiln_strv_free(&args);
	kiln_strv_free(&refs);
	kiln_strv_free(&digests);
	free(df);
	return rc < 0 ? kiln_error_wrap(err, "record the build's provenance") : 0;
}

int cli_provenance_pushed(const char *key_path, const char *local_digest, const char *dest, const char *digest,
			  kiln_error **err)
{
	struct oci_imgref r = { 0 };
	kiln_error *e = NULL;
	json_t *pred = sign_provenance_load(local_digest, &e);
	rc_client *c = NULL;
	sign_key *k = NULL;
	char *ref = NULL;
	int rc = -1;

	if (e) {
		*err = e;
		return -1;
	}
	if (pred == NULL)
		return 0;
	if ((k = sign_key_load_private(key_path, err)) == NULL || oci_imgref_parse(dest, &r, err) < 0 ||
	    (c = rc_client_new(r.host, NULL, err)) == NULL)
		goto out;
	ref = sign_docker_ref(r.host, r.repo, r.tag);
	if (sign_provenance_push(c, r.repo, ref, digest, pred, k, err) < 0)
		goto out;
	fprintf(stderr, "attached signed provenance to %s (%s)\n", ref, digest);
	rc = 0;
out:
	json_decref(pred);
	free(ref);
	sign_key_free(k);
	rc_client_free(c);
	oci_imgref_free(&r);
	return rc;
}
