/* verify.c — where push, pull and run meet sign/: signing what kiln push
 * stored, checking a pulled manifest against the host's signing policy
 * before any of it is fetched, and a local template against its trust
 * record before kiln run or kiln sandbox create use it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	fprintf(stderr, "kiln: %s/%s (%s): signed by %zu key%s the policy requires (%s, %.1f ms)\n", r->host, r->repo,
		m->digest, rule.nkeys, rule.nkeys == 1 ? "" : "s", v.cached ? "trust record" : "verified", v.ms);
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
