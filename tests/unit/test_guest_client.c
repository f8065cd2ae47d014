/* test_guest_client.c — the host client against agents that misbehave: fake
 * agents (forked processes writing crafted bytes) that lie about their
 * version, babble, stay silent or send bad frames later; sockets that are
 * never served or whose backlog is full; and a hostile guest whose download
 * tar tries to escape the target directory, or one that never starts a
 * request.  Clear errors, bounded waits, nothing written outside, nothing
 * left running in the guest. */
#include <archive.h>
#include <archive_entry.h>
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

/* A fake agent: a forked process that writes `script`, after 300 ms `later`
 * (if any), then waits. */
static const void *later;
static size_t later_len;

static guest_conn *fake_agent(const void *script, size_t n, int linger_ms, int timeout_ms, kiln_error **err,
			      pid_t *pid)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return NULL;
	*pid = fork();
	if (*pid == 0) {
		close(sv[0]);
		if (n && write(sv[1], script, n) < 0)
			_exit(1);
		if (later_len) {
			usleep(300000);
			if (write(sv[1], later, later_len) < 0)
				_exit(1);
		}
		usleep((useconds_t)linger_ms * 1000);
		_exit(0);
	}
	close(sv[1]);
	return guest_conn_from_fd(sv[0], timeout_ms, err);
}

static void expect_client_error(const void *script, size_t n, int linger_ms, const char *want)
{
	kiln_error *err = NULL;
	pid_t pid;
	guest_conn *c = fake_agent(script, n, linger_ms, 1000, &err, &pid);

	CHECK(c == NULL);
	CHECK(err && strstr(kiln_error_message(err), want));
	if (err && !strstr(kiln_error_message(err), want))
		printf("#   got: %s\n", kiln_error_message(err));
	kiln_error_free(err);
	guest_close(c);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static void test_client_vs_bad_agents(void)
{
	struct guest_wbuf w = { 0 };
	struct guest_hello h = { .version = GUEST_PROTO_VERSION + 1, .agent = "kiln-agent 9.9", .pid = 1 };
	char want[200];
	uint64_t t0;
	struct timespec ts;

	guest_encode_hello(&w, 0, &h);
	snprintf(want, sizeof(want), "agent handshake: the agent (kiln-agent 9.9) speaks protocol version %u, this kiln speaks %u",
		 GUEST_PROTO_VERSION + 1, GUEST_PROTO_VERSION);
	expect_client_error(w.data, w.len, 2000, want);
	expect_client_error("garbage garbage garbage", 23, 2000, "agent protocol: bad frame magic");
	{
		uint8_t big[GUEST_HDR_LEN];
		guest_hdr_encode(big, GUEST_F_STDOUT, 1, GUEST_MAX_PAYLOAD + 1);
		expect_client_error(big, sizeof(big), 2000, "agent protocol: frame larger than the 1 MiB limit");
	}
	expect_client_error("", 0, 0, "the agent closed the connection");
	clock_gettime(CLOCK_MONOTONIC, &ts);
	t0 = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	expect_client_error("", 0, 3000, "no HELLO from the agent after");
	clock_gettime(CLOCK_MONOTONIC, &ts);
	CHECK((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 - t0 < 2500); /* gave up at 1 s */
	/* A HELLO with a field running past the frame */
	w.len = 0;
	guest_frame_raw(&w, GUEST_F_HELLO, 0, "\0\1\0\0\0\x20", 6);
	expect_client_error(w.data, w.len, 2000, "bad HELLO from the agent: field runs past the end");
	guest_wbuf_free(&w);
}

static void test_client_vs_bad_frames_later(void)
{
	struct guest_wbuf w = { 0 }, w2 = { 0 };
	struct guest_hello h = { .version = GUEST_PROTO_VERSION, .caps = GUEST_CAP_EXEC, .agent = "fake", .pid = 1 };
	kiln_error *err = NULL;
	guest_conn *c;
	pid_t pid;

	/* A valid HELLO, then (later) an EXIT with a bad field for id 1 (the ping's). */
	guest_encode_hello(&w, 0, &h);
	guest_frame_raw(&w2, GUEST_F_EXIT, 1, "\0\1\0\0\0\3abc", 9);
	later = w2.data;
	later_len = w2.len;
	c = fake_agent(w.data, w.len, 2000, 2000, &err, &pid);
	later_len = 0;
	CHECK(c != NULL);
	if (c) {
		CHECK_INT(guest_ping(c, 1000, &err), -1);
		CHECK(err && strstr(kiln_error_message(err), "bad EXIT frame from the agent"));
		kiln_error_clear(&err);
		/* Broken stays broken, with the same reason. */
		CHECK_INT(guest_ping(c, 1000, &err), -1);
		CHECK(err && strstr(kiln_error_message(err), "bad EXIT frame"));
	}
	kiln_error_free(err);
	guest_close(c);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	guest_wbuf_free(&w);
	guest_wbuf_free(&w2);
}

/* A socket that is never served (QEMU busy with another client) or whose
 * backlog is full: guest_connect gives up at its timeout and says why. */
static void test_busy_socket(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-test-busy", &err);
	int ls, filler;
	uint64_t t0;
	struct timespec ts;

	if (dir == NULL) {
		CHECK(0);
		kiln_error_free(err);
		return;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/busy.sock", dir);
	ls = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(bind(ls, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(ls, 0) == 0);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	t0 = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	CHECK(guest_connect(sa.sun_path, 300, &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "one client at a time"));
	kiln_error_clear(&err);
	/* Now the backlog holds one never-accepted connection: full. */
	filler = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
	connect(filler, (struct sockaddr *)&sa, sizeof(sa));
	CHECK(guest_connect(sa.sun_path, 300, &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "busy"));
	if (err && !strstr(kiln_error_message(err), "busy"))
		printf("#   got: %s\n", kiln_error_message(err));
	clock_gettime(CLOCK_MONOTONIC, &ts);
	CHECK((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 - t0 < 3000);
	kiln_error_free(err);
	close(filler);
	close(ls);
	kiln_rm_rf(dir, NULL);
	free(dir);
}

/* A tar of the given entries: name, type ('f', 'l' symlink), target/content. */
static void make_tar(struct guest_wbuf *out, const char *const (*ents)[3], size_t n)
{
	struct archive *a = archive_write_new();
	size_t used = 0, cap = 1 << 20;
	uint8_t *mem = calloc(1, cap);

	archive_write_set_format_pax_restricted(a);
	archive_write_open_memory(a, mem, cap, &used);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, ents[i][0]);
		archive_entry_set_perm(e, 0644);
		if (ents[i][1][0] == 'l') {
			archive_entry_set_filetype(e, AE_IFLNK);
			archive_entry_set_symlink(e, ents[i][2]);
		} else {
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_size(e, (la_int64_t)strlen(ents[i][2]));
		}
		archive_write_header(a, e);
		if (ents[i][1][0] == 'f')
			archive_write_data(a, ents[i][2], strlen(ents[i][2]));
		archive_entry_free(e);
	}
	archive_write_close(a);
	archive_write_free(a);
	guest_wbuf_put(out, mem, used);
	free(mem);
}

/* A hostile guest answers a DOWNLOAD with a tar that tries to escape host_dir. */
static int count_entry(void *user, struct archive *ar, struct archive_entry *e, kiln_error **err)
{
	(void)ar, (void)e, (void)err;
	++*(int *)user;
	return 0;
}

/* root NULL: through guest_download_each (no disk), which refuses such names */
static void hostile_download(const char *const (*ents)[3], size_t n, const char *root, const char *want)
{
	struct guest_wbuf w = { 0 }, w2 = { 0 }, tar = { 0 };
	struct guest_hello h = { .version = GUEST_PROTO_VERSION, .caps = GUEST_CAP_DOWNLOAD, .agent = "evil", .pid = 1 };
	struct guest_exit ex = { 0 };
	kiln_error *err = NULL;
	uint8_t pidb[4];
	guest_conn *c;
	pid_t pid;

	guest_encode_hello(&w, 0, &h);
	guest_put_u32(pidb, 4242);
	guest_frame_raw(&w2, GUEST_F_STARTED, 1, pidb, 4);
	make_tar(&tar, ents, n);
	for (size_t off = 0; off < tar.len; off += GUEST_DATA_CHUNK)
		guest_frame_raw(&w2, GUEST_F_STDOUT, 1, tar.data + off,
				tar.len - off < GUEST_DATA_CHUNK ? tar.len - off : GUEST_DATA_CHUNK);
	guest_encode_exit(&w2, 1, &ex);
	later = w2.data;
	later_len = w2.len;
	c = fake_agent(w.data, w.len, 3000, 2000, &err, &pid);
	later_len = 0;
	CHECK(c != NULL);
	int seen = 0;
	if (c && (root ? guest_download_dir(c, "/x", root, 5000, &err)
		       : guest_download_each(c, "/x", count_entry, &seen, 5000, &err)) == 0) {
		/* libarchive may defuse instead of refusing (unlink the symlink). */
		CHECK(want == NULL);
	} else if (c && want) {
		CHECK(err && strstr(kiln_error_message(err), want));
		if (err && !strstr(kiln_error_message(err), want))
			printf("#   got: %s\n", kiln_error_message(err));
	}
	kiln_error_free(err);
	guest_close(c);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	guest_wbuf_free(&w);
	guest_wbuf_free(&w2);
	guest_wbuf_free(&tar);
}

static void test_hostile_download(void)
{
	static const char *const dotdot[][3] = { { "ok.txt", "f", "fine" }, { "../escaped.txt", "f", "evil" } };
	static const char *const via_link[][3] = { { "lnk", "l", "/tmp" }, { "lnk/escaped.txt", "f", "evil" } };
	static const char *const absolute[][3] = { { "/abs.txt", "f", "relocated" } };
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-test-hostile", &err), *root, *p;

	if (dir == NULL) {
		CHECK(0);
		kiln_error_free(err);
		return;
	}
	root = kiln_path_join(dir, "root");
	hostile_download(dotdot, 2, root, "..");
	p = kiln_path_join(dir, "escaped.txt");
	CHECK(access(p, F_OK) != 0);
	free(p);
	hostile_download(via_link, 2, root, NULL);
	/* a stream of entries refuses what would climb or is no clean name */
	static const char *const empty_part[][3] = { { "a//b", "f", "x" } };
	static const char *const dot_part[][3] = { { "a/./b", "f", "x" } };
	hostile_download(dotdot, 2, NULL, "the guest sent the name '../escaped.txt'");
	hostile_download(empty_part, 1, NULL, "the guest sent the name 'a//b'");
	hostile_download(dot_part, 1, NULL, "the guest sent the name 'a/./b'");
	CHECK(access("/tmp/escaped.txt", F_OK) != 0);
	{
		struct stat st;
		char *lnk = kiln_path_join(root, "lnk");
		/* Whatever lnk is now, it does not lead out of root. */
		CHECK(lstat(lnk, &st) != 0 || !S_ISLNK(st.st_mode));
		free(lnk);
	}
	/* An absolute name lands inside root, as tar does it. */
	{
		struct guest_wbuf w = { 0 }, w2 = { 0 }, tar = { 0 };
		struct guest_hello h = { .version = GUEST_PROTO_VERSION, .caps = GUEST_CAP_DOWNLOAD, .agent = "x", .pid = 1 };
		struct guest_exit ex = { 0 };
		uint8_t pidb[4];
		guest_conn *c;
		pid_t pid;
		char *abs_in = kiln_path_join(root, "abs.txt");
		guest_encode_hello(&w, 0, &h);
		guest_put_u32(pidb, 4242);
		guest_frame_raw(&w2, GUEST_F_STARTED, 1, pidb, 4);
		make_tar(&tar, absolute, 1);
		guest_frame_raw(&w2, GUEST_F_STDOUT, 1, tar.data, tar.len);
		guest_encode_exit(&w2, 1, &ex);
		later = w2.data;
		later_len = w2.len;
		c = fake_agent(w.data, w.len, 3000, 2000, &err, &pid);
		later_len = 0;
		CHECK(c && guest_download_dir(c, "/x", root, 5000, &err) == 0);
		CHECK(access(abs_in, F_OK) == 0);
		CHECK(access("/abs.txt", F_OK) != 0);
		guest_close(c);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		guest_wbuf_free(&w);
		guest_wbuf_free(&w2);
		guest_wbuf_free(&tar);
		free(abs_in);
	}
	kiln_error_free(err);
	kiln_rm_rf(dir, NULL);
	free(root);
	free(dir);
}

/* A listening socket whose one client gets `script`, then silence. */
static pid_t fake_listener(const char *path, const void *script, size_t n)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	pid_t pid;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	unlink(path);
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 1) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		int fd = accept(ls, NULL, NULL);
		if (fd >= 0 && n && write(fd, script, n) < 0)
			_exit(1);
		sleep(5);
		_exit(0);
	}
	close(ls);
	return pid;
}

/* guest_connect_nowait: requests go out before the agent's HELLO is read;
 * a real agent answers them, a wrong version or a silent peer breaks the
 * connection with a clear error (bounded by the connect's timeout). */
static void test_connect_nowait(void)
{
	char dir[] = "/tmp/kiln-nowait.XXXXXX", *path;
	const char *bin = getenv("KILN_AGENT");
	struct guest_wbuf w = { 0 };
	struct guest_hello h = { .version = GUEST_PROTO_VERSION + 1, .agent = "kiln-agent 9.9", .pid = 1 };
	kiln_error *err = NULL;
	guest_conn *c;
	pid_t pid;
	uint64_t t0;
	struct timespec ts;

	if (mkdtemp(dir) == NULL)
		return;
	path = kiln_path_join(dir, "agent.sock");
	pid = fork();
	if (pid == 0) {
		execl(bin && *bin ? bin : "bin/kiln-agent", "kiln-agent", "--listen", path, "--once", (char *)NULL);
		_exit(127);
	}
	c = guest_connect_nowait(path, 5000, &err);
	CHECK(c != NULL);
	CHECK_INT(guest_ping(c, 5000, &err), 0); /* one round trip: HELLO and PING together */
	CHECK_INT(guest_conn_version(c), GUEST_PROTO_VERSION);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	guest_close(c);
	waitpid(pid, NULL, 0);

	guest_encode_hello(&w, 0, &h);
	pid = fake_listener(path, w.data, w.len);
	c = guest_connect_nowait(path, 2000, &err);
	CHECK(c != NULL);
	CHECK_INT(guest_ping(c, 2000, &err), -1);
	CHECK(err && strstr(kiln_error_message(err), "speaks protocol version"));
	kiln_error_clear(&err);
	guest_close(c);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);

	pid = fake_listener(path, NULL, 0);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	t0 = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	c = guest_connect_nowait(path, 300, &err);
	CHECK(c != NULL);
	CHECK_INT(guest_ping(c, 10000, &err), -1); /* the HELLO's deadline ends it, not the ping's */
	CHECK(err && strstr(kiln_error_message(err), "no HELLO from the agent in time"));
	clock_gettime(CLOCK_MONOTONIC, &ts);
	CHECK((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 - t0 < 5000);
	kiln_error_clear(&err);
	guest_close(c);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	guest_wbuf_free(&w);
	unlink(path);
	rmdir(dir);
	free(path);
}

/* An agent that never starts a download: the client gives up at its
 * deadline saying what did not start, and kills the request in the guest
 * (the agent, reading, sees a KILL for it) so nothing runs on there. */
static void test_start_timeout_kills(void)
{
	struct guest_wbuf w = { 0 };
	struct guest_hello h = { .version = GUEST_PROTO_VERSION, .caps = GUEST_CAP_DOWNLOAD, .agent = "mute", .pid = 1 };
	kiln_error *err = NULL;
	int sv[2], seen = 0;
	pid_t pid;

	guest_encode_hello(&w, 0, &h);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	pid = fork();
	if (pid == 0) {
		struct guest_framer fr;
		struct guest_frame f;
		const char *why;
		uint32_t req = 0;
		close(sv[0]);
		if (write(sv[1], w.data, w.len) < 0)
			_exit(3);
		guest_framer_init(&fr);
		for (;;) {
			size_t room;
			uint8_t *sp = guest_framer_space(&fr, &room);
			ssize_t n = read(sv[1], sp, room);
			if (n <= 0)
				_exit(1); /* the client closed without a KILL */
			guest_framer_commit(&fr, (size_t)n);
			int r;
			while ((r = guest_framer_next(&fr, &f, &why)) == 1) {
				if (f.type == GUEST_F_DOWNLOAD)
					req = f.id;
				if (f.type == GUEST_F_KILL && req && f.id == req)
					_exit(0);
			}
			if (r < 0)
				_exit(2);
		}
	}
	close(sv[1]);
	guest_conn *c = guest_conn_from_fd(sv[0], 2000, &err);
	CHECK(c != NULL);
	double t0 = kiln_now_ms();
	CHECK(c && guest_download_each(c, "/x", count_entry, &seen, 400, &err) < 0);
	CHECK(kiln_now_ms() - t0 < 2000);
	CHECK(err && strstr(kiln_error_message(err), "did not start the download within"));
	if (err && !strstr(kiln_error_message(err), "did not start the download within"))
		printf("#   got: %s\n", kiln_error_message(err));
	kiln_error_free(err);
	int status = -1;
	alarm(10);
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	alarm(0);
	guest_close(c);
	guest_wbuf_free(&w);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	RUN(test_client_vs_bad_agents);
	RUN(test_client_vs_bad_frames_later);
	RUN(test_busy_socket);
	RUN(test_connect_nowait);
	RUN(test_hostile_download);
	RUN(test_start_timeout_kills);
	return test_done();
}
