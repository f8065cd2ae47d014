/* blobs.c — GET/HEAD/DELETE /v2/NAME/blobs/DIGEST.  Bytes are sent straight
 * from the store (sendfile through libmicrohttpd, or ranged S3 reads), with
 * single byte ranges; a blob is visible in a repository only once linked there. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry/internal.h"

#define BLOB_QUEUE_MIN ((int64_t)1 << 20)
#define BLOB_QUEUE_WAIT_S 10

/* "bytes=A-B", "bytes=A-", "bytes=-N" against size; 1 ok, 0 unsatisfiable, -1 unparsable. */
static int parse_range(const char *h, int64_t size, int64_t *start, int64_t *end)
{
	char *e;
	long long a = -1, b = -1;

	if (strncmp(h, "bytes=", 6) != 0)
		return -1;
	h += 6;
	if (*h == '-') {
		b = strtoll(h + 1, &e, 10);
		if (e == h + 1 || *e != '\0' || b <= 0)
			return b == 0 && *e == '\0' ? 0 : -1;
		*start = b >= size ? 0 : size - b;
		*end = size - 1;
		return size > 0;
	}
	a = strtoll(h, &e, 10);
	if (e == h || *e != '-' || a < 0)
		return -1;
	h = e + 1;
	if (*h) {
		b = strtoll(h, &e, 10);
		if (*e != '\0' || b < a)
			return -1;
	}
	if (a >= size)
		return 0;
	*start = a;
	*end = b < 0 || b >= size ? size - 1 : b;
	return 1;
}

void reg_blob_handle(reg_req *r)
{
	reg_server *s = r->srv;
	enum kiln_digest_algo algo;
	kiln_error *err = NULL;
	char buf[KILN_DIGEST_MAX + 64];
	int64_t size = 0, start = 0, end = -1;
	struct MHD_Response *resp;
	const char *range;
	int linked;

	if (kiln_digest_parse(r->ref, &algo, &err) < 0) {
		reg_error(r, 400, "DIGEST_INVALID", "%s", kiln_error_message(err));
		kiln_error_free(err);
		return;
	}
	if (strcmp(r->method, "DELETE") == 0) {
		linked = s->store.ops->blob_unlink(&s->store, s->db, r->name, r->ref, &err);
		if (linked < 0)
			reg_internal(r, err);
		else if (linked == 0)
			reg_error(r, 404, "BLOB_UNKNOWN", "blob %s unknown to repository %s", r->ref, r->name);
		else
			reg_respond(r, 202, "", 0, NULL);
		return;
	}
	linked = s->store.ops->blob_linked(&s->store, s->db, r->name, r->ref, &size, &err);
	if (linked < 0) {
		reg_internal(r, err);
		return;
	}
	if (linked == 0) {
		reg_error(r, 404, "BLOB_UNKNOWN", "blob %s unknown to repository %s", r->ref, r->name);
		return;
	}
	range = reg_req_header(r, "Range");
	if (range && strcmp(r->method, "GET") == 0) {
		int ok = parse_range(range, size, &start, &end);
		if (ok == 0) {
			reg_error(r, 416, "RANGE_INVALID", "range %s not satisfiable for %" PRId64 " bytes", range, size);
			snprintf(buf, sizeof(buf), "bytes */%" PRId64, size);
			reg_header(r, "Content-Range", buf);
			return;
		}
		if (ok < 0)
			range = NULL; /* an unparsable Range is ignored (RFC 9110) */
	} else {
		range = NULL;
	}
	if (!range) {
		start = 0;
		end = size - 1;
	}
	/* Large bodies queue in arrival order (streams.c); HEAD and small ones never. */
	if (strcmp(r->method, "GET") == 0 && end - start + 1 >= BLOB_QUEUE_MIN)
		r->stream_slot = reg_streams_acquire(&s->streams, BLOB_QUEUE_WAIT_S);
	resp = s->store.ops->blob_response(&s->store, r->ref, start, end - start + 1, &err);
	if (resp == NULL) {
		if (err->errnum == ENOENT) { /* collected between the two looks */
			reg_error(r, 404, "BLOB_UNKNOWN", "blob %s unknown to repository %s", r->ref, r->name);
			kiln_error_free(err);
		} else {
			reg_internal(r, err);
		}
		return;
	}
	reg_respond_with(r, range ? 206 : 200, resp, end - start + 1);
	reg_header(r, "Content-Type", "application/octet-stream");
	reg_header(r, "Docker-Content-Digest", r->ref);
	reg_header(r, "Accept-Ranges", "bytes");
	snprintf(buf, sizeof(buf), "\"%s\"", r->ref);
	reg_header(r, "ETag", buf);
	if (range) {
		snprintf(buf, sizeof(buf), "bytes %" PRId64 "-%" PRId64 "/%" PRId64, start, end, size);
		reg_header(r, "Content-Range", buf);
	}
}
