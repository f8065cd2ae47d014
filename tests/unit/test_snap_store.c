/* test_snap_store.c — the template store without a VM: sparse blobs with
 * the digest of their full content, template names, refs and digest
 * prefixes, and the refusal of configs that are corrupted or not kiln's. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snapshots/internal.h"
#include "test.h"

static char *home;

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK(write(fd, data, len) == (ssize_t)len);
	close(fd);
}

static void test_sparse_blob(void)
{
	enum { SZ = 8 << 20 };
	unsigned char *buf = calloc(1, SZ);
	char *src = kiln_path_join(home, "mem.raw"), *path;
	char digest[KILN_DIGEST_MAX], want[KILN_DIGEST_MAX];
	uint64_t size = 0;
	kiln_error *err = NULL;
	struct stat st;

	memset(buf + 4096 * 3, 0xab, 4096);  /* one data page */
	buf[SZ - 1] = 1;                     /* and the last byte */
	write_file(src, buf, SZ);
	kiln_digest_buf(KILN_SHA256, buf, SZ, want);
	CHECK_INT(snap_blob_put_file(src, true, digest, &size, &err), 0);
	CHECK_STR(digest, want);
	CHECK_INT(size, SZ);
	path = snap_blob_path(digest);
	CHECK_INT(stat(path, &st), 0);
	CHECK_INT(st.st_size, SZ);
	CHECK(st.st_blocks * 512 <= 64 * 1024); /* two pages of data, the rest holes */
	CHECK((st.st_mode & 0222) == 0);        /* blobs are read-only */
	char got[KILN_DIGEST_MAX];
	CHECK_INT(kiln_digest_file(KILN_SHA256, path, got, &err), 0);
	CHECK_STR(got, want);
	/* The same content again is the same blob. */
	CHECK_INT(snap_blob_put_file(src, false, digest, &size, &err), 0);
	CHECK_STR(digest, want);
	CHECK(err == NULL);
	kiln_error_free(err);
	free(path);
	free(src);
	free(buf);
}

static void test_names(void)
{
	static const char *const good[] = { "web", "web:v1", "a/b/c:1.0", "my-app_2.x:Latest_1", NULL };
	static const char *const bad[] = { "", "Web", "/abs", "../x", "a//b", "a:", "a:.x", "a:-x", "a:b c",
					   ".hidden", "a/../b", NULL };
	kiln_error *err = NULL;

	for (int i = 0; good[i]; i++) {
		CHECK_INT(snap_ref_check(good[i], &err), 0);
		kiln_error_clear(&err);
	}
	for (int i = 0; bad[i]; i++) {
		if (snap_ref_check(bad[i], &err) == 0)
			printf("#   accepted bad name '%s'\n", bad[i]);
		CHECK(err != NULL);
		kiln_error_clear(&err);
	}
}

static void test_open(void)
{
	const char *cfg = "{\"schemaVersion\":1,\"mediaType\":\"" SNAP_CONFIG_MEDIA "\","
			  "\"memory\":{\"digest\":\"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"},\"state\":{\"digest\":\"sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"},"
			  "\"disk\":{\"digest\":\"sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc\"},\"rootfs\":{\"digest\":\"sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd\"},"
			  "\"env\":[\"A=1\"]}";
	char digest[KILN_DIGEST_MAX];
	kiln_error *err = NULL;
	snap_template *t;

	CHECK_INT(snap_blob_put_data(cfg, strlen(cfg), digest, &err), 0);
	CHECK_INT(snap_ref_set("app:1", digest, &err), 0);
	t = snap_template_open("app:1", &err);
	CHECK(t != NULL);
	if (t) {
		CHECK_STR(snap_template_digest(t), digest);
		CHECK_INT(t->env.n, 1);
		snap_template_free(t);
	}
	/* By digest and by a unique prefix. */
	t = snap_template_open(digest, &err);
	CHECK(t != NULL);
	snap_template_free(t);
	char prefix[16];
	snprintf(prefix, sizeof(prefix), "%.10s", kiln_digest_hex(digest));
	t = snap_template_open(prefix, &err);
	CHECK(t != NULL);
	snap_template_free(t);
	kiln_error_clear(&err);

	/* An unknown name, an unknown tag. */
	CHECK(snap_template_open("app:2", &err) == NULL);
	CHECK(err && err->kind == KILN_E_NOTFOUND);
	kiln_error_clear(&err);

	/* A config whose bytes changed after it was stored. */
	char *path = snap_blob_path(digest);
	chmod(path, 0644);
	write_file(path, "{\"schemaVersion\":1}", 19);
	CHECK(snap_template_open("app:1", &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "is corrupted") != NULL);
	kiln_error_clear(&err);
	free(path);

	/* Valid JSON with the right digest, but not a kiln template. */
	const char *other = "{\"schemaVersion\":2}";
	CHECK_INT(snap_blob_put_data(other, strlen(other), digest, &err), 0);
	CHECK_INT(snap_ref_set("other", digest, &err), 0);
	CHECK(snap_template_open("other", &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "not a kiln template") != NULL);
	kiln_error_clear(&err);

	json_t *list = snap_template_list(&err);
	CHECK(list && json_array_size(list) == 2);
	json_decref(list);
}

/* A blob digest that is a path names no file of the store (docs/security.md). */
static void test_open_refuses_paths(void)
{
	char ed[KILN_DIGEST_MAX];
	kiln_error *err = NULL;

	const char *evil = "{\"schemaVersion\":1,\"mediaType\":\"" SNAP_CONFIG_MEDIA "\","
			   "\"memory\":{\"digest\":\"sha256:../../../etc/shadow\"},\"state\":{\"digest\":\"sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"},"
			   "\"disk\":{\"digest\":\"sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc\"},\"rootfs\":{\"digest\":\"sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd\"}}";
	CHECK_INT(snap_blob_put_data(evil, strlen(evil), ed, &err), 0);
	CHECK_INT(snap_ref_set("evil:1", ed, &err), 0);
	CHECK(snap_template_open("evil:1", &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "is not sha256:<64 hex digits>"));
	kiln_error_clear(&err);

}

int main(void)
{
	kiln_error *err = NULL;

	home = kiln_mkdtemp("kiln-test-snap", &err);
	if (home == NULL)
		return 1;
	setenv("KILN_HOME", home, 1);
	RUN(test_sparse_blob);
	RUN(test_names);
	RUN(test_open);
	RUN(test_open_refuses_paths);
	kiln_rm_rf(home, &err);
	kiln_error_free(err);
	free(home);
	return test_done();
}
