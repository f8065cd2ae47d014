/* exists.c — POST /v2/NAME/blobs/_exists: which of up to RC_BLOBS_EXIST_MAX (1000) blob
 * digests the repository holds, in one request (a template push asks about
 * thousands of chunks; one HEAD each costs a round trip and a request each).
 * A kiln extension: clients find it by using it and fall back to HEADs on any
 * registry that answers otherwise (docs/registry.md, "Batch blob query"). */
#include <stdlib.h>
#include <string.h>

#include "registry/internal.h"

#define EXISTS_BODY_MAX (256u << 10)

void reg_exists_begin(reg_req *r)
{
	if (strcmp(r->method, "POST") != 0) {
		reg_error(r, 405, "UNSUPPORTED", "method %s not allowed here (POST a digest list)", r->method);
		return;
	}
	r->body = BODY_MEM;
	r->mem_max = EXISTS_BODY_MAX;
}

void reg_exists_finish(reg_req *r)
{
	reg_server *s = r->srv;
	kiln_error *err = NULL;
	json_t *req = NULL, *digests, *present = NULL, *missing = NULL;
	size_t n;

	req = json_loadb(r->mem.buf ? r->mem.buf : "", r->mem.len, 0, NULL);
	digests = json_object_get(req, "digests");
	if (!json_is_array(digests)) {
		reg_error(r, 400, "BODY_INVALID", "the body must be a JSON object {\"digests\": [\"sha256:…\", …]}");
		goto out;
	}
	n = json_array_size(digests);
	if (n > RC_BLOBS_EXIST_MAX) {
		reg_error(r, 400, "TOO_MANY_DIGESTS", "%zu digests asked about; at most %d per request", n,
			  RC_BLOBS_EXIST_MAX);
		goto out;
	}
	/* all checked before any lookup: a bad list gets no partial answer */
	for (size_t i = 0; i < n; i++) {
		const char *d = json_string_value(json_array_get(digests, i));
		if (d == NULL || kiln_digest_parse(d, NULL, &err) < 0) {
			reg_error(r, 400, "DIGEST_INVALID", "digests[%zu]: %s", i,
				  d ? kiln_error_message(err) : "not a string");
			kiln_error_clear(&err);
			goto out;
		}
	}
	present = json_array();
	missing = json_array();
	for (size_t i = 0; i < n; i++) {
		json_t *d = json_array_get(digests, i);
		int64_t size = 0;
		/* the same lookup as a HEAD (the S3 backend reads the link objects) */
		int have = s->store.ops->blob_linked(&s->store, s->db, r->name, json_string_value(d), &size, &err);
		if (have < 0) {
			reg_internal(r, err);
			goto out;
		}
		json_array_append(have ? present : missing, d);
	}
	/* and how a kiln client may upload what is missing (batch.c) */
	reg_respond_json(r, 200,
			 json_pack("{s:o,s:o,s:{s:i,s:I}}", "present", present, "missing", missing, "batch_upload",
				   "max_blobs", RC_BLOBS_BATCH_MAX, "max_bytes", (json_int_t)RC_BLOBS_BATCH_BYTES),
			 NULL);
	present = missing = NULL;
out:
	json_decref(present);
	json_decref(missing);
	json_decref(req);
}
