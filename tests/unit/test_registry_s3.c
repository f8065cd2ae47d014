/* test_registry_s3.c — the S3 client: SigV4 against the worked examples of
 * AWS's S3 documentation, and, when KILN_TEST_S3_ENDPOINT (with _ACCESS_KEY,
 * _SECRET_KEY) names a live S3 server (tests/e2e/t0705 starts radosgw), put /
 * multipart / ranged get / head / delete of real objects including empty ones. */
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "registry/internal.h"
#include "test.h"

#define EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static struct reg_s3_cfg aws = {
	.endpoint = "https://examplebucket.s3.amazonaws.com",
	.region = "us-east-1",
	.bucket = "examplebucket",
	.access_key = "AKIAIOSFODNN7EXAMPLE",
	.secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
};

static void test_sigv4_get_object(void)
{
	const char *h[] = { "Host:examplebucket.s3.amazonaws.com", "x-amz-date:20130524T000000Z", "Range: bytes=0-9",
			    "x-amz-content-sha256:" EMPTY, NULL };
	char *a = reg_s3_authorization(&aws, "GET", "/test.txt", "", h, EMPTY, "20130524T000000Z");

	CHECK_STR(a, "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
		     "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
		     "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
	free(a);
}

static void test_sigv4_list_objects(void)
{
	const char *h[] = { "host:examplebucket.s3.amazonaws.com", "x-amz-content-sha256:" EMPTY,
			    "x-amz-date:20130524T000000Z", NULL };
	char *a = reg_s3_authorization(&aws, "GET", "/", "max-keys=2&prefix=J", h, EMPTY, "20130524T000000Z");

	CHECK(strstr(a, "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7") != NULL);
	free(a);
}

static void test_uri_encode(void)
{
	kiln_buf b = KILN_BUF_INIT;

	reg_s3_uri_encode(&b, "blobs/sha256/ab/x y$~.-_", 1);
	CHECK_STR(b.buf, "blobs/sha256/ab/x%20y%24~.-_");
	kiln_buf_reset(&b);
	reg_s3_uri_encode(&b, "a/b+c=", 0);
	CHECK_STR(b.buf, "a%2Fb%2Bc%3D");
	kiln_buf_free(&b);
}

static struct reg_s3_cfg live;

static int to_buf(void *ud, const void *data, size_t len)
{
	kiln_buf_add(ud, data, len);
	return 0;
}

static void test_live(void)
{
	kiln_error *err = NULL;
	kiln_buf got = KILN_BUF_INIT;
	size_t big_len = (size_t)(11 << 20) + 12345;
	char *big = kiln_xmalloc(big_len);
	int64_t size = -1;

	for (size_t i = 0; i < big_len; i++)
		big[i] = (char)(i * 2654435761u >> 13);
	CHECK(reg_s3_create_bucket(&live, &err) == 0);
	CHECK(reg_s3_create_bucket(&live, &err) == 0); /* again: fine */
	CHECK(reg_s3_put(&live, "blobs/small", "hello s3", 8, &err) == 0);
	CHECK(reg_s3_head(&live, "blobs/small", &size, &err) == 1);
	CHECK_INT(size, 8);
	CHECK(reg_s3_get(&live, "blobs/small", 0, -1, to_buf, &got, &err) == 0);
	CHECK_STR(got.buf, "hello s3");
	kiln_buf_reset(&got);
	CHECK(reg_s3_get(&live, "blobs/small", 6, 2, to_buf, &got, &err) == 0);
	CHECK_STR(got.buf, "s3");
	kiln_buf_reset(&got);
	/* zero-byte objects: put, head, get */
	CHECK(reg_s3_put(&live, "blobs/empty", "", 0, &err) == 0);
	CHECK(reg_s3_head(&live, "blobs/empty", &size, &err) == 1);
	CHECK_INT(size, 0);
	CHECK(reg_s3_get(&live, "blobs/empty", 0, -1, to_buf, &got, &err) == 0);
	CHECK_INT(got.len, 0);
	CHECK(reg_s3_put_multipart(&live, "blobs/empty-mp", "", 0, 5 << 20, &err) == 0);
	CHECK(reg_s3_head(&live, "blobs/empty-mp", &size, &err) == 1);
	CHECK_INT(size, 0);
	/* multipart: 3 parts of 5 MiB, 5 MiB and the rest */
	CHECK(reg_s3_put_multipart(&live, "blobs/big", big, big_len, 5 << 20, &err) == 0);
	CHECK(reg_s3_head(&live, "blobs/big", &size, &err) == 1);
	CHECK_INT(size, big_len);
	CHECK(reg_s3_get(&live, "blobs/big", 0, -1, to_buf, &got, &err) == 0);
	CHECK(got.len == big_len && memcmp(got.buf, big, big_len) == 0);
	kiln_buf_reset(&got);
	CHECK(reg_s3_get(&live, "blobs/big", (5 << 20) - 3, 10, to_buf, &got, &err) == 0);
	CHECK(got.len == 10 && memcmp(got.buf, big + (5 << 20) - 3, 10) == 0);
	kiln_buf_reset(&got);
	CHECK(reg_s3_delete(&live, "blobs/big", &err) == 0);
	CHECK(reg_s3_head(&live, "blobs/big", &size, &err) == 0);
	CHECK(reg_s3_get(&live, "blobs/big", 0, -1, to_buf, &got, &err) < 0);
	CHECK(err && err->kind == KILN_E_NOTFOUND);
	kiln_error_clear(&err);
	/* wrong secret: refused */
	live.secret_key = "wrong";
	CHECK(reg_s3_put(&live, "blobs/x", "x", 1, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "403") != NULL);
	if (err && !strstr(kiln_error_message(err), "403"))
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_free(err);
	kiln_buf_free(&got);
	free(big);
}

/* A flaky S3 stand-in on loopback: every third request answers 503, the
 * others 200 with a body (GET) or an ETag (PUT).  It counts requests and
 * the TCP connections they came on. */
static int fake_requests, fake_connections;

static enum MHD_Result fake_s3(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
			       const char *version, const char *upload, size_t *upload_len, void **state)
{
	static int marker;
	struct MHD_Response *resp;
	enum MHD_Result ret;

	if (*state == NULL) {
		*state = &marker;
		return MHD_YES;
	}
	if (*upload_len) {
		*upload_len = 0;
		return MHD_YES;
	}
	int n = ++fake_requests;
	const char *body = strcmp(method, "GET") == 0 ? "object bytes" : "";
	resp = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
	MHD_add_response_header(resp, "ETag", "\"e1\"");
	ret = MHD_queue_response(conn, n % 3 == 1 ? 503 : 200, resp);
	MHD_destroy_response(resp);
	return ret;
}

static void fake_notify(void *cls, struct MHD_Connection *c, void **socket_ctx, enum MHD_ConnectionNotificationCode code)
{
	if (code == MHD_CONNECTION_NOTIFY_STARTED)
		fake_connections++;
}

/* S3 rides on the registry client's transport: a 503 is retried, and
 * consecutive requests reuse one keep-alive connection. */
static void test_transport(void)
{
	struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, fake_s3, NULL,
						MHD_OPTION_NOTIFY_CONNECTION, fake_notify, NULL, MHD_OPTION_END);
	kiln_error *err = NULL;
	kiln_buf got = KILN_BUF_INIT;

	CHECK(d != NULL);
	if (!d)
		return;
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	char *ep = kiln_xasprintf("http://127.0.0.1:%u", (unsigned)info->port);
	struct reg_s3_cfg s3 = { .endpoint = ep, .region = "us-east-1", .bucket = "b", .access_key = "k", .secret_key = "s" };

	setenv("KILN_REGISTRY_RETRIES", "3", 1);
	for (int i = 0; i < 4; i++)
		CHECK_INT(reg_s3_put(&s3, "blobs/x", "data", 4, &err), 0);
	CHECK(reg_s3_get(&s3, "blobs/x", 0, -1, to_buf, &got, &err) == 0);
	CHECK_STR(got.buf, "object bytes");
	/* 5 operations, and requests 1, 4 and 7 refused and retried: 8 in all */
	CHECK_INT(fake_requests, 8);
	CHECK_INT(fake_connections, 1);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_free(err);
	kiln_buf_free(&got);
	MHD_stop_daemon(d);
	free(ep);
}

int main(void)
{
	RUN(test_transport);
	RUN(test_sigv4_get_object);
	RUN(test_sigv4_list_objects);
	RUN(test_uri_encode);
	live.endpoint = getenv("KILN_TEST_S3_ENDPOINT");
	live.access_key = getenv("KILN_TEST_S3_ACCESS_KEY");
	live.secret_key = getenv("KILN_TEST_S3_SECRET_KEY");
	live.region = "us-east-1";
	live.bucket = "kiln-test";
	if (live.endpoint && live.access_key && live.secret_key)
		RUN(test_live);
	else
		printf("# live S3 checks need KILN_TEST_S3_ENDPOINT/_ACCESS_KEY/_SECRET_KEY (tests/e2e/t0705)\n");
	return test_done();
}
