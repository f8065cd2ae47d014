/* test_build_fsindex.c — the image path index: layers applied in order with
 * whiteouts and opaque directories, symlink resolution kept inside the root,
 * /etc/passwd tracking, the same replayed from layer records; and the
 * template's default start command quoting. */
#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "builder/builder.h"
#include "test.h"

static char *dir;

/* A tar layer from "path:type[:target]" specs (type d f l). */
static char *layer(const char *name, const char *const *specs, size_t n)
{
	char *p = kiln_path_join(dir, name);
	struct archive *a = archive_write_new();
	struct archive_entry *e = archive_entry_new();

	archive_write_set_format_pax_restricted(a);
	archive_write_add_filter_gzip(a);
	archive_write_open_filename(a, p);
	for (size_t i = 0; i < n; i++) {
		char *s = kiln_xstrdup(specs[i]), *t = strchr(s, ':'), *target;
		*t++ = '\0';
		target = strchr(t, ':');
		if (target)
			*target++ = '\0';
		archive_entry_clear(e);
		archive_entry_set_pathname(e, s);
		const char *body = "root:x:0:0::/:/bin/sh\n";
		if (*t == 'd') {
			archive_entry_set_filetype(e, AE_IFDIR);
			archive_entry_set_perm(e, 0755);
		} else if (*t == 'l') {
			archive_entry_set_filetype(e, AE_IFLNK);
			archive_entry_set_symlink(e, target);
		} else {
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_perm(e, 0644);
			archive_entry_set_size(e, (la_int64_t)strlen(body));
		}
		archive_write_header(a, e);
		if (*t == 'f')
			archive_write_data(a, body, strlen(body));
		free(s);
	}
	archive_entry_free(e);
	archive_write_free(a);
	return p;
}

static void test_layers(void)
{
	build_fsindex *x = build_fsindex_new();
	kiln_error *err = NULL;
	const char *l1[] = { "etc/:d", "etc/passwd:f", "a/:d", "a/b/:d", "a/b/c:f", "a/keep:f", "lib:l:usr/lib",
			     "usr/:d", "usr/lib/:d", "up:l:../../..", "abs:l:/a/b" };
	const char *l2[] = { "a/b/.wh..wh..opq:f", "a/b/new:f", "a/.wh.keep:f", "etc/.wh.passwd:f" };
	char *p1 = layer("l1.tar.gz", l1, 11), *p2 = layer("l2.tar.gz", l2, 4);

	CHECK(build_fsindex_apply_layer(x, p1, &err) == 0);
	CHECK(build_fsindex_get(x, "a/b/c") != NULL);
	CHECK(build_fsindex_file(x, "etc/passwd") != NULL);
	char *r = build_fsindex_resolve(x, "/lib/x", true);
	CHECK_STR(r, "usr/lib/x");
	free(r);
	r = build_fsindex_resolve(x, "/up/etc", true); /* ".." stops at the root */
	CHECK_STR(r, "etc");
	free(r);
	r = build_fsindex_resolve(x, "abs", true);
	CHECK_STR(r, "a/b");
	free(r);
	r = build_fsindex_resolve(x, "abs", false);
	CHECK_STR(r, "abs");
	free(r);
	CHECK(build_fsindex_apply_layer(x, p2, &err) == 0);
	CHECK(build_fsindex_get(x, "a/b/c") == NULL);   /* opaque */
	CHECK(build_fsindex_get(x, "a/b/new") != NULL);
	CHECK(build_fsindex_get(x, "a/b") != NULL);
	CHECK(build_fsindex_get(x, "a/keep") == NULL);  /* whiteout */
	CHECK(build_fsindex_get(x, "a/b/.wh..wh..opq") == NULL);
	CHECK(build_fsindex_get(x, "etc/passwd") == NULL);
	CHECK(build_fsindex_file(x, "etc/passwd") == NULL);
	char *bad = kiln_path_join(dir, "missing.tar");
	CHECK(build_fsindex_apply_layer(x, bad, &err) < 0);
	kiln_error_clear(&err);
	free(bad);
	free(p1);
	free(p2);
	build_fsindex_free(x);
}

/* The same layers through their records: recorded the first time, replayed
 * the second (the blob is gone by then), the same index either way; a cut
 * record is not replayed but the layer read again. */
static void same_index(build_fsindex *a, build_fsindex *b)
{
	static const char *const paths[] = { "etc", "etc/passwd", "a/b", "a/b/c", "a/b/new", "a/keep", "lib", "up",
					     "abs", "a/b/.wh..wh..opq", "hl" };
	for (size_t i = 0; i < sizeof(paths) / sizeof(*paths); i++) {
		const struct build_fsnode *x = build_fsindex_get(a, paths[i]), *y = build_fsindex_get(b, paths[i]);
		CHECK((x == NULL) == (y == NULL));
		if (x && y) {
			CHECK(x->mode == y->mode && x->uid == y->uid && x->gid == y->gid);
			CHECK((x->link == NULL) == (y->link == NULL));
			if (x->link && y->link)
				CHECK_STR(x->link, y->link);
		}
	}
	const char *pa = build_fsindex_file(a, "etc/passwd"), *pb = build_fsindex_file(b, "etc/passwd");
	CHECK((pa == NULL) == (pb == NULL));
	if (pa && pb)
		CHECK_STR(pa, pb);
}

static void test_records(void)
{
	kiln_error *err = NULL;
	const char *l1[] = { "etc/:d", "etc/passwd:f", "a/:d", "a/b/:d", "a/b/c:f", "a/keep:f", "lib:l:usr/lib",
			     "usr/:d", "usr/lib/:d", "up:l:../../..", "abs:l:/a/b" };
	const char *l2[] = { "a/b/.wh..wh..opq:f", "a/b/new:f", "a/.wh.keep:f" };
	char *p1 = layer("r1.tar.gz", l1, 11), *p2 = layer("r2.tar.gz", l2, 3);
	char *r1 = kiln_path_join(dir, "records/r1"), *r2 = kiln_path_join(dir, "records/r2");
	build_fsindex *plain = build_fsindex_new(), *first = build_fsindex_new(), *again = build_fsindex_new();

	CHECK(build_fsindex_apply_layer(plain, p1, &err) == 0 && build_fsindex_apply_layer(plain, p2, &err) == 0);
	CHECK(build_fsindex_apply_layer_cached(first, p1, r1, &err) == 0);
	CHECK(build_fsindex_apply_layer_cached(first, p2, r2, &err) == 0);
	CHECK(access(r1, F_OK) == 0 && access(r2, F_OK) == 0);
	same_index(plain, first);
	char *gone1 = kiln_xasprintf("%s.gone", p1), *gone2 = kiln_xasprintf("%s.gone", p2);
	CHECK(rename(p1, gone1) == 0 && rename(p2, gone2) == 0);
	CHECK(build_fsindex_apply_layer_cached(again, p1, r1, &err) == 0);
	CHECK(build_fsindex_apply_layer_cached(again, p2, r2, &err) == 0);
	same_index(plain, again);
	/* a record cut short: the blob is read (here: it is gone, so that fails) */
	char *data = NULL;
	size_t len = 0;
	CHECK(kiln_read_file(r1, &data, &len, 1 << 20, &err) == 0);
	CHECK(kiln_write_atomic(r1, data, len - 4, 0644, &err) == 0);
	build_fsindex *cut = build_fsindex_new();
	CHECK(build_fsindex_apply_layer_cached(cut, p1, r1, &err) < 0);
	kiln_error_clear(&err);
	CHECK(build_fsindex_get(cut, "a/b/c") == NULL);
	CHECK(rename(gone1, p1) == 0);
	CHECK(build_fsindex_apply_layer_cached(cut, p1, r1, &err) == 0);
	CHECK(build_fsindex_get(cut, "a/b/c") != NULL);
	free(data);
	build_fsindex_free(cut);
	build_fsindex_free(plain);
	build_fsindex_free(first);
	build_fsindex_free(again);
	free(gone1);
	free(gone2);
	free(r1);
	free(r2);
	free(p1);
	free(p2);
}

static void test_start_cmd(void)
{
	json_t *c = json_pack("{s:{s:[s,s],s:[s]}}", "config", "Entrypoint", "/bin/app", "it's", "Cmd", "--x y");
	char *s = build_default_start_cmd(c);
	CHECK_STR(s, "'/bin/app' 'it'\\''s' '--x y'");
	free(s);
	json_decref(c);
	c = json_pack("{s:{}}", "config");
	CHECK(build_default_start_cmd(c) == NULL);
	json_decref(c);
}

int main(void)
{
	kiln_error *err = NULL;

	dir = kiln_mkdtemp("kiln-test-fsindex", &err);
	if (!dir)
		return 1;
	RUN(test_layers);
	RUN(test_records);
	RUN(test_start_cmd);
	kiln_rm_rf(dir, &err);
	kiln_error_free(err);
	free(dir);
	return test_done();
}
