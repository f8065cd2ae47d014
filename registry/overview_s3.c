/* overview_s3.c — the dashboard's /kiln/v1/ (overview.c) with the S3
 * backend, whose metadata is objects in the bucket (meta_s3.c): a
 * repository's manifests, links, tags and tag history listed, each manifest
 * and each tag's newest change read once (KILN_PARALLEL_MAX at a time), the
 * same sizes, history and counts as the filesystem's queries give.  It
 * costs listings and a GET per manifest and tag: fine for a page, not for a
 * hot path. */
#include <stdlib.h>
#include <string.h>

#include "registry/internal.h"

struct man {
	char digest[KILN_DIGEST_MAX];
	int64_t size, mtime;
	char *media_type;
	struct oci_manifest m;
	bool ok;         /* read and parsed */
};

struct scan {
	struct man *man;
	size_t nman;
	json_t *links;    /* digest: size (the repository's blob links) */
	json_t *owner;    /* blob digest: index in man of the earliest manifest referencing it */
	kiln_strv tags;   /* names */
	int64_t *tag_mtime;
	int64_t first;    /* the oldest object's time */
};

struct listing {
	kiln_strv keys;
	int64_t *size, *mtime;
	size_t strip;
};

static int list_cb(void *ud, const char *key, int64_t size, int64_t mtime)
{
	struct listing *l = ud;

	l->size = kiln_xrealloc(l->size, (l->keys.n + 1) * sizeof(*l->size));
	l->mtime = kiln_xrealloc(l->mtime, (l->keys.n + 1) * sizeof(*l->mtime));
	l->size[l->keys.n] = size;
	l->mtime[l->keys.n] = mtime;
	kiln_strv_push(&l->keys, strlen(key) > l->strip ? key + l->strip : "");
	return 0;
}

static int list(const reg_store *st, const char *prefix, struct listing *l, kiln_error **err)
{
	*l = (struct listing){ .keys = KILN_STRV_INIT, .strip = strlen(prefix) };
	return reg_s3_list(&st->s3, prefix, NULL, 0, list_cb, l, NULL, err);
}

static void listing_free(struct listing *l)
{
	kiln_strv_free(&l->keys);
	free(l->size);
	free(l->mtime);
}

/* "sha256/HEX" (a key's tail) -> "sha256:HEX"; false when it is not one. */
static bool key_digest(const char *k, char out[KILN_DIGEST_MAX])
{
	const char *slash = strchr(k, '/');

	if (slash == NULL || snprintf(out, KILN_DIGEST_MAX, "%.*s:%s", (int)(slash - k), k, slash + 1) >= KILN_DIGEST_MAX)
		return false;
	return kiln_digest_parse(out, NULL, NULL) == 0;
}

static void scan_free(struct scan *sc)
{
	for (size_t i = 0; i < sc->nman; i++) {
		free(sc->man[i].media_type);
		oci_manifest_free(&sc->man[i].m);
	}
	free(sc->man);
	json_decref(sc->links);
	json_decref(sc->owner);
	kiln_strv_free(&sc->tags);
	free(sc->tag_mtime);
	*sc = (struct scan){ .tags = KILN_STRV_INIT };
}

static const struct man *find(const struct scan *sc, const char *digest)
{
	for (size_t i = 0; i < sc->nman; i++)
		if (strcmp(sc->man[i].digest, digest) == 0)
			return &sc->man[i];
	return NULL;
}

static char *rprefix(const char *repo, const char *kind)
{
	return kiln_xasprintf("repositories/%s/%s/", repo, kind);
}

/* Was m stored before n (by time, then digest)? */
static bool earlier(const struct man *m, const struct man *n)
{
	return m->mtime < n->mtime || (m->mtime == n->mtime && strcmp(m->digest, n->digest) < 0);
}

struct man_job {
	const reg_store *st;
	const char *prefix;
	const struct listing *l;
	struct man *man;
};

/* Manifest i of the listing, read and parsed into man[i] (ok unless it
 * was deleted meanwhile or is not one kiln could have stored). */
static int read_man(void *ud, size_t i, unsigned worker, kiln_error **err)
{
	struct man_job *j = ud;
	struct man *m = &j->man[i];
	kiln_buf b = KILN_BUF_INIT;
	char *key;
	int r;

	(void)worker;
	if (!key_digest(j->l->keys.v[i], m->digest))
		return 0;
	key = kiln_xasprintf("%s%s", j->prefix, j->l->keys.v[i]);
	r = reg_s3_get_small(&j->st->s3, key, (size_t)64 << 20, &b, &m->media_type, err);
	free(key);
	if (r == 1 && oci_manifest_parse(b.buf ? b.buf : "", b.len, m->media_type, &m->m, NULL) == 0) {
		m->ok = true;
		m->size = (int64_t)b.len;
		m->mtime = j->l->mtime[i];
	} else {
		free(m->media_type);
		m->media_type = NULL;
	}
	kiln_buf_free(&b);
	return r < 0 ? -1 : 0;
}

/* A repository's manifests (read and parsed), blob links with their sizes
 * (from the manifests' descriptors, else the link's body) and tags. */
static int scan(const reg_store *st, const char *repo, struct scan *sc, kiln_error **err)
{
	struct listing l = { .keys = KILN_STRV_INIT };
	char *prefix = rprefix(repo, "_manifests");
	json_t *sizes = json_object(); /* blob digest: size, as the manifests' descriptors say */
	int ret = -1;

	*sc = (struct scan){ .links = json_object(), .owner = json_object(), .tags = KILN_STRV_INIT, .first = INT64_MAX };
	if (list(st, prefix, &l, err) < 0)
		goto out;
	sc->man = kiln_xcalloc(l.keys.n + 1, sizeof(*sc->man));
	struct man_job job = { st, prefix, &l, sc->man };
	if (kiln_parallel(l.keys.n, KILN_PARALLEL_MAX, read_man, &job, err) < 0) {
		sc->nman = l.keys.n; /* so that scan_free frees what was read */
		goto out;
	}
	for (size_t i = 0; i < l.keys.n; i++) { /* those read, in the listing's order */
		if (!sc->man[i].ok)
			continue;
		if (sc->man[i].mtime < sc->first)
			sc->first = sc->man[i].mtime;
		if (i != sc->nman) {
			sc->man[sc->nman] = sc->man[i];
			memset(&sc->man[i], 0, sizeof(sc->man[i]));
		}
		sc->nman++;
	}
	/* each blob's size and the earliest manifest referencing it, once */
	for (size_t j = 0; j < sc->nman; j++)
		for (size_t k = 0; k < sc->man[j].m.nrefs; k++) {
			const struct oci_ref *f = &sc->man[j].m.refs[k];
			json_t *o = json_object_get(sc->owner, f->digest);
			if (f->kind == OCI_REF_MANIFEST)
				continue;
			if (o == NULL || earlier(&sc->man[j], &sc->man[json_integer_value(o)]))
				json_object_set_new(sc->owner, f->digest, json_integer((json_int_t)j));
			if (json_object_get(sizes, f->digest) == NULL)
				json_object_set_new(sizes, f->digest, json_integer(f->size));
		}
	listing_free(&l);
	free(prefix);
	prefix = rprefix(repo, "_layers");
	if (list(st, prefix, &l, err) < 0)
		goto out;
	for (size_t i = 0; i < l.keys.n; i++) {
		char d[KILN_DIGEST_MAX];
		json_t *known;
		int64_t size = -1;

		if (!key_digest(l.keys.v[i], d))
			continue;
		if ((known = json_object_get(sizes, d)) != NULL)
			size = json_integer_value(known);
		if (size < 0) { /* linked, referenced by no manifest: the link holds its size */
			int r = reg_s3m_blob_linked(st, repo, d, &size, err);
			if (r < 0)
				goto out;
			if (r == 0)
				continue;
		}
		if (l.mtime[i] < sc->first)
			sc->first = l.mtime[i];
		json_object_set_new(sc->links, d, json_integer(size));
	}
	listing_free(&l);
	free(prefix);
	prefix = rprefix(repo, "_tags");
	if (list(st, prefix, &l, err) < 0)
		goto out;
	sc->tags = l.keys;
	sc->tag_mtime = l.mtime;
	l.keys = (kiln_strv)KILN_STRV_INIT;
	l.mtime = NULL;
	ret = 0;
out:
	json_decref(sizes);
	listing_free(&l);
	free(prefix);
	if (ret < 0)
		scan_free(sc);
	return ret;
}

/* m's blobs (digest: size) that are linked here, as the filesystem's
 * manifest_refs joined with blob_links. */
static json_t *blob_set(const struct scan *sc, const struct man *m)
{
	json_t *set = json_object();

	for (size_t k = 0; m && k < m->m.nrefs; k++) {
		const struct oci_ref *f = &m->m.refs[k];
		json_t *v = json_object_get(sc->links, f->digest);
		if (f->kind != OCI_REF_MANIFEST && v)
			json_object_set(set, f->digest, v);
	}
	return set;
}

/* The newest change of repo:tag to digest, and the note on it (NULL: none),
 * walking its history back: for a tag whose newest change is not its digest. */
static int note_of(const reg_store *st, const char *repo, const char *tag, const char *digest, char **note,
		   kiln_error **err)
{
	char *prefix = kiln_xasprintf("repositories/%s/_history/%s/", repo, tag);
	struct listing l;
	kiln_buf b = KILN_BUF_INIT;
	size_t dl = strlen(digest);
	int ret = -1;

	*note = NULL;
	if (list(st, prefix, &l, err) < 0)
		goto out;
	/* keys are NANOSECONDS-RANDOM, listed in order: the newest last */
	for (size_t i = l.keys.n; i-- > 0;) {
		char *key = kiln_xasprintf("%s%s", prefix, l.keys.v[i]);
		int r;

		kiln_buf_reset(&b);
		r = reg_s3_get_small(&st->s3, key, 1024, &b, NULL, err);
		free(key);
		if (r < 0)
			goto out;
		if (r == 0 || b.len < dl || strncmp(b.buf, digest, dl) != 0)
			continue;
		if (b.len > dl + 1 && b.buf[dl] == ' ')
			*note = kiln_xstrndup(b.buf + dl + 1, b.len - dl - 1);
		break;
	}
	ret = 0;
out:
	listing_free(&l);
	kiln_buf_free(&b);
	free(prefix);
	return ret;
}

static bool sig_tag(const char *t, const char *suffix)
{
	size_t n = strlen(t), sn = strlen(suffix);

	return strncmp(t, "sha256-", 7) == 0 && n > 7 + sn && strcmp(t + n - sn, suffix) == 0;
}

/* The tag's digest (its object's body); 0 when it is gone. */
static int tag_digest(const reg_store *st, const char *repo, const char *tag, char d[KILN_DIGEST_MAX],
		      kiln_error **err)
{
	char *key = kiln_xasprintf("repositories/%s/_tags/%s", repo, tag);
	kiln_buf b = KILN_BUF_INIT;
	int r = reg_s3_get_small(&st->s3, key, KILN_DIGEST_MAX, &b, NULL, err);

	if (r == 1) {
		snprintf(d, KILN_DIGEST_MAX, "%s", b.buf ? b.buf : "");
		if (kiln_digest_parse(d, NULL, NULL) < 0)
			r = 0;
	}
	kiln_buf_free(&b);
	free(key);
	return r;
}

/* What a tag row needs of the bucket beyond the scan. */
struct trow {
	const char *tag;
	int64_t updated;
	char digest[KILN_DIGEST_MAX], att[KILN_DIGEST_MAX];
	char *note;
	bool found;
};

struct tag_job {
	const reg_store *st;
	const char *repo;
	const json_t *newest; /* tag: key of its newest change */
	const json_t *names;  /* every tag of the repository */
	struct trow *rows;
};

/* A tag's digest and the build note on it, from its newest change ("DIGEST
 * NOTE": one GET), which a tag put always writes; the tag object, and the
 * history walked back, when it has none. */
static int resolve(const struct tag_job *j, const char *tag, char d[KILN_DIGEST_MAX], char **note, kiln_error **err)
{
	const char *key = json_string_value(json_object_get(j->newest, tag));
	kiln_buf b = KILN_BUF_INIT;
	int r = 0;

	*note = NULL;
	if (key) {
		r = reg_s3_get_small(&j->st->s3, key, 1024, &b, NULL, err);
		if (r == 1) {
			size_t dl = strcspn(b.buf ? b.buf : "", " ");
			snprintf(d, KILN_DIGEST_MAX, "%.*s", (int)dl, b.buf ? b.buf : "");
			if (kiln_digest_parse(d, NULL, NULL) < 0)
				r = 0; /* a deletion, or not one of ours */
			else if (b.len > dl + 1)
				*note = kiln_xstrndup(b.buf + dl + 1, b.len - dl - 1);
		}
	}
	kiln_buf_free(&b);
	if (r != 0)
		return r;
	if ((r = tag_digest(j->st, j->repo, tag, d, err)) <= 0)
		return r;
	return note_of(j->st, j->repo, tag, d, note, err) < 0 ? -1 : 1;
}

static int read_tag(void *ud, size_t i, unsigned worker, kiln_error **err)
{
	struct tag_job *j = ud;
	struct trow *t = &j->rows[i];
	char *att, *unused = NULL;
	int r;

	(void)worker;
	if ((r = resolve(j, t->tag, t->digest, &t->note, err)) <= 0)
		return r;
	t->found = true;
	att = kiln_xasprintf("sha256-%s.att", kiln_digest_hex(t->digest));
	if (json_object_get(j->names, att) && resolve(j, att, t->att, &unused, err) < 0)
		r = -1;
	free(unused);
	free(att);
	return r < 0 ? -1 : 0;
}

static void tag_row(const struct scan *sc, const struct trow *t, const json_t *names, json_t *tags, int64_t *logical)
{
	const struct man *m = find(sc, t->digest);
	int64_t bytes = 0, fresh = 0, blobs = 0;
	char *sig;

	if (!t->found || m == NULL)
		return;
	for (size_t k = 0; k < m->m.nrefs; k++) {
		const struct oci_ref *f = &m->m.refs[k];
		json_t *v = json_object_get(sc->links, f->digest);

		if (f->kind == OCI_REF_MANIFEST || v == NULL)
			continue;
		blobs++;
		bytes += json_integer_value(v);
		/* new: no manifest stored before this one references it */
		if (&sc->man[json_integer_value(json_object_get(sc->owner, f->digest))] == m)
			fresh += json_integer_value(v);
	}
	*logical += m->size + bytes;
	sig = kiln_xasprintf("sha256-%s.sig", kiln_digest_hex(t->digest));
	json_array_append_new(tags, reg_ov_tag_json(&(struct reg_ov_tag){
		.tag = t->tag, .digest = t->digest, .updated = t->updated, .media_type = m->media_type,
		.artifact_type = m->m.artifact_type, .created = m->mtime, .size = m->size + bytes, .blobs = blobs,
		.new_bytes = m->size + fresh, .manifest_size = m->size, .build = t->note,
		.signed_ = json_object_get(names, sig) != NULL, .attestation = t->att[0] ? t->att : NULL }));
	free(sig);
}

static int cmp_updated(const void *a, const void *b)
{
	const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	json_int_t ux = json_integer_value(json_object_get(x, "updated")), uy = json_integer_value(json_object_get(y, "updated"));

	if (ux != uy)
		return ux > uy ? -1 : 1;
	return strcmp(json_string_value(json_object_get(x, "tag")), json_string_value(json_object_get(y, "tag")));
}

/* The repository's tag rows, newest tag first as the filesystem's query
 * orders them: each tag's newest change found in one listing of the
 * repository's history (keys TAG/NANOSECONDS-RANDOM, in order). */
static int tag_rows(const reg_store *st, const char *repo, const struct scan *sc, json_t *tags, int64_t *logical,
		    kiln_error **err)
{
	char *prefix = rprefix(repo, "_history");
	struct listing l = { .keys = KILN_STRV_INIT };
	json_t *newest = json_object(), *names = json_object();
	struct trow *rows = kiln_xcalloc(sc->tags.n + 1, sizeof(*rows));
	size_t n = 0;
	int ret = -1;

	if (list(st, prefix, &l, err) < 0)
		goto out;
	for (size_t i = 0; i < l.keys.n; i++) {
		const char *slash = strchr(l.keys.v[i], '/');
		if (slash) {
			char *tag = kiln_xstrndup(l.keys.v[i], (size_t)(slash - l.keys.v[i]));
			char *key = kiln_xasprintf("%s%s", prefix, l.keys.v[i]);
			json_object_set_new(newest, tag, json_string(key)); /* the last one listed: the newest */
			free(key);
			free(tag);
		}
	}
	for (size_t i = 0; i < sc->tags.n; i++) {
		json_object_set_new(names, sc->tags.v[i], json_true());
		if (!sig_tag(sc->tags.v[i], ".sig") && !sig_tag(sc->tags.v[i], ".att"))
			rows[n++] = (struct trow){ .tag = sc->tags.v[i], .updated = sc->tag_mtime[i] };
	}
	struct tag_job job = { st, repo, newest, names, rows };
	if (kiln_parallel(n, KILN_PARALLEL_MAX, read_tag, &job, err) < 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		tag_row(sc, &rows[i], names, tags, logical);
	kiln_json_array_sort(tags, cmp_updated);
	ret = 0;
out:
	for (size_t i = 0; i < n; i++)
		free(rows[i].note);
	free(rows);
	json_decref(newest);
	json_decref(names);
	listing_free(&l);
	free(prefix);
	return ret;
}

int reg_ov_s3_repo(reg_server *s, const char *repo, json_t **out, kiln_error **err)
{
	const reg_store *st = &s->store;
	struct scan sc;
	json_t *tags = json_array();
	int64_t logical = 0, stored = 0;
	const char *k;
	json_t *x;
	int pub;

	*out = NULL;
	if (scan(st, repo, &sc, err) < 0 || (pub = reg_s3a_public(st, repo, err)) < 0 ||
	    tag_rows(st, repo, &sc, tags, &logical, err) < 0)
		goto fail;
	json_object_foreach(sc.links, k, x)
		stored += json_integer_value(x);
	for (size_t i = 0; i < sc.nman; i++)
		stored += sc.man[i].size;
	*out = json_pack("{s:s,s:b,s:I,s:I,s:I,s:o}", "name", repo, "public", pub == 1, "created",
			 (json_int_t)(sc.first == INT64_MAX ? 0 : sc.first), "stored", (json_int_t)stored, "logical",
			 (json_int_t)logical, "tags", tags);
	scan_free(&sc);
	return 0;
fail:
	json_decref(tags);
	scan_free(&sc);
	return -1;
}

struct change_job {
	const reg_store *st;
	const char *prefix;
	const struct listing *l;
	kiln_buf *body;
	bool *found;
};

static int read_change(void *ud, size_t i, unsigned worker, kiln_error **err)
{
	struct change_job *j = ud;
	char *key = kiln_xasprintf("%s%s", j->prefix, j->l->keys.v[i]);
	int r = reg_s3_get_small(&j->st->s3, key, 1024, &j->body[i], NULL, err);

	(void)worker;
	free(key);
	j->found[i] = r == 1;
	return r < 0 ? -1 : 0;
}

int reg_ov_s3_history(reg_server *s, const char *repo, const char *tag, json_t *out, kiln_error **err)
{
	const reg_store *st = &s->store;
	char *prefix = kiln_xasprintf("repositories/%s/_history/%s/", repo, tag);
	struct listing l = { .keys = KILN_STRV_INIT };
	kiln_buf *body = NULL;
	bool *found = NULL;
	struct scan sc;
	json_t *prev = NULL;
	int ret = -1;

	if (scan(st, repo, &sc, err) < 0) {
		free(prefix);
		return -1;
	}
	if (list(st, prefix, &l, err) < 0)
		goto out;
	body = kiln_xcalloc(l.keys.n + 1, sizeof(*body));
	found = kiln_xcalloc(l.keys.n + 1, sizeof(*found));
	struct change_job job = { st, prefix, &l, body, found };
	if (kiln_parallel(l.keys.n, KILN_PARALLEL_MAX, read_change, &job, err) < 0)
		goto out;
	for (size_t i = 0; i < l.keys.n; i++) { /* NANOSECONDS-RANDOM: oldest first */
		const char *b = body[i].buf ? body[i].buf : "", *note = NULL;
		char d[KILN_DIGEST_MAX] = "";
		json_t *row, *set;

		if (!found[i])
			continue; /* gone meanwhile */
		if (body[i].len) {
			const char *sp = strchr(b, ' ');
			snprintf(d, sizeof(d), "%.*s", sp ? (int)(sp - b) : (int)body[i].len, b);
			note = sp ? sp + 1 : NULL;
		}
		row = json_pack("{s:I,s:o,s:o}", "at", (json_int_t)(strtoll(l.keys.v[i], NULL, 10) / 1000000000LL),
				"digest", d[0] ? json_string(d) : json_null(), "build", note ? json_string(note) : json_null());
		json_array_append_new(out, row);
		if (!d[0])
			continue;
		set = blob_set(&sc, find(&sc, d));
		reg_ov_change(row, prev, set);
		json_decref(prev);
		prev = set;
	}
	ret = 0;
out:
	for (size_t i = 0; body && i < l.keys.n; i++)
		kiln_buf_free(&body[i]);
	free(body);
	free(found);
	json_decref(prev);
	listing_free(&l);
	scan_free(&sc);
	free(prefix);
	return ret;
}

int reg_ov_s3_team(reg_server *s, struct reg_team_usage *u, kiln_error **err)
{
	const reg_store *st = &s->store;
	kiln_strv names = KILN_STRV_INIT;
	json_t *blobs = json_object(), *mans = json_object(); /* digest: size, each once per team */
	size_t tl = strlen(u->team);
	const char *k;
	json_t *x;
	int ret = -1;

	if (reg_s3m_catalog(st, NULL, -1, &names, NULL, err) < 0)
		goto out;
	for (size_t i = 0; i < names.n; i++) {
		struct scan sc;

		if (strncmp(names.v[i], u->team, tl) != 0 || (names.v[i][tl] != '/' && names.v[i][tl] != '\0'))
			continue;
		if (scan(st, names.v[i], &sc, err) < 0)
			goto out;
		u->repos++;
		u->tags += (int64_t)sc.tags.n;
		json_object_update(blobs, sc.links);
		for (size_t j = 0; j < sc.nman; j++)
			json_object_set_new(mans, sc.man[j].digest, json_integer(sc.man[j].size));
		scan_free(&sc);
	}
	json_object_foreach(blobs, k, x) {
		u->bytes += json_integer_value(x);
		u->blobs++;
	}
	json_object_foreach(mans, k, x)
		u->bytes += json_integer_value(x);
	ret = 0;
out:
	kiln_strv_free(&names);
	json_decref(blobs);
	json_decref(mans);
	return ret;
}
