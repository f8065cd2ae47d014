/* distrib.h — the contract of template distribution (docs/distribution.md):
 * the template artifact (chunks, index, manifest), the host's chunk store and
 * template push/pull over the registry client, importing pulled templates
 * into the template store (snapshots/). */
#ifndef KILN_DISTRIB_H
#define KILN_DISTRIB_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln.h"
#include "regclient/regclient.h"

/* ---------------------------------------------------------------------------
 * Template distribution (docs/distribution.md).  A template version travels
 * as an OCI image manifest: config = the template config, layers = an index
 * blob then the zstd chunks of its files.  dist_chunks is the host's chunk
 * store ($KILN_HOME/chunks), shared by all templates, LRU-evicted.
 * ------------------------------------------------------------------------- */

typedef struct dist_chunks dist_chunks;

/* dir NULL: $KILN_HOME/chunks (created). */
dist_chunks *dist_chunks_open(const char *dir, kiln_error **err);
void dist_chunks_close(dist_chunks *cs);
const char *dist_chunks_dir(const dist_chunks *cs);
char *dist_chunks_path(const dist_chunks *cs, const char *digest);
/* 1 if the chunk is stored (and marks it used), else 0. */
int dist_chunks_has(dist_chunks *cs, const char *digest);
/* A new temp file in the store (for a download); then commit verifies it
 * against digest and moves it in, or removes it. */
char *dist_chunks_tmp(dist_chunks *cs, int *fd, kiln_error **err);
int dist_chunks_commit(dist_chunks *cs, const char *tmp, const char *digest, kiln_error **err);
/* Stores data as a chunk; digest is set to the data's even when the store
 * fails (a full disk), so a caller can still tell good bytes from bad. */
int dist_chunks_put(dist_chunks *cs, const void *data, size_t len, char digest[KILN_DIGEST_MAX], kiln_error **err);
/* A chunk's bytes, verified (a corrupted one is removed and is an error). */
int dist_chunks_get(dist_chunks *cs, const char *digest, char **data, size_t *len, kiln_error **err);
/* Keep these chunks from eviction until unpin/close (or this process dies). */
int dist_chunks_pin(dist_chunks *cs, const char *const *digests, size_t n, kiln_error **err);
void dist_chunks_unpin(dist_chunks *cs);

struct dist_chunks_stats {
	uint64_t chunks, bytes;        /* in the store after eviction */
	uint64_t evicted, evicted_bytes, pinned;
};
/* Remove least recently used chunks until the store holds at most max_bytes
 * (disk usage), never a pinned one. */
int dist_chunks_evict(dist_chunks *cs, uint64_t max_bytes, struct dist_chunks_stats *st, kiln_error **err);
/* The store's size limit: $KILN_CHUNKS_MAX ("20G"), default 20 GiB. */
uint64_t dist_chunks_limit(void);

/* The artifact's media types and oci_tmpl_is_artifact() are in oci/oci.h. */

struct dist_tmpl_xfer_opts {
	unsigned parallel;             /* 0: the client's default */
	void (*progress)(void *ud, const struct rc_progress *p);
	void *ud;
};

struct dist_tmpl_stats {
	uint64_t bytes_total;          /* the artifact: manifest, config, index and every chunk blob */
	uint64_t bytes_moved;          /* HTTP body bytes sent (push) or received (pull), retries included */
	size_t blobs_total, blobs_moved;
	double seconds;
	char manifest_digest[KILN_DIGEST_MAX];
	char template_digest[KILN_DIGEST_MAX]; /* pull: the local template */
};

/* Push a local template (NAME[:TAG] or digest) to repo under ref (tag or
 * digest): only blobs the registry lacks are uploaded. */
int dist_tmpl_push(rc_client *c, const char *template_ref, const char *repo, const char *ref,
		  const struct dist_tmpl_xfer_opts *o, struct dist_tmpl_stats *st, kiln_error **err);
/* Pull the template artifact whose manifest was fetched from repo: only
 * chunks the chunk store lacks are downloaded; then assembled, verified and
 * imported as template name (NAME[:TAG]). */
int dist_tmpl_pull(rc_client *c, const char *repo, const struct rc_doc *manifest, const char *name,
		  const struct dist_tmpl_xfer_opts *o, struct dist_tmpl_stats *st, kiln_error **err);

/* ---------------------------------------------------------------------------
 * The artifact format (chunk.c, tmpl.c), for the files above and the tests.
 * ------------------------------------------------------------------------- */
/* One file of a template (rootfs, memory, disk, state) as fixed-size chunks. */
struct dist_tmpl_part {
	char *role;
	char digest[KILN_DIGEST_MAX];  /* of the whole file */
	uint64_t size;
	uint64_t chunk_size;
	size_t nchunks;
	char **chunks;                 /* blob digest of each zstd chunk; NULL: all zeros */
	size_t *first, nfirst;         /* the working set: chunks a restore and a first exec
					* read (index "first"), fetched before a lazy start */
};

struct dist_tmpl_blob {
	char digest[KILN_DIGEST_MAX];
	uint64_t size;
};

/* A template version as an OCI artifact: config + index + chunk blobs. */
struct dist_tmpl {
	char *config;                  /* the template config blob */
	size_t config_len;
	char config_digest[KILN_DIGEST_MAX];
	struct dist_tmpl_part *parts;
	size_t nparts;
	struct dist_tmpl_blob *blobs;   /* unique chunk blobs, in order of first use */
	size_t nblobs;
	char *index;                   /* the index blob (JSON) */
	size_t index_len;
	char index_digest[KILN_DIGEST_MAX];
	char *manifest;                /* the OCI image manifest */
	size_t manifest_len;
	char manifest_digest[KILN_DIGEST_MAX];
};

/* The chunk size for a file: min (64 KiB for memory, 256 KiB for the rest),
 * doubled until the file has at most DIST_TMPL_MAX_CHUNKS chunks (bounds the manifest). */
#define DIST_TMPL_MAX_CHUNKS 8192
uint64_t dist_tmpl_chunk_min(const char *role);
uint64_t dist_tmpl_chunk_size(uint64_t file_size, uint64_t min);
/* Chunk a file into the store (zero chunks skipped) and describe it. */
int dist_tmpl_chunk_file(dist_chunks *cs, const char *path, const char *role, struct dist_tmpl_part *part,
			kiln_error **err);
/* The same without the whole-file digest (part->digest left empty): for the
 * files of a template being built, which the snapshot store hashes as it
 * stores them (prechunk.c). */
int dist_tmpl_chunk_file_unhashed(dist_chunks *cs, const char *path, const char *role, struct dist_tmpl_part *part,
				  kiln_error **err);
/* Build the index and the manifest from config + parts (fills blobs too). */
int dist_tmpl_seal(struct dist_tmpl *t, dist_chunks *cs, kiln_error **err);
/* Parse and cross-check a pulled artifact: every chunk the index names must
 * be a layer of the manifest (or registries may collect it). */
int dist_tmpl_parse(struct dist_tmpl *t, const char *manifest, size_t manifest_len, kiln_error **err);
int dist_tmpl_parse_index(struct dist_tmpl *t, const char *index, size_t len, kiln_error **err);
/* The index alone, its blob list taken as is: for an index this host checked
 * against its manifest already (the file server's record of a lazy pull). */
int dist_tmpl_parse_index_only(struct dist_tmpl *t, const char *index, size_t len, kiln_error **err);
void dist_tmpl_free(struct dist_tmpl *t);
/* A local template (snapshots/ store) as an artifact, its chunks in cs; kept
 * (chunks/made) for the next push. */
int dist_tmpl_make(dist_chunks *cs, const char *template_ref, struct dist_tmpl *t, kiln_error **err);
/* The same with some files chunked already (pre[0..npre), by role; taken
 * over and cleared): each must still hash to the digest the config names. */
int dist_tmpl_make_from(dist_chunks *cs, const char *template_ref, struct dist_tmpl_part *pre, size_t npre,
			struct dist_tmpl *t, kiln_error **err);
/* Free one part's fields (and clear it). */
void dist_tmpl_part_free(struct dist_tmpl_part *p);

/* ---------------------------------------------------------------------------
 * Chunking at build time (prechunk.c; docs/distribution.md "Chunked while the
 * build runs"): the rootfs is chunked by a child process (nice 10) as soon as
 * it is written, while the template's VM boots, starts and is snapshotted on
 * the build's core; dist_prechunk_finish adds the other files and keeps the
 * artifact, so the next kiln push only uploads.
 * ------------------------------------------------------------------------- */
typedef struct dist_prechunk dist_prechunk;
/* Start chunking rootfs into $KILN_HOME/chunks; NULL if it cannot (the push
 * chunks then), or $KILN_PRECHUNK=0. */
dist_prechunk *dist_prechunk_start(const char *rootfs);
/* Wait for it, chunk the template's other files, keep the artifact. */
int dist_prechunk_finish(dist_prechunk *pc, const char *template_ref, kiln_error **err);
/* Stop it (the build failed) and remove what it left half-written. */
void dist_prechunk_abort(dist_prechunk *pc);
/* Assemble a parsed artifact whose chunks are all in cs and import it as a
 * template tagged name; returns the local template digest. */
char *dist_tmpl_assemble(dist_chunks *cs, const struct dist_tmpl *t, const char *name, kiln_error **err);
/* One file of it, sparse, hashed while written (it must be the file the index names). */
int dist_tmpl_assemble_part(dist_chunks *cs, const struct dist_tmpl_part *part, const char *path, kiln_error **err);
/* Import a lazily pulled template: config and the assembled state stored,
 * rootfs, memory and disk served by chunkfs.c; returns its digest. */
char *dist_tmpl_import_served(const struct dist_tmpl *t, const char *state, const char *name, kiln_error **err);
const struct dist_tmpl_part *dist_tmpl_part_find(const struct dist_tmpl *t, const char *role);

/* ---------------------------------------------------------------------------
 * Lazy templates (tmpl_xfer.c, chunkfs.c, chunkfs_record.c; docs/distribution.md
 * "Lazy templates").
 * ------------------------------------------------------------------------- */
/* dist_tmpl_pull, lazily: only config, index, state, disk and the recorded
 * working set are fetched; rootfs and memory are served from the chunk store
 * by the host's file server, which fetches every other chunk from
 * registry/repo on first touch and prefetches the rest. */
int dist_tmpl_pull_lazy(rc_client *c, const char *registry, const char *repo, const struct rc_doc *manifest,
			const char *name, const struct dist_tmpl_xfer_opts *o, struct dist_tmpl_stats *st,
			kiln_error **err);
/* The host's template file server: one FUSE daemon per KILN_HOME (`kiln
 * chunkfs serve`), mounted at $KILN_HOME/chunkfs/mnt, HEX/{rootfs,memory,disk}
 * per lazy template. */
int dist_chunkfs_serve(kiln_error **err);
/* Start it (detached, /proc/self/exe chunkfs serve) unless it is up. */
int dist_chunkfs_ensure(kiln_error **err);
/* Stop it (SIGTERM; a dead one's mount is detached). */
int dist_chunkfs_stop(kiln_error **err);
bool dist_chunkfs_running(void);
/* Record a lazily pulled template (its index, checked against its manifest) for the server. */
int dist_chunkfs_add(const char *template_digest, const char *registry, const char *repo, const struct dist_tmpl *t,
		     kiln_error **err);
/* The directory serving the template's files (the server started if
 * needed), or NULL (NOTFOUND: not a lazy template). */
char *dist_chunkfs_files(const char *template_digest, kiln_error **err);
/* Working-set recording: serve a local template's stored files under a fresh
 * name *key, logging every read; returns the directory.  record_end: the byte
 * ranges read, {"rootfs"|"memory"|"disk": [[off, len], …]}, and the name is dropped. */
char *dist_chunkfs_record_start(const char *template_digest, const char *rootfs, const char *memory, const char *disk,
				char **key, kiln_error **err);
json_t *dist_chunkfs_record_end(const char *key, kiln_error **err);

#endif
