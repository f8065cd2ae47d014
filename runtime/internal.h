/* internal.h — what runtime/'s files share: a sandbox's agent connection
 * behind one lock, its process table, and the stream a handler writes to. */
#ifndef KILN_RUNTIME_INTERNAL_H
#define KILN_RUNTIME_INTERNAL_H

#include <pthread.h>

#include "runtime/runtime.h"

/* envd keeps an ended process's exit this long for a late Connect. */
#define RT_KEEP_EXIT_MS 30000
#define RT_MAX_OUTPUT_QUEUE (8u << 20) /* per subscriber: a slow client loses output beyond it */

enum rt_ev_kind { RT_EV_STDOUT, RT_EV_STDERR, RT_EV_PTY };
struct rt_ev {
	enum rt_ev_kind kind;
	kiln_buf data;
	struct rt_ev *next;
};

/* One stream reading a process: its own queue of output. */
struct rt_sub {
	struct rt_ev *head, *tail;
	size_t queued;
	struct rt_sub *next;
};

struct rt_proc {
	guest_proc *gp;
	uint32_t pid;
	char *tag;
	json_t *config;      /* the request's ProcessConfig, as List reports it */
	bool pty, has_stdin;
	bool ended;
	struct guest_result res;
	uint64_t ended_at;
	struct rt_sub *subs;
	bool is_watch;       /* a watcher's helper, not listed */
	struct rt_proc *next;
};

struct rt_sandbox {
	pthread_mutex_t mu;
	pthread_cond_t cv;   /* output or an end arrived */
	guest_conn *conn;
	bool broken;         /* the connection failed: every call fails */
	char *broken_why;
	kiln_strv env;
	char *default_user;
	char *default_cwd;   /* the template's WORKDIR: a command's cwd when it names none */
	struct rt_proc *procs;
	struct rt_watcher *watchers;
	uint32_t next_watcher;
	pthread_t pump;
	bool stop;
	int has_bash;        /* -1 not asked yet */
	uint64_t cpu_busy, cpu_total; /* the guest's CPU jiffies at the last metrics call */
};

struct rt_stream {
	const struct rt_writer *w;
	bool gone;
};

/* sandbox.c (all *_locked with sb->mu held) */
void rt_reap_locked(rt_sandbox *sb);
int rt_check_locked(rt_sandbox *sb, kiln_error **err);
/* Start a process; with sub, a subscription to its output made before it
 * starts (so none of it is missed). */
struct rt_proc *rt_proc_start_locked(rt_sandbox *sb, const struct guest_exec_opts *o, struct rt_sub **sub,
				     kiln_error **err);
struct rt_proc *rt_proc_find_locked(rt_sandbox *sb, uint32_t pid, const char *tag);
struct rt_sub *rt_sub_add_locked(struct rt_proc *p);
void rt_sub_drop_locked(struct rt_proc *p, struct rt_sub *s);
void rt_proc_forget_locked(rt_sandbox *sb, struct rt_proc *p);
/* Wait (lock held, released meanwhile) until s has output or p ended, or
 * until the monotonic deadline_ms (0: none); 1 when something is there. */
int rt_wait_locked(rt_sandbox *sb, struct rt_proc *p, struct rt_sub *s, uint64_t deadline_ms);
struct rt_ev *rt_sub_take_locked(struct rt_sub *s);
void rt_ev_free(struct rt_ev *e);
/* The environment of a request: the sandbox's, then extra (NAME=VALUE),
 * with USER and LOGNAME of user; a NULL-terminated vector in out. */
void rt_env_build(rt_sandbox *sb, const char *user, const json_t *envs, kiln_strv *out);
const char *rt_user(rt_sandbox *sb, const struct rt_call *call);
/* E2B's SDK runs commands with /bin/bash -l -c: /bin/sh once a start found
 * the template has no bash (rt_shell_missing, lock held, on the failed
 * start's error); any other cmd as it is.  Costs nothing where bash is. */
const char *rt_shell(rt_sandbox *sb, const char *cmd);
bool rt_shell_missing(rt_sandbox *sb, const char *cmd, const kiln_error *err);
/* Run the agent's `--fs OP PATH [ARG]` as user; out gets stdout.  A failure
 * sets *code from the helper's exit code. */
int rt_fs_helper(rt_sandbox *sb, const char *user, const char *op, const char *path, const char *arg,
		 const void *in, size_t in_len, kiln_buf *out, enum rt_code *code, kiln_error **err);

/* host.c, host_life.c: the sandbox service's state */
#define LABEL_TEAM "kiln.team"
#define LABEL_TEMPLATE "kiln.template" /* the template as the client named it */
#define LABEL_META "meta."
struct rt_entry {
	char *id;
	rt_sandbox *sb;
	unsigned refs;
	bool gone;          /* paused or killed: freed by the last release */
	struct rt_entry *next;
};

struct rt_pending {         /* creates under way: counted against the limits */
	char *team;
	unsigned cpus;
	uint64_t memory_mib;
	struct rt_pending *next;
};

struct rt_host {
	struct rt_host_config cfg;
	unsigned char key[32];  /* envd access tokens are HMAC(key, id) */
	pthread_mutex_t mu;
	struct rt_entry *live, *gone;
	pthread_mutex_t connect_mu;
	struct rt_pending *pending;
	/* pool refill */
	pthread_t refill;
	bool refill_started, stop;
	pthread_cond_t refill_cv;
	kiln_strv refill_q;
};

void rt_entry_free(struct rt_entry *en);
void rt_host_drop(rt_host *h, const char *id);   /* its envd plane, once unused */
void rt_host_queue_refill(rt_host *h, const char *ref);
int rt_host_load_key(const char *path, unsigned char key[32], kiln_error **err);
/* KILN_E_LIMIT naming the limit a new sandbox of cpus and mem would pass. */
int rt_host_check_limits_locked(rt_host *h, const char *team, unsigned cpus, uint64_t mem, bool *host_limit,
				kiln_error **err);
int rt_host_adopt(rt_host *h, const char *id, guest_conn *conn, kiln_error **err);

/* filesystem.c */
/* envd's path rule: "" and ~ are the user's home, a relative path is in it. */
int rt_fs_resolve(rt_sandbox *sb, const char *user, const char *path, char **out, enum rt_code *code,
		  kiln_error **err);
void rt_watchers_free(rt_sandbox *sb);

/* process.c / filesystem.c handlers */
int rt_process_start(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_process_connect(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_process_list(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_process_send_input(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_process_send_signal(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_process_close_stdin(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_process_update(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_fs_stat(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_fs_list_dir(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_fs_make_dir(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_fs_move(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_fs_remove(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_fs_watch_dir(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_fs_create_watcher(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_fs_get_watcher_events(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);
int rt_fs_remove_watcher(rt_sandbox *, const struct rt_call *, const json_t *, json_t **, rt_stream *, enum rt_code *, kiln_error **);

#endif
