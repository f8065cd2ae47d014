/* provenance.c — build provenance as an in-toto v1 statement with a SLSA v1
 * predicate: recorded by kiln build --provenance under the result's digest,
 * then signed in a DSSE envelope and stored by kiln push --sign as the
 * sha256-HEX.att manifest (cosign's attestation) of the pushed manifest,
 * which names it as its OCI 1.1 subject (a referrer). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sign/internal.h"

static json_t *when(double t)
{
	char buf[KILN_TIME_MAX];

	return json_string(kiln_time_rfc3339((int64_t)t, buf));
}

static json_t *digest_obj(const char *digest)
{
	const char *colon = strchr(digest, ':');
	char *algo;
	json_t *j;

	if (!colon)
		return json_object();
	algo = kiln_xstrndup(digest, (size_t)(colon - digest));
	j = json_pack("{s:s}", algo, colon + 1);
	free(algo);
	return j;
}

json_t *sign_provenance_predicate(const struct sign_build_info *b)
{
	char host[256] = "";
	json_t *ext = json_object(), *args = json_object(), *deps = json_array();

	gethostname(host, sizeof(host) - 1);
	if (b->dockerfile_digest)
		json_object_set_new(ext, "dockerfile", json_pack("{s:o}", "digest", digest_obj(b->dockerfile_digest)));
	if (b->context_digest)
		json_object_set_new(ext, "context", json_pack("{s:o}", "digest", digest_obj(b->context_digest)));
	for (size_t i = 0; i < b->n_args; i++) {
		const char *eq = strchr(b->args[i], '=');
		char *k = kiln_xstrndup(b->args[i], eq ? (size_t)(eq - b->args[i]) : strlen(b->args[i]));
		json_object_set_new(args, k, json_string(eq ? eq + 1 : ""));
		free(k);
	}
	json_object_set_new(ext, "buildArgs", args);
	if (b->target)
		json_object_set_new(ext, "target", json_string(b->target));
	for (size_t i = 0; i < b->n_bases; i++)
		json_array_append_new(deps, json_pack("{s:s, s:o}", "uri", b->base_refs[i], "digest",
						      digest_obj(b->base_digests[i])));
	char *id = b->builder_id ? kiln_xstrdup(b->builder_id) : kiln_xasprintf("kiln@%s", host);
	json_t *p = json_pack("{s:{s:s, s:o, s:{}, s:o}, s:{s:{s:s, s:{s:s}}, s:{s:o, s:o}}}", "buildDefinition",
			      "buildType", SIGN_BUILD_TYPE, "externalParameters", ext, "internalParameters",
			      "resolvedDependencies", deps, "runDetails", "builder", "id", id, "version", "kiln",
			      KILN_VERSION, "metadata", "startedOn", when(b->started), "finishedOn", when(b->finished));
	json_object_set_new(json_object_get(json_object_get(p, "buildDefinition"), "internalParameters"), "host",
			    json_string(host));
	free(id);
	return p;
}

static char *record_path(const char *digest)
{
	return kiln_home_path(NULL, KILN_PATH_PROVENANCE, "%s.json", kiln_digest_hex(digest));
}

int sign_provenance_save(const char *digest, const json_t *predicate, kiln_error **err)
{
	char *p = record_path(digest), *dir = kiln_home_path(NULL, KILN_PATH_PROVENANCE, NULL);
	int rc = kiln_mkdir_p(dir, 0755, err) < 0 ? -1 : kiln_json_write_file(p, predicate, err);

	free(p);
	free(dir);
	return rc;
}

json_t *sign_provenance_load(const char *digest, kiln_error **err)
{
	char *p = record_path(digest);
	json_t *j = access(p, F_OK) == 0 ? kiln_json_load_file(p, err) : NULL;

	free(p);
	return j;
}

/* DSSE's pre-authentication encoding, what the envelope's signature covers. */
static char *pae(const char *type, const char *body, size_t len, size_t *out_len)
{
	kiln_buf b = KILN_BUF_INIT;

	kiln_buf_addf(&b, "DSSEv1 %zu %s %zu ", strlen(type), type, len);
	kiln_buf_add(&b, body, len);
	*out_len = b.len;
	return kiln_buf_detach(&b);
}

int sign_provenance_push(rc_client *c, const char *repo, const char *docker_ref, const char *digest,
			 const json_t *predicate, const sign_key *k, kiln_error **err)
{
	json_t *st = json_pack("{s:s, s:[{s:s, s:o}], s:s, s:O}", "_type", SIGN_STATEMENT_TYPE, "subject", "name",
			       docker_ref, "digest", digest_obj(digest), "predicateType", SIGN_SLSA_PREDICATE, "predicate",
			       predicate);
	char *body = json_dumps(st, JSON_COMPACT | JSON_SORT_KEYS), *msg = NULL, *sig = NULL, *b64 = NULL, *env_s = NULL;
	char *tag = sign_attach_tag(digest, "att"), edig[KILN_DIGEST_MAX];
	size_t mlen;
	json_t *env = NULL, *layer = NULL;
	int rc = -1;

	msg = pae(SIGN_INTOTO_TYPE, body, strlen(body), &mlen);
	if ((sig = sign_key_sign(k, msg, mlen, err)) == NULL)
		goto out;
	b64 = kiln_b64_encode(body);
	env = json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "payloadType", SIGN_INTOTO_TYPE, "payload", b64, "signatures", "keyid",
			sign_key_id(k), "sig", sig);
	env_s = json_dumps(env, JSON_COMPACT);
	struct rc_blob bl = { .data = env_s, .len = strlen(env_s), .size = (int64_t)strlen(env_s) };
	kiln_digest_buf(KILN_SHA256, env_s, strlen(env_s), bl.digest);
	memcpy(edig, bl.digest, KILN_DIGEST_MAX);
	if (rc_blob_push(c, repo, &bl, err) < 0)
		goto out;
	/* cosign's attestation layers carry an empty signature annotation (the
	 * signature is inside the envelope); cosign verify-attestation refuses a
	 * layer without it */
	layer = json_pack("{s:s, s:s, s:I, s:{s:s, s:s}}", "mediaType", SIGN_DSSE_MEDIA, "digest", edig, "size",
			  (json_int_t)strlen(env_s), "annotations", SIGN_ANNOTATION, "", "predicateType",
			  SIGN_SLSA_PREDICATE);
	/* as a referrer, typed by what the envelope carries (an in-toto
	 * statement), as cosign's later releases type their attestations */
	rc = sign_attach_append(c, repo, tag, layer, SIGN_INTOTO_TYPE, digest, err);
out:
	if (rc < 0)
		kiln_error_wrap(err, "attach provenance to %s (%s)", docker_ref, digest);
	json_decref(st);
	json_decref(env);
	json_decref(layer);
	free(body), free(msg), free(sig), free(b64), free(env_s), free(tag);
	return rc;
}

json_t *sign_provenance_fetch(rc_client *c, const char *repo, const char *digest, sign_key *const *keys,
			      size_t nkeys, kiln_error **err)
{
	struct sign_found found;
	json_t *m = sign_attach_layers(c, repo, digest, "att", SIGN_INTOTO_TYPE, &found, err), *out = json_array(), *l;
	size_t i;

	if (m == NULL) {
		kiln_error_wrap(err, "read the attestations of %s", digest);
		goto fail;
	}
	json_array_foreach(m, i, l) {
		const char *d = kiln_json_str(l, "digest"), *mt = kiln_json_str(l, "mediaType");
		char *data = NULL, *body = NULL, *msg = NULL;
		size_t len, blen = 0, mlen;
		json_t *env = NULL, *st = NULL, *s0;
		const char *signer = NULL;

		if (!d || !mt || strcmp(mt, SIGN_DSSE_MEDIA) != 0 || kiln_digest_parse(d, NULL, NULL) < 0)
			continue;
		if (rc_blob_get_mem(c, repo, d, 4u << 20, &data, &len, err) < 0)
			goto fail;
		env = kiln_json_loadb(data, len, "attestation envelope", NULL);
		const char *p64 = kiln_json_str(env, "payload");
		kiln_buf bb = KILN_BUF_INIT;
		if (p64 && kiln_b64_decode_bytes(p64, strlen(p64), &bb) == 0) {
			blen = bb.len;
			body = kiln_buf_detach(&bb);
		}
		kiln_buf_free(&bb);
		st = body ? kiln_json_loadb(body, blen, "statement", NULL) : NULL;
		s0 = json_array_get(json_object_get(env, "signatures"), 0);
		if (body && kiln_json_str(s0, "sig")) {
			msg = pae(SIGN_INTOTO_TYPE, body, blen, &mlen);
			for (size_t k = 0; k < nkeys && !signer; k++)
				if (sign_key_verify(keys[k], msg, mlen, kiln_json_str(s0, "sig"), NULL) == 1)
					signer = sign_key_id(keys[k]);
		}
		const char *sd = kiln_json_str(json_object_get(json_array_get(json_object_get(st, "subject"), 0), "digest"),
					       "sha256");
		if (st && (!sd || strcmp(sd, kiln_digest_hex(digest)) != 0)) {
			kiln_err(err, KILN_E_INVALID, "attestation %s: its subject is sha256:%s, not %s", d, sd ? sd : "(none)",
				 digest);
			json_decref(env), json_decref(st), free(data), free(body), free(msg);
			goto fail;
		}
		if (st)
			json_array_append_new(out, json_pack("{s:O, s:s?}", "statement", st, "key", signer));
		json_decref(env), json_decref(st), free(data), free(body), free(msg);
	}
	json_decref(m);
	return out;
fail:
	json_decref(m);
	json_decref(out);
	return NULL;
}
