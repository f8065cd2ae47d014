/* internal.h — the host-side client's shared state (client*.c only): the
 * connection with its frame reader and writer, and the table of requests in
 * flight that incoming frames are routed to by id. */
#ifndef KILN_GUEST_INTERNAL_H
#define KILN_GUEST_INTERNAL_H

#include "kiln.h"
#include "guest/guest.h"

enum req_kind { R_PROC, R_PING, R_STAT, R_UPLOAD, R_DOWNLOAD, R_IDENT };

/* A request in flight; guest_proc is the public name for the exec kind. */
struct guest_proc {
	guest_conn *c;
	enum req_kind kind;
	uint32_t id;
	pid_t pid;
	bool started, done, failed;
	struct guest_result res;
	char *errmsg;          /* the agent's ERROR text */
	int errnum;
	size_t window;         /* stdin bytes we may still send */
	bool stdin_open;
	bool detached;         /* not killed when the handle is freed */
	bool unwaited;         /* nobody waits: freed at its reply, an ERROR breaks the connection */
	guest_output_fn on_stdout, on_stderr;
	void *user;
	uint8_t *reply;        /* PONG / STAT_REPLY payload */
	size_t reply_len;
	struct guest_proc *next;
};

struct guest_conn {
	int fd;
	int hold_fd;           /* closed with the connection (guest_conn_hold_fd), or -1 */
	struct guest_framer in;
	struct guest_wbuf out;
	uint32_t next_id;
	struct guest_hello hello;
	bool have_hello;
	bool late_hello;       /* guest_connect_nowait: the HELLO is checked when it comes ... */
	uint64_t hello_deadline; /* ... and must come by then (monotonic ms) */
	char *broken;          /* why the connection is unusable, once it is */
	enum kiln_errkind broken_kind;
	struct guest_proc *reqs;
};

/* Absolute deadline in ms on CLOCK_MONOTONIC from a timeout (<0: never). */
uint64_t gc_deadline(int timeout_ms);
/* Milliseconds left until a deadline (-1 for none, 0 once passed). */
int gc_remaining(uint64_t deadline);
/* Fail with the connection's error if it is broken. */
int gc_check(guest_conn *c, kiln_error **err);
/* Write everything queued in c->out. */
int gc_flush(guest_conn *c, uint64_t deadline, kiln_error **err);
/* Wait up to the deadline for input and dispatch the frames that arrived.
 * 0 (also on timeout: callers re-check their condition), -1 when broken. */
int gc_pump(guest_conn *c, uint64_t deadline, kiln_error **err);
/* Pump until *flag or the deadline; "what" names the wait in the timeout error. */
int gc_wait_for(guest_conn *c, const bool *flag, uint64_t deadline, const char *what, kiln_error **err);
/* Until the agent started p's request (or ended it); at the deadline the
 * request is killed in the guest (what the caller gives up on must not run
 * on there) and the error names what.  gc_send_kill: that kill, best effort. */
int gc_wait_started(struct guest_proc *p, uint64_t deadline, const char *what, kiln_error **err);
void gc_send_kill(guest_conn *c, uint32_t id, int sig);
struct guest_proc *gc_req_new(guest_conn *c, enum req_kind kind);
void gc_req_free(struct guest_proc *p);
/* The agent's ERROR for a request, as a kiln_error. */
int gc_req_error(struct guest_proc *p, kiln_error **err);

#endif
