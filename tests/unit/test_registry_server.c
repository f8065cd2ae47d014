/* test_registry_server.c — the server in-process under ASan/UBSan: a real
 * reg_server on an ephemeral 127.0.0.1 port driven with libcurl through
 * uploads (monolithic, chunked, interrupted, batches), manifests, referrers and tags. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "registry/registry.h"
#include "test.h"

static reg_server *srv;
static char base[64];

struct resp {
	long status;
	kiln_buf body, hdrs;
};

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
	kiln_buf_add(ud, p, sz * n);
	return sz * n;
}

/* hdrs: NULL-terminated "Name: value" list. */
static void http(const char *method, const char *path, const void *body, size_t len, const char *const *hdrs,
		 struct resp *r)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hl = NULL;
	char *url = kiln_xasprintf("%s%s", base, path);

	r->status = 0;
	r->body = (kiln_buf)KILN_BUF_INIT;
	r->hdrs = (kiln_buf)KILN_BUF_INIT;
	for (; hdrs && *hdrs; hdrs++)
		hl = curl_slist_append(hl, *hdrs);
	hl = curl_slist_append(hl, "Expect:");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (strcmp(method, "HEAD") == 0)
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &r->body);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &r->hdrs);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
	curl_slist_free_all(hl);
	curl_easy_cleanup(c);
	free(url);
}

static char *header(struct resp *r, const char *name)
{
	size_t n = strlen(name);

	for (char *p = r->hdrs.buf; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
			const char *v = p + n + 1 + strspn(p + n + 1, " ");
			return kiln_xstrndup(v, strcspn(v, "\r\n"));
		}
	}
	return kiln_xstrdup("");
}

static void resp_free(struct resp *r)
{
	kiln_buf_free(&r->body);
	kiln_buf_free(&r->hdrs);
}

static int has_error(struct resp *r, const char *code)
{
	json_t *j = json_loads(r->body.buf, 0, NULL);
	const char *got = kiln_json_str(json_array_get(json_object_get(j, "errors"), 0), "code");
	int ok = got && strcmp(got, code) == 0;

	json_decref(j);
	return ok;
}

static void push_blob(const char *repo, const char *data, char digest[KILN_DIGEST_MAX])
{
	struct resp r;
	char *path;

	kiln_digest_buf(KILN_SHA256, data, strlen(data), digest);
	path = kiln_xasprintf("/v2/%s/blobs/uploads/?digest=%s", repo, digest);
	http("POST", path, data, strlen(data), NULL, &r);
	CHECK_INT(r.status, 201);
	resp_free(&r);
	free(path);
}

static void test_chunked_upload(void)
{
	struct resp r;
	char digest[KILN_DIGEST_MAX], *loc, *path;
	const char *h1[] = { "Content-Range: 0-4", NULL }, *h2[] = { "Content-Range: 5-9", NULL };

	http("POST", "/v2/t/blobs/uploads/", NULL, 0, NULL, &r);
	CHECK_INT(r.status, 202);
	loc = header(&r, "Location");
	resp_free(&r);
	http("PATCH", loc, "01234", 5, h1, &r);
	CHECK_INT(r.status, 202);
	resp_free(&r);
	http("PATCH", loc, "56789", 5, h1, &r); /* same range again: out of order */
	CHECK_INT(r.status, 416);
	CHECK(has_error(&r, "BLOB_UPLOAD_INVALID"));
	resp_free(&r);
	http("PATCH", loc, "56789", 5, h2, &r);
	CHECK_INT(r.status, 202);
	resp_free(&r);
	kiln_digest_buf(KILN_SHA256, "0123456789", 10, digest);
	path = kiln_xasprintf("%s?digest=%s", loc, digest);
	http("PUT", path, NULL, 0, NULL, &r);
	CHECK_INT(r.status, 201);
	resp_free(&r);
	free(path);
	path = kiln_xasprintf("/v2/t/blobs/%s", digest);
	http("GET", path, NULL, 0, NULL, &r);
	CHECK_INT(r.status, 200);
	CHECK_STR(r.body.buf, "0123456789");
	resp_free(&r);
	free(path);
	free(loc);
}

static void test_manifest_and_referrers(void)
{
	char cfg[KILN_DIGEST_MAX], layer[KILN_DIGEST_MAX], m1d[KILN_DIGEST_MAX];
	struct resp r;
	char *m1, *art, *path, *hv;
	const char *oci[] = { "Content-Type: application/vnd.oci.image.manifest.v1+json", NULL };

	push_blob("t", "{}", cfg);
	push_blob("t", "layer-bytes", layer);
	m1 = kiln_xasprintf("{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
			    "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"%s\",\"size\":2},"
			    "\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"%s\",\"size\":11}]}",
			    cfg, layer);
	kiln_digest_buf(KILN_SHA256, m1, strlen(m1), m1d);
	http("PUT", "/v2/t/manifests/v1", m1, strlen(m1), oci, &r);
	CHECK_INT(r.status, 201);
	hv = header(&r, "Docker-Content-Digest");
	CHECK_STR(hv, m1d);
	free(hv);
	resp_free(&r);
	/* an artifact pointing at m1 */
	art = kiln_xasprintf("{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
			     "\"artifactType\":\"application/vnd.kiln.sig\","
			     "\"config\":{\"mediaType\":\"application/vnd.oci.empty.v1+json\",\"digest\":\"%s\",\"size\":2},"
			     "\"layers\":[],\"subject\":{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
			     "\"digest\":\"%s\",\"size\":%zu},\"annotations\":{\"who\":\"test\"}}",
			     cfg, m1d, strlen(m1));
	http("PUT", "/v2/t/manifests/sig", art, strlen(art), oci, &r);
	CHECK_INT(r.status, 201);
	hv = header(&r, "OCI-Subject");
	CHECK_STR(hv, m1d);
	free(hv);
	resp_free(&r);
	path = kiln_xasprintf("/v2/t/referrers/%s", m1d);
	http("GET", path, NULL, 0, NULL, &r);
	CHECK_INT(r.status, 200);
	CHECK(strstr(r.body.buf, "\"artifactType\":\"application/vnd.kiln.sig\"") != NULL);
	CHECK(strstr(r.body.buf, "\"who\":\"test\"") != NULL);
	resp_free(&r);
	free(path);
	path = kiln_xasprintf("/v2/t/referrers/%s?artifactType=application/other", m1d);
	http("GET", path, NULL, 0, NULL, &r);
	CHECK_INT(r.status, 200);
	CHECK(strstr(r.body.buf, "\"manifests\":[]") != NULL);
	hv = header(&r, "OCI-Filters-Applied");
	CHECK_STR(hv, "artifactType");
	free(hv);
	resp_free(&r);
	free(path);
	http("GET", "/v2/t/referrers/sha256:nothex", NULL, 0, NULL, &r);
	CHECK_INT(r.status, 400);
	CHECK(has_error(&r, "DIGEST_INVALID"));
	resp_free(&r);
	http("HEAD", "/v2/t/manifests/v1", NULL, 0, NULL, &r);
	CHECK_INT(r.status, 200);
	resp_free(&r);
	http("GET", "/v2/t/tags/list", NULL, 0, NULL, &r);
	CHECK_STR(r.body.buf, "{\"name\":\"t\",\"tags\":[\"sig\",\"v1\"]}");
	resp_free(&r);
	free(art);
	free(m1);
}

static void test_errors(void)
{
	struct resp r;
	const char *big[] = { "Content-Type: application/vnd.oci.image.manifest.v1+json", NULL };
	char *huge = kiln_xcalloc(1, (5 << 20) + 1);

	memset(huge, ' ', 5 << 20);
	http("PUT", "/v2/t/manifests/huge", huge, 5 << 20, big, &r);
	CHECK_INT(r.status, 413);
	resp_free(&r);
	http("PUT", "/v2/t/manifests/x", "{}", 2, big, &r);
	CHECK_INT(r.status, 400);
	CHECK(has_error(&r, "MANIFEST_INVALID"));
	resp_free(&r);
	http("DELETE", "/v2/t/blobs/uploads/zzz", NULL, 0, NULL, &r);
	CHECK_INT(r.status, 404);
	CHECK(has_error(&r, "BLOB_UPLOAD_UNKNOWN"));
	resp_free(&r);
	http("GET", "/v2/UPPER/tags/list", NULL, 0, NULL, &r);
	CHECK_INT(r.status, 400);
	CHECK(has_error(&r, "NAME_INVALID"));
	resp_free(&r);
	http("PUT", "/v2/", NULL, 0, NULL, &r);
	CHECK_INT(r.status, 405);
	resp_free(&r);
	free(huge);
}

/* A batch body of the given blobs ("DIGEST SIZE\n" + bytes each); corrupt >= 0
 * sends that blob's bytes altered. */
static void batch_of(kiln_buf *b, const char *const *blobs, size_t n, int corrupt, char digests[][KILN_DIGEST_MAX])
{
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(blobs[i]);
		kiln_digest_buf(KILN_SHA256, blobs[i], len, digests[i]);
		kiln_buf_addf(b, "%s %zu\n", digests[i], len);
		kiln_buf_add(b, blobs[i], len);
		if ((int)i == corrupt && len)
			b->buf[b->len - 1] ^= 1;
	}
}

static int blob_status(const char *repo, const char *digest)
{
	struct resp r;
	char *path = kiln_xasprintf("/v2/%s/blobs/%s", repo, digest);
	long st;

	http("HEAD", path, NULL, 0, NULL, &r);
	st = r.status;
	resp_free(&r);
	free(path);
	return (int)st;
}

/* Nothing of a refused batch is left in uploads/. */
static size_t staged(void)
{
	char *dir = kiln_path_join(getenv("KILN_TEST_REG_DATA"), "uploads");
	DIR *d = opendir(dir);
	size_t n = 0;

	for (struct dirent *de; d && (de = readdir(d)) != NULL;)
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	free(dir);
	return n;
}

static void test_batch_upload(void)
{
	const char *good[] = { "first blob", "", "third blob, longer than the others" };
	const char *bad[] = { "fourth", "fifth", "sixth" };
	char dg[3][KILN_DIGEST_MAX], db[3][KILN_DIGEST_MAX];
	kiln_buf b = KILN_BUF_INIT;
	struct resp r;

	/* the batch query offers it */
	http("POST", "/v2/bt/blobs/_exists", "{\"digests\":[]}", 14, NULL, &r);
	CHECK_INT(r.status, 200);
	CHECK(strstr(r.body.buf, "\"batch_upload\":{\"max_blobs\":1000") != NULL);
	resp_free(&r);
	batch_of(&b, good, 3, -1, dg);
	http("POST", "/v2/bt/blobs/_batch", b.buf, b.len, NULL, &r);
	CHECK_INT(r.status, 201);
	CHECK(strstr(r.body.buf, dg[2]) != NULL);
	resp_free(&r);
	for (int i = 0; i < 3; i++)
		CHECK_INT(blob_status("bt", dg[i]), 200);
	/* a wrong digest in the middle: 400 naming it, nothing of the batch stored */
	kiln_buf_reset(&b);
	batch_of(&b, bad, 3, 1, db);
	http("POST", "/v2/bt/blobs/_batch", b.buf, b.len, NULL, &r);
	CHECK_INT(r.status, 400);
	CHECK(has_error(&r, "DIGEST_INVALID"));
	CHECK(strstr(r.body.buf, "blobs[1]") != NULL && strstr(r.body.buf, db[1]) != NULL);
	resp_free(&r);
	CHECK_INT(blob_status("bt", db[0]), 404);
	CHECK_INT(staged(), 0);
	/* cut short: inside a blob, inside a header */
	kiln_buf_reset(&b);
	batch_of(&b, bad, 3, -1, db);
	http("POST", "/v2/bt/blobs/_batch", b.buf, b.len - 2, NULL, &r);
	CHECK_INT(r.status, 400);
	CHECK(has_error(&r, "BODY_INVALID") && strstr(r.body.buf, "ends inside blobs[2]") != NULL);
	resp_free(&r);
	http("POST", "/v2/bt/blobs/_batch", "sha256:ab", 9, NULL, &r);
	CHECK_INT(r.status, 400);
	CHECK(has_error(&r, "BODY_INVALID"));
	resp_free(&r);
	CHECK_INT(blob_status("bt", db[0]), 404);
	CHECK_INT(staged(), 0);
	/* malformed headers */
	static const struct {
		const char *body, *code;
	} cases[] = {
		{ "no-space-here\n", "BODY_INVALID" },
		{ "sha256:zz 3\nabc", "DIGEST_INVALID" },
		{ "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 -1\n", "BODY_INVALID" },
		{ "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 1x\n", "BODY_INVALID" },
		{ "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 99999999999\n", "SIZE_INVALID" },
		{ "", "BODY_INVALID" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		http("POST", "/v2/bt/blobs/_batch", cases[i].body, strlen(cases[i].body), NULL, &r);
		CHECK_INT(r.status, strcmp(cases[i].code, "SIZE_INVALID") == 0 ? 413 : 400);
		CHECK(has_error(&r, cases[i].code));
		if (!has_error(&r, cases[i].code))
			printf("#   case %zu: %s\n", i, r.body.buf ? r.body.buf : "");
		resp_free(&r);
	}
	/* a header line without its end */
	char longline[400];
	memset(longline, 'a', sizeof(longline));
	http("POST", "/v2/bt/blobs/_batch", longline, sizeof(longline), NULL, &r);
	CHECK_INT(r.status, 400);
	CHECK(has_error(&r, "BODY_INVALID") && strstr(r.body.buf, "longer than") != NULL);
	resp_free(&r);
	/* more blobs than a batch may carry (empty ones) */
	kiln_buf_reset(&b);
	for (int i = 0; i < 1001; i++)
		kiln_buf_adds(&b, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 0\n");
	http("POST", "/v2/bt/blobs/_batch", b.buf, b.len, NULL, &r);
	CHECK_INT(r.status, 400);
	CHECK(has_error(&r, "TOO_MANY_BLOBS"));
	resp_free(&r);
	http("GET", "/v2/bt/blobs/_batch", NULL, 0, NULL, &r);
	CHECK_INT(r.status, 405);
	resp_free(&r);
	CHECK_INT(staged(), 0);
	kiln_buf_free(&b);
}

int main(void)
{
	struct reg_config cfg;
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-regsrv", &err);

	curl_global_init(CURL_GLOBAL_ALL);
	reg_config_init(&cfg);
	free(cfg.data_dir);
	cfg.data_dir = kiln_path_join(dir, "data");
	cfg.port = 0;
	srv = reg_server_start(&cfg, &err);
	if (srv == NULL) {
		printf("not ok - server start: %s\n", kiln_error_message(err));
		return 1;
	}
	snprintf(base, sizeof(base), "http://127.0.0.1:%u", reg_server_port(srv));
	setenv("KILN_TEST_REG_DATA", cfg.data_dir, 1);
	RUN(test_chunked_upload);
	RUN(test_manifest_and_referrers);
	RUN(test_errors);
	RUN(test_batch_upload);
	reg_server_stop(srv);
	reg_config_free(&cfg);
	kiln_rm_rf(dir, &err);
	free(dir);
	curl_global_cleanup();
	return test_done();
}
