/* xfer.c — blob transfers, several at once over one curl multi
 * handle.  Each blob is a small state machine of requests (push: HEAD,
 * mount, POST, PATCH chunks / PUT; pull: GET with Range into PATH.part;
 * xfer_request.c builds them); transient failures are retried with backoff
 * from where the registry (or the .part file) says the bytes end, and every
 * pulled blob is verified against its digest before it is renamed into place. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "regclient/xfer.h"

#define CHUNK_DEFAULT (32ull << 20)

/* What a job moves, for messages: its blob, or a batch's. */
const char *rc_xfer_job_name(const struct job *j)
{
	return j->b ? j->b->digest : j->label;
}

/* The bytes of j counted as done. */
static uint64_t done_of(const struct job *j)
{
	uint64_t d;

	if (j->members) /* a batch: until its blobs are done */
		d = j->running ? j->rq.body_pos : 0;
	else
		d = j->st == S_DONE ? j->size : j->off + (j->running ? j->rq.body_pos : 0);
	return j->size_known && d > j->size ? j->size : d;
}

/* Forced reports (one per finished blob) between the periodic ones do not
 * add up every job again (thousands of blobs finish in a push): finish()
 * moves the total by what its job adds since it was last counted. */
static void report(struct xfer *x, const char *digest, int force)
{
	int64_t now = (int64_t)kiln_now_ms();
	if (!x->o->progress || !x->started || (!force && now - x->last_report < 100))
		return;
	if (now - x->last_full >= 100) {
		x->last_full = now;
		x->p.bytes_done = 0;
		for (size_t i = 0; i < x->n; i++)
			x->p.bytes_done += x->jobs[i].counted = done_of(&x->jobs[i]);
		for (size_t i = 0; i < x->nbatches; i++)
			x->p.bytes_done += x->batches[i].counted = done_of(&x->batches[i]);
	}
	x->last_report = now;
	x->p.bytes_moved = (x->push ? x->c->stats.bytes_up : x->c->stats.bytes_down) - x->moved0;
	x->p.digest = digest;
	x->o->progress(x->o->ud, &x->p);
	x->p.digest = NULL;
}

static void job_release(struct job *j)
{
	if (j->fd >= 0)
		close(j->fd);
	j->fd = -1;
	if (j->h)
		kiln_hasher_free(j->h);
	j->h = NULL;
}

void rc_xfer_finish(struct xfer *x, struct job *j, int skipped)
{
	j->st = S_DONE;
	j->skipped = skipped;
	job_release(j);
	x->p.bytes_done += done_of(j) - j->counted;
	j->counted = done_of(j);
	x->p.blobs_done++;
	if (skipped)
		x->p.blobs_skipped++;
	report(x, j->b->digest, 1);
}

static int fsync_dir_of(const char *path)
{
	char *d = kiln_xstrdup(path);
	int fd = open(dirname(d), O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = -1;
	free(d);
	if (fd >= 0) {
		rc = fsync(fd);
		close(fd);
	}
	return rc;
}

/* ---- pull ---------------------------------------------------------------- */

/* The .part emptied and its hash begun again: the blob comes from its start. */
static int pull_restart(struct job *j, kiln_error **err)
{
	if (ftruncate(j->fd, 0) < 0)
		return kiln_err_errno(err, errno, "truncate %s", j->part);
	kiln_hasher_free(j->h);
	j->h = kiln_hasher_new(j->algo);
	j->off = 0;
	return 0;
}

int rc_xfer_pull_sink(void *ud, struct rc_http *r, const char *p, size_t n)
{
	struct job *j = ud;

	if (!j->range_checked) {
		j->range_checked = 1;
		/* the registry ignored Range: start over */
		if (r->status == 200 && j->off > 0 && pull_restart(j, &j->err) < 0)
			return -1;
	}
	if (j->size_known && j->off + n > j->size)
		return kiln_err(&j->err, KILN_E_INVALID, "registry %s sent more than the %llu bytes expected",
				j->x->c->host, (unsigned long long)j->size);
	if (kiln_pwrite_full(j->fd, p, n, (off_t)j->off) < 0)
		return kiln_err_errno(&j->err, errno, "write %s", j->part);
	kiln_hasher_update(j->h, p, n);
	j->off += n;
	return 0;
}

/* Open (or reopen) the .part, locked, and hash what it already holds.
 * 1: another process fetched the blob meanwhile and have() now says so;
 * 2: another process holds the .part now (try again later). */
static int pull_open(struct xfer *x, struct job *j, kiln_error **err)
{
	char buf[65536];
	struct stat st;
	uint64_t pos = 0;

	if (kiln_digest_parse(j->b->digest, &j->algo, err) < 0)
		return -1;
	free(j->part);
	j->part = kiln_xasprintf("%s.part", j->b->path);
	for (;;) {
		struct stat named;
		j->fd = open(j->part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (j->fd < 0)
			return kiln_err_errno(err, errno, "open %s", j->part);
		/* another process is fetching the same blob: come back later (never
		 * wait holding other locks: two pulls could wait for each other) */
		if (flock(j->fd, LOCK_EX | LOCK_NB) < 0) {
			int e = errno;
			close(j->fd);
			j->fd = -1;
			if (e == EWOULDBLOCK)
				return 2;
			return kiln_err_errno(err, e, "lock %s", j->part);
		}
		if (fstat(j->fd, &st) < 0)
			return kiln_err_errno(err, errno, "stat %s", j->part);
		if (stat(j->part, &named) == 0 && named.st_ino == st.st_ino && named.st_dev == st.st_dev)
			break;
		/* it finished (renamed the file away) while we waited */
		close(j->fd);
		j->fd = -1;
		if (x->o->have && x->o->have(x->o->ud, j->b->digest))
			return 1;
	}
	j->h = kiln_hasher_new(j->algo);
	if (j->size_known && (uint64_t)st.st_size > j->size) {
		if (ftruncate(j->fd, 0) < 0)
			return kiln_err_errno(err, errno, "truncate %s", j->part);
		st.st_size = 0;
	}
	while (pos < (uint64_t)st.st_size) {
		ssize_t n = kiln_pread_full(j->fd, buf, sizeof(buf), (off_t)pos);
		if (n <= 0)
			return kiln_err_errno(err, n < 0 ? errno : EIO, "read %s", j->part);
		kiln_hasher_update(j->h, buf, (size_t)n);
		pos += (uint64_t)n;
	}
	j->off = pos;
	if (pos)
		kiln_debug("blob %s: resuming at byte %llu", j->b->digest, (unsigned long long)pos);
	return 0;
}

/* All bytes are in: verify, then make PATH appear whole. */
static int pull_finish(struct xfer *x, struct job *j, kiln_error **err)
{
	char got[KILN_DIGEST_MAX];

	kiln_hasher_final(j->h, got);
	j->h = NULL;
	if (strcmp(got, j->b->digest) != 0) {
		unlink(j->part); /* before unlocking, so no one resumes from it */
		close(j->fd);
		j->fd = -1;
		return kiln_err(err, KILN_E_INVALID,
				"blob %s from registry %s: content does not match its digest (got %s); not stored",
				j->b->digest, x->c->host, got);
	}
	/* renamed while still locked: a waiting process then sees the .part gone.
	 * The fsyncs cost most of a pull of many small blobs (they run one after
	 * another in this loop); a destination that verifies every read can go
	 * without (see no_fsync). */
	if (!x->o->no_fsync && fsync(j->fd) < 0)
		return kiln_err_errno(err, errno, "write %s", j->part);
	if (rename(j->part, j->b->path) < 0)
		return kiln_err_errno(err, errno, "rename %s", j->part);
	if (!x->o->no_fsync)
		fsync_dir_of(j->b->path);
	if (close(j->fd) < 0) {
		j->fd = -1;
		return kiln_err_errno(err, errno, "write %s", j->b->path);
	}
	j->fd = -1;
	rc_xfer_finish(x, j, 0);
	return 0;
}

/* ---- requests ------------------------------------------------------------ */

static int start(struct xfer *x, struct job *j, unsigned slot, kiln_error **err)
{
	/* a push opens a blob's file only for the request that sends it */
	if (x->push && j->b && j->b->path && j->fd < 0 && (j->st == S_MONO || j->st == S_PATCH || j->st == S_PUT)) {
		j->fd = open(j->b->path, O_RDONLY | O_CLOEXEC);
		if (j->fd < 0)
			return kiln_err_errno(err, errno, "open %s", j->b->path);
	}
	rc_xfer_build_request(x, j);
	j->easy = x->handles[slot];
	x->busy[slot] = 1;
	rc_http_setup(&j->rq, j->easy);
	curl_easy_setopt(j->easy, CURLOPT_PRIVATE, j);
	j->running = 1;
	j->rq.body_pos = 0;
	curl_multi_add_handle(x->multi, j->easy);
	return 0;
}

static void release_slot(struct xfer *x, struct job *j)
{
	curl_multi_remove_handle(x->multi, j->easy);
	for (unsigned i = 0; i < x->nh; i++)
		if (x->handles[i] == j->easy)
			x->busy[i] = 0;
	j->easy = NULL;
	j->running = 0;
}

/* A transient failure: try again later, or give up. */
static int retry(struct xfer *x, struct job *j, enum step next, kiln_error **err)
{
	if (j->attempts >= x->c->retries) {
		if (j->rq.cr != CURLE_OK || j->rq.status >= 400)
			rc_http_fail(&j->rq, "blob", err);
		else
			kiln_err(err, KILN_E_IO, "blob: registry %s: transfer cut short", x->c->host);
		return kiln_error_wrap(err, "%s@%s (after %u retries)", x->repo, rc_xfer_job_name(j), j->attempts);
	}
	j->attempts++;
	x->c->stats.retries++;
	j->st = next;
	j->wake_ms = (int64_t)kiln_now_ms() + rc_retry_delay_ms(&j->rq, j->attempts);
	kiln_debug("blob %s: %s; retry %u", rc_xfer_job_name(j),
		   j->rq.cr != CURLE_OK ? curl_easy_strerror(j->rq.cr) : "server error", j->attempts);
	return 0;
}

int rc_xfer_fail(struct xfer *x, struct job *j, const char *what, kiln_error **err)
{
	rc_http_fail(&j->rq, what, err);
	return kiln_error_wrap(err, "%s@%s", x->repo, rc_xfer_job_name(j));
}

/* The next upload request once the registry holds j->off bytes. */
static void next_upload(struct job *j)
{
	j->st = j->chunked && j->off < j->size ? S_PATCH : S_PUT;
}

/* "0-N" (Range of an upload session) → N+1 bytes held. */
static uint64_t range_end(const char *range)
{
	const char *dash = range ? strchr(range, '-') : NULL;
	return dash ? strtoull(dash + 1, NULL, 10) + 1 : 0;
}

static int take_location(struct xfer *x, struct job *j, kiln_error **err)
{
	if (!j->rq.location)
		return kiln_err(err, KILN_E_GENERIC, "%s@%s: registry %s gave no upload Location", x->repo,
				j->b->digest, x->c->host);
	free(j->upload);
	j->upload = rc_url_resolve(x->c, j->rq.location);
	return 0;
}

/* The job's own error (the sink's, or the batch body's when a file could
 * not be read): no retry helps. */
static int job_error(struct xfer *x, struct job *j, kiln_error **err)
{
	if (j->err) {
		*err = j->err;
		j->err = NULL;
		if (j->part && j->fd >= 0) {
			unlink(j->part);
			close(j->fd);
			j->fd = -1;
		}
	} else {
		*err = j->body.err;
		j->body.err = NULL;
	}
	return kiln_error_wrap(err, "%s@%s", x->repo, rc_xfer_job_name(j));
}

/* Where a transient failure starts again: a cut chunk or closing PUT asks
 * the session how much it holds; a monolithic PUT needs a new session. */
static enum step retry_step(const struct job *j)
{
	if (j->st == S_PATCH || (j->st == S_PUT && j->chunked))
		return S_STATUS;
	if (j->st == S_PUT)
		return S_POST;
	return j->st;
}

/* Asked after a cut chunk or closing PUT: how much the session holds. */
static int after_status(struct xfer *x, struct job *j, kiln_error **err)
{
	struct rc_http *r = &j->rq;
	long st = r->status;

	if (st == 404) {
		j->off = 0;
		j->st = S_POST;
		return 0;
	}
	if (st != 204 && st != 200)
		return rc_xfer_fail(x, j, "upload status", err);
	if (r->location && take_location(x, j, err) < 0)
		return -1;
	j->off = range_end(r->range);
	if (j->off > j->size)
		return kiln_err(err, KILN_E_INVALID, "%s@%s: upload session holds more than the blob", x->repo,
				j->b->digest);
	if (!j->chunked && j->off) {
		j->st = S_POST; /* a monolithic upload restarts whole */
		j->off = 0;
	} else {
		next_upload(j);
	}
	return 0;
}

/* A push's request (not a batch's) ended. */
static int after_push(struct xfer *x, struct job *j, kiln_error **err)
{
	struct rc_http *r = &j->rq;
	long st = r->status;

	switch (j->st) {
	case S_HEAD:
		if (st == 200)
			rc_xfer_finish(x, j, 1);
		else if (st == 404)
			j->st = j->b->mount_from ? S_MOUNT : x->mono && !j->chunked ? S_MONO : S_POST;
		else
			return rc_xfer_fail(x, j, "blob HEAD", err);
		break;
	case S_MOUNT:
		if (st == 201) {
			rc_xfer_finish(x, j, 1);
		} else if (st == 202) {
			if (take_location(x, j, err) < 0)
				return -1;
			j->off = 0;
			next_upload(j);
		} else {
			j->st = S_POST;
		}
		break;
	case S_POST:
		if (st != 202)
			return rc_xfer_fail(x, j, "start upload", err);
		if (take_location(x, j, err) < 0)
			return -1;
		j->off = 0;
		next_upload(j);
		break;
	case S_STATUS:
		return after_status(x, j, err);
	case S_PATCH:
		if (st == 416) {
			j->st = S_STATUS;
			break;
		}
		if (st != 202)
			return rc_xfer_fail(x, j, "upload chunk", err);
		if (take_location(x, j, err) < 0)
			return -1;
		j->off = r->range ? range_end(r->range) : j->off + j->sent;
		j->attempts = 0;
		next_upload(j);
		break;
	case S_MONO:
		if (st != 201)
			return rc_xfer_fail(x, j, "upload", err);
		j->off = j->size;
		rc_xfer_finish(x, j, 0);
		break;
	case S_PUT:
		if (st != 201 && st != 204)
			return rc_xfer_fail(x, j, "finish upload", err);
		j->off = j->size;
		rc_xfer_finish(x, j, 0);
		break;
	default:
		break;
	}
	return 0;
}

/* A pull's GET ended: the blob is whole, cut short, or the .part was not
 * a prefix of it. */
static int after_get(struct xfer *x, struct job *j, kiln_error **err)
{
	long st = j->rq.status;

	if (st == 416 && j->off > 0) /* the .part is not a prefix of this blob: start over */
		return pull_restart(j, err) < 0 ? -1 : retry(x, j, S_GET, err);
	if (st != 200 && st != 206)
		return rc_xfer_fail(x, j, "blob", err);
	if (j->size_known && j->off < j->size)
		return retry(x, j, S_GET, err); /* cut short: resume */
	return pull_finish(x, j, err);
}

/* A request of j ended: decide the next step. */
static int advance(struct xfer *x, struct job *j, kiln_error **err)
{
	struct rc_http *r = &j->rq;

	if (j->err || (j->st == S_BATCH && j->body.err))
		return job_error(x, j, err);
	if (r->cr == CURLE_OK && r->status == 401 && j->auths < 3) {
		j->auths++;
		if (rc_http_authorize(r, err) < 0)
			return -1;
		return 0; /* same step again, now with a token */
	}
	if (j->st == S_GET && j->off > j->sent)
		j->attempts = 0; /* it made progress: only stalls in a row count */
	if (rc_http_transient(r))
		return retry(x, j, retry_step(j), err);
	if (j->st == S_BATCH)
		return rc_xfer_batch_done(x, j, err);
	if (j->st == S_GET)
		return after_get(x, j, err);
	if (after_push(x, j, err) < 0)
		return -1;
	if (j->st != S_DONE && j->st != S_STATUS)
		j->attempts = j->st == S_PATCH ? j->attempts : 0;
	return 0;
}

/* First step of a blob, before any request (a pull may stay in S_START
 * while another process holds its .part). */
static int begin(struct xfer *x, struct job *j, kiln_error **err)
{
	const struct rc_blob *b = j->b;

	if (kiln_digest_parse(b->digest, &j->algo, err) < 0)
		return kiln_error_wrap(err, "blob");
	if (x->push) {
		if (b->path) {
			struct stat st;
			if (stat(b->path, &st) < 0)
				return kiln_err_errno(err, errno, "open %s", b->path);
			j->size = (uint64_t)st.st_size;
		} else {
			j->size = b->len;
		}
		j->size_known = 1;
		j->chunked = j->size > x->chunk;
		j->st = S_HEAD;
		return 0;
	}
	if (!b->path)
		return kiln_err(err, KILN_E_INVALID, "blob %s: no destination path", b->digest);
	if (x->o->have && x->o->have(x->o->ud, b->digest)) {
		rc_xfer_finish(x, j, 1);
		return 0;
	}
	int got = pull_open(x, j, err);
	if (got < 0)
		return kiln_error_wrap(err, "blob %s", b->digest);
	if (got == 1) {
		rc_xfer_finish(x, j, 1);
		return 0;
	}
	if (got == 2) {
		j->wake_ms = (int64_t)kiln_now_ms() + 250; /* stays S_START */
		return 0;
	}
	if (j->size_known && j->off == j->size)
		return pull_finish(x, j, err);
	j->st = S_GET;
	return 0;
}

static unsigned free_slot(const struct xfer *x)
{
	for (unsigned k = 0; k < x->nh; k++)
		if (!x->busy[k])
			return k;
	return x->nh;
}

static void setup(struct xfer *x, rc_client *c, const char *repo, int push, const struct rc_blob *blobs, size_t n,
		  const struct rc_xfer_opts *o)
{
	static const struct rc_xfer_opts defaults = { 0 };

	*x = (struct xfer){ .c = c, .repo = repo, .push = push, .n = n };
	x->o = o ? o : &defaults;
	x->chunk = x->o->chunk_size ? x->o->chunk_size : CHUNK_DEFAULT;
	x->nh = x->o->parallel ? x->o->parallel : 4;
	if (x->nh > n)
		x->nh = n ? (unsigned)n : 1;
	x->scope = kiln_xasprintf("repository:%s:%s", repo, push ? "pull,push" : "pull");
	x->jobs = kiln_xcalloc(n ? n : 1, sizeof(*x->jobs));
	x->handles = kiln_xcalloc(x->nh, sizeof(*x->handles));
	x->busy = kiln_xcalloc(x->nh, sizeof(*x->busy));
	x->multi = curl_multi_init();
	x->moved0 = push ? c->stats.bytes_up : c->stats.bytes_down;
	x->p.blobs_total = n;
	for (unsigned i = 0; i < x->nh; i++)
		x->handles[i] = curl_easy_init();
	for (size_t i = 0; i < n; i++) {
		struct job *j = &x->jobs[i];
		j->x = x;
		j->b = &blobs[i];
		j->fd = -1;
		j->size_known = push || blobs[i].size >= 0;
		j->size = j->size_known && !push ? (uint64_t)blobs[i].size : 0;
		rc_http_init(&j->rq, c, "GET", NULL, NULL);
	}
}

/* The totals, before the first request of a blob; a push also learns here
 * what the registry has and what goes in batch uploads. */
static int prepare(struct xfer *x, kiln_error **err)
{
	for (size_t i = 0; i < x->n; i++) {
		/* pulls begin in the loop: their sizes are known already */
		if (x->push && begin(x, &x->jobs[i], err) < 0)
			return -1;
		x->p.bytes_total += x->jobs[i].size;
	}
	if (x->push && x->n > 0 && rc_xfer_batch_skip(x, err) < 0)
		return -1;
	if (x->push && x->mono)
		rc_xfer_make_batches(x);
	x->moved0 = x->push ? x->c->stats.bytes_up : x->c->stats.bytes_down; /* blob bytes, not the query's */
	x->started = 1;
	report(x, NULL, 1);
	return 0;
}

/* Batch uploads due now, while handles are free; *wait shrinks to the next
 * one asleep. */
static int start_batches(struct xfer *x, int64_t now, int64_t *wait, kiln_error **err)
{
	for (size_t i = 0; i < x->nbatches; i++) {
		struct job *j = &x->batches[i];
		unsigned slot;
		if (j->st == S_DONE || j->running)
			continue;
		if (j->wake_ms > now) {
			if (j->wake_ms - now < *wait)
				*wait = j->wake_ms - now;
			continue;
		}
		if ((slot = free_slot(x)) == x->nh)
			break;
		if (start(x, j, slot, err) < 0)
			return -1;
		*wait = 0;
	}
	return 0;
}

/* The same for the blobs' own requests (a pull's blob begins here). */
static int start_blobs(struct xfer *x, int64_t now, int64_t *wait, kiln_error **err)
{
	while (x->first < x->n && (x->jobs[x->first].st == S_DONE || x->jobs[x->first].st == S_BATCHED))
		x->first++;
	for (size_t i = x->first; i < x->n; i++) {
		struct job *j = &x->jobs[i];
		if (j->st == S_DONE || j->st == S_BATCHED || j->running)
			continue;
		if (j->wake_ms > now) {
			if (j->wake_ms - now < *wait)
				*wait = j->wake_ms - now;
			continue;
		}
		unsigned slot = free_slot(x);
		if (slot == x->nh)
			break; /* all handles busy */
		if (j->st == S_START) {
			if (begin(x, j, err) < 0)
				return -1;
			if (j->st == S_START || j->st == S_DONE) {
				if (j->st == S_START && j->wake_ms - now < *wait)
					*wait = j->wake_ms - now;
				continue;
			}
		}
		if (start(x, j, slot, err) < 0)
			return -1;
		*wait = 0;
	}
	return 0;
}

/* Move the bytes, then take each request that ended to its job's next step. */
static int collect(struct xfer *x, int64_t *wait, kiln_error **err)
{
	int still = 0, left;
	CURLMsg *m;

	curl_multi_perform(x->multi, &still);
	while ((m = curl_multi_info_read(x->multi, &left))) {
		struct job *j = NULL;
		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&j);
		j->rq.cr = m->data.result;
		rc_http_done(&j->rq);
		release_slot(x, j);
		if (advance(x, j, err) < 0)
			return -1;
		*wait = 0;
	}
	return 0;
}

/* The one cleanup path of a transfer, whether it ended or failed midway.
 * A pull's .part files stay for the next pull to resume from, except after a
 * full disk: then they hold the very space the host lacks (only those this
 * transfer has open, hence locked: another process's stay). */
static void teardown(struct xfer *x, int drop_parts)
{
	for (size_t i = 0; i < x->n; i++) {
		struct job *j = &x->jobs[i];
		if (j->running)
			release_slot(x, j);
		if (drop_parts && j->part && j->fd >= 0 && j->st != S_DONE)
			unlink(j->part);
		job_release(j);
		rc_http_free(&j->rq);
		kiln_error_free(j->err);
		free(j->upload);
		free(j->part);
		free(j->mscope);
	}
	for (size_t i = 0; i < x->nbatches; i++) {
		struct job *j = &x->batches[i];
		if (j->running)
			release_slot(x, j);
		rc_http_free(&j->rq);
		rc_batch_body_free(&j->body);
		free(j->members);
		free(j->mblobs);
		free(j->msizes);
	}
	free(x->batches);
	for (unsigned i = 0; i < x->nh; i++)
		curl_easy_cleanup(x->handles[i]);
	curl_multi_cleanup(x->multi);
	free(x->handles);
	free(x->busy);
	free(x->jobs);
	free(x->scope);
}

static int run(rc_client *c, const char *repo, int push, const struct rc_blob *blobs, size_t n,
	       const struct rc_xfer_opts *o, kiln_error **err)
{
	struct xfer x;
	int rc = -1;

	setup(&x, c, repo, push, blobs, n, o);
	if (prepare(&x, err) < 0)
		goto out;
	while (x.p.blobs_done < n) {
		int64_t now = (int64_t)kiln_now_ms(), wait = 200;
		if (start_batches(&x, now, &wait, err) < 0 || start_blobs(&x, now, &wait, err) < 0 ||
		    collect(&x, &wait, err) < 0)
			goto out;
		report(&x, NULL, 0);
		if (x.p.blobs_done < n && wait > 0)
			curl_multi_poll(x.multi, NULL, 0, (int)wait, NULL);
	}
	report(&x, NULL, 1);
	rc = 0;
out:
	teardown(&x, rc < 0 && !push && err && kiln_error_disk_full(*err));
	return rc;
}

int rc_blobs_push(rc_client *c, const char *repo, const struct rc_blob *blobs, size_t n,
		   const struct rc_xfer_opts *o, kiln_error **err)
{
	return run(c, repo, 1, blobs, n, o, err);
}

int rc_blobs_pull(rc_client *c, const char *repo, const struct rc_blob *blobs, size_t n,
		   const struct rc_xfer_opts *o, kiln_error **err)
{
	return run(c, repo, 0, blobs, n, o, err);
}

int rc_blob_push(rc_client *c, const char *repo, const struct rc_blob *b, kiln_error **err)
{
	struct rc_xfer_opts o = { .parallel = 1 };
	return run(c, repo, 1, b, 1, &o, err);
}

int rc_blob_get(rc_client *c, const char *repo, const struct rc_blob *b, kiln_error **err)
{
	struct rc_xfer_opts o = { .parallel = 1 };
	return run(c, repo, 0, b, 1, &o, err);
}
