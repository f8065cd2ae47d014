/* test_guest_robust.c — the real agent under abuse: raw bad frames (error
 * frames, never a crash), sessions replaced by a new HELLO, detached
 * processes, the stdin window, the --listen mode with guest_connect, and a
 * flooding command that must not stall or bloat the agent.  The client's side
 * of misbehaviour is in test_guest_client.c. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln.h"
#include "guest/guest.h"
#include "test.h"

static const char *agent_bin(void)
{
	const char *p = getenv("KILN_AGENT");
	return p && *p ? p : "bin/kiln-agent";
}

/* Start the agent on a socketpair; returns the host end (raw). */
static int spawn_agent(pid_t *pid)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -1;
	*pid = fork();
	if (*pid == 0) {
		dup2(sv[1], 3);
		execl(agent_bin(), agent_bin(), "--fd", "3", (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	return sv[0];
}

struct raw {
	int fd;
	struct guest_framer fr;
	uint8_t type;
	uint32_t id;
	uint8_t payload[4096];
	uint32_t len;
};

/* Next frame from the agent: 1, 0 on EOF/timeout, -1 on a framing error. */
static int next_frame(struct raw *r, int timeout_ms)
{
	struct guest_frame f;
	const char *why = NULL;

	for (;;) {
		int n = guest_framer_next(&r->fr, &f, &why);
		struct pollfd p = { r->fd, POLLIN, 0 };
		size_t room;
		uint8_t *sp;
		ssize_t got;
		if (n > 0) {
			r->type = f.type;
			r->id = f.id;
			r->len = f.len < sizeof(r->payload) ? f.len : sizeof(r->payload);
			memcpy(r->payload, f.payload, r->len);
			return 1;
		}
		if (n < 0)
			return -1;
		if (poll(&p, 1, timeout_ms) <= 0)
			return 0;
		sp = guest_framer_space(&r->fr, &room);
		got = read(r->fd, sp, room);
		if (got <= 0)
			return 0;
		guest_framer_commit(&r->fr, (size_t)got);
	}
}

static void send_bytes(int fd, const void *p, size_t n)
{
	if (write(fd, p, n) != (ssize_t)n)
		printf("# short write\n");
}

static void send_frame(int fd, uint8_t type, uint32_t id, const void *p, size_t n)
{
	struct guest_wbuf w = { 0 };

	guest_frame_raw(&w, type, id, p, n);
	send_bytes(fd, w.data, w.len);
	guest_wbuf_free(&w);
}

static char *error_text(struct raw *r)
{
	struct guest_error_msg m;
	const char *why = NULL;
	static char buf[1024];

	if (r->type != GUEST_F_ERROR || guest_decode_error(r->payload, r->len, &m, &why) < 0)
		return NULL;
	snprintf(buf, sizeof(buf), "%s", m.msg);
	guest_error_msg_free(&m);
	return buf;
}

static int exit_status(pid_t pid)
{
	int st = -1;

	waitpid(pid, &st, 0);
	return st;
}

static void test_bad_frames_keep_connection(void)
{
	struct raw r = { 0 };
	pid_t pid;
	char *msg;
	uint8_t kill_short[2] = { 0, 9 };
	struct guest_wbuf w = { 0 };
	size_t start;

	r.fd = spawn_agent(&pid);
	guest_framer_init(&r.fr);
	CHECK_INT(next_frame(&r, 5000), 1);
	CHECK_INT(r.type, GUEST_F_HELLO);

	/* unknown type: ERROR for that id */
	send_frame(r.fd, 0x7e, 5, "x", 1);
	CHECK_INT(next_frame(&r, 5000), 1);
	CHECK_INT(r.id, 5);
	msg = error_text(&r);
	CHECK(msg && strstr(msg, "unexpected frame type 0x7e"));

	/* an agent-to-host type sent to the agent */
	send_frame(r.fd, GUEST_F_STDOUT, 6, "x", 1);
	CHECK_INT(next_frame(&r, 5000), 1);
	msg = error_text(&r);
	CHECK(r.id == 6 && msg && strstr(msg, "unexpected frame type STDOUT"));

	/* EXEC with a truncated field */
	send_frame(r.fd, GUEST_F_EXEC, 7, "\0\1\0\0\0\x09ls", 8);
	CHECK_INT(next_frame(&r, 5000), 1);
	msg = error_text(&r);
	CHECK(r.id == 7 && msg && strstr(msg, "bad EXEC frame: field runs past the end"));

	/* EXEC with id 0 */
	start = guest_frame_begin(&w, GUEST_F_EXEC, 0);
	guest_tlv_str(&w, 1, "true");
	guest_frame_end(&w, start);
	send_bytes(r.fd, w.data, w.len);
	w.len = 0;
	CHECK_INT(next_frame(&r, 5000), 1);
	msg = error_text(&r);
	CHECK(r.id == 0 && msg && strstr(msg, "reserved"));

	/* KILL with a 2-byte payload */
	send_frame(r.fd, GUEST_F_KILL, 8, kill_short, 2);
	CHECK_INT(next_frame(&r, 5000), 1);
	msg = error_text(&r);
	CHECK(msg && strstr(msg, "bad KILL frame"));

	/* STAT without a path, UPLOAD with a relative dir */
	send_frame(r.fd, GUEST_F_STAT, 9, NULL, 0);
	CHECK_INT(next_frame(&r, 5000), 1);
	msg = error_text(&r);
	CHECK(r.id == 9 && msg && strstr(msg, "stat without a path"));
	start = guest_frame_begin(&w, GUEST_F_UPLOAD, 10);
	guest_tlv_str(&w, 1, "relative");
	guest_frame_end(&w, start);
	send_bytes(r.fd, w.data, w.len);
	w.len = 0;
	CHECK_INT(next_frame(&r, 5000), 1);
	msg = error_text(&r);
	CHECK(r.id == 10 && msg && strstr(msg, "absolute"));

	/* HELLO of another protocol version */
	start = guest_frame_begin(&w, GUEST_F_HELLO, 0);
	guest_tlv_u64(&w, 1, 99);
	guest_frame_end(&w, start);
	send_bytes(r.fd, w.data, w.len);
	w.len = 0;
	CHECK_INT(next_frame(&r, 5000), 1);
	msg = error_text(&r);
	CHECK(msg && strstr(msg, "host speaks agent protocol 99"));

	/* STDIN / KILL for ids that do not exist are ignored; the agent still answers. */
	send_frame(r.fd, GUEST_F_STDIN, 77, "data", 4);
	send_frame(r.fd, GUEST_F_STDIN_EOF, 77, NULL, 0);
	send_frame(r.fd, GUEST_F_PING, 11, "pp", 2);
	CHECK_INT(next_frame(&r, 5000), 1);
	CHECK(r.type == GUEST_F_PONG && r.id == 11 && r.len == 2 && memcmp(r.payload, "pp", 2) == 0);

	/* A frame cut short by EOF: the agent just exits normally. */
	send_bytes(r.fd, "KA\x02\0\0\0\0\1\0\0\0\x10half", 16);
	shutdown(r.fd, SHUT_WR);
	CHECK_INT(next_frame(&r, 5000), 0);
	{
		int st = exit_status(pid);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	close(r.fd);
	guest_framer_free(&r.fr);
	guest_wbuf_free(&w);
}

/* A virtio port shows no EOF when the host reconnects quickly: the new host's
 * HELLO is what ends the old session, its processes and its pending output. */
static void test_hello_starts_new_session(void)
{
	struct raw r = { 0 };
	struct guest_wbuf w = { 0 };
	struct guest_hello h = { .version = GUEST_PROTO_VERSION, .agent = "test", .pid = 1 };
	pid_t pid, sleeper = 0;
	size_t start;
	bool exited = false;

	r.fd = spawn_agent(&pid);
	guest_framer_init(&r.fr);
	CHECK_INT(next_frame(&r, 5000), 1);
	start = guest_frame_begin(&w, GUEST_F_EXEC, 1);
	guest_tlv_str(&w, 1, "sleep");
	guest_tlv_str(&w, 1, "100");
	guest_frame_end(&w, start);
	send_bytes(r.fd, w.data, w.len);
	CHECK_INT(next_frame(&r, 5000), 1);
	CHECK_INT(r.type, GUEST_F_STARTED);
	if (r.type == GUEST_F_STARTED)
		sleeper = (pid_t)guest_get_u32(r.payload);
	/* "Reconnect": a new HELLO, then the same id again. */
	w.len = 0;
	guest_encode_hello(&w, 0, &h);
	start = guest_frame_begin(&w, GUEST_F_EXEC, 1);
	guest_tlv_str(&w, 1, "true");
	guest_frame_end(&w, start);
	send_bytes(r.fd, w.data, w.len);
	CHECK_INT(next_frame(&r, 5000), 1);
	CHECK_INT(r.type, GUEST_F_HELLO);
	/* No EXIT for the old id 1 may come: it belonged to the old host. */
	for (int i = 0; i < 4 && next_frame(&r, 5000) == 1; i++) {
		CHECK(r.type != GUEST_F_ERROR);
		if (r.type == GUEST_F_EXIT) {
			struct guest_exit ex;
			const char *why;
			CHECK_INT(guest_decode_exit(r.payload, r.len, &ex, &why), 0);
			CHECK(ex.code == 0 && ex.signal == 0); /* true's, not the killed sleep's */
			exited = true;
			break;
		}
	}
	CHECK(exited);
	/* The old process is gone. */
	for (int i = 0; i < 50 && sleeper > 0 && kill(sleeper, 0) == 0; i++)
		usleep(20000);
	CHECK(sleeper > 0 && kill(sleeper, 0) < 0);
	close(r.fd);
	exit_status(pid);
	guest_framer_free(&r.fr);
	guest_wbuf_free(&w);
}

static pid_t raw_exec(struct raw *r, uint32_t id, const char *script, uint32_t flags)
{
	struct guest_wbuf w = { 0 };
	size_t start = guest_frame_begin(&w, GUEST_F_EXEC, id);

	guest_tlv_str(&w, 1, "/bin/sh");
	guest_tlv_str(&w, 1, "-c");
	guest_tlv_str(&w, 1, script);
	guest_tlv_u64(&w, 9, flags);
	guest_frame_end(&w, start);
	send_bytes(r->fd, w.data, w.len);
	guest_wbuf_free(&w);
	if (next_frame(r, 5000) != 1 || r->type != GUEST_F_STARTED || r->id != id)
		return -1;
	return (pid_t)guest_get_u32(r->payload);
}

/* More stdin than the window allows is a host bug: a connection-level ERROR,
 * the excess dropped, and the agent carries on. */
static void test_stdin_window_enforced(void)
{
	struct raw r = { 0 };
	pid_t pid, child;
	char *chunk = calloc(1, GUEST_DATA_CHUNK);
	bool got_error = false;

	r.fd = spawn_agent(&pid);
	guest_framer_init(&r.fr);
	CHECK_INT(next_frame(&r, 5000), 1);
	child = raw_exec(&r, 3, "sleep 5", GUEST_EXEC_STDIN);
	CHECK(child > 0);
	/* sleep never reads: the pipe (as deep as the window) takes 256 KiB,
	 * the agent's queue 256 KiB more, beyond that is over the window. */
	for (unsigned i = 0; i < 2 * (GUEST_STDIN_WINDOW / GUEST_DATA_CHUNK) + 3; i++)
		send_frame(r.fd, GUEST_F_STDIN, 3, chunk, GUEST_DATA_CHUNK);
	for (int i = 0; i < 20 && !got_error && next_frame(&r, 3000) == 1; i++) {
		char *msg = error_text(&r);
		if (msg && r.id == 0 && strstr(msg, "exceeds the 262144 byte window"))
			got_error = true;
	}
	CHECK(got_error);
	send_frame(r.fd, GUEST_F_PING, 9, "x", 1);
	for (int i = 0; i < 20 && next_frame(&r, 3000) == 1;)
		if (r.type == GUEST_F_PONG && r.id == 9)
			break;
	CHECK(r.type == GUEST_F_PONG && r.id == 9);
	close(r.fd);
	exit_status(pid);
	guest_framer_free(&r.fr);
	free(chunk);
}

/* Detached processes (start commands) outlive their session; their later
 * output is drained, never blocking them, and their id is free again. */
static void test_detached_survives(void)
{
	struct raw r = { 0 };
	struct guest_wbuf w = { 0 };
	struct guest_hello h = { .version = GUEST_PROTO_VERSION, .agent = "test", .pid = 1 };
	char *dir = kiln_mkdtemp("kiln-test-detach", NULL), *marker = kiln_path_join(dir, "done");
	char *script = kiln_xasprintf("sleep 0.5; seq 1 300000; seq 1 300000 >&2; touch '%s'; sleep 100", marker);
	pid_t pid, kept, killed;
	bool exit1 = false;

	r.fd = spawn_agent(&pid);
	guest_framer_init(&r.fr);
	CHECK_INT(next_frame(&r, 5000), 1);
	kept = raw_exec(&r, 1, script, GUEST_EXEC_DETACH);
	killed = raw_exec(&r, 2, "sleep 100", 0);
	CHECK(kept > 0 && killed > 0);
	guest_encode_hello(&w, 0, &h);
	send_bytes(r.fd, w.data, w.len);
	CHECK_INT(next_frame(&r, 5000), 1);
	CHECK_INT(r.type, GUEST_F_HELLO);
	/* The ordinary one dies with the session ... */
	for (int i = 0; i < 100 && kill(killed, 0) == 0; i++)
		usleep(20000);
	CHECK(kill(killed, 0) < 0);
	/* ... the detached one writes 4 MB nobody reads and carries on. */
	for (int i = 0; i < 250 && access(marker, F_OK) != 0; i++)
		usleep(20000);
	CHECK(access(marker, F_OK) == 0);
	CHECK(kill(kept, 0) == 0);
	/* Its old id belongs to the new session now; nothing of the orphan shows. */
	raw_exec(&r, 1, "exit 5", 0);
	for (int i = 0; i < 5 && next_frame(&r, 5000) == 1; i++) {
		CHECK(r.id == 1 && (r.type == GUEST_F_EXIT));
		if (r.type == GUEST_F_EXIT) {
			struct guest_exit ex;
			const char *why;
			CHECK_INT(guest_decode_exit(r.payload, r.len, &ex, &why), 0);
			CHECK_INT(ex.code, 5);
			exit1 = true;
			break;
		}
	}
	CHECK(exit1);
	close(r.fd);
	exit_status(pid);
	kill(-kept, SIGKILL); /* its process group: sh and its sleep */
	kiln_rm_rf(dir, NULL);
	free(dir);
	free(marker);
	free(script);
	guest_framer_free(&r.fr);
	guest_wbuf_free(&w);
}

/* Garbage or an oversized frame: an ERROR, then the agent ends the connection. */
static void fatal_case(const void *bytes, size_t n, const char *want)
{
	struct raw r = { 0 };
	pid_t pid;
	char *msg;
	int st;

	r.fd = spawn_agent(&pid);
	guest_framer_init(&r.fr);
	CHECK_INT(next_frame(&r, 5000), 1);
	send_bytes(r.fd, bytes, n);
	CHECK_INT(next_frame(&r, 5000), 1);
	msg = error_text(&r);
	CHECK(r.id == 0 && msg && strstr(msg, want));
	if (msg && !strstr(msg, want))
		printf("#   got: %s\n", msg);
	CHECK_INT(next_frame(&r, 5000), 0); /* closed */
	st = exit_status(pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1); /* an error exit, not a crash */
	close(r.fd);
	guest_framer_free(&r.fr);
}

static void test_garbage_ends_connection(void)
{
	fatal_case("GET / HTTP/1.1\r\n\r\n", 18, "bad frame magic");
}

static void test_oversized_ends_connection(void)
{
	uint8_t h[GUEST_HDR_LEN];

	guest_hdr_encode(h, GUEST_F_STDIN, 1, GUEST_MAX_PAYLOAD + 1);
	fatal_case(h, sizeof(h), "1 MiB limit");
}

static int exec_code(guest_conn *c, const char *script)
{
	struct guest_exec_opts o;
	struct guest_result res = { -1, 0, false };
	kiln_error *err = NULL;

	guest_exec_opts_init(&o);
	o.shell = script;
	if (guest_exec(c, &o, NULL, 0, 10000, &res, &err) < 0) {
		printf("#   %s\n", kiln_error_message(err));
		kiln_error_free(err);
		return -1;
	}
	return res.exit_code;
}

/* --listen serves one connection after another, as QEMU's socket does. */
static void test_listen_mode(void)
{
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-test-listen", &err);
	char *sock = dir ? kiln_path_join(dir, "agent.sock") : NULL;
	guest_conn *c;
	pid_t pid;
	int st;

	if (sock == NULL) {
		CHECK(0);
		kiln_error_free(err);
		return;
	}
	pid = fork();
	if (pid == 0) {
		usleep(200000); /* the client must retry until the socket exists */
		execl(agent_bin(), agent_bin(), "--listen", sock, (char *)NULL);
		_exit(127);
	}
	for (int round = 0; round < 3; round++) {
		c = guest_connect(sock, 10000, &err);
		CHECK(c != NULL);
		if (c == NULL)
			break;
		CHECK_INT(exec_code(c, round == 0 ? "exit 7" : "exit 8"), round == 0 ? 7 : 8);
		guest_close(c);
	}
	/* SIGTERM ends it cleanly, socket removed. */
	kill(pid, SIGTERM);
	st = exit_status(pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(access(sock, F_OK) != 0);

	/* --once: the first connection only. */
	pid = fork();
	if (pid == 0) {
		execl(agent_bin(), agent_bin(), "--listen", sock, "--once", (char *)NULL);
		_exit(127);
	}
	c = guest_connect(sock, 10000, &err);
	CHECK(c != NULL);
	if (c) {
		CHECK_INT(exec_code(c, "exit 9"), 9);
		guest_close(c);
	}
	st = exit_status(pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(access(sock, F_OK) != 0);
	/* Nobody listening: a clear error after the timeout. */
	CHECK(guest_connect(sock, 200, &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "agent connect"));
	kiln_error_free(err);
	rmdir(dir);
	free(sock);
	free(dir);
}

static long agent_rss_kb(pid_t pid)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			kb = atol(line + 6);
	if (f)
		fclose(f);
	return kb;
}

static void count(void *user, const void *data, size_t len)
{
	*(size_t *)user += len;
}

static void test_flood_does_not_stall(void)
{
	pid_t pid;
	int fd = spawn_agent(&pid);
	kiln_error *err = NULL;
	guest_conn *c = guest_conn_from_fd(fd, 5000, &err);
	struct guest_exec_opts o;
	struct guest_result res;
	size_t got = 0;
	guest_proc *p;
	long rss;

	CHECK(c != NULL);
	if (c == NULL)
		return;
	guest_exec_opts_init(&o);
	o.shell = "yes flood";
	o.on_stdout = count;
	o.user = &got;
	p = guest_spawn(c, &o, 5000, &err);
	CHECK(p != NULL);
	/* Not reading for a while: the agent must hold back, not buffer without end. */
	usleep(1500000);
	rss = agent_rss_kb(pid);
	CHECK(rss > 0 && rss < 16 * 1024);
	printf("# agent RSS while flooded: %ld KiB\n", rss);
	/* And it still answers while the flood goes on. */
	for (int i = 0; i < 5; i++)
		CHECK_INT(guest_ping(c, 5000, &err), 0);
	CHECK(got > 1024 * 1024);
	if (p) {
		CHECK_INT(guest_proc_kill(p, SIGKILL, &err), 0);
		CHECK_INT(guest_proc_wait(p, 10000, &res, &err), 0);
		CHECK_INT(res.signal, SIGKILL);
		guest_proc_free(p);
	}
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_free(err);
	guest_close(c);
	waitpid(pid, NULL, 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (access(agent_bin(), X_OK) != 0) {
		printf("not ok - %s missing: run make all first\n", agent_bin());
		return 1;
	}
	RUN(test_bad_frames_keep_connection);
	RUN(test_hello_starts_new_session);
	RUN(test_detached_survives);
	RUN(test_stdin_window_enforced);
	RUN(test_garbage_ends_connection);
	RUN(test_oversized_ends_connection);
	RUN(test_listen_mode);
	RUN(test_flood_does_not_stall);
	return test_done();
}
