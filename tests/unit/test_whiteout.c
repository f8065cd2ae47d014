/* test_whiteout.c — one whiteout classifier (rootfs_whiteout_kind) and every
 * reader of layers agreeing with it: the rootfs merge, the builder's image
 * index and its extraction (COPY --from=image, RUN --mount=from=image) refuse
 * ".wh.", ".wh.." and ".wh..." — a ".wh..." once made the extraction remove
 * the directory above the whiteout (the build's scratch) and carry on. */
#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "builder/builder.h"
#include "rootfs/rootfs.h"
#include "test.h"

static char *dir;

static void test_classifier(void)
{
	const char *v = NULL;
	CHECK_INT(rootfs_whiteout_kind("file", &v), ROOTFS_WH_NONE);
	CHECK_INT(rootfs_whiteout_kind(".whx", &v), ROOTFS_WH_NONE);
	CHECK_INT(rootfs_whiteout_kind(".wh.a", &v), ROOTFS_WH_FILE);
	CHECK_STR(v, "a");
	CHECK_INT(rootfs_whiteout_kind(".wh..a", &v), ROOTFS_WH_FILE);
	CHECK_STR(v, ".a");
	CHECK_INT(rootfs_whiteout_kind(".wh..wh..opq", &v), ROOTFS_WH_OPAQUE);
	CHECK_INT(rootfs_whiteout_kind(".wh..wh.plnk", &v), ROOTFS_WH_META);
	CHECK_INT(rootfs_whiteout_kind(".wh..wh..opqx", &v), ROOTFS_WH_META);
	CHECK_INT(rootfs_whiteout_kind(".wh.", &v), ROOTFS_WH_INVALID);
	CHECK_INT(rootfs_whiteout_kind(".wh..", &v), ROOTFS_WH_INVALID);
	CHECK_INT(rootfs_whiteout_kind(".wh...", &v), ROOTFS_WH_INVALID);
	char *p = rootfs_whiteout_path("a/b/c");
	CHECK_STR(p, "a/b/.wh.c");
	free(p);
	p = rootfs_whiteout_path("top");
	CHECK_STR(p, ".wh.top");
	free(p);
}

/* A layer with files, then the given whiteout-ish names under keep/. */
static int store_layer(build_store *s, const char *const *names, size_t n, struct build_layer *l, char **blob)
{
	char *p = kiln_path_join(dir, "l.tar");
	struct archive *w = kiln_tar_writer_new();
	struct archive_entry *e = archive_entry_new();
	const char *files[] = { "keep/", "keep/f", "keep/sub/", "keep/sub/g" };
	kiln_error *err = NULL;
	char *data = NULL;
	size_t len = 0;
	int rc = -1;

	archive_write_open_filename(w, p);
	for (size_t i = 0; i < 4 + n; i++) {
		const char *name = i < 4 ? files[i] : names[i - 4];
		bool d = name[strlen(name) - 1] == '/';
		archive_entry_clear(e);
		archive_entry_set_pathname(e, name);
		archive_entry_set_filetype(e, d ? AE_IFDIR : AE_IFREG);
		archive_entry_set_perm(e, d ? 0755 : 0644);
		archive_entry_set_size(e, d || i >= 4 ? 0 : 2);
		kiln_tar_write_header(w, e);
		if (!d && i < 4)
			archive_write_data(w, "x\n", 2);
	}
	archive_write_close(w);
	archive_write_free(w);
	archive_entry_free(e);
	if (kiln_read_file(p, &data, &len, 0, &err) == 0 && build_store_put(s, data, len, l->digest, &err) == 0) {
		*blob = build_store_blob_path(s, l->digest);
		rc = 0;
	}
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_free(err);
	free(data);
	free(p);
	return rc;
}

static bool exists(const char *rel)
{
	struct stat st;
	char *p = kiln_path_join(dir, rel);
	bool yes = lstat(p, &st) == 0;
	free(p);
	return yes;
}

/* Each invalid name is refused by all three readers, and nothing is removed. */
static void test_invalid_refused_everywhere(void)
{
	const char *bad[] = { "keep/sub/.wh...", "keep/sub/.wh..", "keep/.wh." };
	build_store *s = NULL;
	kiln_error *err = NULL;

	CHECK(build_store_open(dir, &s, &err) == 0);
	for (size_t i = 0; s && i < 3; i++) {
		struct build_layer l = { 0 };
		char *blob = NULL;
		const char *one[] = { bad[i] };
		if (store_layer(s, one, 1, &l, &blob) < 0) {
			CHECK(!"layer stored");
			continue;
		}
		/* the builder's extraction (COPY --from=image) */
		char *out = kiln_path_join(dir, "x/out");
		kiln_rm_rf(out, NULL);
		int rc = build_layers_extract(s, &l, 1, out, &err);
		CHECK(rc < 0);
		if (rc == 0)
			printf("#   %s was accepted by the extraction\n", bad[i]);
		CHECK(err && strstr(kiln_error_message(err), "invalid whiteout name") != NULL);
		kiln_error_clear(&err);
		CHECK(exists("x/out"));
		CHECK(exists("x/out/keep/f"));
		CHECK(exists("x/out/keep/sub/g"));
		/* the builder's image index */
		build_fsindex *x = build_fsindex_new();
		CHECK(build_fsindex_apply_layer(x, blob, &err) < 0);
		CHECK(err && strstr(kiln_error_message(err), "invalid whiteout name") != NULL);
		kiln_error_clear(&err);
		build_fsindex_free(x);
		/* the rootfs merge */
		char *data = NULL;
		size_t len = 0;
		rootfs_tree *t = rootfs_tree_new(NULL);
		CHECK(kiln_read_file(blob, &data, &len, 0, &err) == 0);
		CHECK(rootfs_tree_apply_buffer(t, 0, data, len, "layer", &err) < 0);
		CHECK(err && strstr(kiln_error_message(err), "invalid whiteout name") != NULL);
		kiln_error_clear(&err);
		rootfs_tree_free(t);
		free(data);
		free(out);
		free(blob);
	}
	build_store_close(s);
}

/* AUFS metadata (".wh..wh.*") is ignored by the extraction and the index,
 * as by the merge: it is not a whiteout of ".wh.NAME", nor a file. */
static void test_aufs_metadata_ignored(void)
{
	build_store *s = NULL;
	kiln_error *err = NULL;
	struct build_layer l = { 0 };
	char *blob = NULL;
	const char *meta[] = { "keep/.wh..wh.plnk", "keep/.wh..wh.aufs" };

	CHECK(build_store_open(dir, &s, &err) == 0);
	if (!s || store_layer(s, meta, 2, &l, &blob) < 0) {
		CHECK(!"layer stored");
		goto out;
	}
	char *out = kiln_path_join(dir, "y");
	kiln_rm_rf(out, NULL);
	CHECK(build_layers_extract(s, &l, 1, out, &err) == 0);
	CHECK(exists("y/keep/f"));
	CHECK(!exists("y/keep/.wh..wh.plnk"));
	build_fsindex *x = build_fsindex_new();
	CHECK(build_fsindex_apply_layer(x, blob, &err) == 0);
	CHECK(build_fsindex_get(x, "keep/f") != NULL);
	CHECK(build_fsindex_get(x, "keep/.wh..wh.plnk") == NULL);
	build_fsindex_free(x);
	kiln_error_clear(&err);
	free(out);
out:
	free(blob);
	build_store_close(s);
}

int main(void)
{
	char tmpl[] = "/tmp/kiln-wh-XXXXXX";
	dir = mkdtemp(tmpl);
	RUN(test_classifier);
	RUN(test_invalid_refused_everywhere);
	RUN(test_aufs_metadata_ignored);
	kiln_rm_rf(dir, NULL);
	return test_done();
}
