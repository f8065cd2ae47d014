/* batch.c — the client side of kiln serve's batch upload (POST
 * /v2/NAME/blobs/_batch, docs/registry.md "Batch upload"): the request body,
 * made as curl asks for it (a line "DIGEST SIZE\n" and the bytes of each
 * blob, each file opened only while it is sent), and the check of the
 * answer.  xfer.c groups the small blobs of a push into such requests when
 * the registry's batch query offered it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "regclient/internal.h"

static int head_of(const struct rc_blob *b, uint64_t size, char *out, size_t cap)
{
	return snprintf(out, cap, "%s %" PRIu64 "\n", b->digest, size);
}

uint64_t rc_batch_body_init(struct rc_batch_body *b, const struct rc_blob *const *blobs, const uint64_t *sizes,
			    size_t n)
{
	char head[sizeof(b->head)];
	uint64_t len = 0;

	memset(b, 0, sizeof(*b));
	b->blobs = blobs;
	b->sizes = sizes;
	b->n = n;
	b->fd = -1;
	b->head_len = (size_t)-1; /* the first call makes the first header */
	for (size_t i = 0; i < n; i++)
		len += (uint64_t)head_of(blobs[i], sizes[i], head, sizeof(head)) + sizes[i];
	return len;
}

void rc_batch_body_free(struct rc_batch_body *b)
{
	if (b->fd >= 0)
		close(b->fd);
	b->fd = -1;
	kiln_error_free(b->err);
	b->err = NULL;
}

int rc_batch_body_rewind(void *ud)
{
	struct rc_batch_body *b = ud;

	rc_batch_body_free(b);
	b->i = 0;
	b->off = 0;
	b->head_len = (size_t)-1;
	return 0;
}

long rc_batch_body_read(void *ud, char *p, size_t n)
{
	struct rc_batch_body *b = ud;
	size_t put = 0;

	while (put < n && b->i < b->n) {
		const struct rc_blob *bl = b->blobs[b->i];
		uint64_t size = b->sizes[b->i];
		if (b->head_len == (size_t)-1) {
			b->head_len = (size_t)head_of(bl, size, b->head, sizeof(b->head));
			b->head_pos = 0;
			b->off = 0;
		}
		if (b->head_pos < b->head_len) {
			size_t k = b->head_len - b->head_pos < n - put ? b->head_len - b->head_pos : n - put;
			memcpy(p + put, b->head + b->head_pos, k);
			b->head_pos += k;
			put += k;
			continue;
		}
		if (b->off < size) {
			size_t k = size - b->off < n - put ? (size_t)(size - b->off) : n - put;
			if (bl->path) {
				if (b->fd < 0 && (b->fd = open(bl->path, O_RDONLY | O_CLOEXEC)) < 0) {
					kiln_err_errno(&b->err, errno, "open %s", bl->path);
					return -1;
				}
				ssize_t got = kiln_pread_full(b->fd, p + put, k, (off_t)b->off);
				if (got != (ssize_t)k) {
					kiln_err_errno(&b->err, got < 0 ? errno : EIO, "read %s (it changed while it was sent?)",
						       bl->path);
					return -1;
				}
			} else {
				memcpy(p + put, (const char *)bl->data + b->off, k);
			}
			b->off += k;
			put += k;
			continue;
		}
		/* this blob is sent: the next one */
		if (b->fd >= 0)
			close(b->fd);
		b->fd = -1;
		b->i++;
		b->head_len = (size_t)-1;
	}
	return (long)put;
}

int rc_batch_answer(const struct rc_http *r, const struct rc_blob *const *blobs, size_t n, kiln_error **err)
{
	json_t *ans = json_loadb(r->out.buf ? r->out.buf : "", r->out.len, 0, NULL);
	json_t *stored = json_object_get(ans, "stored");
	int rc = 0;

	if (!json_is_array(stored) || json_array_size(stored) != n) {
		rc = kiln_err(err, KILN_E_INVALID, "registry %s: the batch upload's answer does not list the %zu blobs sent",
			      r->c->host, n);
		goto out;
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		const char *d = json_string_value(json_array_get(stored, i));
		if (!d || strcmp(d, blobs[i]->digest) != 0)
			rc = kiln_err(err, KILN_E_INVALID, "registry %s: the batch upload's answer names %s for blob %s",
				      r->c->host, d ? d : "nothing", blobs[i]->digest);
	}
out:
	json_decref(ans);
	return rc;
}
