/* tmpl_xfer.c — pushing and pulling template artifacts with the client
 * (regclient/xfer.c): a push chunks the template into the host's chunk store and
 * uploads only the blobs the registry lacks; a pull downloads only the chunks
 * the store lacks (straight into it, verified, resumable from .part files),
 * then assembles and imports the template.  Chunks in flight are pinned. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "distrib/distrib.h"

/* A pull goes in steps of this many chunks (each opens its .part when its
 * transfer starts, and the client scans the chunks of one step).  A push is
 * one step: its batch query and batch uploads then cover every chunk, with
 * no wait for the slowest upload of each step. */
#define BATCH 256

struct xfer_ud;
static int have_chunk(void *ud, const char *digest);

struct xfer_ud {
	const struct dist_tmpl_xfer_opts *o;
	dist_chunks *cs;
	struct rc_progress base;   /* the batches before this one */
	struct rc_progress last;   /* everything so far */
};

static void on_progress(void *ud, const struct rc_progress *p)
{
	struct xfer_ud *x = ud;
	uint64_t total = x->last.bytes_total;
	size_t blobs = x->last.blobs_total;

	x->last = *p;
	x->last.bytes_done += x->base.bytes_done;
	x->last.bytes_moved += x->base.bytes_moved;
	x->last.blobs_done += x->base.blobs_done;
	x->last.blobs_skipped += x->base.blobs_skipped;
	x->last.bytes_total = total;
	x->last.blobs_total = blobs;
	if (x->o && x->o->progress)
		x->o->progress(x->o->ud, &x->last);
}

/* Move blobs in batches; progress covers them all. */
static int move(rc_client *c, const char *repo, bool push, const struct rc_blob *blobs, size_t n, struct xfer_ud *x,
		kiln_error **err)
{
	/* pulled chunks land in the chunk store, which verifies every read and
	 * drops a torn chunk (fetched again by the next pull): no fsync per chunk */
	struct rc_xfer_opts xo = { .parallel = x->o ? x->o->parallel : 0, .have = push ? NULL : have_chunk,
				    .progress = on_progress, .ud = x, .no_fsync = !push };

	memset(&x->base, 0, sizeof(x->base));
	memset(&x->last, 0, sizeof(x->last));
	x->last.blobs_total = n;
	for (size_t i = 0; i < n; i++)
		x->last.bytes_total += blobs[i].size > 0 ? (uint64_t)blobs[i].size : blobs[i].len;
	for (size_t i = 0, step = push ? n : BATCH; i < n; i += step) {
		size_t k = n - i < step ? n - i : step;
		int r = push ? rc_blobs_push(c, repo, blobs + i, k, &xo, err) : rc_blobs_pull(c, repo, blobs + i, k, &xo, err);
		if (r < 0)
			return -1;
		x->base = x->last;
	}
	return 0;
}


static int have_chunk(void *ud, const char *digest) { return dist_chunks_has(((struct xfer_ud *)ud)->cs, digest); }

/* Release the pins, then keep the store within its limit. */
static void finish_store(dist_chunks *cs)
{
	struct dist_chunks_stats st;
	kiln_error *e = NULL;

	dist_chunks_unpin(cs);
	if (dist_chunks_evict(cs, dist_chunks_limit(), &st, &e) < 0) {
		kiln_warn("chunk store: %s", kiln_error_message(e));
		kiln_error_free(e);
	} else if (st.evicted) {
		kiln_info("chunk store: evicted %llu chunks (%llu bytes)", (unsigned long long)st.evicted,
			  (unsigned long long)st.evicted_bytes);
	}
}

static int pin_all(dist_chunks *cs, const struct dist_tmpl *t, kiln_error **err)
{
	const char **v = kiln_xcalloc(t->nblobs + 1, sizeof(char *));
	for (size_t i = 0; i < t->nblobs; i++)
		v[i] = t->blobs[i].digest;
	int rc = dist_chunks_pin(cs, v, t->nblobs, err);
	free(v);
	return rc;
}

static void fill_stats(struct dist_tmpl_stats *st, const struct dist_tmpl *t, const struct xfer_ud *x, uint64_t moved,
		       double t0)
{
	if (st == NULL)
		return;
	memset(st, 0, sizeof(*st));
	st->bytes_total = t->config_len + t->index_len + t->manifest_len;
	for (size_t i = 0; i < t->nblobs; i++)
		st->bytes_total += t->blobs[i].size;
	st->blobs_total = x->last.blobs_total;
	st->blobs_moved = x->last.blobs_done - x->last.blobs_skipped;
	st->bytes_moved = moved;
	snprintf(st->manifest_digest, KILN_DIGEST_MAX, "%s", t->manifest_digest);
	st->seconds = kiln_now_ms() / 1e3 - t0;
}

int dist_tmpl_push(rc_client *c, const char *template_ref, const char *repo, const char *ref,
		  const struct dist_tmpl_xfer_opts *o, struct dist_tmpl_stats *st, kiln_error **err)
{
	struct dist_tmpl t = { 0 };
	struct rc_blob *blobs = NULL;
	struct xfer_ud x = { .o = o };
	dist_chunks *cs = NULL;
	double t0 = kiln_now_ms() / 1e3;
	uint64_t up0 = rc_client_stats(c)->bytes_up;
	int rc = -1;

	if ((cs = dist_chunks_open(NULL, err)) == NULL || dist_tmpl_make(cs, template_ref, &t, err) < 0 ||
	    pin_all(cs, &t, err) < 0)
		goto out;
	/* config and index first (small), then the chunks */
	blobs = kiln_xcalloc(t.nblobs + 2, sizeof(*blobs));
	snprintf(blobs[0].digest, KILN_DIGEST_MAX, "%s", t.config_digest);
	blobs[0].data = t.config;
	blobs[0].len = t.config_len;
	snprintf(blobs[1].digest, KILN_DIGEST_MAX, "%s", t.index_digest);
	blobs[1].data = t.index;
	blobs[1].len = t.index_len;
	for (size_t i = 0; i < t.nblobs; i++) {
		snprintf(blobs[i + 2].digest, KILN_DIGEST_MAX, "%s", t.blobs[i].digest);
		blobs[i + 2].path = dist_chunks_path(cs, t.blobs[i].digest);
		blobs[i + 2].size = (int64_t)t.blobs[i].size;
	}
	if (move(c, repo, true, blobs, t.nblobs + 2, &x, err) < 0)
		goto out;
	if (rc_manifest_put(c, repo, ref, OCI_MT_OCI_MANIFEST, t.manifest, t.manifest_len, NULL, err) < 0)
		goto out;
	fill_stats(st, &t, &x, rc_client_stats(c)->bytes_up - up0, t0);
	rc = 0;
out:
	if (rc < 0)
		kiln_error_wrap(err, "pushing template %s", template_ref);
	for (size_t i = 0; blobs && i < t.nblobs; i++)
		free((char *)blobs[i + 2].path);
	free(blobs);
	if (cs)
		finish_store(cs);
	dist_chunks_close(cs);
	dist_tmpl_free(&t);
	return rc;
}

/* Make the directories the client's downloads land in. */
static int chunk_dirs(dist_chunks *cs, const struct dist_tmpl *t, kiln_error **err)
{
	kiln_strv made = KILN_STRV_INIT; /* a few hundred directories for thousands of chunks */
	int rc = 0;

	for (size_t i = 0; i < t->nblobs && rc == 0; i++) {
		char *p = dist_chunks_path(cs, t->blobs[i].digest);
		*strrchr(p, '/') = '\0';
		bool seen = false;
		for (size_t k = made.n; k > 0 && !seen; k--)
			seen = strcmp(made.v[k - 1], p) == 0;
		if (!seen && (rc = kiln_mkdir_p(p, 0755, err)) == 0)
			kiln_strv_push(&made, p);
		free(p);
	}
	kiln_strv_free(&made);
	return rc < 0 ? -1 : 0;
}

static size_t missing_chunks(dist_chunks *cs, const struct dist_tmpl *t)
{
	size_t n = 0;
	for (size_t i = 0; i < t->nblobs; i++)
		n += !dist_chunks_has(cs, t->blobs[i].digest);
	return n;
}

/* Manifest, config and index, each verified, the index cross-checked. */
static int fetch_meta(rc_client *c, const char *repo, const struct rc_doc *manifest, struct dist_tmpl *t,
		      kiln_error **err)
{
	char *index = NULL;
	size_t index_len = 0;

	if (dist_tmpl_parse(t, manifest->data, manifest->len, err) < 0)
		return -1;
	if (rc_blob_get_mem(c, repo, t->config_digest, 1 << 20, &t->config, &t->config_len, err) < 0)
		return kiln_error_wrap(err, "template config");
	if (rc_blob_get_mem(c, repo, t->index_digest, 64 << 20, &index, &index_len, err) < 0)
		return kiln_error_wrap(err, "template index");
	int r = dist_tmpl_parse_index(t, index, index_len, err);
	free(index);
	t->index_len = index_len;
	return r;
}

int dist_tmpl_pull(rc_client *c, const char *repo, const struct rc_doc *manifest, const char *name,
		  const struct dist_tmpl_xfer_opts *o, struct dist_tmpl_stats *st, kiln_error **err)
{
	struct dist_tmpl t = { 0 };
	struct rc_blob *blobs = NULL;
	struct xfer_ud x = { .o = o };
	dist_chunks *cs = NULL;
	char *got = NULL;
	double t0 = kiln_now_ms() / 1e3;
	uint64_t down0 = rc_client_stats(c)->bytes_down;
	size_t moved_before = 0; /* blobs moved before a second round */
	int rc = -1;

	if (fetch_meta(c, repo, manifest, &t, err) < 0)
		goto out;
	if ((cs = dist_chunks_open(NULL, err)) == NULL || pin_all(cs, &t, err) < 0 || chunk_dirs(cs, &t, err) < 0)
		goto out;
	blobs = kiln_xcalloc(t.nblobs + 1, sizeof(*blobs));
	for (size_t i = 0; i < t.nblobs; i++) {
		snprintf(blobs[i].digest, KILN_DIGEST_MAX, "%s", t.blobs[i].digest);
		blobs[i].size = (int64_t)t.blobs[i].size;
		blobs[i].path = dist_chunks_path(cs, t.blobs[i].digest);
	}
	x.cs = cs;
	if (move(c, repo, false, blobs, t.nblobs, &x, err) < 0)
		goto out;
	if ((got = dist_tmpl_assemble(cs, &t, name, err)) == NULL) {
		/* The assembly removes a stored chunk that fails its digest (torn by
		 * a crash: chunks are renamed in unsynced); fetch those once more. */
		size_t gone = missing_chunks(cs, &t);
		if (gone == 0)
			goto out;
		kiln_warn("%s (%zu chunks removed); fetching them again", err && *err ? kiln_error_message(*err) : "",
			  gone);
		kiln_error_clear(err);
		moved_before = x.last.blobs_done - x.last.blobs_skipped;
		if (move(c, repo, false, blobs, t.nblobs, &x, err) < 0 ||
		    (got = dist_tmpl_assemble(cs, &t, name, err)) == NULL)
			goto out;
	}
	fill_stats(st, &t, &x, rc_client_stats(c)->bytes_down - down0, t0);
	if (st)
		st->blobs_moved += moved_before;
	if (st)
		snprintf(st->template_digest, KILN_DIGEST_MAX, "%s", got);
	rc = 0;
out:
	if (rc < 0)
		kiln_error_wrap(err, "pulling template %s@%s", repo, manifest->digest);
	for (size_t i = 0; blobs && i < t.nblobs; i++)
		free((char *)blobs[i].path);
	free(blobs);
	if (cs)
		finish_store(cs);
	dist_chunks_close(cs);
	dist_tmpl_free(&t);
	free(got);
	return rc;
}

/* What a lazy start needs before QEMU runs: the state and the disk (small:
 * the start command's writes), and the recorded working set of every part. */
static size_t eager_blobs(dist_chunks *cs, const struct dist_tmpl *t, struct rc_blob *blobs)
{
	size_t n = 0;

	for (size_t p = 0; p < t->nparts; p++) {
		const struct dist_tmpl_part *part = &t->parts[p];
		bool whole = strcmp(part->role, "state") == 0 || strcmp(part->role, "disk") == 0;
		size_t m = whole ? part->nchunks : part->nfirst;
		for (size_t k = 0; k < m; k++) {
			const char *d = part->chunks[whole ? k : part->first[k]];
			bool dup = false;
			for (size_t j = 0; d && j < n && !dup; j++)
				dup = strcmp(blobs[j].digest, d) == 0;
			if (d == NULL || dup)
				continue;
			snprintf(blobs[n].digest, KILN_DIGEST_MAX, "%s", d);
			blobs[n].size = -1;
			for (size_t i = 0; i < t->nblobs; i++)
				if (strcmp(t->blobs[i].digest, d) == 0)
					blobs[n].size = (int64_t)t->blobs[i].size;
			blobs[n].path = dist_chunks_path(cs, d);
			n++;
		}
	}
	return n;
}

/* The host's file server up, serving the template (errors are the caller's
 * dist_chunkfs_files' to report). */
static void *start_server(void *digest)
{
	kiln_error *e = NULL;

	free(dist_chunkfs_files(digest, &e));
	kiln_error_free(e);
	return NULL;
}

int dist_tmpl_pull_lazy(rc_client *c, const char *registry, const char *repo, const struct rc_doc *manifest,
		       const char *name, const struct dist_tmpl_xfer_opts *o, struct dist_tmpl_stats *st,
		       kiln_error **err)
{
	struct dist_tmpl t = { 0 };
	struct rc_blob *blobs = NULL;
	struct xfer_ud x = { .o = o };
	dist_chunks *cs = NULL;
	char *state = NULL, *got = NULL;
	double t0 = kiln_now_ms() / 1e3;
	uint64_t down0 = rc_client_stats(c)->bytes_down;
	size_t n = 0;
	int rc = -1, fd = -1;
	pthread_t server;
	bool serving = false;

	if (fetch_meta(c, repo, manifest, &t, err) < 0)
		goto out;
	const struct dist_tmpl_part *sp = dist_tmpl_part_find(&t, "state");
	json_t *cfg = kiln_json_loadb(t.config, t.config_len, "template config", err);
	const char *want = cfg ? kiln_json_str(json_object_get(cfg, "state"), "digest") : NULL;
	bool ok = sp && want && strcmp(want, sp->digest) == 0;
	json_decref(cfg);
	if (!ok) {
		if (!err || !*err)
			kiln_err(err, KILN_E_INVALID, "the template index's state is not the config's");
		goto out;
	}
	if ((cs = dist_chunks_open(NULL, err)) == NULL || pin_all(cs, &t, err) < 0 || chunk_dirs(cs, &t, err) < 0)
		goto out;
	/* the file server learns the template before its name exists, and is
	 * started (and parses it, and reads the working set into the page cache
	 * as it arrives) while the working set is fetched */
	if (dist_chunkfs_add(t.config_digest, registry, repo, &t, err) < 0)
		goto out;
	serving = pthread_create(&server, NULL, start_server, t.config_digest) == 0;
	blobs = kiln_xcalloc(t.nblobs + 1, sizeof(*blobs));
	n = eager_blobs(cs, &t, blobs);
	x.cs = cs;
	if (move(c, repo, false, blobs, n, &x, err) < 0)
		goto out;
	if ((state = dist_chunks_tmp(cs, &fd, err)) == NULL || dist_tmpl_assemble_part(cs, sp, state, err) < 0)
		goto out;
	if ((got = dist_tmpl_import_served(&t, state, name, err)) == NULL)
		goto out;
	fill_stats(st, &t, &x, rc_client_stats(c)->bytes_down - down0, t0);
	if (st)
		snprintf(st->template_digest, KILN_DIGEST_MAX, "%s", got);
	rc = 0;
out:
	if (serving)
		pthread_join(server, NULL);
	if (rc < 0)
		kiln_error_wrap(err, "pulling template %s@%s lazily", repo, manifest->digest);
	if (fd >= 0)
		close(fd);
	if (state)
		unlink(state);
	free(state);
	for (size_t i = 0; i < n; i++)
		free((char *)blobs[i].path);
	free(blobs);
	if (cs)
		finish_store(cs);
	dist_chunks_close(cs);
	dist_tmpl_free(&t);
	free(got);
	return rc;
}
