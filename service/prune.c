/* prune.c — the team's step cache on the server, pruned by age and size
 * (`kiln cache prune --remote`, POST /build/v1/cache/prune), with its
 * context store and the linked context copies no build holds. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service/internal.h"

struct entry {
	char *path;
	int64_t last_used;
	uint64_t size;
};

static int by_age(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	return x->last_used < y->last_used ? -1 : x->last_used > y->last_used;
}

/* Bytes under dir (files only, not following links). */
static uint64_t du(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	uint64_t total = 0;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		struct stat sb;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char *p = kiln_path_join(dir, e->d_name);
		if (lstat(p, &sb) == 0)
			total += S_ISDIR(sb.st_mode) ? du(p) : (uint64_t)sb.st_blocks * 512;
		free(p);
	}
	closedir(d);
	return total;
}

/* The team's step cache (its KILN_HOME): entries unused for older_than_s go,
 * then the least recently used until the store fits max_bytes; blobs no
 * image or remaining entry references go with them (`kiln cache prune`). */
int svc_cache_prune(svc *s, const char *team, uint64_t max_bytes, int64_t older_than_s, struct svc_prune_stats *st,
		    kiln_error **err)
{
	char *home = svc_team_dir(s, team, "home"), *cdir = kiln_path_join(home, "cache");
	struct entry *v = NULL;
	size_t n = 0, cap = 0;
	DIR *d;
	struct dirent *e;
	int ret = -1;
	int64_t now = svc_now();

	memset(st, 0, sizeof(*st));
	if (max_bytes == 0)
		max_bytes = s->cfg.cache_max;
	if (older_than_s < 0)
		older_than_s = s->cfg.cache_age_s;
	{
		char *store = svc_team_dir(s, team, "context"), *linked = svc_team_dir(s, team, "linked");
		st->bytes_before = du(home) + du(store) + du(linked);
		free(store);
		free(linked);
	}
	d = opendir(cdir);
	while (d && (e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);
		char *data = NULL;
		size_t len = 0;
		kiln_error *e2 = NULL;
		if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0)
			continue;
		char *p = kiln_path_join(cdir, e->d_name);
		json_t *j = NULL;
		if (kiln_read_file(p, &data, &len, 1 << 20, &e2) == 0)
			j = json_loadb(data, len, 0, NULL);
		kiln_error_free(e2);
		free(data);
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			v = kiln_xrealloc(v, cap * sizeof(*v));
		}
		json_t *lu = json_object_get(j, "last_used");
		v[n].path = p;
		v[n].last_used = json_is_integer(lu) ? json_integer_value(lu) : 0;
		v[n].size = (uint64_t)json_integer_value(json_object_get(j, "size"));
		n++;
		json_decref(j);
	}
	if (d)
		closedir(d);
	qsort(v, n, sizeof(*v), by_age);
	uint64_t total = du(home);
	for (size_t i = 0; i < n; i++) {
		if (v[i].last_used > now - older_than_s && total <= max_bytes)
			break;
		if (unlink(v[i].path) == 0) {
			st->entries_removed++;
			total = total > v[i].size ? total - v[i].size : 0;
		}
	}
	/* a pruned step runs again: no build of the team is answered from an
	 * earlier one's record any more (replay.c) */
	if (st->entries_removed) {
		const char *p[] = { team };
		if (svc_db_q(s->db, NULL, "UPDATE svc_builds SET replay = NULL WHERE team = $1 AND replay IS NOT NULL",
			     p, 1, err) < 0)
			goto out;
	}
	/* the blobs of removed entries: kiln's own prune of the team's store */
	if (st->entries_removed) {
		kiln_strv a = KILN_STRV_INIT;
		kiln_strv_push(&a, s->exe);
		kiln_strv_push(&a, "cache");
		kiln_strv_push(&a, "prune");
		kiln_strv_push(&a, "--older-than");
		kiln_strv_push_owned(&a, kiln_xasprintf("%llds", (long long)older_than_s));
		ret = svc_exec_quiet(s, a.v, home, err);
		kiln_strv_free(&a);
		if (ret < 0)
			goto out;
	}
	/* then the context store, in what the budget leaves */
	uint64_t home_bytes = du(home), ctx_bytes = 0;
	if (svc_context_prune(s, team, max_bytes > home_bytes ? max_bytes - home_bytes : 0, older_than_s,
			      &st->files_removed, &ctx_bytes, err) < 0)
		goto out;
	st->bytes_after = home_bytes + ctx_bytes;
	ret = 0;
out:
	for (size_t i = 0; i < n; i++)
		free(v[i].path);
	free(v);
	free(cdir);
	free(home);
	return ret;
}
