/* gc_s3.c — garbage collection of blobs in the S3 bucket, safe while any
 * number of replicas push: mark (every manifest object of every repository,
 * parsed for its references), sweep (blobs unreferenced and older than the
 * grace period, not pinned, not freshly linked), each removal guarded by a
 * tomb against writers' pins (meta_s3.c explains the protocol); old pins of
 * digests without a blob; and stale multipart uploads aborted. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "registry/internal.h"

#define TOMB_GIVE_UP_S 300   /* never delete under a tomb older than this */
#define TOMB_STALE_S 600     /* tombs older than this were left by a crashed gc */

struct item {
	char *digest, *key;
	int64_t size, mtime;
};

struct items {
	struct item *v;
	size_t n;
};

struct s3gc {
	const reg_store *st;
	const struct reg_config *c;
	int dry;
	int64_t now;
	char id[17];
	struct items manifests, links, pins, blobs, tombs;
	kiln_strv refs;
	struct reg_gc_stats *stats;
};

static void items_free(struct items *it)
{
	for (size_t i = 0; i < it->n; i++) {
		free(it->v[i].digest);
		free(it->v[i].key);
	}
	free(it->v);
	it->v = NULL;
	it->n = 0;
}

static void items_add(struct items *it, const char *digest, const char *key, int64_t size, int64_t mtime)
{
	it->v = kiln_xrealloc(it->v, (it->n + 1) * sizeof(*it->v));
	it->v[it->n++] = (struct item){ digest ? kiln_xstrdup(digest) : NULL, kiln_xstrdup(key), size, mtime };
}

static int cmp_item(const void *a, const void *b)
{
	return strcmp(((const struct item *)a)->digest, ((const struct item *)b)->digest);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "…ALGO/HEX" at the end of a key as "ALGO:HEX", if it is a valid digest. */
static char *key_digest(const char *key)
{
	const char *hex = strrchr(key, '/'), *algo;
	char *d;

	if (hex == NULL || hex == key)
		return NULL;
	for (algo = hex - 1; algo > key && algo[-1] != '/'; algo--)
		;
	d = kiln_xasprintf("%.*s:%s", (int)(hex - algo), algo, hex + 1);
	if (kiln_digest_parse(d, NULL, NULL) < 0) {
		free(d);
		return NULL;
	}
	return d;
}

/* repositories/NAME/_manifests/ALGO/HEX and …/_layers/ALGO/HEX */
static int repo_cb(void *ud, const char *key, int64_t size, int64_t mtime)
{
	struct s3gc *g = ud;
	int man = strstr(key, "/_manifests/") != NULL, lay = strstr(key, "/_layers/") != NULL;
	char *d;

	if (!man && !lay)
		return 0;
	d = key_digest(key);
	if (d)
		items_add(man ? &g->manifests : &g->links, d, key, size, mtime);
	free(d);
	return 0;
}

/* blobs/ALGO/XX/HEX: the digest is ALGO:HEX (XX is a fan-out directory). */
static int blob_cb(void *ud, const char *key, int64_t size, int64_t mtime)
{
	struct s3gc *g = ud;
	const char *algo = key + strlen("blobs/"), *slash = strchr(algo, '/'), *hex = strrchr(key, '/');
	char *d;

	if (slash == NULL || hex == NULL)
		return 0;
	d = kiln_xasprintf("%.*s:%s", (int)(slash - algo), algo, hex + 1);
	if (kiln_digest_parse(d, NULL, NULL) == 0)
		items_add(&g->blobs, d, key, size, mtime);
	free(d);
	return 0;
}

static int pin_cb(void *ud, const char *key, int64_t size, int64_t mtime)
{
	struct s3gc *g = ud;
	char *d = key_digest(key);

	if (d)
		items_add(&g->pins, d, key, size, mtime);
	free(d);
	return 0;
}

static int tomb_cb(void *ud, const char *key, int64_t size, int64_t mtime)
{
	items_add(&((struct s3gc *)ud)->tombs, NULL, key, size, mtime);
	return 0;
}

static const struct item *find(const struct items *it, const char *digest, size_t *first)
{
	size_t lo = 0, hi = it->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (strcmp(it->v[mid].digest, digest) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*first = lo;
	return lo < it->n && strcmp(it->v[lo].digest, digest) == 0 ? &it->v[lo] : NULL;
}

/* Mark: the references of every manifest in every repository. */
static int mark(struct s3gc *g, kiln_error **err)
{
	kiln_buf b = KILN_BUF_INIT;
	int ret = -1;

	for (size_t i = 0; i < g->manifests.n; i++) {
		struct oci_manifest m;
		char *type = NULL;
		int r;

		kiln_buf_reset(&b);
		r = reg_s3_get_small(&g->st->s3, g->manifests.v[i].key, (size_t)64 << 20, &b, &type, err);
		if (r < 0)
			goto out;
		if (r == 0) {
			free(type);
			continue; /* deleted since the listing: it references nothing now */
		}
		/* A manifest that cannot be read stops gc: better keep than guess. */
		r = oci_manifest_parse(b.buf ? b.buf : "", b.len, type, &m, err);
		free(type);
		if (r < 0) {
			kiln_error_wrap(err, "manifest object %s", g->manifests.v[i].key);
			goto out;
		}
		for (size_t k = 0; k < m.nrefs; k++)
			kiln_strv_push(&g->refs, m.refs[k].digest);
		oci_manifest_free(&m);
	}
	if (g->refs.n)
		qsort(g->refs.v, g->refs.n, sizeof(char *), cmp_str);
	ret = 0;
out:
	kiln_buf_free(&b);
	return ret;
}

static int referenced(struct s3gc *g, const char *digest)
{
	const char *key = digest;

	return g->refs.n && bsearch(&key, g->refs.v, g->refs.n, sizeof(char *), cmp_str) != NULL;
}

void (*reg_gc_s3_test_hook)(const char *digest);

/* Remove one unreferenced blob under a tomb: 1 removed, 0 kept, -1 error. */
static int remove_blob(struct s3gc *g, const struct item *blob, kiln_error **err)
{
	const struct reg_s3_cfg *s3 = &g->st->s3;
	char *d = kiln_xstrdup(blob->digest), *pin_key, *tomb_key;
	int64_t pin_mtime = -1, t0 = (int64_t)(kiln_now_ms() / 1e3);
	size_t first;
	int r, ret = -1;

	*strchr(d, ':') = '/';
	pin_key = kiln_xasprintf("_gc/pins/%s", d);
	tomb_key = kiln_xasprintf("_gc/tombs/%s/%s", d, g->id);
	if (reg_s3_put(s3, tomb_key, "", 0, err) < 0)
		goto out;
	if (reg_gc_s3_test_hook)
		reg_gc_s3_test_hook(blob->digest);
	/* After our tomb: a pin written before a writer's tomb check shows here. */
	r = reg_s3_stat(s3, pin_key, NULL, &pin_mtime, err);
	if (r < 0)
		goto untomb;
	if ((r == 1 && pin_mtime >= g->now - g->st->pin_s) || (int64_t)(kiln_now_ms() / 1e3) - t0 > TOMB_GIVE_UP_S) {
		ret = 0;
		goto untomb;
	}
	/* Links first: a link always names an existing blob. */
	find(&g->links, blob->digest, &first);
	for (size_t i = first; i < g->links.n && strcmp(g->links.v[i].digest, blob->digest) == 0; i++)
		if (reg_s3_delete(s3, g->links.v[i].key, err) < 0)
			goto untomb;
	if (reg_s3_delete(s3, blob->key, err) < 0 || reg_s3_delete(s3, pin_key, err) < 0)
		goto untomb;
	ret = 1;
untomb:
	{
		kiln_error *e2 = NULL;
		if (reg_s3_delete(s3, tomb_key, ret < 0 ? &e2 : err) < 0 && ret >= 0)
			ret = -1;
		kiln_error_free(e2);
	}
out:
	free(d);
	free(pin_key);
	free(tomb_key);
	return ret;
}

static int sweep(struct s3gc *g, kiln_error **err)
{
	int64_t grace = g->c->gc_grace_s;

	for (size_t i = 0; i < g->blobs.n; i++) {
		const struct item *b = &g->blobs.v[i], *p;
		size_t first;
		int young = 0, r;

		p = find(&g->pins, b->digest, &first);
		find(&g->links, b->digest, &first);
		for (size_t k = first; k < g->links.n && strcmp(g->links.v[k].digest, b->digest) == 0; k++)
			young |= g->links.v[k].mtime >= g->now - grace;
		if (referenced(g, b->digest) || young || b->mtime >= g->now - grace ||
		    (p && p->mtime >= g->now - g->st->pin_s)) {
			g->stats->blobs_kept++;
			continue;
		}
		r = g->dry ? 1 : remove_blob(g, b, err);
		if (r < 0)
			return -1;
		if (r == 0) {
			g->stats->blobs_kept++;
		} else {
			g->stats->blobs_removed++;
			g->stats->bytes_removed += (uint64_t)b->size;
		}
	}
	return 0;
}

/* Old pins of digests without a blob (removed, or never committed) go too,
 * under the same tomb as a removal, so a writer pinning meanwhile waits. */
static int sweep_pins(struct s3gc *g, kiln_error **err)
{
	for (size_t i = 0; i < g->pins.n && !g->dry; i++) {
		const struct item *p = &g->pins.v[i];
		struct item fake;
		size_t first;
		int r;

		if (p->mtime >= g->now - g->st->pin_s || find(&g->blobs, p->digest, &first))
			continue;
		fake = (struct item){ p->digest, reg_s3m_blob_key(p->digest), 0, 0 };
		r = remove_blob(g, &fake, err);
		free(fake.key);
		if (r < 0)
			return -1;
	}
	return 0;
}

static int multipart_cb(void *ud, const char *key, const char *upload_id, int64_t initiated)
{
	struct s3gc *g = ud;
	kiln_error *err = NULL;

	if (initiated < 0 || g->now - initiated < g->c->upload_expiry_s)
		return 0;
	g->stats->uploads_removed++;
	if (!g->dry && reg_s3_abort_multipart(&g->st->s3, key, upload_id, &err) < 0) {
		kiln_warn("registry gc: %s", kiln_error_message(err));
		kiln_error_free(err);
	}
	return 0;
}

int reg_s3m_gc(const reg_store *st, const struct reg_config *c, int dry_run, struct reg_gc_stats *stats,
	       kiln_error **err)
{
	struct s3gc g = { .st = st, .c = c, .dry = dry_run, .stats = stats, .refs = KILN_STRV_INIT };
	unsigned char rnd[8];
	int ret = -1;

	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		memset(rnd, getpid() & 0xff, sizeof(rnd));
	for (int i = 0; i < 8; i++)
		snprintf(g.id + 2 * i, 3, "%02x", rnd[i]);
	/* One clock for every comparison: the S3 server's. */
	if (reg_s3_time(&st->s3, &g.now, err) < 0)
		goto out;
	if (reg_s3_list(&st->s3, "_gc/tombs/", NULL, 0, tomb_cb, &g, NULL, err) < 0)
		goto out;
	for (size_t i = 0; i < g.tombs.n && !dry_run; i++)
		if (g.tombs.v[i].mtime < g.now - TOMB_STALE_S && reg_s3_delete(&st->s3, g.tombs.v[i].key, err) < 0)
			goto out;
	if (reg_s3_list(&st->s3, "repositories/", NULL, 0, repo_cb, &g, NULL, err) < 0 || mark(&g, err) < 0 ||
	    reg_s3_list(&st->s3, "_gc/pins/", NULL, 0, pin_cb, &g, NULL, err) < 0 ||
	    reg_s3_list(&st->s3, "blobs/", NULL, 0, blob_cb, &g, NULL, err) < 0)
		goto out;
	if (g.links.n)
		qsort(g.links.v, g.links.n, sizeof(struct item), cmp_item);
	if (g.pins.n)
		qsort(g.pins.v, g.pins.n, sizeof(struct item), cmp_item);
	if (g.blobs.n)
		qsort(g.blobs.v, g.blobs.n, sizeof(struct item), cmp_item);
	if (sweep(&g, err) < 0 || sweep_pins(&g, err) < 0 || reg_s3_list_multipart(&st->s3, multipart_cb, &g, err) < 0)
		goto out;
	ret = 0;
out:
	items_free(&g.manifests);
	items_free(&g.links);
	items_free(&g.pins);
	items_free(&g.blobs);
	items_free(&g.tombs);
	kiln_strv_free(&g.refs);
	return ret;
}
