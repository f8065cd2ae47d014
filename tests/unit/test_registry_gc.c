/* test_registry_gc.c — gc against a concurrent commit of the same digest,
 * interleaved deterministically: gc's test hook fires at its most dangerous
 * point (links deleted, file being removed) and starts a re-commit of that
 * very blob (an upload, or a manifest PUT) on the server's own connection,
 * giving it time to finish.  Either order is fine; losing the bytes is not.
 * Also the recovery from a gc that crashed with a blob set aside. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "registry/internal.h"
#include "test.h"

static struct reg_config cfg;
static reg_store store;
static reg_db *db;
static reg_uploads uploads;

static const char blob[] = "the same bytes, pushed twice";
static const char index_json[] = "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\","
				 "\"manifests\":[]}";

/* What the hook starts, and whether it finished while gc was still inside. */
static struct {
	char digest[KILN_DIGEST_MAX];
	void *(*fn)(void *);
	pthread_t th;
	int started;
	volatile int done;
	int done_in_window;
} race;

static void *recommit_blob(void *arg)
{
	kiln_error *err = NULL;
	reg_upload *up = reg_upload_new(&uploads, "c/d", &err);

	if (up == NULL || reg_upload_write(up, blob, strlen(blob), &err) < 0 ||
	    reg_upload_commit(&uploads, up, race.digest, db, &err) < 0) {
		printf("#   re-commit: %s\n", kiln_error_message(err));
		kiln_error_free(err);
	}
	race.done = 1;
	return NULL;
}

static int put_index(void *ud, kiln_error **err)
{
	return store.ops->blob_put(&store, race.digest, index_json, strlen(index_json), err);
}

static void *recommit_manifest(void *arg)
{
	struct oci_manifest m;
	kiln_error *err = NULL;
	long missing;

	if (oci_manifest_parse(index_json, strlen(index_json), NULL, &m, &err) < 0 ||
	    reg_db_manifest_put(db, "c/d", race.digest, (int64_t)strlen(index_json), &m, "v1", put_index, NULL, &missing,
				&err) != 1) {
		printf("#   manifest put: %s\n", err ? kiln_error_message(err) : "refs missing");
		kiln_error_free(err);
	}
	if (err == NULL)
		oci_manifest_free(&m);
	race.done = 1;
	return NULL;
}

static void hook(const char *digest)
{
	if (race.started || strcmp(digest, race.digest) != 0)
		return;
	race.started = 1;
	pthread_create(&race.th, NULL, race.fn, NULL);
	for (int i = 0; i < 100 && !race.done; i++)
		usleep(10000);
	race.done_in_window = race.done;
}

/* The file of digest exists and holds bytes with that digest. */
static int intact(const char *digest)
{
	char *path = reg_store_blob_path(&store, digest), got[KILN_DIGEST_MAX];
	kiln_error *err = NULL;
	int ok = kiln_digest_file(KILN_SHA256, path, got, &err) == 0 && strcmp(got, digest) == 0;

	kiln_error_free(err);
	free(path);
	return ok;
}

static void run_gc(void *(*fn)(void *), const char *digest)
{
	struct reg_gc_stats stats;
	kiln_error *err = NULL;

	memset(&race, 0, sizeof(race));
	snprintf(race.digest, sizeof(race.digest), "%s", digest);
	race.fn = fn;
	reg_gc_test_hook = hook;
	CHECK(reg_gc(&cfg, 0, &stats, &err) == 0);
	kiln_error_free(err);
	reg_gc_test_hook = NULL;
	CHECK(race.started);
	if (race.started)
		pthread_join(race.th, NULL);
	CHECK(race.done);
	/* Serialised: the re-commit waited for gc's transaction. */
	CHECK(!race.done_in_window);
}

static void test_upload_vs_gc(void)
{
	char digest[KILN_DIGEST_MAX];
	kiln_error *err = NULL;
	reg_upload *up;
	int64_t size = 0;

	kiln_digest_buf(KILN_SHA256, blob, strlen(blob), digest);
	up = reg_upload_new(&uploads, "a/b", &err);
	CHECK(up != NULL);
	if (up == NULL)
		return;
	CHECK(reg_upload_write(up, blob, strlen(blob), &err) == 0);
	CHECK_INT(reg_upload_commit(&uploads, up, digest, db, &err), strlen(blob));
	CHECK(intact(digest));
	/* Unreferenced by any manifest, grace 0: gc takes it while "c/d" re-uploads. */
	run_gc(recommit_blob, digest);
	CHECK_INT(reg_db_blob_linked(db, "a/b", digest, NULL, &err), 0);
	CHECK_INT(reg_db_blob_linked(db, "c/d", digest, &size, &err), 1);
	CHECK_INT(size, strlen(blob));
	CHECK(intact(digest));
}

static void test_manifest_vs_gc(void)
{
	char digest[KILN_DIGEST_MAX], dgot[KILN_DIGEST_MAX], *mt = NULL;
	kiln_error *err = NULL;

	kiln_digest_buf(KILN_SHA256, index_json, strlen(index_json), digest);
	/* Bytes left by an earlier push whose manifest was deleted. */
	CHECK(store.ops->blob_put(&store, digest, index_json, strlen(index_json), &err) == 0);
	run_gc(recommit_manifest, digest);
	CHECK_INT(reg_db_manifest_get(db, "c/d", "v1", dgot, &mt, NULL, &err), 1);
	CHECK_STR(dgot, digest);
	CHECK(intact(digest));
	free(mt);
}

/* gc crashed after setting a blob aside, before its transaction committed: the
 * links survived, so the next gc must put the bytes back, not delete them. */
static void test_crash_while_aside(void)
{
	static const char bytes[] = "set aside by a gc that then crashed";
	char digest[KILN_DIGEST_MAX], *path, *aside;
	struct timespec old[2];
	struct reg_gc_stats stats;
	kiln_error *err = NULL;
	reg_upload *up;

	kiln_digest_buf(KILN_SHA256, bytes, strlen(bytes), digest);
	up = reg_upload_new(&uploads, "e/f", &err);
	CHECK(up != NULL);
	if (up == NULL)
		return;
	CHECK(reg_upload_write(up, bytes, strlen(bytes), &err) == 0);
	CHECK_INT(reg_upload_commit(&uploads, up, digest, db, &err), strlen(bytes));
	path = reg_store_blob_path(&store, digest);
	aside = kiln_xasprintf("%s.tmp.gc", path);
	CHECK(rename(path, aside) == 0);
	clock_gettime(CLOCK_REALTIME, &old[0]);
	old[0].tv_sec -= 100;
	old[1] = old[0];
	CHECK(utimensat(AT_FDCWD, aside, old, 0) == 0);
	cfg.gc_grace_s = 50;
	CHECK(reg_gc(&cfg, 0, &stats, &err) == 0);
	cfg.gc_grace_s = 0;
	CHECK(access(aside, F_OK) < 0);
	/* Restored (and maybe collected whole again, links included): never linked but missing. */
	if (reg_db_blob_linked(db, "e/f", digest, NULL, &err) == 1)
		CHECK(intact(digest));
	free(aside);
	free(path);
}

int main(void)
{
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-reggc", &err);

	if (dir == NULL)
		return 1;
	reg_config_init(&cfg);
	free(cfg.data_dir);
	cfg.data_dir = kiln_path_join(dir, "data");
	cfg.gc_grace_s = 0;
	if (reg_store_open(&store, &cfg, &err) < 0 || (db = reg_db_open_cfg(&cfg, &err)) == NULL) {
		printf("# %s\n", kiln_error_message(err));
		return 1;
	}
	reg_uploads_init(&uploads, &store);
	RUN(test_upload_vs_gc);
	RUN(test_manifest_vs_gc);
	RUN(test_crash_while_aside);
	reg_uploads_destroy(&uploads);
	reg_db_close(db);
	reg_store_close(&store);
	reg_config_free(&cfg);
	kiln_rm_rf(dir, &err);
	kiln_error_free(err);
	free(dir);
	return test_done();
}
