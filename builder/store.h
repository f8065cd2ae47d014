/* store.h — the local image store under $KILN_HOME and what moves images in
 * and out of it: layers, the step cache, base images, registries (kiln
 * images, push, pull, cache prune and the snapshot stage use these without
 * the build's VM). */
#ifndef KILN_BUILDER_STORE_H
#define KILN_BUILDER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

struct build_changes;

/* ===========================================================================
 * The local store (store.c) under kiln_home(): blobs/sha256/HEX, written to
 * tmp/ then fsync'd and renamed (a killed build leaves no partial blob
 * visible), images.json (name:tag → manifest digest) and the cache.  Builds
 * hold a shared flock on "lock"; prune/GC holds it exclusively.
 * ========================================================================= */
typedef struct build_store build_store;
typedef kiln_cas_writer build_blob_writer;

/* home NULL = kiln_home().  Creates the layout if missing. */
int build_store_open(const char *home, build_store **out, kiln_error **err);
void build_store_close(build_store *s);
const char *build_store_home(const build_store *s);
int build_store_lock(build_store *s, bool exclusive, kiln_error **err);
/* Content digests already known for files under root (root/PATH: the map's
 * PATH), taken instead of hashing them for cache keys; the store keeps a
 * reference to map.  (The build service's context: made from its verified,
 * content-addressed store, so each file's digest is its name there.) */
void build_store_known_digests(build_store *s, const char *root, json_t *map);
const char *build_store_known_digest(const build_store *s, const char *path);
/* A file's sha256: a known digest, else remembered for big files ($KILN_HOME/hashes), else read. */
int build_file_digest(build_store *s, const char *path, char out[KILN_DIGEST_MAX], kiln_error **err);
char *build_store_blob_path(const build_store *s, const char *digest);
bool build_store_has_blob(const build_store *s, const char *digest);
int build_blob_begin(build_store *s, build_blob_writer **w, kiln_error **err);
int build_blob_write(build_blob_writer *w, const void *data, size_t len, kiln_error **err);
/* Finish: verify against `expect` (if not NULL), make visible; frees w. */
int build_blob_commit(build_blob_writer *w, const char *expect, char digest[KILN_DIGEST_MAX], int64_t *size,
		      kiln_error **err);
void build_blob_abort(build_blob_writer *w);
int build_store_put(build_store *s, const void *data, size_t len, char digest[KILN_DIGEST_MAX], kiln_error **err);
/* Read a blob (at most max bytes, 0 = no limit), verifying its digest. */
int build_store_read(const build_store *s, const char *digest, char **data, size_t *len, size_t max,
		     kiln_error **err);
/* Copy a file into the store, verifying it against `expect`. */
int build_store_import_file(build_store *s, const char *path, const char *expect, kiln_error **err);
/* Move a file from the store's tmp/ into the store (no copy), verified
 * against `expect` (sha256); the file is gone afterwards either way. */
int build_store_adopt(build_store *s, const char *path, const char *expect, kiln_error **err);
/* Point a reference (kiln_ref_parse; stored as kiln_ref_str, ":latest" added
 * when there is neither tag nor digest) at a manifest. */
int build_store_tag(build_store *s, const char *name, const char *manifest_digest, kiln_error **err);
/* {"NAME:TAG": {"digest": ..., "created": ...}} */
json_t *build_store_images(const build_store *s, kiln_error **err);

/* ===========================================================================
 * Layers (layer.c): one OCI layer from a change list, deterministic (sorted,
 * fixed timestamps, no user/group names, no gzip timestamp), so equal
 * inputs give equal digests.
 * ========================================================================= */
enum build_compression { BUILD_GZIP, BUILD_ZSTD, BUILD_NONE };

struct build_layer {
	char digest[KILN_DIGEST_MAX];  /* the blob as stored */
	char diff_id[KILN_DIGEST_MAX]; /* the uncompressed tar */
	int64_t size;
	const char *media_type;        /* static string */
};

const char *build_layer_media_type(enum build_compression c);
int build_layer_write(build_store *s, const struct build_changes *ch, enum build_compression comp, int64_t mtime,
		      struct build_layer *out, kiln_error **err);

/* ===========================================================================
 * The step cache (cache.c).  key = sha256 over the parent key, the step as
 * expanded, and per input item: destination, type, mode, owner (as written
 * and as found), link target and content digest — never mtimes.  Entries
 * live in cache/HEX.json and are only written after the layer is stored, so
 * a failed step leaves none.
 * ========================================================================= */
int build_cache_key(const char *parent, const char *instruction, const struct build_changes *ch,
		    char out[KILN_DIGEST_MAX], kiln_error **err);
/* The same key; the content digests of big input files (≥ 1 MiB) are
 * remembered in the store by device, inode, size, mtime and ctime, so an
 * unchanged 100 MiB file is not read again on the next build. */
int build_cache_key_store(build_store *s, const char *parent, const char *instruction, const struct build_changes *ch,
			  char out[KILN_DIGEST_MAX], kiln_error **err);
/* 1 on a hit (layer filled, last use recorded), 0 on a miss. */
int build_cache_get(build_store *s, const char *key, struct build_layer *out, kiln_error **err);
int build_cache_put(build_store *s, const char *key, const struct build_layer *l, const char *instruction,
		    kiln_error **err);
/* [{"key","layer","size","instruction","created","last_used"}], oldest first. */
json_t *build_cache_list(build_store *s, kiln_error **err);

struct build_prune_stats {
	size_t entries;   /* cache entries removed */
	size_t blobs;     /* unreferenced blobs removed */
	uint64_t bytes;   /* bytes freed by blob removal */
};

/* Remove cache entries (all, or unused for older_than seconds; -1 = none
 * by age), then every blob no image or remaining entry references, and
 * stale temp files.  Takes the store lock exclusively. */
int build_cache_prune(build_store *s, bool all, int64_t older_than, struct build_prune_stats *st,
		      kiln_error **err);

/* ===========================================================================
 * Images (base.c, image.c): a base read into the store, pinned by digest.
 * ========================================================================= */
struct build_image {
	char manifest_digest[KILN_DIGEST_MAX]; /* the pin, "" for scratch */
	json_t *config;                        /* the whole OCI image config */
	struct build_layer *layers;
	size_t n_layers;
};

/* oci:DIR[:TAG], oci-archive:FILE[:TAG], docker-archive:FILE (via rootfs),
 * NAME[:TAG] of an image in the local store, NAME@DIGEST stored, else a
 * registry pull (always for an explicit HOST/…).  Blobs land in the store. */
int build_image_load(build_store *s, const char *ref, struct build_image **out, kiln_error **err);
void build_image_free(struct build_image *im);
/* Extract layers in order into dir (whiteouts applied, owners kept). */
int build_layers_extract(build_store *s, const struct build_layer *layers, size_t n, const char *dir,
			 kiln_error **err);
/* The same for the paths only[] (image paths in index form, "src/app"), what
 * is under them and their ancestors: COPY --from reads what it copies, not
 * the whole stage.  Returns 1 when that is not enough (a symlink on the way
 * to or as one of them, a hard link to a file left out): extract it all. */
int build_layers_extract_only(build_store *s, const struct build_layer *layers, size_t n, const char *dir,
			      const char *const *only, size_t n_only, kiln_error **err);
/* Write a manifest (and its blobs) into an OCI image layout at dir, named
 * `refname` (org.opencontainers.image.ref.name) if not NULL; other entries
 * of an existing layout are kept. */
int build_oci_export(build_store *s, const char *manifest, const char *dir, const char *refname, kiln_error **err);
/* The image's merged filesystem as an ext4 file, by the rootfs stage. */
int build_rootfs_write(build_store *s, const char *manifest, const char *out, kiln_error **err);

/* ===========================================================================
 * Registries (remote.c): plain OCI images between the local store and any
 * registry, through the registry stage's client (auth, retries, resume).
 * ========================================================================= */
struct rc_progress;

struct build_remote_opts {
	unsigned parallel;  /* blob transfers at once; 0: the client's default */
	uint64_t chunk_size; /* push: PATCH chunks for larger blobs; 0: the client's default */
	uint64_t max_rate;   /* bytes/s per blob transfer; 0: unlimited */
	void (*progress)(void *ud, const struct rc_progress *p);
	void *ud;
	const char *user, *pass; /* explicit credentials; NULL: kiln login's for the host */
	const char *pin;     /* pull: fetch this manifest digest, not what the tag names now (the
			      * digest the caller verified: a signature), and name it ref */
};

/* Pull [HOST/]REPO[:TAG|@DIGEST] (an index resolved to linux/amd64) into the
 * store under that name; blobs already stored are not fetched.  digest: the
 * image manifest's, which pins it. */
int build_image_pull(build_store *s, const char *ref, const struct build_remote_opts *o,
		     char digest[KILN_DIGEST_MAX], kiln_error **err);
/* Push the local image NAME[:TAG] to [HOST/]REPO[:TAG] as it is stored (same
 * manifest bytes, so the same digest); blobs the registry has are skipped. */
int build_image_push(build_store *s, const char *name, const char *ref, const struct build_remote_opts *o,
		     char digest[KILN_DIGEST_MAX], kiln_error **err);

#endif
