/* test_registry_group.c — group commit of blob links (registry/db_group.c):
 * uploads that finish while a group commits wait and go in the next group,
 * every one linked and intact when its commit returns; a link whose bytes
 * cannot be placed fails alone, the rest of its group commits; a batch's set
 * of links fails together, and a batch over many directories commits with
 * one syncfs.  The first
 * group is held open through the test hook so the others queue behind it. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registry/internal.h"
#include "test.h"

#define N 8

static struct reg_config cfg;
static reg_store store;
static reg_db *db;
static reg_uploads uploads;
static volatile int hold, held; /* hold the next group open; its leader is inside the hook */

static void hold_first(reg_db *d, size_t n)
{
	if (!hold)
		return;
	hold = 0;
	held = 1;
	usleep(300000); /* the other committers queue meanwhile */
}

/* Start fn on each job, the first alone until its group is held open. */
static void *(*job_fn)(void *);
static void start_held(pthread_t *th, void *jobs, size_t size, int n)
{
	hold = 1;
	held = 0;
	reg_db_group_test_hook = hold_first;
	for (int i = 0; i < n; i++) {
		pthread_create(&th[i], NULL, job_fn, (char *)jobs + (size_t)i * size);
		if (i == 0)
			for (int k = 0; k < 200 && !held; k++)
				usleep(5000);
	}
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	reg_db_group_test_hook = NULL;
}

struct job {
	char bytes[64], digest[KILN_DIGEST_MAX];
	int64_t rc;
	int fail;       /* place fails */
};

static void *upload(void *arg)
{
	struct job *j = arg;
	kiln_error *err = NULL;
	reg_upload *up = reg_upload_new(&uploads, "g/one", &err);

	j->rc = -1;
	if (up && reg_upload_write(up, j->bytes, strlen(j->bytes), &err) == 0)
		j->rc = reg_upload_commit(&uploads, up, j->digest, db, &err);
	kiln_error_free(err);
	return NULL;
}

static int linked_intact(const char *repo, const char *digest)
{
	char *path = reg_store_blob_path(&store, digest), got[KILN_DIGEST_MAX];
	kiln_error *err = NULL;
	int ok = reg_db_blob_linked(db, repo, digest, NULL, &err) == 1 &&
		 kiln_digest_file(KILN_SHA256, path, got, &err) == 0 && strcmp(got, digest) == 0;

	kiln_error_free(err);
	free(path);
	return ok;
}

static void test_uploads_grouped(void)
{
	struct job jobs[N];
	pthread_t th[N];
	uint64_t g0 = db->groups, l0 = db->grouped;

	for (int i = 0; i < N; i++) {
		snprintf(jobs[i].bytes, sizeof(jobs[i].bytes), "blob number %d of the group test", i);
		kiln_digest_buf(KILN_SHA256, jobs[i].bytes, strlen(jobs[i].bytes), jobs[i].digest);
	}
	job_fn = upload;
	start_held(th, jobs, sizeof(jobs[0]), N);
	CHECK(held);
	for (int i = 0; i < N; i++) {
		CHECK_INT(jobs[i].rc, strlen(jobs[i].bytes));
		CHECK(linked_intact("g/one", jobs[i].digest));
	}
	CHECK_INT(db->grouped - l0, N);
	/* the first alone, the seven that queued behind it in one or few more */
	printf("# %d links in %llu groups\n", N, (unsigned long long)(db->groups - g0));
	CHECK(db->groups - g0 >= 2 && db->groups - g0 <= 3);
}

/* place fails for one link of a group: it alone is not linked. */
static int place_maybe(void *ud, kiln_error **err)
{
	struct job *j = ud;

	return j->fail ? kiln_err(err, KILN_E_IO, "cannot place %s", j->digest) : 0;
}

static void *link_only(void *arg)
{
	struct job *j = arg;
	kiln_error *err = NULL;

	j->rc = reg_db_blob_link(db, "g/two", j->digest, 1, place_maybe, j, NULL, &err);
	if (j->fail && j->rc < 0)
		CHECK(err && strstr(kiln_error_message(err), "cannot place") != NULL);
	kiln_error_free(err);
	return NULL;
}

static void test_failure_alone(void)
{
	struct job jobs[4];
	pthread_t th[4];
	kiln_error *err = NULL;

	uint64_t g0 = db->groups;

	for (int i = 0; i < 4; i++) {
		snprintf(jobs[i].bytes, sizeof(jobs[i].bytes), "link %d", i);
		kiln_digest_buf(KILN_SHA256, jobs[i].bytes, strlen(jobs[i].bytes), jobs[i].digest);
		jobs[i].fail = i == 2;
	}
	job_fn = link_only;
	start_held(th, jobs, sizeof(jobs[0]), 4);
	CHECK(held);
	CHECK(db->groups - g0 <= 2); /* the failing link shared a group with others */
	for (int i = 0; i < 4; i++) {
		CHECK_INT(jobs[i].rc, i == 2 ? -1 : 0);
		CHECK_INT(reg_db_blob_linked(db, "g/two", jobs[i].digest, NULL, &err), i == 2 ? 0 : 1);
	}
	kiln_error_free(err);
}

/* A set (a batch upload's links) stands or falls together in its group. */
struct set_job {
	struct job j[3];
	int n;
	int rc;
};

static void *link_set(void *arg)
{
	struct set_job *sj = arg;
	struct reg_db_link l[3];
	kiln_error *err = NULL;

	for (int i = 0; i < sj->n; i++)
		l[i] = (struct reg_db_link){ .digest = sj->j[i].digest, .size = 1, .place = place_maybe, .ud = &sj->j[i] };
	sj->rc = reg_db_blob_link_many(db, "g/three", l, (size_t)sj->n, &err);
	if (sj->rc < 0)
		CHECK(err && strstr(kiln_error_message(err), "cannot place") != NULL);
	kiln_error_free(err);
	return NULL;
}

static void test_set_together(void)
{
	struct set_job sets[3] = { { .n = 1 }, { .n = 3 }, { .n = 1 } };
	pthread_t th[3];
	kiln_error *err = NULL;
	uint64_t g0 = db->groups;

	for (int s = 0; s < 3; s++)
		for (int i = 0; i < sets[s].n; i++) {
			struct job *j = &sets[s].j[i];
			snprintf(j->bytes, sizeof(j->bytes), "set %d link %d", s, i);
			kiln_digest_buf(KILN_SHA256, j->bytes, strlen(j->bytes), j->digest);
			j->fail = s == 1 && i == 1;
		}
	job_fn = link_set;
	start_held(th, sets, sizeof(sets[0]), 3);
	CHECK(held);
	CHECK(db->groups - g0 <= 2); /* the failing set shared a group with the last single link */
	CHECK_INT(sets[0].rc, 0);
	CHECK_INT(sets[1].rc, -1);
	CHECK_INT(sets[2].rc, 0);
	for (int s = 0; s < 3; s++)
		for (int i = 0; i < sets[s].n; i++)
			CHECK_INT(reg_db_blob_linked(db, "g/three", sets[s].j[i].digest, NULL, &err), s == 1 ? 0 : 1);
	kiln_error_free(err);
}

/* A batch of staged files over many fan-out directories: one syncfs, all
 * placed, linked and intact. */
static void test_batch_commit(void)
{
	enum { NB = 40 };
	struct reg_staged v[NB];
	char digests[NB][KILN_DIGEST_MAX];
	kiln_error *err = NULL;

	for (int i = 0; i < NB; i++) {
		char bytes[64];
		snprintf(bytes, sizeof(bytes), "batch blob %d", i);
		kiln_digest_buf(KILN_SHA256, bytes, strlen(bytes), digests[i]);
		char *src = kiln_xasprintf("%s/staged.%d", store.uploads, i);
		CHECK(kiln_write_atomic(src, bytes, strlen(bytes), 0600, &err) == 0);
		v[i] = (struct reg_staged){ digests[i], src, (int64_t)strlen(bytes) };
	}
	CHECK(store.ops->blob_commit_batch != NULL);
	CHECK_INT(store.ops->blob_commit_batch(&store, db, "g/four", v, NB, &err), 0);
	if (err)
		printf("# %s\n", kiln_error_message(err));
	for (int i = 0; i < NB; i++) {
		CHECK(linked_intact("g/four", digests[i]));
		CHECK(access(v[i].src, F_OK) < 0); /* renamed into the store */
		free((char *)v[i].src);
	}
	kiln_error_free(err);
}

int main(void)
{
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-reggroup", &err);

	if (dir == NULL)
		return 1;
	reg_config_init(&cfg);
	free(cfg.data_dir);
	cfg.data_dir = kiln_path_join(dir, "data");
	if (reg_store_open(&store, &cfg, &err) < 0 || (db = reg_db_open_cfg(&cfg, &err)) == NULL) {
		printf("# %s\n", kiln_error_message(err));
		return 1;
	}
	reg_uploads_init(&uploads, &store);
	RUN(test_uploads_grouped);
	RUN(test_failure_alone);
	RUN(test_set_together);
	RUN(test_batch_commit);
	reg_uploads_destroy(&uploads);
	reg_db_close(db);
	reg_store_close(&store);
	reg_config_free(&cfg);
	kiln_rm_rf(dir, &err);
	kiln_error_free(err);
	free(dir);
	return test_done();
}
