/* cosign.c — signatures in cosign's storage format: a simple-signing payload
 * per signature, the layers of the manifest tagged sha256-HEX.sig, so that
 * any registry stores them and cosign or skopeo read them (and kiln reads
 * theirs); that manifest also names what it signs as its OCI 1.1 subject, so
 * a registry with the referrers API lists it.  Only the format and its
 * transfer: trust decisions are verify.c's. */
#include <stdlib.h>
#include <string.h>

#include "sign/internal.h"

#define SIG_MAX_LAYERS 64
#define SIG_PAYLOAD_MAX (64u << 10)
/* referrer manifests read per subject: the newest (listed last), so a flood
 * of pushed referrers costs a bounded number of requests */
#define SIG_MAX_REFERRERS 16

char *sign_docker_ref(const char *host, const char *repo, const char *tag)
{
	/* docker's canonical name of Docker Hub, not its API host */
	const char *h = strcmp(host, "registry-1.docker.io") == 0 ? "docker.io" : host;

	return tag ? kiln_xasprintf("%s/%s:%s", h, repo, tag) : kiln_xasprintf("%s/%s", h, repo);
}

char *sign_payload_make(const char *docker_ref, const char *digest)
{
	json_t *j = json_pack("{s:{s:{s:s}, s:{s:s}, s:s}, s:n}", "critical", "identity", "docker-reference", docker_ref,
			      "image", "docker-manifest-digest", digest, "type", SIGN_PAYLOAD_TYPE, "optional");
	char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);

	json_decref(j);
	return s;
}

char *sign_attach_tag(const char *digest, const char *suffix)
{
	const char *colon = strchr(digest, ':');
	size_t n = colon ? (size_t)(colon - digest) : 0;

	return kiln_xasprintf("%.*s-%s.%s", (int)n, digest, colon ? colon + 1 : digest, suffix);
}

void sign_sigs_free(struct sign_sigs *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].payload);
		free(s->v[i].b64);
	}
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

json_t *sign_attach_get(rc_client *c, const char *repo, const char *tag, kiln_error **err)
{
	struct rc_doc d = { 0 };
	json_t *j = NULL;
	int has = rc_manifest_exists(c, repo, tag, NULL, err);

	if (has <= 0)
		return NULL;
	if (rc_manifest_get(c, repo, tag, OCI_MT_OCI_MANIFEST, &d, err) == 0)
		j = kiln_json_loadb(d.data, d.len, tag, err);
	rc_doc_free(&d);
	if (j && !json_is_array(json_object_get(j, "layers"))) {
		json_decref(j);
		kiln_err(err, KILN_E_INVALID, "%s: a manifest without layers", tag);
		return NULL;
	}
	return j;
}

/* Push a blob given in memory; fills desc's digest and size. */
static int put_blob(rc_client *c, const char *repo, const char *data, size_t len, char digest[KILN_DIGEST_MAX],
		    kiln_error **err)
{
	struct rc_blob b = { .data = data, .len = len, .size = (int64_t)len };

	kiln_digest_buf(KILN_SHA256, data, len, b.digest);
	memcpy(digest, b.digest, KILN_DIGEST_MAX);
	return rc_blob_push(c, repo, &b, err);
}

/* Store layers (each {mediaType, digest, size, annotations}) as the manifest
 * tagged tag, with a config listing them (cosign's shape) and, when subject
 * is set, an OCI 1.1 subject so the referrers API lists it. */
int sign_attach_put(rc_client *c, const char *repo, const char *tag, json_t *layers, const char *artifact_type,
		    const char *subject, const char *subject_media, size_t subject_size, kiln_error **err)
{
	json_t *ids = json_array(), *l, *cfg = NULL, *m = NULL;
	char cdig[KILN_DIGEST_MAX], *cs = NULL, *ms = NULL;
	size_t i;
	int rc = -1;

	json_array_foreach(layers, i, l)
		json_array_append(ids, json_object_get(l, "digest"));
	cfg = json_pack("{s:s, s:s, s:{s:s, s:o}, s:{}}", "architecture", "", "os", "", "rootfs", "type", "layers",
			"diff_ids", ids, "config");
	cs = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS);
	if (put_blob(c, repo, cs, strlen(cs), cdig, err) < 0)
		goto out;
	m = json_pack("{s:i, s:s, s:{s:s, s:s, s:I}, s:O}", "schemaVersion", 2, "mediaType", OCI_MT_OCI_MANIFEST,
		      "config", "mediaType", "application/vnd.oci.image.config.v1+json", "digest", cdig, "size",
		      (json_int_t)strlen(cs), "layers", layers);
	if (artifact_type)
		json_object_set_new(m, "artifactType", json_string(artifact_type));
	if (subject)
		json_object_set_new(m, "subject",
				    json_pack("{s:s, s:s, s:I}", "mediaType", subject_media ? subject_media : OCI_MT_OCI_MANIFEST,
					      "digest", subject, "size", (json_int_t)subject_size));
	ms = json_dumps(m, JSON_COMPACT);
	rc = rc_manifest_put(c, repo, tag, OCI_MT_OCI_MANIFEST, ms, strlen(ms), NULL, err);
out:
	json_decref(cfg);
	json_decref(m);
	free(cs);
	free(ms);
	return rc;
}

/* Append layer to what is tagged tag (dropping an identical one), then store it. */
int sign_attach_append(rc_client *c, const char *repo, const char *tag, json_t *layer, const char *artifact_type,
		       const char *subject, kiln_error **err)
{
	kiln_error *e = NULL;
	json_t *old = sign_attach_get(c, repo, tag, &e), *layers = json_array(), *l;
	struct rc_doc sd = { 0 };
	size_t i;
	int rc = -1;

	if (e) {
		*err = e;
		json_decref(layers);
		return kiln_error_wrap(err, "read the attachments %s", tag);
	}
	/* the subject descriptor's type and size are the signed manifest's own */
	if (subject && rc_manifest_get(c, repo, subject, NULL, &sd, err) < 0) {
		kiln_error_wrap(err, "read the signed manifest %s", subject);
		goto out;
	}
	if (old) {
		json_array_foreach(json_object_get(old, "layers"), i, l)
			if (!json_equal(l, layer) && json_array_size(layers) < SIG_MAX_LAYERS - 1)
				json_array_append(layers, l);
	}
	json_array_append(layers, layer);
	rc = sign_attach_put(c, repo, tag, layers, artifact_type, subject, sd.media_type, sd.len, err);
out:
	rc_doc_free(&sd);
	json_decref(layers);
	json_decref(old);
	return rc;
}

/* Add the layers of manifest m (a referrer or the tagged attachment) to
 * out, each once. */
static void add_layers(json_t *out, json_t *m)
{
	json_t *l, *o;
	size_t i, k;

	json_array_foreach(json_object_get(m, "layers"), i, l) {
		bool seen = false;
		json_array_foreach(out, k, o)
			if (json_equal(o, l))
				seen = true;
		if (!seen && json_array_size(out) < SIG_MAX_LAYERS)
			json_array_append(out, l);
	}
}

json_t *sign_attach_layers(rc_client *c, const char *repo, const char *digest, const char *suffix,
			   const char *artifact_type, struct sign_found *found, kiln_error **err)
{
	char *tag = sign_attach_tag(digest, suffix);
	json_t *out = json_array(), *idx = NULL, *list, *m;
	kiln_error *e = NULL;
	int has = rc_referrers(c, repo, digest, artifact_type, &idx, err);
	size_t n, first;

	memset(found, 0, sizeof(*found));
	if (has < 0)
		goto fail;
	found->api = has == 1;
	list = json_object_get(idx, "manifests");
	n = json_array_size(list);
	first = n > SIG_MAX_REFERRERS ? n - SIG_MAX_REFERRERS : 0;
	for (size_t i = first; i < n; i++) {
		const char *d = kiln_json_str(json_array_get(list, i), "digest");
		struct rc_doc doc = { 0 };

		if (!d || kiln_digest_parse(d, NULL, NULL) < 0)
			continue;
		/* fetched by digest: rc_manifest_get checks the bytes against it */
		if (rc_manifest_get(c, repo, d, OCI_MT_OCI_MANIFEST, &doc, err) < 0 ||
		    (m = kiln_json_loadb(doc.data, doc.len, d, err)) == NULL) {
			rc_doc_free(&doc);
			kiln_error_wrap(err, "read the referrer %s", d);
			goto fail;
		}
		/* a referrer names its subject itself: one that names another is not this digest's */
		const char *subj = kiln_json_str(json_object_get(m, "subject"), "digest");
		if (subj && strcmp(subj, digest) == 0) {
			add_layers(out, m);
			found->referrers++;
		}
		json_decref(m);
		rc_doc_free(&doc);
	}
	if ((m = sign_attach_get(c, repo, tag, &e)) == NULL && e) {
		*err = e;
		kiln_error_wrap(err, "read %s", tag);
		goto fail;
	}
	if (m) {
		add_layers(out, m);
		found->tagged = true;
		json_decref(m);
	}
	json_decref(idx);
	free(tag);
	return out;
fail:
	json_decref(idx);
	json_decref(out);
	free(tag);
	return NULL;
}

int sign_push(rc_client *c, const char *repo, const char *docker_ref, const char *digest, const sign_key *k,
	      kiln_error **err)
{
	char *payload = sign_payload_make(docker_ref, digest), *b64 = NULL, *tag = sign_attach_tag(digest, "sig");
	char pdig[KILN_DIGEST_MAX];
	json_t *layer = NULL;
	int rc = -1;

	if ((b64 = sign_key_sign(k, payload, strlen(payload), err)) == NULL ||
	    put_blob(c, repo, payload, strlen(payload), pdig, err) < 0)
		goto out;
	layer = json_pack("{s:s, s:s, s:I, s:{s:s}}", "mediaType", SIGN_PAYLOAD_MEDIA, "digest", pdig, "size",
			  (json_int_t)strlen(payload), "annotations", SIGN_ANNOTATION, b64);
	rc = sign_attach_append(c, repo, tag, layer, SIGN_SIG_ARTIFACT, digest, err);
out:
	if (rc < 0)
		kiln_error_wrap(err, "sign %s (%s)", docker_ref, digest);
	json_decref(layer);
	free(payload);
	free(b64);
	free(tag);
	return rc;
}

int sign_fetch(rc_client *c, const char *repo, const char *digest, struct sign_sigs *out, kiln_error **err)
{
	json_t *layers, *l;
	size_t i;

	memset(out, 0, sizeof(*out));
	if ((layers = sign_attach_layers(c, repo, digest, "sig", SIGN_SIG_ARTIFACT, &out->found, err)) == NULL)
		return kiln_error_wrap(err, "read the signatures of %s", digest);
	out->v = kiln_xcalloc(SIG_MAX_LAYERS, sizeof(*out->v));
	json_array_foreach(layers, i, l) {
		const char *mt = kiln_json_str(l, "mediaType"), *d = kiln_json_str(l, "digest");
		const char *b64 = kiln_json_str(json_object_get(l, "annotations"), SIGN_ANNOTATION);
		struct sign_sig *s;

		if (out->n == SIG_MAX_LAYERS)
			break;
		if (!mt || strcmp(mt, SIGN_PAYLOAD_MEDIA) != 0 || !d || kiln_digest_parse(d, NULL, NULL) < 0)
			continue;
		s = &out->v[out->n];
		if (rc_blob_get_mem(c, repo, d, SIG_PAYLOAD_MAX, &s->payload, &s->payload_len, err) < 0) {
			kiln_error_wrap(err, "read the signature payload %s of %s", d, digest);
			sign_sigs_free(out);
			json_decref(layers);
			return -1;
		}
		s->b64 = b64 ? kiln_xstrdup(b64) : NULL;
		out->n++;
	}
	json_decref(layers);
	return 0;
}

int sign_payload_check(const char *payload, size_t len, const char *host, const char *repo, const char *tag,
		       const char *digest, kiln_error **err)
{
	json_t *j = kiln_json_loadb(payload, len, "signature payload", err), *crit;
	const char *type, *signed_digest, *ident;
	struct kiln_ref r = { 0 };
	char *want = NULL, *got = NULL;
	int rc = -1;

	if (!j)
		return -1;
	crit = json_object_get(j, "critical");
	type = kiln_json_str(crit, "type");
	signed_digest = kiln_json_str(json_object_get(crit, "image"), "docker-manifest-digest");
	ident = kiln_json_str(json_object_get(crit, "identity"), "docker-reference");
	if (!type || strcmp(type, SIGN_PAYLOAD_TYPE) != 0) {
		kiln_err(err, KILN_E_INVALID, "a payload of type '%s', not '%s'", type ? type : "(none)", SIGN_PAYLOAD_TYPE);
		goto out;
	}
	if (!signed_digest || strcmp(signed_digest, digest) != 0) {
		kiln_err(err, KILN_E_INVALID, "it signs manifest %s, not %s", signed_digest ? signed_digest : "(none)",
			 digest);
		goto out;
	}
	if (!ident || kiln_ref_parse(ident, &r, NULL) < 0) {
		kiln_err(err, KILN_E_INVALID, "it names no valid reference ('%s')", ident ? ident : "");
		goto out;
	}
	want = sign_docker_ref(host, repo, tag);
	/* by tag: exactly that tag; by digest: that repository */
	got = tag ? kiln_xstrdup(ident) : kiln_ref_repo(&r);
	if (strcmp(got, want) != 0) {
		kiln_err(err, KILN_E_INVALID, "it was made for %s, not %s", ident, want);
		goto out;
	}
	rc = 0;
out:
	kiln_ref_free(&r);
	json_decref(j);
	free(want);
	free(got);
	return rc;
}
