/* manifests.c — GET/HEAD/PUT/DELETE /v2/NAME/manifests/REF (tag or digest).
 * A pushed manifest is validated, its blobs (and an index's manifests) must
 * already be in the repository, then its bytes go to the blob store and its
 * record, references and tag into the metadata db in one transaction. */
#include <stdlib.h>
#include <string.h>

#include "registry/internal.h"

static int ref_is_digest(reg_req *r)
{
	return strchr(r->ref, ':') != NULL;
}

static void get(reg_req *r)
{
	reg_server *s = r->srv;
	char digest[KILN_DIGEST_MAX], *mt = NULL, etag[KILN_DIGEST_MAX + 2];
	kiln_buf data = KILN_BUF_INIT;
	kiln_error *err = NULL;
	int found;

	found = s->store.ops->manifest_get(&s->store, s->db, r->name, r->ref, digest, &mt, &data, &err);
	if (found < 0) {
		reg_internal(r, err);
		goto out;
	}
	if (found == 0) {
		reg_error(r, 404, "MANIFEST_UNKNOWN", "manifest %s unknown to repository %s", r->ref, r->name);
		goto out;
	}
	reg_respond(r, 200, data.buf, data.len, mt);
	reg_header(r, "Docker-Content-Digest", digest);
	snprintf(etag, sizeof(etag), "\"%s\"", digest);
	reg_header(r, "ETag", etag);
out:
	kiln_buf_free(&data);
	free(mt);
}

int reg_server_resolve(reg_server *s, const char *repo, const char *ref, char digest[KILN_DIGEST_MAX], kiln_error **err)
{
	kiln_buf data = KILN_BUF_INIT;
	char *mt = NULL;
	int found;

	if (!oci_name_valid(repo))
		return kiln_err(err, KILN_E_INVALID, "invalid repository name '%s'", repo);
	found = s->store.ops->manifest_get(&s->store, s->db, repo, ref, digest, &mt, &data, err);
	kiln_buf_free(&data);
	free(mt);
	return found;
}

static void del(reg_req *r)
{
	kiln_error *err = NULL;
	int n;

	const reg_store *st = &r->srv->store;

	if (ref_is_digest(r))
		n = st->ops->manifest_delete(st, r->srv->db, r->name, r->ref, &err);
	else
		n = st->ops->tag_delete(st, r->srv->db, r->name, r->ref, &err);
	if (n < 0)
		reg_internal(r, err);
	else if (n == 0)
		reg_error(r, 404, "MANIFEST_UNKNOWN", "manifest %s unknown to repository %s", r->ref, r->name);
	else
		reg_respond(r, 202, "", 0, NULL);
}

void reg_manifest_begin(reg_req *r)
{
	enum kiln_digest_algo algo;
	kiln_error *err = NULL;
	uint64_t cl;

	if (ref_is_digest(r)) {
		if (kiln_digest_parse(r->ref, &algo, &err) < 0) {
			reg_error(r, 400, "DIGEST_INVALID", "%s", kiln_error_message(err));
			kiln_error_free(err);
			return;
		}
	} else if (!oci_tag_valid(r->ref)) {
		if (strcmp(r->method, "PUT") == 0)
			reg_error(r, 400, "TAG_INVALID", "invalid tag '%s'", r->ref);
		else
			reg_error(r, 404, "MANIFEST_UNKNOWN", "invalid tag '%s'", r->ref);
		return;
	}
	if (strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0) {
		get(r);
		return;
	}
	if (strcmp(r->method, "DELETE") == 0) {
		del(r);
		return;
	}
	if (reg_req_content_length(r, &cl) && cl > r->srv->cfg.manifest_max) {
		reg_error(r, 413, "SIZE_INVALID", "manifest larger than %llu bytes",
			  (unsigned long long)r->srv->cfg.manifest_max);
		return;
	}
	r->body = BODY_MEM;
	r->mem_max = r->srv->cfg.manifest_max;
}

void reg_manifest_finish(reg_req *r)
{
	reg_server *s = r->srv;
	struct oci_manifest m;
	enum kiln_digest_algo algo = KILN_SHA256;
	char digest[KILN_DIGEST_MAX], *loc;
	kiln_error *err = NULL;
	int tagged = !ref_is_digest(r), ok;
	long missing = 0;

	if (oci_manifest_parse(r->mem.buf, r->mem.len, reg_req_header(r, "Content-Type"), &m, &err) < 0) {
		reg_error(r, 400, "MANIFEST_INVALID", "%s", kiln_error_message(err));
		kiln_error_free(err);
		return;
	}
	if (!tagged)
		kiln_digest_parse(r->ref, &algo, NULL);
	kiln_digest_buf(algo, r->mem.buf, r->mem.len, digest);
	if (!tagged && strcmp(digest, r->ref) != 0) {
		reg_error(r, 400, "DIGEST_INVALID", "manifest digest is %s, not %s", digest, r->ref);
		goto out;
	}
	/* Bytes first, so a manifest record never points at missing bytes: on disk
	 * inside the record's write transaction, which gc's removal of an
	 * identical, unreferenced file also takes.  In S3 the manifest object
	 * (bytes + media type) is the record. */
	ok = s->store.ops->manifest_put(&s->store, s->db, r->name, digest, &r->mem, &m, tagged ? r->ref : NULL,
					&missing, &err);
	if (ok < 0)
		goto fail;
	if (ok == 0) {
		const struct oci_ref *ref = &m.refs[missing];
		reg_error(r, 400, "MANIFEST_BLOB_UNKNOWN", "%s %s is not in repository %s",
			  ref->kind == OCI_REF_MANIFEST ? "manifest" : "blob", ref->digest, r->name);
		goto out;
	}
	loc = kiln_xasprintf("/v2/%s/manifests/%s", r->name, digest);
	reg_respond(r, 201, "", 0, NULL);
	reg_header(r, "Location", loc);
	reg_header(r, "Docker-Content-Digest", digest);
	if (m.subject[0])
		reg_header(r, "OCI-Subject", m.subject);
	free(loc);
	goto out;
fail:
	reg_internal(r, err);
out:
	oci_manifest_free(&m);
}
