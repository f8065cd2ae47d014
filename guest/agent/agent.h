/* agent.h — internal header of the in-VM agent (bin/kiln-agent): the
 * connection state shared by the event loop (main.c), the process sessions
 * (session.c) and the file requests (files.c).  Static, libc only. */
#ifndef KILN_AGENT_H
#define KILN_AGENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "guest/guest.h"

#define AGENT_VERSION "kiln-agent 0.1.0"
/* Child pipes are not read while this much output waits for the host, so a
 * flooding command is slowed down instead of growing the agent. */
#define AGENT_OUT_HIGH (1u << 20)
/* Once its process has exited, a session's pipes are closed after this long
 * without data (a background child may hold them open forever). */
#define AGENT_LINGER_MS 250
#define AGENT_ERRCAP 2048

enum session_kind { S_EXEC, S_UPLOAD, S_DOWNLOAD };

struct session {
	uint32_t id;
	enum session_kind kind;
	pid_t pid;             /* also the process group id */
	bool reaped;
	int status;            /* from waitpid once reaped */
	int fd_out, fd_err, fd_in; /* -1 once closed */
	uint8_t *in;           /* stdin received, not yet written to the child */
	size_t in_off, in_len, in_cap;
	bool in_eof;           /* the host closed stdin */
	uint64_t deadline;     /* monotonic ms, 0 = none */
	uint64_t quiet_since;  /* last pipe activity after the exit */
	bool timed_out;
	bool detached;         /* survives the end of its session (then id 0: orphaned) */
	char *what;            /* "tar -x into /dir" for transfer errors */
	char *log_dir;         /* detached with a log dir: PID.exit is written there at its end */
	char errcap[AGENT_ERRCAP]; /* stderr of transfer sessions */
	size_t errlen;
};

struct agent {
	int chan;              /* the byte stream to the host */
	bool device;           /* a virtio-serial port: EOF means "host gone", not "exit" */
	int listen_fd;         /* --listen: the next host connects here (-1 otherwise) */
	bool once;             /* --listen --once: exit after the first connection */
	bool quit;             /* SIGTERM or SIGINT arrived */
	bool connected;
	bool broken;           /* framing lost: ignore input until the host reconnects */
	int sigfd;
	struct guest_framer in;
	struct guest_wbuf out;
	size_t out_off;
	struct session *sess[GUEST_MAX_SESSIONS];
	char *tar[3];          /* tar program (+ "tar" for busybox), NULL-terminated */
	bool tar_self;         /* downloads through our own --tar-create (tarc.c) */
	uint64_t caps;
	int verbose;
};

uint64_t agent_now_ms(void);
void agent_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Queue frames for the host. */
void agent_send_error(struct agent *a, uint32_t id, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
size_t agent_out_pending(const struct agent *a);

/* session.c */
struct session *session_find(struct agent *a, uint32_t id);
void session_exec(struct agent *a, uint32_t id, struct guest_exec_req *req);
/* Spawn argv with pipes; kind decides what is forwarded.  NULL on failure
 * (an ERROR frame has been queued). */
struct session *session_spawn(struct agent *a, uint32_t id, enum session_kind kind, char *const argv[],
			      char *const env[], const char *cwd, const struct guest_exec_req *cred,
			      bool want_stdin, uint64_t timeout_ms);
void session_stdin(struct agent *a, struct session *s, const uint8_t *p, size_t n);
void session_stdin_eof(struct agent *a, struct session *s);
void session_kill(struct session *s, int sig);
/* Handle the signalfd: reap every exited child (sessions or adopted
 * orphans); SIGTERM/SIGINT set a->quit. */
void sessions_reap(struct agent *a);
/* Service pipes after poll; finish sessions that are done. */
void session_io(struct agent *a, struct session *s, short rev_out, short rev_err, short rev_in);
void sessions_tick(struct agent *a);
/* End the host's session: kill and forget its processes; detached ones are
 * kept as orphans (id 0) whose output is drained and discarded. */
void sessions_drop_all(struct agent *a);
int sessions_next_timeout(struct agent *a);
/* At exit: forget what is left (detached orphans keep running). */
void sessions_free_all(struct agent *a);
/* While no host is connected: keep orphans' pipes flowing (output discarded). */
void sessions_drain_orphans(struct agent *a);

/* user.c */
#define USER_MAX_GROUPS 256
struct user_cred {
	int64_t uid, gid;
	uint32_t groups[USER_MAX_GROUPS];
	size_t ngroups;
	char name[256];
	char home[1024];
};
/* Resolve "user[:group]" in the guest's /etc/passwd and /etc/group; -1 with why. */
/* root: read ROOT/etc/passwd and ROOT/etc/group (NULL: the agent's own). */
int user_resolve(const char *spec, const char *root, struct user_cred *out, char *why, size_t whylen);
/* The name of uid (file /etc/passwd) or gid (/etc/group); else the number, -1. */
int user_name_of(const char *file, uint32_t id, char *out, size_t len);

/* identity.c: the IDENTITY request (clock, hostname, entropy + reseed). */
void identity_apply(struct agent *a, uint32_t id, const uint8_t *p, size_t n);

/* files.c */
void files_find_tar(struct agent *a, const char *opt);
void files_stat(struct agent *a, uint32_t id, const uint8_t *p, size_t n);
void files_xfer(struct agent *a, uint8_t type, uint32_t id, const uint8_t *p, size_t n);
/* xattrs.c: `--xattrs-dump DIR` / `--xattrs-apply DIR`, exit codes */
int xattrs_dump(const char *dir);
int xattrs_apply(const char *dir);
/* tarc.c: `--tar-create DIR [NAME]`: DIR's tree (or its entry NAME) as a tar on stdout */
int tar_create(const char *dir, const char *name);

/* fsops.c: `--fs OP ARGS...`, envd's filesystem calls run as the caller's
 * user through EXEC; exit codes GUEST_FS_EXIT_*, the message on stderr. */
int fs_main(int argc, char **argv);
/* pty.c: `--pty COLS ROWS PROGRAM ARGS...` */
int pty_main(int argc, char **argv);

/* relay.c: `--relay PATH MODE UID GID` (an ssh-agent socket for a build step). */
int agent_relay(const char *path, const char *mode, const char *uid, const char *gid);
/* relay.c: `--connect PORT`: stdin/stdout joined to 127.0.0.1:PORT in the
 * guest; exit 3 with the reason on stderr when nothing listens there. */
int agent_connect(const char *port);

#endif
