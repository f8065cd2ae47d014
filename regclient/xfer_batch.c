/* xfer_batch.c — the batch side of a push (xfer.c): one batch query for the
 * blobs the registry already has, and on kiln serve, which offers it in that
 * query's answer, the small blobs left go in batch uploads (regclient/batch.c
 * makes their bodies) instead of one request each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "regclient/xfer.h"

/* Push: one batch query instead of a HEAD per blob where the registry has it
 * (kiln serve); the blobs it lacks go straight to their upload. */
int rc_xfer_batch_skip(struct xfer *x, kiln_error **err)
{
	unsigned char *present = kiln_xcalloc(x->n, 1);
	struct rc_blob *bl = kiln_xcalloc(x->n, sizeof(*bl));
	int r;

	for (size_t i = 0; i < x->n; i++)
		memcpy(bl[i].digest, x->jobs[i].b->digest, sizeof(bl[i].digest));
	r = rc_blobs_exist(x->c, x->repo, bl, x->n, present, err);
	x->mono = r > 0;
	for (size_t i = 0; r > 0 && i < x->n; i++) {
		struct job *j = &x->jobs[i];
		if (present[i])
			rc_xfer_finish(x, j, 1);
		else
			j->st = j->b->mount_from ? S_MOUNT : !j->chunked ? S_MONO : S_POST;
	}
	free(present);
	free(bl);
	return r < 0 ? -1 : 0;
}

/* Push to kiln serve: the small blobs still to upload one by one go in batch
 * uploads instead, of at most BATCH_BYTES (or the registry's limits) each:
 * enough requests to keep the connections busy, few enough that a request,
 * a syncfs and a commit are paid per thousands of kilobytes, not per blob. */
#define BATCH_BYTES (8ull << 20)
void rc_xfer_make_batches(struct xfer *x)
{
	rc_client *c = x->c;
	uint64_t target = c->batch_max_bytes < BATCH_BYTES ? c->batch_max_bytes : BATCH_BYTES, bytes = 0;
	size_t nb = 0, in = 0;

	if (c->batch_max_blobs == 0)
		return;
	/* twice: count, then fill */
	for (int fill = 0; fill < 2; fill++) {
		struct job *bj = NULL;
		nb = 0;
		for (size_t i = 0; i < x->n; i++) {
			struct job *m = &x->jobs[i];
			if (m->st != S_MONO || m->size > c->batch_max_bytes)
				continue;
			if (nb == 0 || in == c->batch_max_blobs || (in > 0 && bytes + m->size > target)) {
				nb++;
				in = 0;
				bytes = 0;
				if (fill) {
					bj = &x->batches[nb - 1];
					bj->mblobs = kiln_xcalloc(c->batch_max_blobs, sizeof(*bj->mblobs));
					bj->members = kiln_xcalloc(c->batch_max_blobs, sizeof(*bj->members));
					bj->msizes = kiln_xcalloc(c->batch_max_blobs, sizeof(*bj->msizes));
				}
			}
			in++;
			bytes += m->size;
			if (!fill)
				continue;
			bj->members[bj->nmembers] = m;
			bj->mblobs[bj->nmembers] = m->b;
			bj->msizes[bj->nmembers] = m->size;
			bj->nmembers++;
			bj->size += m->size;
			m->st = S_BATCHED;
		}
		if (!fill && nb) {
			x->batches = kiln_xcalloc(nb, sizeof(*x->batches));
			x->nbatches = nb;
			for (size_t k = 0; k < nb; k++) {
				struct job *b = &x->batches[k];
				b->x = x;
				b->fd = -1;
				b->st = S_BATCH;
				b->size_known = 1;
				rc_batch_body_init(&b->body, NULL, NULL, 0);
				rc_http_init(&b->rq, c, "POST", NULL, NULL);
			}
		}
	}
	for (size_t k = 0; k < x->nbatches; k++)
		snprintf(x->batches[k].label, sizeof(x->batches[k].label), "batch upload of %zu blobs",
			 x->batches[k].nmembers);
	if (nb)
		kiln_debug("registry %s: %zu batch uploads", c->host, nb);
}

/* A batch upload ended (neither transient nor 401): its blobs are stored,
 * or the registry refused the route (they go one by one), or it failed. */
int rc_xfer_batch_done(struct xfer *x, struct job *j, kiln_error **err)
{
	long st = j->rq.status;

	if (st == 404 || st == 405) {
		/* not what offered it (a proxy in front of kiln serve?): one upload per blob */
		kiln_debug("registry %s: no batch upload (HTTP %ld): one upload per blob", x->c->host, st);
		x->c->batch_max_blobs = 0;
		for (size_t i = 0; i < j->nmembers; i++)
			j->members[i]->st = S_MONO;
		x->first = 0;
		x->p.bytes_done -= j->counted;
		j->counted = 0;
		j->st = S_DONE;
		return 0;
	}
	if (st != 201)
		return rc_xfer_fail(x, j, "batch upload", err);
	if (rc_batch_answer(&j->rq, j->mblobs, j->nmembers, err) < 0)
		return kiln_error_wrap(err, "%s@%s", x->repo, rc_xfer_job_name(j));
	x->p.bytes_done -= j->counted; /* its members count now */
	j->counted = 0;
	for (size_t i = 0; i < j->nmembers; i++) {
		j->members[i]->off = j->members[i]->size;
		rc_xfer_finish(x, j->members[i], 0);
	}
	j->st = S_DONE;
	return 0;
}
