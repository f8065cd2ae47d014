/* exists.c — the batch blob query of kiln serve (POST /v2/NAME/blobs/_exists,
 * docs/registry.md "Batch blob query"): which of many blobs a repository
 * holds, in one request per RC_BLOBS_EXIST_MAX digests instead of a HEAD
 * each.  Other registries do not have it: the first answer that is not the
 * query's marks the client, and callers fall back to HEADs. */
#include <stdlib.h>
#include <string.h>

#include "regclient/internal.h"

/* One request for blobs[0..n) (n <= RC_BLOBS_EXIST_MAX). */
static int ask(rc_client *c, const char *repo, const struct rc_blob *blobs, size_t n, unsigned char *present,
	       kiln_error **err)
{
	char *scope = kiln_xasprintf("repository:%s:pull", repo), *body = NULL;
	json_t *req = json_array(), *obj, *ans = NULL, *got;
	struct rc_http r;
	size_t k = 0;
	int rc = -1;

	for (size_t i = 0; i < n; i++)
		json_array_append_new(req, json_string(blobs[i].digest));
	obj = json_pack("{s:o}", "digests", req);
	body = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	rc_http_init(&r, c, "POST", rc_url(c, "/v2/%s/blobs/_exists", repo), scope);
	r.headers = curl_slist_append(NULL, "Content-Type: application/json");
	r.body_mem = body;
	r.body_len = strlen(body);
	r.has_body = 1;
	r.out_max = (KILN_DIGEST_MAX + 4u) * RC_BLOBS_EXIST_MAX + 4096; /* every digest, quoted */
	if (rc_http_do(&r, err) < 0)
		goto out;
	if (r.status != 200) {
		/* 404/405 from a registry without the route (distribution: 404 NAME_UNKNOWN
		 * or BLOB_UNKNOWN), or anything else: HEADs still work everywhere */
		kiln_debug("registry %s: no batch blob query (HTTP %ld): one HEAD per blob", c->host, r.status);
		c->no_batch_exists = 1;
		rc = 0;
		goto out;
	}
	ans = json_loadb(r.out.buf ? r.out.buf : "", r.out.len, 0, NULL);
	got = json_object_get(ans, "present");
	if (!json_is_array(got) || !json_is_array(json_object_get(ans, "missing"))) {
		c->no_batch_exists = 1; /* a 200 that is not ours */
		rc = 0;
		goto out;
	}
	/* kiln serve offers its batch upload here (within the limits this client knows) */
	json_t *bu = json_object_get(ans, "batch_upload");
	json_int_t mb = json_integer_value(json_object_get(bu, "max_blobs"));
	json_int_t mx = json_integer_value(json_object_get(bu, "max_bytes"));
	if (mb > 0 && mx > 0) {
		c->batch_max_blobs = mb < RC_BLOBS_BATCH_MAX ? (unsigned)mb : RC_BLOBS_BATCH_MAX;
		c->batch_max_bytes = (uint64_t)mx < RC_BLOBS_BATCH_BYTES ? (uint64_t)mx : RC_BLOBS_BATCH_BYTES;
	}
	/* present lists the digests asked about that the repository holds, in request order */
	memset(present, 0, n);
	for (size_t i = 0; i < n && k < json_array_size(got); i++) {
		const char *d = json_string_value(json_array_get(got, k));
		if (d && strcmp(d, blobs[i].digest) == 0) {
			present[i] = 1;
			k++;
		}
	}
	if (k != json_array_size(got)) {
		kiln_err(err, KILN_E_INVALID, "registry %s: batch blob query answered digests not asked about", c->host);
		goto out;
	}
	rc = 1;
out:
	json_decref(ans);
	rc_http_free(&r);
	free(body);
	free(scope);
	return rc;
}

int rc_blobs_exist(rc_client *c, const char *repo, const struct rc_blob *blobs, size_t n, unsigned char *present,
		   kiln_error **err)
{
	size_t have = 0;

	if (c->no_batch_exists)
		return 0;
	for (size_t i = 0; i < n; i += RC_BLOBS_EXIST_MAX) {
		size_t k = n - i < RC_BLOBS_EXIST_MAX ? n - i : RC_BLOBS_EXIST_MAX;
		int r = ask(c, repo, blobs + i, k, present + i, err);
		if (r <= 0)
			return r < 0 ? kiln_error_wrap(err, "batch blob query to %s/%s", c->host, repo) : 0;
	}
	for (size_t i = 0; i < n; i++)
		have += present[i];
	kiln_debug("registry %s: batch blob query: %zu of %zu blobs present in %s", c->host, have, n, repo);
	return 1;
}
