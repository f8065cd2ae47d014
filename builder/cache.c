/* cache.c — the step cache: keys from what a step reads (content, mode,
 * owner; never mtimes), entries as small JSON files naming a stored layer,
 * and prune + garbage collection of blobs nothing references any more. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "builder/builder.h"

/* Files this big have their content digest remembered in $KILN_HOME/hashes
 * (one small file per path), keyed by what changes whenever the content can:
 * device, inode, size, mtime and ctime (which no one can set back).  Smaller
 * files are quicker to hash than to look up. */
#define MEMO_MIN_SIZE (1 << 20)

static char *memo_path(build_store *s, const char *abs)
{
	char d[KILN_DIGEST_MAX];
	kiln_digest_buf(KILN_SHA256, abs, strlen(abs), d);
	return kiln_home_path(build_store_home(s), KILN_PATH_HASHES, "%s", kiln_digest_hex(d));
}

int build_file_digest(build_store *s, const char *path, char out[KILN_DIGEST_MAX], kiln_error **err)
{
	struct stat st;
	char *abs = NULL, *memo = NULL, *data = NULL, *tmp = NULL, stamp[160];
	size_t len = 0;
	int rc;
	const char *known = build_store_known_digest(s, path);

	if (known && kiln_digest_parse(known, NULL, NULL) == 0 && strlen(known) < KILN_DIGEST_MAX) {
		snprintf(out, KILN_DIGEST_MAX, "%s", known);
		return 0;
	}
	if (!s || stat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < MEMO_MIN_SIZE ||
	    !(abs = realpath(path, NULL)))
		return kiln_digest_file(KILN_SHA256, path, out, err);
	tmp = kiln_home_path(build_store_home(s), KILN_PATH_TMP, NULL);
	if (strncmp(abs, tmp, strlen(tmp)) == 0 && abs[strlen(tmp)] == '/') { /* a build's scratch: never seen again */
		rc = kiln_digest_file(KILN_SHA256, path, out, err);
		goto out;
	}
	snprintf(stamp, sizeof(stamp), "%llu %llu %lld %lld.%09ld %lld.%09ld ", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino, (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
		 (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
	memo = memo_path(s, abs);
	kiln_error *e = NULL;
	if (kiln_read_file(memo, &data, &len, 512, &e) == 0 && len > strlen(stamp) &&
	    strncmp(data, stamp, strlen(stamp)) == 0 && kiln_digest_parse(data + strlen(stamp), NULL, &e) == 0 &&
	    strlen(data + strlen(stamp)) < KILN_DIGEST_MAX) {
		snprintf(out, KILN_DIGEST_MAX, "%s", data + strlen(stamp));
		rc = 0;
		goto out;
	}
	kiln_error_clear(&e);
	if ((rc = kiln_digest_file(KILN_SHA256, path, out, err)) < 0)
		goto out;
	/* remember it only if the file did not change while it was read and is
	 * older than the clock's granularity (a later write in the same tick
	 * would leave the same ctime: git's "racy" files) */
	struct stat after;
	if (stat(path, &after) == 0 && after.st_ctim.tv_sec == st.st_ctim.tv_sec &&
	    after.st_ctim.tv_nsec == st.st_ctim.tv_nsec && after.st_size == st.st_size &&
	    time(NULL) > st.st_ctim.tv_sec + 2) {
		char *dir = kiln_home_path(build_store_home(s), KILN_PATH_HASHES, NULL), *line = kiln_xasprintf("%s%s", stamp, out);
		if (kiln_mkdir_p(dir, 0700, &e) < 0 || kiln_write_atomic(memo, line, strlen(line), 0600, &e) < 0)
			kiln_error_clear(&e); /* only a memo */
		free(dir);
		free(line);
	}
out:
	free(abs);
	free(memo);
	free(data);
	free(tmp);
	return rc;
}

int build_cache_key_store(build_store *s, const char *parent, const char *instruction, const struct build_changes *ch,
			  char out[KILN_DIGEST_MAX], kiln_error **err)
{
	kiln_hasher *h = kiln_hasher_new(KILN_SHA256);
	kiln_buf line = KILN_BUF_INIT;

	kiln_buf_addf(&line, "kiln-build-cache/1\nparent %s\nstep %zu:%s\n", parent ? parent : "",
		      strlen(instruction), instruction);
	kiln_hasher_update(h, line.buf, line.len);
	for (size_t i = 0; ch && i < ch->n; i++) {
		const struct build_item *it = &ch->v[i];
		char digest[KILN_DIGEST_MAX] = "-";

		if (it->data)
			kiln_digest_buf(KILN_SHA256, it->data, (size_t)it->size, digest);
		if (it->src && build_file_digest(s, it->src, digest, err) < 0) {
			kiln_hasher_free(h);
			kiln_buf_free(&line);
			return kiln_error_wrap(err, "cache key");
		}
		kiln_buf_reset(&line);
		kiln_buf_addf(&line, "%zu:%s %o %u:%u %o %u:%u %zu:%s %s\n", strlen(it->dest), it->dest,
			      (unsigned)it->mode, (unsigned)it->uid, (unsigned)it->gid, (unsigned)it->src_mode,
			      (unsigned)it->src_uid, (unsigned)it->src_gid, it->link ? strlen(it->link) : 0,
			      it->link ? it->link : "", digest);
		/* metadata most files lack adds to the line only when present (older keys stay) */
		if (it->rdev)
			kiln_buf_addf(&line, "rdev %llu\n", (unsigned long long)it->rdev);
		for (size_t k = 0; k < it->n_xattrs; k++) {
			kiln_buf_addf(&line, "xattr %zu:%s %zu:", strlen(it->xattrs[k].name), it->xattrs[k].name,
				      it->xattrs[k].len);
			kiln_buf_add(&line, it->xattrs[k].value, it->xattrs[k].len);
			kiln_buf_addc(&line, '\n');
		}
		kiln_hasher_update(h, line.buf, line.len);
	}
	kiln_hasher_final(h, out);
	kiln_buf_free(&line);
	return 0;
}

int build_cache_key(const char *parent, const char *instruction, const struct build_changes *ch,
		    char out[KILN_DIGEST_MAX], kiln_error **err)
{
	return build_cache_key_store(NULL, parent, instruction, ch, out, err);
}

int build_context_digest(build_store *s, const build_tree *t, char out[KILN_DIGEST_MAX], kiln_error **err)
{
	kiln_hasher *h = kiln_hasher_new(KILN_SHA256);
	kiln_buf line = KILN_BUF_INIT;
	int rc = 0;

	kiln_hasher_update(h, "kiln-context/1\n", 15);
	for (size_t i = 0; i < build_tree_count(t) && rc == 0; i++) {
		const struct build_entry *e = build_tree_entry(t, i);
		char digest[KILN_DIGEST_MAX] = "-";

		if (S_ISREG(e->st.st_mode)) {
			char *p = kiln_path_join(build_tree_root(t), e->path);
			rc = build_file_digest(s, p, digest, err);
			free(p);
		}
		kiln_buf_reset(&line);
		kiln_buf_addf(&line, "%zu:%s %o %zu:%s %s\n", strlen(e->path), e->path, (unsigned)e->st.st_mode,
			      e->link ? strlen(e->link) : 0, e->link ? e->link : "", digest);
		kiln_hasher_update(h, line.buf, line.len);
	}
	kiln_hasher_final(h, out);
	kiln_buf_free(&line);
	return rc < 0 ? kiln_error_wrap(err, "the context's digest") : 0;
}

static char *entry_path(build_store *s, const char *key)
{
	return kiln_home_path(build_store_home(s), KILN_PATH_CACHE, "%s.json", kiln_digest_hex(key));
}

static const char *static_media(const char *mt)
{
	static const enum build_compression all[] = { BUILD_GZIP, BUILD_ZSTD, BUILD_NONE };
	for (size_t i = 0; mt && i < 3; i++)
		if (strcmp(mt, build_layer_media_type(all[i])) == 0)
			return build_layer_media_type(all[i]);
	return NULL;
}

int build_cache_get(build_store *s, const char *key, struct build_layer *out, kiln_error **err)
{
	char *p = entry_path(s, key);
	json_t *j = NULL;
	int rc = 0;

	if (access(p, F_OK) < 0)
		goto out;
	j = kiln_json_load_file(p, err);
	if (!j) {
		/* a damaged entry is a miss, not a failed build */
		kiln_warn("cache entry %s unreadable: %s", p, kiln_error_message(*err));
		kiln_error_clear(err);
		goto out;
	}
	const char *digest = kiln_json_str(j, "layer"), *diff = kiln_json_str(j, "diff_id");
	const char *mt = static_media(kiln_json_str(j, "media_type"));
	if (!digest || !diff || !mt || kiln_digest_parse(digest, NULL, err) < 0 ||
	    kiln_digest_parse(diff, NULL, err) < 0 || !build_store_has_blob(s, digest)) {
		kiln_error_clear(err);
		goto out;
	}
	snprintf(out->digest, sizeof(out->digest), "%s", digest);
	snprintf(out->diff_id, sizeof(out->diff_id), "%s", diff);
	out->size = kiln_json_int(j, "size", 0);
	out->media_type = mt;
	json_object_set_new(j, "last_used", json_integer((json_int_t)time(NULL)));
	if (kiln_json_write_file(p, j, err) < 0)
		kiln_error_clear(err); /* last_used is advisory */
	rc = 1;
out:
	json_decref(j);
	free(p);
	return rc;
}

int build_cache_put(build_store *s, const char *key, const struct build_layer *l, const char *instruction,
		    kiln_error **err)
{
	char *p = entry_path(s, key);
	json_int_t now = (json_int_t)time(NULL);
	json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:I,s:s,s:I,s:I}", "key", key, "layer", l->digest, "diff_id",
			      l->diff_id, "media_type", l->media_type, "size", (json_int_t)l->size, "instruction",
			      instruction, "created", now, "last_used", now);
	int rc = kiln_json_write_file(p, j, err);

	json_decref(j);
	free(p);
	return rc;
}

static int cmp_used(const void *a, const void *b)
{
	json_int_t x = kiln_json_int(*(json_t *const *)a, "last_used", 0);
	json_int_t y = kiln_json_int(*(json_t *const *)b, "last_used", 0);
	return x < y ? -1 : x > y;
}

json_t *build_cache_list(build_store *s, kiln_error **err)
{
	char *dir = kiln_home_path(build_store_home(s), KILN_PATH_CACHE, NULL);
	DIR *d = opendir(dir);
	json_t *arr = json_array();
	struct dirent *de;

	if (!d) {
		if (errno != ENOENT) {
			kiln_err_errno(err, errno, "cache %s", dir);
			json_decref(arr);
			arr = NULL;
		}
		free(dir);
		return arr;
	}
	while ((de = readdir(d)) != NULL) {
		size_t n = strlen(de->d_name);
		if (n < 6 || strcmp(de->d_name + n - 5, ".json") != 0)
			continue;
		char *p = kiln_path_join(dir, de->d_name);
		kiln_error *e2 = NULL;
		json_t *j = kiln_json_load_file(p, &e2);
		if (j && json_is_object(j))
			json_array_append_new(arr, j);
		else
			json_decref(j);
		kiln_error_free(e2);
		free(p);
	}
	closedir(d);
	free(dir);
	/* sort by last use, oldest first */
	kiln_json_array_sort(arr, cmp_used);
	return arr;
}

static void keep(json_t *set, const char *digest)
{
	if (digest)
		json_object_set_new(set, digest, json_true());
}

/* Everything an image references: its manifest, config and layers. */
static void mark_image(build_store *s, json_t *set, const char *manifest)
{
	char *data = NULL;
	size_t len = 0;
	kiln_error *err = NULL;

	keep(set, manifest);
	if (build_store_read(s, manifest, &data, &len, 16 << 20, &err) < 0) {
		kiln_error_free(err);
		return;
	}
	json_t *m = kiln_json_loadb(data, len, manifest, &err);
	free(data);
	if (!m) {
		kiln_error_free(err);
		return;
	}
	keep(set, kiln_json_str(json_object_get(m, "config"), "digest"));
	json_t *layers = json_object_get(m, "layers"), *l;
	size_t i;
	json_array_foreach(layers, i, l)
		keep(set, kiln_json_str(l, "digest"));
	json_decref(m);
}

static int sweep_dir(const char *dir, json_t *set, const char *algo, struct build_prune_stats *st,
		     kiln_error **err)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return errno == ENOENT ? 0 : kiln_err_errno(err, errno, "prune %s", dir);
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char *p = kiln_path_join(dir, de->d_name);
		char *digest = algo ? kiln_xasprintf("%s:%s", algo, de->d_name) : NULL;
		struct stat sb;
		if (!algo && lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) {
			kiln_error *e2 = NULL;
			if (kiln_rm_rf(p, &e2) < 0)
				kiln_error_free(e2);
		} else if (!digest || !json_object_get(set, digest)) {
			if (lstat(p, &sb) == 0 && unlink(p) == 0 && algo) {
				st->blobs++;
				st->bytes += (uint64_t)sb.st_size;
			}
		}
		free(digest);
		free(p);
	}
	closedir(d);
	return 0;
}

int build_cache_prune(build_store *s, bool all, int64_t older_than, struct build_prune_stats *st,
		      kiln_error **err)
{
	json_t *entries = NULL, *images = NULL, *set = json_object();
	time_t now = time(NULL);
	int rc = -1;
	char *dir = NULL;

	memset(st, 0, sizeof(*st));
	if (build_store_lock(s, true, err) < 0)
		goto out;
	entries = build_cache_list(s, err);
	if (!entries)
		goto out;
	size_t i;
	json_t *e;
	json_array_foreach(entries, i, e) {
		json_int_t used = kiln_json_int(e, "last_used", 0);
		const char *key = kiln_json_str(e, "key");
		bool drop = all || (older_than >= 0 && (int64_t)(now - used) >= older_than);
		if (drop && key && kiln_digest_parse(key, NULL, err) == 0) {
			char *p = entry_path(s, key);
			if (unlink(p) == 0)
				st->entries++;
			free(p);
		} else {
			kiln_error_clear(err);
			keep(set, kiln_json_str(e, "layer"));
		}
	}
	images = build_store_images(s, err);
	if (!images)
		goto out;
	const char *name;
	json_t *img;
	json_object_foreach(images, name, img)
		mark_image(s, set, kiln_json_str(img, "digest"));
	dir = kiln_home_path(build_store_home(s), KILN_PATH_BLOBS, "sha256");
	if (sweep_dir(dir, set, "sha256", st, err) < 0)
		goto out;
	free(dir);
	/* the records of the layers that went with them (not counted: no blobs) */
	dir = kiln_home_path(build_store_home(s), KILN_PATH_LAYER_INDEX, NULL);
	struct build_prune_stats records = { 0 };
	if (sweep_dir(dir, set, "sha256", &records, err) < 0)
		goto out;
	free(dir);
	/* temp files: with the lock held exclusively no build is writing them */
	dir = kiln_home_path(build_store_home(s), KILN_PATH_TMP, NULL);
	if (sweep_dir(dir, set, NULL, st, err) < 0)
		goto out;
	/* RUN --mount=type=cache directories are cache too (docker's builder
	 * prune), and the builder VM snapshot is made again on demand */
	free(dir);
	dir = kiln_home_path(build_store_home(s), KILN_PATH_RUN_CACHE, NULL);
	if (all && kiln_rm_rf(dir, err) < 0)
		goto out;
	free(dir);
	dir = kiln_home_path(build_store_home(s), KILN_PATH_BUILDER_VM, NULL);
	if (all && kiln_rm_rf(dir, err) < 0)
		goto out;
	free(dir);
	dir = kiln_home_path(build_store_home(s), KILN_PATH_HASHES, NULL);
	if (all && kiln_rm_rf(dir, err) < 0)
		goto out;
	rc = 0;
out:
	free(dir);
	json_decref(entries);
	json_decref(images);
	json_decref(set);
	return rc;
}
