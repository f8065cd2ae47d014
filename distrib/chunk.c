/* chunk.c — the template artifact format (docs/distribution.md): files cut
 * into fixed-size, aligned chunks, each zstd-compressed into a content-addressed
 * blob (all-zero chunks are not stored), an index blob that maps every chunk of
 * every file to its blob, and the OCI image manifest naming them all. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "distrib/distrib.h"

uint64_t dist_tmpl_chunk_min(const char *role)
{
	/* Measured (docs/distribution.md): a new boot changes memory in scattered
	 * pages, so small chunks pay; ext4 changes are whole new extents or single
	 * metadata blocks that compress to nothing, so 256 KiB moves the same bytes
	 * as 64 KiB in a quarter of the blobs. */
	return strcmp(role, "memory") == 0 ? (uint64_t)64 << 10 : (uint64_t)256 << 10;
}

uint64_t dist_tmpl_chunk_size(uint64_t file_size, uint64_t min)
{
	uint64_t c = min;

	while ((file_size + c - 1) / c > DIST_TMPL_MAX_CHUNKS)
		c *= 2;
	return c;
}

static json_t *descriptor(const char *media, const char *digest, uint64_t size)
{
	return json_pack("{s:s, s:s, s:I}", "mediaType", media, "digest", digest, "size", (json_int_t)size);
}

static int blob_index(const struct dist_tmpl *t, const char *digest)
{
	for (size_t i = 0; i < t->nblobs; i++)
		if (strcmp(t->blobs[i].digest, digest) == 0)
			return (int)i;
	return -1;
}

int dist_tmpl_seal(struct dist_tmpl *t, dist_chunks *cs, kiln_error **err)
{
	json_t *index = json_pack("{s:i, s:s}", "schemaVersion", 1, "mediaType", OCI_TMPL_INDEX_MEDIA);
	json_t *parts = json_array(), *blobs = json_array(), *layers = json_array(), *m = NULL;
	int rc = -1;

	/* Chunks first seen in order; a blob's position in "blobs" is its number. */
	for (size_t p = 0; p < t->nparts; p++) {
		const struct dist_tmpl_part *part = &t->parts[p];
		json_t *nums = json_array();
		for (size_t i = 0; i < part->nchunks; i++) {
			const char *d = part->chunks[i];
			int k = d ? blob_index(t, d) : -1;
			if (d && k < 0) {
				char *path = dist_chunks_path(cs, d);
				struct stat sb;
				int r = stat(path, &sb);
				free(path);
				if (r < 0) {
					kiln_err_errno(err, errno, "chunk %s of the %s is gone from the chunk store", d, part->role);
					json_decref(nums);
					goto out;
				}
				t->blobs = kiln_xrealloc(t->blobs, (t->nblobs + 1) * sizeof(*t->blobs));
				snprintf(t->blobs[t->nblobs].digest, KILN_DIGEST_MAX, "%s", d);
				t->blobs[t->nblobs].size = (uint64_t)sb.st_size;
				k = (int)t->nblobs++;
				json_array_append_new(blobs, json_string(d));
			}
			json_array_append_new(nums, json_integer(k));
		}
		json_t *po = json_pack("{s:s, s:s, s:I, s:I, s:o}", "role", part->role, "digest", part->digest, "size",
				       (json_int_t)part->size, "chunkSize", (json_int_t)part->chunk_size, "chunks", nums);
		if (part->nfirst) {
			json_t *first = json_array();
			for (size_t i = 0; i < part->nfirst; i++)
				json_array_append_new(first, json_integer((json_int_t)part->first[i]));
			json_object_set_new(po, "first", first);
		}
		json_array_append_new(parts, po);
	}
	json_object_set_new(index, "parts", parts);
	json_object_set_new(index, "blobs", blobs);
	parts = blobs = NULL;
	t->index = kiln_json_dumps_canonical(index);
	t->index_len = strlen(t->index);
	kiln_digest_buf(KILN_SHA256, t->index, t->index_len, t->index_digest);

	json_array_append_new(layers, descriptor(OCI_TMPL_INDEX_MEDIA, t->index_digest, t->index_len));
	for (size_t i = 0; i < t->nblobs; i++)
		json_array_append_new(layers, descriptor(OCI_TMPL_CHUNK_MEDIA, t->blobs[i].digest, t->blobs[i].size));
	m = json_pack("{s:i, s:s, s:s, s:o, s:o}", "schemaVersion", 2, "mediaType", "application/vnd.oci.image.manifest.v1+json",
		      "artifactType", OCI_TMPL_ARTIFACT_TYPE, "config",
		      descriptor(KILN_TMPL_CONFIG_MEDIA, t->config_digest, t->config_len), "layers", layers);
	layers = NULL;
	t->manifest = kiln_json_dumps_canonical(m);
	t->manifest_len = strlen(t->manifest);
	kiln_digest_buf(KILN_SHA256, t->manifest, t->manifest_len, t->manifest_digest);
	if (t->manifest_len > (4u << 20)) {
		kiln_err(err, KILN_E_LIMIT, "the template's manifest would be %zu bytes, over the 4 MiB registries accept",
			 t->manifest_len);
		goto out;
	}
	rc = 0;
out:
	json_decref(index);
	json_decref(parts);
	json_decref(blobs);
	json_decref(layers);
	json_decref(m);
	return rc;
}

void dist_tmpl_part_free(struct dist_tmpl_part *p)
{
	for (size_t i = 0; p->chunks && i < p->nchunks; i++)
		free(p->chunks[i]);
	free(p->chunks);
	free(p->first);
	free(p->role);
	memset(p, 0, sizeof(*p));
}

void dist_tmpl_free(struct dist_tmpl *t)
{
	for (size_t p = 0; p < t->nparts; p++)
		dist_tmpl_part_free(&t->parts[p]);
	free(t->parts);
	free(t->blobs);
	free(t->config);
	free(t->index);
	free(t->manifest);
	memset(t, 0, sizeof(*t));
}

/* A descriptor's digest and size, checked. */
static int read_descriptor(const json_t *d, const char *media, char digest[KILN_DIGEST_MAX], uint64_t *size,
			   kiln_error **err)
{
	const char *mt = kiln_json_str(d, "mediaType"), *dg = kiln_json_str(d, "digest");
	json_int_t sz = kiln_json_int(d, "size", -1);
	enum kiln_digest_algo a;

	if (mt == NULL || strcmp(mt, media) != 0)
		return kiln_err(err, KILN_E_INVALID, "descriptor of media type %s, want %s", mt ? mt : "(none)", media);
	if (dg == NULL || kiln_digest_parse(dg, &a, err) < 0 || a != KILN_SHA256)
		return kiln_err(err, KILN_E_INVALID, "descriptor without a sha256 digest");
	if (sz < 0)
		return kiln_err(err, KILN_E_INVALID, "descriptor %s without a size", dg);
	snprintf(digest, KILN_DIGEST_MAX, "%s", dg);
	*size = (uint64_t)sz;
	return 0;
}

int dist_tmpl_parse(struct dist_tmpl *t, const char *manifest, size_t len, kiln_error **err)
{
	json_t *m = NULL;
	const json_t *layers;
	uint64_t sz;
	int rc = -1;

	memset(t, 0, sizeof(*t));
	if ((m = kiln_json_loadb(manifest, len, "template manifest", err)) == NULL)
		goto out;
	if (!oci_tmpl_is_artifact(manifest, len)) {
		kiln_err(err, KILN_E_INVALID, "not a kiln template (artifactType %s)",
			 kiln_json_str(m, "artifactType") ? kiln_json_str(m, "artifactType") : "(none)");
		goto out;
	}
	if (read_descriptor(json_object_get(m, "config"), KILN_TMPL_CONFIG_MEDIA, t->config_digest, &sz, err) < 0)
		goto out;
	t->config_len = (size_t)sz;
	layers = json_object_get(m, "layers");
	if (!json_is_array(layers) || json_array_size(layers) < 1 ||
	    read_descriptor(json_array_get(layers, 0), OCI_TMPL_INDEX_MEDIA, t->index_digest, &sz, err) < 0) {
		kiln_error_clear(err);
		kiln_err(err, KILN_E_INVALID, "the first layer of a template must be its chunk index");
		goto out;
	}
	t->index_len = (size_t)sz;
	t->nblobs = json_array_size(layers) - 1;
	t->blobs = kiln_xcalloc(t->nblobs ? t->nblobs : 1, sizeof(*t->blobs));
	for (size_t i = 0; i < t->nblobs; i++)
		if (read_descriptor(json_array_get(layers, i + 1), OCI_TMPL_CHUNK_MEDIA, t->blobs[i].digest,
				    &t->blobs[i].size, err) < 0) {
			kiln_error_wrap(err, "layer %zu", i + 1);
			goto out;
		}
	t->manifest = kiln_xstrndup(manifest, len);
	t->manifest_len = len;
	kiln_digest_buf(KILN_SHA256, manifest, len, t->manifest_digest);
	rc = 0;
out:
	if (rc < 0)
		kiln_error_wrap(err, "template manifest");
	json_decref(m);
	return rc;
}

/* own_blobs: t has no manifest, the index's blob list is taken as is. */
static int parse_index(struct dist_tmpl *t, const char *data, size_t len, bool own_blobs, kiln_error **err)
{
	json_t *ix = NULL;
	const json_t *parts, *blobs;
	int rc = -1;

	if ((ix = kiln_json_loadb(data, len, "template index", err)) == NULL)
		goto out;
	parts = json_object_get(ix, "parts");
	blobs = json_object_get(ix, "blobs");
	if (kiln_json_int(ix, "schemaVersion", 0) != 1 || !json_is_array(parts) || !json_is_array(blobs)) {
		kiln_err(err, KILN_E_INVALID, "not a version 1 template index");
		goto out;
	}
	if (own_blobs) {
		t->nblobs = json_array_size(blobs);
		t->blobs = kiln_xcalloc(t->nblobs + 1, sizeof(*t->blobs));
		for (size_t i = 0; i < t->nblobs; i++) {
			const char *d = json_string_value(json_array_get(blobs, i));
			if (d == NULL || strlen(d) >= KILN_DIGEST_MAX) {
				kiln_err(err, KILN_E_INVALID, "chunk blob %zu of the index is not a digest", i);
				goto out;
			}
			snprintf(t->blobs[i].digest, KILN_DIGEST_MAX, "%s", d);
		}
	}
	/* Every blob the index uses must be a layer of the manifest, in the same order. */
	if (json_array_size(blobs) != t->nblobs) {
		kiln_err(err, KILN_E_INVALID, "the index names %zu chunk blobs, the manifest %zu", json_array_size(blobs),
			 t->nblobs);
		goto out;
	}
	for (size_t i = 0; i < t->nblobs; i++) {
		const char *d = json_string_value(json_array_get(blobs, i));
		if (d == NULL || strcmp(d, t->blobs[i].digest) != 0) {
			kiln_err(err, KILN_E_INVALID, "chunk blob %zu of the index is not layer %zu of the manifest", i, i + 1);
			goto out;
		}
	}
	t->nparts = json_array_size(parts);
	t->parts = kiln_xcalloc(t->nparts ? t->nparts : 1, sizeof(*t->parts));
	for (size_t p = 0; p < t->nparts; p++) {
		const json_t *o = json_array_get(parts, p), *nums = json_object_get(o, "chunks");
		struct dist_tmpl_part *part = &t->parts[p];
		const char *role = kiln_json_str(o, "role"), *dg = kiln_json_str(o, "digest");
		json_int_t size = kiln_json_int(o, "size", -1), cs = kiln_json_int(o, "chunkSize", 0);
		enum kiln_digest_algo a;

		part->role = kiln_xstrdup(role ? role : "");
		if (!role || !dg || kiln_digest_parse(dg, &a, NULL) < 0 || size < 0 || cs < 4096 || cs > (64LL << 20) ||
		    !json_is_array(nums) ||
		    json_array_size(nums) != (size_t)(((uint64_t)size + (uint64_t)cs - 1) / (uint64_t)cs)) {
			kiln_err(err, KILN_E_INVALID, "part %zu (%s) of the index is malformed", p, role ? role : "?");
			goto out;
		}
		snprintf(part->digest, KILN_DIGEST_MAX, "%s", dg);
		part->size = (uint64_t)size;
		part->chunk_size = (uint64_t)cs;
		part->nchunks = json_array_size(nums);
		part->chunks = kiln_xcalloc(part->nchunks ? part->nchunks : 1, sizeof(char *));
		for (size_t i = 0; i < part->nchunks; i++) {
			const json_t *n = json_array_get(nums, i);
			json_int_t k = json_is_integer(n) ? json_integer_value(n) : -2;
			if (k < -1 || k >= (json_int_t)t->nblobs) {
				kiln_err(err, KILN_E_INVALID, "chunk %zu of the %s names no blob of the manifest", i, role);
				goto out;
			}
			if (k >= 0)
				part->chunks[i] = kiln_xstrdup(t->blobs[k].digest);
		}
		/* optional: the working set, chunk numbers of this part */
		const json_t *first = json_object_get(o, "first");
		if (first && !json_is_array(first)) {
			kiln_err(err, KILN_E_INVALID, "the %s's working set is not an array", role);
			goto out;
		}
		part->first = kiln_xcalloc(json_array_size(first) + 1, sizeof(size_t));
		for (size_t i = 0; i < json_array_size(first); i++) {
			const json_t *n = json_array_get(first, i);
			json_int_t k = json_is_integer(n) ? json_integer_value(n) : -1;
			if (k < 0 || (size_t)k >= part->nchunks) {
				kiln_err(err, KILN_E_INVALID, "the %s's working set names chunk %lld of %zu", role,
					 (long long)k, part->nchunks);
				goto out;
			}
			part->first[part->nfirst++] = (size_t)k;
		}
	}
	t->index = kiln_xstrndup(data, len);
	rc = 0;
out:
	if (rc < 0)
		kiln_error_wrap(err, "template index %s", t->index_digest);
	json_decref(ix);
	return rc;
}

int dist_tmpl_parse_index(struct dist_tmpl *t, const char *data, size_t len, kiln_error **err)
{
	return parse_index(t, data, len, false, err);
}

int dist_tmpl_parse_index_only(struct dist_tmpl *t, const char *data, size_t len, kiln_error **err)
{
	memset(t, 0, sizeof(*t));
	return parse_index(t, data, len, true, err);
}
