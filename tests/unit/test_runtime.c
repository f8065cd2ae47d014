/* test_runtime.c — runtime/: the Connect codec against hostile bodies
 * (short, lying and oversized envelopes, compressed flags, bad JSON, 10,000-
 * character ids), then envd's process and filesystem methods served through
 * rt_serve against a real kiln-agent run on the host (--listen). */
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "test.h"

struct capture {
	int status;
	char type[64];
	kiln_buf body;
	int fail_after; /* writes before the "client" vanishes; <0: never */
};

static int cap_begin(void *ctx, int status, const char *type)
{
	struct capture *c = ctx;
	c->status = status;
	snprintf(c->type, sizeof(c->type), "%s", type);
	return 0;
}

static int cap_write(void *ctx, const void *data, size_t len)
{
	struct capture *c = ctx;
	if (c->fail_after == 0)
		return -1;
	if (c->fail_after > 0)
		c->fail_after--;
	kiln_buf_add(&c->body, data, len);
	return 0;
}

static void envelope(kiln_buf *b, const char *json)
{
	kiln_buf_reset(b);
	rt_envelope_encode(b, 0, json, strlen(json));
}

static void test_codec_hostile(void)
{
	kiln_error *err = NULL;
	kiln_buf b = KILN_BUF_INIT, big = KILN_BUF_INIT;
	json_t *v;
	const char *s;

	envelope(&b, "{\"process\":{\"pid\":1}}");
	v = rt_envelope_decode_request(b.buf, b.len, RT_MAX_MESSAGE, &err);
	CHECK(v != NULL && json_integer_value(json_object_get(json_object_get(v, "process"), "pid")) == 1);
	json_decref(v);

	CHECK(rt_envelope_decode_request("\0\0\0", 3, RT_MAX_MESSAGE, &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "shorter than an envelope"));
	kiln_error_clear(&err);
	/* says 100 bytes, 2 follow */
	CHECK(rt_envelope_decode_request("\0\0\0\0\x64{}", 7, RT_MAX_MESSAGE, &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "says 100 bytes but 2 follow"));
	kiln_error_clear(&err);
	/* a 4 GiB length */
	CHECK(rt_envelope_decode_request("\0\xff\xff\xff\xff{}", 7, RT_MAX_MESSAGE, &err) == NULL);
	CHECK(err && err->kind == KILN_E_LIMIT);
	kiln_error_clear(&err);
	CHECK(rt_envelope_decode_request("\x01\0\0\0\x02{}", 7, RT_MAX_MESSAGE, &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "compressed"));
	kiln_error_clear(&err);
	CHECK(rt_envelope_decode_request("\x02\0\0\0\x02{}", 7, RT_MAX_MESSAGE, &err) == NULL);
	kiln_error_clear(&err);
	envelope(&b, "{\"process\":");
	CHECK(rt_envelope_decode_request(b.buf, b.len, RT_MAX_MESSAGE, &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "not JSON"));
	kiln_error_clear(&err);
	envelope(&b, "[1,2]");
	CHECK(rt_envelope_decode_request(b.buf, b.len, RT_MAX_MESSAGE, &err) == NULL);
	kiln_error_clear(&err);
	envelope(&b, "{\"a\":1,\"a\":2}");
	CHECK(rt_envelope_decode_request(b.buf, b.len, RT_MAX_MESSAGE, &err) == NULL);
	kiln_error_clear(&err);
	/* two envelopes where one is expected */
	envelope(&b, "{}");
	rt_envelope_encode(&b, 0, "{}", 2);
	CHECK(rt_envelope_decode_request(b.buf, b.len, RT_MAX_MESSAGE, &err) == NULL);
	kiln_error_clear(&err);
	/* jansson refuses \u0000 in strings itself */
	CHECK(rt_unary_decode_request("{\"a\":\"x\\u0000\"}", 13, RT_MAX_MESSAGE, &err) == NULL);
	kiln_error_clear(&err);
	CHECK(rt_unary_decode_request("nope", 4, RT_MAX_MESSAGE, &err) == NULL);
	kiln_error_clear(&err);
	v = rt_unary_decode_request("", 0, RT_MAX_MESSAGE, &err);
	CHECK(json_is_object(v));
	json_decref(v);
	CHECK(rt_unary_decode_request("{}", 2, 1, &err) == NULL && err && err->kind == KILN_E_LIMIT);
	kiln_error_clear(&err);

	/* a 10,000-character id */
	kiln_buf_adds(&big, "{\"watcherId\":\"");
	for (int i = 0; i < 10000; i++)
		kiln_buf_addc(&big, 'w');
	kiln_buf_adds(&big, "\",\"i\":\"12x\",\"b\":\"!!!\"}");
	v = rt_unary_decode_request(big.buf, big.len, RT_MAX_MESSAGE, &err);
	CHECK(v != NULL);
	CHECK(rt_get_string(v, "watcherId", true, &s, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "over the limit of 4096"));
	kiln_error_clear(&err);
	int64_t n;
	CHECK(rt_get_int(v, "i", 0, &n, &err) < 0);
	kiln_error_clear(&err);
	CHECK(rt_get_bytes(v, "b", 100, &b, &err) < 0);
	kiln_error_clear(&err);
	CHECK(rt_get_string(v, "missing", true, &s, &err) < 0 && err && strstr(kiln_error_message(err), "missing is missing"));
	kiln_error_clear(&err);
	json_decref(v);

	/* int64 as a string, bytes round trip, end-stream shape */
	v = json_pack("{s:s, s:o}", "n", "42", "d", rt_json_bytes("a\0b", 3));
	CHECK(rt_get_int(v, "n", 0, &n, &err) == 0 && n == 42);
	CHECK(rt_get_bytes(v, "d", 10, &b, &err) == 0 && b.len == 3 && memcmp(b.buf, "a\0b", 3) == 0);
	json_decref(v);
	kiln_buf_reset(&b);
	rt_envelope_encode_end(&b, RT_NOT_FOUND, "no process with pid 7");
	CHECK(b.len > 5 && (uint8_t)b.buf[0] == RT_FLAG_END_STREAM);
	CHECK(strstr(b.buf + 5, "\"code\":\"not_found\"") != NULL);

	/* the incremental reader: split feeds, an oversized envelope */
	struct rt_envelope_reader r;
	uint8_t flags;
	kiln_buf msg = KILN_BUF_INIT;
	rt_envelope_reader_init(&r, 64);
	rt_envelope_reader_feed(&r, b.buf, 3);
	CHECK(rt_envelope_reader_next(&r, &flags, &msg, &err) == 0);
	rt_envelope_reader_feed(&r, b.buf + 3, b.len - 3);
	CHECK(rt_envelope_reader_next(&r, &flags, &msg, &err) == 1 && flags == RT_FLAG_END_STREAM);
	rt_envelope_reader_feed(&r, "\0\0\0\x10\0", 5);
	CHECK(rt_envelope_reader_next(&r, &flags, &msg, &err) == -1);
	kiln_error_clear(&err);
	rt_envelope_reader_free(&r);
	kiln_buf_free(&msg);

	CHECK_INT(rt_code_http_status(RT_NOT_FOUND), 404);
	CHECK_STR(rt_code_name(RT_DEADLINE_EXCEEDED), "deadline_exceeded");
	CHECK(rt_route_find("/process.Process/Start") && rt_route_find("/process.Process/Start")->streaming);
	CHECK(rt_route_find("/process.Process/StreamInput") == NULL);
	kiln_buf_free(&b);
	kiln_buf_free(&big);
}

/* --- against a real agent ------------------------------------------------ */
static rt_sandbox *sb;
static char dir[] = "/tmp/kiln-rt.XXXXXX";

/* Serve one call; the messages of a stream are split into c->body as JSON
 * lines ending with "END " + the end-stream message. */
static void call(const char *path, const char *json, uint64_t timeout_ms, struct capture *c)
{
	const struct rt_route *r = rt_route_find(path);
	struct rt_writer w = { cap_begin, cap_write, c };
	struct rt_call rc = { .user = "root", .timeout_ms = timeout_ms };
	kiln_buf body = KILN_BUF_INIT;

	c->body = (kiln_buf)KILN_BUF_INIT;
	if (c->fail_after == 0)
		c->fail_after = -1;
	if (r->streaming)
		envelope(&body, json);
	else
		kiln_buf_adds(&body, json);
	rt_serve(sb, r, &rc, body.buf, body.len, &w);
	kiln_buf_free(&body);
	if (r->streaming) {
		struct rt_envelope_reader rd;
		kiln_buf m = KILN_BUF_INIT, lines = KILN_BUF_INIT;
		uint8_t flags;
		kiln_error *err = NULL;
		rt_envelope_reader_init(&rd, 1 << 20);
		rt_envelope_reader_feed(&rd, c->body.buf, c->body.len);
		while (rt_envelope_reader_next(&rd, &flags, &m, &err) == 1)
			kiln_buf_addf(&lines, "%s%.*s\n", flags & RT_FLAG_END_STREAM ? "END " : "", (int)m.len, m.buf);
		rt_envelope_reader_free(&rd);
		kiln_buf_free(&m);
		kiln_buf_free(&c->body);
		c->body = lines;
	}
}

/* A stream that stays open, as the SDK's for a background command does. */
struct bg {
	pthread_t t;
	const char *path, *json;
	struct capture c;
};

static void *bg_main(void *arg)
{
	struct bg *b = arg;
	call(b->path, b->json, 0, &b->c);
	return NULL;
}

static struct bg *call_bg(const char *path, const char *json)
{
	struct bg *b = kiln_xcalloc(1, sizeof(*b));
	b->path = path;
	b->json = json;
	pthread_create(&b->t, NULL, bg_main, b);
	usleep(300000); /* started */
	return b;
}

static void bg_join(struct bg *b)
{
	pthread_join(b->t, NULL);
	kiln_buf_free(&b->c.body);
	free(b);
}

static void test_process(void)
{
	struct capture c = { 0 };
	char js[512];

	call("/process.Process/Start",
	     "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"echo hi; echo $FOO $USER; pwd; exit 3\"],\"envs\":{\"FOO\":\"bar\"}}}",
	     0, &c);
	CHECK_INT(c.status, 200);
	CHECK_STR(c.type, "application/connect+json");
	CHECK(strstr(c.body.buf, "{\"event\":{\"start\":{\"pid\":") == c.body.buf);
	/* "hi\n" and "bar root\n/root\n", in one data message or several */
	CHECK(strstr(c.body.buf, "aGkK") || strstr(c.body.buf, "aGkKYmFy"));
	CHECK(strstr(c.body.buf, "\"exitCode\":3") && strstr(c.body.buf, "\"status\":\"exit status 3\""));
	CHECK(strstr(c.body.buf, "\nEND {}\n") != NULL);
	if (test_checks_failed)
		printf("#   %s\n", c.body.buf);
	kiln_buf_free(&c.body);

	/* a deadline: deadline_exceeded in the end-stream message */
	call("/process.Process/Start", "{\"process\":{\"cmd\":\"sleep\",\"args\":[\"30\"]}}", 300, &c);
	CHECK(strstr(c.body.buf, "END {\"error\":{\"code\":\"deadline_exceeded\"") != NULL);
	kiln_buf_free(&c.body);

	/* a missing cwd, a missing program */
	call("/process.Process/Start", "{\"process\":{\"cmd\":\"true\",\"cwd\":\"/nonexistent\"}}", 0, &c);
	CHECK(strstr(c.body.buf, "END {\"error\":{\"code\":\"invalid_argument\"") != NULL);
	kiln_buf_free(&c.body);

	/* background: a stream open meanwhile; its client gone (the first
	 * write fails), the process lives on */
	struct bg *b1 = call_bg("/process.Process/Start", "{\"process\":{\"cmd\":\"cat\"},\"tag\":\"bg\",\"stdin\":true}");
	b1->c.fail_after = 1;
	long pid = 0;
	call("/process.Process/List", "{}", 0, &c);
	const char *p = strstr(c.body.buf, "\"pid\":");
	CHECK(p != NULL);
	if (p)
		pid = strtol(p + 6, NULL, 10);
	kiln_buf_free(&c.body);
	call("/process.Process/List", "{}", 0, &c);
	CHECK_INT(c.status, 200);
	CHECK(strstr(c.body.buf, "\"tag\":\"bg\"") && strstr(c.body.buf, "\"cmd\":\"cat\""));
	kiln_buf_free(&c.body);
	snprintf(js, sizeof(js), "{\"process\":{\"pid\":%ld},\"input\":{\"stdin\":\"cGluZwo=\"}}", pid);
	call("/process.Process/SendInput", js, 0, &c);
	CHECK_INT(c.status, 200);
	kiln_buf_free(&c.body);
	call("/process.Process/CloseStdin", "{\"process\":{\"tag\":\"bg\"}}", 0, &c);
	CHECK_INT(c.status, 200);
	kiln_buf_free(&c.body);
	/* a late Connect gets the kept exit ("ping" went out before it came) */
	usleep(300000);
	call("/process.Process/Connect", "{\"process\":{\"tag\":\"bg\"}}", 0, &c);
	CHECK(strstr(c.body.buf, "\"exited\":true") && strstr(c.body.buf, "END {}"));
	kiln_buf_free(&c.body);

	bg_join(b1);
	/* signals */
	struct bg *b2 = call_bg("/process.Process/Start", "{\"process\":{\"cmd\":\"sleep\",\"args\":[\"60\"]},\"tag\":\"s\"}");
	call("/process.Process/SendSignal", "{\"process\":{\"tag\":\"s\"},\"signal\":\"SIGNAL_SIGKILL\"}", 0, &c);
	CHECK_INT(c.status, 200);
	if (c.status != 200)
		printf("#   %s\n", c.body.buf);
	kiln_buf_free(&c.body);
	call("/process.Process/Connect", "{\"process\":{\"tag\":\"s\"}}", 0, &c);
	CHECK(strstr(c.body.buf, "\"exited\":false") && strstr(c.body.buf, "signal"));
	kiln_buf_free(&c.body);
	bg_join(b2);
	call("/process.Process/SendSignal", "{\"process\":{\"pid\":999999},\"signal\":\"SIGNAL_SIGKILL\"}", 0, &c);
	CHECK_INT(c.status, 404);
	CHECK(strstr(c.body.buf, "\"code\":\"not_found\"") != NULL);
	kiln_buf_free(&c.body);
	call("/process.Process/SendSignal", "{\"process\":{\"pid\":1},\"signal\":\"SIGNAL_SIGSTOP\"}", 0, &c);
	CHECK_INT(c.status, 400);
	kiln_buf_free(&c.body);

	/* a PTY: input, resize, output from the terminal */
	struct bg *b3 = call_bg("/process.Process/Start",
				"{\"process\":{\"cmd\":\"/bin/sh\"},\"pty\":{\"size\":{\"cols\":80,\"rows\":24}},\"tag\":\"t\"}");
	call("/process.Process/Update", "{\"process\":{\"tag\":\"t\"},\"pty\":{\"size\":{\"cols\":123,\"rows\":45}}}", 0, &c);
	CHECK_INT(c.status, 200);
	kiln_buf_free(&c.body);
	/* "stty size; exit\n" */
	call("/process.Process/SendInput", "{\"process\":{\"tag\":\"t\"},\"input\":{\"pty\":\"c3R0eSBzaXplOyBleGl0Cg==\"}}", 0, &c);
	CHECK_INT(c.status, 200);
	kiln_buf_free(&c.body);
	pthread_join(b3->t, NULL);
	/* "45 123" on the terminal, as base64 somewhere in the pty data */
	CHECK(strstr(b3->c.body.buf, "\"pty\":") != NULL && strstr(b3->c.body.buf, "\"exited\":true") != NULL);
	kiln_buf m = KILN_BUF_INIT, all = KILN_BUF_INIT;
	for (const char *q = b3->c.body.buf; (q = strstr(q, "\"pty\":\"")); q += 7) {
		q += 7;
		kiln_b64_decode_bytes(q, strcspn(q, "\""), &m);
		kiln_buf_add(&all, m.buf, m.len);
	}
	CHECK(strstr(all.buf, "45 123") != NULL);
	kiln_buf_free(&m);
	kiln_buf_free(&all);
	bg_join(b3);
}

static void test_filesystem(void)
{
	struct capture c = { 0 };
	char js[1024];
	kiln_buf data = KILN_BUF_INIT;
	kiln_error *err = NULL;

	snprintf(js, sizeof(js), "{\"path\":\"%s/a/b\"}", dir);
	call("/filesystem.Filesystem/MakeDir", js, 0, &c);
	CHECK_INT(c.status, 200);
	CHECK(strstr(c.body.buf, "\"type\":\"FILE_TYPE_DIRECTORY\"") && strstr(c.body.buf, "\"name\":\"b\""));
	CHECK(strstr(c.body.buf, "\"permissions\":\"drwxr-xr-x\""));
	kiln_buf_free(&c.body);
	call("/filesystem.Filesystem/MakeDir", js, 0, &c);
	CHECK_INT(c.status, 409);
	CHECK(strstr(c.body.buf, "already_exists") != NULL);
	kiln_buf_free(&c.body);

	char *f = kiln_xasprintf("%s/a/b/f.txt", dir);
	CHECK(rt_file_write(sb, NULL, f, "hello", 5, NULL, &err) == 0);
	CHECK(rt_file_read(sb, NULL, f, &data, &err) == 0 && data.len == 5 && memcmp(data.buf, "hello", 5) == 0);
	snprintf(js, sizeof(js), "{\"path\":\"%s\"}", f);
	call("/filesystem.Filesystem/Stat", js, 0, &c);
	CHECK(strstr(c.body.buf, "\"size\":\"5\"") && strstr(c.body.buf, "\"mode\":420"));
	CHECK(strstr(c.body.buf, "\"modifiedTime\":\"20") && strstr(c.body.buf, "Z\""));
	kiln_buf_free(&c.body);
	snprintf(js, sizeof(js), "{\"path\":\"%s\",\"depth\":3}", dir);
	call("/filesystem.Filesystem/ListDir", js, 0, &c);
	CHECK(strstr(c.body.buf, "f.txt") && strstr(c.body.buf, "\"name\":\"a\""));
	kiln_buf_free(&c.body);
	snprintf(js, sizeof(js), "{\"path\":\"%s\",\"depth\":1}", dir);
	call("/filesystem.Filesystem/ListDir", js, 0, &c);
	CHECK(strstr(c.body.buf, "f.txt") == NULL);
	kiln_buf_free(&c.body);
	snprintf(js, sizeof(js), "{\"source\":\"%s\",\"destination\":\"%s/c/g.txt\"}", f, dir);
	call("/filesystem.Filesystem/Move", js, 0, &c);
	CHECK_INT(c.status, 200);
	CHECK(strstr(c.body.buf, "g.txt") != NULL);
	kiln_buf_free(&c.body);
	call("/filesystem.Filesystem/Stat", "{\"path\":\"/nonexistent/x\"}", 0, &c);
	CHECK_INT(c.status, 404);
	kiln_buf_free(&c.body);
	snprintf(js, sizeof(js), "{\"path\":\"%s/c\"}", dir);
	call("/filesystem.Filesystem/Remove", js, 0, &c);
	CHECK_INT(c.status, 200);
	kiln_buf_free(&c.body);
	call("/filesystem.Filesystem/Remove", js, 0, &c); /* idempotent */
	CHECK_INT(c.status, 200);
	kiln_buf_free(&c.body);

	/* the watcher trio: an event made after CreateWatcher comes back */
	snprintf(js, sizeof(js), "{\"path\":\"%s/a\",\"recursive\":true}", dir);
	call("/filesystem.Filesystem/CreateWatcher", js, 0, &c);
	CHECK_INT(c.status, 200);
	CHECK_STR(c.body.buf, "{\"watcherId\":\"w1\"}");
	kiln_buf_free(&c.body);
	char *g = kiln_xasprintf("%s/a/b/new.txt", dir);
	CHECK(rt_file_write(sb, NULL, g, "x", 1, NULL, &err) == 0);
	usleep(200000);
	call("/filesystem.Filesystem/GetWatcherEvents", "{\"watcherId\":\"w1\"}", 0, &c);
	CHECK(strstr(c.body.buf, "\"name\":\"b/new.txt\"") && strstr(c.body.buf, "EVENT_TYPE_CREATE"));
	if (!strstr(c.body.buf, "EVENT_TYPE_CREATE"))
		printf("#   %s\n", c.body.buf);
	kiln_buf_free(&c.body);
	call("/filesystem.Filesystem/RemoveWatcher", "{\"watcherId\":\"w1\"}", 0, &c);
	CHECK_INT(c.status, 200);
	kiln_buf_free(&c.body);
	call("/filesystem.Filesystem/GetWatcherEvents", "{\"watcherId\":\"w1\"}", 0, &c);
	CHECK_INT(c.status, 404);
	kiln_buf_free(&c.body);

	/* WatchDir: start, then events, then deadline_exceeded */
	snprintf(js, sizeof(js), "{\"path\":\"%s/a\"}", dir);
	pid_t child = fork();
	if (child == 0) {
		usleep(500000);
		char *h = kiln_xasprintf("%s/a/w.txt", dir);
		FILE *fp = fopen(h, "w");
		if (fp)
			fclose(fp);
		_exit(0);
	}
	call("/filesystem.Filesystem/WatchDir", js, 1500, &c);
	waitpid(child, NULL, 0);
	CHECK(strstr(c.body.buf, "{\"start\":{}}") == c.body.buf);
	if (strstr(c.body.buf, "{\"start\":{}}") != c.body.buf)
		printf("#   WatchDir: %s\n", c.body.buf);
	CHECK(strstr(c.body.buf, "\"name\":\"w.txt\"") != NULL);
	CHECK(strstr(c.body.buf, "END {\"error\":{\"code\":\"deadline_exceeded\"") != NULL);
	kiln_buf_free(&c.body);
	/* a hostile id and bad bodies on unary calls */
	kiln_buf big = KILN_BUF_INIT;
	kiln_buf_adds(&big, "{\"watcherId\":\"");
	for (int i = 0; i < 10000; i++)
		kiln_buf_addc(&big, '9');
	kiln_buf_adds(&big, "\"}");
	call("/filesystem.Filesystem/GetWatcherEvents", big.buf, 0, &c);
	CHECK_INT(c.status, 400);
	kiln_buf_free(&c.body);
	call("/filesystem.Filesystem/Stat", "{\"path\":", 0, &c);
	CHECK_INT(c.status, 400);
	CHECK(strstr(c.body.buf, "invalid_argument") != NULL);
	kiln_buf_free(&c.body);
	kiln_buf_free(&big);
	kiln_buf_free(&data);
	kiln_error_clear(&err);
	free(f);
	free(g);
}

int main(void)
{
	const char *bin = getenv("KILN_AGENT");
	kiln_error *err = NULL;
	char *path;
	pid_t pid;

	signal(SIGPIPE, SIG_IGN);
	RUN(test_codec_hostile);
	if (geteuid() != 0 || mkdtemp(dir) == NULL) {
		printf("ok - runtime against an agent # skip needs root (the agent switches users)\n");
		return test_done();
	}
	path = kiln_path_join(dir, "agent.sock");
	pid = fork();
	if (pid == 0) {
		execl(bin && *bin ? bin : "bin/kiln-agent", "kiln-agent", "--listen", path, "--once", (char *)NULL);
		_exit(127);
	}
	guest_conn *conn = guest_connect(path, 5000, &err);
	CHECK(conn != NULL);
	if (conn && (sb = rt_sandbox_new(conn, (const char *[]){ "TMPL=1", NULL }, "root", NULL, &err)) != NULL) {
		RUN(test_process);
		RUN(test_filesystem);
		rt_sandbox_free(sb);
	}
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	char *cmd = kiln_xasprintf("rm -rf %s", dir);
	if (system(cmd) != 0)
		printf("#   cleanup failed\n");
	free(cmd);
	free(path);
	return test_done();
}
