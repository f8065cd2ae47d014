/* test_layer_meta.c — the metadata real packages carry through a layer the
 * builder writes (RUN capture, COPY) and the rootfs merge reads: file
 * capabilities, user.* and POSIX ACL xattrs as SCHILY.xattr records (as
 * buildah writes them, no LIBARCHIVE.xattr duplicates), setuid/setgid bits,
 * hard links, fifos and device numbers. */
#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "builder/builder.h"
#include "rootfs/rootfs.h"
#include "test.h"

/* cap_net_raw=ep as setcap writes it (VFS_CAP_REVISION_2) */
static const char cap[] = "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";
/* user::rw- group::r-- other::r-- user 1000 rwx, as the kernel's xattr form */
static const char acl[] = "\x02\x00\x00\x00"
			  "\x01\x00\x06\x00\xff\xff\xff\xff"
			  "\x02\x00\x07\x00\xe8\x03\x00\x00"
			  "\x04\x00\x04\x00\xff\xff\xff\xff"
			  "\x10\x00\x07\x00\xff\xff\xff\xff"
			  "\x20\x00\x04\x00\xff\xff\xff\xff";

static bool contains(const char *data, size_t len, const char *needle)
{
	size_t n = strlen(needle);
	for (size_t i = 0; i + n <= len; i++)
		if (memcmp(data + i, needle, n) == 0)
			return true;
	return false;
}

static void test_meta_through_a_layer(void)
{
	char home[] = "/tmp/kiln-meta-XXXXXX";
	build_store *s = NULL;
	kiln_error *err = NULL;
	struct build_changes ch = { 0 };
	struct build_layer l;
	char *src = NULL, *blob = NULL, *data = NULL;
	size_t len = 0;
	kiln_buf list = KILN_BUF_INIT;
	rootfs_tree *rt = rootfs_tree_new(NULL);

	CHECK(mkdtemp(home) != NULL);
	src = kiln_path_join(home, "content");
	CHECK(kiln_write_atomic(src, "ping", 4, 0755, &err) == 0);
	ch.v = kiln_xcalloc(8, sizeof(*ch.v));
	ch.cap = 8;
	ch.v[ch.n++] = (struct build_item){ .dest = kiln_xstrdup("bin"), .mode = S_IFDIR | 0755 };
	struct build_item *ping = &ch.v[ch.n++];
	*ping = (struct build_item){ .dest = kiln_xstrdup("bin/ping"), .src = kiln_xstrdup(src), .mode = S_IFREG | 04755,
				     .size = 4 };
	build_item_add_xattr(ping, "security.capability", cap, sizeof(cap) - 1);
	build_item_add_xattr(ping, "user.origin", "iputils", 7);
	build_item_add_xattr(ping, "system.posix_acl_access", acl, sizeof(acl) - 1);
	ch.v[ch.n++] = (struct build_item){ .dest = kiln_xstrdup("bin/ping6"), .mode = S_IFREG | 04755,
					    .hardlink = kiln_xstrdup("bin/ping") };
	ch.v[ch.n++] = (struct build_item){ .dest = kiln_xstrdup("srv"), .mode = S_IFDIR | 02775, .gid = 50 };
	ch.v[ch.n++] = (struct build_item){ .dest = kiln_xstrdup("srv/fifo"), .mode = S_IFIFO | 0600 };
	ch.v[ch.n++] = (struct build_item){ .dest = kiln_xstrdup("srv/null"), .mode = S_IFCHR | 0666,
					    .rdev = makedev(1, 3) };
	build_changes_finish(&ch);
	if (build_store_open(home, &s, &err) < 0 || build_layer_write(s, &ch, BUILD_NONE, 0, &l, &err) < 0) {
		printf("#   %s\n", kiln_error_message(err));
		CHECK(!"layer written");
		goto out;
	}
	blob = build_store_blob_path(s, l.digest);
	CHECK(kiln_read_file(blob, &data, &len, 0, &err) == 0);
	CHECK(contains(data, len, "SCHILY.xattr.security.capability="));
	CHECK(contains(data, len, "SCHILY.xattr.user.origin=iputils"));
	CHECK(contains(data, len, "SCHILY.xattr.system.posix_acl_access="));
	CHECK(!contains(data, len, "LIBARCHIVE.xattr"));
	/* read back as a tar */
	struct archive *a = kiln_tar_reader_new();
	struct archive_entry *e;
	int seen = 0;
	CHECK(archive_read_open_memory(a, data, len) == ARCHIVE_OK);
	while (kiln_tar_next(a, &e) == ARCHIVE_OK) {
		const char *p = archive_entry_pathname(e);
		if (strcmp(p, "bin/ping") == 0) {
			const char *n;
			const void *v;
			size_t vl;
			int caps = 0;
			CHECK_INT(archive_entry_perm(e), 04755);
			CHECK_INT(archive_entry_xattr_reset(e), 3);
			while (archive_entry_xattr_next(e, &n, &v, &vl) == ARCHIVE_OK)
				if (strcmp(n, "security.capability") == 0)
					caps += vl == sizeof(cap) - 1 && memcmp(v, cap, vl) == 0;
			CHECK_INT(caps, 1);
			seen++;
		} else if (strcmp(p, "bin/ping6") == 0) {
			CHECK_STR(archive_entry_hardlink(e), "bin/ping");
			seen++;
		} else if (strcmp(p, "srv/null") == 0) {
			CHECK_INT(archive_entry_filetype(e), AE_IFCHR);
			CHECK_INT(archive_entry_rdevmajor(e), 1);
			CHECK_INT(archive_entry_rdevminor(e), 3);
			seen++;
		} else if (strcmp(p, "srv/fifo") == 0) {
			CHECK_INT(archive_entry_filetype(e), AE_IFIFO);
			seen++;
		}
	}
	archive_read_free(a);
	CHECK_INT(seen, 4);
	/* and merged by rootfs (what goes into ext4) */
	CHECK(rootfs_tree_apply_buffer(rt, 0, data, len, "layer", &err) == 0);
	rootfs_tree_list(rt, &list);
	CHECK(list.buf && strstr(list.buf, "bin/ping f 4755 0 0 4 2 xattr=") != NULL);
	CHECK(list.buf && strstr(list.buf, "xattr=security.capability") != NULL);
	CHECK(list.buf && strstr(list.buf, "xattr=system.posix_acl_access") != NULL);
	CHECK(list.buf && strstr(list.buf, "srv d 2775 0 50") != NULL);
	CHECK(list.buf && strstr(list.buf, "srv/fifo p 0600") != NULL);
	CHECK(list.buf && strstr(list.buf, "srv/null c 0666 0 0 0 1 1,3") != NULL);
	if (test_checks_failed)
		printf("%s", list.buf ? list.buf : "");
out:
	kiln_error_free(err);
	kiln_buf_free(&list);
	rootfs_tree_free(rt);
	build_changes_free(&ch);
	build_store_close(s);
	free(blob);
	free(data);
	free(src);
	kiln_rm_rf(home, NULL);
}

int main(void)
{
	RUN(test_meta_through_a_layer);
	return test_done();
}
