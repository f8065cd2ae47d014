/* e2b_files.c — the files of E2B's COPY steps: the SDK asks for an upload
 * link per files hash and PUTs a tar.gz there.  kiln serves the link itself,
 * signed (HMAC-SHA256 under DATA/e2b/key: team, template, hash, expiry), since
 * the SDK sends no API key with the upload.  The body is spooled, checked as a
 * tar a context may hold (relative names, no "..", nothing through a symlink,
 * files, directories and links only, bounded), then stored in the team's
 * content store of the build service under its sha256. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "service/e2b.h"

int e2b_key_load(const char *path, unsigned char key[32], kiln_error **err)
{
	kiln_error *rerr = NULL;
	char *data = NULL;
	size_t len = 0;
	int rc;

	if (kiln_read_file(path, &data, &len, 64, &rerr) == 0 && len == 32) {
		memcpy(key, data, 32);
		free(data);
		return 0;
	}
	kiln_error_free(rerr);
	free(data);
	if (getentropy(key, 32) < 0)
		return kiln_err_errno(err, errno, "e2b upload key");
	rc = kiln_write_atomic(path, key, 32, 0600, err);
	return rc < 0 ? kiln_error_wrap(err, "e2b upload key %s", path) : 0;
}

static void sign(const unsigned char key[32], const char *team, const char *tid, const char *hash, long long exp,
		 char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	char *msg = kiln_xasprintf("kiln-e2b-upload/1\n%s\n%s\n%s\n%lld", team, tid, hash, exp);

	HMAC(EVP_sha256(), key, 32, (const unsigned char *)msg, strlen(msg), md, &mdlen);
	for (unsigned i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	free(msg);
}

char *e2b_upload_query(const unsigned char key[32], const char *team, const char *tid, const char *hash,
		       int64_t ttl_s)
{
	long long exp = (long long)time(NULL) + ttl_s;
	char sig[65];

	sign(key, team, tid, hash, exp, sig);
	return kiln_xasprintf("team=%s&expires=%lld&signature=%s", team, exp, sig);
}

int e2b_upload_check(const unsigned char key[32], const char *team, const char *tid, const char *hash,
		     const char *expires, const char *sig, kiln_error **err)
{
	char want[65], *end = NULL;
	long long exp;

	if (!team || !expires || !sig || !*expires)
		return kiln_err(err, KILN_E_INVALID, "upload link: team, expires and signature are needed");
	exp = strtoll(expires, &end, 10);
	if (*end != '\0')
		return kiln_err(err, KILN_E_INVALID, "upload link: bad expires");
	sign(key, team, tid, hash, exp, want);
	if (strlen(sig) != 64 || CRYPTO_memcmp(want, sig, 64) != 0)
		return kiln_err(err, KILN_E_INVALID, "upload link: bad signature");
	if (exp < (long long)time(NULL))
		return kiln_err(err, KILN_E_INVALID, "upload link: expired (ask for a new one)");
	return 0;
}

/* ---- the spooled body ---- */

struct e2b_spool {
	int fd;
	char *path;
	kiln_hasher *h;
	uint64_t size, max;
};

int e2b_spool_open(const char *dir, uint64_t max, struct e2b_spool **out, kiln_error **err)
{
	struct e2b_spool *sp = kiln_xcalloc(1, sizeof(*sp));

	sp->path = kiln_xasprintf("%s/upload-XXXXXX", dir);
	sp->fd = mkstemp(sp->path);
	if (sp->fd < 0) {
		kiln_err_errno(err, errno, "upload spool in %s", dir);
		free(sp->path);
		free(sp);
		return -1;
	}
	sp->h = kiln_hasher_new(KILN_SHA256);
	sp->max = max;
	*out = sp;
	return 0;
}

int e2b_spool_write(struct e2b_spool *sp, const void *data, size_t len, kiln_error **err)
{
	if (sp->size + len > sp->max)
		return kiln_err(err, KILN_E_LIMIT, "upload larger than %llu bytes", (unsigned long long)sp->max);
	if (kiln_write_full(sp->fd, data, len) < 0)
		return kiln_err_errno(err, errno, "upload spool");
	kiln_hasher_update(sp->h, data, len);
	sp->size += len;
	return 0;
}

void e2b_spool_free(struct e2b_spool *sp)
{
	if (sp == NULL)
		return;
	if (sp->fd >= 0)
		close(sp->fd);
	unlink(sp->path);
	free(sp->path);
	kiln_hasher_free(sp->h);
	free(sp);
}

/* A name no extraction may take out of its directory. */
static bool name_ok(const char *n)
{
	if (*n == '\0' || *n == '/')
		return false;
	for (const char *p = n; *p;) {
		size_t l = strcspn(p, "/");
		if (l == 2 && p[0] == '.' && p[1] == '.')
			return false;
		p += l;
		while (*p == '/')
			p++;
	}
	return true;
}

/* Trailing slashes and "./" components off, for the symlink set. */
static char *norm(const char *n)
{
	kiln_buf b = KILN_BUF_INIT;

	for (const char *p = n; *p;) {
		size_t l = strcspn(p, "/");
		if (l && !(l == 1 && p[0] == '.')) {
			if (b.len)
				kiln_buf_addc(&b, '/');
			kiln_buf_add(&b, p, l);
		}
		p += l;
		while (*p == '/')
			p++;
	}
	return kiln_buf_detach(&b);
}

/* Does a parent of n (normalised) name a symlink of the archive? */
static bool under_link(json_t *links, const char *n)
{
	char *c = kiln_xstrdup(n);
	bool hit = false;

	for (char *s = strrchr(c, '/'); s && !hit; s = strrchr(c, '/')) {
		*s = '\0';
		hit = json_object_get(links, c) != NULL;
	}
	free(c);
	return hit;
}

/* Read the spooled tar (plain or compressed) through: what a context may hold. */
static int check_tar(const char *path, uint64_t max_bytes, uint64_t *files, kiln_error **err)
{
	struct archive *a = kiln_tar_reader_new();
	struct archive_entry *e;
	json_t *links = json_object();
	uint64_t total = 0, entries = 0;
	int r, rc = -1;

	if (archive_read_open_filename(a, path, 64 << 10) != ARCHIVE_OK) {
		kiln_err(err, KILN_E_INVALID, "not a tar archive: %s", archive_error_string(a));
		goto out;
	}
	while ((r = kiln_tar_next(a, &e)) == ARCHIVE_OK) {
		const char *n = archive_entry_pathname(e), *hl = archive_entry_hardlink(e);
		mode_t t = archive_entry_filetype(e);
		char *nn;

		if (++entries > E2B_MAX_ENTRIES) {
			kiln_err(err, KILN_E_LIMIT, "more than %d entries", E2B_MAX_ENTRIES);
			goto out;
		}
		if (n == NULL || !name_ok(n) || (hl && !name_ok(hl))) {
			kiln_err(err, KILN_E_INVALID, "entry \"%.200s\": absolute, empty or with \"..\"", n ? n : "");
			goto out;
		}
		if (!hl && t != AE_IFREG && t != AE_IFDIR && t != AE_IFLNK) {
			kiln_err(err, KILN_E_INVALID, "entry \"%.200s\": only files, directories and links", n);
			goto out;
		}
		nn = norm(n);
		if (hl) {
			/* a hard link's target through a symlink is as bad */
			char *ht = norm(hl), *probe = kiln_xasprintf("%s/x", ht);
			bool bad = under_link(links, probe);
			free(ht);
			free(probe);
			if (bad) {
				kiln_err(err, KILN_E_INVALID, "entry \"%.200s\": a hard link through a symlink", n);
				free(nn);
				goto out;
			}
		}
		if (*nn && under_link(links, nn)) {
			kiln_err(err, KILN_E_INVALID, "entry \"%.200s\": below a symlink of the archive", n);
			free(nn);
			goto out;
		}
		if (t == AE_IFLNK && *nn)
			json_object_set_new(links, nn, json_true());
		free(nn);
		if (archive_entry_size_is_set(e) && t == AE_IFREG) {
			total += (uint64_t)archive_entry_size(e);
			if (total > max_bytes) {
				kiln_err(err, KILN_E_LIMIT, "more than %llu bytes of files (the build context's limit)",
					 (unsigned long long)max_bytes);
				goto out;
			}
		}
		if (archive_read_data_skip(a) != ARCHIVE_OK) {
			kiln_err(err, KILN_E_INVALID, "entry \"%.200s\": %s", n, archive_error_string(a));
			goto out;
		}
	}
	if (r != ARCHIVE_EOF) {
		kiln_err(err, KILN_E_INVALID, "%s", archive_error_string(a));
		goto out;
	}
	*files = total;
	rc = 0;
out:
	json_decref(links);
	archive_read_free(a);
	return rc;
}

int e2b_spool_finish(struct e2b_spool *sp, uint64_t max_files, char digest[KILN_DIGEST_MAX], uint64_t *files,
		     kiln_error **err)
{
	kiln_hasher_final(sp->h, digest);
	sp->h = NULL;
	if (fsync(sp->fd) < 0)
		return kiln_err_errno(err, errno, "upload spool");
	*files = 0;
	if (check_tar(sp->path, max_files, files, err) < 0)
		return kiln_error_wrap(err, "the uploaded files");
	return 0;
}

/* Feed the spooled bytes to fn (the service's blob writer). */
int e2b_spool_replay(struct e2b_spool *sp, int (*fn)(void *ud, const void *data, size_t len, kiln_error **err),
		     void *ud, kiln_error **err)
{
	char buf[64 << 10];
	off_t off = 0;

	for (;;) {
		ssize_t n = kiln_pread_full(sp->fd, buf, sizeof(buf), off);
		if (n < 0)
			return kiln_err_errno(err, errno, "upload spool");
		if (n == 0)
			return 0;
		if (fn(ud, buf, (size_t)n, err) < 0)
			return -1;
		off += n;
	}
}

uint64_t e2b_spool_size(const struct e2b_spool *sp)
{
	return sp->size;
}
