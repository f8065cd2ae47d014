/* retain.c — retention rules (the config's "retention"): which tags and
 * manifests of a filesystem data directory go, decided and removed inside one
 * sqlite write transaction so a concurrent push is seen whole or not at all.
 * Blobs stay for gc, their grace period restarted (docs/operations.md). */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "registry/internal.h"

struct rule {
	kiln_strv repos;      /* fnmatch(3) patterns of repository names */
	int64_t keep_newest;  /* -1: the rule says nothing about how many tags */
	kiln_strv keep_tags;  /* patterns of tag names it keeps */
	int64_t untagged_s;   /* -1: it says nothing about untagged manifests */
	char *age;            /* untagged_older_than as written, for the reasons */
};

static void rules_free(struct rule *r, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		kiln_strv_free(&r[i].repos);
		kiln_strv_free(&r[i].keep_tags);
		free(r[i].age);
	}
	free(r);
}

/* fnmatch(3) has no "bad pattern" answer: an unclosed [ or a trailing \ would
 * silently match only itself, so they are refused here. */
static const char *glob_problem(const char *p)
{
	if (*p == '\0')
		return "empty";
	for (; *p; p++) {
		if (*p == '\\' && *++p == '\0')
			return "ends in a lone \\";
		if (*p == '[') {
			const char *q = p + 1;
			if (*q == '!' || *q == '^')
				q++;
			if (*q == ']')
				q++;
			while (*q && *q != ']')
				q++;
			if (*q == '\0')
				return "unclosed [";
			p = q;
		}
	}
	return NULL;
}

/* A string or an array of strings, each a valid pattern. */
static int get_patterns(const json_t *v, size_t i, const char *key, kiln_strv *out, kiln_error **err)
{
	size_t k, n = json_is_array(v) ? json_array_size(v) : 1;

	if (!json_is_string(v) && (!json_is_array(v) || n == 0))
		return kiln_err(err, KILN_E_INVALID, "retention[%zu].%s: want a pattern or a non-empty array of them", i,
				key);
	for (k = 0; k < n; k++) {
		const json_t *s = json_is_array(v) ? json_array_get(v, k) : v;
		const char *why;
		if (!json_is_string(s))
			return kiln_err(err, KILN_E_INVALID, "retention[%zu].%s[%zu]: want a string", i, key, k);
		if ((why = glob_problem(json_string_value(s))) != NULL)
			return kiln_err(err, KILN_E_INVALID, "retention[%zu].%s: bad pattern '%s' (%s)", i, key,
					json_string_value(s), why);
		kiln_strv_push(out, json_string_value(s));
	}
	return 0;
}

static int parse_rule(const json_t *o, size_t i, struct rule *r, kiln_error **err)
{
	const char *key;
	json_t *v;

	*r = (struct rule){ .keep_newest = -1, .untagged_s = -1 };
	if (!json_is_object(o))
		return kiln_err(err, KILN_E_INVALID, "retention[%zu]: want an object", i);
	json_object_foreach((json_t *)o, key, v) {
		if (strcmp(key, "repositories") == 0) {
			if (get_patterns(v, i, key, &r->repos, err) < 0)
				return -1;
		} else if (strcmp(key, "keep_tags") == 0) {
			if (get_patterns(v, i, key, &r->keep_tags, err) < 0)
				return -1;
		} else if (strcmp(key, "keep_newest") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 0)
				return kiln_err(err, KILN_E_INVALID, "retention[%zu].keep_newest: want an integer >= 0", i);
			r->keep_newest = json_integer_value(v);
		} else if (strcmp(key, "untagged_older_than") == 0) {
			if (json_is_integer(v) && json_integer_value(v) >= 0) {
				r->untagged_s = json_integer_value(v);
				r->age = kiln_xasprintf("%llds", (long long)r->untagged_s);
			} else if (!json_is_string(v)) {
				return kiln_err(err, KILN_E_INVALID,
						"retention[%zu].untagged_older_than: want a duration (\"7d\", \"12h\", seconds)",
						i);
			} else if (kiln_parse_duration(json_string_value(v), &r->untagged_s, err) < 0) {
				if (err && *err)
					(*err)->kind = KILN_E_INVALID;
				return kiln_error_wrap(err, "retention[%zu].untagged_older_than", i);
			} else {
				r->age = kiln_xstrdup(json_string_value(v));
			}
		} else {
			return kiln_err(err, KILN_E_INVALID, "retention[%zu]: unknown key '%s'", i, key);
		}
	}
	if (r->repos.n == 0)
		return kiln_err(err, KILN_E_INVALID, "retention[%zu].repositories: required", i);
	if (r->keep_newest < 0 && r->keep_tags.n == 0 && r->untagged_s < 0)
		return kiln_err(err, KILN_E_INVALID,
				"retention[%zu]: says nothing (want keep_newest, keep_tags or untagged_older_than)", i);
	return 0;
}

static int parse_rules(const json_t *v, struct rule **out, size_t *n, kiln_error **err)
{
	struct rule *r;
	size_t i, cnt = json_is_array(v) ? json_array_size(v) : 0;

	*out = NULL;
	*n = 0;
	if (!json_is_array(v))
		return kiln_err(err, KILN_E_INVALID, "retention: want an array of rules");
	r = kiln_xcalloc(cnt ? cnt : 1, sizeof(*r));
	for (i = 0; i < cnt; i++)
		if (parse_rule(json_array_get(v, i), i, &r[i], err) < 0) {
			rules_free(r, i + 1);
			return -1;
		}
	*out = r;
	*n = cnt;
	return 0;
}

int reg_retain_check(const json_t *rules, kiln_error **err)
{
	struct rule *r;
	size_t n;

	if (parse_rules(rules, &r, &n, err) < 0)
		return -1;
	rules_free(r, n);
	return 0;
}

/* ---- the run ---- */

struct item {
	char *repo, *tag, *digest, *reason;
};

struct work {
	char *digest, *reason;
};

struct run {
	reg_db *db;
	const reg_store *st;
	int dry;
	int64_t now;
	struct rule *rules;
	size_t nrules;
	/* the repository being looked at */
	int64_t id;
	const char *repo;
	struct work *work;
	size_t nwork, capwork;
	/* everything removed, reported once the transaction is over */
	struct item *items;
	size_t nitems;
	kiln_strv freed;       /* what removed manifests referenced (and they themselves) */
	struct reg_retain_stats *stats;
};

static void add_item(struct run *r, const char *tag, const char *digest, const char *reason)
{
	r->items = kiln_xrealloc(r->items, (r->nitems + 1) * sizeof(*r->items));
	r->items[r->nitems++] = (struct item){ kiln_xstrdup(r->repo), tag ? kiln_xstrdup(tag) : NULL,
					       kiln_xstrdup(digest), kiln_xstrdup(reason) };
	tag ? r->stats->tags_removed++ : r->stats->manifests_removed++;
}

static void add_work(struct run *r, const char *digest, char *reason)
{
	if (r->nwork == r->capwork) {
		r->capwork = r->capwork ? 2 * r->capwork : 64;
		r->work = kiln_xrealloc(r->work, r->capwork * sizeof(*r->work));
	}
	r->work[r->nwork++] = (struct work){ kiln_xstrdup(digest), reason };
}

/* cosign's way to attach a signature without the referrers API: a tag
 * "sha256-HEX[.sig|.att|...]" naming the manifest it belongs to.  Such a
 * tag is no version of the repository: it goes with that manifest. */
static int attachment_tag(const char *name)
{
	size_t hex = strncmp(name, "sha256-", 7) == 0 ? 64 : strncmp(name, "sha512-", 7) == 0 ? 128 : 0;

	if (hex == 0 || strspn(name + 7, "0123456789abcdef") != hex)
		return 0;
	return name[7 + hex] == '\0' || name[7 + hex] == '.';
}

static int matches_any(const kiln_strv *pats, const char *s)
{
	for (size_t i = 0; i < pats->n; i++)
		if (fnmatch(pats->v[i], s, 0) == 0)
			return 1;
	return 0;
}

/* Tags of the repository newest first (their last change: the time, then the
 * history's order within a second); those past the newest N no matching rule
 * keeps are removed.  N is the largest of the matching rules'. */
static int remove_tags(struct run *r, const int *match, kiln_error **err)
{
	static const char sql[] =
		"SELECT t.name, t.digest FROM tags t LEFT JOIN (SELECT tag, max(id) AS last FROM tag_history"
		" WHERE repo = ?1 GROUP BY tag) h ON h.tag = t.name WHERE t.repo = ?1"
		" ORDER BY t.updated DESC, h.last DESC, t.name DESC";
	kiln_strv gone = KILN_STRV_INIT, digests = KILN_STRV_INIT;
	int64_t keep = -1, k = 0;
	size_t first = 0, i;
	sqlite3_stmt *st;
	int rc, ret = -1;

	for (i = r->nrules; i-- > 0;)
		if (match[i] && r->rules[i].keep_newest >= 0 && r->rules[i].keep_newest >= keep) {
			keep = r->rules[i].keep_newest;
			first = i;
		}
	if (keep < 0)
		return 0;
	if ((st = reg_db_prep(r->db, sql, err)) == NULL)
		return -1;
	sqlite3_bind_int64(st, 1, r->id);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 0);
		int kept = 0;

		if (attachment_tag(name))
			continue;
		if (k++ < keep)
			continue;
		for (i = 0; i < r->nrules && !kept; i++)
			kept = match[i] && matches_any(&r->rules[i].keep_tags, name);
		if (!kept) {
			kiln_strv_push(&gone, name);
			kiln_strv_push(&digests, (const char *)sqlite3_column_text(st, 1));
		}
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return reg_db_fail(r->db, err, "retention: tags");
	for (i = 0; i < gone.n; i++) {
		char *why = kiln_xasprintf("retention[%zu].keep_newest=%lld", first, (long long)keep);
		if (reg_db_tag_delete_locked(r->db, r->id, gone.v[i], err) < 0) {
			free(why);
			goto out;
		}
		add_item(r, gone.v[i], digests.v[i], why);
		add_work(r, digests.v[i], kiln_xasprintf("its tags removed (%s)", why));
		free(why);
	}
	ret = 0;
out:
	kiln_strv_free(&gone);
	kiln_strv_free(&digests);
	return ret;
}

/* Untagged manifests older than the longest age of the matching rules that
 * name one; whether each may go is asked later, as for any candidate. */
static int untagged(struct run *r, const int *match, kiln_error **err)
{
	static const char sql[] = "SELECT m.digest FROM manifests m WHERE m.repo = ?1 AND m.created < ?2"
				  " AND NOT EXISTS (SELECT 1 FROM tags t WHERE t.repo = ?1 AND t.digest = m.digest)"
				  " ORDER BY m.created, m.digest";
	int64_t age = -1;
	size_t first = 0;
	sqlite3_stmt *st;
	int rc;

	for (size_t i = r->nrules; i-- > 0;)
		if (match[i] && r->rules[i].untagged_s >= age) {
			age = r->rules[i].untagged_s;
			first = i;
		}
	if (age < 0)
		return 0;
	if ((st = reg_db_prep(r->db, sql, err)) == NULL)
		return -1;
	sqlite3_bind_int64(st, 1, r->id);
	sqlite3_bind_int64(st, 2, r->now - age);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		add_work(r, (const char *)sqlite3_column_text(st, 0),
			 kiln_xasprintf("retention[%zu].untagged_older_than=%s", first, r->rules[first].age));
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : reg_db_fail(r->db, err, "retention: untagged manifests");
}

/* A manifest goes only when nothing in its repository points at it: no tag,
 * no index or other manifest naming it, and no subject it is attached to
 * (a signature stays while what it signs does).  1 it may go, 0 not, -1. */
static int unreferenced(struct run *r, const char *digest, kiln_error **err)
{
	static const char sql[] =
		"SELECT 1 FROM manifests m WHERE m.repo = ?1 AND m.digest = ?2"
		" AND NOT EXISTS (SELECT 1 FROM tags t WHERE t.repo = ?1 AND t.digest = ?2)"
		" AND NOT EXISTS (SELECT 1 FROM manifest_refs f WHERE f.repo = ?1 AND f.digest = ?2)"
		" AND (m.subject IS NULL OR NOT EXISTS (SELECT 1 FROM manifests s WHERE s.repo = ?1 AND s.digest = m.subject))";
	sqlite3_stmt *st = reg_db_prep(r->db, sql, err);
	int rc;

	if (st == NULL)
		return -1;
	sqlite3_bind_int64(st, 1, r->id);
	sqlite3_bind_text(st, 2, digest, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return reg_db_fail(r->db, err, "retention: references");
	return rc == SQLITE_ROW;
}

/* Column 0 (and 1) of a query binding (repo id, text a) into out (and out2). */
static int rows(struct run *r, const char *sql, const char *a, kiln_strv *out, kiln_strv *out2, kiln_error **err)
{
	sqlite3_stmt *st = reg_db_prep(r->db, sql, err);
	int rc;

	if (st == NULL)
		return -1;
	sqlite3_bind_int64(st, 1, r->id);
	sqlite3_bind_text(st, 2, a, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		kiln_strv_push(out, (const char *)sqlite3_column_text(st, 0));
		if (out2)
			kiln_strv_push(out2, (const char *)sqlite3_column_text(st, 1));
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : reg_db_fail(r->db, err, "retention: lookup");
}

/* Removes a manifest the way a user's DELETE does, then puts what hung on it
 * up for removal: its attachment tags' manifests, its referrers and an
 * index's manifests (each still asked whether something else holds it). */
static int remove_manifest(struct run *r, const char *digest, const char *reason, kiln_error **err)
{
	kiln_strv refs = KILN_STRV_INIT, kinds = KILN_STRV_INIT, tags = KILN_STRV_INIT, tagged = KILN_STRV_INIT,
		  subs = KILN_STRV_INIT;
	char *att = kiln_xstrdup(digest);
	int ret = -1;
	size_t i;

	att[strcspn(att, ":")] = '-';
	if (rows(r, "SELECT digest, kind FROM manifest_refs WHERE repo = ?1 AND manifest = ?2", digest, &refs, &kinds,
		 err) < 0 ||
	    /* "ATT" and "ATT.*" as a range of the primary key ('/' follows '.') */
	    rows(r, "SELECT name, digest FROM tags WHERE repo = ?1 AND (name = ?2 OR (name > ?2 || '.' AND name < ?2 || '/'))",
		 att, &tags, &tagged, err) < 0 ||
	    rows(r, "SELECT digest FROM manifests WHERE repo = ?1 AND subject = ?2", digest, &subs, NULL, err) < 0)
		goto out;
	if (reg_db_manifest_delete_locked(r->db, r->id, digest, err) < 0)
		goto out;
	add_item(r, NULL, digest, reason);
	kiln_strv_push(&r->freed, digest);
	for (i = 0; i < refs.n; i++) {
		kiln_strv_push(&r->freed, refs.v[i]);
		if (atoi(kinds.v[i]) == OCI_REF_MANIFEST)
			add_work(r, refs.v[i], kiln_xasprintf("in removed index %s", digest));
	}
	for (i = 0; i < tags.n; i++) {
		char *why;
		if (!attachment_tag(tags.v[i])) /* the prefix matched: "sha256-HEX" or "sha256-HEX.*" */
			continue;
		why = kiln_xasprintf("attachment of removed %s", digest);
		if (reg_db_tag_delete_locked(r->db, r->id, tags.v[i], err) < 0) {
			free(why);
			goto out;
		}
		add_item(r, tags.v[i], tagged.v[i], why);
		add_work(r, tagged.v[i], why);
	}
	for (i = 0; i < subs.n; i++)
		add_work(r, subs.v[i], kiln_xasprintf("referrer of removed %s", digest));
	ret = 0;
out:
	free(att);
	kiln_strv_free(&refs);
	kiln_strv_free(&kinds);
	kiln_strv_free(&tags);
	kiln_strv_free(&tagged);
	kiln_strv_free(&subs);
	return ret;
}

static void work_clear(struct run *r)
{
	for (size_t i = 0; i < r->nwork; i++) {
		free(r->work[i].digest);
		free(r->work[i].reason);
	}
	r->nwork = 0;
}

/* Removes each queued manifest nothing holds; the queue grows as removals
 * free what hung on them. */
static int drain(struct run *r, kiln_error **err)
{
	int ret = 0;

	for (size_t i = 0; i < r->nwork && ret == 0; i++) {
		int free_ = unreferenced(r, r->work[i].digest, err);
		if (free_ < 0 || (free_ && remove_manifest(r, r->work[i].digest, r->work[i].reason, err) < 0))
			ret = -1;
	}
	work_clear(r);
	return ret;
}

/* What the removed tags take with them first, so a removal is put down to
 * its cause; then the untagged manifests past their age. */
static int retain_repo(struct run *r, const int *match, kiln_error **err)
{
	r->stats->repos++;
	if (remove_tags(r, match, err) < 0 || drain(r, err) < 0 || untagged(r, match, err) < 0)
		return work_clear(r), -1;
	return drain(r, err);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* What became unreferenced, by gc's own test, is counted at its size on disk
 * and (for real) touched: gc's grace period then runs from this removal, so a
 * pull that read the manifest just before still gets its blobs. */
static int count_freed(struct run *r, kiln_error **err)
{
	if (r->freed.n > 1)
		qsort(r->freed.v, r->freed.n, sizeof(char *), cmp_str);
	for (size_t i = 0; i < r->freed.n; i++) {
		struct stat sb;
		char *path;
		int ref;

		if ((i > 0 && strcmp(r->freed.v[i], r->freed.v[i - 1]) == 0) || kiln_digest_parse(r->freed.v[i], NULL, NULL) < 0)
			continue;
		if ((ref = reg_gc_referenced(r->db, r->freed.v[i], err)) < 0)
			return -1;
		if (ref)
			continue;
		path = reg_store_blob_path(r->st, r->freed.v[i]);
		if (stat(path, &sb) == 0) {
			r->stats->blobs_freed++;
			r->stats->bytes_freed += (uint64_t)sb.st_size;
			if (!r->dry && utimensat(AT_FDCWD, path, NULL, 0) < 0)
				kiln_warn("registry retain: cannot touch %s: %s", path, strerror(errno));
		}
		free(path);
	}
	return 0;
}

static int run_all(struct run *r, kiln_error **err)
{
	kiln_strv names = KILN_STRV_INIT, ids = KILN_STRV_INIT;
	int *match = kiln_xcalloc(r->nrules ? r->nrules : 1, sizeof(*match));
	int ret = -1;
	size_t i, k;

	/* (rows() binds parameters this query does not have: sqlite ignores them) */
	if (rows(r, "SELECT name, id FROM repos ORDER BY name", "", &names, &ids, err) < 0)
		goto out;
	for (i = 0; i < names.n; i++) {
		int any = 0;
		for (k = 0; k < r->nrules; k++)
			any |= match[k] = matches_any(&r->rules[k].repos, names.v[i]);
		if (!any)
			continue;
		r->repo = names.v[i];
		r->id = strtoll(ids.v[i], NULL, 10);
		if (retain_repo(r, match, err) < 0)
			goto out;
	}
	ret = count_freed(r, err);
out:
	free(match);
	kiln_strv_free(&names);
	kiln_strv_free(&ids);
	return ret;
}

int reg_retain(const struct reg_config *c, int dry_run, reg_retain_fn fn, void *ud, struct reg_retain_stats *st,
	       kiln_error **err)
{
	struct run r = { .dry = dry_run, .now = reg_db_now(), .stats = st };
	struct reg_admin a;
	int ret = -1;

	memset(st, 0, sizeof(*st));
	if (c->s3_endpoint)
		return kiln_err(err, KILN_E_USAGE,
				"retention needs the filesystem metadata backend (meta.db); with S3 the metadata is in "
				"the bucket, which retention does not handle");
	if (c->retention == NULL)
		return 0;
	if (parse_rules(c->retention, &r.rules, &r.nrules, err) < 0)
		return -1;
	if (reg_admin_open(&a, c, err) < 0) {
		rules_free(r.rules, r.nrules);
		return kiln_error_wrap(err, "retain %s", c->data_dir);
	}
	r.db = a.db;
	r.st = &a.st;
	pthread_mutex_lock(&a.db->lock);
	/* The run dirties pages all over tags, manifests and their history: with
	 * sqlite's default 2 MiB cache they spill to the WAL and are read back
	 * (255 MiB of reads for 10,000 tags); this connection is ours alone. */
	sqlite3_exec(a.db->h, "PRAGMA cache_size = -131072", NULL, NULL, NULL);
	/* One transaction: a push waits for it (busy timeout) rather than being
	 * seen half-way, and a dry run is the real run rolled back. */
	if (reg_db_exec(a.db, "BEGIN IMMEDIATE", err) == 0) {
		if (run_all(&r, err) == 0 && (dry_run || reg_db_exec(a.db, "COMMIT", err) == 0))
			ret = 0;
		if (ret < 0 || dry_run)
			sqlite3_exec(a.db->h, "ROLLBACK", NULL, NULL, NULL);
	}
	pthread_mutex_unlock(&a.db->lock);
	for (size_t i = 0; i < r.nitems; i++) {
		struct reg_retain_item it = { r.items[i].repo, r.items[i].tag, r.items[i].digest, r.items[i].reason };
		if (ret == 0 && fn)
			fn(ud, &it);
		free(r.items[i].repo);
		free(r.items[i].tag);
		free(r.items[i].digest);
		free(r.items[i].reason);
	}
	if (ret < 0) {
		kiln_error_wrap(err, "retain %s", c->data_dir);
		memset(st, 0, sizeof(*st));
	}
	free(r.items);
	free(r.work);
	kiln_strv_free(&r.freed);
	rules_free(r.rules, r.nrules);
	reg_admin_close(&a);
	return ret;
}
