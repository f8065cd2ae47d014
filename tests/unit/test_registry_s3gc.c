/* test_registry_s3gc.c — garbage collection on the S3 backend, live against
 * the S3 server named by KILN_TEST_S3_ENDPOINT (tests/e2e/t0706 starts
 * radosgw): a writer referencing a blob exactly while gc has put its tomb on
 * it (gc must keep the blob, the writer must succeed); an unpinned,
 * unreferenced blob and its links removed; a stale multipart upload aborted;
 * listings over several pages.
 * `test_registry_s3gc check BUCKET` checks a bucket's invariants instead:
 * every link names an existing blob of its size, every manifest's blobs are
 * linked in its repository and exist. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registry/internal.h"
#include "test.h"

static struct reg_config cfg;
static reg_store st;
static char blob_digest[KILN_DIGEST_MAX], man_digest[KILN_DIGEST_MAX];
static kiln_buf man = KILN_BUF_INIT;
static const char blob_bytes[] = "a layer that gc and a writer fight over";

static int commit_blob(const char *repo, kiln_error **err)
{
	char *dir = kiln_mkdtemp("s3gc", err), *path;
	int ret;

	if (dir == NULL)
		return -1;
	path = kiln_path_join(dir, "data");
	ret = kiln_write_atomic(path, blob_bytes, strlen(blob_bytes), 0600, err);
	if (ret == 0)
		ret = reg_s3m_blob_commit(&st, repo, blob_digest, path, (int64_t)strlen(blob_bytes), err);
	kiln_rm_rf(dir, NULL);
	free(path);
	free(dir);
	return ret;
}

/* The writer: a manifest PUT whose config and layer are the blob. */
static int writer_result = -2;

static void *writer(void *arg)
{
	struct oci_manifest m;
	kiln_error *err = NULL;
	long missing = -1;

	if (oci_manifest_parse(man.buf, man.len, NULL, &m, &err) < 0) {
		printf("#   %s\n", kiln_error_message(err));
		kiln_error_free(err);
		return NULL;
	}
	writer_result = reg_s3m_manifest_put(&st, "r/a", man_digest, &man, &m, "v1", &missing, &err);
	if (err)
		printf("#   writer: %s\n", kiln_error_message(err));
	kiln_error_free(err);
	oci_manifest_free(&m);
	return NULL;
}

static pthread_t writer_thread;
static int hook_calls;

/* Called by gc right after its tomb is on the blob: the writer starts now,
 * pins, finds the tomb and must wait; gc then sees the fresh pin. */
static void start_writer(const char *digest)
{
	hook_calls++;
	if (strcmp(digest, blob_digest) != 0)
		return;
	pthread_create(&writer_thread, NULL, writer, NULL);
	sleep(2);
}

static int exists(const char *key)
{
	kiln_error *err = NULL;
	int r = reg_s3_stat(&st.s3, key, NULL, NULL, &err);

	kiln_error_free(err);
	return r;
}

#define OLD_PIN "1111111111111111111111111111111111111111111111111111111111111111"
#define NEW_PIN "2222222222222222222222222222222222222222222222222222222222222222"

static void test_race(void)
{
	struct reg_gc_stats stats;
	kiln_error *err = NULL;
	char *bkey = reg_s3m_blob_key(blob_digest);
	char *link = kiln_xasprintf("repositories/r/a/_layers/sha256/%s", kiln_digest_hex(blob_digest));

	CHECK(commit_blob("r/a", &err) == 0);
	CHECK(exists(bkey) == 1 && exists(link) == 1);
	sleep((unsigned)cfg.gc_pin_s + 1); /* the commit's pin expires: gc may take the blob */
	reg_gc_s3_test_hook = start_writer;
	CHECK(reg_gc(&cfg, 0, &stats, &err) == 0);
	reg_gc_s3_test_hook = NULL;
	CHECK_INT(hook_calls, 1);
	if (hook_calls == 1)
		pthread_join(writer_thread, NULL);
	CHECK_INT(writer_result, 1);
	CHECK_INT(stats.blobs_removed, 0);
	CHECK(exists(bkey) == 1 && exists(link) == 1);
	/* Unreferenced again and unpinned: now it goes, links first. */
	CHECK_INT(reg_s3m_manifest_delete(&st, "r/a", man_digest, &err), 1);
	/* Pins of digests that never became blobs: an old one goes, a fresh one stays. */
	CHECK(reg_s3_put(&st.s3, "_gc/pins/sha256/" OLD_PIN, "", 0, &err) == 0);
	sleep((unsigned)cfg.gc_pin_s + 1);
	CHECK(reg_s3_put(&st.s3, "_gc/pins/sha256/" NEW_PIN, "", 0, &err) == 0);
	CHECK(reg_gc(&cfg, 0, &stats, &err) == 0);
	CHECK_INT(stats.blobs_removed, 1);
	CHECK(exists(bkey) == 0 && exists(link) == 0);
	CHECK_INT(exists("_gc/pins/sha256/" OLD_PIN), 0);
	CHECK_INT(exists("_gc/pins/sha256/" NEW_PIN), 1);
	/* A manifest naming it now is refused, not stored dangling. */
	writer_result = -2;
	writer(NULL);
	CHECK_INT(writer_result, 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_free(err);
	free(bkey);
	free(link);
}

static int count_upload(void *ud, const char *key, const char *upload_id, int64_t initiated)
{
	if (strcmp(key, "blobs/sha256/zz/stale") == 0)
		(*(int *)ud)++;
	return 0;
}

static void test_multipart(void)
{
	struct reg_gc_stats stats;
	kiln_error *err = NULL;
	char *id = NULL;
	int n = 0;

	CHECK(reg_s3_multipart_start(&st.s3, "blobs/sha256/zz/stale", &id, &err) == 0);
	CHECK(reg_s3_list_multipart(&st.s3, count_upload, &n, &err) == 0);
	CHECK_INT(n, 1);
	cfg.upload_expiry_s = 0;
	sleep(1);
	CHECK(reg_gc(&cfg, 1, &stats, &err) == 0); /* dry run: counted, kept */
	CHECK(stats.uploads_removed >= 1);
	n = 0;
	CHECK(reg_s3_list_multipart(&st.s3, count_upload, &n, &err) == 0);
	CHECK_INT(n, 1);
	CHECK(reg_gc(&cfg, 0, &stats, &err) == 0);
	n = 0;
	CHECK(reg_s3_list_multipart(&st.s3, count_upload, &n, &err) == 0);
	CHECK_INT(n, 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_free(err);
	free(id);
}

/* Listings across several pages (continuation tokens, markers). */
static int collect_keys(void *ud, const char *key, int64_t size, int64_t mtime)
{
	kiln_strv_push(ud, key);
	return 0;
}

static int count_all(void *ud, const char *key, const char *upload_id, int64_t initiated)
{
	if (strncmp(key, "pages/", 6) == 0)
		(*(int *)ud)++;
	return 0;
}

static void test_pages(void)
{
	kiln_strv keys = KILN_STRV_INIT;
	kiln_error *err = NULL;
	char *ids[4] = { NULL };
	int more = -1, n = 0;

	for (int i = 0; i < 10; i++) {
		char k[32];
		snprintf(k, sizeof(k), "pages/k%02d", i);
		CHECK(reg_s3_put(&st.s3, k, "x", 1, &err) == 0);
	}
	reg_s3_page_size = 3;
	CHECK(reg_s3_list(&st.s3, "pages/", NULL, 0, collect_keys, &keys, &more, &err) == 0);
	CHECK_INT(keys.n, 10);
	CHECK_INT(more, 0);
	for (size_t i = 0; i < keys.n; i++) {
		char k[32];
		snprintf(k, sizeof(k), "pages/k%02zu", i);
		CHECK_STR(keys.v[i], k);
	}
	kiln_strv_free(&keys);
	keys = (kiln_strv)KILN_STRV_INIT;
	CHECK(reg_s3_list(&st.s3, "pages/", "pages/k03", 4, collect_keys, &keys, &more, &err) == 0);
	CHECK_INT(keys.n, 4);
	CHECK(keys.n == 4 && strcmp(keys.v[0], "pages/k04") == 0 && strcmp(keys.v[3], "pages/k07") == 0);
	CHECK_INT(more, 1);
	for (int i = 0; i < 4; i++) {
		char k[32];
		snprintf(k, sizeof(k), "pages/u%d", i);
		CHECK(reg_s3_multipart_start(&st.s3, k, &ids[i], &err) == 0);
	}
	CHECK(reg_s3_list_multipart(&st.s3, count_all, &n, &err) == 0);
	CHECK_INT(n, 4);
	reg_s3_page_size = 1000;
	for (int i = 0; i < 4; i++) {
		char k[32];
		snprintf(k, sizeof(k), "pages/u%d", i);
		if (ids[i])
			CHECK(reg_s3_abort_multipart(&st.s3, k, ids[i], &err) == 0);
		free(ids[i]);
	}
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_free(err);
	kiln_strv_free(&keys);
}

/* ---- `check BUCKET` ---- */

struct chk {
	kiln_strv links, manifests;
};

static int collect(void *ud, const char *key, int64_t size, int64_t mtime)
{
	struct chk *c = ud;

	if (strstr(key, "/_layers/"))
		kiln_strv_push(&c->links, key);
	else if (strstr(key, "/_manifests/"))
		kiln_strv_push(&c->manifests, key);
	return 0;
}

/* "repositories/NAME/_kind/ALGO/HEX" -> NAME and ALGO:HEX */
static void split(const char *key, const char *kind, char **repo, char digest[KILN_DIGEST_MAX])
{
	const char *r = key + strlen("repositories/"), *k = strstr(r, kind), *d = k + strlen(kind);

	*repo = kiln_xstrndup(r, (size_t)(k - r));
	snprintf(digest, KILN_DIGEST_MAX, "%.*s:%s", (int)strcspn(d, "/"), d, d + strcspn(d, "/") + 1);
}

static void test_bucket(void)
{
	struct chk c = { KILN_STRV_INIT, KILN_STRV_INIT };
	kiln_error *err = NULL;
	kiln_buf b = KILN_BUF_INIT;

	CHECK(reg_s3_list(&st.s3, "repositories/", NULL, 0, collect, &c, NULL, &err) == 0);
	printf("# %zu links, %zu manifests in bucket %s\n", c.links.n, c.manifests.n, st.s3.bucket);
	for (size_t i = 0; i < c.links.n; i++) {
		char *repo, d[KILN_DIGEST_MAX], *bkey;
		int64_t size = -1, want = -2;

		split(c.links.v[i], "/_layers/", &repo, d);
		bkey = reg_s3m_blob_key(d);
		if (reg_s3m_blob_linked(&st, repo, d, &want, &err) == 1 &&
		    (reg_s3_stat(&st.s3, bkey, &size, NULL, &err) != 1 || size != want)) {
			printf("#   link %s: blob %s missing or of the wrong size\n", c.links.v[i], d);
			CHECK(0);
		}
		kiln_error_clear(&err);
		free(bkey);
		free(repo);
	}
	for (size_t i = 0; i < c.manifests.n; i++) {
		struct oci_manifest m;
		char *repo, d[KILN_DIGEST_MAX], *type = NULL;

		split(c.manifests.v[i], "/_manifests/", &repo, d);
		kiln_buf_reset(&b);
		if (reg_s3_get_small(&st.s3, c.manifests.v[i], 1 << 20, &b, &type, &err) == 1 &&
		    oci_manifest_parse(b.buf, b.len, type, &m, &err) == 0) {
			char got[KILN_DIGEST_MAX];
			kiln_digest_buf(KILN_SHA256, b.buf, b.len, got);
			CHECK_STR(got, d);
			for (size_t k = 0; k < m.nrefs; k++) {
				char *bkey = reg_s3m_blob_key(m.refs[k].digest);
				int64_t size;
				if (m.refs[k].kind != OCI_REF_MANIFEST && !m.refs[k].external &&
				    (reg_s3m_blob_linked(&st, repo, m.refs[k].digest, NULL, &err) != 1 ||
				     reg_s3_stat(&st.s3, bkey, &size, NULL, &err) != 1 || size != m.refs[k].size)) {
					printf("#   manifest %s: blob %s missing\n", c.manifests.v[i], m.refs[k].digest);
					CHECK(0);
				}
				free(bkey);
			}
			oci_manifest_free(&m);
		}
		kiln_error_clear(&err);
		free(type);
		free(repo);
	}
	kiln_buf_free(&b);
	kiln_strv_free(&c.links);
	kiln_strv_free(&c.manifests);
}

static int open_store(const char *bucket, const char *dir)
{
	kiln_error *err = NULL;

	reg_config_init(&cfg);
	free(cfg.data_dir);
	cfg.data_dir = kiln_xstrdup(dir);
	cfg.s3_endpoint = kiln_xstrdup(getenv("KILN_TEST_S3_ENDPOINT"));
	cfg.s3_access_key = kiln_xstrdup(getenv("KILN_TEST_S3_ACCESS_KEY"));
	cfg.s3_secret_key = kiln_xstrdup(getenv("KILN_TEST_S3_SECRET_KEY"));
	cfg.s3_bucket = kiln_xstrdup(bucket);
	cfg.s3_region = kiln_xstrdup("us-east-1");
	cfg.gc_grace_s = 0;
	cfg.gc_pin_s = 2;
	if (reg_store_open(&st, &cfg, &err) < 0) {
		printf("# %s\n", kiln_error_message(err));
		kiln_error_free(err);
		return -1;
	}
	return 0;
}

/* Offline: the object keys (the layout docs/registry.md documents). */
static void test_keys(void)
{
	char *k = reg_s3m_blob_key("sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");

	CHECK_STR(k, "blobs/sha256/e3/e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	free(k);
}

int main(int argc, char **argv)
{
	char *dir;

	RUN(test_keys);
	if (!getenv("KILN_TEST_S3_ENDPOINT") || !getenv("KILN_TEST_S3_ACCESS_KEY") || !getenv("KILN_TEST_S3_SECRET_KEY")) {
		printf("# live S3 gc checks need KILN_TEST_S3_ENDPOINT/_ACCESS_KEY/_SECRET_KEY (tests/e2e/t0706)\n");
		return test_done();
	}
	dir = kiln_mkdtemp("s3gc-data", NULL);
	if (dir == NULL || open_store(argc > 2 && strcmp(argv[1], "check") == 0 ? argv[2] : "gcrace", dir) < 0)
		return 1;
	if (argc > 2 && strcmp(argv[1], "check") == 0) {
		RUN(test_bucket);
	} else {
		kiln_digest_buf(KILN_SHA256, blob_bytes, strlen(blob_bytes), blob_digest);
		kiln_buf_addf(&man,
			      "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
			      "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"%s\",\"size\":%zu},"
			      "\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"%s\",\"size\":%zu}]}",
			      blob_digest, strlen(blob_bytes), blob_digest, strlen(blob_bytes));
		kiln_digest_buf(KILN_SHA256, man.buf, man.len, man_digest);
		RUN(test_race);
		RUN(test_multipart);
		RUN(test_pages);
	}
	reg_store_close(&st);
	reg_config_free(&cfg);
	kiln_buf_free(&man);
	kiln_rm_rf(dir, NULL);
	free(dir);
	return test_done();
}
