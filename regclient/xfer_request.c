/* xfer_request.c — the request of each step of a blob transfer (xfer.c):
 * its URL, method, scope, headers and body (a slice of the blob, a batch
 * upload's body, or a pull's Range from where its .part ends). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "regclient/xfer.h"

static char *with_digest(const char *url, const char *digest)
{
	return kiln_xasprintf("%s%cdigest=%s", url, strchr(url, '?') ? '&' : '?', digest);
}

void rc_xfer_build_request(struct xfer *x, struct job *j)
{
	rc_client *c = x->c;
	const struct rc_blob *b = j->b;
	const char *scope = x->scope;
	char *url = NULL;
	struct curl_slist *hd = NULL;

	rc_http_free(&j->rq);
	switch (j->st) {
	case S_HEAD:
		url = rc_url(c, "/v2/%s/blobs/%s", x->repo, b->digest);
		break;
	case S_MOUNT:
		url = rc_url(c, "/v2/%s/blobs/uploads/?mount=%s&from=%s", x->repo, b->digest, b->mount_from);
		break;
	case S_POST:
		url = rc_url(c, "/v2/%s/blobs/uploads/", x->repo);
		break;
	case S_MONO:
		url = rc_url(c, "/v2/%s/blobs/uploads/?digest=%s", x->repo, b->digest);
		break;
	case S_STATUS:
		url = kiln_xstrdup(j->upload);
		break;
	case S_PATCH:
	case S_PUT:
		url = j->st == S_PUT ? with_digest(j->upload, b->digest) : kiln_xstrdup(j->upload);
		break;
	case S_GET:
		url = rc_url(c, "/v2/%s/blobs/%s", x->repo, b->digest);
		break;
	case S_BATCH:
		url = rc_url(c, "/v2/%s/blobs/_batch", x->repo);
		break;
	default:
		break;
	}
	static const char *const method[] = { [S_HEAD] = "HEAD", [S_MOUNT] = "POST", [S_POST] = "POST",
					      [S_STATUS] = "GET", [S_PATCH] = "PATCH", [S_PUT] = "PUT",
					      [S_GET] = "GET", [S_MONO] = "POST", [S_BATCH] = "POST" };
	rc_http_init(&j->rq, c, method[j->st], url, scope);
	free(j->mscope);
	j->mscope = NULL;
	if (j->st == S_MOUNT) {
		/* the token must also allow pulling from the source repository */
		j->mscope = kiln_xasprintf("%s repository:%s:pull", x->scope, b->mount_from);
		j->rq.scope = j->mscope;
	}
	if (j->st == S_MONO)
		j->off = 0;
	if (j->st == S_PATCH || j->st == S_PUT || j->st == S_MONO) {
		uint64_t end = j->st == S_PATCH ? (j->off + x->chunk < j->size ? j->off + x->chunk : j->size) : j->size;
		if (j->st == S_PUT && j->chunked)
			end = j->off; /* the chunks are all in: an empty closing PUT */
		j->rq.has_body = 1;
		j->rq.body_fd = j->fd;
		j->rq.body_mem = b->path ? NULL : b->data;
		j->rq.body_off = j->off;
		j->rq.body_len = end - j->off;
		j->sent = end - j->off;
		hd = curl_slist_append(hd, "Content-Type: application/octet-stream");
		if (j->st == S_PATCH) {
			char cr[80];
			snprintf(cr, sizeof(cr), "Content-Range: %llu-%llu", (unsigned long long)j->off,
				 (unsigned long long)(end - 1));
			hd = curl_slist_append(hd, cr);
		}
	}
	if (j->st == S_BATCH) {
		rc_batch_body_free(&j->body); /* what a cut attempt left open */
		j->rq.has_body = 1;
		j->rq.body_len = rc_batch_body_init(&j->body, j->mblobs, j->msizes, j->nmembers);
		j->rq.body_read = rc_batch_body_read;
		j->rq.body_rewind = rc_batch_body_rewind;
		j->rq.body_ud = &j->body;
		j->rq.out_max = (KILN_DIGEST_MAX + 4u) * j->nmembers + 4096; /* every digest, quoted */
		hd = curl_slist_append(hd, "Content-Type: application/vnd.kiln.blob-batch.v1");
	}
	if (j->st == S_GET) {
		j->range_checked = 0;
		j->sent = j->off;
		j->rq.sink = rc_xfer_pull_sink;
		j->rq.sink_ud = j;
		if (j->off > 0) {
			char rg[64];
			snprintf(rg, sizeof(rg), "Range: bytes=%llu-", (unsigned long long)j->off);
			hd = curl_slist_append(hd, rg);
		}
	}
	j->rq.headers = hd;
}
