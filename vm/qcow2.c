/* qcow2.c — reading a qcow2 header before QEMU does: a disk from the store
 * must not name a host file, neither as its backing file (only the expected
 * relative name is allowed) nor as an external data file (refused).  The
 * header layout is QEMU's docs/interop/qcow2.txt (big-endian fields). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vm/internal.h"

#define QCOW2_MAGIC 0x514649fbu /* "QFI\xfb" */
#define EXT_DATA_FILE 0x44415441u
#define INCOMPAT_DATA_FILE (1ull << 2)

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const unsigned char *p)
{
	return (uint64_t)be32(p) << 32 | be32(p + 4);
}

int vm_qcow2_check(const char *path, const char *want_backing, kiln_error **err)
{
	unsigned char h[4096];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), rc = -1;
	ssize_t n;

	if (fd < 0)
		return kiln_err_errno(err, errno, "disk %s", path);
	n = pread(fd, h, sizeof(h), 0);
	if (n < 104 || be32(h) != QCOW2_MAGIC || be32(h + 4) < 2 || be32(h + 4) > 3) {
		kiln_err(err, KILN_E_INVALID, "disk %s is not a qcow2 image (version 2 or 3)", path);
		goto out;
	}
	uint64_t boff = be64(h + 8);
	uint32_t blen = be32(h + 16);
	if (boff || blen) {
		char name[1024];
		if (blen == 0 || blen >= sizeof(name) || boff > 65536 ||
		    pread(fd, name, blen, (off_t)boff) != (ssize_t)blen) {
			kiln_err(err, KILN_E_INVALID, "disk %s: unreadable backing file name", path);
			goto out;
		}
		name[blen] = '\0';
		if (!want_backing || strcmp(name, want_backing) != 0 || strchr(name, '/')) {
			kiln_err(err, KILN_E_INVALID,
				 "disk %s names the backing file '%s' (only '%s' beside it is allowed): refused, it "
				 "could point at a host file", path, name, want_backing ? want_backing : "none");
			goto out;
		}
	}
	if (be32(h + 4) == 3) {
		uint64_t incompat = be64(h + 72);
		uint32_t hlen = be32(h + 100);
		if (incompat & INCOMPAT_DATA_FILE) {
			kiln_err(err, KILN_E_INVALID, "disk %s uses an external data file: refused", path);
			goto out;
		}
		/* header extensions: none may name a data file */
		for (size_t off = hlen; off + 8 <= (size_t)n && off < sizeof(h);) {
			uint32_t type = be32(h + off), len = be32(h + off + 4);
			if (type == 0)
				break;
			if (type == EXT_DATA_FILE) {
				kiln_err(err, KILN_E_INVALID, "disk %s names an external data file: refused", path);
				goto out;
			}
			off += 8 + (((size_t)len + 7) & ~(size_t)7);
		}
	}
	rc = 0;
out:
	close(fd);
	return rc;
}
