/* test_build_copy.c — COPY/ADD resolution rules (globs, directory contents,
 * trailing slashes, --parents, --exclude, --chown, --chmod), layer bytes
 * (reproducible), cache keys (content, mode, owner; not mtime) with the
 * digest memo of big inputs, and layers rewritten for the builder VM. */
#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "builder/builder.h"
#include "builder/internal.h"
#include "guest/guest.h"
#include "test.h"

static char *ctxdir, *home;

static void put(const char *rel, const char *content, mode_t mode)
{
	char *p = kiln_path_join(ctxdir, rel), *d = kiln_xstrdup(p);
	kiln_error *err = NULL;
	*strrchr(d, '/') = '\0';
	kiln_mkdir_p(d, 0755, &err);
	kiln_error_clear(&err);
	if (kiln_write_atomic(p, content, strlen(content), mode, &err) < 0)
		kiln_error_clear(&err);
	chmod(p, mode);
	free(d);
	free(p);
}

/* Resolve and render "dest mode uid:gid" lines. */
static char *resolve(const char *const *srcs, size_t n, const char *dest, const struct build_copy_opts *o0,
		     build_fsindex *img)
{
	build_tree *t = NULL;
	kiln_error *err = NULL;
	struct build_changes ch = { 0 };
	struct build_copy_opts o = { 0 };
	kiln_buf b = KILN_BUF_INIT;
	build_fsindex *own = NULL;

	if (o0)
		o = *o0;
	o.scratch = home;
	if (!img)
		img = own = build_fsindex_new();
	if (build_tree_open(ctxdir, NULL, &t, &err) < 0 || build_copy_resolve(t, srcs, n, dest, &o, img, &ch, &err) < 0) {
		kiln_buf_addf(&b, "error: %s", kiln_error_message(err));
		kiln_error_free(err);
	} else {
		build_changes_finish(&ch);
		for (size_t i = 0; i < ch.n; i++)
			kiln_buf_addf(&b, "%s %o %u:%u\n", ch.v[i].dest, (unsigned)ch.v[i].mode & 07777,
				      (unsigned)ch.v[i].uid, (unsigned)ch.v[i].gid);
	}
	build_changes_free(&ch);
	build_tree_free(t);
	build_fsindex_free(own);
	return kiln_buf_detach(&b);
}

#define R(want, dest, o, img, ...)                                                              \
	do {                                                                                    \
		const char *s_[] = { __VA_ARGS__ };                                             \
		char *got_ = resolve(s_, sizeof(s_) / sizeof(s_[0]), dest, o, img);             \
		CHECK_STR(got_, want);                                                          \
		free(got_);                                                                     \
	} while (0)

static void test_rules(void)
{
	struct build_copy_opts o = { 0 };

	/* a file to a file path, to a dir path, relative to WORKDIR */
	R("x 644 0:0\n", "/x", NULL, NULL, "a.txt");
	R("x 755 0:0\nx/a.txt 644 0:0\n", "/x/", NULL, NULL, "a.txt");
	o.workdir = "/app";
	R("app 755 0:0\napp/a.txt 644 0:0\n", ".", &o, NULL, "a.txt");
	R("app 755 0:0\napp/y 644 0:0\n", "y", &o, NULL, "a.txt");
	/* a directory copies its contents, not itself */
	R("d 755 0:0\nd/s 755 0:0\nd/s/b.c 644 0:0\nd/s/c.h 600 0:0\n", "/d", NULL, NULL, "src");
	/* globs: * stays in one component; several matches need a directory */
	R("o 755 0:0\no/a.txt 644 0:0\no/b.txt 644 0:0\n", "/o/", NULL, NULL, "*.txt");
	R("o 755 0:0\no/b.c 644 0:0\n", "/o/", NULL, NULL, "src/s/*.c");
	R("o 755 0:0\no/b.c 644 0:0\no/c.h 600 0:0\n", "/o/", NULL, NULL, "src/s/[bc].?");
	R("error: when using COPY with more than one source file, the destination must be a directory and end with a /",
	  "/o", NULL, NULL, "a.txt", "b.txt");
	R("error: ../../etc/passwd: not found in the build context (or excluded by .dockerignore)", "/o", NULL, NULL,
	  "../../etc/passwd");
	/* an existing directory in the image is a directory destination */
	build_fsindex *img = build_fsindex_new();
	const char *passwd = "root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n";
	const char *group = "root:x:0:\nstaff:x:50:\n";
	char *tarp = kiln_path_join(home, "base.tar");
	{
		struct archive *a = archive_write_new();
		struct archive_entry *e = archive_entry_new();
		archive_write_set_format_pax_restricted(a);
		archive_write_open_filename(a, tarp);
		const char *names[] = { "etc/", "etc/passwd", "etc/group", "srv/", "lnk" };
		const char *bodies[] = { NULL, passwd, group, NULL, NULL };
		for (int i = 0; i < 5; i++) {
			archive_entry_clear(e);
			archive_entry_set_pathname(e, names[i]);
			if (i == 4) {
				archive_entry_set_filetype(e, AE_IFLNK);
				archive_entry_set_symlink(e, "/srv");
				archive_entry_set_perm(e, 0777);
			} else {
				archive_entry_set_filetype(e, bodies[i] ? AE_IFREG : AE_IFDIR);
				archive_entry_set_perm(e, bodies[i] ? 0644 : 0755);
				archive_entry_set_size(e, bodies[i] ? (la_int64_t)strlen(bodies[i]) : 0);
			}
			archive_write_header(a, e);
			if (bodies[i])
				archive_write_data(a, bodies[i], strlen(bodies[i]));
		}
		archive_entry_free(e);
		archive_write_free(a);
	}
	kiln_error *err = NULL;
	CHECK(build_fsindex_apply_layer(img, tarp, &err) == 0);
	kiln_error_clear(&err);
	R("srv/a.txt 644 0:0\n", "/srv", NULL, img, "a.txt");
	/* symlinks in the destination are followed inside the image */
	R("srv/a.txt 644 0:0\n", "/lnk/", NULL, img, "a.txt");
	/* --chown with names from the image, --chmod */
	struct build_copy_opts c = { .chown = "app:staff", .chmod = "750" };
	R("srv/a.txt 750 1000:50\n", "/srv/", &c, img, "a.txt");
	c.chown = "app";
	c.chmod = NULL;
	R("srv/a.txt 644 1000:1001\n", "/srv/", &c, img, "a.txt");
	c.chown = "42";
	R("new 755 42:42\nnew/a.txt 644 42:42\n", "/new/", &c, img, "a.txt");
	c.chown = "nobody";
	R("error: --chown=nobody: unable to find user nobody: no matching entries in passwd file", "/srv/", &c, img,
	  "a.txt");
	c.chown = NULL;
	c.chmod = "u+x";
	R("error: --chmod=u+x: not an octal mode", "/srv/", &c, img, "a.txt");
	/* --parents keeps the source path; "/./" pivots */
	struct build_copy_opts p = { .parents = true };
	R("o 755 0:0\no/src 755 0:0\no/src/s 755 0:0\no/src/s/b.c 644 0:0\n", "/o/", &p, NULL, "src/s/b.c");
	R("o 755 0:0\no/s 755 0:0\no/s/b.c 644 0:0\n", "/o/", &p, NULL, "./src/./s/b.c");
	/* --exclude */
	const char *ex[] = { "**/*.h" };
	struct build_copy_opts x = { .excludes = ex, .n_excludes = 1 };
	R("d 755 0:0\nd/s 755 0:0\nd/s/b.c 644 0:0\n", "/d", &x, NULL, "src");
	ex[0] = "*.h"; /* patternmatcher: only the top level of the source */
	R("d 755 0:0\nd/s 755 0:0\nd/s/b.c 644 0:0\nd/s/c.h 600 0:0\n", "/d", &x, NULL, "src");
	ex[0] = "s";
	R("d 755 0:0\n", "/d", &x, NULL, "src");
	build_fsindex_free(img);
	free(tarp);
}

static void layer_of(const char *const *srcs, size_t n, char digest[KILN_DIGEST_MAX], char key[KILN_DIGEST_MAX])
{
	build_tree *t = NULL;
	build_store *s = NULL;
	kiln_error *err = NULL;
	struct build_changes ch = { 0 };
	struct build_copy_opts o = { .scratch = home };
	build_fsindex *img = build_fsindex_new();
	struct build_layer l;

	strcpy(digest, "?");
	strcpy(key, "?");
	if (build_store_open(home, &s, &err) < 0 || build_tree_open(ctxdir, NULL, &t, &err) < 0 ||
	    build_copy_resolve(t, srcs, n, "/app/", &o, img, &ch, &err) < 0) {
		printf("#   %s\n", kiln_error_message(err));
		goto out;
	}
	build_changes_finish(&ch);
	if (build_layer_write(s, &ch, BUILD_GZIP, 0, &l, &err) < 0 ||
	    build_cache_key("sha256:0000", "COPY x /app/", &ch, key, &err) < 0) {
		printf("#   %s\n", kiln_error_message(err));
		goto out;
	}
	strcpy(digest, l.digest);
	CHECK(build_store_has_blob(s, l.digest));
out:
	kiln_error_free(err);
	build_changes_free(&ch);
	build_tree_free(t);
	build_store_close(s);
	build_fsindex_free(img);
}

static void test_layer_and_key(void)
{
	const char *srcs[] = { "src", "a.txt" };
	char d1[KILN_DIGEST_MAX], k1[KILN_DIGEST_MAX], d2[KILN_DIGEST_MAX], k2[KILN_DIGEST_MAX];
	char *p = kiln_path_join(ctxdir, "a.txt");
	struct timeval tv[2] = { { 1000000, 0 }, { 1000000, 0 } };

	layer_of(srcs, 2, d1, k1);
	/* mtime only: same layer, same key */
	utimes(p, tv);
	layer_of(srcs, 2, d2, k2);
	CHECK_STR(d1, d2);
	CHECK_STR(k1, k2);
	/* mode: new key */
	chmod(p, 0600);
	layer_of(srcs, 2, d2, k2);
	CHECK(strcmp(k1, k2) != 0);
	CHECK(strcmp(d1, d2) != 0);
	chmod(p, 0644);
	layer_of(srcs, 2, d2, k2);
	CHECK_STR(k1, k2);
	/* owner of the input: new key (the layer itself is 0:0 either way) */
	CHECK(chown(p, 1234, 1234) == 0);
	layer_of(srcs, 2, d2, k2);
	CHECK(strcmp(k1, k2) != 0);
	CHECK_STR(d1, d2);
	CHECK(chown(p, 0, 0) == 0);
	/* content: new key and layer */
	put("a.txt", "A2", 0644);
	layer_of(srcs, 2, d2, k2);
	CHECK(strcmp(k1, k2) != 0);
	CHECK(strcmp(d1, d2) != 0);
	put("a.txt", "A", 0644);
	layer_of(srcs, 2, d2, k2);
	CHECK_STR(k1, k2);
	CHECK_STR(d1, d2);
	free(p);
}

static void test_cache_store(void)
{
	build_store *s = NULL;
	kiln_error *err = NULL;
	struct build_layer l = { 0 }, got = { 0 };
	struct build_prune_stats st;
	char key[KILN_DIGEST_MAX];

	CHECK(build_store_open(home, &s, &err) == 0);
	if (!s)
		return;
	CHECK(build_store_put(s, "hello", 5, l.digest, &err) == 0);
	strcpy(l.diff_id, l.digest);
	l.size = 5;
	l.media_type = build_layer_media_type(BUILD_GZIP);
	build_cache_key(NULL, "COPY a b", NULL, key, &err);
	CHECK_INT(build_cache_get(s, key, &got, &err), 0);
	CHECK(build_cache_put(s, key, &l, "COPY a b", &err) == 0);
	CHECK_INT(build_cache_get(s, key, &got, &err), 1);
	CHECK_STR(got.digest, l.digest);
	json_t *list = build_cache_list(s, &err);
	CHECK(json_array_size(list) >= 1);
	json_decref(list);
	CHECK(build_cache_prune(s, false, 3600, &st, &err) == 0);
	CHECK_INT(build_cache_get(s, key, &got, &err), 1);
	CHECK(build_cache_prune(s, true, -1, &st, &err) == 0);
	CHECK(st.entries >= 1);
	CHECK_INT(build_cache_get(s, key, &got, &err), 0);
	CHECK(!build_store_has_blob(s, l.digest));
	int64_t d = 0;
	CHECK(kiln_parse_duration("7d", &d, &err) == 0);
	CHECK_INT(d, 7 * 86400);
	CHECK(kiln_parse_duration("7x", &d, &err) < 0);
	kiln_error_clear(&err);
	build_store_close(s);
}

/* Big inputs' digests are remembered by (dev, ino, size, mtime, ctime): an
 * unchanged file is not read again, any change to it is seen. */
static void test_digest_memo(void)
{
	build_store *s = NULL;
	kiln_error *err = NULL;
	struct build_changes ch = { 0 };
	char k1[KILN_DIGEST_MAX] = "1", k2[KILN_DIGEST_MAX] = "2", k3[KILN_DIGEST_MAX] = "3", k4[KILN_DIGEST_MAX] = "4";
	char *big = kiln_path_join(ctxdir, "big.bin"), *data = kiln_xmalloc(2 << 20), *memo_dir = NULL;

	memset(data, 'x', 2 << 20);
	kiln_write_atomic(big, data, 2 << 20, 0644, &err);
	kiln_error_clear(&err);
	sleep(3); /* a file changed within the clock's granularity is never remembered */
	ch.v = kiln_xcalloc(1, sizeof(*ch.v));
	ch.n = ch.cap = 1;
	ch.v[0] = (struct build_item){ .dest = kiln_xstrdup("big.bin"), .src = kiln_xstrdup(big), .mode = S_IFREG | 0644 };
	if (build_store_open(home, &s, &err) < 0 || build_cache_key_store(s, NULL, "COPY big.bin /", &ch, k1, &err) < 0 ||
	    build_cache_key(NULL, "COPY big.bin /", &ch, k2, &err) < 0) {
		printf("#   %s\n", kiln_error_message(err));
		goto out;
	}
	CHECK_STR(k1, k2);
	memo_dir = kiln_path_join(home, "hashes");
	build_tree *t = NULL;
	CHECK(build_tree_open(memo_dir, NULL, &t, &err) == 0 && build_tree_count(t) == 1);
	/* proof the memo is what is read: point it at another digest */
	if (t && build_tree_count(t) == 1) {
		char *mp = kiln_path_join(memo_dir, build_tree_entry(t, 0)->path), *old = NULL;
		size_t len = 0;
		if (kiln_read_file(mp, &old, &len, 512, &err) == 0) {
			char *sha = strstr(old, "sha256:");
			memset(sha + 7, '0', 64);
			kiln_write_atomic(mp, old, len, 0600, &err);
		}
		kiln_error_clear(&err);
		CHECK(build_cache_key_store(s, NULL, "COPY big.bin /", &ch, k3, &err) == 0);
		CHECK(strcmp(k3, k1) != 0);
		free(old);
		free(mp);
	}
	build_tree_free(t);
	/* same size, new content: ctime moves, the file is read again */
	data[0] = 'y';
	kiln_write_atomic(big, data, 2 << 20, 0644, &err);
	kiln_error_clear(&err);
	CHECK(build_cache_key_store(s, NULL, "COPY big.bin /", &ch, k4, &err) == 0);
	CHECK(build_cache_key(NULL, "COPY big.bin /", &ch, k2, &err) == 0);
	CHECK_STR(k4, k2);
	CHECK(strcmp(k4, k1) != 0);
out:
	kiln_error_free(err);
	build_changes_free(&ch);
	build_store_close(s);
	unlink(big);
	free(big);
	free(data);
	free(memo_dir);
}

/* Layers for the builder VM: one plain tar, layer i under prefix i; a layer
 * with a whiteout cannot be a plain directory (1: the VM is booted instead). */
static void test_layers_plain_tar(void)
{
	build_store *s = NULL;
	kiln_error *err = NULL;
	struct build_layer l[2];
	struct build_changes a = { 0 }, b = { 0 };
	char *tar = kiln_path_join(home, "plain.tar"), *src = kiln_path_join(ctxdir, "a.txt");
	const char *names[] = { "l0", "l1" };

	a.v = kiln_xcalloc(2, sizeof(*a.v));
	a.v[0] = (struct build_item){ .dest = kiln_xstrdup("d"), .mode = S_IFDIR | 0750, .uid = 7 };
	a.v[1] = (struct build_item){ .dest = kiln_xstrdup("d/f"), .src = kiln_xstrdup(src), .mode = S_IFREG | 0600,
				      .size = 1 };
	a.n = a.cap = 2;
	build_item_add_xattr(&a.v[1], "security.capability", "\1\0\0\2", 4);
	b.v = kiln_xcalloc(1, sizeof(*b.v));
	b.v[0] = (struct build_item){ .dest = kiln_xstrdup("d/.wh.f"), .mode = S_IFREG | 0644 };
	b.n = b.cap = 1;
	if (build_store_open(home, &s, &err) < 0 || build_layer_write(s, &a, BUILD_GZIP, 0, &l[0], &err) < 0 ||
	    build_layer_write(s, &b, BUILD_ZSTD, 0, &l[1], &err) < 0) {
		printf("#   %s\n", kiln_error_message(err));
		CHECK(0);
		goto out;
	}
	struct guest_xattr_list xl = { 0 };
	CHECK_INT(build_layers_plain_tar(s, l, names, 1, tar, &xl, &err), 0);
	/* the guest's tar drops xattrs: they come back as a list to set after it */
	CHECK_INT(xl.n, 1);
	if (xl.n == 1) {
		CHECK_STR(xl.v[0].path, "l0/d/f");
		CHECK_STR(xl.v[0].x.name, "security.capability");
		CHECK(xl.v[0].x.len == 4 && memcmp(xl.v[0].x.value, "\1\0\0\2", 4) == 0);
	}
	guest_xattr_list_free(&xl);
	struct archive *ar = archive_read_new();
	struct archive_entry *e;
	kiln_buf got = KILN_BUF_INIT;
	archive_read_support_format_tar(ar);
	if (archive_read_open_filename(ar, tar, 4096) == ARCHIVE_OK)
		while (archive_read_next_header(ar, &e) == ARCHIVE_OK)
			kiln_buf_addf(&got, "%s %o %lld;", archive_entry_pathname(e),
				      (unsigned)archive_entry_mode(e) & 07777, (long long)archive_entry_uid(e));
	archive_read_free(ar);
	CHECK_STR(got.buf, "l0/ 755 0;l0/d/ 750 7;l0/d/f 600 0;");
	kiln_buf_free(&got);
	CHECK_INT(build_layers_plain_tar(s, l, names, 2, tar, &xl, &err), 1);
	guest_xattr_list_free(&xl);
out:
	kiln_error_free(err);
	build_changes_free(&a);
	build_changes_free(&b);
	build_store_close(s);
	unlink(tar);
	free(tar);
	free(src);
}

int main(void)
{
	kiln_error *err = NULL;

	ctxdir = kiln_mkdtemp("kiln-test-copy", &err);
	home = kiln_mkdtemp("kiln-test-home", &err);
	if (!ctxdir || !home)
		return 1;
	put("a.txt", "A", 0644);
	put("b.txt", "B", 0644);
	put("src/s/b.c", "int b;", 0644);
	put("src/s/c.h", "int c;", 0600);
	RUN(test_rules);
	RUN(test_layer_and_key);
	RUN(test_cache_store);
	RUN(test_digest_memo);
	RUN(test_layers_plain_tar);
	kiln_rm_rf(ctxdir, &err);
	kiln_rm_rf(home, &err);
	kiln_error_free(err);
	free(ctxdir);
	free(home);
	return test_done();
}
