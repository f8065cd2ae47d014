/* test_vm_qmp.c — the QMP client against a real QEMU (`-M none`, no guest)
 * and against peers that misbehave: silent, garbage, oversized, or gone. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "vm/vm.h"

static char *tmpdir;

static pid_t start_qemu(const char *sock)
{
	char *qmp = kiln_xasprintf("unix:%s,server=on,wait=off", sock);
	pid_t pid = fork();

	if (pid == 0) {
		char *argv[] = { "qemu-system-x86_64", "-M", "none", "-nodefaults", "-display", "none", "-S", "-qmp", qmp, NULL };
		execvp(argv[0], argv);
		_exit(127);
	}
	free(qmp);
	return pid;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static void test_real_qemu(void)
{
	char *sock = kiln_path_join(tmpdir, "qemu.sock");
	pid_t pid = start_qemu(sock);
	kiln_error *err = NULL;
	/* One command in one round trip (capabilities + command sent together),
	 * then an ordinary session: QEMU serves one client at a time. */
	json_t *r = vm_qmp_run_once(sock, "query-status", 0, 10000, &err), *ev;
	CHECK(r != NULL);
	CHECK_STR(kiln_json_str(r, "status"), "prelaunch");
	json_decref(r);
	kiln_error_clear(&err);
	r = vm_qmp_run_once(sock, "no-such-command", 0, 5000, &err);
	CHECK(r == NULL && err != NULL && err->kind == KILN_E_NOTFOUND);
	kiln_error_clear(&err);
	vm_qmp *q = vm_qmp_connect(sock, 10000, &err);
	int status;

	CHECK(q != NULL);
	if (q == NULL) {
		printf("#   %s\n", kiln_error_message(err));
		kiln_error_free(err);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		free(sock);
		return;
	}
	CHECK(json_integer_value(json_object_get(json_object_get(vm_qmp_version(q), "qemu"), "major")) >= 7);
	r = vm_qmp_execute(q, "query-status", NULL, 5000, &err);
	CHECK(r != NULL);
	CHECK_STR(kiln_json_str(r, "status"), "prelaunch");
	json_decref(r);

	/* An unknown command is a clean error that names the problem. */
	r = vm_qmp_execute(q, "no-such-command", NULL, 5000, &err);
	CHECK(r == NULL);
	CHECK(err != NULL && err->kind == KILN_E_NOTFOUND);
	CHECK(err != NULL && strstr(kiln_error_message(err), "no-such-command") != NULL);
	kiln_error_clear(&err);

	/* Arguments travel, and bad ones are refused by QEMU. */
	json_t *args = json_pack("{s:s}", "path", "/machine");
	r = vm_qmp_execute(q, "qom-list", args, 5000, &err);
	CHECK(json_is_array(r));
	json_decref(r);
	json_decref(args);
	args = json_pack("{s:i}", "path", 3);
	r = vm_qmp_execute(q, "qom-list", args, 5000, &err);
	CHECK(r == NULL && err != NULL);
	kiln_error_clear(&err);
	json_decref(args);

	/* Events: "cont" then "stop" emit RESUME and STOP, queued while we wait for replies. */
	json_decref(vm_qmp_execute(q, "cont", NULL, 5000, &err));
	json_decref(vm_qmp_execute(q, "stop", NULL, 5000, &err));
	CHECK(err == NULL);
	ev = vm_qmp_wait_event(q, "STOP", 5000, &err);
	CHECK_STR(kiln_json_str(ev, "event"), "STOP");
	json_decref(ev);
	ev = vm_qmp_wait_event(q, "RESUME", 5000, &err);
	CHECK_STR(kiln_json_str(ev, "event"), "RESUME");
	json_decref(ev);

	/* No event comes: the wait ends at its deadline with an error. */
	double t0 = now_ms();
	ev = vm_qmp_wait_event(q, "SHUTDOWN", 200, &err);
	CHECK(ev == NULL && err != NULL);
	CHECK(now_ms() - t0 < 2000);
	kiln_error_clear(&err);

	/* quit: the reply or the closed connection, then QEMU is gone. */
	json_decref(vm_qmp_execute(q, "quit", NULL, 5000, &err));
	kiln_error_clear(&err);
	vm_qmp_close(q);
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	unlink(sock);
	free(sock);
}

/* A fake peer on a unix socket: accepts one client and sends `script` (may be
 * NULL: say nothing), then holds the connection for hold_ms. */
struct peer {
	char *path;
	int fd;
	const char *script;
	size_t len;
	int hold_ms;
	pthread_t thread;
};

static void *peer_main(void *arg)
{
	struct peer *p = arg;
	int c = accept(p->fd, NULL, NULL);

	if (c >= 0) {
		if (p->script)
			(void)!write(c, p->script, p->len);
		struct timespec ts = { p->hold_ms / 1000, (p->hold_ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
		close(c);
	}
	return NULL;
}

static void peer_start(struct peer *p, const char *name, const char *script, size_t len, int hold_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	p->path = kiln_path_join(tmpdir, name);
	p->script = script;
	p->len = len;
	p->hold_ms = hold_ms;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", p->path);
	p->fd = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(bind(p->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	CHECK(listen(p->fd, 1) == 0);
	pthread_create(&p->thread, NULL, peer_main, p);
}

static void peer_stop(struct peer *p)
{
	pthread_join(p->thread, NULL);
	close(p->fd);
	unlink(p->path);
	free(p->path);
}

static void expect_connect_error_within(const char *name, const char *script, size_t len, int hold_ms,
				       int timeout_ms, const char *want)
{
	struct peer p;
	kiln_error *err = NULL;
	double t0 = now_ms();
	vm_qmp *q;

	peer_start(&p, name, script, len, hold_ms);
	q = vm_qmp_connect(p.path, timeout_ms, &err);
	CHECK(q == NULL);
	CHECK(now_ms() - t0 < timeout_ms + 3000);
	if (err && strstr(kiln_error_message(err), want) == NULL) {
		printf("#   %s: got \"%s\", want \"%s\"\n", name, kiln_error_message(err), want);
		test_checks_failed++;
	}
	CHECK(err != NULL);
	kiln_error_free(err);
	vm_qmp_close(q);
	peer_stop(&p);
}

static void expect_connect_error(const char *name, const char *script, size_t len, int hold_ms, const char *want)
{
	expect_connect_error_within(name, script, len, hold_ms, 300, want);
}

static void test_bad_peers(void)
{
	static const char garbage[] = "this is not json\n";
	static const char no_qmp[] = "{\"hello\": 1}\n";
	static const char array[] = "[1,2]\n";
	static const char greeting_then_error[] =
		"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n"
		"{\"error\": {\"class\": \"GenericError\", \"desc\": \"nope\"}, \"id\": 1}\n";
	static const char greeting_only[] = "{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n";

	expect_connect_error("silent.sock", NULL, 0, 600, "no answer");
	expect_connect_error("garbage.sock", garbage, sizeof(garbage) - 1, 100, "QMP message");
	expect_connect_error("noqmp.sock", no_qmp, sizeof(no_qmp) - 1, 100, "greeting");
	expect_connect_error("array.sock", array, sizeof(array) - 1, 100, "not a JSON object");
	expect_connect_error("caps.sock", greeting_then_error, sizeof(greeting_then_error) - 1, 100, "nope");
	/* Greeting, then the peer never answers qmp_capabilities. */
	expect_connect_error("mute.sock", greeting_only, sizeof(greeting_only) - 1, 600, "no answer");
	/* Greeting, then the peer hangs up. */
	expect_connect_error("gone.sock", greeting_only, sizeof(greeting_only) - 1, 0, "QMP");
}

static void test_oversized_line(void)
{
	size_t n = (16u << 20) + 4096;
	char *big = kiln_xmalloc(n);

	memset(big, 'x', n); /* no newline: a line longer than the limit */
	/* Generous deadline: 16 MiB under ASan on a busy machine is not instant. */
	expect_connect_error_within("big.sock", big, n, 100, 30000, "longer than");
	free(big);
}

static void test_no_socket(void)
{
	kiln_error *err = NULL;
	char *path = kiln_path_join(tmpdir, "absent.sock");
	double t0 = now_ms();

	CHECK(vm_qmp_connect(path, 100, &err) == NULL);
	CHECK(err != NULL && strstr(kiln_error_message(err), "absent.sock") != NULL);
	CHECK(now_ms() - t0 < 2000);
	kiln_error_free(err);
	free(path);
}

int main(void)
{
	kiln_error *err = NULL;

	signal(SIGPIPE, SIG_IGN);
	tmpdir = kiln_mkdtemp("kiln-test-qmp", &err);
	if (tmpdir == NULL)
		return 1;
	RUN(test_real_qemu);
	RUN(test_bad_peers);
	RUN(test_oversized_line);
	RUN(test_no_socket);
	kiln_rm_rf(tmpdir, &err);
	free(tmpdir);
	return test_done();
}
