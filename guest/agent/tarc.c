/* tarc.c — `kiln-agent --tar-create DIR [NAME]`: DOWNLOAD's tar, GNU format as
 * tar -c writes it, in 1 MiB writes: busybox tar's write per header wakes the
 * agent each time, and under TCG such a switch costs (20,000 files: 23 s). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "guest/agent/agent.h"

#define OUT_CAP (1u << 20)

static uint8_t *out;
static size_t out_len;
static int failed;

/* hard links: the first name of each (dev, ino) with more than one */
struct link_slot {
	dev_t dev;
	ino_t ino;
	char *name;
};
static struct link_slot *links;
static size_t links_cap, links_n;

static void die_errno(const char *what, const char *path)
{
	fprintf(stderr, "%s %s: %s\n", what, path, strerror(errno));
	failed = 1;
}

static int flush_out(void)
{
	size_t off = 0;

	while (off < out_len) {
		ssize_t n = write(1, out + off, out_len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "write the tar stream: %s\n", strerror(errno));
			failed = 1;
			return -1;
		}
		off += (size_t)n;
	}
	out_len = 0;
	return 0;
}

/* n bytes of room in the buffer, zeroed */
static uint8_t *room(size_t n)
{
	if (out_len + n > OUT_CAP && flush_out() < 0)
		return NULL;
	uint8_t *p = out + out_len;
	memset(p, 0, n);
	out_len += n;
	return p;
}

/* An unsigned or negative number in a field of w bytes: octal with a NUL
 * when it fits, else base-256 (GNU), two's complement for negatives. */
static void put_num(uint8_t *f, size_t w, int64_t v)
{
	if (v >= 0 && (uint64_t)v < (1ull << (3 * (w - 1)))) {
		snprintf((char *)f, w, "%0*llo", (int)(w - 1), (unsigned long long)v);
		return;
	}
	uint64_t u = (uint64_t)v;
	for (size_t i = w; i-- > 1;) {
		f[i] = (uint8_t)(u & 0xff);
		u = v < 0 ? (u >> 8) | (0xffull << 56) : u >> 8;
	}
	f[0] = v < 0 ? 0xff : 0x80;
}

static void checksum(uint8_t *h)
{
	unsigned sum = 0;

	memset(h + 148, ' ', 8);
	for (size_t i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 7, "%06o", sum);
	h[154] = '\0';
	h[155] = ' ';
}

static uint8_t *header(const char *name, size_t len, char type, const struct stat *st, int64_t size)
{
	uint8_t *h = room(512);

	if (h == NULL)
		return NULL;
	memcpy(h, name, len < 100 ? len : 100);
	put_num(h + 100, 8, st ? (int64_t)(st->st_mode & 07777) : 0644);
	put_num(h + 108, 8, st ? (int64_t)st->st_uid : 0);
	put_num(h + 116, 8, st ? (int64_t)st->st_gid : 0);
	put_num(h + 124, 12, size);
	put_num(h + 136, 12, st ? (int64_t)st->st_mtim.tv_sec : 0);
	h[156] = (uint8_t)type;
	memcpy(h + 257, "ustar  ", 8); /* GNU magic and version */
	if (st && (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode))) {
		put_num(h + 329, 8, (int64_t)major(st->st_rdev));
		put_num(h + 337, 8, (int64_t)minor(st->st_rdev));
	}
	return h;
}

/* A name that does not fit its 100-byte field goes first as a record of its own. */
static int long_name(char type, const char *name, size_t len)
{
	uint8_t *h;

	if (len <= 100)
		return 0;
	if ((h = header("././@LongLink", 13, type, NULL, (int64_t)len + 1)) == NULL)
		return -1;
	checksum(h);
	for (size_t off = 0; off < len + 1; off += 512) {
		size_t take = len + 1 - off < 512 ? len + 1 - off : 512;
		uint8_t *b = room(512);
		if (b == NULL)
			return -1;
		memcpy(b, name + off, off + take > len ? len - off : take);
	}
	return 0;
}

static const char *first_link(const struct stat *st, const char *name)
{
	if (links_n + 1 > links_cap / 2) {
		size_t cap = links_cap ? 2 * links_cap : 1024;
		struct link_slot *v = calloc(cap, sizeof(*v));
		if (v == NULL)
			return NULL;
		for (size_t i = 0; i < links_cap; i++) {
			if (links[i].name == NULL)
				continue;
			size_t k = ((size_t)links[i].ino * 31 + (size_t)links[i].dev) & (cap - 1);
			while (v[k].name)
				k = (k + 1) & (cap - 1);
			v[k] = links[i];
		}
		free(links);
		links = v;
		links_cap = cap;
	}
	size_t k = ((size_t)st->st_ino * 31 + (size_t)st->st_dev) & (links_cap - 1);
	for (; links[k].name; k = (k + 1) & (links_cap - 1))
		if (links[k].dev == st->st_dev && links[k].ino == st->st_ino)
			return links[k].name;
	links[k] = (struct link_slot){ st->st_dev, st->st_ino, strdup(name) };
	links_n++;
	return NULL;
}

static int file_data(const char *path, int64_t size)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
	int64_t left = size;

	if (fd < 0 && errno == EPERM)
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		die_errno("open", path);
		return -1;
	}
	while (left > 0) {
		if (out_len == OUT_CAP && flush_out() < 0)
			break;
		size_t want = OUT_CAP - out_len;
		if ((int64_t)want > left)
			want = (size_t)left;
		ssize_t n = read(fd, out + out_len, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* the size in the header is a promise: a shorter file breaks the stream */
			if (n < 0)
				die_errno("read", path);
			else {
				fprintf(stderr, "%s: file shrank while it was read\n", path);
				failed = 1;
			}
			break;
		}
		out_len += (size_t)n;
		left -= n;
	}
	close(fd);
	if (failed)
		return -1;
	size_t pad = (size_t)(-size & 511);
	return pad && room(pad) == NULL ? -1 : 0;
}

static int one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	char name[PATH_MAX + 2], target[PATH_MAX];
	size_t len = strlen(path);
	const char *hl = NULL;
	char type;
	int64_t size = 0;
	uint8_t *h;

	(void)ftw;
	if (flag == FTW_NS || flag == FTW_DNR) {
		errno = flag == FTW_NS ? errno : EACCES;
		die_errno(flag == FTW_NS ? "stat" : "read the directory", path);
		return 1;
	}
	if (len + 2 > sizeof(name)) {
		fprintf(stderr, "%s: name too long\n", path);
		failed = 1;
		return 1;
	}
	memcpy(name, path, len + 1);
	target[0] = '\0';
	if (S_ISDIR(st->st_mode)) {
		type = '5';
		if (name[len - 1] != '/') {
			name[len++] = '/';
			name[len] = '\0';
		}
	} else if (S_ISSOCK(st->st_mode)) {
		return 0; /* as tar: sockets are not archived */
	} else if (S_ISREG(st->st_mode) && st->st_nlink > 1 && (hl = first_link(st, path)) != NULL) {
		/* regular files only: overlayfs whiteouts share one inode, and each
		 * must stay a device of its own */
		type = '1';
		snprintf(target, sizeof(target), "%s", hl);
	} else if (S_ISREG(st->st_mode)) {
		type = '0';
		size = (int64_t)st->st_size;
	} else if (S_ISLNK(st->st_mode)) {
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (n < 0) {
			die_errno("readlink", path);
			return 1;
		}
		target[n] = '\0';
		type = '2';
	} else if (S_ISCHR(st->st_mode)) {
		type = '3';
	} else if (S_ISBLK(st->st_mode)) {
		type = '4';
	} else if (S_ISFIFO(st->st_mode)) {
		type = '6';
	} else {
		return 0;
	}
	if (long_name('K', target, strlen(target)) < 0 || long_name('L', name, len) < 0)
		return 1;
	if ((h = header(name, len, type, st, size)) == NULL)
		return 1;
	memcpy(h + 157, target, strnlen(target, 100));
	checksum(h);
	if (size > 0 && file_data(path, size) < 0)
		return 1;
	return failed;
}

int tar_create(const char *dir, const char *name)
{
	int rc;

	if (chdir(dir) < 0) {
		die_errno("chdir", dir);
		return 1;
	}
	if ((out = malloc(OUT_CAP)) == NULL) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
#ifdef F_SETPIPE_SZ
	fcntl(1, F_SETPIPE_SZ, OUT_CAP); /* fewer wake-ups of the reader; may be refused */
#endif
	rc = nftw(name ? name : ".", one, 64, FTW_PHYS);
	if (rc == 0 && !failed && room(1024) != NULL)
		flush_out();
	else if (rc < 0 && !failed)
		die_errno("walk", name ? name : dir);
	free(out);
	for (size_t i = 0; i < links_cap; i++)
		free(links[i].name);
	free(links);
	return failed || rc != 0 ? 1 : 0;
}
