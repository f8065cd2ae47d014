/* batch.c — POST /v2/NAME/blobs/_batch, kiln's batch upload (docs/registry.md,
 * "Batch upload"): one request carries many blobs, each framed by a line
 * "DIGEST SIZE\n".  Each is staged in its own file and verified as it ends;
 * then the whole batch is made durable with one syncfs and linked in one
 * group commit.  A template push's thousands of chunks cost tens of requests
 * instead of a request, a file fsync and a directory fsync each.  All or
 * nothing: a bad header, a wrong digest, a cut body or a failed link stores
 * none of the batch. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registry/internal.h"

/* "sha512:" + 128 hex digits, a space and 20 digits fit well below this. */
#define LINE_MAX_LEN 200

struct reg_batch {
	int dfd;                 /* uploads/, opened first: its syncfs reports every writeback error since */
	reg_upload **ups;        /* staged blobs; the last is being received while in_blob */
	char (*digests)[KILN_DIGEST_MAX];
	size_t n;
	uint64_t left, bytes;    /* bytes of the current blob still to come; blob bytes so far */
	int in_blob;
	char line[LINE_MAX_LEN + 1];
	size_t line_len;
};

void reg_batch_free(reg_req *r)
{
	struct reg_batch *b = r->batch;

	if (b == NULL)
		return;
	/* committed blobs were renamed away: this removes only what was not */
	for (size_t i = 0; i < b->n; i++)
		reg_upload_cancel(&r->srv->uploads, b->ups[i]);
	if (b->dfd >= 0)
		close(b->dfd);
	free(b->ups);
	free(b->digests);
	free(b);
	r->batch = NULL;
}

void reg_batch_begin(reg_req *r)
{
	uint64_t cl;
	struct reg_batch *b;

	if (strcmp(r->method, "POST") != 0) {
		reg_error(r, 405, "UNSUPPORTED", "method %s not allowed here (POST a batch of blobs)", r->method);
		return;
	}
	/* a body that cannot fit: refused before any byte (headers are at most
	 * LINE_MAX_LEN bytes a blob) */
	if (reg_req_content_length(r, &cl) && cl > RC_BLOBS_BATCH_BYTES + (uint64_t)RC_BLOBS_BATCH_MAX * (LINE_MAX_LEN + 1)) {
		reg_error(r, 413, "SIZE_INVALID", "a batch carries at most %u bytes of blobs", RC_BLOBS_BATCH_BYTES);
		return;
	}
	b = kiln_xcalloc(1, sizeof(*b));
	b->dfd = open(r->srv->store.uploads, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (b->dfd < 0) {
		kiln_error *err = NULL;
		kiln_err_errno(&err, errno, "open %s", r->srv->store.uploads);
		free(b);
		reg_internal(r, err);
		return;
	}
	b->ups = kiln_xcalloc(RC_BLOBS_BATCH_MAX, sizeof(*b->ups));
	b->digests = kiln_xcalloc(RC_BLOBS_BATCH_MAX, sizeof(*b->digests));
	r->batch = b;
	r->body = BODY_BATCH;
}

/* The current blob is all in: verify it, start its writeback, let go of its fd. */
static void end_blob(reg_req *r, struct reg_batch *b)
{
	reg_upload *up = b->ups[b->n - 1];
	kiln_error *err = NULL;

	b->in_blob = 0;
	if (reg_upload_verify(&r->srv->uploads, up, b->digests[b->n - 1], &err) < 0) {
		if (err->kind != KILN_E_INVALID) {
			reg_internal(r, err);
			return;
		}
		reg_error(r, 400, "DIGEST_INVALID", "blobs[%zu] %s: %s; nothing of the batch was stored", b->n - 1,
			  b->digests[b->n - 1], kiln_error_message(err));
		kiln_error_free(err);
		return;
	}
	/* the syncfs at the end then mostly waits for writes already under way */
	sync_file_range(up->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
	close(up->fd);
	up->fd = -1;
}

/* A header line "DIGEST SIZE" is in: stage the blob it announces. */
static void start_blob(reg_req *r, struct reg_batch *b)
{
	reg_server *s = r->srv;
	char *sp = strchr(b->line, ' '), *end = NULL;
	kiln_error *err = NULL;
	uint64_t size;
	size_t i = b->n;

	if (i == RC_BLOBS_BATCH_MAX) {
		reg_error(r, 400, "TOO_MANY_BLOBS", "more than %d blobs in one batch", RC_BLOBS_BATCH_MAX);
		return;
	}
	if (sp == NULL || sp[1] < '0' || sp[1] > '9' || strlen(sp + 1) > 20) {
		reg_error(r, 400, "BODY_INVALID", "blobs[%zu]: the header line must be \"DIGEST SIZE\"", i);
		return;
	}
	*sp = '\0';
	errno = 0;
	size = strtoull(sp + 1, &end, 10);
	if (errno || *end != '\0') {
		reg_error(r, 400, "BODY_INVALID", "blobs[%zu]: size \"%s\" is not a number of bytes", i, sp + 1);
		return;
	}
	if (kiln_digest_parse(b->line, NULL, &err) < 0) {
		reg_error(r, 400, "DIGEST_INVALID", "blobs[%zu]: %s", i, kiln_error_message(err));
		kiln_error_free(err);
		return;
	}
	if (s->cfg.blob_max && size > s->cfg.blob_max) {
		reg_error(r, 413, "SIZE_INVALID", "blobs[%zu] %s: larger than %" PRIu64 " bytes", i, b->line,
			  s->cfg.blob_max);
		return;
	}
	if (size > RC_BLOBS_BATCH_BYTES - b->bytes) {
		reg_error(r, 413, "SIZE_INVALID", "blobs[%zu] %s: a batch carries at most %u bytes of blobs", i, b->line,
			  RC_BLOBS_BATCH_BYTES);
		return;
	}
	b->ups[i] = reg_upload_new_once(&s->uploads, r->name, &err);
	if (b->ups[i] == NULL) {
		reg_internal(r, err);
		return;
	}
	memcpy(b->digests[i], b->line, strlen(b->line) + 1); /* a valid digest fits */
	b->n++;
	b->bytes += size;
	b->left = size;
	b->in_blob = 1;
	if (size == 0)
		end_blob(r, b);
}

void reg_batch_body(reg_req *r, const char *p, size_t len)
{
	struct reg_batch *b = r->batch;
	kiln_error *err = NULL;

	for (;;) {
		if (r->resp) { /* refused: drop what it staged before the answer goes out */
			reg_batch_free(r);
			return;
		}
		if (len == 0)
			return;
		if (b->in_blob) {
			size_t k = len < b->left ? len : (size_t)b->left;
			if (reg_upload_write(b->ups[b->n - 1], p, k, &err) < 0) {
				reg_internal(r, err);
				return;
			}
			p += k;
			len -= k;
			b->left -= k;
			if (b->left == 0)
				end_blob(r, b);
			continue;
		}
		const char *nl = memchr(p, '\n', len);
		size_t k = nl ? (size_t)(nl - p) : len;
		if (b->line_len + k > LINE_MAX_LEN) {
			reg_error(r, 400, "BODY_INVALID", "blobs[%zu]: header line longer than %d bytes", b->n, LINE_MAX_LEN);
			return;
		}
		memcpy(b->line + b->line_len, p, k);
		b->line_len += k;
		p += k;
		len -= k;
		if (nl) {
			p++;
			len--;
			b->line[b->line_len] = '\0';
			b->line_len = 0;
			start_blob(r, b);
		}
	}
}

void reg_batch_finish(reg_req *r)
{
	reg_server *s = r->srv;
	struct reg_batch *b = r->batch;
	struct reg_staged *v = NULL;
	kiln_error *err = NULL;
	json_t *stored;
	int rc = 0;

	if (b->in_blob || b->line_len) {
		reg_error(r, 400, "BODY_INVALID", "the body ends inside blobs[%zu]%s; nothing of the batch was stored",
			  b->in_blob ? b->n - 1 : b->n, b->in_blob ? "" : "'s header line");
		goto out;
	}
	if (b->n == 0) {
		reg_error(r, 400, "BODY_INVALID", "no blobs in the batch (each is a line \"DIGEST SIZE\", then its bytes)");
		goto out;
	}
	/* every staged file durable before any is renamed into the store */
	if (syncfs(b->dfd) < 0) {
		kiln_err_errno(&err, errno, "batch upload: syncfs of %s", s->store.uploads);
		reg_internal(r, err);
		goto out;
	}
	v = kiln_xcalloc(b->n, sizeof(*v));
	for (size_t i = 0; i < b->n; i++)
		v[i] = (struct reg_staged){ b->digests[i], reg_upload_path(&s->uploads, b->ups[i]),
					    (int64_t)b->ups[i]->offset };
	if (s->store.ops->blob_commit_batch)
		rc = s->store.ops->blob_commit_batch(&s->store, s->db, r->name, v, b->n, &err);
	else
		for (size_t i = 0; i < b->n && rc == 0; i++)
			rc = s->store.ops->blob_commit(&s->store, s->db, r->name, v[i].digest, v[i].src, v[i].size, &err);
	if (rc < 0) {
		reg_internal(r, err);
		goto out;
	}
	stored = json_array();
	for (size_t i = 0; i < b->n; i++)
		json_array_append_new(stored, json_string(b->digests[i]));
	reg_respond_json(r, 201, json_pack("{s:o}", "stored", stored), NULL);
out:
	for (size_t i = 0; v && i < b->n; i++)
		free((char *)v[i].src);
	free(v);
	reg_batch_free(r); /* before the answer: a refused batch leaves nothing */
}
