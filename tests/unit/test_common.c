/* test_common.c — unit tests for common/: errors and their context chain,
 * string buffers, digests against known vectors, atomic writes, sizes. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln.h"
#include "tests/unit/test.h"

static int count_one(void *ud, size_t i, unsigned worker, kiln_error **err)
{
	int *seen = ud;

	if (worker >= 4)
		return kiln_err(err, KILN_E_GENERIC, "worker %u of 4", worker);
	__atomic_add_fetch(&seen[i], 1, __ATOMIC_RELAXED);
	return i == 1500 ? kiln_err(err, KILN_E_INVALID, "item %zu refused", i) : 0;
}

/* Each item once, on the workers asked for; the first failure is the error. */
static void parallel_items(void)
{
	int seen[2000] = { 0 };
	kiln_error *err = NULL;

	CHECK(kiln_parallel(1000, 4, count_one, seen, &err) == 0);
	int once = 1;
	for (size_t i = 0; i < 1000; i++)
		once &= seen[i] == 1;
	CHECK(once);
	CHECK(kiln_parallel(2000, 4, count_one, seen, &err) < 0);
	CHECK(err != NULL && strcmp(kiln_error_message(err), "item 1500 refused") == 0);
	kiln_error_clear(&err);
	CHECK(kiln_parallel(0, 0, count_one, seen, &err) == 0);
}

static void error_chain(void)
{
	kiln_error *err = NULL;

	CHECK(kiln_err_errno(&err, ENOENT, "open %s", "/x") == -1);
	CHECK_INT(err->kind, KILN_E_NOTFOUND);
	CHECK_INT(err->errnum, ENOENT);
	kiln_error_wrap(&err, "guest exec");
	kiln_error_wrap(&err, "build: step %d/%d RUN", 3, 7);
	CHECK_STR(kiln_error_message(err), "build: step 3/7 RUN: guest exec: open /x: No such file or directory");
	CHECK_STR(kiln_error_cause(err), "open /x: No such file or directory");
	kiln_error_wrap(&err, "outer");
	CHECK_STR(kiln_error_message(err), "outer: build: step 3/7 RUN: guest exec: open /x: No such file or directory");
	kiln_error_clear(&err);
	CHECK(err == NULL);
}

static void buf_and_strv(void)
{
	kiln_buf b = KILN_BUF_INIT;
	kiln_strv sv = KILN_STRV_INIT;
	char *s;

	CHECK_STR(b.buf, "");
	for (int i = 0; i < 1000; i++)
		kiln_buf_addf(&b, "%d,", i);
	CHECK(b.len == strlen(b.buf));
	CHECK(strncmp(b.buf, "0,1,2,", 6) == 0);
	s = kiln_buf_detach(&b);
	CHECK_STR(b.buf, "");
	free(s);
	kiln_strv_push(&sv, "a");
	kiln_strv_push(&sv, "b");
	CHECK_INT(sv.n, 2);
	CHECK_STR(sv.v[1], "b");
	CHECK(sv.v[2] == NULL);
	kiln_strv_free(&sv);
}

static void digests(void)
{
	char d[KILN_DIGEST_MAX];
	kiln_error *err = NULL;
	enum kiln_digest_algo algo;

	kiln_digest_buf(KILN_SHA256, "abc", 3, d);
	CHECK_STR(d, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	kiln_digest_buf(KILN_SHA512, "", 0, d);
	CHECK_STR(d, "sha512:cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce"
		     "47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e");
	CHECK(kiln_digest_parse(d, &algo, &err) == 0 && algo == KILN_SHA512);
	CHECK(kiln_digest_parse("sha256:ABC", &algo, &err) < 0);
	CHECK(err != NULL && err->kind == KILN_E_INVALID);
	kiln_error_clear(&err);
	CHECK(kiln_digest_parse("md5:d41d8cd98f00b204e9800998ecf8427e", &algo, &err) < 0);
	kiln_error_clear(&err);
	CHECK_STR(kiln_digest_hex("sha256:00ff"), "00ff");
}

static void atomic_write_and_read(void)
{
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-test", &err);
	char *path, *sub, *data = NULL;
	char d[KILN_DIGEST_MAX];
	size_t len = 0;
	struct stat st;

	CHECK(dir != NULL);
	if (dir == NULL)
		return;
	path = kiln_path_join(dir, "f.txt");
	CHECK(kiln_write_atomic(path, "hello", 5, 0600, &err) == 0);
	CHECK(kiln_write_atomic(path, "hello world", 11, 0640, &err) == 0);
	CHECK(kiln_read_file(path, &data, &len, 0, &err) == 0);
	CHECK_INT(len, 11);
	CHECK_STR(data, "hello world");
	free(data);
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0640);
	CHECK(kiln_digest_file(KILN_SHA256, path, d, &err) == 0);
	CHECK_STR(d, "sha256:b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9");
	CHECK(kiln_read_file(path, &data, &len, 4, &err) < 0);
	CHECK(err != NULL && err->kind == KILN_E_LIMIT);
	kiln_error_clear(&err);
	sub = kiln_path_join(dir, "a/b/c");
	CHECK(kiln_mkdir_p(sub, 0755, &err) == 0);
	CHECK(kiln_mkdir_p(sub, 0755, &err) == 0);
	CHECK(stat(sub, &st) == 0 && S_ISDIR(st.st_mode));
	CHECK(symlink("/", path) < 0); /* exists: not replaced */
	free(sub);
	/* a file where a directory should be, as the last part or on the way */
	CHECK(kiln_mkdir_p(path, 0755, &err) < 0);
	CHECK(err != NULL && err->kind == KILN_E_EXISTS && strstr(kiln_error_message(err), "not a directory"));
	kiln_error_clear(&err);
	sub = kiln_path_join(path, "x/y");
	CHECK(kiln_mkdir_p(sub, 0755, &err) < 0);
	CHECK(err != NULL && strstr(kiln_error_message(err), "mkdir "));
	kiln_error_clear(&err);
	free(sub);
	CHECK(kiln_mkdir_p("", 0755, &err) < 0);
	kiln_error_clear(&err);
	CHECK(kiln_mkdir_p("/proc/kiln-test/x", 0755, &err) < 0); /* refused, even to root */
	CHECK(err != NULL && strstr(kiln_error_message(err), "mkdir /proc/kiln-test"));
	kiln_error_clear(&err);
	CHECK(kiln_mkdir_p("/tmp", 0755, &err) == 0); /* there: fine even where mkdir is refused */
	sub = kiln_path_join(dir, "a/link");
	CHECK(symlink("/etc", sub) == 0);
	CHECK(kiln_rm_rf(dir, &err) == 0);
	CHECK(access(dir, F_OK) < 0);
	CHECK(access("/etc/passwd", F_OK) == 0); /* the symlink was not followed */
	CHECK(kiln_read_file(path, &data, &len, 0, &err) < 0);
	CHECK(err != NULL && err->kind == KILN_E_NOTFOUND);
	kiln_error_clear(&err);
	free(sub);
	free(path);
	free(dir);
}

static void json_helpers(void)
{
	kiln_error *err = NULL;
	json_t *v = kiln_json_loadb("{\"b\":1,\"a\":\"x\"}", 15, "t.json", &err);
	char *s;

	CHECK(v != NULL);
	s = kiln_json_dumps_canonical(v);
	CHECK_STR(s, "{\"a\":\"x\",\"b\":1}");
	free(s);
	CHECK_STR(kiln_json_str(v, "a"), "x");
	CHECK(kiln_json_str(v, "b") == NULL);
	CHECK_INT(kiln_json_int(v, "b", 0), 1);
	json_decref(v);
	v = kiln_json_loadb("{\"a\":1,\n\"a\":2}", 14, "t.json", &err);
	CHECK(v == NULL);
	CHECK(err != NULL && strncmp(kiln_error_message(err), "t.json:2:", 9) == 0);
	kiln_error_clear(&err);
}

static void sizes(void)
{
	kiln_error *err = NULL;
	uint64_t v = 0;

	CHECK(kiln_parse_size("512", &v, &err) == 0 && v == 512);
	CHECK(kiln_parse_size("64K", &v, &err) == 0 && v == 65536);
	CHECK(kiln_parse_size("2GiB", &v, &err) == 0 && v == 2ULL << 30);
	CHECK(kiln_parse_size("1x", &v, &err) < 0);
	kiln_error_clear(&err);
	CHECK(kiln_parse_size("", &v, &err) < 0);
	kiln_error_clear(&err);
	CHECK(kiln_parse_size("99999999999T", &v, &err) < 0);
	kiln_error_clear(&err);
}

/* The one duration parser (sandbox --timeout, cache prune, token --ttl). */
static void durations(void)
{
	kiln_error *err = NULL;
	int64_t v = -1;

	CHECK(kiln_parse_duration("90", &v, &err) == 0 && v == 90);
	CHECK(kiln_parse_duration("90s", &v, &err) == 0 && v == 90);
	CHECK(kiln_parse_duration("30m", &v, &err) == 0 && v == 1800);
	CHECK(kiln_parse_duration("12H", &v, &err) == 0 && v == 12 * 3600);
	CHECK(kiln_parse_duration("7d", &v, &err) == 0 && v == 7 * 86400);
	CHECK(kiln_parse_duration("0", &v, &err) == 0 && v == 0);
	static const char *const bad[] = { "", "s", "-5m", "7x", "7dd", "9223372036854775807d", "99999999999999999999" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK(kiln_parse_duration(bad[i], &v, &err) < 0);
		CHECK(err && err->kind == KILN_E_USAGE && strstr(kiln_error_message(err), "bad duration") != NULL);
		kiln_error_clear(&err);
	}
}

/* RFC 3339 in UTC, whatever the local zone. */
static void times(void)
{
	char buf[KILN_TIME_MAX];

	CHECK_STR(kiln_time_rfc3339(0, buf), "1970-01-01T00:00:00Z");
	setenv("TZ", "America/New_York", 1);
	tzset();
	CHECK_STR(kiln_time_rfc3339(1700000000, buf), "2023-11-14T22:13:20Z");
	CHECK_STR(kiln_time_rfc3339(951782400, buf), "2000-02-29T00:00:00Z");
	unsetenv("TZ");
	tzset();
}

/* The one reference parser: what each store names a reference by. */
static void references(void)
{
	static const char *const D = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	static const struct { const char *in, *host, *name, *tag, *str; } ok[] = {
		{ "dist", NULL, "dist", "latest", "dist:latest" },
		{ "dist:v1", NULL, "dist", "v1", "dist:v1" },
		{ "team/dist:v1", NULL, "team/dist", "v1", "team/dist:v1" },
		{ "127.0.0.1:5000/team/dist:v1", "127.0.0.1:5000", "team/dist", "v1", "127.0.0.1:5000/team/dist:v1" },
		{ "localhost/app", "localhost", "app", "latest", "localhost/app:latest" },
		{ "[::1]:5000/a/b:T_1", "[::1]:5000", "a/b", "T_1", "[::1]:5000/a/b:T_1" },
		{ "ghcr.io/o/r", "ghcr.io", "o/r", "latest", "ghcr.io/o/r:latest" },
	};
	static const char *const bad[] = { "", "Dist", "dist:", "dist:-x", "a//b", "/abs", "../x", "a/../b", ".x",
					   "dist@sha256:12", "bad_host:99999/x", "a b", "host:5000/" };
	kiln_error *err = NULL;
	struct kiln_ref r;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		if (kiln_ref_parse(ok[i].in, &r, &err) < 0) {
			printf("#   %s: %s\n", ok[i].in, kiln_error_message(err));
			CHECK(0);
			kiln_error_clear(&err);
			continue;
		}
		char *s = kiln_ref_str(&r);
		CHECK(ok[i].host ? r.host && strcmp(r.host, ok[i].host) == 0 : r.host == NULL);
		CHECK_STR(r.name, ok[i].name);
		CHECK_STR(r.tag, ok[i].tag);
		CHECK_STR(s, ok[i].str);
		free(s);
		kiln_ref_free(&r);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (kiln_ref_parse(bad[i], &r, &err) == 0) {
			printf("#   accepted '%s'\n", bad[i]);
			CHECK(0);
			kiln_ref_free(&r);
		}
		kiln_error_clear(&err);
	}
	/* a digest wins over a tag in the local name */
	char *in = kiln_xasprintf("127.0.0.1:5000/team/dist:v1@%s", D), *want = kiln_xasprintf("127.0.0.1:5000/team/dist@%s", D);
	char *got = kiln_ref_normalize(in, &err);
	CHECK_STR(got, want);
	free(got);
	free(in);
	free(want);
	CHECK(kiln_ref_parse("dist@sha256:0123", &r, &err) < 0 && strstr(kiln_error_message(err), "bad digest"));
	kiln_error_clear(&err);
	CHECK(kiln_ref_parse("Team/App", &r, &err) < 0 && strstr(kiln_error_message(err), "'T' is not allowed"));
	kiln_error_clear(&err);
}

/* kiln_read_all keeps the head and reads the rest, so a child writing more
 * than is kept exits instead of blocking on a full pipe (vm_run_tool). */
static void read_all_drains(void)
{
	enum { TOTAL = 200 * 1024 };
	for (int keep = 0; keep <= 8192; keep += 8192) {
		int p[2];
		CHECK_INT(pipe(p), 0);
		pid_t pid = fork();
		if (pid == 0) {
			static char block[TOTAL];
			close(p[0]);
			for (size_t i = 0; i < sizeof(block); i++)
				block[i] = (char)('a' + i % 26);
			_exit(kiln_write_full(p[1], block, sizeof(block)) == 0 ? 0 : 1);
		}
		close(p[1]);
		kiln_buf b = KILN_BUF_INIT;
		int status = -1;
		CHECK_INT((int)kiln_read_all(p[0], &b, (size_t)keep), TOTAL);
		close(p[0]);
		CHECK_INT((int)b.len, keep ? keep : TOTAL);
		CHECK(b.len > 27 && b.buf[0] == 'a' && b.buf[26] == 'a' && b.buf[b.len - 1] == (char)('a' + (b.len - 1) % 26));
		CHECK(kiln_waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
		kiln_buf_free(&b);
	}
	CHECK_INT((int)kiln_read_all(-1, &(kiln_buf)KILN_BUF_INIT, 0), -1);
}

/* 40 directories of 10 under ROOT: enough entries for two removers to meet. */
static void rm_rf_tree(const char *root, kiln_error **err)
{
	for (int i = 0; i < 40; i++)
		for (int j = 0; j < 10; j++) {
			char *p = kiln_xasprintf("%s/d%02d/e%02d", root, i, j);
			CHECK_INT(kiln_mkdir_p(p, 0755, err), 0);
			free(p);
		}
}

/* Two removers of one tree (a sandbox killed while something else removes
 * it): each sees parts vanish under it, and neither may fail for that.
 * Directories of empty directories make the walks collide often: a
 * directory stat'ed by one is gone before the other opens it. */
static void rm_rf_concurrent(void)
{
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-test-rm", &err);
	int failed = 0;

	CHECK(dir != NULL);
	for (int round = 0; dir && round < 10 && failed == 0; round++) {
		char *root = kiln_xasprintf("%s/t%d", dir, round);
		rm_rf_tree(root, &err);
		pid_t kids[3];
		for (int k = 0; k < 3; k++)
			if ((kids[k] = fork()) == 0) {
				kiln_error *e = NULL;
				int r = kiln_rm_rf(root, &e);
				if (r < 0)
					fprintf(stderr, "# rm_rf_concurrent: %s\n", kiln_error_message(e));
				_exit(r < 0 ? 1 : 0);
			}
		for (int k = 0; k < 3; k++) {
			int status = -1;
			if (kids[k] > 0 && kiln_waitpid(kids[k], &status, 0) == kids[k] && !(WIFEXITED(status) &&
											     WEXITSTATUS(status) == 0))
				failed++;
		}
		CHECK(access(root, F_OK) < 0 && errno == ENOENT);
		free(root);
	}
	CHECK_INT(failed, 0);
	if (dir)
		kiln_rm_rf(dir, NULL);
	free(dir);
	kiln_error_free(err);
}

/* A file made in a tree while it is removed (a sandbox's late lock file:
 * its timeout watcher starting as the sandbox is killed) is removed too. */
static void rm_rf_late_file(void)
{
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-test-rm", &err);
	int failed = 0;

	CHECK(dir != NULL);
	for (int round = 0; dir && round < 10; round++) {
		char *root = kiln_xasprintf("%s/t%d", dir, round), *late = kiln_path_join(root, "watch.lock");
		rm_rf_tree(root, &err);
		int go[2];
		CHECK_INT(pipe(go), 0);
		pid_t kid = fork();
		if (kid == 0) {
			char c;
			close(go[1]);
			(void)!read(go[0], &c, 1);
			kiln_sleep_ms(1 + round % 3);
			int fd = open(late, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
			_exit(fd >= 0 ? 0 : 1);
		}
		close(go[0]);
		(void)!write(go[1], "x", 1);
		close(go[1]);
		if (kiln_rm_rf(root, &err) < 0) {
			printf("# rm_rf_late_file: %s\n", kiln_error_message(err));
			kiln_error_clear(&err);
			failed++;
		}
		int status;
		kiln_waitpid(kid, &status, 0);
		/* made after the walk was over: nothing to remove it (what the test is not about) */
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && access(root, F_OK) == 0)
			kiln_rm_rf(root, NULL);
		free(late);
		free(root);
	}
	CHECK_INT(failed, 0);
	if (dir)
		kiln_rm_rf(dir, NULL);
	free(dir);
	kiln_error_free(err);
}

/* A sparse copy has the source's bytes and keeps its holes; a missing
 * source and an unwritable destination are errors naming the file. */
static void copy_sparse(void)
{
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-test-sparse", &err);
	CHECK(dir != NULL);
	char *src = kiln_path_join(dir, "src"), *dst = kiln_path_join(dir, "dst");
	int fd = open(src, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	char a[5000], b[3000];
	memset(a, 'a', sizeof(a));
	memset(b, 'b', sizeof(b));
	CHECK(fd >= 0 && kiln_pwrite_full(fd, a, sizeof(a), 0) == 0 && kiln_pwrite_full(fd, b, sizeof(b), 3 << 20) == 0 &&
	      ftruncate(fd, 8 << 20) == 0);
	close(fd);
	CHECK(kiln_copy_sparse(src, dst, true, &err) == 0);
	char *x = NULL, *y = NULL;
	size_t xl = 0, yl = 0;
	CHECK(kiln_read_file(src, &x, &xl, 0, NULL) == 0 && kiln_read_file(dst, &y, &yl, 0, NULL) == 0);
	CHECK(xl == 8u << 20 && yl == xl && memcmp(x, y, xl) == 0);
	struct stat st;
	CHECK(stat(dst, &st) == 0 && st.st_blocks * 512 < (1 << 20)); /* the holes stayed holes */
	free(x);
	free(y);
	CHECK(kiln_copy_sparse("/nonexistent/src", dst, false, &err) < 0 && strstr(kiln_error_message(err), "/nonexistent/src"));
	kiln_error_clear(&err);
	CHECK(kiln_copy_sparse(src, "/nonexistent/dst", false, &err) < 0 && strstr(kiln_error_message(err), "/nonexistent/dst"));
	kiln_error_clear(&err);
	kiln_rm_rf(dir, NULL);
	free(src);
	free(dst);
	free(dir);
}

int main(void)
{
	RUN(error_chain);
	RUN(parallel_items);
	RUN(buf_and_strv);
	RUN(digests);
	RUN(atomic_write_and_read);
	RUN(json_helpers);
	RUN(sizes);
	RUN(durations);
	RUN(times);
	RUN(references);
	RUN(read_all_drains);
	RUN(rm_rf_concurrent);
	RUN(rm_rf_late_file);
	RUN(copy_sparse);
	return test_done();
}
