/* digest.c — content digests in OCI's "algorithm:hex" form, and base64.
 * Hashing is openssl's EVP; this file only adds streaming, formatting and validation. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "kiln.h"

struct kiln_hasher {
	EVP_MD_CTX *ctx;
	enum kiln_digest_algo algo;
};

const char *kiln_digest_algo_name(enum kiln_digest_algo algo)
{
	return algo == KILN_SHA512 ? "sha512" : "sha256";
}

kiln_hasher *kiln_hasher_new(enum kiln_digest_algo algo)
{
	kiln_hasher *h = kiln_xcalloc(1, sizeof(*h));

	h->algo = algo;
	h->ctx = EVP_MD_CTX_new();
	if (h->ctx == NULL || EVP_DigestInit_ex(h->ctx, algo == KILN_SHA512 ? EVP_sha512() : EVP_sha256(), NULL) != 1) {
		fputs("kiln: openssl digest init failed\n", stderr);
		abort();
	}
	return h;
}

void kiln_hasher_update(kiln_hasher *h, const void *data, size_t len)
{
	EVP_DigestUpdate(h->ctx, data, len);
}

void kiln_hasher_final(kiln_hasher *h, char out[KILN_DIGEST_MAX])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	size_t off;

	EVP_DigestFinal_ex(h->ctx, md, &mdlen);
	off = (size_t)snprintf(out, KILN_DIGEST_MAX, "%s:", kiln_digest_algo_name(h->algo));
	for (unsigned int i = 0; i < mdlen; i++) {
		out[off++] = hex[md[i] >> 4];
		out[off++] = hex[md[i] & 15];
	}
	out[off] = '\0';
	kiln_hasher_free(h);
}

void kiln_hasher_free(kiln_hasher *h)
{
	if (h == NULL)
		return;
	EVP_MD_CTX_free(h->ctx);
	free(h);
}

void kiln_digest_buf(enum kiln_digest_algo algo, const void *data, size_t len, char out[KILN_DIGEST_MAX])
{
	kiln_hasher *h = kiln_hasher_new(algo);

	kiln_hasher_update(h, data, len);
	kiln_hasher_final(h, out);
}

int kiln_digest_file(enum kiln_digest_algo algo, const char *path, char out[KILN_DIGEST_MAX], kiln_error **err)
{
	kiln_hasher *h = NULL;
	char buf[65536];
	int fd, ret = -1;
	ssize_t n;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return kiln_err_errno(err, errno, "open %s", path);
	h = kiln_hasher_new(algo);
	while ((n = kiln_read_full(fd, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			kiln_err_errno(err, errno, "read %s", path);
			goto out;
		}
		kiln_hasher_update(h, buf, (size_t)n);
	}
	kiln_hasher_final(h, out);
	h = NULL;
	ret = 0;
out:
	kiln_hasher_free(h);
	close(fd);
	return ret;
}

int kiln_digest_parse(const char *s, enum kiln_digest_algo *algo, kiln_error **err)
{
	enum kiln_digest_algo a;
	const char *hex;
	size_t want;

	if (strncmp(s, "sha256:", 7) == 0) {
		a = KILN_SHA256;
		hex = s + 7;
		want = 64;
	} else if (strncmp(s, "sha512:", 7) == 0) {
		a = KILN_SHA512;
		hex = s + 7;
		want = 128;
	} else {
		return kiln_err(err, KILN_E_INVALID, "invalid digest \"%.80s\": unsupported algorithm (want sha256 or sha512)", s);
	}
	if (strlen(hex) != want)
		return kiln_err(err, KILN_E_INVALID, "invalid digest \"%.80s\": %s needs %zu hex characters", s,
				kiln_digest_algo_name(a), want);
	for (size_t i = 0; i < want; i++) {
		char c = hex[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return kiln_err(err, KILN_E_INVALID, "invalid digest \"%.80s\": not lowercase hex", s);
	}
	if (algo != NULL)
		*algo = a;
	return 0;
}

const char *kiln_digest_hex(const char *digest)
{
	const char *colon = strchr(digest, ':');
	return colon ? colon + 1 : digest;
}

/* Base64 (openssl's EVP block coding, no line breaks), for credentials. */
char *kiln_b64_encode_bytes(const void *data, size_t n)
{
	char *out = kiln_xmalloc(4 * ((n + 2) / 3) + 1);
	EVP_EncodeBlock((unsigned char *)out, data, (int)n);
	return out;
}

char *kiln_b64_encode(const char *s)
{
	return kiln_b64_encode_bytes(s, strlen(s));
}

char *kiln_b64_decode_bytes(const char *s, size_t *lenp)
{
	size_t n = strlen(s);
	if (n == 0 || n % 4 != 0)
		return NULL;
	char *out = kiln_xmalloc(n / 4 * 3 + 1);
	int len = EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
	if (len < 0) {
		free(out);
		return NULL;
	}
	/* EVP_DecodeBlock counts the padding as zero bytes */
	for (size_t i = n; i > 0 && s[i - 1] == '='; i--)
		len--;
	out[len] = 0;
	if (lenp)
		*lenp = (size_t)len;
	return out;
}

char *kiln_b64_decode(const char *s)
{
	return kiln_b64_decode_bytes(s, NULL);
}
