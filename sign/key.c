/* key.c — ECDSA P-256 keys through openssl's EVP API: generation into PEM
 * files (the private one 0600, never overwritten), loading, the key id
 * (sha256 of the public key's DER) and DER ECDSA-SHA256 signatures in base64. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "sign/sign.h"

struct sign_key {
	EVP_PKEY *pk;
	bool private;
	char *path;
	char id[KILN_DIGEST_MAX];
};

static int ossl_err(kiln_error **err, const char *what)
{
	char buf[256];
	unsigned long e = ERR_get_error();

	ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	return kiln_err(err, KILN_E_INVALID, "%s: %s", what, e ? buf : "openssl failed");
}

static sign_key *key_wrap(EVP_PKEY *pk, bool priv, const char *path, kiln_error **err)
{
	unsigned char *der = NULL;
	int n = i2d_PUBKEY(pk, &der);
	sign_key *k;

	if (n <= 0) {
		EVP_PKEY_free(pk);
		ossl_err(err, path);
		return NULL;
	}
	k = kiln_xcalloc(1, sizeof(*k));
	k->pk = pk;
	k->private = priv;
	k->path = kiln_xstrdup(path);
	kiln_digest_buf(KILN_SHA256, der, (size_t)n, k->id);
	OPENSSL_free(der);
	return k;
}

/* Only P-256 ECDSA keys: what cosign's and skopeo's sigstore keys are. */
static int check_p256(EVP_PKEY *pk, const char *path, kiln_error **err)
{
	char group[64];
	size_t glen = 0;

	if (EVP_PKEY_get_base_id(pk) != EVP_PKEY_EC ||
	    EVP_PKEY_get_utf8_string_param(pk, "group", group, sizeof(group), &glen) != 1 ||
	    strcmp(group, "prime256v1") != 0)
		return kiln_err(err, KILN_E_INVALID, "%s: not an ECDSA P-256 key", path);
	return 0;
}

int sign_key_generate(const char *prefix, kiln_error **err)
{
	char *priv = kiln_xasprintf("%s.key", prefix), *pub = kiln_xasprintf("%s.pub", prefix);
	EVP_PKEY *pk = EVP_EC_gen("P-256");
	FILE *f = NULL;
	int fd = -1, rc = -1;

	if (pk == NULL) {
		ossl_err(err, "generate an ECDSA P-256 key");
		goto out;
	}
	fd = open(priv, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		kiln_err_errno(err, errno, "%s", priv);
		goto out;
	}
	if ((f = fdopen(fd, "w")) == NULL) {
		kiln_err_errno(err, errno, "%s", priv);
		goto out;
	}
	fd = -1;
	if (PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL) != 1 || fflush(f) != 0 || fsync(fileno(f)) != 0) {
		ossl_err(err, priv);
		goto out;
	}
	if (fclose(f) != 0) {
		f = NULL;
		kiln_err_errno(err, errno, "%s", priv);
		goto out;
	}
	f = NULL;
	BIO *b = BIO_new(BIO_s_mem());
	char *data;
	long len;
	if (PEM_write_bio_PUBKEY(b, pk) != 1 || (len = BIO_get_mem_data(b, &data)) <= 0) {
		BIO_free(b);
		ossl_err(err, pub);
		goto out;
	}
	rc = kiln_write_atomic(pub, data, (size_t)len, 0644, err);
	BIO_free(b);
out:
	if (rc < 0 && (fd >= 0 || f))
		unlink(priv);
	if (f)
		fclose(f);
	if (fd >= 0)
		close(fd);
	EVP_PKEY_free(pk);
	free(priv);
	free(pub);
	return rc;
}

static sign_key *load(const char *path, bool want_private, kiln_error **err)
{
	char *data = NULL;
	size_t len;
	EVP_PKEY *pk = NULL;
	BIO *b = NULL;
	bool priv = false;

	if (kiln_read_file(path, &data, &len, 1 << 16, err) < 0)
		return NULL;
	b = BIO_new_mem_buf(data, (int)len);
	if (strstr(data, "PRIVATE KEY-----")) {
		if (strstr(data, "ENCRYPTED")) {
			kiln_err(err, KILN_E_INVALID,
				 "%s: an encrypted private key (cosign's or skopeo's format); kiln reads "
				 "unencrypted PKCS#8 PEM (kiln key generate)", path);
			goto out;
		}
		pk = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
		priv = true;
	} else if (!want_private) {
		pk = PEM_read_bio_PUBKEY(b, NULL, NULL, NULL);
	} else {
		kiln_err(err, KILN_E_INVALID, "%s: not a private key (kiln key generate writes PREFIX.key)", path);
		goto out;
	}
	if (pk == NULL) {
		ossl_err(err, path);
		goto out;
	}
	if (check_p256(pk, path, err) < 0) {
		EVP_PKEY_free(pk);
		pk = NULL;
	}
out:
	BIO_free(b);
	/* the private key's PEM is wiped, not just freed */
	OPENSSL_cleanse(data, len);
	free(data);
	return pk ? key_wrap(pk, priv, path, err) : NULL;
}

sign_key *sign_key_load_private(const char *path, kiln_error **err)
{
	return load(path, true, err);
}

sign_key *sign_key_load_public(const char *path, kiln_error **err)
{
	return load(path, false, err);
}

void sign_key_free(sign_key *k)
{
	if (!k)
		return;
	EVP_PKEY_free(k->pk);
	free(k->path);
	free(k);
}

const char *sign_key_id(const sign_key *k)
{
	return k->id;
}

const char *sign_key_path(const sign_key *k)
{
	return k->path;
}

char *sign_key_sign(const sign_key *k, const void *data, size_t len, kiln_error **err)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char *sig = NULL;
	size_t n = 0;
	char *out = NULL;

	if (!k->private) {
		kiln_err(err, KILN_E_INVALID, "%s: a public key cannot sign", k->path);
		goto out;
	}
	if (EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, k->pk) != 1 ||
	    EVP_DigestSign(ctx, NULL, &n, data, len) != 1) {
		ossl_err(err, "sign");
		goto out;
	}
	sig = kiln_xmalloc(n);
	if (EVP_DigestSign(ctx, sig, &n, data, len) != 1) {
		ossl_err(err, "sign");
		goto out;
	}
	out = kiln_b64_encode_bytes(sig, n);
out:
	free(sig);
	EVP_MD_CTX_free(ctx);
	return out;
}

int sign_key_verify(const sign_key *k, const void *data, size_t len, const char *b64, kiln_error **err)
{
	kiln_buf sig = KILN_BUF_INIT;
	EVP_MD_CTX *ctx = NULL;
	int rc = 0;

	if (kiln_b64_decode_bytes(b64, strlen(b64), &sig) < 0 || sig.len == 0)
		goto out;
	ctx = EVP_MD_CTX_new();
	if (EVP_DigestVerifyInit(ctx, NULL, EVP_sha256(), NULL, k->pk) != 1) {
		rc = ossl_err(err, "verify");
		goto out;
	}
	/* 1 valid; 0 or a decoding failure of the DER: not valid */
	rc = EVP_DigestVerify(ctx, (unsigned char *)sig.buf, sig.len, data, len) == 1;
	ERR_clear_error();
out:
	EVP_MD_CTX_free(ctx);
	kiln_buf_free(&sig);
	return rc;
}
