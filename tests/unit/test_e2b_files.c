/* test_e2b_files.c — the E2B API's state and uploads (service/e2b_files.c,
 * e2b_db.c): signed upload links (round trip, a changed team, template,
 * hash, expiry or signature refused, expired links refused), uploaded
 * tarballs checked before anything is stored (gzip'd as the SDK sends them
 * accepted; absolute names, "..", entries below a symlink of the archive,
 * devices, hard links out, garbage refused), the spool's size bound, and the
 * database: a name keeps its template id, a build is triggered once, tags,
 * files by hash, another team sees nothing. */
#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service/e2b.h"
#include "test.h"

static char *dir;

struct ent {
	const char *name;
	mode_t type;        /* AE_IFREG, AE_IFDIR, AE_IFLNK, AE_IFCHR; 0: a hard link */
	const char *target; /* link target */
};

/* A tar (gzip'd when gz) of the entries, as bytes in a spool; finished. */
static int spool_tar(const struct ent *v, size_t n, bool gz, kiln_error **err)
{
	struct archive *w = kiln_tar_writer_new();
	char *buf = kiln_xmalloc(1 << 20);
	size_t used = 0;
	struct e2b_spool *sp = NULL;
	char digest[KILN_DIGEST_MAX];
	uint64_t files = 0;
	int rc;

	if (gz)
		archive_write_add_filter_gzip(w);
	archive_write_open_memory(w, buf, 1 << 20, &used);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, v[i].name);
		archive_entry_set_perm(e, 0644);
		if (v[i].type == 0) {
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_hardlink(e, v[i].target);
		} else {
			archive_entry_set_filetype(e, v[i].type);
			if (v[i].type == AE_IFLNK)
				archive_entry_set_symlink(e, v[i].target);
			if (v[i].type == AE_IFREG)
				archive_entry_set_size(e, 3);
		}
		kiln_tar_write_header(w, e);
		if (v[i].type == AE_IFREG)
			archive_write_data(w, "hi\n", 3);
		archive_entry_free(e);
	}
	archive_write_close(w);
	archive_write_free(w);
	if (e2b_spool_open(dir, 1 << 20, &sp, err) < 0) {
		free(buf);
		return -1;
	}
	rc = e2b_spool_write(sp, buf, used, err);
	if (rc == 0)
		rc = e2b_spool_finish(sp, 1 << 20, digest, &files, err);
	if (rc == 0) {
		char want[KILN_DIGEST_MAX];
		kiln_digest_buf(KILN_SHA256, buf, used, want);
		CHECK_STR(digest, want);
		CHECK_INT(e2b_spool_size(sp), used);
	}
	e2b_spool_free(sp);
	free(buf);
	return rc;
}

static void test_tar_checks(void)
{
	kiln_error *err = NULL;
	const struct ent sdk[] = { { "app", AE_IFDIR, NULL }, { "app/hello.txt", AE_IFREG, NULL },
				   { "app/link", AE_IFLNK, "hello.txt" }, { "app/hard", 0, "app/hello.txt" },
				   { "app/up", AE_IFLNK, "/etc/passwd" } };
	static const struct {
		struct ent e[2];
		const char *want;
	} bad[] = {
		{ { { "/etc/passwd", AE_IFREG, NULL } }, "absolute" },
		{ { { "../x", AE_IFREG, NULL } }, "\"..\"" },
		{ { { "a/../../x", AE_IFREG, NULL } }, "\"..\"" },
		{ { { "l", AE_IFLNK, "/etc" }, { "l/passwd", AE_IFREG, NULL } }, "below a symlink" },
		{ { { "d/l", AE_IFLNK, "/" }, { "d/./l/x/y", AE_IFREG, NULL } }, "below a symlink" },
		{ { { "dev", AE_IFCHR, NULL } }, "only files, directories and links" },
		{ { { "h", 0, "../../etc/shadow" } }, "\"..\"" },
		{ { { "l", AE_IFLNK, "/etc" }, { "h", 0, "l/shadow" } }, "hard link through a symlink" },
	};

	CHECK_INT(spool_tar(sdk, 5, true, &err), 0); /* what the SDK sends: gzip'd */
	kiln_error_clear(&err);
	CHECK_INT(spool_tar(sdk, 5, false, &err), 0); /* gzip: false */
	kiln_error_clear(&err);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t n = bad[i].e[1].name ? 2 : 1;
		if (spool_tar(bad[i].e, n, true, &err) == 0) {
			printf("#   case %zu accepted\n", i);
			test_checks_failed++;
		} else if (strstr(kiln_error_message(err), bad[i].want) == NULL || err->kind != KILN_E_INVALID) {
			printf("#   case %zu: %s\n", i, kiln_error_message(err));
			test_checks_failed++;
		}
		kiln_error_clear(&err);
	}
	{
		/* not a tar at all */
		struct e2b_spool *sp = NULL;
		char d[KILN_DIGEST_MAX];
		uint64_t files = 0;
		CHECK_INT(e2b_spool_open(dir, 64, &sp, &err), 0);
		CHECK_INT(e2b_spool_write(sp, "garbage garbage", 15, &err), 0);
		CHECK(e2b_spool_finish(sp, 1 << 20, d, &files, &err) < 0);
		CHECK(err && strstr(kiln_error_message(err), "the uploaded files") != NULL);
		kiln_error_clear(&err);
		/* over the bound */
		CHECK(e2b_spool_write(sp, d, 64, &err) < 0);
		CHECK(err && err->kind == KILN_E_LIMIT);
		kiln_error_clear(&err);
		e2b_spool_free(sp);
	}
}

static void test_links(void)
{
	unsigned char key[32], key2[32];
	char *kp = kiln_path_join(dir, "key"), *q;
	kiln_error *err = NULL;
	const char *h = "1a73a33f36b186852224fe4c9de48287f1b39a7b48b5dcafaec3c888eab821b3";
	char team[64], exp[32], sig[80];

	CHECK_INT(e2b_key_load(kp, key, &err), 0);
	CHECK_INT(e2b_key_load(kp, key2, &err), 0); /* made once, then read */
	CHECK(memcmp(key, key2, 32) == 0);
	q = e2b_upload_query(key, "team-a", "tid1", h, 60);
	CHECK(sscanf(q, "team=%63[^&]&expires=%31[^&]&signature=%79s", team, exp, sig) == 3);
	CHECK_STR(team, "team-a");
	CHECK_INT(e2b_upload_check(key, "team-a", "tid1", h, exp, sig, &err), 0);
	CHECK(e2b_upload_check(key, "team-b", "tid1", h, exp, sig, &err) < 0);
	kiln_error_clear(&err);
	CHECK(e2b_upload_check(key, "team-a", "tid2", h, exp, sig, &err) < 0);
	kiln_error_clear(&err);
	CHECK(e2b_upload_check(key, "team-a", "tid1", "00", exp, sig, &err) < 0);
	kiln_error_clear(&err);
	{
		char later[40];
		snprintf(later, sizeof(later), "%lld", atoll(exp) + 1);
		CHECK(e2b_upload_check(key, "team-a", "tid1", h, later, sig, &err) < 0);
		kiln_error_clear(&err);
	}
	sig[0] = sig[0] == 'a' ? 'b' : 'a';
	CHECK(e2b_upload_check(key, "team-a", "tid1", h, exp, sig, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "bad signature"));
	kiln_error_clear(&err);
	CHECK(e2b_upload_check(key, "team-a", "tid1", h, NULL, sig, &err) < 0);
	kiln_error_clear(&err);
	free(q);
	q = e2b_upload_query(key, "team-a", "tid1", h, -10); /* expired */
	CHECK(sscanf(q, "team=%63[^&]&expires=%31[^&]&signature=%79s", team, exp, sig) == 3);
	CHECK(e2b_upload_check(key, "team-a", "tid1", h, exp, sig, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "expired"));
	kiln_error_clear(&err);
	free(q);
	free(kp);
}

static void test_db(void)
{
	char *path = kiln_path_join(dir, "meta.db"), *legacy = kiln_path_join(dir, "e2b.db"), *b1 = NULL, *b2 = NULL;
	char *got = NULL;
	svc_db *sdb = NULL;
	char digest[KILN_DIGEST_MAX];
	int64_t size = 0;
	e2b_db *db = NULL;
	kiln_error *err = NULL;
	struct e2b_template t1, t2, t3;
	struct e2b_build b;
	struct e2b_template *tv = NULL;
	size_t n = 0;
	json_t *tags;

	/* on the service's database (its e2b_ tables); no older file to move in */
	sdb = svc_db_open(path, &err);
	CHECK(sdb != NULL);
	if (sdb == NULL)
		goto out;
	CHECK_INT(e2b_db_open(sdb, legacy, &db, &err), 0);
	if (db == NULL)
		goto out;
	CHECK_INT(e2b_db_template_ensure(db, "team-a", "app", 2, 512, &t1, &err), 0);
	CHECK_INT(e2b_db_template_ensure(db, "team-a", "app", 1, 256, &t2, &err), 0);
	CHECK_STR(t1.id, t2.id); /* the name keeps its id */
	CHECK_INT(t2.cpus, 1);
	CHECK_INT(strlen(t1.id), 20);
	CHECK_INT(e2b_db_template_find(db, "team-b", t1.id, &t3, &err), 0); /* not another team's */
	CHECK_INT(e2b_db_template_find(db, "team-a", "app", &t3, &err), 1);
	e2b_template_free(&t3);
	CHECK_INT(e2b_db_build_new(db, &t1, "v1 stable", &b1, &err), 0);
	CHECK_INT(e2b_db_build_new(db, &t1, "latest", &b2, &err), 0);
	CHECK(b1 && strlen(b1) == 36 && b1[14] == '4');
	CHECK_INT(e2b_db_build_get(db, "team-b", t1.id, b1, &b, &err), 0);
	CHECK_INT(e2b_db_build_get(db, "team-a", t1.id, b1, &b, &err), 1);
	CHECK(b.svc_id == NULL);
	CHECK_STR(b.tag, "v1 stable");
	e2b_build_free(&b);
	CHECK_INT(e2b_db_build_claim(db, b1, &err), 1);
	CHECK_INT(e2b_db_build_claim(db, b1, &err), 0); /* a second trigger */
	CHECK_INT(e2b_db_build_started(db, b1, "b-123", "[0,0,1]", &err), 1);
	CHECK_INT(e2b_db_build_get(db, "team-a", t1.id, b1, &b, &err), 1);
	CHECK_STR(b.svc_id, "b-123");
	CHECK_STR(b.lines, "[0,0,1]");
	e2b_build_free(&b);
	CHECK_INT(e2b_db_build_claim(db, b2, &err), 1);
	CHECK_INT(e2b_db_build_unclaim(db, b2, "files missing", &err), 1);
	CHECK_INT(e2b_db_build_get(db, "team-a", t1.id, b2, &b, &err), 1);
	CHECK(b.svc_id == NULL);
	CHECK_STR(b.error, "files missing");
	e2b_build_free(&b);
	CHECK_INT(e2b_db_build_claim(db, b2, &err), 0); /* failed stays failed */
	CHECK_INT(e2b_db_tag_set(db, t1.id, "v1", b1, &err), 1);
	CHECK_INT(e2b_db_tag_set(db, t1.id, "v1", b1, &err), 1);
	CHECK_INT(e2b_db_tag_get(db, t1.id, "v1", &got, &err), 1);
	CHECK_STR(got, b1);
	tags = e2b_db_tags(db, t1.id, &err);
	CHECK_INT(json_array_size(tags), 1);
	json_decref(tags);
	CHECK_INT(e2b_db_tag_delete(db, t1.id, "v1", &err), 1);
	CHECK_INT(e2b_db_file_get(db, "team-a", "h1", digest, NULL, &err), 0);
	CHECK_INT(e2b_db_file_put(db, "team-a", "h1", "sha256:aa", 10, &err), 0);
	CHECK_INT(e2b_db_file_get(db, "team-a", "h1", digest, &size, &err), 1);
	CHECK_STR(digest, "sha256:aa");
	CHECK_INT(size, 10);
	CHECK_INT(e2b_db_file_get(db, "team-b", "h1", digest, NULL, &err), 0);
	CHECK_INT(e2b_db_templates(db, "team-a", &tv, &n, &err), 0);
	CHECK_INT(n, 1);
	for (size_t i = 0; i < n; i++)
		e2b_template_free(&tv[i]);
	free(tv);
	CHECK_INT(e2b_db_template_delete(db, "team-b", t1.id, &err), 0);
	CHECK_INT(e2b_db_template_delete(db, "team-a", t1.id, &err), 1);
	CHECK_INT(e2b_db_build_get(db, "team-a", t1.id, b1, &b, &err), 0);
	CHECK(err == NULL);
	e2b_template_free(&t1);
	e2b_template_free(&t2);
out:
	kiln_error_free(err);
	e2b_db_close(db);
	svc_db_close(sdb);
	free(path);
	free(legacy);
	free(b1);
	free(b2);
	free(got);
}

int main(void)
{
	kiln_error *err = NULL;

	dir = kiln_mkdtemp("test-e2b", &err);
	if (dir == NULL) {
		printf("not ok - mkdtemp: %s\n", kiln_error_message(err));
		return 1;
	}
	RUN(test_tar_checks);
	RUN(test_links);
	RUN(test_db);
	kiln_rm_rf(dir, &err);
	free(dir);
	return test_done();
}
