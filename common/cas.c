/* cas.c — the one content-addressed store: blobs named by their digest under
 * ROOT/ALGO/[XX/]HEX, written through a temp file on the same filesystem and
 * made visible by a rename only once whole and verified, with the durability a
 * store declares (fsync'd file and directory, or a cache whose reads verify). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln.h"

struct kiln_cas {
	char *root;
	char *tmp;
	struct kiln_cas_layout lay;
};

struct kiln_cas_writer {
	kiln_cas *cas;
	char *tmp;
	int fd;
	kiln_hasher *h;
	int64_t size;          /* bytes taken in, blk included */
	bool sparse;
	size_t blk_len;        /* sparse: the bytes of the block being filled */
	unsigned char blk[4096];
};

int kiln_cas_open(const char *root, const struct kiln_cas_layout *lay, kiln_cas **out, kiln_error **err)
{
	kiln_cas *c = kiln_xcalloc(1, sizeof(*c));

	c->root = kiln_xstrdup(root);
	c->lay = *lay;
	c->lay.tmp = NULL;
	c->tmp = lay->tmp ? kiln_xstrdup(lay->tmp) : kiln_path_join(root, "tmp");
	if (c->lay.mode == 0)
		c->lay.mode = 0644;
	if (kiln_mkdir_p(c->root, 0755, err) < 0 || kiln_mkdir_p(c->tmp, 0755, err) < 0) {
		kiln_cas_close(c);
		return kiln_error_wrap(err, "content store %s", root);
	}
	*out = c;
	return 0;
}

void kiln_cas_close(kiln_cas *c)
{
	if (!c)
		return;
	free(c->root);
	free(c->tmp);
	free(c);
}

const char *kiln_cas_root(const kiln_cas *c)
{
	return c->root;
}

char *kiln_cas_path(const kiln_cas *c, const char *digest)
{
	const char *colon = strchr(digest, ':');

	/* Callers validate digests first; a malformed one still names nothing
	 * outside the store. */
	if (!colon || strchr(colon + 1, '/') || colon == digest || memchr(digest, '/', (size_t)(colon - digest)) ||
	    strlen(colon + 1) < 2 || colon[1] == '.')
		return kiln_xasprintf("%s/invalid", c->root);
	if (c->lay.fanout)
		return kiln_xasprintf("%s/%.*s/%.2s/%s", c->root, (int)(colon - digest), digest, colon + 1, colon + 1);
	return kiln_xasprintf("%s/%.*s/%s", c->root, (int)(colon - digest), digest, colon + 1);
}

bool kiln_cas_has(const kiln_cas *c, const char *digest)
{
	char *p = kiln_cas_path(c, digest);
	bool yes = access(p, F_OK) == 0;

	free(p);
	return yes;
}

int kiln_cas_begin(kiln_cas *c, enum kiln_digest_algo algo, bool sparse, kiln_cas_writer **out, kiln_error **err)
{
	kiln_cas_writer *w = kiln_xcalloc(1, sizeof(*w));

	w->cas = c;
	w->sparse = sparse;
	w->tmp = kiln_xasprintf("%s/%ld-XXXXXX", c->tmp, (long)getpid());
	w->fd = mkostemp(w->tmp, O_CLOEXEC);
	if (w->fd < 0) {
		int e = errno;
		free(w->tmp);
		free(w);
		return kiln_err_errno(err, e, "content store: temp file in %s", c->tmp);
	}
	w->h = kiln_hasher_new(algo);
	*out = w;
	return 0;
}

const char *kiln_cas_writer_path(const kiln_cas_writer *w)
{
	return w->tmp;
}

static bool all_zero(const unsigned char *p, size_t n)
{
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Sparse: one 4 KiB block at the given file offset; an all-zero whole block
 * stays a hole (the commit's ftruncate sets the length). */
static int put_block(kiln_cas_writer *w, const unsigned char *p, size_t n, int64_t at, kiln_error **err)
{
	if (n == sizeof(w->blk) && all_zero(p, n))
		return 0;
	if (kiln_pwrite_full(w->fd, p, n, (off_t)at) < 0)
		return kiln_err_errno(err, errno, "content store: write %s", w->tmp);
	return 0;
}

int kiln_cas_write(kiln_cas_writer *w, const void *data, size_t len, kiln_error **err)
{
	enum { BLK = sizeof(w->blk) };
	const unsigned char *p = data;

	kiln_hasher_update(w->h, data, len);
	if (!w->sparse) {
		if (kiln_write_full(w->fd, data, len) < 0)
			return kiln_err_errno(err, errno, "content store: write %s", w->tmp);
		w->size += (int64_t)len;
		return 0;
	}
	/* Blocks are judged whole, however the caller slices the stream, so a
	 * memory image takes the space of its written pages only. */
	while (len > 0) {
		if (w->blk_len > 0 || len < BLK) {
			size_t n = BLK - w->blk_len < len ? BLK - w->blk_len : len;
			memcpy(w->blk + w->blk_len, p, n);
			w->blk_len += n;
			p += n;
			len -= n;
			w->size += (int64_t)n;
			if (w->blk_len == BLK) {
				if (put_block(w, w->blk, BLK, w->size - BLK, err) < 0)
					return -1;
				w->blk_len = 0;
			}
			continue;
		}
		if (put_block(w, p, BLK, w->size, err) < 0)
			return -1;
		p += BLK;
		len -= BLK;
		w->size += BLK;
	}
	return 0;
}

void kiln_cas_abort(kiln_cas_writer *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp)
		unlink(w->tmp);
	if (w->h)
		kiln_hasher_free(w->h);
	free(w->tmp);
	free(w);
}

/* The rename is the commit point; under SYNC_FULL the bytes and then the new
 * name reach the disk before the blob is reported stored.  -2: src is on
 * another filesystem (only when !fail_exdev; err untouched). */
static int place(kiln_cas *c, int fd, const char *src, const char *digest, bool fail_exdev, bool sync,
		 kiln_error **err)
{
	char *dst = kiln_cas_path(c, digest), *dir = NULL;
	int rc = -1;

	sync = sync && c->lay.sync == KILN_CAS_SYNC_FULL;
	if (sync && fsync(fd) < 0) {
		kiln_err_errno(err, errno, "content store: sync %s", src);
		goto out;
	}
	if (fchmod(fd, c->lay.mode) < 0) {
		kiln_err_errno(err, errno, "content store: chmod %s", src);
		goto out;
	}
	dir = kiln_xstrndup(dst, (size_t)(strrchr(dst, '/') - dst));
	if (kiln_mkdir_p(dir, 0755, err) < 0)
		goto out;
	if (rename(src, dst) < 0) {
		if (errno == EXDEV && !fail_exdev) {
			rc = -2; /* the caller copies instead */
			goto out;
		}
		kiln_err_errno(err, errno, "content store: rename into %s", dst);
		goto out;
	}
	if (sync && kiln_fsync_parent(dst, err) < 0)
		goto out;
	rc = 0;
out:
	free(dir);
	free(dst);
	return rc;
}

int kiln_cas_commit(kiln_cas_writer *w, const char *expect, char digest[KILN_DIGEST_MAX], int64_t *size,
		    kiln_error **err)
{
	char got[KILN_DIGEST_MAX];
	int rc = -1;

	kiln_hasher_final(w->h, got);
	w->h = NULL;
	if (expect && strcmp(expect, got) != 0) {
		kiln_err(err, KILN_E_INVALID, "blob digest mismatch: got %s, want %s", got, expect);
		goto out;
	}
	if (w->sparse && w->blk_len > 0 && put_block(w, w->blk, w->blk_len, w->size - (int64_t)w->blk_len, err) < 0)
		goto out;
	if (w->sparse && ftruncate(w->fd, (off_t)w->size) < 0) {
		kiln_err_errno(err, errno, "content store: truncate %s", w->tmp);
		goto out;
	}
	if (kiln_cas_has(w->cas, got)) {
		rc = 0; /* the same digest is the same content: keep the stored one */
		goto done;
	}
	if (place(w->cas, w->fd, w->tmp, got, true, true, err) < 0)
		goto out;
	free(w->tmp);
	w->tmp = NULL;
done:
	if (digest)
		memcpy(digest, got, KILN_DIGEST_MAX);
	if (size)
		*size = w->size;
	rc = 0;
out:
	kiln_cas_abort(w);
	return rc;
}

int kiln_cas_put(kiln_cas *c, const void *data, size_t len, char digest[KILN_DIGEST_MAX], kiln_error **err)
{
	kiln_digest_buf(KILN_SHA256, data, len, digest);
	return kiln_cas_put_as(c, digest, data, len, err);
}

int kiln_cas_put_as(kiln_cas *c, const char *digest, const void *data, size_t len, kiln_error **err)
{
	enum kiln_digest_algo algo;
	kiln_cas_writer *w;

	if (kiln_digest_parse(digest, &algo, err) < 0)
		return -1;
	if (kiln_cas_has(c, digest))
		return 0;
	if (kiln_cas_begin(c, algo, false, &w, err) < 0)
		return -1;
	if (kiln_cas_write(w, data, len, err) < 0) {
		kiln_cas_abort(w);
		return -1;
	}
	return kiln_cas_commit(w, digest, NULL, NULL, err);
}

int kiln_cas_read(const kiln_cas *c, const char *digest, size_t max, char **data, size_t *len, kiln_error **err)
{
	enum kiln_digest_algo algo;
	char got[KILN_DIGEST_MAX], *p = NULL;
	int rc = -1;

	*data = NULL;
	if (kiln_digest_parse(digest, &algo, err) < 0)
		return -1;
	p = kiln_cas_path(c, digest);
	if (kiln_read_file(p, data, len, max, err) < 0) {
		kiln_error_wrap(err, "content store: blob %s", digest);
		goto out;
	}
	kiln_digest_buf(algo, *data, *len, got);
	if (strcmp(got, digest) != 0) {
		/* A cache drops a torn blob so the next fetch replaces it; a durable
		 * store keeps the evidence. */
		if (c->lay.sync == KILN_CAS_SYNC_NONE)
			unlink(p);
		kiln_err(err, KILN_E_INVALID, "stored blob %s is corrupted (its bytes hash to %s)%s", p, got,
			 c->lay.sync == KILN_CAS_SYNC_NONE ? "; removed it" : "");
		goto out;
	}
	rc = 0;
out:
	if (rc < 0) {
		free(*data);
		*data = NULL;
	}
	free(p);
	return rc;
}

/* Is digest stored?  If so, its mtime becomes now (one call for both; where
 * the time cannot be set, e.g. a read-only store, only whether it is there). */
static bool touch_stored(const kiln_cas *c, const char *digest)
{
	char *p = kiln_cas_path(c, digest);
	bool yes = utimensat(AT_FDCWD, p, NULL, 0) == 0 || (errno != ENOENT && access(p, F_OK) == 0);

	free(p);
	return yes;
}

int kiln_cas_adopt(kiln_cas *c, const char *path, const char *expect, unsigned flags, kiln_error **err)
{
	enum kiln_digest_algo algo;
	char got[KILN_DIGEST_MAX];
	int fd = -1, rc = -1;

	if (kiln_digest_parse(expect, &algo, err) < 0)
		goto out;
	if (touch_stored(c, expect)) {
		rc = 0;
		goto out;
	}
	if (flags & KILN_CAS_VERIFY) {
		if (kiln_digest_file(algo, path, got, err) < 0)
			goto out;
		if (strcmp(got, expect) != 0) {
			kiln_err(err, KILN_E_INVALID, "%s is corrupted: its bytes hash to %s, not %s", path, got, expect);
			goto out;
		}
	}
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		kiln_err_errno(err, errno, "content store: open %s", path);
		goto out;
	}
	rc = place(c, fd, path, expect, false, !(flags & KILN_CAS_DEFER_SYNC), err);
	if (rc == -2) /* another filesystem: a copy, which hashes what it stores */
		rc = kiln_cas_import(c, path, expect, flags & KILN_CAS_SPARSE, NULL, NULL, err);
out:
	unlink(path);
	if (fd >= 0)
		close(fd);
	return rc;
}

int kiln_cas_import(kiln_cas *c, const char *path, const char *expect, bool sparse, char digest[KILN_DIGEST_MAX],
		    int64_t *size, kiln_error **err)
{
	enum { BUF = 1 << 20 };
	enum kiln_digest_algo algo = KILN_SHA256;
	kiln_cas_writer *w = NULL;
	char *buf = NULL;
	int fd;

	if (expect && kiln_cas_has(c, expect)) {
		struct stat sb;
		char *have = kiln_cas_path(c, expect);
		int r = stat(have, &sb);
		free(have);
		if (r == 0) {
			if (digest)
				snprintf(digest, KILN_DIGEST_MAX, "%s", expect);
			if (size)
				*size = (int64_t)sb.st_size;
			return 0;
		}
	}
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return kiln_err_errno(err, errno, "open %s", path);
	if (expect && kiln_digest_parse(expect, &algo, err) < 0)
		goto fail;
	if (kiln_cas_begin(c, algo, sparse, &w, err) < 0)
		goto fail;
	buf = kiln_xmalloc(BUF);
	for (;;) {
		ssize_t n = kiln_read_full(fd, buf, BUF);
		if (n < 0) {
			kiln_err_errno(err, errno, "read %s", path);
			goto fail;
		}
		if (n == 0)
			break;
		if (kiln_cas_write(w, buf, (size_t)n, err) < 0)
			goto fail;
	}
	free(buf);
	close(fd);
	if (kiln_cas_commit(w, expect, digest, size, err) < 0)
		return kiln_error_wrap(err, "%s", path);
	return 0;
fail:
	free(buf);
	close(fd);
	kiln_cas_abort(w);
	return -1;
}

/* Open a directory of the walk: 1, or 0 when it is gone or is no directory
 * (a stray file at the XX level is no blob's), or -1. */
static int open_level(const char *dir, DIR **d, kiln_error **err)
{
	if ((*d = opendir(dir)) != NULL)
		return 1;
	if (errno == ENOENT || errno == ENOTDIR)
		return 0;
	return kiln_err_errno(err, errno, "content store: read %s", dir);
}

static bool hex_name(const char *name, size_t want)
{
	return strlen(name) == want && strspn(name, "0123456789abcdef") == want;
}

static int each_in(const char *sub, size_t hexlen, kiln_cas_each_fn fn, void *ctx, kiln_error **err)
{
	struct dirent *f;
	DIR *d;
	int rc = open_level(sub, &d, err);

	if (rc <= 0)
		return rc;
	rc = 0;
	while (rc == 0 && (f = readdir(d)) != NULL) {
		struct stat sb;
		if (!hex_name(f->d_name, hexlen))
			continue;
		char *p = kiln_path_join(sub, f->d_name);
		/* lstat: a blob is a file of its own; one gone meanwhile is no blob */
		if (lstat(p, &sb) == 0 && S_ISREG(sb.st_mode) && fn(p, f->d_name, &sb, ctx, err) < 0)
			rc = -1;
		free(p);
	}
	closedir(d);
	return rc;
}

int kiln_cas_each(const char *dir, enum kiln_digest_algo algo, kiln_cas_each_fn fn, void *ctx, kiln_error **err)
{
	const size_t hexlen = algo == KILN_SHA512 ? 128 : 64;
	struct dirent *de;
	DIR *d;
	int rc = open_level(dir, &d, err);

	if (rc <= 0)
		return rc;
	rc = 0;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char *sub = kiln_path_join(dir, de->d_name);
		rc = each_in(sub, hexlen, fn, ctx, err);
		free(sub);
	}
	closedir(d);
	return rc;
}
