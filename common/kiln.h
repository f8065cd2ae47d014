/* kiln.h — the shared foundation every stage builds on: one error type with a
 * context chain, logging, digests (openssl), string buffers, JSON helpers
 * (jansson) and small filesystem helpers (atomic write, mkdir -p, rm -rf).
 * Nothing here prints to stdout or exits; only cli/ does that. */
#ifndef KILN_H
#define KILN_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <jansson.h>

#define KILN_VERSION "0.1.0"
/* The media type of a template's config blob: snapshots/ writes and reads
 * the config (snap_config), oci/ and distrib/ name it in the template's
 * manifest; both sit above common/, so it is defined once here. */
#define KILN_TMPL_CONFIG_MEDIA "application/vnd.kiln.template.config.v1+json"

#if defined(__GNUC__)
#define KILN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KILN_PRINTF(a, b)
#endif

/* ---------------------------------------------------------------------------
 * Errors.
 *
 * Every fallible function takes `kiln_error **err` as its last parameter and
 * returns a negative value (or NULL) on failure, having set *err.  Callers on
 * the way up add context with kiln_error_wrap(), so the user sees
 *   "build: step 3/7 RUN: guest exec: connection reset"
 * The innermost frame is the cause; each wrap adds an outer frame.  *err must
 * be NULL on entry to a fallible call; the caller owns and frees the result.
 * ------------------------------------------------------------------------- */
enum kiln_errkind {
	KILN_E_GENERIC = 0,
	KILN_E_USAGE,      /* bad flags or arguments: the CLI exits 2 */
	KILN_E_NOTFOUND,   /* a named thing does not exist */
	KILN_E_INVALID,    /* malformed input (syntax, digest, JSON, ...) */
	KILN_E_EXISTS,
	KILN_E_LIMIT,      /* a configured limit was hit */
	KILN_E_IO,
	KILN_E_QUOTA,      /* a team's quota (stored bytes, repositories, build minutes...) would be passed */
	KILN_E_DENIED,     /* well formed, but a policy forbids it (the signing policy's refusals) */
};

typedef struct kiln_error_frame {
	char *msg;
	struct kiln_error_frame *cause; /* inner frame, or NULL */
} kiln_error_frame;

typedef struct kiln_error {
	enum kiln_errkind kind;
	int errnum;              /* errno of the cause, 0 if none */
	kiln_error_frame *top;   /* outermost context first */
	char *joined;            /* cache for kiln_error_message() */
} kiln_error;

/* Set *err to a new error; returns -1 so callers can `return kiln_err(...)`. */
int kiln_err(kiln_error **err, enum kiln_errkind kind, const char *fmt, ...) KILN_PRINTF(3, 4);
/* Like kiln_err, with ": strerror(errnum)" appended and errnum recorded. */
int kiln_err_errno(kiln_error **err, int errnum, const char *fmt, ...) KILN_PRINTF(3, 4);
/* Add an outer context frame to an existing *err; returns -1. */
int kiln_error_wrap(kiln_error **err, const char *fmt, ...) KILN_PRINTF(2, 3);
/* "outer: inner: cause"; owned by the error, valid until it is freed. */
const char *kiln_error_message(kiln_error *err);
/* The innermost message alone. */
const char *kiln_error_cause(const kiln_error *err);
/* 1 when the cause is a full filesystem or quota (ENOSPC, EDQUOT): the
 * caller's storage, not its input or a bug, so servers answer 507. */
int kiln_error_disk_full(const kiln_error *err);
void kiln_error_free(kiln_error *err);
/* Free *err (if set) and reset it to NULL. */
void kiln_error_clear(kiln_error **err);

/* ---------------------------------------------------------------------------
 * Logging to stderr.  The level comes from KILN_LOG (error, warn, info, debug,
 * trace; default warn) unless set with kiln_log_set_level().
 * ------------------------------------------------------------------------- */
enum kiln_loglevel { KILN_LOG_ERROR, KILN_LOG_WARN, KILN_LOG_INFO, KILN_LOG_DEBUG, KILN_LOG_TRACE };

void kiln_log_set_level(enum kiln_loglevel level);
enum kiln_loglevel kiln_log_level(void);
int kiln_log_parse_level(const char *name, enum kiln_loglevel *out);
void kiln_log(enum kiln_loglevel level, const char *fmt, ...) KILN_PRINTF(2, 3);
#define kiln_warn(...) kiln_log(KILN_LOG_WARN, __VA_ARGS__)
#define kiln_info(...) kiln_log(KILN_LOG_INFO, __VA_ARGS__)
#define kiln_debug(...) kiln_log(KILN_LOG_DEBUG, __VA_ARGS__)

/* ---------------------------------------------------------------------------
 * String buffer: buf is never NULL (an empty buffer points at a static "")
 * and is always NUL-terminated.  Allocation failure aborts: kiln treats OOM
 * as fatal, like git and redis do.
 * ------------------------------------------------------------------------- */
typedef struct kiln_buf {
	char *buf;
	size_t len;
	size_t cap;
} kiln_buf;

#define KILN_BUF_INIT { (char *)kiln_buf_empty, 0, 0 }
extern const char kiln_buf_empty[];

void kiln_buf_grow(kiln_buf *b, size_t extra);
void kiln_buf_add(kiln_buf *b, const void *data, size_t len);
void kiln_buf_adds(kiln_buf *b, const char *s);
void kiln_buf_addc(kiln_buf *b, char c);
void kiln_buf_addf(kiln_buf *b, const char *fmt, ...) KILN_PRINTF(2, 3);
void kiln_buf_vaddf(kiln_buf *b, const char *fmt, va_list ap);
void kiln_buf_reset(kiln_buf *b);
/* gzip.c: whole-buffer gzip (zlib) for HTTP bodies; gunzip fails with
 * KILN_E_LIMIT past max bytes and KILN_E_INVALID on anything not gzip. */
int kiln_gunzip(const void *in, size_t len, size_t max, kiln_buf *out, kiln_error **err);
int kiln_gzip(const void *in, size_t len, int level, kiln_buf *out, kiln_error **err);
/* Hand the string to the caller (who frees it); the buffer is left empty. */
char *kiln_buf_detach(kiln_buf *b);
void kiln_buf_free(kiln_buf *b);

/* Allocation helpers that abort on OOM. */
void *kiln_xmalloc(size_t n);
void *kiln_xcalloc(size_t n, size_t size);
void *kiln_xrealloc(void *p, size_t n);
char *kiln_xstrdup(const char *s);
char *kiln_xstrndup(const char *s, size_t n);
char *kiln_xasprintf(const char *fmt, ...) KILN_PRINTF(1, 2);

/* A NULL-terminated, growable vector of owned strings. */
typedef struct kiln_strv {
	char **v;   /* v[n] == NULL once anything was pushed; NULL when empty */
	size_t n;
	size_t cap;
} kiln_strv;

#define KILN_STRV_INIT { NULL, 0, 0 }
void kiln_strv_push(kiln_strv *sv, const char *s);
void kiln_strv_push_owned(kiln_strv *sv, char *s);
void kiln_strv_free(kiln_strv *sv);

/* In an array of n elements of size bytes sorted by the string each holds at
 * key_off (a char *, e.g. offsetof(struct x, path)): the first index whose
 * string is >= key (n if none). */
size_t kiln_lower_bound(const void *base, size_t n, size_t size, size_t key_off, const char *key);

/* ---------------------------------------------------------------------------
 * Digests, in OCI form "ALGO:HEX" (sha256 and sha512), via openssl EVP.
 * ------------------------------------------------------------------------- */
enum kiln_digest_algo { KILN_SHA256, KILN_SHA512 };

#define KILN_DIGEST_MAX 136 /* "sha512:" + 128 hex + NUL, rounded up */

typedef struct kiln_hasher kiln_hasher;

kiln_hasher *kiln_hasher_new(enum kiln_digest_algo algo);
void kiln_hasher_update(kiln_hasher *h, const void *data, size_t len);
/* Writes "ALGO:HEX" into out (KILN_DIGEST_MAX bytes) and frees the hasher. */
void kiln_hasher_final(kiln_hasher *h, char out[KILN_DIGEST_MAX]);
void kiln_hasher_free(kiln_hasher *h);

void kiln_digest_buf(enum kiln_digest_algo algo, const void *data, size_t len, char out[KILN_DIGEST_MAX]);
int kiln_digest_file(enum kiln_digest_algo algo, const char *path, char out[KILN_DIGEST_MAX], kiln_error **err);
/* Validate "ALGO:HEX" (known algorithm, lowercase hex of the right length). */
int kiln_digest_parse(const char *s, enum kiln_digest_algo *algo, kiln_error **err);
const char *kiln_digest_algo_name(enum kiln_digest_algo algo);
/* The hex part of a valid digest string. */
const char *kiln_digest_hex(const char *digest);
/* Base64 of a string (no line breaks); decode gives NULL when s is not base64. */
char *kiln_b64_encode(const char *s);
char *kiln_b64_decode(const char *s);
/* The same for bytes; decode: -1 if s[0..n) is not base64 (padding optional). */
char *kiln_b64_encode_bytes(const void *data, size_t n);
int kiln_b64_decode_bytes(const char *s, size_t n, kiln_buf *out);

/* ---------------------------------------------------------------------------
 * References (ref.c): the one syntax every command and FROM take for images
 * and templates, docker's "[HOST[:PORT]/]NAME[:TAG][@DIGEST]".  The first
 * component is a host when it has a '.' or ':' or is "localhost"; NAME is an
 * OCI repository name (lowercase components), TAG [A-Za-z0-9_][A-Za-z0-9._-]
 * up to 128, DIGEST sha256:HEX or sha512:HEX.  No Docker Hub defaults here
 * (the registry client adds them).  Neither tag nor digest: tag "latest".
 * ------------------------------------------------------------------------- */
struct kiln_ref {
	char *host;   /* "127.0.0.1:5000", "ghcr.io"; NULL when none is named */
	char *name;   /* "team/app" (without the host) */
	char *tag;    /* NULL only when a digest came without a tag */
	char *digest; /* "sha256:..." or NULL */
};
int kiln_ref_parse(const char *s, struct kiln_ref *r, kiln_error **err);
void kiln_ref_free(struct kiln_ref *r);
/* "[HOST/]NAME" */
char *kiln_ref_repo(const struct kiln_ref *r);
/* The canonical local name: "[HOST/]NAME:TAG", or "[HOST/]NAME@DIGEST" when a
 * digest was given (it wins over a tag).  The image and template stores name
 * what they hold by it. */
char *kiln_ref_str(const struct kiln_ref *r);
/* kiln_ref_str of a parsed string ("app" -> "app:latest"); NULL with *err. */
char *kiln_ref_normalize(const char *s, kiln_error **err);
/* Does s name a registry host explicitly ("host:5000/x", "ghcr.io/x")? */
int kiln_ref_has_host(const char *s);
int kiln_ref_name_valid(const char *name);
int kiln_ref_tag_valid(const char *tag);

/* ---------------------------------------------------------------------------
 * JSON (jansson).  Loaders return a new reference; errors carry file:line:col.
 * ------------------------------------------------------------------------- */
json_t *kiln_json_loadb(const char *data, size_t len, const char *what, kiln_error **err);
json_t *kiln_json_load_file(const char *path, kiln_error **err);
/* Canonical, compact, key-sorted serialisation (stable bytes for digests). */
char *kiln_json_dumps_canonical(const json_t *v);
/* Atomically write v (pretty-printed, trailing newline) to path. */
int kiln_json_write_file(const char *path, const json_t *v, kiln_error **err);
/* Typed getters: NULL / fallback when the key is absent or of another type. */
const char *kiln_json_str(const json_t *obj, const char *key);
json_int_t kiln_json_int(const json_t *obj, const char *key, json_int_t fallback);
/* Sort an array's elements in place; cmp gets two (json_t *const *) as qsort's. */
void kiln_json_array_sort(json_t *arr, int (*cmp)(const void *, const void *));

/* ---------------------------------------------------------------------------
 * Filesystem helpers.
 * ------------------------------------------------------------------------- */
/* Write data to path via a temp file in the same directory + fsync + rename,
 * then fsync the directory: a reader sees the old file or the new, never half. */
int kiln_write_atomic(const char *path, const void *data, size_t len, mode_t mode, kiln_error **err);
/* Read a whole file (NUL-terminated; len excludes the NUL); max = 0 means no limit. */
int kiln_read_file(const char *path, char **data, size_t *len, size_t max, kiln_error **err);
int kiln_mkdir_p(const char *path, mode_t mode, kiln_error **err);
/* Remove a tree without following symlinks; a missing path is not an error,
 * nor are parts another remover takes away meanwhile, and a file made in a
 * directory during the walk is removed by walking it again (a few times). */
int kiln_rm_rf(const char *path, kiln_error **err);
char *kiln_path_join(const char *a, const char *b);
/* Go's filepath.Clean (lexical: "//", ".", ".." resolved; "" -> "."). */
char *kiln_path_clean(const char *path);
/* kiln's state directory: $KILN_HOME, else /var/lib/kiln for root, else
 * $XDG_DATA_HOME/kiln or ~/.local/share/kiln.  Not created here. */
char *kiln_home(void);

/* The layout of $KILN_HOME, one table (git's git_path family): every path
 * under it is built by kiln_home_path() from its entry (common/home.c), and
 * docs/ARCHITECTURE.md's store listing is checked against the table
 * (tests/unit/test_home.c).  In the listing's order. */
enum kiln_path {
	KILN_PATH_BLOBS,       /* blobs: image blobs (builder/store.c) */
	KILN_PATH_TMP,         /* tmp: files being written, builds' scratch */
	KILN_PATH_CACHE,       /* cache: build cache entries */
	KILN_PATH_IMAGES,      /* images.json: NAME:TAG -> manifest */
	KILN_PATH_IMAGES_LOCK, /* images.lock */
	KILN_PATH_LOCK,        /* lock: flock for builds and prune */
	KILN_PATH_HASHES,      /* hashes: digests of large build inputs */
	KILN_PATH_LAYER_INDEX, /* layer-index: each layer's entries, for a stage's path index */
	KILN_PATH_RUN_CACHE,   /* run-cache: RUN --mount=type=cache */
	KILN_PATH_BUILDER_VM,  /* builder-vm: the builder VM snapshots */
	KILN_PATH_SNAPSHOTS,   /* snapshots: the template store (the four below) */
	KILN_PATH_SNAP_BLOBS,  /* snapshots/blobs: template blobs */
	KILN_PATH_SNAP_TMP,    /* snapshots/tmp */
	KILN_PATH_SNAP_REFS,   /* snapshots/refs: template names */
	KILN_PATH_SNAP_WORKSETS, /* snapshots/worksets: recorded working sets */
	KILN_PATH_SNAP_POOLS,  /* snapshots/pools: warm pool sizes */
	KILN_PATH_SANDBOXES,   /* sandboxes: one directory per sandbox */
	KILN_PATH_CHUNKS,      /* chunks: the host chunk store */
	KILN_PATH_CHUNKFS,     /* chunkfs: the file server of lazy templates */
	KILN_PATH_HOST_TSC,    /* host-tsc.json */
	KILN_PATH_AUTH,        /* auth.json: registry credentials */
	KILN_PATH_KERNEL,      /* kernel: this KILN_HOME's guest kernel */
	KILN_PATH_REGISTRY,    /* registry: kiln serve's default data directory */
	KILN_PATH_TRUST,       /* trust: digests verified against the signing policy (sign/) */
	KILN_PATH_PROVENANCE,  /* provenance: builds' provenance, until pushed (sign/) */
	KILN_PATH_N_
};
struct kiln_path_entry {
	const char *path; /* relative to $KILN_HOME */
	const char *doc;  /* its line in docs/ARCHITECTURE.md's listing; NULL: named inside another's */
};
extern const struct kiln_path_entry kiln_path_table[KILN_PATH_N_];
/* HOME/PATH, or HOME/PATH/SUFFIX with SUFFIX printf-formatted from fmt (NULL:
 * none); home NULL is kiln_home().  Allocated. */
char *kiln_home_path(const char *home, enum kiln_path which, const char *fmt, ...) KILN_PRINTF(3, 4);
/* Make a fresh private temp directory under $TMPDIR (or /tmp). */
char *kiln_mkdtemp(const char *prefix, kiln_error **err);

/* ---------------------------------------------------------------------------
 * Tar streams (libarchive) whose names are bytes: every tar kiln reads or
 * writes is opened here.  UTF-8 names are written as plain PAX records (as
 * BuildKit's), other bytes under hdrcharset=BINARY; readers keep raw bytes.
 * ------------------------------------------------------------------------- */
struct archive;
struct archive_entry;
/* A pax (restricted) writer; open it with archive_write_open*. */
struct archive *kiln_tar_writer_new(void);
/* archive_write_header, with a name written as bytes not a warning. */
int kiln_tar_write_header(struct archive *w, struct archive_entry *e);
/* An error from a failed libarchive call on A: "MSG: libarchive's message",
 * with the errno libarchive recorded (a full disk is only "Write error" in its
 * message) appended and kept, so a disk full says so.  Returns -1. */
int kiln_tar_err(kiln_error **err, enum kiln_errkind kind, struct archive *a, const char *fmt, ...) KILN_PRINTF(4, 5);
/* A tar reader (plain, gzip, zstd, bzip2, xz); open it with archive_read_open*. */
struct archive *kiln_tar_reader_new(void);
/* archive_read_next_header: ARCHIVE_OK, ARCHIVE_EOF, or an error; a name that
 * is not in the C locale's charset is not one (it is kept as its bytes). */
int kiln_tar_next(struct archive *a, struct archive_entry **e);

/* Whole-buffer I/O that retries EINTR and short transfers: write/pwrite
 * return 0 or -1 (errno set); read returns the bytes read, fewer than len
 * only at end of file, or -1. */
int kiln_write_full(int fd, const void *data, size_t len);
int kiln_pwrite_full(int fd, const void *data, size_t len, off_t off);
ssize_t kiln_read_full(int fd, void *buf, size_t len);
ssize_t kiln_pread_full(int fd, void *buf, size_t len, off_t off);
/* in's data segments (SEEK_DATA/SEEK_HOLE) up to size, copied to the same
 * offsets of out, which the caller has sized: its holes stay holes.  buf is
 * len bytes of scratch; nothing is allocated (a forked child may call it).
 * 0, or -1 with errno set. */
int kiln_copy_data(int in, int out, off_t size, void *buf, size_t len);
/* A new dst (0600) holding src's bytes with src's holes; fsync'd when sync. */
int kiln_copy_sparse(const char *src, const char *dst, bool sync, kiln_error **err);
/* Read fd to its end (EINTR retried), appending the first keep bytes to b
 * (keep = 0: all) and reading past the rest, so a child that writes more
 * than the caller keeps is never blocked on a full pipe.  The bytes read, or
 * -1 (errno set). */
ssize_t kiln_read_all(int fd, kiln_buf *b, size_t keep);
/* waitpid retrying EINTR. */
pid_t kiln_waitpid(pid_t pid, int *status, int flags);
/* Forks a daemon: a grandchild in a session of its own, orphaned to init,
 * stdin /dev/null, stdout and stderr log_fd (-1: /dev/null), every other
 * descriptor closed, the signal mask and the usual handlers reset.  0 in
 * the daemon; 1 in the caller, the intermediate child reaped; -1 (errno)
 * when fork failed. */
int kiln_daemon_fork(int log_fd);
/* In a forked child: no signal blocked, INT/TERM/HUP/PIPE at their defaults
 * (what kiln blocks or ignores must not leak into what it starts). */
void kiln_child_signals_reset(void);
/* Milliseconds on CLOCK_MONOTONIC (fractions kept): the one clock for
 * timeouts, deadlines and the timings kiln reports. */
double kiln_now_ms(void);
/* Sleep ms milliseconds (none if ms <= 0), the whole time even across signals:
 * the one sleep of every poll and retry loop. */
void kiln_sleep_ms(long ms);
/* fsync the directory holding path, so a rename or create in it is durable
 * (-1 with the error when the directory cannot be opened or synced). */
int kiln_fsync_parent(const char *path, kiln_error **err);

/* fn(ud, i, worker, err) for each i < n, on up to `workers` threads
 * (parallel.c; worker 0 is the calling thread, at most KILN_PARALLEL_MAX):
 * each i once, in no order; the first failure stops the rest from being
 * taken and is the error returned.  A thread that cannot start: fewer. */
#define KILN_PARALLEL_MAX 8
int kiln_parallel(size_t n, unsigned workers, int (*fn)(void *ud, size_t i, unsigned worker, kiln_error **err),
		  void *ud, kiln_error **err);

/* ---------------------------------------------------------------------------
 * The content-addressed store (cas.c): every blob store of kiln — images,
 * templates, the registry's files, the host's chunk cache — is one of these
 * with its own layout and durability.  A blob appears under ROOT/ALGO/HEX
 * (or ROOT/ALGO/XX/HEX) only whole, verified and renamed from ROOT's tmp dir.
 * ------------------------------------------------------------------------- */
enum kiln_cas_sync {
	KILN_CAS_SYNC_FULL, /* file and directory fsync'd before a blob counts as stored */
	KILN_CAS_SYNC_NONE, /* a cache: no fsync, every read verifies, a torn blob is dropped */
};

struct kiln_cas_layout {
	bool fanout;             /* ALGO/XX/HEX instead of ALGO/HEX */
	mode_t mode;             /* of a stored blob (0 = 0644) */
	enum kiln_cas_sync sync;
	const char *tmp;         /* temp dir on the same filesystem (NULL = ROOT/tmp) */
};

typedef struct kiln_cas kiln_cas;
typedef struct kiln_cas_writer kiln_cas_writer;

int kiln_cas_open(const char *root, const struct kiln_cas_layout *lay, kiln_cas **out, kiln_error **err);
void kiln_cas_close(kiln_cas *c);
const char *kiln_cas_root(const kiln_cas *c);
/* The blob's path; a malformed digest maps to ROOT/invalid, never outside. */
char *kiln_cas_path(const kiln_cas *c, const char *digest);
bool kiln_cas_has(const kiln_cas *c, const char *digest);
/* A streaming writer hashing with algo; sparse leaves whole zero 4 KiB blocks as holes. */
int kiln_cas_begin(kiln_cas *c, enum kiln_digest_algo algo, bool sparse, kiln_cas_writer **w, kiln_error **err);
int kiln_cas_write(kiln_cas_writer *w, const void *data, size_t len, kiln_error **err);
const char *kiln_cas_writer_path(const kiln_cas_writer *w);
/* Verify against expect (if given), store, free the writer (also on error). */
int kiln_cas_commit(kiln_cas_writer *w, const char *expect, char digest[KILN_DIGEST_MAX], int64_t *size,
		    kiln_error **err);
void kiln_cas_abort(kiln_cas_writer *w);
/* Store bytes under their sha256 (digest is set); put_as checks them against
 * a given digest of any algorithm. */
int kiln_cas_put(kiln_cas *c, const void *data, size_t len, char digest[KILN_DIGEST_MAX], kiln_error **err);
int kiln_cas_put_as(kiln_cas *c, const char *digest, const void *data, size_t len, kiln_error **err);
/* Read and verify a whole blob (max = 0: no limit). */
int kiln_cas_read(const kiln_cas *c, const char *digest, size_t max, char **data, size_t *len, kiln_error **err);
/* Move a finished file in as blob expect (hashed first with KILN_CAS_VERIFY;
 * copied, and so hashed, when it is on another filesystem, keeping holes with
 * KILN_CAS_SPARSE); the file is gone afterwards, stored or not.  A blob
 * already stored stays, with its mtime refreshed (stored again now: the
 * registry's gc grace counts from it). */
/* KILN_CAS_DEFER_SYNC: the file is durable already and the caller fsyncs the
 * blob's directory before it counts it stored (the registry's group commit). */
enum { KILN_CAS_VERIFY = 1, KILN_CAS_SPARSE = 2, KILN_CAS_DEFER_SYNC = 4 };
int kiln_cas_adopt(kiln_cas *c, const char *path, const char *expect, unsigned flags, kiln_error **err);
/* Copy a file in (expect checked if given); digest and size may be NULL. */
int kiln_cas_import(kiln_cas *c, const char *path, const char *expect, bool sparse, char digest[KILN_DIGEST_MAX],
		    int64_t *size, kiln_error **err);

/* Each blob of a fanout tree DIR/XX/HEX — a store's ROOT/ALGO (fanout layout)
 * or a tree of that shape — in directory order: fn gets its path, its HEX name
 * and its lstat.  Only regular files named by a digest's hex of algo count:
 * another name there (a download's .part, a ".tmp-" copy) is work in
 * progress, left to its writer.  A missing DIR or XX is an empty one (a prune
 * races the writers and other prunes).  fn < 0 stops the walk with its error. */
struct stat;
typedef int (*kiln_cas_each_fn)(const char *path, const char *hex, const struct stat *sb, void *ctx,
				kiln_error **err);
int kiln_cas_each(const char *dir, enum kiln_digest_algo algo, kiln_cas_each_fn fn, void *ctx, kiln_error **err);

/* Parse sizes like "512", "64K", "10M", "2G", "1T" (powers of 1024). */
int kiln_parse_size(const char *s, uint64_t *out, kiln_error **err);
/* Parse durations "90", "90s", "30m", "12h", "7d" (unit in either case) into
 * seconds, 0 or more; callers that need more than 0 check it themselves.
 * USAGE error naming s when malformed or out of range. */
int kiln_parse_duration(const char *s, int64_t *out, kiln_error **err);

/* RFC 3339 UTC time of unix seconds t, "2006-01-02T15:04:05Z", into buf
 * (KILN_TIME_MAX bytes); returns buf, so it fits inside a printf. */
#define KILN_TIME_MAX 32
char *kiln_time_rfc3339(int64_t t, char buf[KILN_TIME_MAX]);

#endif
