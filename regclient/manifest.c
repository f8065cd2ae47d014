/* manifest.c — manifests (GET with the OCI and Docker Accept types,
 * an index resolved to linux/amd64, HEAD, PUT, the OCI 1.1 referrers of
 * one) and the small synchronous blob calls (HEAD, GET into memory).
 * Every digest is computed over the bytes received; headers are never
 * trusted for it. */
#include <stdlib.h>
#include <string.h>

#include "regclient/internal.h"

#define MANIFEST_MAX (4u << 20)
#define ACCEPT_ALL OCI_MT_OCI_MANIFEST ", " OCI_MT_OCI_INDEX ", " OCI_MT_DOCKER_MANIFEST ", " OCI_MT_DOCKER_LIST
#define ACCEPT_IMAGE OCI_MT_OCI_MANIFEST ", " OCI_MT_DOCKER_MANIFEST

void rc_doc_free(struct rc_doc *d)
{
	if (!d)
		return;
	free(d->data);
	free(d->media_type);
	memset(d, 0, sizeof(*d));
}

static char *scope_of(const char *repo, const char *actions)
{
	return kiln_xasprintf("repository:%s:%s", repo, actions);
}

/* The digest algorithm a reference asks for (sha256 for tags), and whether it is a digest. */
static int ref_algo(const char *ref, enum kiln_digest_algo *algo)
{
	kiln_error *e = NULL;
	*algo = KILN_SHA256;
	if (strchr(ref, ':') && kiln_digest_parse(ref, algo, &e) == 0)
		return 1;
	kiln_error_free(e);
	*algo = KILN_SHA256;
	return 0;
}

int rc_manifest_get(rc_client *c, const char *repo, const char *ref, const char *accept, struct rc_doc *out,
		     kiln_error **err)
{
	char *scope = scope_of(repo, "pull"), *hdr = kiln_xasprintf("Accept: %s", accept ? accept : ACCEPT_ALL);
	struct rc_http r;
	enum kiln_digest_algo algo;
	int by_digest = ref_algo(ref, &algo), rc = -1;

	memset(out, 0, sizeof(*out));
	rc_http_init(&r, c, "GET", rc_url(c, "/v2/%s/manifests/%s", repo, ref), scope);
	r.headers = curl_slist_append(NULL, hdr);
	r.out_max = MANIFEST_MAX;
	if (rc_http_do(&r, err) < 0)
		goto out;
	if (r.status != 200) {
		rc_http_fail(&r, "manifest", err);
		goto out;
	}
	kiln_digest_buf(algo, r.out.buf, r.out.len, out->digest);
	if (by_digest && strcmp(out->digest, ref) != 0) {
		kiln_err(err, KILN_E_INVALID, "manifest %s@%s: registry %s sent content whose digest is %s", repo, ref,
			 c->host, out->digest);
		goto out;
	}
	if (r.ctype && strncmp(r.ctype, "application/vnd.", 16) == 0) {
		out->media_type = kiln_xstrndup(r.ctype, strcspn(r.ctype, "; "));
	} else {
		/* a generic Content-Type: the body's own mediaType decides */
		json_t *j = json_loadb(r.out.buf, r.out.len, 0, NULL);
		const char *mt = kiln_json_str(j, "mediaType");
		out->media_type = kiln_xstrdup(mt ? mt : OCI_MT_OCI_MANIFEST);
		json_decref(j);
	}
	out->len = r.out.len;
	out->data = kiln_buf_detach(&r.out);
	rc = 0;
out:
	if (rc < 0) {
		rc_doc_free(out);
		kiln_error_wrap(err, "%s/%s:%s", c->host, repo, ref);
	}
	rc_http_free(&r);
	free(scope);
	free(hdr);
	return rc;
}

static int is_index(const struct rc_doc *d, json_t *j)
{
	return strcmp(d->media_type, OCI_MT_OCI_INDEX) == 0 || strcmp(d->media_type, OCI_MT_DOCKER_LIST) == 0 ||
	       (json_is_array(json_object_get(j, "manifests")) && !json_object_get(j, "layers"));
}

int rc_image_manifest_get(rc_client *c, const char *repo, const char *ref, struct rc_doc *out,
			   kiln_error **err)
{
	struct rc_doc idx;
	json_t *j = NULL, *m;
	const char *pick = NULL;
	size_t i;
	int rc = -1;

	if (rc_manifest_get(c, repo, ref, NULL, &idx, err) < 0)
		return -1;
	j = kiln_json_loadb(idx.data, idx.len, "manifest", err);
	if (!j)
		goto out;
	if (!is_index(&idx, j)) {
		*out = idx;
		memset(&idx, 0, sizeof(idx));
		rc = 0;
		goto out;
	}
	kiln_buf seen = KILN_BUF_INIT;
	json_array_foreach(json_object_get(j, "manifests"), i, m) {
		json_t *p = json_object_get(m, "platform");
		const char *os = kiln_json_str(p, "os"), *arch = kiln_json_str(p, "architecture");
		kiln_buf_addf(&seen, "%s%s/%s", seen.len ? ", " : "", os ? os : "?", arch ? arch : "?");
		if (os && arch && strcmp(os, "linux") == 0 && strcmp(arch, "amd64") == 0 && kiln_json_str(m, "digest")) {
			pick = kiln_json_str(m, "digest");
			break;
		}
	}
	if (!pick) {
		kiln_err(err, KILN_E_NOTFOUND, "%s/%s:%s: the index has no linux/amd64 image (it has: %s)", c->host,
			 repo, ref, seen.len ? seen.buf : "nothing");
		kiln_buf_free(&seen);
		goto out;
	}
	kiln_buf_free(&seen);
	rc = rc_manifest_get(c, repo, pick, ACCEPT_IMAGE, out, err);
out:
	json_decref(j);
	rc_doc_free(&idx);
	return rc;
}

int rc_manifest_exists(rc_client *c, const char *repo, const char *ref, char digest[KILN_DIGEST_MAX],
			kiln_error **err)
{
	char *scope = scope_of(repo, "pull");
	struct rc_http r;
	int rc = -1;

	rc_http_init(&r, c, "HEAD", rc_url(c, "/v2/%s/manifests/%s", repo, ref), scope);
	r.headers = curl_slist_append(NULL, "Accept: " ACCEPT_ALL);
	if (rc_http_do(&r, err) < 0)
		goto out;
	if (r.status == 200) {
		if (digest)
			snprintf(digest, KILN_DIGEST_MAX, "%s", r.digest ? r.digest : "");
		rc = 1;
	} else if (r.status == 404) {
		rc = 0;
	} else {
		rc_http_fail(&r, "manifest", err);
		kiln_error_wrap(err, "%s/%s:%s", c->host, repo, ref);
	}
out:
	rc_http_free(&r);
	free(scope);
	return rc;
}

int rc_manifest_put(rc_client *c, const char *repo, const char *ref, const char *media_type, const void *data,
		     size_t len, char digest[KILN_DIGEST_MAX], kiln_error **err)
{
	char *scope = scope_of(repo, "pull,push"), *ct = kiln_xasprintf("Content-Type: %s", media_type);
	char dg[KILN_DIGEST_MAX];
	struct rc_http r;
	int rc = -1;

	kiln_digest_buf(KILN_SHA256, data, len, dg);
	rc_http_init(&r, c, "PUT", rc_url(c, "/v2/%s/manifests/%s", repo, ref), scope);
	r.headers = curl_slist_append(NULL, ct);
	r.body_mem = data;
	r.body_len = len;
	r.has_body = 1;
	if (rc_http_do(&r, err) < 0)
		goto out;
	if (r.status != 201 && r.status != 200) {
		rc_http_fail(&r, "put manifest", err);
		kiln_error_wrap(err, "%s/%s:%s", c->host, repo, ref);
		goto out;
	}
	if (r.digest && strcmp(r.digest, dg) != 0)
		kiln_warn("registry %s stored %s/%s as %s, computed %s", c->host, repo, ref, r.digest, dg);
	if (digest)
		memcpy(digest, dg, KILN_DIGEST_MAX);
	rc = 0;
out:
	rc_http_free(&r);
	free(scope);
	free(ct);
	return rc;
}

int rc_referrers(rc_client *c, const char *repo, const char *digest, const char *artifact_type, json_t **index,
		 kiln_error **err)
{
	char *scope = scope_of(repo, "pull"), *q = artifact_type ? curl_easy_escape(NULL, artifact_type, 0) : NULL;
	json_t *j = NULL, *list, *d;
	struct rc_http r;
	size_t i;
	int rc = -1;

	*index = NULL;
	rc_http_init(&r, c, "GET",
		     q ? rc_url(c, "/v2/%s/referrers/%s?artifactType=%s", repo, digest, q)
		       : rc_url(c, "/v2/%s/referrers/%s", repo, digest), scope);
	r.headers = curl_slist_append(NULL, "Accept: " OCI_MT_OCI_INDEX);
	r.out_max = MANIFEST_MAX;
	if (rc_http_do(&r, err) < 0)
		goto out;
	/* no such route: 404 by the spec; 400, 405 and 501 from registries
	 * that route /v2/NAME/referrers/ as something else */
	if (r.status == 404 || r.status == 400 || r.status == 405 || r.status == 501) {
		rc = 0;
		goto out;
	}
	if (r.status != 200) {
		rc_http_fail(&r, "referrers", err);
		goto out;
	}
	if ((j = kiln_json_loadb(r.out.buf, r.out.len, "referrers", err)) == NULL)
		goto out;
	if (!json_is_array(list = json_object_get(j, "manifests"))) {
		kiln_err(err, KILN_E_INVALID, "referrers: an answer without a manifests list");
		goto out;
	}
	/* a registry may ignore the filter (no OCI-Filters-Applied): apply it */
	if (artifact_type) {
		json_t *keep = json_array();
		json_array_foreach(list, i, d) {
			const char *at = kiln_json_str(d, "artifactType");
			if (at && strcmp(at, artifact_type) == 0)
				json_array_append(keep, d);
		}
		json_object_set_new(j, "manifests", keep);
	}
	*index = j;
	j = NULL;
	rc = 1;
out:
	if (rc < 0)
		kiln_error_wrap(err, "%s/%s@%s", c->host, repo, digest);
	json_decref(j);
	rc_http_free(&r);
	curl_free(q);
	free(scope);
	return rc;
}

int rc_blob_exists(rc_client *c, const char *repo, const char *digest, int64_t *size, kiln_error **err)
{
	char *scope = scope_of(repo, "pull");
	struct rc_http r;
	int rc = -1;

	rc_http_init(&r, c, "HEAD", rc_url(c, "/v2/%s/blobs/%s", repo, digest), scope);
	if (rc_http_do(&r, err) < 0)
		goto out;
	if (r.status == 200) {
		if (size)
			*size = r.clen;
		rc = 1;
	} else if (r.status == 404) {
		rc = 0;
	} else {
		rc_http_fail(&r, "blob", err);
		kiln_error_wrap(err, "%s/%s@%s", c->host, repo, digest);
	}
out:
	rc_http_free(&r);
	free(scope);
	return rc;
}

int rc_blob_get_mem(rc_client *c, const char *repo, const char *digest, size_t max, char **data, size_t *len,
		     kiln_error **err)
{
	char *scope = scope_of(repo, "pull");
	char got[KILN_DIGEST_MAX];
	enum kiln_digest_algo algo;
	struct rc_http r;
	int rc = -1;

	if (kiln_digest_parse(digest, &algo, err) < 0)
		return kiln_error_wrap(err, "blob");
	rc_http_init(&r, c, "GET", rc_url(c, "/v2/%s/blobs/%s", repo, digest), scope);
	r.out_max = max;
	if (rc_http_do(&r, err) < 0)
		goto out;
	if (r.status != 200) {
		rc_http_fail(&r, "blob", err);
		goto out;
	}
	kiln_digest_buf(algo, r.out.buf, r.out.len, got);
	if (strcmp(got, digest) != 0) {
		kiln_err(err, KILN_E_INVALID, "content does not match its digest (got %s)", got);
		goto out;
	}
	*len = r.out.len;
	*data = kiln_buf_detach(&r.out);
	rc = 0;
out:
	if (rc < 0)
		kiln_error_wrap(err, "%s/%s@%s", c->host, repo, digest);
	rc_http_free(&r);
	free(scope);
	return rc;
}
