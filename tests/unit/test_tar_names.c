/* test_tar_names.c — file names are bytes: UTF-8 (composed and decomposed),
 * Latin-1, invalid UTF-8 and long names, as paths, symlink targets and
 * hardlink targets, through kiln's tar writer and reader (common/tar.c),
 * through a layer the builder writes and the rootfs merge reads, and from a
 * tar written the way Go's archive/tar (BuildKit, buildah) writes them. */
#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "builder/builder.h"
#include "rootfs/rootfs.h"
#include "test.h"

static char long_name[256], long_path[600];

static const char *names[] = {
	"F\xc5\x91tan\xc3\xbas\xc3\xadtv\xc3\xa1ny.pem", /* UTF-8, as in ca-certificates */
	"NetLock_Arany_=Class_Gold=_F\xc5\x91tan\xc3\xbas\xc3\xadtv\xc3\xa1ny.pem",
	"nfd-e\xcc\x81",                                /* decomposed: no normalisation */
	"latin1-caf\xe9",                               /* Latin-1 */
	"bad-\xff\xfe-\xc3",                            /* not UTF-8 at all */
	"emoji-\xf0\x9f\x94\xa5",
	long_name,                                      /* a 250..255-byte component */
	long_path,                                      /* > 100 bytes over directories */
};
#define N_NAMES (sizeof(names) / sizeof(names[0]))

static void init_names(void)
{
	/* 250 bytes, so that "NAME.hard" is the longest a name can be (255) */
	memset(long_name, 'n', 245);
	memcpy(long_name + 245, "\xc3\xa9\xff.x", 5);
	long_name[250] = '\0';
	snprintf(long_path, sizeof(long_path), "d-\xc3\xa9/%s/%s", names[0] + 0, long_name);
}

/* Write names as a file, a symlink to it and a hardlink to it each. */
static int write_tar(const char *path)
{
	struct archive *w = kiln_tar_writer_new();
	struct archive_entry *e = archive_entry_new();
	int rc = -1;

	if (archive_write_open_filename(w, path) != ARCHIVE_OK)
		goto out;
	for (size_t i = 0; i < N_NAMES; i++) {
		char *l = kiln_xasprintf("%s.sym", names[i]), *h = kiln_xasprintf("%s.hard", names[i]);
		archive_entry_clear(e);
		archive_entry_set_pathname(e, names[i]);
		archive_entry_set_filetype(e, AE_IFREG);
		archive_entry_set_perm(e, 0644);
		archive_entry_set_size(e, 1);
		int r1 = kiln_tar_write_header(w, e);
		archive_write_data(w, "x", 1);
		archive_entry_clear(e);
		archive_entry_set_pathname(e, l);
		archive_entry_set_filetype(e, AE_IFLNK);
		archive_entry_set_perm(e, 0777);
		archive_entry_set_symlink(e, names[i]);
		int r2 = kiln_tar_write_header(w, e);
		archive_entry_clear(e);
		archive_entry_set_pathname(e, h);
		archive_entry_set_filetype(e, AE_IFREG);
		archive_entry_set_perm(e, 0644);
		archive_entry_set_hardlink(e, names[i]);
		int r3 = kiln_tar_write_header(w, e);
		free(l);
		free(h);
		CHECK_INT(r1, ARCHIVE_OK);
		CHECK_INT(r2, ARCHIVE_OK);
		CHECK_INT(r3, ARCHIVE_OK);
		if (r1 || r2 || r3)
			goto out;
	}
	rc = archive_write_close(w) == ARCHIVE_OK ? 0 : -1;
out:
	archive_entry_free(e);
	archive_write_free(w);
	return rc;
}

/* Every entry of the tar at path: "NAME\0LINK\0" pairs ("" for none). */
static void read_tar(const char *path, kiln_buf *out)
{
	struct archive *a = kiln_tar_reader_new();
	struct archive_entry *e;
	int r;

	CHECK(archive_read_open_filename(a, path, 10240) == ARCHIVE_OK);
	while ((r = kiln_tar_next(a, &e)) == ARCHIVE_OK) {
		const char *l = archive_entry_symlink(e) ? archive_entry_symlink(e) : archive_entry_hardlink(e);
		kiln_buf_adds(out, archive_entry_pathname(e));
		kiln_buf_addc(out, '\0');
		kiln_buf_adds(out, l ? l : "");
		kiln_buf_addc(out, '\0');
	}
	CHECK_INT(r, ARCHIVE_EOF);
	archive_read_free(a);
}

static bool has(const kiln_buf *b, const char *name, const char *link)
{
	for (size_t off = 0; off < b->len;) {
		const char *n = b->buf + off, *l = n + strlen(n) + 1;
		if (strcmp(n, name) == 0 && strcmp(l, link) == 0)
			return true;
		off = (size_t)(l + strlen(l) + 1 - b->buf);
	}
	return false;
}

static bool utf8_valid(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2 : (*p & 0xf8) == 0xf0 ? 3 : -1;
		if (n < 0)
			return false;
		p++;
		for (int i = 0; i < n; i++, p++)
			if ((*p & 0xc0) != 0x80)
				return false;
	}
	return true;
}

static bool bytes_contain(const char *data, size_t len, const char *needle)
{
	size_t n = strlen(needle);
	for (size_t i = 0; i + n <= len; i++)
		if (memcmp(data + i, needle, n) == 0)
			return true;
	return false;
}

static void test_writer_reader_round_trip(void)
{
	char path[] = "/tmp/kiln-tar-names-XXXXXX";
	int fd = mkstemp(path);
	kiln_buf got = KILN_BUF_INIT;
	kiln_error *err = NULL;
	char *data = NULL;
	size_t len = 0;

	close(fd);
	if (write_tar(path) < 0) {
		CHECK(!"write");
		goto out;
	}
	read_tar(path, &got);
	for (size_t i = 0; i < N_NAMES; i++) {
		char *l = kiln_xasprintf("%s.sym", names[i]), *h = kiln_xasprintf("%s.hard", names[i]);
		CHECK(has(&got, names[i], ""));
		CHECK(has(&got, l, names[i]));
		CHECK(has(&got, h, names[i]));
		if (!has(&got, names[i], ""))
			printf("#   lost name %zu\n", i);
		free(l);
		free(h);
	}
	/* UTF-8 names as plain PAX records (as Go writes them); the rest marked binary */
	CHECK(kiln_read_file(path, &data, &len, 0, &err) == 0);
	char *rec = kiln_xasprintf("path=%s\n", names[0]);
	CHECK(bytes_contain(data, len, rec));
	free(rec);
	size_t binary = 0;
	for (size_t i = 0; i + 17 <= len; i++)
		if (memcmp(data + i, "hdrcharset=BINARY", 17) == 0)
			binary++;
	size_t want = 0;
	for (size_t i = 0; i < N_NAMES; i++)
		want += utf8_valid(names[i]) ? 0 : 3;
	CHECK_INT(binary, want);
out:
	kiln_error_free(err);
	free(data);
	kiln_buf_free(&got);
	unlink(path);
}

/* One PAX record "LEN KEY=VALUE\n". */
static void pax_rec(kiln_buf *b, const char *key, const char *value)
{
	size_t body = strlen(key) + strlen(value) + 3, n = body + 1;
	while ((size_t)snprintf(NULL, 0, "%zu", n) + body != n)
		n = (size_t)snprintf(NULL, 0, "%zu", n) + body;
	kiln_buf_addf(b, "%zu %s=%s\n", n, key, value);
}

static void ustar_header(char *h, const char *name, char type, size_t size, const char *link)
{
	unsigned sum = 0;
	memset(h, 0, 512);
	snprintf(h, 100, "%s", name);
	memcpy(h + 100, "0000644", 7);
	memcpy(h + 108, "0000000", 7);
	memcpy(h + 116, "0000000", 7);
	snprintf(h + 124, 12, "%011zo", size);
	memcpy(h + 136, "00000000000", 11);
	h[156] = type;
	snprintf(h + 157, 100, "%s", link);
	memcpy(h + 257, "ustar\00000", 8);
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += (unsigned char)h[i];
	snprintf(h + 148, 8, "%06o", sum);
}

/* Go's archive/tar writes a name that is not ASCII as a PAX record of its raw
 * bytes, without hdrcharset, whether or not it is UTF-8. */
static void test_go_style_pax_names(void)
{
	kiln_buf t = KILN_BUF_INIT, got = KILN_BUF_INIT;
	char h[512], path[] = "/tmp/kiln-tar-go-XXXXXX";
	int fd = mkstemp(path);

	for (size_t i = 0; i < N_NAMES; i++) {
		kiln_buf p = KILN_BUF_INIT;
		pax_rec(&p, "path", names[i]);
		pax_rec(&p, "linkpath", names[(i + 1) % N_NAMES]);
		ustar_header(h, "PaxHeaders/x", 'x', p.len, "");
		kiln_buf_add(&t, h, 512);
		kiln_buf_add(&t, p.buf, p.len);
		for (size_t k = p.len; k % 512; k++)
			kiln_buf_addc(&t, '\0');
		ustar_header(h, "placeholder", '2', 0, "l");
		kiln_buf_add(&t, h, 512);
		kiln_buf_free(&p);
	}
	for (int i = 0; i < 1024; i++)
		kiln_buf_addc(&t, '\0');
	CHECK(write(fd, t.buf, t.len) == (ssize_t)t.len);
	close(fd);
	read_tar(path, &got);
	for (size_t i = 0; i < N_NAMES; i++)
		CHECK(has(&got, names[i], names[(i + 1) % N_NAMES]));
	/* and the rootfs merge reads them as the same bytes */
	rootfs_tree *rt = rootfs_tree_new(NULL);
	kiln_error *err = NULL;
	kiln_buf list = KILN_BUF_INIT;
	CHECK(rootfs_tree_apply_buffer(rt, 0, t.buf, t.len, "go", &err) == 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	rootfs_tree_list(rt, &list);
	for (size_t i = 0; i < N_NAMES; i++) {
		char *line = kiln_xasprintf("\n%s l 0644 0 0 0 1 -> %s\n", names[i], names[(i + 1) % N_NAMES]);
		CHECK(list.buf && strstr(list.buf, line) != NULL);
		free(line);
	}
	kiln_buf_free(&list);
	kiln_error_free(err);
	rootfs_tree_free(rt);
	kiln_buf_free(&t);
	kiln_buf_free(&got);
	unlink(path);
}

/* A layer written by the builder (COPY, RUN capture) and read by the rootfs
 * merge: every name and symlink target arrives as the same bytes. */
static void test_layer_write_then_merge(void)
{
	char home[] = "/tmp/kiln-tar-layer-XXXXXX";
	build_store *s = NULL;
	kiln_error *err = NULL;
	struct build_changes ch = { 0 };
	struct build_layer l;
	char *src = NULL, *blob = NULL, *data = NULL;
	size_t len = 0;
	rootfs_tree *rt = rootfs_tree_new(NULL);
	kiln_buf list = KILN_BUF_INIT, got = KILN_BUF_INIT;

	CHECK(mkdtemp(home) != NULL);
	src = kiln_path_join(home, "content");
	CHECK(kiln_write_atomic(src, "x", 1, 0644, &err) == 0);
	ch.cap = 2 * N_NAMES + 4;
	ch.v = kiln_xcalloc(ch.cap, sizeof(*ch.v));
	ch.v[ch.n++] = (struct build_item){ .dest = kiln_xstrdup("d-\xc3\xa9"), .mode = S_IFDIR | 0755 };
	char *dir2 = kiln_xasprintf("d-\xc3\xa9/%s", names[0]);
	ch.v[ch.n++] = (struct build_item){ .dest = dir2, .mode = S_IFDIR | 0755 };
	for (size_t i = 0; i < N_NAMES; i++) {
		ch.v[ch.n++] = (struct build_item){ .dest = kiln_xstrdup(names[i]), .src = kiln_xstrdup(src),
						    .mode = S_IFREG | 0644, .size = 1 };
		ch.v[ch.n++] = (struct build_item){ .dest = kiln_xasprintf("%s.sym", names[i]),
						    .mode = S_IFLNK | 0777, .link = kiln_xstrdup(names[i]) };
	}
	build_changes_finish(&ch);
	if (build_store_open(home, &s, &err) < 0 || build_layer_write(s, &ch, BUILD_GZIP, 0, &l, &err) < 0) {
		printf("#   %s\n", kiln_error_message(err));
		CHECK(!"layer written");
		goto out;
	}
	blob = build_store_blob_path(s, l.digest);
	read_tar(blob, &got);
	for (size_t i = 0; i < N_NAMES; i++) {
		char *sym = kiln_xasprintf("%s.sym", names[i]);
		CHECK(has(&got, names[i], ""));
		CHECK(has(&got, sym, names[i]));
		free(sym);
	}
	CHECK(kiln_read_file(blob, &data, &len, 0, &err) == 0);
	CHECK(rootfs_tree_apply_buffer(rt, 0, data, len, "layer", &err) == 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	rootfs_tree_list(rt, &list);
	for (size_t i = 0; i < N_NAMES; i++) {
		char *line = kiln_xasprintf("%s f 0644 0 0 1 1", names[i]);
		char *sym = kiln_xasprintf("%s.sym l 0777 0 0 0 1 -> %s", names[i], names[i]);
		CHECK(list.buf && strstr(list.buf, line) != NULL);
		CHECK(list.buf && strstr(list.buf, sym) != NULL);
		free(line);
		free(sym);
	}
out:
	kiln_error_free(err);
	kiln_buf_free(&list);
	kiln_buf_free(&got);
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
	init_names();
	RUN(test_writer_reader_round_trip);
	RUN(test_go_style_pax_names);
	RUN(test_layer_write_then_merge);
	return test_done();
}
