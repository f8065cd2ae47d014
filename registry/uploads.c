/* uploads.c — the blob upload endpoints: POST (new session, monolithic with
 * ?digest=, cross-repository ?mount=[&from=]), PATCH (chunks, in order or 416),
 * PUT (last chunk + digest: verify and commit), GET (status), DELETE. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "registry/internal.h"

static void upload_headers(reg_req *r, reg_upload *up)
{
	char buf[256];

	snprintf(buf, sizeof(buf), "/v2/%s/blobs/uploads/%s", r->name, up->uuid);
	reg_header(r, "Location", buf);
	snprintf(buf, sizeof(buf), "0-%" PRIu64, up->offset ? up->offset - 1 : 0);
	reg_header(r, "Range", buf);
	reg_header(r, "Docker-Upload-UUID", up->uuid);
}

static void release(reg_req *r)
{
	reg_upload_release(&r->srv->uploads, r->up);
	r->up = NULL;
}

static void blob_created(reg_req *r, const char *digest)
{
	char *loc = kiln_xasprintf("/v2/%s/blobs/%s", r->name, digest);

	reg_respond(r, 201, "", 0, NULL);
	reg_header(r, "Location", loc);
	reg_header(r, "Docker-Content-Digest", digest);
	free(loc);
}

static int digest_arg(reg_req *r, const char *d)
{
	enum kiln_digest_algo algo;
	kiln_error *err = NULL;

	if (d == NULL) {
		reg_error(r, 400, "DIGEST_INVALID", "digest parameter missing");
		return -1;
	}
	if (kiln_digest_parse(d, &algo, &err) < 0) {
		reg_error(r, 400, "DIGEST_INVALID", "%s", kiln_error_message(err));
		kiln_error_free(err);
		return -1;
	}
	return 0;
}

/* Content-Length over the configured blob limit is refused before any byte. */
static int check_length(reg_req *r)
{
	uint64_t max = r->srv->cfg.blob_max, cl;

	if (max && reg_req_content_length(r, &cl) && cl > max) {
		reg_error(r, 413, "SIZE_INVALID", "blob larger than %" PRIu64 " bytes", max);
		return -1;
	}
	return 0;
}

/* Content-Range "START-END" must continue exactly where the upload is. */
static int check_content_range(reg_req *r, reg_upload *up)
{
	const char *cr = reg_req_header(r, "Content-Range");
	const char *cl = reg_req_header(r, "Content-Length");
	unsigned long long a, b;
	char extra;

	if (cr == NULL)
		return 0;
	if (strncmp(cr, "bytes ", 6) == 0 || strncmp(cr, "bytes=", 6) == 0)
		cr += 6;
	if (sscanf(cr, "%llu-%llu%c", &a, &b, &extra) != 2 || b < a || a != up->offset ||
	    (cl && strtoull(cl, NULL, 10) != b - a + 1)) {
		reg_error(r, 416, "BLOB_UPLOAD_INVALID", "Content-Range %s does not continue the upload at offset %" PRIu64,
			  cr, up->offset);
		upload_headers(r, up);
		return -1;
	}
	return 0;
}

/* A mount without from= (the distribution spec's automatic content
 * discovery): from the first repository holding the blob that the caller may
 * read.  One it may not read is never used, so the answer (201 or an upload)
 * says nothing about blobs elsewhere.  1 mounted, 0 not, -1 error. */
#define HOLDERS_MAX 256
static int mount_any(reg_req *r, const char *digest, kiln_error **err)
{
	reg_server *s = r->srv;
	kiln_strv holders = { 0 };
	int have = 0;

	if (s->store.ops->blob_holders == NULL)
		return 0;
	if (s->store.ops->blob_holders(&s->store, s->db, digest, HOLDERS_MAX, &holders, err) < 0)
		return -1;
	for (size_t i = 0; i < holders.n && have == 0; i++)
		if (reg_auth_allows(r, holders.v[i], REG_PULL))
			have = s->store.ops->blob_mount(&s->store, s->db, r->name, holders.v[i], digest, err);
	kiln_strv_free(&holders);
	return have;
}

static void start(reg_req *r)
{
	reg_server *s = r->srv;
	const char *mount = reg_query(r, "mount"), *from = reg_query(r, "from");
	const char *digest = reg_query(r, "digest");
	kiln_error *err = NULL;
	reg_upload *up;

	if (mount) {
		enum kiln_digest_algo algo;
		int have = 0;

		if (kiln_digest_parse(mount, &algo, &err) < 0) {
			kiln_error_clear(&err); /* not mountable: a plain upload instead */
		} else if (from && oci_name_valid(from) && reg_auth_allows(r, from, REG_PULL)) {
			have = s->store.ops->blob_mount(&s->store, s->db, r->name, from, mount, &err);
		} else if (from == NULL) {
			have = mount_any(r, mount, &err);
		}
		if (have > 0) {
			blob_created(r, mount);
			return;
		}
		if (have < 0 || err) {
			reg_internal(r, err);
			return;
		}
	}
	if (digest && digest_arg(r, digest) < 0)
		return;
	if (check_length(r) < 0)
		return;
	/* monolithic: no session the client could come back to */
	up = digest ? reg_upload_new_once(&s->uploads, r->name, &err) : reg_upload_new(&s->uploads, r->name, &err);
	if (up == NULL) {
		reg_internal(r, err);
		return;
	}
	r->up = up;
	if (digest) {
		r->body = BODY_UPLOAD; /* monolithic: committed in finish */
		return;
	}
	reg_upload_release(&s->uploads, up);
	r->up = NULL;
	reg_respond(r, 202, "", 0, NULL);
	upload_headers(r, up);
}

void reg_upload_begin(reg_req *r)
{
	reg_server *s = r->srv;
	kiln_error *err = NULL;
	reg_upload *up;

	if (r->route == R_UPLOAD_START) {
		start(r);
		return;
	}
	up = reg_upload_acquire(&s->uploads, r->name, r->ref, &err);
	if (up == NULL) {
		if (err->kind == KILN_E_NOTFOUND)
			reg_error(r, 404, "BLOB_UPLOAD_UNKNOWN", "upload %s unknown to repository %s", r->ref, r->name);
		else if (err->kind == KILN_E_EXISTS)
			reg_error(r, 409, "BLOB_UPLOAD_INVALID", "upload %s is busy with another request", r->ref);
		else {
			reg_internal(r, err);
			return;
		}
		kiln_error_free(err);
		return;
	}
	r->up = up;
	if (strcmp(r->method, "GET") == 0) {
		reg_respond(r, 204, "", 0, NULL);
		upload_headers(r, up);
		release(r);
	} else if (strcmp(r->method, "DELETE") == 0) {
		reg_upload_cancel(&s->uploads, up);
		r->up = NULL;
		reg_respond(r, 204, "", 0, NULL);
	} else if (strcmp(r->method, "PUT") == 0) {
		if (digest_arg(r, reg_query(r, "digest")) < 0 || check_content_range(r, up) < 0 || check_length(r) < 0) {
			release(r);
			return;
		}
		r->body = BODY_UPLOAD;
	} else { /* PATCH */
		if (check_content_range(r, up) < 0 || check_length(r) < 0) {
			release(r);
			return;
		}
		r->body = BODY_UPLOAD;
	}
}

void reg_upload_finish(reg_req *r)
{
	reg_server *s = r->srv;
	const char *digest = reg_query(r, "digest");
	kiln_error *err = NULL;
	int64_t size;

	if (strcmp(r->method, "PATCH") == 0) {
		reg_respond(r, 202, "", 0, NULL);
		upload_headers(r, r->up);
		/* Let go before the client sees the answer and sends the next chunk. */
		release(r);
		return;
	}
	/* PUT or monolithic POST: verify, then make the blob visible. */
	size = reg_upload_commit(&s->uploads, r->up, digest, s->db, &err);
	r->up = NULL;
	if (size < 0) {
		if (err->kind == KILN_E_INVALID) {
			reg_error(r, 400, "DIGEST_INVALID", "%s", kiln_error_message(err));
			kiln_error_free(err);
		} else {
			reg_internal(r, err);
		}
		return;
	}
	blob_created(r, digest);
}
