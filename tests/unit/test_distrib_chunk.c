/* test_distrib_chunk.c — template artifacts without a network: a template
 * made of sparse files is cut into chunks (zero chunks not stored), its
 * manifest and index parse back, a second home assembles an identical
 * template from the chunks; a changed byte changes one chunk; a corrupted
 * chunk is refused and removed; eviction is LRU and spares pinned chunks. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "distrib/distrib.h"
#include "snapshots/snapshots.h"
#include "test.h"

static char *root;

static void write_at(const char *path, off_t size, off_t off, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT, 0644);
	CHECK(fd >= 0);
	CHECK(ftruncate(fd, size) == 0);
	if (len)
		CHECK(pwrite(fd, data, len, off) == (ssize_t)len);
	close(fd);
}

static char *store_blob(const char *home, const char *src)
{
	char d[KILN_DIGEST_MAX];
	kiln_error *err = NULL;
	CHECK_INT(kiln_digest_file(KILN_SHA256, src, d, &err), 0);
	char *dir = kiln_xasprintf("%s/snapshots/blobs/sha256", home);
	char *dst = kiln_xasprintf("%s/%s", dir, kiln_digest_hex(d));
	CHECK_INT(kiln_mkdir_p(dir, 0755, &err), 0);
	char *cmd = kiln_xasprintf("cp --sparse=always '%s' '%s'", src, dst);
	CHECK_INT(system(cmd), 0);
	free(cmd);
	free(dir);
	free(dst);
	return kiln_xstrdup(d);
}

static json_t *desc(const char *media, const char *digest, const char *path)
{
	struct stat sb;
	CHECK_INT(stat(path, &sb), 0);
	return json_pack("{s:s, s:s, s:I}", "mediaType", media, "digest", digest, "size", (json_int_t)sb.st_size);
}

/* A template in home/snapshots with a rootfs and memory of which only a
 * few chunks hold data; byte `mark` at 3 MiB of the rootfs varies. */
static char *make_template(const char *home, const char *name, unsigned char mark)
{
	char *dir = kiln_xasprintf("%s/src-%s", home, name);
	char *rootfs = kiln_path_join(dir, "rootfs"), *mem = kiln_path_join(dir, "mem"), *state = kiln_path_join(dir, "state");
	char *disk = kiln_path_join(dir, "disk");
	kiln_error *err = NULL;
	unsigned char page[4096];

	CHECK_INT(kiln_mkdir_p(dir, 0755, &err), 0);
	memset(page, 0x5a, sizeof(page));
	write_at(rootfs, 16 << 20, 0, page, sizeof(page));
	write_at(rootfs, 16 << 20, 3 << 20, &mark, 1);
	write_at(rootfs, 16 << 20, (16 << 20) - 10, "end", 3);
	write_at(mem, 32 << 20, 5 << 20, page, sizeof(page));
	write_at(state, 0, 0, "device state", 12);
	char *d_root = store_blob(home, rootfs);
	char *root_blob = kiln_xasprintf("%s/snapshots/blobs/sha256/%s", home, kiln_digest_hex(d_root));
	/* As snap_finalize stores it: the backing named relative to the blob directory. */
	char *cmd = kiln_xasprintf("qemu-img create -q -u -f qcow2 -F raw -b '%s' '%s' 16M", kiln_digest_hex(d_root), disk);
	CHECK_INT(system(cmd), 0);
	char *d_mem = store_blob(home, mem), *d_state = store_blob(home, state), *d_disk = store_blob(home, disk);
	json_t *cfg = json_pack("{s:i, s:s, s:s, s:[]}", "schemaVersion", 1, "mediaType", KILN_TMPL_CONFIG_MEDIA, "start",
				"true", "env");
	json_object_set_new(cfg, "rootfs", desc("application/vnd.kiln.rootfs.ext4", d_root, rootfs));
	json_object_set_new(cfg, "memory", desc("application/vnd.kiln.memory.raw", d_mem, mem));
	json_object_set_new(cfg, "state", desc("application/vnd.kiln.qemu-state", d_state, state));
	json_object_set_new(cfg, "disk", desc("application/vnd.kiln.disk.qcow2", d_disk, disk));
	char *text = kiln_json_dumps_canonical(cfg), d_cfg[KILN_DIGEST_MAX];
	kiln_digest_buf(KILN_SHA256, text, strlen(text), d_cfg);
	char *cfg_path = kiln_xasprintf("%s/snapshots/blobs/sha256/%s", home, kiln_digest_hex(d_cfg));
	CHECK_INT(kiln_write_atomic(cfg_path, text, strlen(text), 0444, &err), 0);
	char *refdir = kiln_xasprintf("%s/snapshots/refs/%s", home, name), *ref = kiln_path_join(refdir, "latest");
	CHECK_INT(kiln_mkdir_p(refdir, 0755, &err), 0);
	char *line = kiln_xasprintf("%s\n", d_cfg);
	CHECK_INT(kiln_write_atomic(ref, line, strlen(line), 0644, &err), 0);
	CHECK(err == NULL);
	kiln_error_free(err);
	json_decref(cfg);
	free(line), free(ref), free(refdir), free(cfg_path), free(text), free(cmd), free(root_blob);
	free(d_root), free(d_mem), free(d_state), free(d_disk);
	free(rootfs), free(mem), free(state), free(disk), free(dir);
	return kiln_xstrdup(d_cfg);
}

static size_t nonzero_chunks(const struct dist_tmpl_part *p)
{
	size_t n = 0;
	for (size_t i = 0; i < p->nchunks; i++)
		n += p->chunks[i] != NULL;
	return n;
}

static void test_round_trip(void)
{
	char *a = kiln_path_join(root, "a"), *b = kiln_path_join(root, "b");
	struct dist_tmpl t = { 0 }, u = { 0 }, v = { 0 };
	kiln_error *err = NULL;
	dist_chunks *ca, *cb;

	setenv("KILN_HOME", a, 1);
	char *d1 = make_template(a, "app", 1);
	/* a recorded working set (snapshots/workset.c): all of the memory */
	char *wsd = kiln_path_join(a, "snapshots/worksets"), *wsf = kiln_xasprintf("%s/%s.json", wsd, kiln_digest_hex(d1));
	const char *ws = "{\"memory\":[[0,1073741824]],\"rootfs\":[[0,4096]]}";
	CHECK_INT(kiln_mkdir_p(wsd, 0755, &err), 0);
	CHECK_INT(kiln_write_atomic(wsf, ws, strlen(ws), 0644, &err), 0);
	free(wsd);
	free(wsf);
	ca = dist_chunks_open(NULL, &err);
	CHECK(ca != NULL);
	CHECK_INT(dist_tmpl_make(ca, "app", &t, &err), 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	CHECK_STR(t.config_digest, d1);
	CHECK_INT(t.nparts, 4);
	/* rootfs: 16 MiB in 256 KiB chunks, three hold data; memory (64 KiB chunks) one; disk and state. */
	CHECK_INT(t.parts[0].chunk_size, 256 << 10);
	CHECK_INT(t.parts[0].nchunks, 64);
	CHECK_INT(t.parts[1].chunk_size, 64 << 10);
	CHECK_INT(dist_tmpl_chunk_size((uint64_t)700 << 20, 256 << 10), 256 << 10);
	CHECK_INT(dist_tmpl_chunk_size((uint64_t)8 << 30, 64 << 10), 1 << 20);
	CHECK_INT(dist_tmpl_chunk_size((uint64_t)40 << 30, 256 << 10), 8 << 20);
	CHECK_INT(nonzero_chunks(&t.parts[0]), 3);
	CHECK_INT(nonzero_chunks(&t.parts[1]), 1);
	CHECK_INT(nonzero_chunks(&t.parts[3]), 1);
	CHECK(oci_tmpl_is_artifact(t.manifest, t.manifest_len));

	/* What a puller sees: manifest and index parse back to the same table. */
	CHECK_INT(dist_tmpl_parse(&u, t.manifest, t.manifest_len, &err), 0);
	CHECK_STR(u.config_digest, t.config_digest);
	CHECK_STR(u.index_digest, t.index_digest);
	CHECK_INT(u.nblobs, t.nblobs);
	CHECK_INT(dist_tmpl_parse_index(&u, t.index, t.index_len, &err), 0);
	CHECK_INT(u.nparts, 4);
	for (size_t p = 0; p < u.nparts && p < t.nparts; p++) {
		CHECK_STR(u.parts[p].digest, t.parts[p].digest);
		for (size_t i = 0; i < u.parts[p].nchunks; i++)
			CHECK((u.parts[p].chunks[i] == NULL) == (t.parts[p].chunks[i] == NULL));
		/* the working set travels in the index, as chunk numbers of data chunks */
		CHECK_INT(u.parts[p].nfirst, t.parts[p].nfirst);
		for (size_t k = 0; k < u.parts[p].nfirst && k < t.parts[p].nfirst; k++) {
			CHECK_INT(u.parts[p].first[k], t.parts[p].first[k]);
			CHECK(u.parts[p].chunks[u.parts[p].first[k]] != NULL);
		}
	}
	CHECK_INT(u.parts[1].nfirst, nonzero_chunks(&t.parts[1])); /* memory: every data chunk */
	CHECK(u.parts[0].nfirst <= 1);                              /* rootfs: chunk 0, if it holds data */
	CHECK_INT(u.parts[2].nfirst, 0);
	u.config = kiln_xstrndup(t.config, t.config_len);
	/* The file server's record: the index alone gives the same blobs and parts. */
	struct dist_tmpl r;
	CHECK_INT(dist_tmpl_parse_index_only(&r, t.index, t.index_len, &err), 0);
	CHECK_INT(r.nblobs, t.nblobs);
	for (size_t i = 0; i < r.nblobs && i < t.nblobs; i++)
		CHECK_STR(r.blobs[i].digest, t.blobs[i].digest);
	CHECK_INT(r.nparts, 4);
	for (size_t p = 0; p < r.nparts && p < t.nparts; p++) {
		CHECK_INT(r.parts[p].nchunks, t.parts[p].nchunks);
		CHECK_INT(r.parts[p].nfirst, t.parts[p].nfirst);
		for (size_t i = 0; i < r.parts[p].nchunks && i < t.parts[p].nchunks; i++)
			CHECK(r.parts[p].chunks[i] == NULL ? t.parts[p].chunks[i] == NULL
							   : t.parts[p].chunks[i] && strcmp(r.parts[p].chunks[i], t.parts[p].chunks[i]) == 0);
	}
	dist_tmpl_free(&r);
	CHECK_INT(dist_tmpl_parse_index_only(&r, "{\"schemaVersion\":1,\"parts\":[],\"blobs\":[7]}", 42, &err), -1);
	kiln_error_clear(&err);
	dist_tmpl_free(&r);

	/* Another host: its chunk store gets the blobs, then assembles. */
	setenv("KILN_HOME", b, 1);
	cb = dist_chunks_open(NULL, &err);
	for (size_t i = 0; i < t.nblobs; i++) {
		char *data = NULL;
		size_t len = 0;
		char d[KILN_DIGEST_MAX];
		CHECK_INT(dist_chunks_get(ca, t.blobs[i].digest, &data, &len, &err), 0);
		CHECK_INT(dist_chunks_put(cb, data, len, d, &err), 0);
		CHECK_STR(d, t.blobs[i].digest);
		free(data);
	}
	char *got = dist_tmpl_assemble(cb, &u, "pulled/app:v1", &err);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	CHECK(got != NULL);
	if (got)
		CHECK_STR(got, d1); /* nothing rewritten: the builder's digest */
	snap_template *st = snap_template_open("pulled/app:v1", &err);
	CHECK(st != NULL);
	if (st) {
		char *mem = snap_template_blob(st, "memory", &err), *rootfs = snap_template_blob(st, "rootfs", &err);
		struct stat sb;
		CHECK_INT(stat(mem, &sb), 0);
		CHECK_INT(sb.st_size, 32 << 20);
		CHECK(sb.st_blocks * 512 <= 256 << 10); /* zero chunks stayed holes */
		/* The disk's backing name, relative, resolves to this home's rootfs blob. */
		char *disk = snap_template_blob(st, "disk", &err);
		char *cmd = kiln_xasprintf("qemu-img info --output=json '%s' | grep -q '\"full-backing-filename\": \"%s\"'", disk, rootfs);
		CHECK_INT(system(cmd), 0);
		free(cmd), free(disk), free(mem), free(rootfs);
		snap_template_free(st);
	}

	/* Version 2 changes one byte: one new chunk. */
	setenv("KILN_HOME", a, 1);
	free(make_template(a, "app2", 2));
	CHECK_INT(dist_tmpl_make(ca, "app2", &v, &err), 0);
	size_t fresh = 0;
	for (size_t i = 0; i < v.nblobs; i++)
		fresh += !dist_chunks_has(cb, v.blobs[i].digest);
	/* the rootfs chunk with the byte, and the disk (it names the new rootfs blob) */
	CHECK(fresh >= 1 && fresh <= 1 + v.parts[2].nchunks);

	/* An index whose file digest is not the config's is refused before anything is stored. */
	char saved[KILN_DIGEST_MAX];
	snprintf(saved, sizeof(saved), "%s", u.parts[1].digest);
	snprintf(u.parts[1].digest, KILN_DIGEST_MAX, "%s", t.parts[0].digest);
	setenv("KILN_HOME", b, 1);
	char *bad = dist_tmpl_assemble(cb, &u, "pulled/app:bad", &err);
	CHECK(bad == NULL);
	CHECK(err && strstr(kiln_error_message(err), "is not the config's"));
	kiln_error_clear(&err);
	snprintf(u.parts[1].digest, KILN_DIGEST_MAX, "%s", saved);

	/* A corrupted chunk in the store is refused, removed, and the assembly fails. */
	char *p = dist_chunks_path(cb, t.parts[0].chunks[0]);
	chmod(p, 0644);
	write_at(p, 0, 0, "garbage", 7);
	setenv("KILN_HOME", b, 1);
	char *again = dist_tmpl_assemble(cb, &u, "pulled/app:v2", &err);
	CHECK(again == NULL);
	CHECK(err && strstr(kiln_error_message(err), "corrupted"));
	CHECK(access(p, F_OK) != 0);
	kiln_error_clear(&err);
	snap_template *none = snap_template_open("pulled/app:v2", &err);
	CHECK(none == NULL);
	kiln_error_clear(&err);

	free(again), free(p), free(got), free(d1);
	dist_tmpl_free(&t), dist_tmpl_free(&u), dist_tmpl_free(&v);
	dist_chunks_close(ca), dist_chunks_close(cb);
	free(a), free(b);
}

/* A made artifact is kept (chunks/made/) and a second push takes it as is;
 * a chunk gone from the store, or another working set, makes it again. */
static void test_made_kept(void)
{
	char *c = kiln_path_join(root, "c");
	struct dist_tmpl t = { 0 }, u = { 0 }, v = { 0 }, w = { 0 };
	kiln_error *err = NULL;
	dist_chunks *cs;

	setenv("KILN_HOME", c, 1);
	char *d1 = make_template(c, "app", 1);
	cs = dist_chunks_open(NULL, &err);
	CHECK(cs != NULL);
	if (cs == NULL)
		goto out;
	CHECK_INT(dist_tmpl_make(cs, "app", &t, &err), 0);
	char *made = kiln_path_join(dist_chunks_dir(cs), "made");
	CHECK(access(made, F_OK) == 0);
	/* kept: the same artifact back, the config the template's own */
	CHECK_INT(dist_tmpl_make(cs, "app", &u, &err), 0);
	CHECK_STR(u.manifest_digest, t.manifest_digest);
	CHECK_STR(u.index_digest, t.index_digest);
	CHECK(u.config_len == t.config_len && memcmp(u.config, t.config, t.config_len) == 0);
	CHECK_INT(u.nparts, 4);
	CHECK_INT(u.nblobs, t.nblobs);
	/* a chunk evicted: made again (the chunk back in the store), same artifact */
	char *p = dist_chunks_path(cs, t.blobs[0].digest);
	chmod(p, 0644);
	CHECK_INT(unlink(p), 0);
	CHECK_INT(dist_tmpl_make(cs, "app", &v, &err), 0);
	CHECK_STR(v.manifest_digest, t.manifest_digest);
	CHECK(access(p, F_OK) == 0);
	/* a working set recorded since: another key, another index */
	char *wsd = kiln_path_join(c, "snapshots/worksets"), *wsf = kiln_xasprintf("%s/%s.json", wsd, kiln_digest_hex(d1));
	const char *ws = "{\"memory\":[[0,1073741824]]}";
	CHECK_INT(kiln_mkdir_p(wsd, 0755, &err), 0);
	CHECK_INT(kiln_write_atomic(wsf, ws, strlen(ws), 0644, &err), 0);
	CHECK_INT(dist_tmpl_make(cs, "app", &w, &err), 0);
	CHECK(strcmp(w.index_digest, t.index_digest) != 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	free(wsd), free(wsf), free(p), free(made);
	dist_tmpl_free(&t), dist_tmpl_free(&u), dist_tmpl_free(&v), dist_tmpl_free(&w);
	dist_chunks_close(cs);
out:
	free(d1);
	free(c);
}

/* The chunker's threads change nothing: one or four, the same chunks, and the
 * whole-file digest (holes included) is the file's. */
static void test_threads(void)
{
	char *dir = kiln_path_join(root, "threads"), *f = kiln_path_join(dir, "data");
	struct dist_tmpl_part p1 = { 0 }, p4 = { 0 };
	kiln_error *err = NULL;
	unsigned char *buf = kiln_xmalloc(64 << 10);
	char want[KILN_DIGEST_MAX];

	CHECK_INT(kiln_mkdir_p(dir, 0755, &err), 0);
	setenv("KILN_HOME", dir, 1);
	uint32_t x = 12345;
	for (size_t i = 0; i < (64u << 10); i++) {
		x = x * 1103515245u + 12345u;
		buf[i] = (unsigned char)(x >> 24) & 0x0f; /* compressible, not zero */
	}
	/* 40 chunks of 256 KiB and a short last one: data, holes, an all-zero written chunk */
	off_t size = (off_t)(40 << 18) + 3;
	for (off_t off = 0; off < size - (64 << 10); off += 64 << 10)
		if ((off >> 18) % 3 != 1)
			write_at(f, size, off, buf, 64 << 10);
	memset(buf, 0, 64 << 10);
	for (off_t off = 7 << 18; off < 8 << 18; off += 64 << 10)
		write_at(f, size, off, buf, 64 << 10);
	write_at(f, size, size - 3, "end", 3);
	dist_chunks *cs = dist_chunks_open(NULL, &err);
	CHECK(cs != NULL);
	setenv("KILN_CHUNK_THREADS", "1", 1);
	CHECK_INT(dist_tmpl_chunk_file(cs, f, "rootfs", &p1, &err), 0);
	setenv("KILN_CHUNK_THREADS", "4", 1);
	CHECK_INT(dist_tmpl_chunk_file(cs, f, "rootfs", &p4, &err), 0);
	unsetenv("KILN_CHUNK_THREADS");
	CHECK_INT(kiln_digest_file(KILN_SHA256, f, want, &err), 0);
	CHECK_STR(p1.digest, want);
	CHECK_STR(p4.digest, want);
	CHECK_INT(p1.nchunks, 41);
	CHECK_INT(p4.nchunks, 41);
	CHECK(p1.chunks[1] == NULL && p1.chunks[7] == NULL && p1.chunks[0] != NULL && p1.chunks[40] != NULL);
	for (size_t i = 0; i < p1.nchunks && i < p4.nchunks; i++)
		CHECK(p1.chunks[i] == NULL ? p4.chunks[i] == NULL
					   : p4.chunks[i] != NULL && strcmp(p1.chunks[i], p4.chunks[i]) == 0);
	dist_tmpl_part_free(&p1), dist_tmpl_part_free(&p4);
	/* a file that cannot be read: an error */
	CHECK_INT(dist_tmpl_chunk_file(cs, "/nonexistent/rootfs", "rootfs", &p1, &err), -1);
	CHECK(err != NULL && strstr(kiln_error_message(err), "/nonexistent/rootfs") != NULL);
	kiln_error_clear(&err);
	dist_tmpl_part_free(&p1);
	dist_chunks_close(cs);
	free(buf), free(f), free(dir);
}

/* Chunked while the build runs (prechunk.c): the rootfs in a child process,
 * the rest at the end; the artifact is kept, and is the one a push makes.  A
 * rootfs that is not the template's is refused; a stopped one leaves nothing. */
static void test_prechunk(void)
{
	char *e = kiln_path_join(root, "e");
	struct dist_tmpl t = { 0 }, u = { 0 };
	kiln_error *err = NULL;

	setenv("KILN_HOME", e, 1);
	char *d1 = make_template(e, "app", 7);
	char *other = kiln_path_join(e, "other");
	write_at(other, 8 << 20, 0, "not the rootfs", 14);
	snap_template *st = snap_template_open("app", &err);
	CHECK(st != NULL);
	char *rootfs = st ? snap_template_blob(st, "rootfs", &err) : NULL;
	snap_template_free(st);

	dist_prechunk *pc = dist_prechunk_start(rootfs);
	CHECK(pc != NULL);
	CHECK_INT(dist_prechunk_finish(pc, "app", &err), 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	dist_chunks *cs = dist_chunks_open(NULL, &err);
	CHECK(cs != NULL);
	CHECK_INT(dist_tmpl_make(cs, "app", &t, &err), 0); /* the kept one */
	char *made = kiln_path_join(dist_chunks_dir(cs), "made"), *cmd = kiln_xasprintf("rm -rf '%s'", made);
	CHECK_INT(system(cmd), 0);
	CHECK_INT(dist_tmpl_make(cs, "app", &u, &err), 0); /* made afresh */
	CHECK_STR(t.manifest_digest, u.manifest_digest);
	CHECK_STR(t.index_digest, u.index_digest);

	/* the rootfs written to while it is chunked (the store may have hashed
	 * other bytes), or not the template's size: refused, nothing kept */
	CHECK_INT(system(cmd), 0);
	char *copy = kiln_path_join(e, "copy"), *cp = kiln_xasprintf("cp --sparse=always '%s' '%s'", rootfs, copy);
	CHECK_INT(system(cp), 0);
	pc = dist_prechunk_start(copy);
	CHECK(pc != NULL);
	usleep(20000);
	write_at(copy, 16 << 20, 5 << 20, "x", 1);
	CHECK_INT(dist_prechunk_finish(pc, "app", &err), -1);
	CHECK(err != NULL && strstr(kiln_error_message(err), "changed while it was chunked") != NULL);
	kiln_error_clear(&err);
	CHECK(access(made, F_OK) != 0);
	pc = dist_prechunk_start(other);
	CHECK(pc != NULL);
	CHECK_INT(dist_prechunk_finish(pc, "app", &err), -1);
	CHECK(err != NULL && strstr(kiln_error_message(err), "the template's") != NULL);
	kiln_error_clear(&err);
	CHECK(access(made, F_OK) != 0);
	free(copy), free(cp);

	/* stopped: no temp file left behind */
	pc = dist_prechunk_start(rootfs);
	CHECK(pc != NULL);
	dist_prechunk_abort(pc);
	char *tmp = kiln_path_join(dist_chunks_dir(cs), "tmp"), *ls = kiln_xasprintf("test -z \"$(ls -A '%s')\"", tmp);
	CHECK_INT(system(ls), 0);
	/* switched off */
	setenv("KILN_PRECHUNK", "0", 1);
	CHECK(dist_prechunk_start(rootfs) == NULL);
	unsetenv("KILN_PRECHUNK");

	dist_tmpl_free(&t), dist_tmpl_free(&u);
	dist_chunks_close(cs);
	free(tmp), free(ls), free(made), free(cmd), free(rootfs), free(other), free(d1), free(e);
}

static void test_malformed(void)
{
	struct dist_tmpl t = { 0 };
	kiln_error *err = NULL;
	const char *img = "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
			  "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:"
			  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\",\"size\":0},\"layers\":[]}";
	CHECK(!oci_tmpl_is_artifact(img, strlen(img)));
	CHECK_INT(dist_tmpl_parse(&t, img, strlen(img), &err), -1);
	CHECK(err && strstr(kiln_error_message(err), "not a kiln template"));
	kiln_error_clear(&err);
	dist_tmpl_free(&t);
	/* An index naming a blob the manifest does not list. */
	char *m = kiln_xasprintf("{\"schemaVersion\":2,\"artifactType\":\"%s\",\"config\":{\"mediaType\":\"%s\",\"digest\":"
				 "\"sha256:%064d\",\"size\":2},\"layers\":[{\"mediaType\":\"%s\",\"digest\":\"sha256:%064d\","
				 "\"size\":9}]}", OCI_TMPL_ARTIFACT_TYPE, KILN_TMPL_CONFIG_MEDIA, 1, OCI_TMPL_INDEX_MEDIA, 2);
	CHECK_INT(dist_tmpl_parse(&t, m, strlen(m), &err), 0);
	const char *ix = "{\"schemaVersion\":1,\"blobs\":[],\"parts\":[{\"role\":\"rootfs\",\"digest\":\"sha256:"
			 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\",\"size\":65536,"
			 "\"chunkSize\":65536,\"chunks\":[0]}]}";
	CHECK_INT(dist_tmpl_parse_index(&t, ix, strlen(ix), &err), -1);
	CHECK(err && strstr(kiln_error_message(err), "names no blob"));
	kiln_error_clear(&err);
	dist_tmpl_free(&t);
	/* A working set naming a chunk the part does not have. */
	CHECK_INT(dist_tmpl_parse(&t, m, strlen(m), &err), 0);
	const char *ix2 = "{\"schemaVersion\":1,\"blobs\":[],\"parts\":[{\"role\":\"rootfs\",\"digest\":\"sha256:"
			  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\",\"size\":65536,"
			  "\"chunkSize\":65536,\"chunks\":[-1],\"first\":[1]}]}";
	CHECK_INT(dist_tmpl_parse_index(&t, ix2, strlen(ix2), &err), -1);
	CHECK(err && strstr(kiln_error_message(err), "working set names chunk 1 of 1"));
	kiln_error_clear(&err);
	dist_tmpl_free(&t);
	free(m);
}

static void test_eviction(void)
{
	char *dir = kiln_path_join(root, "evict");
	kiln_error *err = NULL;
	dist_chunks *cs = dist_chunks_open(dir, &err);
	char d[6][KILN_DIGEST_MAX];
	struct dist_chunks_stats st;
	char buf[8192];

	for (int i = 0; i < 6; i++) {
		memset(buf, 'a' + i, sizeof(buf));
		CHECK_INT(dist_chunks_put(cs, buf, sizeof(buf), d[i], &err), 0);
		char *p = dist_chunks_path(cs, d[i]);
		struct timespec ts[2] = { { 1000000 + i, 0 }, { 1000000 + i, 0 } };
		utimensat(AT_FDCWD, p, ts, 0); /* chunk 0 is the oldest */
		free(p);
	}
	dist_chunks_has(cs, d[0]); /* used again: now the newest */
	/* Another process pins chunk 1 (and is alive while we evict). */
	int go[2];
	CHECK_INT(pipe(go), 0);
	pid_t pid = fork();
	if (pid == 0) {
		dist_chunks *c2 = dist_chunks_open(dir, NULL);
		const char *pin[] = { d[1] };
		close(go[0]);
		if (dist_chunks_pin(c2, pin, 1, NULL) < 0 || write(go[1], "p", 1) != 1)
			_exit(1);
		sleep(30); /* killed by the parent */
		_exit(0);
	}
	char c;
	close(go[1]);
	CHECK_INT(read(go[0], &c, 1), 1);
	close(go[0]);
	CHECK_INT(dist_chunks_evict(cs, 0, &st, &err), 0);
	CHECK_INT(st.pinned, 1);
	CHECK_INT(st.evicted, 5);
	CHECK(dist_chunks_has(cs, d[1]));
	CHECK(!dist_chunks_has(cs, d[2]));
	kill(pid, 9);
	waitpid(pid, NULL, 0);
	/* The pin of a dead process no longer counts. */
	CHECK_INT(dist_chunks_evict(cs, 0, &st, &err), 0);
	CHECK_INT(st.evicted, 1);
	CHECK_INT(st.chunks, 0);
	/* A limit: the oldest go first, the recently used stay. */
	for (int i = 0; i < 4; i++) {
		memset(buf, 'k' + i, sizeof(buf));
		CHECK_INT(dist_chunks_put(cs, buf, sizeof(buf), d[i], &err), 0);
		char *p = dist_chunks_path(cs, d[i]);
		struct timespec ts[2] = { { 2000000 + i, 0 }, { 2000000 + i, 0 } };
		utimensat(AT_FDCWD, p, ts, 0);
		free(p);
	}
	CHECK_INT(dist_chunks_evict(cs, 2 * 8192, &st, &err), 0);
	CHECK(!dist_chunks_has(cs, d[0]) && !dist_chunks_has(cs, d[1]));
	CHECK(dist_chunks_has(cs, d[2]) && dist_chunks_has(cs, d[3]));
	/* A download whose bytes do not match its digest never enters. */
	int fd;
	char *tmp = dist_chunks_tmp(cs, &fd, &err);
	CHECK(write(fd, "abc", 3) == 3);
	close(fd);
	CHECK_INT(dist_chunks_commit(cs, tmp, d[0], &err), -1);
	CHECK(err && strstr(kiln_error_message(err), "corrupted"));
	CHECK(access(tmp, F_OK) != 0);
	CHECK(!dist_chunks_has(cs, d[0]));
	kiln_error_clear(&err);
	free(tmp);
	dist_chunks_close(cs);
	free(dir);
}

int main(void)
{
	kiln_error *err = NULL;
	root = kiln_mkdtemp("test-chunk", &err);
	if (root == NULL)
		return 1;
	RUN(test_round_trip);
	RUN(test_made_kept);
	RUN(test_threads);
	RUN(test_prechunk);
	RUN(test_malformed);
	RUN(test_eviction);
	kiln_rm_rf(root, &err);
	free(root);
	return test_done();
}
