/* manifest.c — validation of pushed manifests (OCI image manifest and index,
 * Docker schema2 manifest and list, OCI artifact manifest); names and tags are
 * common/ref.c's grammar.  Pure functions on bytes: the fuzzer drives them directly. */
#include <string.h>

#include "oci/oci.h"

#define MT_OCI_ARTIFACT "application/vnd.oci.artifact.manifest.v1+json"

static int known_type(const char *t)
{
	return strcmp(t, OCI_MT_OCI_MANIFEST) == 0 || strcmp(t, OCI_MT_OCI_INDEX) == 0 || strcmp(t, OCI_MT_DOCKER_MANIFEST) == 0 ||
	       strcmp(t, OCI_MT_DOCKER_LIST) == 0 || strcmp(t, MT_OCI_ARTIFACT) == 0;
}

static int descriptor(json_t *d, const char *where, struct oci_ref *ref, kiln_error **err)
{
	json_t *digest = json_object_get(d, "digest"), *size = json_object_get(d, "size");
	json_t *mt = json_object_get(d, "mediaType"), *urls = json_object_get(d, "urls");
	enum kiln_digest_algo algo;

	if (!json_is_object(d))
		return kiln_err(err, KILN_E_INVALID, "%s: not an object", where);
	if (!json_is_string(mt))
		return kiln_err(err, KILN_E_INVALID, "%s: mediaType missing or not a string", where);
	if (!json_is_string(digest))
		return kiln_err(err, KILN_E_INVALID, "%s: digest missing or not a string", where);
	if (kiln_digest_parse(json_string_value(digest), &algo, err) < 0)
		return kiln_error_wrap(err, "%s", where);
	if (!json_is_integer(size) || json_integer_value(size) < 0)
		return kiln_err(err, KILN_E_INVALID, "%s: size missing or not a non-negative integer", where);
	if (urls && !json_is_array(urls))
		return kiln_err(err, KILN_E_INVALID, "%s: urls is not an array", where);
	if (ref) {
		snprintf(ref->digest, sizeof(ref->digest), "%s", json_string_value(digest));
		ref->size = json_integer_value(size);
		ref->external = urls && json_array_size(urls) > 0;
	}
	return 0;
}

static int add_refs(struct oci_manifest *m, json_t *arr, const char *key, enum oci_ref_kind kind, kiln_error **err)
{
	size_t i;
	json_t *d;

	if (!json_is_array(arr))
		return kiln_err(err, KILN_E_INVALID, "%s: missing or not an array", key);
	m->refs = kiln_xrealloc(m->refs, (m->nrefs + json_array_size(arr) + 1) * sizeof(*m->refs));
	json_array_foreach(arr, i, d) {
		char where[64];
		struct oci_ref *r = &m->refs[m->nrefs];

		snprintf(where, sizeof(where), "%s[%zu]", key, i);
		memset(r, 0, sizeof(*r));
		r->kind = kind;
		if (descriptor(d, where, r, err) < 0)
			return -1;
		m->nrefs++;
	}
	return 0;
}

static int parse_body(struct oci_manifest *m, const char *content_type, kiln_error **err)
{
	json_t *j = m->json, *v;
	const char *body_type = kiln_json_str(j, "mediaType");
	const char *type;

	if (!json_is_object(j))
		return kiln_err(err, KILN_E_INVALID, "manifest is not a JSON object");
	v = json_object_get(j, "mediaType");
	if (v && !json_is_string(v))
		return kiln_err(err, KILN_E_INVALID, "mediaType is not a string");
	if (content_type && known_type(content_type)) {
		if (body_type && strcmp(body_type, content_type) != 0)
			return kiln_err(err, KILN_E_INVALID, "mediaType '%s' does not match Content-Type '%s'", body_type,
					content_type);
		type = content_type;
	} else if (body_type) {
		type = body_type;
	} else if (json_object_get(j, "manifests")) {
		type = OCI_MT_OCI_INDEX;
	} else {
		type = OCI_MT_OCI_MANIFEST;
	}
	if (!known_type(type))
		return kiln_err(err, KILN_E_INVALID, "unsupported manifest media type '%s'", type);
	m->media_type = kiln_xstrdup(type);
	if (strcmp(type, MT_OCI_ARTIFACT) != 0) {
		v = json_object_get(j, "schemaVersion");
		if (!json_is_integer(v) || json_integer_value(v) != 2)
			return kiln_err(err, KILN_E_INVALID, "schemaVersion must be 2");
	}
	v = json_object_get(j, "artifactType");
	if (v && !json_is_string(v))
		return kiln_err(err, KILN_E_INVALID, "artifactType is not a string");
	if (v)
		m->artifact_type = kiln_xstrdup(json_string_value(v));
	if (strcmp(type, OCI_MT_OCI_INDEX) == 0 || strcmp(type, OCI_MT_DOCKER_LIST) == 0) {
		m->is_index = 1;
		if (add_refs(m, json_object_get(j, "manifests"), "manifests", OCI_REF_MANIFEST, err) < 0)
			return -1;
	} else if (strcmp(type, MT_OCI_ARTIFACT) == 0) {
		v = json_object_get(j, "blobs");
		if (v && add_refs(m, v, "blobs", OCI_REF_LAYER, err) < 0)
			return -1;
	} else {
		struct oci_ref cfg = { .kind = OCI_REF_CONFIG };
		v = json_object_get(j, "config");
		if (v == NULL)
			return kiln_err(err, KILN_E_INVALID, "config: missing");
		if (descriptor(v, "config", &cfg, err) < 0)
			return -1;
		if (add_refs(m, json_object_get(j, "layers"), "layers", OCI_REF_LAYER, err) < 0)
			return -1;
		m->refs[m->nrefs++] = cfg;
		if (!m->artifact_type && strcmp(type, OCI_MT_OCI_MANIFEST) == 0)
			m->artifact_type = kiln_xstrdup(kiln_json_str(v, "mediaType"));
	}
	v = json_object_get(j, "subject");
	if (v) {
		struct oci_ref sub;
		if (descriptor(v, "subject", &sub, err) < 0)
			return -1;
		snprintf(m->subject, sizeof(m->subject), "%s", sub.digest);
	}
	v = json_object_get(j, "annotations");
	if (v) {
		const char *k;
		json_t *av;
		if (!json_is_object(v))
			return kiln_err(err, KILN_E_INVALID, "annotations is not an object");
		json_object_foreach(v, k, av) {
			if (!json_is_string(av))
				return kiln_err(err, KILN_E_INVALID, "annotations.%s is not a string", k);
		}
		m->annotations = v;
	}
	return 0;
}

int oci_manifest_parse(const char *data, size_t len, const char *content_type, struct oci_manifest *m,
		       kiln_error **err)
{
	char ct[256] = "";

	memset(m, 0, sizeof(*m));
	if (content_type) {
		/* Drop parameters ("; charset=utf-8") and surrounding blanks. */
		size_t n = strcspn(content_type, ";");
		while (n > 0 && (content_type[n - 1] == ' ' || content_type[n - 1] == '\t'))
			n--;
		if (n < sizeof(ct))
			snprintf(ct, sizeof(ct), "%.*s", (int)n, content_type);
	}
	m->json = kiln_json_loadb(data, len, "manifest", err);
	if (m->json == NULL || parse_body(m, ct[0] ? ct : NULL, err) < 0) {
		oci_manifest_free(m);
		return -1;
	}
	return 0;
}

void oci_manifest_free(struct oci_manifest *m)
{
	free(m->media_type);
	free(m->artifact_type);
	free(m->refs);
	json_decref(m->json);
	memset(m, 0, sizeof(*m));
}

int oci_tmpl_is_artifact(const char *manifest, size_t len)
{
	json_t *m = kiln_json_loadb(manifest, len, "manifest", NULL);
	const char *at = m ? kiln_json_str(m, "artifactType") : NULL;
	const char *cm = m ? kiln_json_str(json_object_get(m, "config"), "mediaType") : NULL;
	int r = (at && strcmp(at, OCI_TMPL_ARTIFACT_TYPE) == 0) || (cm && strcmp(cm, KILN_TMPL_CONFIG_MEDIA) == 0);

	json_decref(m);
	return r;
}
