/* meta_s3.c — repository metadata kept in the S3 bucket itself, so several
 * `kiln serve` replicas on one bucket agree without a shared database: blob
 * links, manifests (bytes + media type), tags, referrer descriptors, the
 * catalog and tag history are objects (layout in docs/registry.md), read
 * through on every request.  Writers also take gc pins (see pin()). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "registry/internal.h"

#define TOMB_WAIT_MS 30000   /* a writer waits this long for gc to finish with a digest */
#define TOMB_STALE_S 600     /* a tomb this old was left by a crashed gc (gc gives up at 300 s) */

/* "sha256:HEX" -> "sha256/HEX" (digests are validated before they get here). */
static char *dpath(const char *digest)
{
	char *s = kiln_xstrdup(digest), *c = strchr(s, ':');

	if (c)
		*c = '/';
	return s;
}

char *reg_s3m_blob_key(const char *digest)
{
	const char *hex = kiln_digest_hex(digest);

	return kiln_xasprintf("blobs/%.*s/%.2s/%s", (int)(hex - 1 - digest), digest, hex, hex);
}

static char *rkey(const char *repo, const char *kind, const char *digest_or_name)
{
	char *d = strchr(digest_or_name, ':') ? dpath(digest_or_name) : kiln_xstrdup(digest_or_name);
	char *k = kiln_xasprintf("repositories/%s/%s/%s", repo, kind, d);

	free(d);
	return k;
}

/* ---- the writer's side of gc (gc_s3.c has the other side) ----
 * A writer about to rely on a blob that already exists (commit of an upload
 * of it, a mount, a manifest referencing it) first PUTs the pin
 * _gc/pins/ALGO/HEX (fresh Last-Modified), then lists the tombs
 * _gc/tombs/ALGO/HEX/.  gc, before deleting a blob, PUTs its tomb, then looks
 * at the pin.  Each side writes, then reads the other's key: with S3's
 * read-after-write consistency either gc sees the fresh pin (and keeps the
 * blob) or the writer sees the tomb (and waits until gc is done, then starts
 * over, finding the blob gone or kept).  A pin protects for gc_pin_s, so a
 * writer must write its reference (link, manifest) within that time: it
 * re-pins when more than half of it has passed. */
struct tombs {
	int n;
	int64_t newest;
};

static int tomb_cb(void *ud, const char *key, int64_t size, int64_t mtime)
{
	struct tombs *t = ud;

	t->n++;
	if (mtime > t->newest)
		t->newest = mtime;
	return 0;
}

/* 1 a live gc tomb is on digest, 0 none (or only stale ones), -1 error. */
static int tombed(const reg_store *st, const char *digest, kiln_error **err)
{
	char *d = dpath(digest), *prefix = kiln_xasprintf("_gc/tombs/%s/", d);
	struct tombs t = { 0, -1 };
	int64_t now;
	int ret = -1;

	if (reg_s3_list(&st->s3, prefix, NULL, 0, tomb_cb, &t, NULL, err) < 0)
		goto out;
	ret = 0;
	if (t.n == 0)
		goto out;
	if (reg_s3_time(&st->s3, &now, err) < 0) {
		ret = -1;
		goto out;
	}
	ret = now - t.newest < TOMB_STALE_S;
out:
	free(d);
	free(prefix);
	return ret;
}

static int pin(const reg_store *st, const char *digest, int64_t *at, kiln_error **err)
{
	char *d = dpath(digest), *key = kiln_xasprintf("_gc/pins/%s", d);
	int ret = -1;

	for (int round = 0; round < 3; round++) {
		int64_t t0 = (int64_t)kiln_now_ms();
		int r;

		*at = t0;
		if (reg_s3_put(&st->s3, key, "", 0, err) < 0 || (r = tombed(st, digest, err)) < 0)
			goto out;
		if (r == 0) {
			/* No tomb after our pin: from here gc keeps the blob if it
			 * exists; the caller looks whether it does. */
			ret = 0;
			goto out;
		}
		/* gc is deciding about this digest: wait for it, then start over. */
		while ((r = tombed(st, digest, err)) == 1) {
			if ((int64_t)kiln_now_ms() - t0 > TOMB_WAIT_MS) {
				kiln_err(err, KILN_E_IO, "blob %s: garbage collection holds it for more than %d s", digest,
					 TOMB_WAIT_MS / 1000);
				goto out;
			}
			kiln_sleep_ms(100);
		}
		if (r < 0)
			goto out;
	}
	kiln_err(err, KILN_E_IO, "blob %s: could not pin it against garbage collection", digest);
out:
	free(d);
	free(key);
	return ret;
}

/* Before writing a reference: still inside the pin's lifetime? */
static int pin_fresh(const reg_store *st, const char *digest, int64_t *at, kiln_error **err)
{
	if ((int64_t)kiln_now_ms() - *at < 1000 * st->pin_s / 2)
		return 0;
	return pin(st, digest, at, err);
}

/* The repository appears in the catalog. */
static int mark_repo(const reg_store *st, const char *repo, kiln_error **err)
{
	char *key = kiln_xasprintf("_catalog/%s", repo);
	int ret = reg_s3_put(&st->s3, key, "", 0, err);

	free(key);
	return ret;
}

static int add_history(const reg_store *st, const char *repo, const char *tag, const char *digest, kiln_error **err)
{
	struct timespec ts;
	uint32_t rnd = 0;
	char *key;
	int ret;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = (uint32_t)getpid();
	key = kiln_xasprintf("repositories/%s/_history/%s/%020lld-%08x", repo, tag,
			     (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, rnd);
	ret = reg_s3_put(&st->s3, key, digest ? digest : "", digest ? strlen(digest) : 0, err);
	free(key);
	return ret;
}

/* ---- blobs ---- */

int reg_s3m_blob_linked(const reg_store *st, const char *repo, const char *digest, int64_t *size, kiln_error **err)
{
	char *key = rkey(repo, "_layers", digest);
	kiln_buf b = KILN_BUF_INIT;
	int ret = reg_s3_get_small(&st->s3, key, 64, &b, NULL, err);

	/* gc deletes links before bytes, writers put bytes before links: a link
	 * names an existing blob, and holds its size. */
	if (ret == 1 && size)
		*size = b.buf ? strtoll(b.buf, NULL, 10) : 0;
	kiln_buf_free(&b);
	free(key);
	return ret;
}

int reg_s3m_blob_unlink(const reg_store *st, const char *repo, const char *digest, kiln_error **err)
{
	char *key = rkey(repo, "_layers", digest);
	int ret = reg_s3_stat(&st->s3, key, NULL, NULL, err);

	if (ret == 1 && reg_s3_delete(&st->s3, key, err) < 0)
		ret = -1;
	free(key);
	return ret;
}

static int put_link(const reg_store *st, const char *repo, const char *digest, int64_t size, kiln_error **err)
{
	char *key = rkey(repo, "_layers", digest), num[32];
	int ret;

	snprintf(num, sizeof(num), "%" PRId64, size);
	ret = reg_s3_put(&st->s3, key, num, strlen(num), err);
	free(key);
	return ret < 0 ? -1 : mark_repo(st, repo, err);
}

int reg_s3m_blob_commit(const reg_store *st, const char *repo, const char *digest, const char *src, int64_t size,
			kiln_error **err)
{
	char *bkey = reg_s3m_blob_key(digest);
	int64_t at, have = -1;
	int r, ret = -1;

	if (pin(st, digest, &at, err) < 0)
		goto out;
	/* Pinned: a blob present now stays; content-addressed, so no second copy. */
	r = reg_s3_stat(&st->s3, bkey, &have, NULL, err);
	if (r < 0)
		goto out;
	if (r == 1 && have == size) {
		unlink(src);
	} else if (st->ops->blob_adopt(st, digest, src, err) < 0) {
		goto out;
	}
	if (pin_fresh(st, digest, &at, err) < 0 || put_link(st, repo, digest, size, err) < 0)
		goto out;
	ret = 0;
out:
	free(bkey);
	return ret;
}

int reg_s3m_blob_mount(const reg_store *st, const char *repo, const char *from, const char *digest, kiln_error **err)
{
	int64_t size, at;
	int r;

	r = reg_s3m_blob_linked(st, from, digest, &size, err);
	if (r <= 0 || strcmp(repo, from) == 0)
		return r;
	if (pin(st, digest, &at, err) < 0)
		return -1;
	/* Pinned, then seen linked in `from` (so present): safe to link here. */
	r = reg_s3m_blob_linked(st, from, digest, &size, err);
	if (r <= 0)
		return r;
	return put_link(st, repo, digest, size, err) < 0 ? -1 : 1;
}

/* ---- manifests and tags ---- */

static int get_tag(const reg_store *st, const char *repo, const char *tag, char digest[KILN_DIGEST_MAX],
		   kiln_error **err)
{
	char *key = rkey(repo, "_tags", tag);
	kiln_buf b = KILN_BUF_INIT;
	int ret = reg_s3_get_small(&st->s3, key, KILN_DIGEST_MAX, &b, NULL, err);

	if (ret == 1) {
		snprintf(digest, KILN_DIGEST_MAX, "%s", b.buf ? b.buf : "");
		if (kiln_digest_parse(digest, NULL, err) < 0) {
			kiln_error_wrap(err, "tag object %s", key);
			ret = -1;
		}
	}
	kiln_buf_free(&b);
	free(key);
	return ret;
}

int reg_s3m_manifest_get(const reg_store *st, const char *repo, const char *ref, char digest[KILN_DIGEST_MAX],
			 char **media_type, kiln_buf *bytes, kiln_error **err)
{
	char *key = NULL;
	int ret;

	if (strchr(ref, ':')) {
		snprintf(digest, KILN_DIGEST_MAX, "%s", ref);
	} else {
		ret = get_tag(st, repo, ref, digest, err);
		if (ret <= 0)
			return ret;
	}
	key = rkey(repo, "_manifests", digest);
	ret = reg_s3_get_small(&st->s3, key, (size_t)64 << 20, bytes, media_type, err);
	if (ret == 1 && *media_type == NULL)
		*media_type = kiln_xstrdup("application/vnd.oci.image.manifest.v1+json");
	free(key);
	return ret;
}

static int put_referrer(const reg_store *st, const char *repo, const char *digest, int64_t size,
			const struct oci_manifest *m, kiln_error **err)
{
	char *s = dpath(m->subject), *d = dpath(digest);
	char *key = kiln_xasprintf("repositories/%s/_referrers/%s/%s", repo, s, d), *body;
	json_t *desc = json_pack("{s:s,s:s,s:I}", "mediaType", m->media_type, "digest", digest, "size", (json_int_t)size);
	int ret;

	if (m->artifact_type)
		json_object_set_new(desc, "artifactType", json_string(m->artifact_type));
	if (m->annotations)
		json_object_set(desc, "annotations", m->annotations);
	body = json_dumps(desc, JSON_COMPACT | JSON_SORT_KEYS);
	ret = reg_s3_put_type(&st->s3, key, body, strlen(body), "application/json", err);
	free(body);
	json_decref(desc);
	free(key);
	free(s);
	free(d);
	return ret;
}

int reg_s3m_manifest_put(const reg_store *st, const char *repo, const char *digest, const kiln_buf *bytes,
			 const struct oci_manifest *m, const char *tag, long *missing, kiln_error **err)
{
	char old[KILN_DIGEST_MAX], *key = NULL;
	int64_t *at = kiln_xcalloc(m->nrefs + 1, sizeof(*at));
	int ret = -1, r;

	/* Every referenced blob pinned and linked in repo, every child manifest here. */
	for (size_t i = 0; i < m->nrefs; i++) {
		const struct oci_ref *ref = &m->refs[i];

		if (ref->external)
			continue;
		if (ref->kind == OCI_REF_MANIFEST) {
			free(key);
			key = rkey(repo, "_manifests", ref->digest);
			r = reg_s3_stat(&st->s3, key, NULL, NULL, err);
		} else {
			r = pin(st, ref->digest, &at[i], err) < 0 ? -1 : reg_s3m_blob_linked(st, repo, ref->digest, NULL, err);
		}
		if (r < 0)
			goto out;
		if (r == 0) {
			*missing = (long)i;
			ret = 0;
			goto out;
		}
	}
	for (size_t i = 0; i < m->nrefs; i++)
		if (!m->refs[i].external && m->refs[i].kind != OCI_REF_MANIFEST &&
		    pin_fresh(st, m->refs[i].digest, &at[i], err) < 0)
			goto out;
	*missing = (long)m->nrefs;
	free(key);
	key = rkey(repo, "_manifests", digest);
	if (reg_s3_put_type(&st->s3, key, bytes->buf ? bytes->buf : "", bytes->len, m->media_type, err) < 0)
		goto out;
	if (m->subject[0] && put_referrer(st, repo, digest, (int64_t)bytes->len, m, err) < 0)
		goto out;
	if (tag) {
		r = get_tag(st, repo, tag, old, err);
		if (r < 0)
			goto out;
		if (r == 0 || strcmp(old, digest) != 0) {
			free(key);
			key = rkey(repo, "_tags", tag);
			if (reg_s3_put(&st->s3, key, digest, strlen(digest), err) < 0 ||
			    add_history(st, repo, tag, digest, err) < 0)
				goto out;
		}
	}
	if (mark_repo(st, repo, err) < 0)
		goto out;
	ret = 1;
out:
	free(at);
	free(key);
	return ret;
}

struct keys {
	kiln_strv v;
	size_t strip;   /* prefix length to drop */
};

static int keys_cb(void *ud, const char *key, int64_t size, int64_t mtime)
{
	struct keys *k = ud;

	kiln_strv_push(&k->v, key + k->strip);
	return 0;
}

int reg_s3m_tag_delete(const reg_store *st, const char *repo, const char *tag, kiln_error **err)
{
	char *key = rkey(repo, "_tags", tag);
	int ret = reg_s3_stat(&st->s3, key, NULL, NULL, err);

	if (ret == 1 && (reg_s3_delete(&st->s3, key, err) < 0 || add_history(st, repo, tag, NULL, err) < 0))
		ret = -1;
	free(key);
	return ret;
}

int reg_s3m_manifest_delete(const reg_store *st, const char *repo, const char *digest, kiln_error **err)
{
	char *mkey = rkey(repo, "_manifests", digest), *prefix = kiln_xasprintf("repositories/%s/_tags/", repo);
	struct keys tags = { KILN_STRV_INIT, strlen(prefix) };
	kiln_buf bytes = KILN_BUF_INIT;
	struct oci_manifest m;
	char *type = NULL, cur[KILN_DIGEST_MAX];
	int ret, parsed = 0;

	ret = reg_s3_get_small(&st->s3, mkey, (size_t)64 << 20, &bytes, &type, err);
	if (ret <= 0)
		goto out;
	ret = -1;
	/* The tags pointing here go first (a tag never outlives its manifest for long). */
	if (reg_s3_list(&st->s3, prefix, NULL, 0, keys_cb, &tags, NULL, err) < 0)
		goto out;
	for (size_t i = 0; i < tags.v.n; i++) {
		int r = get_tag(st, repo, tags.v.v[i], cur, err);
		if (r < 0)
			goto out;
		if (r == 1 && strcmp(cur, digest) == 0 && reg_s3m_tag_delete(st, repo, tags.v.v[i], err) < 0)
			goto out;
	}
	if (oci_manifest_parse(bytes.buf, bytes.len, type, &m, NULL) == 0) {
		parsed = 1;
		if (m.subject[0]) {
			char *s = dpath(m.subject), *d = dpath(digest);
			char *rk = kiln_xasprintf("repositories/%s/_referrers/%s/%s", repo, s, d);
			int r = reg_s3_delete(&st->s3, rk, err);
			free(rk);
			free(s);
			free(d);
			if (r < 0)
				goto out;
		}
	}
	if (reg_s3_delete(&st->s3, mkey, err) < 0)
		goto out;
	ret = 1;
out:
	if (parsed)
		oci_manifest_free(&m);
	kiln_strv_free(&tags.v);
	kiln_buf_free(&bytes);
	free(type);
	free(mkey);
	free(prefix);
	return ret;
}

/* ---- listings ---- */

int reg_s3m_repo_exists(const reg_store *st, const char *repo, kiln_error **err)
{
	char *key = kiln_xasprintf("_catalog/%s", repo);
	int ret = reg_s3_stat(&st->s3, key, NULL, NULL, err);

	free(key);
	return ret;
}

/* Names under prefix after `last`, at most n (n < 0: all). */
static int list_names(const reg_store *st, const char *prefix, const char *last, long n, kiln_strv *out, int *more,
		      kiln_error **err)
{
	struct keys k = { KILN_STRV_INIT, strlen(prefix) };
	char *after = last ? kiln_xasprintf("%s%s", prefix, last) : NULL;
	int ret = reg_s3_list(&st->s3, prefix, after, n < 0 ? 0 : n, keys_cb, &k, more, err);

	for (size_t i = 0; ret == 0 && i < k.v.n; i++)
		kiln_strv_push(out, k.v.v[i]);
	if (n < 0 && more)
		*more = 0;
	kiln_strv_free(&k.v);
	free(after);
	return ret;
}

int reg_s3m_tags(const reg_store *st, const char *repo, const char *last, long n, kiln_strv *out, int *more,
		 kiln_error **err)
{
	char *prefix = kiln_xasprintf("repositories/%s/_tags/", repo);
	int ret = list_names(st, prefix, last, n, out, more, err);

	free(prefix);
	return ret;
}

int reg_s3m_catalog(const reg_store *st, const char *last, long n, kiln_strv *out, int *more, kiln_error **err)
{
	return list_names(st, "_catalog/", last, n, out, more, err);
}

int reg_s3m_referrers(const reg_store *st, const char *repo, const char *subject, const char *artifact_type,
		      json_t *out, kiln_error **err)
{
	char *s = dpath(subject), *prefix = kiln_xasprintf("repositories/%s/_referrers/%s/", repo, s);
	struct keys k = { KILN_STRV_INIT, 0 };
	kiln_buf b = KILN_BUF_INIT;
	int ret = -1;

	if (reg_s3_list(&st->s3, prefix, NULL, 0, keys_cb, &k, NULL, err) < 0)
		goto out;
	for (size_t i = 0; i < k.v.n; i++) {
		json_t *d, *at;
		int r;

		kiln_buf_reset(&b);
		r = reg_s3_get_small(&st->s3, k.v.v[i], (size_t)1 << 20, &b, NULL, err);
		if (r < 0)
			goto out;
		if (r == 0)
			continue; /* deleted meanwhile */
		d = json_loadb(b.buf ? b.buf : "", b.len, 0, NULL);
		if (d == NULL)
			continue;
		at = json_object_get(d, "artifactType");
		if (artifact_type && !(json_is_string(at) && strcmp(json_string_value(at), artifact_type) == 0)) {
			json_decref(d);
			continue;
		}
		json_array_append_new(out, d);
	}
	ret = 0;
out:
	kiln_buf_free(&b);
	kiln_strv_free(&k.v);
	free(prefix);
	free(s);
	return ret;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A note (the build service's "build ID") on the newest change of repo:tag
 * to digest: written into that history object after the digest, "DIGEST
 * NOTE", which reg_s3m_history prints as it is — as the filesystem backend
 * prints a tag_notes row after its change.  No such change: nothing. */
int reg_s3m_tag_note(const reg_store *st, const char *repo, const char *tag, const char *digest, const char *note,
		     kiln_error **err)
{
	char *prefix = kiln_xasprintf("repositories/%s/_history/%s/", repo, tag);
	struct keys k = { KILN_STRV_INIT, 0 };
	kiln_buf b = KILN_BUF_INIT;
	size_t dl = strlen(digest);
	int ret = -1;

	if (reg_s3_list(&st->s3, prefix, NULL, 0, keys_cb, &k, NULL, err) < 0)
		goto out;
	if (k.v.n)
		qsort(k.v.v, k.v.n, sizeof(char *), cmp_str); /* NANOSECONDS-RANDOM: oldest first */
	for (size_t i = k.v.n; i-- > 0;) {
		kiln_buf_reset(&b);
		int r = reg_s3_get_small(&st->s3, k.v.v[i], 1024, &b, NULL, err);
		if (r < 0)
			goto out;
		if (r == 0 || b.len < dl || strncmp(b.buf, digest, dl) != 0 || (b.len > dl && b.buf[dl] != ' '))
			continue;
		char *text = kiln_xasprintf("%s %s", digest, note);
		ret = reg_s3_put(&st->s3, k.v.v[i], text, strlen(text), err);
		free(text);
		goto out;
	}
	ret = 0;
out:
	kiln_strv_free(&k.v);
	kiln_buf_free(&b);
	free(prefix);
	return ret;
}

int reg_s3m_history(const reg_store *st, const char *repo, const char *tag, kiln_buf *out, kiln_error **err)
{
	char *prefix = kiln_xasprintf("repositories/%s/_history/%s%s", repo, tag ? tag : "", tag ? "/" : "");
	struct keys k = { KILN_STRV_INIT, strlen("repositories/") + strlen(repo) + strlen("/_history/") };
	kiln_buf b = KILN_BUF_INIT;
	kiln_strv lines = KILN_STRV_INIT;
	int ret = -1;

	if (reg_s3_list(&st->s3, prefix, NULL, 0, keys_cb, &k, NULL, err) < 0)
		goto out;
	/* Keys are TAG/NANOSECONDS-RANDOM: order by time across tags. */
	for (size_t i = 0; i < k.v.n; i++) {
		const char *slash = strrchr(k.v.v[i], '/');
		char *key = kiln_xasprintf("%s%s", "repositories/", repo), *full;
		long long ns;
		time_t t;
		char when[KILN_TIME_MAX];
		int r;

		full = kiln_xasprintf("%s/_history/%s", key, k.v.v[i]);
		free(key);
		kiln_buf_reset(&b);
		r = reg_s3_get_small(&st->s3, full, 1024, &b, NULL, err);
		free(full);
		if (r < 0)
			goto out;
		if (r == 0 || slash == NULL)
			continue;
		ns = strtoll(slash + 1, NULL, 10);
		t = (time_t)(ns / 1000000000LL);
		kiln_time_rfc3339(t, when);
		kiln_strv_push_owned(&lines, kiln_xasprintf("%.20s %s %.*s %s", slash + 1, when,
							    (int)(slash - k.v.v[i]), k.v.v[i],
							    b.len ? b.buf : "(deleted)"));
	}
	if (lines.n)
		qsort(lines.v, lines.n, sizeof(char *), cmp_str);
	for (size_t i = 0; i < lines.n; i++)
		kiln_buf_addf(out, "%s\n", lines.v[i] + 21);
	if (lines.n == 0) {
		kiln_err(err, KILN_E_NOTFOUND, "no history for %s%s%s", repo, tag ? ":" : "", tag ? tag : "");
		goto out;
	}
	ret = 0;
out:
	kiln_strv_free(&lines);
	kiln_strv_free(&k.v);
	kiln_buf_free(&b);
	free(prefix);
	return ret;
}
