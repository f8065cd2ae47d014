/* test_registry_admin.c — auth, tokens, gc and the administrative listings
 * in-process under ASan/UBSan: a server with "auth" on an ephemeral port,
 * driven with libcurl, then reg_gc / reg_list_repos / reg_tag_history on its
 * data directory. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "registry/registry.h"
#include "test.h"

static char base[64];
static struct reg_config cfg;
static char *push_tok, *pull_tok;

static size_t sink(char *p, size_t sz, size_t n, void *ud)
{
	kiln_buf_add(ud, p, sz * n);
	return sz * n;
}

/* Returns the status; body in *out (may be NULL). */
static long http(const char *method, const char *path, const char *bearer, const char *userpwd, const char *body,
		 kiln_buf *out)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hl = NULL;
	char *url = kiln_xasprintf("%s%s", base, path), *auth = NULL;
	kiln_buf dummy = KILN_BUF_INIT;
	long status = 0;

	if (bearer) {
		auth = kiln_xasprintf("Authorization: Bearer %s", bearer);
		hl = curl_slist_append(hl, auth);
	}
	hl = curl_slist_append(hl, "Content-Type: application/vnd.oci.image.manifest.v1+json");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	if (userpwd)
		curl_easy_setopt(c, CURLOPT_USERPWD, userpwd);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	}
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, out ? out : &dummy);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hl);
	curl_easy_cleanup(c);
	kiln_buf_free(&dummy);
	free(auth);
	free(url);
	return status;
}

static void test_tokens(void)
{
	kiln_error *err = NULL;
	const char *push_scopes[] = { "team:pull,push", "shared:pull", NULL };
	const char *pull_scopes[] = { "team:pull", NULL };
	const char *bad[] = { "team", NULL }, *bad2[] = { "Team:pull", NULL }, *bad3[] = { "team:fly", NULL };
	char *t = NULL;
	kiln_buf out = KILN_BUF_INIT;

	CHECK(reg_token_create(&cfg, "push", push_scopes, 0, &push_tok, &err) == 0);
	CHECK(push_tok && strncmp(push_tok, "kiln_", 5) == 0 && strlen(push_tok) == 69);
	CHECK(reg_token_create(&cfg, "pull", pull_scopes, 3600, &pull_tok, &err) == 0);
	CHECK(reg_token_create(&cfg, "push", pull_scopes, 0, &t, &err) < 0);
	CHECK(err && err->kind == KILN_E_EXISTS);
	kiln_error_clear(&err);
	CHECK(reg_token_create(&cfg, "x", bad, 0, &t, &err) < 0);
	kiln_error_clear(&err);
	CHECK(reg_token_create(&cfg, "x", bad2, 0, &t, &err) < 0);
	kiln_error_clear(&err);
	CHECK(reg_token_create(&cfg, "x", bad3, 0, &t, &err) < 0);
	kiln_error_clear(&err);
	CHECK(reg_token_list(&cfg, &out, &err) == 0);
	CHECK(strstr(out.buf, "team:pull,push;shared:pull") != NULL);
	CHECK(strstr(out.buf, push_tok) == NULL);
	kiln_buf_free(&out);
	CHECK(reg_token_revoke(&cfg, "nope", &err) < 0);
	kiln_error_clear(&err);
}

static void test_auth_requests(void)
{
	kiln_buf body = KILN_BUF_INIT;
	char up[300], digest[KILN_DIGEST_MAX], *path, *userpwd;
	json_t *j;

	CHECK_INT(http("GET", "/v2/", NULL, NULL, NULL, NULL), 401);
	CHECK_INT(http("GET", "/v2/", push_tok, NULL, NULL, NULL), 200);
	kiln_digest_buf(KILN_SHA256, "abc", 3, digest);
	snprintf(up, sizeof(up), "/v2/team/app/blobs/uploads/?digest=%s", digest);
	CHECK_INT(http("POST", up, pull_tok, NULL, "abc", NULL), 403);
	CHECK_INT(http("POST", up, push_tok, NULL, "abc", NULL), 201);
	CHECK_INT(http("POST", up, "kiln_0123", NULL, "abc", NULL), 401);
	path = kiln_xasprintf("/v2/team/app/blobs/%s", digest);
	CHECK_INT(http("GET", path, pull_tok, NULL, NULL, NULL), 200);
	CHECK_INT(http("GET", path, NULL, NULL, NULL, NULL), 401);
	CHECK_INT(http("DELETE", path, push_tok, NULL, NULL, NULL), 403);
	free(path);
	/* token endpoint and the issued token */
	userpwd = kiln_xasprintf("ci:%s", pull_tok);
	CHECK_INT(http("GET", "/token?service=kiln&scope=repository:team/app:pull", NULL, userpwd, NULL, &body), 200);
	j = json_loads(body.buf, 0, NULL);
	CHECK(kiln_json_str(j, "token") != NULL);
	if (kiln_json_str(j, "token")) {
		CHECK_INT(http("GET", "/v2/team/app/tags/list", kiln_json_str(j, "token"), NULL, NULL, NULL), 200);
		CHECK_INT(http("GET", "/v2/other/tags/list", kiln_json_str(j, "token"), NULL, NULL, NULL), 403);
	}
	json_decref(j);
	CHECK_INT(http("GET", "/token", NULL, "ci:nope", NULL, NULL), 401);
	CHECK_INT(http("GET", "/v2/_catalog", pull_tok, NULL, NULL, NULL), 403);
	kiln_buf_free(&body);
	free(userpwd);
}

static void test_gc_and_listings(void)
{
	kiln_error *err = NULL;
	struct reg_gc_stats st;
	struct reg_repo_info *repos = NULL;
	size_t n = 0;
	kiln_buf hist = KILN_BUF_INIT;
	char cfgd[KILN_DIGEST_MAX], *m, up[300];

	/* a manifest keeps its config; the orphan "abc" blob from before goes */
	kiln_digest_buf(KILN_SHA256, "{}", 2, cfgd);
	snprintf(up, sizeof(up), "/v2/team/app/blobs/uploads/?digest=%s", cfgd);
	CHECK_INT(http("POST", up, push_tok, NULL, "{}", NULL), 201);
	m = kiln_xasprintf("{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\","
			   "\"digest\":\"%s\",\"size\":2},\"layers\":[]}", cfgd);
	CHECK_INT(http("PUT", "/v2/team/app/manifests/v1", push_tok, NULL, m, NULL), 201);
	CHECK_INT(http("POST", "/v2/team/app/blobs/uploads/", push_tok, NULL, NULL, NULL), 202);
	cfg.gc_grace_s = 0;
	cfg.upload_expiry_s = 0;
	CHECK(reg_gc(&cfg, 1, &st, &err) == 0);
	CHECK_INT(st.blobs_removed, 1);
	CHECK(reg_gc(&cfg, 0, &st, &err) == 0);
	CHECK_INT(st.blobs_removed, 1);
	CHECK_INT(st.blobs_kept, 2); /* config and manifest */
	CHECK_INT(st.uploads_removed, 1);
	CHECK(reg_gc(&cfg, 0, &st, &err) == 0);
	CHECK_INT(st.blobs_removed, 0);
	CHECK_INT(http("GET", "/v2/team/app/manifests/v1", pull_tok, NULL, NULL, NULL), 200);
	CHECK(reg_list_repos(&cfg, "team", &repos, &n, &err) == 0);
	CHECK_INT(n, 1);
	if (n == 1) {
		CHECK_STR(repos[0].name, "team/app");
		CHECK_INT(repos[0].tags, 1);
	}
	reg_repo_info_free(repos, n);
	CHECK(reg_tag_history(&cfg, "team/app", "v1", &hist, &err) == 0);
	CHECK(strstr(hist.buf, " v1 sha256:") != NULL);
	kiln_buf_free(&hist);
	CHECK(reg_set_public(&cfg, "team/app", 1, &err) == 0);
	CHECK_INT(http("GET", "/v2/team/app/manifests/v1", NULL, NULL, NULL, NULL), 200);
	CHECK(reg_set_public(&cfg, "BAD", 1, &err) < 0);
	kiln_error_clear(&err);
	free(m);
}

/* Quota values, config entries and which source wins (registry/quota.c). */
static void test_quotas(void)
{
	kiln_error *err = NULL;
	struct reg_quota q;
	int64_t v = 0;

	CHECK(reg_quota_value_parse(REG_QUOTA_BYTES, "10K", &v, &err) == 0 && v == 10240);
	CHECK(reg_quota_value_parse(REG_QUOTA_REPOS, "none", &v, &err) == 0 && v == REG_QUOTA_NONE);
	CHECK(reg_quota_value_parse(REG_QUOTA_REPOS, "0", &v, &err) == 0 && v == 0);
	CHECK(reg_quota_value_parse(REG_QUOTA_BUILDS, "0", &v, &err) < 0 && err->kind == KILN_E_USAGE);
	kiln_error_clear(&err);
	CHECK(reg_quota_value_parse(REG_QUOTA_REPOS, "3x", &v, &err) < 0);
	kiln_error_clear(&err);
	CHECK(reg_quota_value_parse(REG_QUOTA_BYTES, "lots", &v, &err) < 0 && err->kind == KILN_E_USAGE);
	kiln_error_clear(&err);
	CHECK(reg_quota_team_valid("team-a") && reg_quota_team_valid("*") && !reg_quota_team_valid("Team A") &&
	      !reg_quota_team_valid("a/b") && !reg_quota_team_valid(""));

	{ /* a bad entry in a config file, refused naming it */
		struct reg_config c2;
		char *path = kiln_path_join(cfg.data_dir, "../bad.json");
		FILE *f = fopen(path, "w");
		CHECK(f != NULL);
		fputs("{\"quotas\": {\"qt\": {\"repos\": \"many\"}}}", f);
		fclose(f);
		reg_config_init(&c2);
		CHECK(reg_config_load(&c2, path, &err) < 0 && strstr(kiln_error_message(err), "quotas.qt.repos") != NULL);
		kiln_error_clear(&err);
		reg_config_free(&c2);
		free(path);
	}

	cfg.quotas = json_loads("{\"*\": {\"repos\": 5, \"builds\": 3}, \"qt\": {\"repos\": 2, \"bytes\": null}}", 0, NULL);
	CHECK(reg_quota_set(&cfg, "*", REG_QUOTA_BUILDS, 4, false, &err) == 0);
	CHECK(reg_quota_set(&cfg, "*", REG_QUOTA_REPOS, 9, false, &err) == 0);
	CHECK(reg_quota_get(&cfg, "qt", &q, &err) == 0);
	CHECK_INT(q.v[REG_QUOTA_REPOS], 2); /* the config's team entry beats every "*" */
	CHECK_INT(q.src[REG_QUOTA_REPOS], REG_QUOTA_CONFIG);
	CHECK_INT(q.v[REG_QUOTA_BUILDS], 4); /* the db's "*" beats the config's "*" */
	CHECK_INT(q.src[REG_QUOTA_BUILDS], REG_QUOTA_DB_ALL);
	CHECK(q.v[REG_QUOTA_BYTES] == REG_QUOTA_NONE && q.src[REG_QUOTA_BYTES] == REG_QUOTA_CONFIG);
	CHECK_INT(q.src[REG_QUOTA_SANDBOXES], REG_QUOTA_UNSET);
	CHECK(reg_quota_set(&cfg, "qt", REG_QUOTA_REPOS, 7, false, &err) == 0);
	CHECK(reg_quota_get(&cfg, "qt", &q, &err) == 0 && q.v[REG_QUOTA_REPOS] == 7 && q.src[REG_QUOTA_REPOS] == REG_QUOTA_DB);
	CHECK(reg_quota_set(&cfg, "qt", REG_QUOTA_REPOS, 0, true, &err) == 0);
	CHECK(reg_quota_get(&cfg, "other", &q, &err) == 0 && q.v[REG_QUOTA_REPOS] == 9 && q.src[REG_QUOTA_REPOS] == REG_QUOTA_DB_ALL);
	CHECK(reg_quota_get(&cfg, "qt", &q, &err) == 0 && q.v[REG_QUOTA_REPOS] == 2);
	for (int k = 0; k < REG_QUOTA_N; k++)
		CHECK(reg_quota_set(&cfg, "*", (enum reg_quota_key)k, 0, true, &err) == 0);
	json_decref(cfg.quotas);
	cfg.quotas = NULL;
	CHECK(err == NULL);
	kiln_error_clear(&err);
}

int main(void)
{
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-regadm", &err);
	reg_server *srv;

	curl_global_init(CURL_GLOBAL_ALL);
	reg_config_init(&cfg);
	free(cfg.data_dir);
	cfg.data_dir = kiln_path_join(dir, "data");
	cfg.port = 0;
	cfg.auth = 1;
	RUN(test_tokens);
	RUN(test_quotas);
	srv = reg_server_start(&cfg, &err);
	if (srv == NULL) {
		printf("not ok - server start: %s\n", kiln_error_message(err));
		return 1;
	}
	snprintf(base, sizeof(base), "http://127.0.0.1:%u", reg_server_port(srv));
	RUN(test_auth_requests);
	RUN(test_gc_and_listings);
	reg_server_stop(srv);
	reg_config_free(&cfg);
	free(push_tok);
	free(pull_tok);
	kiln_rm_rf(dir, &err);
	free(dir);
	curl_global_cleanup();
	return test_done();
}
