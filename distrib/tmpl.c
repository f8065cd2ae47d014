/* tmpl.c — between the template store (snapshots/) and the artifact format:
 * a local template cut into chunks for a push, and a pulled artifact whose
 * chunks are all in the chunk store assembled (zero chunks as holes), checked
 * against the digests its config names and imported as a template. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "distrib/distrib.h"
#include "snapshots/snapshots.h"

static const char *const ROLES[] = { "rootfs", "memory", "disk", "state" };
#define NROLES (sizeof(ROLES) / sizeof(ROLES[0]))

/* The recorded working set (byte ranges) as the part's chunk numbers: what a
 * lazy start fetches before QEMU runs (zero chunks need nothing). */
static void set_first(struct dist_tmpl_part *p, const json_t *ranges)
{
	bool *in = kiln_xcalloc(p->nchunks + 1, sizeof(bool));

	for (size_t i = 0; i < json_array_size(ranges); i++) {
		json_int_t off = json_integer_value(json_array_get(json_array_get(ranges, i), 0));
		json_int_t len = json_integer_value(json_array_get(json_array_get(ranges, i), 1));
		if (off < 0 || len <= 0 || (uint64_t)off >= p->size)
			continue;
		uint64_t end = (uint64_t)off + (uint64_t)len > p->size ? p->size : (uint64_t)off + (uint64_t)len;
		for (uint64_t c = (uint64_t)off / p->chunk_size; c * p->chunk_size < end && c < p->nchunks; c++)
			in[c] = true;
	}
	free(p->first);
	p->first = kiln_xcalloc(p->nchunks + 1, sizeof(size_t));
	p->nfirst = 0;
	for (size_t c = 0; c < p->nchunks; c++)
		if (in[c] && p->chunks[c])
			p->first[p->nfirst++] = c;
	free(in);
}

/* A template's artifact, once made, is kept beside the chunks
 * (chunks/made/KEY: {"manifest", "index"}), KEY the sha256 of the config
 * digest and the working set, both fixed for a template: a later push (to
 * another registry, or again) skips reading, hashing and compressing every
 * file — most of a full push — when all its chunks are still in the store. */
static char *made_path(dist_chunks *cs, const char *config_digest, const json_t *ws)
{
	char *ks = ws ? kiln_json_dumps_canonical(ws) : NULL;
	char *key = kiln_xasprintf("%s\n%s", config_digest, ks ? ks : "null"), d[KILN_DIGEST_MAX];

	kiln_digest_buf(KILN_SHA256, key, strlen(key), d);
	free(ks);
	free(key);
	return kiln_xasprintf("%s/made/%s", dist_chunks_dir(cs), kiln_digest_hex(d));
}

/* 1 loaded (t is the artifact), 0 not kept or a chunk is gone (t cleared). */
static int made_load(dist_chunks *cs, const char *path, struct dist_tmpl *t)
{
	char *data = NULL, *config = t->config, digest[KILN_DIGEST_MAX];
	size_t len = 0, config_len = t->config_len;
	kiln_error *e = NULL;
	json_t *j = NULL;
	const char *m, *ix;
	int ok = 0;

	snprintf(digest, sizeof(digest), "%s", t->config_digest);
	t->config = NULL; /* kept aside: the parse below starts t afresh */
	t->config_len = 0;
	if (kiln_read_file(path, &data, &len, 16u << 20, &e) < 0 || (j = kiln_json_loadb(data, len, path, &e)) == NULL)
		goto out;
	m = kiln_json_str(j, "manifest");
	ix = kiln_json_str(j, "index");
	if (!m || !ix || dist_tmpl_parse(t, m, strlen(m), &e) < 0 || strcmp(t->config_digest, digest) != 0 ||
	    dist_tmpl_parse_index(t, ix, strlen(ix), &e) < 0)
		goto out;
	char got[KILN_DIGEST_MAX];
	kiln_digest_buf(KILN_SHA256, t->index, t->index_len, got);
	ok = strcmp(got, t->index_digest) == 0;
	for (size_t i = 0; ok && i < t->nblobs; i++)
		ok = dist_chunks_has(cs, t->blobs[i].digest);
out:
	if (e && e->errnum != ENOENT)
		kiln_debug("%s: %s", path, kiln_error_message(e));
	kiln_error_free(e);
	json_decref(j);
	free(data);
	if (!ok) {
		dist_tmpl_free(t);
		memset(t, 0, sizeof(*t));
		snprintf(t->config_digest, KILN_DIGEST_MAX, "%s", digest);
	}
	t->config = config; /* the template's own bytes, as a made artifact has them */
	t->config_len = config_len;
	return ok;
}

/* Best effort: without it the next push chunks again. */
static void made_save(const char *path, const struct dist_tmpl *t)
{
	json_t *j = json_pack("{s:s%, s:s%}", "manifest", t->manifest, t->manifest_len, "index", t->index, t->index_len);
	char *s = json_dumps(j, JSON_COMPACT), *dir = kiln_xstrndup(path, (size_t)(strrchr(path, '/') - path));
	kiln_error *e = NULL;

	if (kiln_mkdir_p(dir, 0755, &e) < 0 || kiln_write_atomic(path, s, strlen(s), 0644, &e) < 0) {
		kiln_warn("chunk store: %s", kiln_error_message(e));
		kiln_error_free(e);
	}
	free(dir);
	free(s);
	json_decref(j);
}

/* Take part role from pre (chunked at build time: prechunk.c), if it has it. */
static bool take_part(struct dist_tmpl_part *pre, size_t npre, const char *role, struct dist_tmpl_part *out)
{
	for (size_t i = 0; i < npre; i++)
		if (pre[i].role && strcmp(pre[i].role, role) == 0) {
			*out = pre[i];
			memset(&pre[i], 0, sizeof(pre[i]));
			return true;
		}
	return false;
}

int dist_tmpl_make(dist_chunks *cs, const char *template_ref, struct dist_tmpl *t, kiln_error **err)
{
	return dist_tmpl_make_from(cs, template_ref, NULL, 0, t, err);
}

int dist_tmpl_make_from(dist_chunks *cs, const char *template_ref, struct dist_tmpl_part *pre, size_t npre,
			struct dist_tmpl *t, kiln_error **err)
{
	snap_template *st = NULL;
	char *path = NULL, *made = NULL;
	json_t *ws = NULL;
	int rc = -1;

	memset(t, 0, sizeof(*t));
	if ((st = snap_template_open(template_ref, err)) == NULL)
		goto out;
	if ((path = snap_template_blob(st, "config", err)) == NULL ||
	    kiln_read_file(path, &t->config, &t->config_len, 1 << 20, err) < 0)
		goto out;
	snprintf(t->config_digest, KILN_DIGEST_MAX, "%s", snap_template_digest(st));
	ws = snap_template_workset(st);
	made = made_path(cs, t->config_digest, ws);
	if (made_load(cs, made, t)) {
		rc = 0;
		goto out;
	}
	t->parts = kiln_xcalloc(NROLES, sizeof(*t->parts));
	for (size_t i = 0; i < NROLES; i++) {
		free(path);
		if ((path = snap_template_blob(st, ROLES[i], err)) == NULL)
			goto out;
		t->nparts++;
		if (!take_part(pre, npre, ROLES[i], &t->parts[i]) &&
		    dist_tmpl_chunk_file(cs, path, ROLES[i], &t->parts[i], err) < 0)
			goto out;
		const struct snap_config_blob *b = snap_config_blob(snap_template_config(st), ROLES[i]);
		const char *want = b ? b->digest : NULL;
		if (want == NULL || strcmp(want, t->parts[i].digest) != 0) {
			kiln_err(err, KILN_E_INVALID, "the stored %s %s does not hash to its digest %s (kiln snapshot verify)",
				 ROLES[i], path, want ? want : "(none)");
			goto out;
		}
	}
	for (size_t i = 0; ws && i < NROLES; i++)
		set_first(&t->parts[i], json_object_get(ws, ROLES[i]));
	if (dist_tmpl_seal(t, cs, err) < 0)
		goto out;
	made_save(made, t);
	rc = 0;
out:
	if (rc < 0) {
		kiln_error_wrap(err, "template %s", template_ref);
		dist_tmpl_free(t);
	}
	json_decref(ws);
	free(made);
	free(path);
	snap_template_free(st);
	return rc;
}

static bool zero_block(const unsigned char *p, size_t n)
{
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Write one part from its chunks into path, sparse (zero chunks and zero 4 KiB
 * blocks stay holes), hashing it on the way: it must be the file the index names. */
int dist_tmpl_assemble_part(dist_chunks *cs, const struct dist_tmpl_part *part, const char *path, kiln_error **err)
{
	enum { BLK = 4096 };
	ZSTD_DCtx *z = ZSTD_createDCtx();
	kiln_hasher *h = kiln_hasher_new(KILN_SHA256);
	unsigned char *raw = kiln_xmalloc(part->chunk_size), *zeros = kiln_xcalloc(1, part->chunk_size);
	char *comp = NULL, got[KILN_DIGEST_MAX];
	size_t clen = 0;
	int fd = -1, rc = -1;

	if (z == NULL) {
		kiln_err(err, KILN_E_GENERIC, "zstd: cannot make a decompression context");
		goto out;
	}
	if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
		kiln_err_errno(err, errno, "create %s", path);
		goto out;
	}
	if (ftruncate(fd, (off_t)part->size) < 0) {
		kiln_err_errno(err, errno, "size %s", path);
		goto out;
	}
	for (size_t i = 0; i < part->nchunks; i++) {
		uint64_t off = i * part->chunk_size;
		size_t len = (size_t)(part->size - off < part->chunk_size ? part->size - off : part->chunk_size);
		if (part->chunks[i] == NULL) {
			kiln_hasher_update(h, zeros, len); /* a hole */
			continue;
		}
		if (dist_chunks_get(cs, part->chunks[i], &comp, &clen, err) < 0)
			goto out;
		size_t n = ZSTD_decompressDCtx(z, raw, part->chunk_size, comp, clen);
		free(comp);
		comp = NULL;
		if (ZSTD_isError(n) || n != len) {
			kiln_err(err, KILN_E_INVALID, "chunk %s (%zu of the %s) does not decompress to %zu bytes: %s",
				 part->chunks[i], i, part->role, len, ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong length");
			goto out;
		}
		kiln_hasher_update(h, raw, n);
		for (size_t b = 0; b < n; b += BLK) {
			size_t bl = n - b < BLK ? n - b : BLK;
			if (zero_block(raw + b, bl))
				continue;
			if (pwrite(fd, raw + b, bl, (off_t)(off + b)) != (ssize_t)bl) {
				kiln_err_errno(err, errno, "write %s", path);
				goto out;
			}
		}
	}
	kiln_hasher_final(h, got);
	h = NULL;
	if (strcmp(got, part->digest) != 0) {
		kiln_err(err, KILN_E_INVALID, "the assembled %s has digest %s, the index wants %s", part->role, got,
			 part->digest);
		goto out;
	}
	rc = 0;
out:
	if (rc < 0)
		kiln_error_wrap(err, "assembling the %s", part->role);
	if (h)
		kiln_hasher_final(h, got);
	if (fd >= 0)
		close(fd);
	ZSTD_freeDCtx(z);
	free(raw);
	free(zeros);
	free(comp);
	return rc;
}

const struct dist_tmpl_part *dist_tmpl_part_find(const struct dist_tmpl *t, const char *role)
{
	for (size_t i = 0; i < t->nparts; i++)
		if (strcmp(t->parts[i].role, role) == 0)
			return &t->parts[i];
	return NULL;
}

char *dist_tmpl_assemble(dist_chunks *cs, const struct dist_tmpl *t, const char *name, kiln_error **err)
{
	char *dir = kiln_xasprintf("%s/tmp/assemble-%ld-XXXXXX", dist_chunks_dir(cs), (long)getpid());
	char *files[NROLES] = { 0 }, *result = NULL;
	struct snap_config cfg = { 0 };
	kiln_error *e = NULL;

	/* Next to the chunks, not in $TMPDIR (often a tmpfs too small for a rootfs). */
	if (mkdtemp(dir) == NULL) {
		kiln_err_errno(err, errno, "create %s", dir);
		free(dir);
		dir = NULL;
		goto out;
	}
	if (snap_config_read(t->config, t->config_len, "the pulled template's config", &cfg, err) < 0)
		goto out;
	for (size_t i = 0; i < NROLES; i++) {
		const struct dist_tmpl_part *p = dist_tmpl_part_find(t, ROLES[i]);
		const struct snap_config_blob *b = snap_config_blob(&cfg, ROLES[i]);
		const char *want = b ? b->digest : NULL;
		if (p == NULL) {
			kiln_err(err, KILN_E_INVALID, "the template index has no %s", ROLES[i]);
			goto out;
		}
		/* The file is checked against the index while assembled: the index must
		 * name what the config names. */
		if (want == NULL || strcmp(want, p->digest) != 0) {
			kiln_err(err, KILN_E_INVALID, "the index's %s (%s) is not the config's (%s)", ROLES[i], p->digest,
				 want ? want : "none");
			goto out;
		}
		files[i] = kiln_path_join(dir, ROLES[i]);
		if (dist_tmpl_assemble_part(cs, p, files[i], err) < 0)
			goto out;
	}
	struct snap_import im = { .config = t->config, .config_len = t->config_len, .rootfs = files[0],
				  .memory = files[1], .disk = files[2], .state = files[3], .name = name,
				  .verified = true };
	result = snap_template_import(&im, err);
out:
	if (dir && kiln_rm_rf(dir, &e) < 0)
		kiln_error_free(e);
	for (size_t i = 0; i < NROLES; i++)
		free(files[i]);
	snap_config_free(&cfg);
	free(dir);
	return result;
}

char *dist_tmpl_import_served(const struct dist_tmpl *t, const char *state, const char *name, kiln_error **err)
{
	struct snap_import im = { .config = t->config, .config_len = t->config_len, .state = state, .name = name,
				  .verified = true, .served = true };

	return snap_template_import(&im, err);
}
