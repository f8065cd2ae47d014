/* builder.h — the builder stage's contract: the build context (.dockerignore,
 * walking), COPY/ADD source resolution, layer writing, the local content-
 * addressed store, the step cache and `kiln build` itself.  Steps that must
 * run inside the image (RUN) go through a const executor ops table so the
 * microVM executor plugs in without touching the rest. */
#ifndef KILN_BUILDER_H
#define KILN_BUILDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "kiln.h"
#include "vm/vm.h"
#include "dockerfile-parser/dockerfile.h"

/* ===========================================================================
 * Patterns (ignore.c): .dockerignore and COPY --exclude, as moby's
 * ignorefile.ReadAll + patternmatcher.MatchesOrParentMatches.
 * ========================================================================= */
typedef struct build_ignore build_ignore;

/* Patterns as patternmatcher.New takes them ("!" marks an exception);
 * `where` names them in errors. */
int build_ignore_new(const char *const *patterns, size_t n, const char *where, build_ignore **out,
		     kiln_error **err);
/* .dockerignore text: comments, BOM, trimming, cleaning, leading "/" dropped. */
int build_ignore_parse(const char *text, size_t len, const char *where, build_ignore **out, kiln_error **err);
/* Load a .dockerignore file; a missing file gives an empty matcher. */
int build_ignore_load(const char *path, build_ignore **out, kiln_error **err);
/* Is this slash-separated, cleaned, context-relative path excluded? */
bool build_ignore_match(const build_ignore *ig, const char *path);
bool build_ignore_has_exclusions(const build_ignore *ig);
size_t build_ignore_count(const build_ignore *ig);
void build_ignore_free(build_ignore *ig);

/* Go's filepath.Clean (lexical: "//", ".", ".." resolved; "" → "."). */
char *build_path_clean(const char *path);
/* Go's filepath.Match: '*' and '?' never match '/', classes "[a-z]"
 * "[^a]", backslash escapes.  Returns -1 for a malformed pattern. */
int build_glob_match(const char *pattern, const char *name);
/* Does the string contain glob metacharacters (* ? [ or an escape)? */
bool build_glob_has_meta(const char *s);

/* ===========================================================================
 * Source trees (tree.c): a directory on disk seen through an ignore matcher,
 * listed once (lstat, symlinks never followed), sorted by path.
 * ========================================================================= */
struct build_entry {
	char *path;    /* relative, cleaned, "/"-separated ("a/b"); the root is not listed */
	struct stat st;
	char *link;    /* symlink target, else NULL */
};

typedef struct build_tree build_tree;

/* List `root` (a directory), leaving out what `ig` excludes (ig may be NULL).
 * Excluded directories are still entered when exceptions ("!") exist, and a
 * directory is listed if it is included or holds something included. */
int build_tree_open(const char *root, const build_ignore *ig, build_tree **out, kiln_error **err);
void build_tree_free(build_tree *t);
const char *build_tree_root(const build_tree *t);
size_t build_tree_count(const build_tree *t);
const struct build_entry *build_tree_entry(const build_tree *t, size_t i);
/* The entry for a cleaned relative path, or NULL ("." has no entry). */
const struct build_entry *build_tree_find(const build_tree *t, const char *path);
/* Index range [*begin, *end) of the entries strictly below `dir` ("." = all). */
void build_tree_children(const build_tree *t, const char *dir, size_t *begin, size_t *end);

/* ===========================================================================
 * The image so far (fsindex.c): every path with its type, mode, owner and
 * link target, from layer tar headers with whiteouts applied; also the
 * image's /etc/passwd and /etc/group, which --chown names resolve against.
 * Paths are relative to the image root, without a leading "/" ("" = root).
 * ========================================================================= */
typedef struct build_fsindex build_fsindex;

struct build_fsnode {
	char *path;
	mode_t mode;   /* type and permission bits */
	uid_t uid;
	gid_t gid;
	char *link;    /* symlink target */
};

build_fsindex *build_fsindex_new(void);
void build_fsindex_free(build_fsindex *x);
/* Apply one layer blob (tar, gzip or zstd) on top. */
int build_fsindex_apply_layer(build_fsindex *x, const char *blob, kiln_error **err);
/* The same from the layer's record at record_path when there is a whole one
 * (its entries' headers: no inflating), else from the blob, then recorded
 * there (replace-by-rename; a failure to keep it is not an error). */
int build_fsindex_apply_layer_cached(build_fsindex *x, const char *blob, const char *record_path, kiln_error **err);
const struct build_fsnode *build_fsindex_get(const build_fsindex *x, const char *path);
/* Resolve symlinks (scoped to the image root) in every component but the
 * last, and in the last too when follow_last.  Returns index form. */
char *build_fsindex_resolve(const build_fsindex *x, const char *path, bool follow_last);
/* Contents of "etc/passwd" / "etc/group" in the image, or NULL. */
const char *build_fsindex_file(const build_fsindex *x, const char *path);

/* ===========================================================================
 * COPY / ADD (copy.c, fetch.c): what a step adds, as a sorted list of items.
 * ========================================================================= */
struct build_xattr {
	char *name;        /* "security.capability", "user.x", "system.posix_acl_access" */
	uint8_t *value;
	size_t len;
};

struct build_item {
	char *dest;        /* image path, index form ("app/main.c") */
	char *src;         /* host file with the content (regular files), else NULL */
	uint8_t *data;     /* or the content in memory (size bytes; a RUN's small files) */
	mode_t mode;       /* type and permission bits as they go in the layer */
	uid_t uid;
	gid_t gid;
	char *link;        /* symlink target */
	uint64_t size;
	char *hardlink;    /* dest of an earlier item this is a hard link to, else NULL */
	dev_t rdev;        /* character and block devices */
	struct build_xattr *xattrs; /* written as SCHILY.xattr.NAME records, as buildah does */
	size_t n_xattrs;
	/* the input file's own metadata, for the cache key */
	mode_t src_mode;
	uid_t src_uid;
	gid_t src_gid;
};

struct build_changes {
	struct build_item *v;
	size_t n, cap;
	kiln_strv tmpdirs; /* scratch (downloads, extracted archives), removed on free */
};

void build_changes_free(struct build_changes *c);
void build_item_add_xattr(struct build_item *it, const char *name, const void *value, size_t len);
/* Sort by destination path, the later of two equal paths winning. */
void build_changes_finish(struct build_changes *c);
/* After build_changes_finish: the directories above the items that the image
 * (idx) already has become items too, with the image's mode and owner, as
 * BuildKit's layers hold their parents.  Otherwise an overlay of the layers
 * alone (the builder VM's lower directories, docker's overlay2) would show
 * such a parent as the extractor made it (root, 0755), hiding its owner. */
void build_changes_add_parents(struct build_changes *c, const build_fsindex *idx);

struct build_copy_opts {
	bool add;                  /* ADD: URLs and local archive extraction */
	const char *chown;         /* "USER[:GROUP]", names or ids; NULL = 0:0 (or kept) */
	const char *chmod;         /* octal; NULL = kept */
	const char *checksum;      /* ADD --checksum=sha256:... for URLs */
	bool public_urls;          /* ADD URLs from public addresses only (build_options.public_urls) */
	const char *const *excludes; /* --exclude patterns */
	size_t n_excludes;
	bool parents;              /* --parents */
	bool keep_owner;           /* sources keep their owners (COPY --from=stage) */
	int unpack;                /* ADD --unpack: -1 unset (local archives extract, URLs
	                            * not), 0 never, 1 also downloaded archives */
	const char *workdir;       /* for a relative destination; NULL = "/" */
	const char *scratch;       /* directory for temporary files */
	/* heredoc sources "<<NAME": their bodies */
	const char *const *heredoc_names;
	const char *const *heredoc_bodies;
	size_t n_heredocs;
};

/* Resolve COPY/ADD `srcs` → `dest` against a source tree and the image:
 * globs, directory contents, trailing-slash rules, --parents, --exclude,
 * --chown (names from the image's /etc/passwd and /etc/group), --chmod,
 * ADD's archive extraction and URLs.  Appends to *out. */
int build_copy_resolve(const build_tree *tree, const char *const *srcs, size_t n_srcs, const char *dest,
		       const struct build_copy_opts *o, const build_fsindex *img, struct build_changes *out,
		       kiln_error **err);
/* "USER[:GROUP]" → ids: numbers as they are (a lone uid is also the gid),
 * names looked up in passwd/group texts (either may be NULL). */
int build_chown_parse(const char *spec, const char *passwd, const char *group, uid_t *uid, gid_t *gid,
		      kiln_error **err);
/* Fetch a URL (http/https) to a file, checking `checksum` ("sha256:...") if
 * set; public_only: from public addresses only (rc_client_opts.public_only). */
int build_fetch_url(const char *url, const char *path, const char *checksum, bool public_only, kiln_error **err);

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

/* ===========================================================================
 * Running a build (build.c, exec.c).
 * ========================================================================= */
/* A RUN --mount, prepared on the host: what the executor puts at `target`
 * (an absolute path already resolved inside the image) for the step only;
 * none of it is part of the layer. */
enum build_mount_type { BUILD_MOUNT_BIND, BUILD_MOUNT_CACHE, BUILD_MOUNT_TMPFS, BUILD_MOUNT_SECRET, BUILD_MOUNT_SSH };
struct build_run_mount {
	enum build_mount_type type;
	const char *target;
	const char *src_dir;   /* BIND/CACHE: host directory whose contents go there, or */
	const char *src_tar;   /* BIND: a tar file with them (a file source: one entry) */
	bool file;             /* BIND: the source is one file, mounted on a file (SECRET, SSH: always) */
	bool readonly;
	bool save;             /* CACHE: the directory comes back into src_dir afterwards */
	uint64_t size;         /* TMPFS: bytes, 0 = the kernel's default */
	const void *data;      /* SECRET: its bytes, kept in memory only (never a host file) */
	size_t len;
	const char *socket;    /* SSH: the host's agent socket the guest's is relayed to */
	uint32_t mode, uid, gid; /* SECRET, SSH: the file's (the socket's) */
};

/* Where the time of a RUN step went (filled by the executor). */
struct build_run_stats {
	bool booted;          /* this step started the stage's VM */
	bool restored;        /* ... from the builder VM snapshot (boot_ms: the restore) */
	bool base_restored;   /* ... from its snapshot with the stage's base already in it */
	double ext4_ms;       /* the stage as an ext4 image (cold boot only) */
	double boot_ms;       /* VM start to agent ready (boot only) */
	double sync_ms;       /* layers made on the host since the last RUN, into the VM */
	double exec_ms;       /* the command, with its mounts set up and torn down */
	double capture_ms;    /* the step's changes back to the host, as a layer */
};

/* What a RUN step gets: the command and its environment, and the stage's
 * filesystem as layers in the store.  The executor returns the step's
 * changes as one layer written to the store (tar diff, whiteouts). */
struct build_run_request {
	const struct df_step *step;
	const char *instruction;          /* "RUN make", expanded */
	json_t *argv;                     /* array of strings: shell form already wrapped */
	char *const *env;                 /* "K=V" */
	size_t n_env;
	const char *workdir;              /* "/" when unset */
	const char *user;                 /* "" = root */
	build_store *store;
	const struct build_layer *layers; /* the stage so far, bottom first */
	size_t n_layers;
	size_t n_base_layers;             /* layers[0..n) are the stage's FROM (its base) */
	enum build_compression compression;
	const char *scratch;              /* a private temp directory */
	bool network;                     /* RUN --network=default (not none) */
	bool stage_network;               /* some RUN of the stage still to run wants the network */
	bool stage_secrets;               /* ... or mounts a secret or an ssh agent */
	const struct build_run_mount *mounts;
	size_t n_mounts;
	char *const *step_env;            /* "K=V" for the command only, overriding env: secret
	                                   * mounts' env= and SSH_AUTH_SOCK; never part of the
	                                   * cache key, the image or a log */
	size_t n_step_env;
	void (*on_output)(void *ud, const void *data, size_t len); /* the command's output */
	void *output_ud;
	struct build_run_stats *stats;    /* may be NULL */
};

/* Where RUN steps execute.  The builder only ever calls through this table,
 * so the microVM executor plugs in as one more const instance.  An executor
 * keeps per-stage state in *session (NULL before the stage's first RUN that
 * misses the cache): the microVM executor boots one VM there and reuses it
 * for every later RUN of the stage.  The builder calls end() once per stage
 * that has a session, on success and on every failure path. */
typedef struct build_exec_session build_exec_session;
struct build_executor_ops {
	const char *name;
	/* Run the step; on success fill *out (a layer already in the store). A
	 * non-zero exit of the command is an error naming its exit code.  The
	 * request's layers always extend those of the session's previous run. */
	int (*run)(void *ctx, build_exec_session **session, const struct build_run_request *req,
		   struct build_layer *out, kiln_error **err);
	void (*end)(void *ctx, build_exec_session *session);
};

/* The executor available without a microVM: RUN fails with a clear error. */
extern const struct build_executor_ops build_executor_none;

/* RUN in a microVM (exec_vm.c, exec_warm.c): one VM per stage, restored from
 * a snapshot of a generic builder VM (the stage's layers uploaded) or booted
 * from the stage as ext4; each step runs chrooted in its own overlay whose lower layers are the
 * earlier steps' upper directories, and its upper directory becomes the
 * layer (docs/builder.md).  ctx: a struct build_vm_opts, or NULL for the
 * defaults. */
struct build_vm_opts {
	unsigned cpus, memory_mib;  /* 0: 1 vCPU, 2 GiB; a restored VM has its snapshot's 2 GiB */
	unsigned scratch_mib;       /* the guest's disk for step changes; 0: 16 GiB (sparse) */
	const char *kernel_dir;     /* NULL: vm_kernel_default_dir() */
};
extern const struct build_executor_ops build_executor_vm;

enum build_event_kind { BUILD_EV_STEP, BUILD_EV_STEP_DONE, BUILD_EV_DONE, BUILD_EV_OUTPUT, BUILD_EV_VM };

struct build_event {
	enum build_event_kind kind;
	int step, total;            /* 1-based over the stages built (FROM counts) */
	const char *stage;          /* stage name, or its index as text */
	const char *instruction;    /* expanded text */
	const char *file;
	int line;
	bool has_cache;             /* the step has a cache key (layer steps) */
	bool cached;                /* a hit */
	double seconds;
	const char *digest;         /* BUILD_EV_DONE: manifest digest */
	const char *template_digest; /* BUILD_EV_DONE: the template's, or NULL */
	const char *data;           /* BUILD_EV_OUTPUT: a chunk of RUN output */
	size_t len;
	const struct build_run_stats *run; /* BUILD_EV_STEP_DONE of a RUN that ran, BUILD_EV_VM
	                            * (the stage's builder VM booted): the time split */
};

/* What `kiln build --template` hands to the snapshot stage. */
struct build_template_opts {
	const char *name;        /* NAME[:TAG] for the template, or NULL */
	const char *start_cmd;   /* NULL: the image's ENTRYPOINT + CMD, shell-quoted */
	const char *ready_cmd;   /* NULL: none */
	unsigned cpus, memory_mib; /* 0: the snapshot stage's defaults */
	enum vm_net_mode network;  /* the template's (its sandboxes' default) network */
	int ready_timeout_ms;      /* how long the ready command may take; 0: the snapshot stage's (60 s) */
	void (*on_rootfs)(void *ud, const char *rootfs); /* snap_finalize_opts' */
	void *on_rootfs_ud;
};

/* ENTRYPOINT + CMD of an image config as one /bin/sh -c string, or NULL. */
char *build_default_start_cmd(const json_t *config);
/* Write the image's rootfs to `rootfs` and finalise it into a template
 * (boot, start, ready, snapshot); the template's digest in `digest`. */
int build_template_make(build_store *s, const char *manifest, const struct build_template_opts *t,
			const char *rootfs, char digest[KILN_DIGEST_MAX], kiln_error **err);

/* kiln build --secret id=ID,src=FILE|env=VAR: read when a RUN step mounts it
 * (RUN --mount=type=secret), never stored, logged or part of a cache key. */
struct build_secret {
	const char *id;
	const char *file;                  /* or */
	const char *env;                   /* the variable holding it */
};
/* kiln build --ssh ID=SOCKET: an ssh-agent a RUN --mount=type=ssh reaches. */
struct build_ssh {
	const char *id;
	const char *socket;
};

struct build_options {
	const char *context;               /* directory */
	const char *dockerfile;            /* NULL = CONTEXT/Dockerfile; "-" = stdin */
	const char *const *tags;
	size_t n_tags;
	const struct df_kv *build_args;
	size_t n_build_args;
	const char *target;
	const struct build_secret *secrets;
	size_t n_secrets;
	const struct build_ssh *ssh;
	size_t n_ssh;
	bool no_cache;
	const char *oci_out;               /* OCI layout directory, or NULL */
	const char *rootfs_out;            /* ext4 file of the result, or NULL */
	const struct build_template_opts *template; /* also make a template, or NULL */
	enum build_compression compression;
	bool public_urls;                  /* ADD fetches from public addresses only: no loopback,
					    * private or link-local one, whatever DNS or a redirect says */
	bool registry_bases;               /* FROM, COPY --from, RUN --mount from= (and ONBUILD triggers')
					    * take registries and stages only, no oci:/archive path on
					    * this host: what the build service runs for its teams */
	const char *context_digests;       /* JSON file {"PATH": "sha256:…"}: digests of the context's
					    * files, trusted (build_store_known_digests), or NULL */
	const char *home;                  /* NULL = kiln_home() */
	const struct build_executor_ops *executor; /* NULL = build_executor_none */
	void *executor_ctx;
	void (*on_event)(void *ud, const struct build_event *ev);
	void *event_ud;
};

struct build_result {
	char manifest[KILN_DIGEST_MAX];
	char config[KILN_DIGEST_MAX];
	size_t steps, cached;
	char template_digest[KILN_DIGEST_MAX]; /* "" unless a template was made */
};

/* Build.  Errors name the failing step and its Dockerfile line. */
int build_run(const struct build_options *o, struct build_result *res, kiln_error **err);

#endif
