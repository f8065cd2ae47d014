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
	const char *cfg = "{\"schemaVersion\":1,\"mediaType\":\"" KILN_TMPL_CONFIG_MEDIA "\","
			  "\"memory\":{\"digest\":\"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"size\":1},\"state\":{\"digest\":\"sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\",\"size\":1},"
			  "\"disk\":{\"digest\":\"sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc\",\"size\":1},\"rootfs\":{\"digest\":\"sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd\",\"size\":1},"
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
		CHECK_INT(t->cfg.env.n, 1);
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

	const char *evil = "{\"schemaVersion\":1,\"mediaType\":\"" KILN_TMPL_CONFIG_MEDIA "\","
			   "\"memory\":{\"digest\":\"sha256:../../../etc/shadow\",\"size\":1},\"state\":{\"digest\":\"sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\",\"size\":1},"
			   "\"disk\":{\"digest\":\"sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc\",\"size\":1},\"rootfs\":{\"digest\":\"sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd\",\"size\":1}}";
	CHECK_INT(snap_blob_put_data(evil, strlen(evil), ed, &err), 0);
	CHECK_INT(snap_ref_set("evil:1", ed, &err), 0);
	CHECK(snap_template_open("evil:1", &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "is not sha256:<64 hex digits>"));
	kiln_error_clear(&err);

}

/* A pulled template is checked at import as at restore: blob names that are
 * paths, sources that are symlinks and a disk whose qcow2 backs onto a host
 * file are refused before anything is stored or tagged. */
static char *import_cfg(const char *dir, const char *mem_digest, const char *disk_file, json_t **cfg_out)
{
	const char *roles[] = { "rootfs", "memory", "state", "disk" };
	json_t *cfg = json_pack("{s:i,s:s}", "schemaVersion", SNAP_SCHEMA, "mediaType", KILN_TMPL_CONFIG_MEDIA);
	kiln_error *err = NULL;
	char rootfs_hex[80] = "";

	for (int i = 0; i < 4; i++) {
		char *p = kiln_xasprintf("%s/%s", dir, i == 3 ? disk_file : roles[i]);
		char d[KILN_DIGEST_MAX];
		struct stat st;
		if (i == 3 && *rootfs_hex) { /* the disk backs onto the rootfs blob's name */
			char *cmd = kiln_xasprintf("cd '%s' && cp rootfs %s && [ -e %s ] || qemu-img create -q -f qcow2 -F raw -u "
						   "-b %s %s 1M >/dev/null 2>&1", dir, rootfs_hex, disk_file, rootfs_hex, disk_file);
			CHECK(system(cmd) == 0);
			free(cmd);
		}
		CHECK_INT(kiln_digest_file(KILN_SHA256, p, d, &err), 0);
		CHECK_INT(stat(p, &st), 0);
		if (i == 0)
			snprintf(rootfs_hex, sizeof(rootfs_hex), "%s", kiln_digest_hex(d));
		json_object_set_new(cfg, roles[i], json_pack("{s:s,s:I}", "digest", i == 1 && mem_digest ? mem_digest : d,
							  "size", (json_int_t)st.st_size));
		free(p);
	}
	*cfg_out = cfg;
	kiln_error_free(err);
	return json_dumps(cfg, JSON_COMPACT);
}

static int try_import(const char *dir, const char *mem_digest, const char *disk_file, const char *memory_src,
		      const char *want_msg)
{
	json_t *cfg = NULL;
	char *text = import_cfg(dir, mem_digest, disk_file, &cfg);
	char *paths[4];
	const char *names[] = { "rootfs", memory_src, "state", disk_file };
	kiln_error *err = NULL;

	for (int i = 0; i < 4; i++)
		paths[i] = kiln_path_join(dir, names[i]);
	struct snap_import im = { .config = text, .config_len = strlen(text), .rootfs = paths[0], .memory = paths[1],
				  .state = paths[2], .disk = paths[3], .name = "imported:1" };
	char *d = snap_template_import(&im, &err);
	int rc = d ? 0 : -1;
	if (want_msg) {
		CHECK(d == NULL);
		CHECK(err && strstr(kiln_error_message(err), want_msg) != NULL);
		if (err && !strstr(kiln_error_message(err), want_msg))
			fprintf(stderr, "# got: %s\n", kiln_error_message(err));
		/* nothing tagged */
		snap_template *t = snap_template_open("imported:1", NULL);
		CHECK(t == NULL);
		snap_template_free(t);
	}
	kiln_error_free(err);
	free(d);
	for (int i = 0; i < 4; i++)
		free(paths[i]);
	free(text);
	json_decref(cfg);
	return rc;
}

static void test_import_refuses(void)
{
	char *dir = kiln_path_join(home, "import");
	CHECK_INT(mkdir(dir, 0700), 0);
	const char *files[] = { "rootfs", "memory", "state" };
	for (int i = 0; i < 3; i++) {
		char *p = kiln_path_join(dir, files[i]);
		write_file(p, files[i], strlen(files[i]));
		free(p);
	}
	char *cmd = kiln_xasprintf("cd '%s' && ln -s /etc/passwd memlink && qemu-img create -q -f qcow2 -F raw -u "
				   "-b /etc/shadow evil.qcow2 1M && qemu-img create -q -f qcow2 -o data_file=data.raw "
				   "df.qcow2 1M", dir);
	CHECK(system(cmd) == 0);
	free(cmd);

	CHECK_INT(try_import(dir, "sha256:../../../etc/shadow", "disk.qcow2", "memory", "is not sha256:<64 hex digits>"), -1);
	CHECK_INT(try_import(dir, "/etc/shadow", "disk.qcow2", "memory", "is not sha256:<64 hex digits>"), -1);
	CHECK_INT(try_import(dir, "sha512:00", "disk.qcow2", "memory", "is not sha256:<64 hex digits>"), -1);
	CHECK_INT(try_import(dir, NULL, "disk.qcow2", "memlink", "is not a regular file (a symlink)"), -1);
	CHECK_INT(try_import(dir, NULL, "evil.qcow2", "memory", "'/etc/shadow'"), -1);
	CHECK_INT(try_import(dir, NULL, "df.qcow2", "memory", "data file"), -1);
	/* the same files, honest: imported and tagged */
	CHECK_INT(try_import(dir, NULL, "disk.qcow2", "memory", NULL), 0);
	snap_template *t = snap_template_open("imported:1", NULL);
	CHECK(t != NULL);
	snap_template_free(t);
	free(dir);
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
	RUN(test_import_refuses);
	kiln_rm_rf(home, &err);
	kiln_error_free(err);
	free(home);
	return test_done();
}
