/* test_rootfs_merge.c — layer merging on the in-memory tree: whiteouts,
 * opaque directories, hardlinks across layers, type replacement, and hostile
 * entries (.., absolute paths, symlink escapes, loops, limits).  Layers are
 * tars written here with libarchive. */
#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <string.h>

#include "rootfs/rootfs.h"
#include "test.h"

static char tarbuf[1 << 20];

struct ent {
	const char *path;
	char type; /* f d l h (hardlink) c p s */
	const char *data; /* content, symlink or hardlink target */
};

static size_t mktar(const struct ent *e)
{
	struct archive *a = archive_write_new();
	size_t used = 0;

	archive_write_set_format_pax_restricted(a);
	archive_write_open_memory(a, tarbuf, sizeof(tarbuf), &used);
	for (; e->path; e++) {
		struct archive_entry *ae = archive_entry_new();
		archive_entry_set_pathname(ae, e->path);
		archive_entry_set_perm(ae, e->type == 'd' ? 0755 : 0644);
		archive_entry_set_mtime(ae, 1000, 0);
		switch (e->type) {
		case 'f':
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_size(ae, (la_int64_t)strlen(e->data));
			break;
		case 'd': archive_entry_set_filetype(ae, AE_IFDIR); break;
		case 'l':
			archive_entry_set_filetype(ae, AE_IFLNK);
			archive_entry_set_symlink(ae, e->data);
			break;
		case 'h':
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_hardlink(ae, e->data);
			break;
		case 'c':
			archive_entry_set_filetype(ae, AE_IFCHR);
			archive_entry_set_rdevmajor(ae, 1);
			archive_entry_set_rdevminor(ae, 3);
			break;
		case 'p': archive_entry_set_filetype(ae, AE_IFIFO); break;
		case 's': archive_entry_set_filetype(ae, AE_IFSOCK); break;
		}
		if (e->type == 'f' && strcmp(e->path, "cap") == 0)
			archive_entry_xattr_add_entry(ae, "security.capability", "\x01\x00\x00\x02", 4);
		archive_write_header(a, ae);
		if (e->type == 'f')
			archive_write_data(a, e->data, strlen(e->data));
		archive_entry_free(ae);
	}
	archive_write_close(a);
	archive_write_free(a);
	return used;
}

/* Apply the layers; returns the listing (caller frees) or NULL with *err. */
static char *merge(const struct ent *const *layers, const struct rootfs_limits *lim, kiln_error **err)
{
	rootfs_tree *t = rootfs_tree_new(lim);
	kiln_buf out = KILN_BUF_INIT;

	for (unsigned i = 0; layers[i]; i++) {
		size_t n = mktar(layers[i]);
		if (rootfs_tree_apply_buffer(t, i, tarbuf, n, "layer", err) < 0) {
			rootfs_tree_free(t);
			return NULL;
		}
	}
	rootfs_tree_list(t, &out);
	rootfs_tree_free(t);
	return kiln_buf_detach(&out);
}

static int has_line(const char *listing, const char *prefix)
{
	size_t n = strlen(prefix);

	for (const char *p = listing; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, prefix, n) == 0 && (p[n] == ' ' || p[n] == '\n'))
			return 1;
	return 0;
}

static void expect_error(const struct ent *const *layers, const struct rootfs_limits *lim,
			 const char *needle)
{
	kiln_error *err = NULL;
	char *l = merge(layers, lim, &err);

	CHECK(l == NULL);
	CHECK(err != NULL);
	if (err && strstr(kiln_error_message(err), needle) == NULL) {
		printf("#   error '%s' lacks '%s'\n", kiln_error_message(err), needle);
		CHECK(0);
	}
	kiln_error_free(err);
	free(l);
}

static void test_whiteouts(void)
{
	static const struct ent l0[] = { { "a", 'd', 0 }, { "a/x", 'f', "x" }, { "a/y", 'f', "y" },
					 { "b", 'f', "b" }, { 0, 0, 0 } };
	static const struct ent l1[] = { { "a/.wh.x", 'f', "" }, { ".wh.b", 'f', "" },
					 { ".wh.nothere", 'f', "" }, { "c/.wh.z", 'f', "" }, { 0, 0, 0 } };
	const struct ent *layers[] = { l0, l1, NULL };
	kiln_error *err = NULL;
	char *l = merge(layers, NULL, &err);

	CHECK(l != NULL);
	CHECK(has_line(l, "a/y f 0644 0 0 1 1"));
	CHECK(!has_line(l, "a/x f"));
	CHECK(!has_line(l, "b f"));
	free(l);
	kiln_error_free(err);
}

static void test_opaque(void)
{
	static const struct ent l0[] = { { "d", 'd', 0 }, { "d/old", 'f', "o" }, { "d/sub", 'd', 0 },
					 { "d/sub/deep", 'f', "d" }, { "e/keep", 'f', "k" }, { 0, 0, 0 } };
	/* "d/first" comes before the marker, "d/sub/again" after: both stay */
	static const struct ent l1[] = { { "d/first", 'f', "1" }, { "d/.wh..wh..opq", 'f', "" },
					 { "d/sub/again", 'f', "2" }, { 0, 0, 0 } };
	const struct ent *layers[] = { l0, l1, NULL };
	kiln_error *err = NULL;
	char *l = merge(layers, NULL, &err);

	CHECK(l != NULL);
	CHECK(has_line(l, "d/first f 0644 0 0 1 1"));
	CHECK(has_line(l, "d/sub/again f 0644 0 0 1 1"));
	CHECK(!has_line(l, "d/old f"));
	CHECK(!has_line(l, "d/sub/deep f"));
	CHECK(has_line(l, "e/keep f 0644 0 0 1 1"));
	free(l);
	kiln_error_free(err);
}

static void test_hardlinks(void)
{
	static const struct ent l0[] = { { "f", 'f', "abc" }, { 0, 0, 0 } };
	static const struct ent l1[] = { { "g", 'h', "f" }, { "dir/h", 'h', "./f" }, { 0, 0, 0 } };
	static const struct ent l2[] = { { "f", 'f', "new!" }, { 0, 0, 0 } };
	const struct ent *layers[] = { l0, l1, l2, NULL };
	kiln_error *err = NULL;
	char *l = merge(layers, NULL, &err);

	CHECK(l != NULL);
	CHECK(has_line(l, "f f 0644 0 0 4 1"));
	CHECK(has_line(l, "g f 0644 0 0 3 2"));
	CHECK(has_line(l, "dir/h f 0644 0 0 3 2"));
	free(l);
	kiln_error_free(err);
}

static void test_replace_types(void)
{
	static const struct ent l0[] = { { "p", 'f', "file" }, { "q", 'd', 0 }, { "q/in", 'f', "x" },
					 { 0, 0, 0 } };
	static const struct ent l1[] = { { "p", 'd', 0 }, { "p/c", 'f', "c" }, { "q", 'l', "p" }, { 0, 0, 0 } };
	static const struct ent l2[] = { { "p", 'f', "again" }, { "dup", 'f', "1" }, { "dup", 'f', "22" },
					 { "dev", 'c', 0 }, { "fifo", 'p', 0 }, { "sock", 's', 0 },
					 { "cap", 'f', "c" }, { 0, 0, 0 } };
	const struct ent *layers[] = { l0, l1, l2, NULL };
	kiln_error *err = NULL;
	char *l = merge(layers, NULL, &err);

	CHECK(l != NULL);
	CHECK(has_line(l, "p f 0644 0 0 5 1"));
	CHECK(!has_line(l, "p/c f"));
	CHECK(has_line(l, "q l 0644 0 0 0 1 -> p"));
	CHECK(!has_line(l, "q/in f"));
	CHECK(has_line(l, "dup f 0644 0 0 2 1"));
	CHECK(has_line(l, "dev c 0644 0 0 0 1 1,3"));
	CHECK(has_line(l, "fifo p 0644 0 0 0 1"));
	CHECK(!has_line(l, "sock"));
	CHECK(has_line(l, "cap f 0644 0 0 1 1 xattr=security.capability"));
	free(l);
	kiln_error_free(err);
}

static void test_contained(void)
{
	/* absolute paths land under the root; symlinks are followed inside it */
	static const struct ent l0[] = { { "/abs/x", 'f', "a" }, { "esc", 'l', "../../../../tmp" },
					 { "absl", 'l', "/etc" }, { "lib", 'l', "usr/lib" },
					 { "usr/lib", 'd', 0 }, { 0, 0, 0 } };
	static const struct ent l1[] = { { "esc/pwn", 'f', "p" }, { "absl/passwd", 'f', "r" },
					 { "lib/libc.so", 'f', "l" }, { 0, 0, 0 } };
	const struct ent *layers[] = { l0, l1, NULL };
	kiln_error *err = NULL;
	char *l = merge(layers, NULL, &err);

	CHECK(l != NULL);
	CHECK(has_line(l, "abs/x f 0644 0 0 1 1"));
	CHECK(has_line(l, "tmp/pwn f 0644 0 0 1 1"));
	CHECK(has_line(l, "etc/passwd f 0644 0 0 1 1"));
	CHECK(has_line(l, "usr/lib/libc.so f 0644 0 0 1 1"));
	CHECK(has_line(l, "esc l 0644 0 0 0 1 -> ../../../../tmp"));
	free(l);
	kiln_error_free(err);
}

static void test_rejected(void)
{
	static const struct ent dots[] = { { "a/../../evil", 'f', "x" }, { 0, 0, 0 } };
	static const struct ent hl_out[] = { { "h", 'h', "../../etc/shadow" }, { 0, 0, 0 } };
	static const struct ent hl_missing[] = { { "h", 'h', "nowhere" }, { 0, 0, 0 } };
	static const struct ent loop[] = { { "a", 'l', "b" }, { "b", 'l', "a" }, { "a/x", 'f', "x" }, { 0, 0, 0 } };
	static const struct ent notdir[] = { { "f", 'f', "x" }, { "f/x", 'f', "x" }, { 0, 0, 0 } };
	static const struct ent badwh[] = { { ".wh.", 'f', "" }, { 0, 0, 0 } };
	static const struct ent many[] = { { "1", 'f', "" }, { "2", 'f', "" }, { "3", 'f', "" },
					   { "4", 'f', "" }, { 0, 0, 0 } };
	static const struct ent big[] = { { "big", 'f', "0123456789abcdef" }, { 0, 0, 0 } };
	const struct ent *l_dots[] = { dots, NULL }, *l_hl[] = { hl_out, NULL },
			 *l_hm[] = { hl_missing, NULL }, *l_loop[] = { loop, NULL },
			 *l_nd[] = { notdir, NULL }, *l_wh[] = { badwh, NULL }, *l_many[] = { many, NULL },
			 *l_big[] = { big, NULL };
	struct rootfs_limits lim;

	expect_error(l_dots, NULL, "contains '..'");
	expect_error(l_hl, NULL, "contains '..'");
	expect_error(l_hm, NULL, "hardlink target 'nowhere' does not exist");
	expect_error(l_loop, NULL, "too many levels of symbolic links");
	expect_error(l_nd, NULL, "is not a directory");
	expect_error(l_wh, NULL, "invalid whiteout");
	rootfs_limits_default(&lim);
	lim.max_entries = 3;
	expect_error(l_many, &lim, "more than 3 entries");
	rootfs_limits_default(&lim);
	lim.max_file_size = 10;
	expect_error(l_big, &lim, "over the limit");
	rootfs_limits_default(&lim);
	lim.max_bytes = 10;
	expect_error(l_big, &lim, "more than 10 bytes");
}

static void test_refs(void)
{
	const struct rootfs_source_ops *ops;
	char *loc = NULL, *tag = NULL;
	kiln_error *err = NULL;

	CHECK(rootfs_ref_parse("oci:/x/y:v1", &ops, &loc, &tag, &err) == 0);
	CHECK(ops == &rootfs_source_oci);
	CHECK_STR(loc, "/x/y");
	CHECK_STR(tag, "v1");
	free(loc);
	free(tag);
	CHECK(rootfs_ref_parse("oci-archive:a.tar", &ops, &loc, &tag, &err) == 0);
	CHECK(ops == &rootfs_source_oci_archive && tag == NULL);
	CHECK_STR(loc, "a.tar");
	free(loc);
	CHECK(rootfs_ref_parse("docker-archive:/t/d.tar", &ops, &loc, &tag, &err) == 0);
	CHECK(ops == &rootfs_source_docker_archive && tag == NULL);
	free(loc);
	CHECK(rootfs_ref_parse("http:x", &ops, &loc, &tag, &err) < 0);
	CHECK(err && err->kind == KILN_E_USAGE);
	kiln_error_clear(&err);
	CHECK(rootfs_ref_parse("noscheme", &ops, &loc, &tag, &err) < 0);
	kiln_error_clear(&err);
	CHECK(rootfs_ref_parse("oci:", &ops, &loc, &tag, &err) < 0);
	kiln_error_clear(&err);
}

int main(void)
{
	RUN(test_whiteouts);
	RUN(test_opaque);
	RUN(test_hardlinks);
	RUN(test_replace_types);
	RUN(test_contained);
	RUN(test_rejected);
	RUN(test_refs);
	return test_done();
}
