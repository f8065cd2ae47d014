/* builder.h — the builder stage's contract for `kiln build` itself (with
 * the headers by audience it includes: context.h, the build context; store.h,
 * the local store, layers, cache, images and registries; event.h, what a build
 * reports; request.h, what a build is asked for): COPY/ADD source resolution,
 * the image index, running steps.  Steps that must
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
#include "builder/context.h"
#include "builder/event.h"
#include "builder/request.h"
#include "builder/store.h"
#include "dockerfile-parser/dockerfile.h"

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
	bool record_inputs;                /* fill build_result's context digest and bases (provenance:
					    * hashes every file of the context the build can read) */
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
	/* with record_inputs (else "" and none): the context as the build saw it
	 * (build_context_digest) and every image it read (FROM, COPY --from,
	 * RUN --mount from=) as named and as resolved; build_result_free */
	char context_digest[KILN_DIGEST_MAX];
	struct build_input {
		char *ref;
		char digest[KILN_DIGEST_MAX];
	} *bases;
	size_t n_bases;
};
void build_result_free(struct build_result *res);
/* The digest of a context directory through its .dockerignore: sha256 over
 * "kiln-context/1" and, per entry in path order, its path, mode and content
 * digest (regular files) or target (symlinks); owners and times left out,
 * as COPY leaves them out. */
int build_context_digest(build_store *s, const build_tree *t, char out[KILN_DIGEST_MAX], kiln_error **err);

/* Build.  Errors name the failing step and its Dockerfile line. */
int build_run(const struct build_options *o, struct build_result *res, kiln_error **err);

#endif
