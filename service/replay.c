/* replay.c — a rebuild answered without running a build: when a request's
 * inputs (the request itself, the kiln binary, the bases' digests in this
 * registry) match an earlier build of the team, and what it published is
 * still tagged, the new build is recorded as done with that build's result
 * and log as a rebuild from its step cache prints it — every layer step a
 * hit, nothing run — in one transaction (docs/service.md). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dockerfile-parser/dockerfile.h"
#include "service/internal.h"

/* ADD of a URL or a git repository: content the request does not pin. */
static bool remote_source(const struct df_step *st)
{
	for (size_t i = 0; i + 1 < st->args.n; i++)
		if (strstr(st->args.v[i], "://") || strncmp(st->args.v[i], "git@", 4) == 0)
			return true;
	return false;
}

/* A base the replay can vouch for: in the team's own namespace of this
 * registry (what the build's token may pull), tag or digest resolved now.
 * 1 and digest set; 0 not such a base, or not there (the build says why). */
static int base_digest(svc *s, const char *team, const char *base, char digest[KILN_DIGEST_MAX], kiln_error **err)
{
	struct kiln_ref r;
	char *host = svc_registry_host(s);
	size_t tl = strlen(team);
	int ret = 0;

	if (kiln_ref_parse(base, &r, NULL) < 0) {
		free(host);
		return 0;
	}
	if (r.host && strcmp(r.host, host) == 0 && strncmp(r.name, team, tl) == 0 && r.name[tl] == '/')
		ret = reg_server_resolve(s->srv, r.name, r.digest ? r.digest : r.tag, digest, err);
	kiln_ref_free(&r);
	free(host);
	return ret;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int svc_replay_key(svc *s, const char *team, json_t *req, const struct df_plan *plan, json_t **out,
		   kiln_error **err)
{
	json_t *bases = json_array(), *in = NULL;
	struct stat exe;
	char d[KILN_DIGEST_MAX], *text = NULL;
	int ret = 0;

	*out = NULL;
	/* no_cache asks for steps that run; secrets are not part of the
	 * inputs (the caller replays none: any named here are the client's
	 * word); a build without a name leaves its result only in the team's
	 * home, which nothing here can vouch for; a template is a snapshot of
	 * its start command running, made afresh by every build as locally */
	if (json_is_true(json_object_get(req, "no_cache")) || json_is_true(json_object_get(req, "template")) ||
	    json_object_get(req, "secret_ids") || !json_string_value(json_object_get(req, "name")) ||
	    stat(s->exe, &exe) < 0)
		goto out;
	for (size_t k = 0; k < plan->n_order; k++) {
		const struct df_stage *st = &plan->stages[plan->order[k]];
		if (st->base_stage < 0 && strcmp(st->base, "scratch") != 0) {
			int rc = base_digest(s, team, st->base, d, err);
			if (rc <= 0) {
				ret = rc;
				goto out;
			}
			json_array_append_new(bases, json_string(d));
		}
		for (size_t m = 0; m < st->n_steps; m++) {
			const struct df_step *sp = &st->steps[m];
			if (sp->from_image || (sp->kind == DF_ADD && remote_source(sp)))
				goto out;
			for (size_t i = 0; i < sp->n_mounts; i++)
				if (sp->mounts[i].from && sp->mounts[i].from_stage < 0)
					goto out;
		}
	}
	/* the request as it is stored, without the client's key (the submit took
	 * it out) and the HTTP request's id: they say who asked, not what to build */
	json_t *what = json_copy(req);
	json_object_del(what, "request_id");
	in = json_pack("{s:s,s:s,s:o,s:O}", "kiln", KILN_VERSION, "team", team, "request", what, "bases", bases);
	/* a kiln binary replaced (an upgrade) builds afresh */
	json_object_set_new(in, "exe", json_sprintf("%llu:%llu:%lld:%lld.%09ld", (unsigned long long)exe.st_dev,
						    (unsigned long long)exe.st_ino, (long long)exe.st_size,
						    (long long)exe.st_mtim.tv_sec, exe.st_mtim.tv_nsec));
	text = json_dumps(in, JSON_COMPACT | JSON_SORT_KEYS);
	kiln_digest_buf(KILN_SHA256, text, strlen(text), d);
	*out = json_pack("{s:s,s:O}", "key", d, "bases", bases);
	ret = 1;
out:
	free(text);
	json_decref(in);
	json_decref(bases);
	return ret;
}

bool svc_replay_bases_match(const json_t *replay, const kiln_strv *from)
{
	const json_t *bases = json_object_get(replay, "bases");
	size_t n = json_array_size(bases);
	const char **a, **b;
	bool same = n == from->n;

	if (!same || n == 0)
		return same;
	a = kiln_xcalloc(n, sizeof(*a));
	b = kiln_xcalloc(n, sizeof(*b));
	for (size_t i = 0; i < n; i++) {
		a[i] = json_string_value(json_array_get(bases, i)) ?: "";
		b[i] = from->v[i];
	}
	qsort(a, n, sizeof(*a), cmp_str);
	qsort(b, n, sizeof(*b), cmp_str);
	for (size_t i = 0; i < n && same; i++)
		same = strcmp(a[i], b[i]) == 0;
	free(a);
	free(b);
	return same;
}

/* A line of the first build's log as its rebuild from the cache prints it:
 * a layer step a hit taking no time, no builder VM, no output; its own
 * status line replaces the first build's. */
static void replayed_line(const char *l, kiln_strv *out)
{
	json_t *j = l ? json_loads(l, 0, NULL) : NULL;
	const char *ev = json_string_value(json_object_get(j, "event"));
	const char *state = json_string_value(json_object_get(j, "state"));

	if (ev == NULL || strcmp(ev, "vm") == 0 || strcmp(ev, "output") == 0 ||
	    (strcmp(ev, "status") == 0 && state && strcmp(state, "building") == 0)) {
		json_decref(j);
		return;
	}
	if (strcmp(ev, "step_done") == 0) {
		if (json_object_get(j, "cache"))
			json_object_set_new(j, "cache", json_string("hit"));
		json_object_del(j, "run");
		json_object_set_new(j, "seconds", json_real(0));
	}
	kiln_strv_push_owned(out, json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER));
	json_decref(j);
}

int svc_replay_answer(svc *s, const char *team, const char *key, const char *request, const char *request_id,
		      int64_t limit, const char *client_key, char id[SVC_ID_MAX], kiln_error **err)
{
	struct svc_rows src = { 0 }, lines = { 0 };
	const char *p[] = { team, key };
	int ret = -1;

	if (svc_db_q(s->db, &src,
		     "SELECT id, name, image, image_digest, template_ref, template_digest, step, total, instruction"
		     " FROM svc_builds WHERE team = $1 AND replay = $2 AND state = 'done' ORDER BY qms DESC LIMIT 1",
		     p, 2, err) < 0)
		return -1;
	if (src.n == 0) {
		ret = 0;
		goto out;
	}
	const char *from = svc_row(&src, 0, 0);
	int a = svc_tag_holds(s, svc_row(&src, 0, 2), svc_row(&src, 0, 3), err);
	int b = a > 0 && svc_row(&src, 0, 4) ? svc_tag_holds(s, svc_row(&src, 0, 4), svc_row(&src, 0, 5), err) : a;
	if (b <= 0) { /* another build moved a tag since: this one runs */
		ret = b;
		goto out;
	}
	const char *lp[] = { from };
	if (svc_db_q(s->db, &lines, "SELECT line FROM svc_logs WHERE build = $1 ORDER BY n", lp, 1, err) < 0)
		goto out;

	char now[24], ms[24], tl[24], nlog[24];
	svc_i64(now, svc_now());
	svc_i64(ms, svc_now_ms());
	svc_i64(tl, limit);
	svc_new_id(id);
	json_t *st = json_pack("{s:s,s:s,s:s,s:s}", "event", "status", "state", "building", "host", s->host_id,
			       "replay_of", from);
	if (request_id)
		json_object_set_new(st, "request_id", json_string(request_id));
	kiln_strv log = KILN_STRV_INIT;
	kiln_strv_push_owned(&log, json_dumps(st, JSON_COMPACT | JSON_PRESERVE_ORDER));
	json_decref(st);
	for (size_t i = 0; i < lines.n; i++)
		replayed_line(svc_row(&lines, i, 0), &log);
	svc_i64(nlog, (int64_t)log.n);
	/* relaxed: what it records was already durable (the first build's row,
	 * the registry's tags); a power cut may forget this copy, nothing else */
	if (svc_db_begin_relaxed(s->db, err) < 0) {
		kiln_strv_free(&log);
		goto out;
	}
	const char *ip[] = { id, team, svc_row(&src, 0, 1), request, now, tl, ms, client_key, s->host_id,
			     svc_row(&src, 0, 6), svc_row(&src, 0, 7), svc_row(&src, 0, 8), svc_row(&src, 0, 2),
			     svc_row(&src, 0, 3), svc_row(&src, 0, 4), svc_row(&src, 0, 5), nlog };
	if (svc_db_q(s->db, NULL,
		     "INSERT INTO svc_builds(id, team, name, state, request, created, started, ended, heartbeat,"
		     " time_limit, qms, client_key, host, step, total, instruction, image, image_digest, template_ref,"
		     " template_digest, nlog) VALUES($1, $2, $3, 'done', $4, $5, $5, $5, $5, $6, $7, $8, $9, $10, $11,"
		     " $12, $13, $14, $15, $16, $17)", ip, 17, err) < 0)
		goto fail;
	for (size_t i = 0; i < log.n; i++) {
		char n[24];
		const char *pp[] = { id, n, log.v[i] };
		svc_i64(n, (int64_t)i);
		if (svc_db_q(s->db, NULL, "INSERT INTO svc_logs(build, n, line) VALUES($1, $2, $3)", pp, 3, err) < 0)
			goto fail;
	}
	kiln_strv_free(&log);
	if (svc_db_commit(s->db, err) < 0)
		goto out;
	ret = 1;
	goto out;
fail:
	kiln_strv_free(&log);
	svc_db_rollback(s->db);
out:
	svc_rows_free(&src);
	svc_rows_free(&lines);
	return ret;
}
