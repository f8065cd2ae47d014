/* test_registry_retain.c — retention rules under ASan/UBSan: what the rule
 * parser refuses and how it names it, the S3 refusal, and a run on a metadata
 * db made directly (an index whose tag goes takes its manifests with it; a
 * tag pushed within the same second still counts as newer). */
#include <stdlib.h>
#include <string.h>

#include "registry/internal.h"
#include "test.h"

static struct reg_config cfg;

/* reg_retain_check on text: NULL when accepted, else the message (static). */
static const char *check(const char *rules)
{
	static char msg[512];
	json_t *v = json_loads(rules, 0, NULL);
	kiln_error *err = NULL;
	int rc = reg_retain_check(v, &err);

	json_decref(v);
	if (rc == 0)
		return NULL;
	snprintf(msg, sizeof(msg), "%s", kiln_error_message(err));
	kiln_error_free(err);
	return msg;
}

static void test_rules_parse(void)
{
	const char *msg;

	CHECK(check("[]") == NULL);
	CHECK(check("[{\"repositories\": \"team-a/*\", \"keep_newest\": 5, \"keep_tags\": [\"latest\", \"v*\"],"
		    " \"untagged_older_than\": \"7d\"}]") == NULL);
	CHECK(check("[{\"repositories\": [\"a\", \"b/[!x]*\"], \"untagged_older_than\": 3600}]") == NULL);
	CHECK(check("[{\"repositories\": \"prod/*\", \"keep_tags\": \"*\"}]") == NULL);
	CHECK_STR(check("{}"), "retention: want an array of rules");
	CHECK_STR(check("[3]"), "retention[0]: want an object");
	CHECK_STR(check("[{\"repositories\": \"a\", \"keep_newest\": 1}, {\"repositories\": \"a\", \"keep\": 1}]"),
		  "retention[1]: unknown key 'keep'");
	CHECK_STR(check("[{\"repositories\": \"a[bc\", \"keep_newest\": 1}]"),
		  "retention[0].repositories: bad pattern 'a[bc' (unclosed [)");
	CHECK_STR(check("[{\"repositories\": \"a\\\\\", \"keep_newest\": 1}]"),
		  "retention[0].repositories: bad pattern 'a\\' (ends in a lone \\)");
	CHECK_STR(check("[{\"repositories\": \"a\", \"keep_tags\": [\"ok\", 3]}]"),
		  "retention[0].keep_tags[1]: want a string");
	CHECK_STR(check("[{\"repositories\": [], \"keep_newest\": 1}]"),
		  "retention[0].repositories: want a pattern or a non-empty array of them");
	CHECK_STR(check("[{\"repositories\": \"a\", \"keep_newest\": -2}]"),
		  "retention[0].keep_newest: want an integer >= 0");
	CHECK_STR(check("[{\"repositories\": \"a\", \"keep_newest\": 1.5}]"),
		  "retention[0].keep_newest: want an integer >= 0");
	msg = check("[{\"repositories\": \"a\", \"untagged_older_than\": \"7w\"}]");
	CHECK(msg && strstr(msg, "retention[0].untagged_older_than: ") && strstr(msg, "7w"));
	CHECK_STR(check("[{\"repositories\": \"a\", \"untagged_older_than\": -1}]"),
		  "retention[0].untagged_older_than: want a duration (\"7d\", \"12h\", seconds)");
	CHECK_STR(check("[{\"keep_newest\": 1}]"), "retention[0].repositories: required");
	CHECK_STR(check("[{\"repositories\": \"a\"}]"),
		  "retention[0]: says nothing (want keep_newest, keep_tags or untagged_older_than)");
}

static void test_s3_refused(void)
{
	struct reg_config c = cfg;
	struct reg_retain_stats st;
	kiln_error *err = NULL;

	c.s3_endpoint = "http://127.0.0.1:1";
	c.retention = json_loads("[{\"repositories\": \"*\", \"keep_newest\": 1}]", 0, NULL);
	CHECK_INT(reg_retain(&c, 1, NULL, NULL, &st, &err), -1);
	CHECK(err && strstr(kiln_error_message(err), "retention needs the filesystem metadata backend"));
	kiln_error_free(err);
	json_decref(c.retention);
}

/* PUT a manifest (JSON text) under tag (may be NULL); its digest into d. */
static void put(reg_db *db, const char *json, const char *type, const char *tag, char d[KILN_DIGEST_MAX])
{
	struct oci_manifest m;
	kiln_error *err = NULL;
	long missing = 0;

	kiln_digest_buf(KILN_SHA256, json, strlen(json), d);
	CHECK(oci_manifest_parse(json, strlen(json), type, &m, &err) == 0);
	CHECK_INT(reg_db_manifest_put(db, "r", d, (int64_t)strlen(json), &m, tag, NULL, NULL, &missing, &err), 1);
	oci_manifest_free(&m);
	kiln_error_free(err);
}

static void item(void *ud, const struct reg_retain_item *it)
{
	kiln_strv_push(ud, it->tag ? it->tag : it->reason);
}

static void test_index_cascade(void)
{
	static const char img[] = "application/vnd.oci.image.manifest.v1+json";
	char cfgd[KILN_DIGEST_MAX], lay[KILN_DIGEST_MAX], m1[KILN_DIGEST_MAX], m2[KILN_DIGEST_MAX], idx[KILN_DIGEST_MAX];
	char *j1, *j2, *ji, found[KILN_DIGEST_MAX];
	kiln_strv items = KILN_STRV_INIT;
	struct reg_retain_stats st;
	kiln_error *err = NULL;
	reg_db *db = reg_db_open_cfg(&cfg, &err);

	CHECK(db != NULL);
	if (db == NULL)
		return;
	kiln_digest_buf(KILN_SHA256, "c", 1, cfgd);
	kiln_digest_buf(KILN_SHA256, "l", 1, lay);
	CHECK(reg_db_blob_link(db, "r", cfgd, 1, NULL, NULL, NULL, &err) == 0);
	CHECK(reg_db_blob_link(db, "r", lay, 1, NULL, NULL, NULL, &err) == 0);
#define IMG "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\"," \
	    "\"digest\":\"%s\",\"size\":1},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\","   \
	    "\"digest\":\"%s\",\"size\":1}],\"annotations\":{\"n\":\"%d\"}}"
	j1 = kiln_xasprintf(IMG, img, cfgd, lay, 1);
	j2 = kiln_xasprintf(IMG, img, cfgd, lay, 2);
#undef IMG
	put(db, j1, img, NULL, m1);
	ji = kiln_xasprintf("{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\","
			    "\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%zu}]}",
			    img, m1, strlen(j1));
	put(db, ji, "application/vnd.oci.image.index.v1+json", "old", idx);
	put(db, j2, img, "new", m2); /* the same second as "old": newer by the history's order */
	reg_db_close(db);

	cfg.retention = json_loads("[{\"repositories\": \"r\", \"keep_newest\": 1}]", 0, NULL);
	CHECK_INT(reg_retain(&cfg, 0, item, &items, &st, &err), 0);
	CHECK_INT(st.tags_removed, 1);
	CHECK_INT(st.manifests_removed, 2);
	CHECK_INT(items.n, 3);
	if (items.n == 3) {
		char *in = kiln_xasprintf("in removed index %s", idx);
		CHECK_STR(items.v[0], "old");
		CHECK_STR(items.v[1], "its tags removed (retention[0].keep_newest=1)");
		CHECK_STR(items.v[2], in);
		free(in);
	}
	db = reg_db_open_cfg(&cfg, &err);
	CHECK_INT(reg_db_manifest_get(db, "r", m1, found, NULL, NULL, &err), 0);
	CHECK_INT(reg_db_manifest_get(db, "r", idx, found, NULL, NULL, &err), 0);
	CHECK_INT(reg_db_manifest_get(db, "r", "new", found, NULL, NULL, &err), 1);
	CHECK_STR(found, m2);
	/* the config and layer are still m2's: gc's roots keep them */
	CHECK_INT(reg_gc_referenced(db, lay, &err), 1);
	reg_db_close(db);
	json_decref(cfg.retention);
	cfg.retention = NULL;
	kiln_strv_free(&items);
	kiln_error_free(err);
	free(j1);
	free(j2);
	free(ji);
}

int main(void)
{
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-regretain", &err);

	if (dir == NULL)
		return 1;
	reg_config_init(&cfg);
	free(cfg.data_dir);
	cfg.data_dir = kiln_path_join(dir, "data");
	RUN(test_rules_parse);
	RUN(test_s3_refused);
	RUN(test_index_cascade);
	reg_config_free(&cfg);
	kiln_rm_rf(dir, &err);
	kiln_error_free(err);
	free(dir);
	return test_done();
}
