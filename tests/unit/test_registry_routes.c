/* test_registry_routes.c — the registry's hook for extra routes (what the
 * build service mounts): a real reg_server on 127.0.0.1 with auth on, a
 * mounted prefix getting headers, body pieces, the end and done; identity by
 * Bearer and by X-API-Key; a client that goes away mid-body still ends in done. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <curl/curl.h>

#include "registry/registry.h"
#include "test.h"

static reg_server *srv;
static char base[64];

struct seen {
	int begins, ends, dones;
	size_t body;
	kiln_buf out;
};
static struct seen seen;

static void rt_begin(void *ud, reg_req *r)
{
	kiln_error *err = NULL;
	int who;

	seen.begins++;
	if (strcmp(reg_req_path(r), "/x/who") == 0) {
		char *ns;
		who = reg_req_identify(r, &err);
		kiln_error_free(err);
		ns = who == 1 ? reg_req_namespaces(r, REG_BUILD) : NULL;
		char *s = kiln_xasprintf("%d %s %d", who, ns ? ns : "-", reg_req_allows(r, "team-a/app", REG_BUILD));
		reg_respond(r, 200, s, strlen(s), "text/plain");
		free(s);
		free(ns);
	}
}

static int rt_body(void *ud, reg_req *r, const char *data, size_t len)
{
	seen.body += len;
	return 0;
}

static void rt_end(void *ud, reg_req *r)
{
	char *s = kiln_xasprintf("%s %zu %s", reg_req_method(r), seen.body, reg_query(r, "q") ? reg_query(r, "q") : "");
	seen.ends++;
	reg_respond(r, 201, s, strlen(s), "text/plain");
	reg_header(r, "X-Test", "1");
	free(s);
}

static void rt_done(void *ud, reg_req *r)
{
	/* The identity case's requests are answered in begin, and the server may
	 * finish with the last of them while the next case runs: not counted. */
	if (strcmp(reg_req_path(r), "/x/who") == 0)
		return;
	__atomic_add_fetch(&seen.dones, 1, __ATOMIC_SEQ_CST);
}

static long stream_read(void *ud, uint64_t pos, char *buf, size_t max)
{
	int *n = ud;
	if (*n >= 3)
		return 0;
	(*n)++;
	return snprintf(buf, max, "line %d\n", *n);
}

static void stream_end(void *ud, reg_req *r)
{
	int *n = kiln_xcalloc(1, sizeof(*n));
	reg_respond_stream(r, 200, "text/plain", stream_read, n, free);
}

static const struct reg_routes routes = { .prefix = "/x/", .begin = rt_begin, .body = rt_body,
	.end = rt_end, .done = rt_done };
static const struct reg_routes sroutes = { .prefix = "/s/", .begin = rt_begin, .body = rt_body,
	.end = stream_end };

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
	kiln_buf_add(ud, p, sz * n);
	return sz * n;
}

static long http(const char *method, const char *path, const char *body, const char *hdr, kiln_buf *out)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hl = curl_slist_append(NULL, "Expect:");
	char *url = kiln_xasprintf("%s%s", base, path);
	long status = 0;

	if (hdr)
		hl = curl_slist_append(hl, hdr);
	*out = (kiln_buf)KILN_BUF_INIT;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hl);
	curl_easy_cleanup(c);
	free(url);
	return status;
}

static void test_routes_body(void)
{
	kiln_buf b;

	memset(&seen, 0, sizeof(seen));
	CHECK_INT(http("PUT", "/x/thing?q=v", "0123456789", NULL, &b), 201);
	CHECK_STR(b.buf, "PUT 10 v");
	kiln_buf_free(&b);
	CHECK_INT(seen.begins, 1);
	CHECK_INT(seen.ends, 1);
	/* done runs when the server has finished with the request, which can be after curl has the answer */
	for (int i = 0; i < 200 && __atomic_load_n(&seen.dones, __ATOMIC_SEQ_CST) == 0; i++)
		usleep(10000);
	CHECK_INT(seen.dones, 1);
	/* the registry's own routes are untouched; its auth still applies there */
	CHECK_INT(http("GET", "/v2/", NULL, NULL, &b), 401);
	kiln_buf_free(&b);
	CHECK_INT(http("GET", "/xy", NULL, NULL, &b), 404);
	kiln_buf_free(&b);
}

static const char *token;

static void test_routes_identity(void)
{
	const char *secret = token;
	kiln_buf b;
	char *h;

	CHECK_INT(http("GET", "/x/who", NULL, NULL, &b), 200);
	CHECK_STR(b.buf, "0 - 0");
	kiln_buf_free(&b);
	h = kiln_xasprintf("Authorization: Bearer %s", secret);
	CHECK_INT(http("GET", "/x/who", NULL, h, &b), 200);
	CHECK_STR(b.buf, "1 team-a 1");
	kiln_buf_free(&b);
	free(h);
	h = kiln_xasprintf("X-API-Key: %s", secret);
	CHECK_INT(http("GET", "/x/who", NULL, h, &b), 200);
	CHECK_STR(b.buf, "1 team-a 1");
	kiln_buf_free(&b);
	/* X-API-Key works on the registry's routes too */
	CHECK_INT(http("GET", "/v2/", NULL, h, &b), 200);
	kiln_buf_free(&b);
	free(h);
	CHECK_INT(http("GET", "/x/who", NULL, "X-API-Key: kiln_0000", &b), 200);
	CHECK_STR(b.buf, "-2 - 0");
	kiln_buf_free(&b);
}

static void test_routes_stream(void)
{
	kiln_buf b;

	CHECK_INT(http("GET", "/s/log", NULL, NULL, &b), 200);
	CHECK_STR(b.buf, "line 1\nline 2\nline 3\n");
	kiln_buf_free(&b);
}

/* A client announcing 1 MB and sending 5 bytes, then closing: no end, a done. */
static void test_routes_disconnect(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(reg_server_port(srv)) };
	const char *req = "PUT /x/up HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nhello";
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(&seen, 0, sizeof(seen));
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
	for (int i = 0; i < 100 && seen.body < 5; i++)
		usleep(20000);
	close(fd);
	for (int i = 0; i < 100 && seen.dones == 0; i++)
		usleep(20000);
	CHECK_INT(seen.body, 5);
	CHECK_INT(seen.ends, 0);
	CHECK_INT(seen.dones, 1);
}

int main(void)
{
	struct reg_config cfg;
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-regroutes", &err), *secret = NULL;
	const char *scopes[] = { "team-a:pull,push,build", "other:pull", NULL };

	curl_global_init(CURL_GLOBAL_ALL);
	reg_config_init(&cfg);
	free(cfg.data_dir);
	cfg.data_dir = kiln_path_join(dir, "data");
	cfg.port = 0;
	cfg.auth = 1;
	srv = reg_server_start(&cfg, &err);
	if (srv == NULL || reg_server_mount(srv, &routes, &err) < 0 || reg_server_mount(srv, &sroutes, &err) < 0 ||
	    reg_token_create(&cfg, "t", scopes, 0, &secret, &err) < 0) {
		printf("not ok - server start: %s\n", kiln_error_message(err));
		return 1;
	}
	snprintf(base, sizeof(base), "http://127.0.0.1:%u", reg_server_port(srv));
	token = secret;
	RUN(test_routes_body);
	RUN(test_routes_identity);
	RUN(test_routes_stream);
	RUN(test_routes_disconnect);
	reg_server_stop(srv);
	reg_config_free(&cfg);
	kiln_rm_rf(dir, &err);
	free(dir);
	free(secret);
	curl_global_cleanup();
	return test_done();
}
