/* xfer.h — what the blob transfers (xfer.c) share with their batch side
 * (xfer_batch.c) and their requests (xfer_request.c) and nothing else sees:
 * a transfer, its jobs (one per blob, or one per batch upload) and the steps
 * they go through. */
#ifndef KILN_REGCLIENT_XFER_H
#define KILN_REGCLIENT_XFER_H

#include "regclient/internal.h"

/* S_BATCH: a batch upload of several blobs (its own job); S_BATCHED: a blob
 * waiting in one */
enum step { S_START, S_HEAD, S_MOUNT, S_POST, S_STATUS, S_PATCH, S_PUT, S_GET, S_MONO, S_BATCH, S_BATCHED, S_DONE };

struct xfer;

struct job {
	struct rc_http rq;
	struct xfer *x;
	const struct rc_blob *b;
	enum step st;
	unsigned attempts, auths;
	int64_t wake_ms;
	int running, skipped, chunked, range_checked;
	CURL *easy;
	char *upload;           /* push: the upload session's URL */
	uint64_t size, off;     /* push: bytes the registry holds; pull: bytes in the .part */
	uint64_t sent;          /* push: body bytes of the request in flight */
	uint64_t counted;       /* its bytes in the progress's bytes_done (report) */
	int size_known;
	int fd;
	kiln_hasher *h;
	enum kiln_digest_algo algo;
	char *part;
	char *mscope;           /* the mount's scope (two repositories) */
	kiln_error *err;        /* set by the sink */
	/* S_BATCH: its blobs (jobs in S_BATCHED) and the body made of them */
	struct job **members;
	const struct rc_blob **mblobs;
	uint64_t *msizes;
	size_t nmembers;
	struct rc_batch_body body;
	char label[64];
};

struct xfer {
	rc_client *c;
	const char *repo;
	int push;
	char *scope;
	uint64_t chunk;
	const struct rc_xfer_opts *o;
	struct job *jobs;
	size_t n;
	CURLM *multi;
	CURL **handles;
	int *busy;
	unsigned nh;
	struct rc_progress p;
	uint64_t moved0;
	int64_t last_report, last_full;
	int started;            /* totals known: progress may be reported */
	int mono;               /* push: kiln serve (it answered the batch query): small blobs in one POST */
	struct job *batches;    /* push: batch uploads (kiln serve offered them) */
	size_t nbatches;
	size_t first;           /* jobs before this one are all done */
};

/* What a job moves, for messages: its blob, or a batch's. */
const char *rc_xfer_job_name(const struct job *j);
/* j is done (skipped: the registry or the store had it). */
void rc_xfer_finish(struct xfer *x, struct job *j, int skipped);
/* j's request got an answer it cannot go on from: the error, wrapped. */
int rc_xfer_fail(struct xfer *x, struct job *j, const char *what, kiln_error **err);
/* The request of j's current step, into j->rq (xfer_request.c). */
void rc_xfer_build_request(struct xfer *x, struct job *j);
/* rc_http's sink for a pull's GET: the bytes go into j's .part, hashed. */
int rc_xfer_pull_sink(void *ud, struct rc_http *r, const char *p, size_t n);
/* Push: the batch query; the blobs the registry lacks go straight to their upload. */
int rc_xfer_batch_skip(struct xfer *x, kiln_error **err);
/* Push to kiln serve: the small blobs to upload go in batch uploads. */
void rc_xfer_make_batches(struct xfer *x);
/* A batch upload's answer (neither transient nor 401). */
int rc_xfer_batch_done(struct xfer *x, struct job *j, kiln_error **err);

#endif
