/* test_registry_s3.c — the S3 client: SigV4 against the worked examples of
 * AWS's S3 documentation, and, when KILN_TEST_S3_ENDPOINT (with _ACCESS_KEY,
 * _SECRET_KEY) names a live S3 server (tests/e2e/t0705 starts radosgw), put /
 * multipart / ranged get / head / delete of real objects including empty ones. */
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
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
