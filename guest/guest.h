/* guest.h — the guest agent's contract: the framed wire protocol spoken between
 * the in-VM agent (bin/kiln-agent) and the host over a virtio-serial port, and
 * the host-side client that vm/, builder/ and snapshots/ use to run commands and
 * move files in a guest.  The protocol half (guest/proto*.c) is libc-only because
 * it is linked into the static agent too.  Wire format: docs/agent-protocol.md. */
#ifndef KILN_GUEST_H
#define KILN_GUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ===========================================================================
 * Protocol constants.
 * ========================================================================= */
#define GUEST_PROTO_VERSION 2u
#define GUEST_PORT_NAME "org.kiln.agent"  /* virtio-serial port name */
#define GUEST_FRAME_MAGIC 0x4b41u         /* "KA", first two bytes of a frame */
#define GUEST_HDR_LEN 12u
#define GUEST_MAX_PAYLOAD (1u << 20)      /* a larger frame ends the connection */
#define GUEST_DATA_CHUNK (64u << 10)      /* stdout/stderr/stdin data per frame */
#define GUEST_STDIN_WINDOW (256u << 10)   /* stdin bytes in flight per process */
#define GUEST_MAX_LIST 4096u              /* argv, env, groups entries per exec */
#define GUEST_MAX_SESSIONS 64u            /* live exec/upload/download per connection */

enum guest_frame_type {
	/* either direction */
	GUEST_F_HELLO = 0x01,     /* version + capabilities; the agent's first one means "ready" */
	GUEST_F_PING = 0x02,      /* payload echoed back in PONG */
	GUEST_F_PONG = 0x03,
	/* host -> agent */
	GUEST_F_EXEC = 0x10,      /* start a process under a new id */
	GUEST_F_STDIN = 0x11,     /* data for the process's stdin */
	GUEST_F_STDIN_EOF = 0x12, /* close its stdin */
	GUEST_F_KILL = 0x13,      /* u32 signal, to the process group */
	GUEST_F_UPLOAD = 0x14,    /* tar bytes follow as STDIN frames, extracted into a dir */
	GUEST_F_DOWNLOAD = 0x15,  /* a dir comes back as a tar in STDOUT frames */
	GUEST_F_STAT = 0x16,
	GUEST_F_IDENTITY = 0x17,  /* clock, hostname, entropy + CRNG reseed (restored sandboxes) */
	/* agent -> host */
	GUEST_F_STARTED = 0x20,   /* u32 pid: the process exists */
	GUEST_F_STDOUT = 0x21,
	GUEST_F_STDERR = 0x22,
	GUEST_F_WINDOW = 0x23,    /* u32 stdin bytes consumed: that much more may be sent */
	GUEST_F_EXIT = 0x24,      /* the id is finished (exit code or signal) */
	GUEST_F_STAT_REPLY = 0x25,
	GUEST_F_ERROR = 0x3f,     /* the id failed and is finished; id 0: the connection */
};

/* Capabilities announced in HELLO. */
#define GUEST_CAP_EXEC (1u << 0)
#define GUEST_CAP_STDIN (1u << 1)
#define GUEST_CAP_KILL (1u << 2)
#define GUEST_CAP_UPLOAD (1u << 3)   /* the agent found a tar program */
#define GUEST_CAP_DOWNLOAD (1u << 4)
#define GUEST_CAP_STAT (1u << 5)
#define GUEST_CAP_SETUID (1u << 6)   /* the agent runs as root and can switch user */
#define GUEST_CAP_ROOT (1u << 7)     /* EXEC honours a root directory and GUEST_EXEC_NONET */
#define GUEST_CAP_IDENTITY (1u << 8) /* IDENTITY is served (a guest agent on its port) */
#define GUEST_CAP_EXEC_LOG (1u << 9) /* EXEC keeps a detached process's output in a log dir */
#define GUEST_CAP_XFER_NAME (1u << 10) /* DOWNLOAD of one entry of a directory */

/* EXEC flags. */
#define GUEST_EXEC_STDIN (1u << 0)   /* give the process a stdin pipe (else /dev/null) */
#define GUEST_EXEC_DETACH (1u << 1)  /* outlive the session (start commands, snapshots) */
#define GUEST_EXEC_NONET (1u << 2)   /* a new network namespace with only loopback (up) */

/* ===========================================================================
 * Frames and payload codec (libc only; used by the agent and the host).
 * ========================================================================= */
struct guest_frame {
	uint8_t type;
	uint32_t id;
	uint32_t len;
	const uint8_t *payload; /* valid until the next guest_framer call */
};

/* Header: magic u16, type u8, flags u8 (0), id u32, len u32; big-endian. */
void guest_hdr_encode(uint8_t out[GUEST_HDR_LEN], uint8_t type, uint32_t id, uint32_t len);
/* 0, or -1 with *why set to a static reason (bad magic, flags, oversized). */
int guest_hdr_decode(const uint8_t in[GUEST_HDR_LEN], struct guest_frame *f, const char **why);

/* Reassembles frames from a byte stream. */
struct guest_framer {
	uint8_t *buf;
	size_t off, len, cap;
};
void guest_framer_init(struct guest_framer *fr);
void guest_framer_free(struct guest_framer *fr);
void guest_framer_reset(struct guest_framer *fr);
/* Space for up to *room bytes to read into; commit them with guest_framer_commit.
 * NULL on allocation failure. */
uint8_t *guest_framer_space(struct guest_framer *fr, size_t *room);
void guest_framer_commit(struct guest_framer *fr, size_t n);
/* 1: a frame in *f; 0: need more bytes; -1: the stream is broken (*why). */
int guest_framer_next(struct guest_framer *fr, struct guest_frame *f, const char **why);

/* An output buffer of whole frames.  Allocation failure sets `failed`. */
struct guest_wbuf {
	uint8_t *data;
	size_t len, cap;
	bool failed;
};
void guest_wbuf_free(struct guest_wbuf *w);
void guest_wbuf_put(struct guest_wbuf *w, const void *p, size_t n);
/* Room for n more bytes at w->data + w->len (the caller adds to w->len what
 * it used), so data can be read straight into a frame; NULL on failure. */
uint8_t *guest_wbuf_reserve(struct guest_wbuf *w, size_t n);
/* Start a frame; returns its offset for guest_frame_end. */
size_t guest_frame_begin(struct guest_wbuf *w, uint8_t type, uint32_t id);
/* Patch the length; -1 (frame dropped) if the payload exceeds the limit. */
int guest_frame_end(struct guest_wbuf *w, size_t start);
/* A whole frame with a raw payload. */
int guest_frame_raw(struct guest_wbuf *w, uint8_t type, uint32_t id, const void *p, size_t n);
/* Payload fields: tag u16, len u32, value.  Integers are 8 bytes big-endian. */
void guest_tlv_str(struct guest_wbuf *w, uint16_t tag, const char *s);
void guest_tlv_u64(struct guest_wbuf *w, uint16_t tag, uint64_t v);
void guest_tlv_bytes(struct guest_wbuf *w, uint16_t tag, const void *p, size_t n);
uint32_t guest_get_u32(const uint8_t *p);
void guest_put_u32(uint8_t *p, uint32_t v);

/* Typed messages.  Decoders validate everything (lengths, NULs in strings,
 * list sizes), allocate with malloc and return 0, or -1 with *why (static). */
struct guest_hello {
	uint32_t version;
	uint64_t caps;
	char *agent;   /* "kiln-agent 0.1.0" or "kiln 0.1.0" */
	int64_t pid;
};
struct guest_exec_req {
	char **argv;   /* NULL-terminated, argc >= 1 */
	size_t argc;
	char **env;    /* NULL-terminated; NULL = the default environment */
	size_t envc;
	char *cwd;     /* NULL = "/" */
	int64_t uid, gid; /* -1 = keep the agent's */
	uint32_t *groups; /* supplementary groups (with uid set); NULL = just gid */
	size_t ngroups;
	uint64_t timeout_ms; /* 0 = none */
	uint32_t flags;      /* GUEST_EXEC_* */
	char *user;          /* "user[:group]" resolved in the guest; excludes uid/gid/groups */
	char *root;          /* chroot into this guest directory first (user resolved in
	                      * its /etc/passwd, cwd inside it); NULL = the agent's root */
	char *log_dir;       /* with GUEST_EXEC_DETACH: stdout and stderr go to
	                      * LOG_DIR/PID.out and PID.err, the end to PID.exit */
};
struct guest_exit {
	int32_t code;    /* exit status when signal == 0 */
	int32_t signal;  /* terminating signal, 0 if it exited */
	bool timed_out;  /* the agent killed it at its timeout */
};
struct guest_xfer_req { /* UPLOAD / DOWNLOAD */
	char *dir;
	uint64_t timeout_ms;
	char *name;    /* DOWNLOAD: only this entry of dir (no '/', not . or ..) */
};
struct guest_stat_req {
	char *path;
	bool follow;   /* stat() instead of lstat() */
	bool xattrs;   /* also list extended attributes */
};
struct guest_xattr {
	char *name;    /* "trusted.overlay.opaque", "security.capability", ... */
	uint8_t *value;
	size_t len;
};
#define GUEST_MAX_XATTRS 256u
struct guest_stat {
	uint32_t mode; /* st_mode: type and permission bits */
	uint32_t uid, gid;
	uint64_t size;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
	char *link;    /* symlink target, else NULL */
	struct guest_xattr *xattrs; /* with GUEST_STAT_XATTRS */
	size_t nxattrs;
};
/* IDENTITY: what makes a guest restored from a snapshot its own.  Applied in
 * this order: the wall clock, the hostname, then the entropy is added to the
 * kernel's input pool (credited) and the CRNG reseeded from it at once. */
#define GUEST_MAX_ENTROPY 512u
#define GUEST_MAX_HOSTNAME 64u
struct guest_identity {
	bool set_time;
	int64_t time_sec;   /* CLOCK_REALTIME */
	uint32_t time_nsec; /* < 1e9 */
	char *hostname;     /* NULL: keep; 1-64 bytes */
	uint8_t *entropy;   /* NULL: none; at most GUEST_MAX_ENTROPY bytes */
	size_t entropy_len;
	/* eth0's own MAC and IPv4 address (a restored guest keeps its
	 * template's, which the snapshot's device state also carries): set
	 * after the entropy, the default route re-added via gateway; a guest
	 * without eth0 ignores them.  An older agent skips the fields. */
	bool set_net;
	uint8_t mac[6];
	uint32_t ipv4, gateway; /* host order */
	uint8_t prefix;         /* 1-32 */
};
struct guest_error_msg {
	int32_t errnum; /* errno in the guest, 0 if none */
	char *msg;
};

void guest_encode_hello(struct guest_wbuf *w, uint32_t id, const struct guest_hello *m);
int guest_decode_hello(const uint8_t *p, size_t n, struct guest_hello *m, const char **why);
void guest_hello_free(struct guest_hello *m);
void guest_encode_exec(struct guest_wbuf *w, uint32_t id, const struct guest_exec_req *m);
int guest_decode_exec(const uint8_t *p, size_t n, struct guest_exec_req *m, const char **why);
void guest_exec_req_free(struct guest_exec_req *m);
void guest_encode_exit(struct guest_wbuf *w, uint32_t id, const struct guest_exit *m);
int guest_decode_exit(const uint8_t *p, size_t n, struct guest_exit *m, const char **why);
void guest_encode_xfer(struct guest_wbuf *w, uint8_t type, uint32_t id, const struct guest_xfer_req *m);
int guest_decode_xfer(const uint8_t *p, size_t n, struct guest_xfer_req *m, const char **why);
void guest_xfer_req_free(struct guest_xfer_req *m);
void guest_encode_stat_req(struct guest_wbuf *w, uint32_t id, const struct guest_stat_req *m);
int guest_decode_stat_req(const uint8_t *p, size_t n, struct guest_stat_req *m, const char **why);
void guest_stat_req_free(struct guest_stat_req *m);
/* -1 (nothing written) if the reply would exceed the frame limit. */
int guest_encode_stat(struct guest_wbuf *w, uint32_t id, const struct guest_stat *m);
int guest_decode_stat(const uint8_t *p, size_t n, struct guest_stat *m, const char **why);
void guest_stat_free(struct guest_stat *m);
void guest_encode_identity(struct guest_wbuf *w, uint32_t id, const struct guest_identity *m);
int guest_decode_identity(const uint8_t *p, size_t n, struct guest_identity *m, const char **why);
void guest_identity_free(struct guest_identity *m);
void guest_encode_error(struct guest_wbuf *w, uint32_t id, const struct guest_error_msg *m);
int guest_decode_error(const uint8_t *p, size_t n, struct guest_error_msg *m, const char **why);
void guest_error_msg_free(struct guest_error_msg *m);
/* "EXEC", "STDOUT", ... or "0x7e" style for unknown types (static or in buf). */
const char *guest_frame_name(uint8_t type, char buf[8]);

/* The agent's file helpers (`kiln-agent --fs OP ...`, run through EXEC as the
 * request's user so that what it makes is that user's): an entry is 10
 * NUL-terminated fields — name, type (f d l o: a symlink's is its target's),
 * path, size, mode (octal st_mode), owner, group, mtime sec, mtime nsec,
 * symlink target; watch events are 3 — "start" once the watch is set, or
 * type (create write remove rename chmod), name relative to the directory,
 * "".  Exit codes below, the message on stderr. */
#define GUEST_FS_FIELDS 10
#define GUEST_FS_EXIT_FAIL 1
#define GUEST_FS_EXIT_NOTFOUND 2
#define GUEST_FS_EXIT_EXISTS 3
#define GUEST_FS_EXIT_INVALID 4
/* `kiln-agent --pty COLS ROWS PROGRAM ARGS...` reads its stdin as messages
 * type u8, length u32 big-endian, data: input for the terminal, or a resize
 * (u16 cols, u16 rows); it writes what the terminal shows to stdout. */
#define GUEST_PTY_INPUT 0
#define GUEST_PTY_RESIZE 1

/* ===========================================================================
 * Host-side client (libkiln).  A connection is used from one thread at a
 * time; every call pumps the connection and so dispatches output callbacks
 * of all running processes, which is how several execs run concurrently.
 * All errors come back as kiln_error with context "agent exec: ...".
 * ========================================================================= */
typedef struct kiln_error kiln_error;
typedef struct guest_conn guest_conn;
typedef struct guest_proc guest_proc;

/* Connect to the unix socket behind the agent's port (QEMU's chardev, or an
 * agent run with --listen), retrying until the socket accepts, then wait for
 * the agent's HELLO and check its version.  timeout_ms covers all of it. */
guest_conn *guest_connect(const char *socket_path, int timeout_ms, kiln_error **err);
/* Connect and send HELLO without waiting for the agent's: requests can be
 * queued at once and go out with it, saving a round trip through the guest.
 * For a caller that knows the agent's protocol version (a restored snapshot
 * records it): the agent's HELLO is checked when it arrives — another version
 * breaks the connection, and so does no HELLO within timeout_ms (which also
 * bounds the connect).  Capabilities are known only once it has come. */
guest_conn *guest_connect_nowait(const char *socket_path, int timeout_ms, kiln_error **err);
/* The same over an already connected stream fd (taken over, even on failure). */
guest_conn *guest_conn_from_fd(int fd, int timeout_ms, kiln_error **err);
void guest_close(guest_conn *c);
/* Keep fd open as long as the connection (e.g. a lock held while connected);
 * guest_close closes it. */
void guest_conn_hold_fd(guest_conn *c, int fd);
/* The connection's socket (for checking its peer). */
int guest_conn_fd(const guest_conn *c);
/* What the agent announced. */
uint32_t guest_conn_version(const guest_conn *c);
uint64_t guest_conn_caps(const guest_conn *c);
const char *guest_conn_agent(const guest_conn *c);
/* Round trip; fails if no PONG arrives within timeout_ms. */
int guest_ping(guest_conn *c, int timeout_ms, kiln_error **err);

typedef void (*guest_output_fn)(void *user, const void *data, size_t len);

struct guest_exec_opts {
	const char *const *argv;  /* either argv ... */
	const char *shell;        /* ... or a string run as /bin/sh -c STRING */
	const char *const *env;   /* NULL: PATH=/usr/local/sbin:...:/bin only */
	const char *cwd;          /* NULL: "/" */
	const char *run_as;       /* "name|uid[:group|gid]", resolved against the guest's
				   * /etc/passwd and /etc/group (sets HOME unless env has it) */
	int64_t uid, gid;         /* or numeric ids; -1: keep (root) */
	const uint32_t *groups;   /* supplementary groups, NULL: just gid */
	size_t ngroups;
	uint64_t timeout_ms;      /* 0: none; the agent kills the process group */
	bool want_stdin;          /* guest_proc_write/close_stdin will be used */
	bool detach;              /* keep running when this connection ends (or the VM is
				   * snapshotted and restored): output is then discarded */
	const char *root;         /* run chrooted into this guest directory (run_as and cwd
				   * taken inside it), as a build step in its own overlay */
	bool no_network;          /* in a fresh network namespace with only loopback */
	const char *log_dir;      /* with detach: the agent writes the output to
				   * LOG_DIR/PID.out, PID.err and the end to PID.exit
				   * (GUEST_CAP_EXEC_LOG; refused by an older agent) */
	guest_output_fn on_stdout, on_stderr; /* NULL: discard */
	void *user;
};
/* Fill defaults: uid/gid -1, everything else 0/NULL. */
void guest_exec_opts_init(struct guest_exec_opts *o);

struct guest_result {
	int exit_code;   /* valid when signal == 0 */
	int signal;      /* the signal that ended it, else 0 */
	bool timed_out;
};

/* Start a process; returns once the agent reports it started (or failed to:
 * bad cwd, missing program, ... come back as errors here). */
guest_proc *guest_spawn(guest_conn *c, const struct guest_exec_opts *o, int timeout_ms, kiln_error **err);
/* Send stdin; blocks (pumping the connection) while the agent's window is full. */
int guest_proc_write(guest_proc *p, const void *data, size_t len, int timeout_ms, kiln_error **err);
int guest_proc_close_stdin(guest_proc *p, kiln_error **err);
int guest_proc_kill(guest_proc *p, int sig, kiln_error **err);
pid_t guest_proc_pid(const guest_proc *p);
/* Wait for the exit (timeout_ms < 0: forever); output callbacks fire meanwhile. */
int guest_proc_wait(guest_proc *p, int timeout_ms, struct guest_result *res, kiln_error **err);
/* Handle what the agent sent, waiting up to timeout_ms for something to come
 * (output callbacks fire): for a caller that also waits on other fds. */
int guest_pump(guest_conn *c, int timeout_ms, kiln_error **err);
/* Send what is queued (an unawaited request) without waiting for answers. */
int guest_flush(guest_conn *c, int timeout_ms, kiln_error **err);
/* true once the exit has arrived (after any guest_* call pumped it in). */
bool guest_proc_done(const guest_proc *p);
/* Forget the process (killing it with SIGKILL if it still runs, unless it
 * was started with detach). */
void guest_proc_free(guest_proc *p);

/* spawn + optional stdin data (then EOF) + wait.  wait_ms bounds the whole
 * call on the host side (<0: forever) independently of o->timeout_ms. */
int guest_exec(guest_conn *c, const struct guest_exec_opts *o, const void *stdin_data, size_t stdin_len,
	       int wait_ms, struct guest_result *res, kiln_error **err);

/* Give a (restored) guest its identity (struct guest_identity; strings are
 * only read).  With wait, returns once the agent applied it.  Without, the
 * request is only queued and goes out with the next request on c — frames are
 * handled in order, so it is in force before a following EXEC starts — and a
 * failure then breaks the connection (the next call fails with the reason). */
int guest_set_identity(guest_conn *c, const struct guest_identity *m, bool wait, int timeout_ms, kiln_error **err);

/* Stream a tar read from tar_fd into guest_dir (created if missing), extracted
 * by the guest's tar with owners, modes and times kept. */
int guest_upload_tar(guest_conn *c, const char *guest_dir, int tar_fd, int timeout_ms, kiln_error **err);
/* Pack host_dir (libarchive, numeric owners) and upload it into guest_dir. */
int guest_upload_dir(guest_conn *c, const char *host_dir, const char *guest_dir, int timeout_ms,
		     kiln_error **err);
/* The same with every entry owned by uid:gid (-1 keeps the host's), as for
 * COPY --chown or for a build context that must land as root's. */
int guest_upload_dir_owned(guest_conn *c, const char *host_dir, const char *guest_dir, int64_t uid, int64_t gid,
			   int timeout_ms, kiln_error **err);
/* The extended attributes of a tree, which the guest's tar (busybox) does
 * not carry: the agent lists or sets them (`kiln-agent --xattrs-dump/-apply`,
 * run through EXEC), paths relative to the tree's directory. */
struct guest_path_xattr {
	char *path;    /* relative, "/"-separated */
	struct guest_xattr x;
};
struct guest_xattr_list {
	struct guest_path_xattr *v;
	size_t n, cap;
};
void guest_xattr_list_add(struct guest_xattr_list *l, const char *path, const char *name, const void *value,
			  size_t len);
void guest_xattr_list_free(struct guest_xattr_list *l);
/* Every attribute under guest_dir (trusted.overlay.* included), sorted by path. */
int guest_xattrs_dump(guest_conn *c, const char *guest_dir, struct guest_xattr_list *out, int timeout_ms,
		      kiln_error **err);
/* Set them under guest_dir; one the guest cannot hold (no user.* on tmpfs
 * before Linux 6.6) is warned about, not an error. */
int guest_xattrs_apply(guest_conn *c, const char *guest_dir, const struct guest_xattr_list *l, int timeout_ms,
		       kiln_error **err);
/* Write guest_dir as a tar to out_fd. */
int guest_download_tar(guest_conn *c, const char *guest_dir, int out_fd, int timeout_ms, kiln_error **err);
/* Download one entry `name` of guest_dir (a file, a directory with what is
 * under it, a symlink) and extract it into host_dir as host_name, with the
 * same care as below (GUEST_CAP_XFER_NAME). */
int guest_download_entry(guest_conn *c, const char *guest_dir, const char *name, const char *host_dir,
			 const char *host_name, int timeout_ms, kiln_error **err);
/* Upload host_path (a file, or a directory and what is under it) into
 * guest_dir under the name guest_name, owners and modes kept. */
int guest_upload_entry(guest_conn *c, const char *host_path, const char *guest_dir, const char *guest_name,
		       int timeout_ms, kiln_error **err);
/* Download guest_dir as a stream of entries, nothing written to disk: fn gets
 * each entry but the top directory, its name (and a hard link's target)
 * made relative, without "./" or a trailing "/", never empty, ".", ".." or
 * with an empty component (such a name fails the download).  fn may read the
 * entry's data from ar (archive_read_data); a negative return stops it. */
struct archive;
struct archive_entry;
typedef int (*guest_entry_fn)(void *user, struct archive *ar, struct archive_entry *e, kiln_error **err);
int guest_download_each(guest_conn *c, const char *guest_dir, guest_entry_fn fn, void *user, int timeout_ms,
			kiln_error **err);
/* Download guest_dir and extract it under host_dir (libarchive: ".." refused,
 * absolute names kept inside host_dir, never written through a symlink;
 * owners kept when root).  The guest is not trusted here. */
int guest_download_dir(guest_conn *c, const char *guest_dir, const char *host_dir, int timeout_ms,
		       kiln_error **err);

/* lstat a path in the guest (stat with GUEST_STAT_FOLLOW; its extended
 * attributes too with GUEST_STAT_XATTRS — how overlayfs marks opaque
 * directories, how file capabilities are kept).  A missing path is an error
 * of kind KILN_E_NOTFOUND.  Free the result with guest_stat_free. */
#define GUEST_STAT_FOLLOW 1u
#define GUEST_STAT_XATTRS 2u
int guest_stat_path(guest_conn *c, const char *path, unsigned flags, struct guest_stat *st, int timeout_ms,
		    kiln_error **err);
/* The value of one attribute from a guest_stat_path reply, or NULL. */
const struct guest_xattr *guest_stat_xattr(const struct guest_stat *st, const char *name);

#endif
