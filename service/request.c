/* request.c — a build request: as JSON (what is stored in the queue and
 * what kiln's HTTP API takes), a step list rendered into a Dockerfile, and
 * the checks made before anything is queued — the Dockerfile parses and
 * plans (errors with FILE:LINE:COL), bases are registry references (never a
 * path on the server), every context file is in the team's store, the
 * context fits the size limit. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dockerfile-parser/dockerfile.h"
#include "service/internal.h"

static const char *const step_names[] = { "RUN", "COPY", "ENV", "WORKDIR", "USER", "ARG" };

json_t *svc_request_to_json(const struct svc_request *q)
{
	json_t *j = json_object(), *a;

#define SETS(k, v) if (v) json_object_set_new(j, k, json_string(v))
	SETS("dockerfile", q->dockerfile);
	SETS("dockerfile_name", q->dockerfile_name);
	SETS("base", q->base);
	SETS("source_date_epoch", q->source_date_epoch);
	SETS("request_id", q->request_id);
#undef SETS
	build_request_to_json(&q->build, j);
	if (q->nsteps) {
		a = json_array();
		for (size_t i = 0; i < q->nsteps; i++) {
			const struct svc_step *st = &q->steps[i];
			json_t *args = json_array(), *o;
			for (size_t k = 0; k < st->nargs; k++)
				json_array_append_new(args, json_string(st->args[k]));
			o = json_pack("{s:s,s:o}", "kind", (unsigned)st->kind < 6 ? step_names[st->kind] : "?", "args", args);
			if (st->chown)
				json_object_set_new(o, "chown", json_string(st->chown));
			if (st->chmod)
				json_object_set_new(o, "chmod", json_string(st->chmod));
			json_array_append_new(a, o);
		}
		json_object_set_new(j, "steps", a);
	}
	a = json_array();
	for (size_t i = 0; i < q->nfiles; i++) {
		const struct svc_file *f = &q->files[i];
		json_t *o = json_pack("{s:s,s:I}", "path", f->path, "mode", (json_int_t)f->mode);
		if (f->digest)
			json_object_set_new(o, "digest", json_string(f->digest));
		if (f->link)
			json_object_set_new(o, "link", json_string(f->link));
		if (f->tar)
			json_object_set_new(o, "tar", json_true());
		json_array_append_new(a, o);
	}
	json_object_set_new(j, "files", a);
	if (q->time_limit_s > 0)
		json_object_set_new(j, "time_limit_s", json_integer(q->time_limit_s));
	return j;
}

int svc_submit(svc *s, const struct svc_request *req, char id[SVC_ID_MAX], kiln_error **err)
{
	json_t *j = svc_request_to_json(req);
	int ret = svc_submit_json(s, req->team, j, id, NULL, err);

	json_decref(j);
	return ret < 0 ? -1 : 0;
}

static void quote_json(kiln_buf *b, const char *s)
{
	json_t *j = json_string(s ? s : "");
	char *t = json_dumps(j, JSON_ENCODE_ANY);

	kiln_buf_addf(b, "%s", t ? t : "\"\"");
	free(t);
	json_decref(j);
}

/* A step list as Dockerfile text: exec-form JSON arrays for COPY, quoted ENV
 * values, so no argument is re-split or re-expanded on the way. */
static int render_steps(const json_t *req, kiln_buf *b, kiln_error **err)
{
	const char *base = json_string_value(json_object_get(req, "base"));
	json_t *st;
	size_t i;

	if (base == NULL || *base == '\0' || strchr(base, '\n'))
		return kiln_err(err, KILN_E_INVALID, "a step list needs a base (FROM)");
	kiln_buf_addf(b, "FROM %s\n", base);
	json_array_foreach(json_object_get(req, "steps"), i, st) {
		const char *kind = json_string_value(json_object_get(st, "kind"));
		json_t *args = json_object_get(st, "args");
		size_t n = json_array_size(args);
		for (size_t k = 0; k < n; k++)
			if (!json_is_string(json_array_get(args, k)))
				return kiln_err(err, KILN_E_INVALID, "step %zu: arguments must be strings", i + 1);
#define ARG(k) json_string_value(json_array_get(args, k))
		if (kind && strcmp(kind, "RUN") == 0 && n == 1) {
			kiln_buf_addf(b, "RUN [\"/bin/sh\", \"-c\", ");
			quote_json(b, ARG(0));
			kiln_buf_addf(b, "]\n");
		} else if (kind && strcmp(kind, "COPY") == 0 && n >= 2) {
			const char *chown = json_string_value(json_object_get(st, "chown"));
			const char *chmod = json_string_value(json_object_get(st, "chmod"));
			kiln_buf_addf(b, "COPY ");
			if (chown && !strpbrk(chown, " \n"))
				kiln_buf_addf(b, "--chown=%s ", chown);
			if (chmod && !strpbrk(chmod, " \n"))
				kiln_buf_addf(b, "--chmod=%s ", chmod);
			kiln_buf_addf(b, "[");
			for (size_t k = 0; k < n; k++) {
				if (k)
					kiln_buf_addf(b, ", ");
				quote_json(b, ARG(k));
			}
			kiln_buf_addf(b, "]\n");
		} else if (kind && strcmp(kind, "ENV") == 0 && n >= 2 && n % 2 == 0) {
			kiln_buf_addf(b, "ENV");
			for (size_t k = 0; k < n; k += 2) {
				if (!*ARG(k) || strpbrk(ARG(k), " =\n\"\\$"))
					return kiln_err(err, KILN_E_INVALID, "step %zu: bad ENV name '%s'", i + 1, ARG(k));
				kiln_buf_addf(b, " %s=", ARG(k));
				quote_json(b, ARG(k + 1));
			}
			kiln_buf_addf(b, "\n");
		} else if (kind && (strcmp(kind, "WORKDIR") == 0 || strcmp(kind, "USER") == 0 || strcmp(kind, "ARG") == 0) &&
			   n == 1 && !strchr(ARG(0), '\n') && *ARG(0)) {
			kiln_buf_addf(b, "%s %s\n", kind, ARG(0));
		} else {
			return kiln_err(err, KILN_E_INVALID, "step %zu: '%s' with %zu arguments is not a step kiln takes",
					i + 1, kind ? kind : "?", n);
		}
#undef ARG
	}
	return 0;
}

static int base_ok(const char *file, const struct df_node *n, const char *base, kiln_error **err)
{
	static const char *const local[] = { "oci:", "oci-archive:", "docker-archive:", "dir:", "containers-storage:" };

	for (size_t i = 0; i < sizeof(local) / sizeof(*local); i++)
		if (strncmp(base, local[i], strlen(local[i])) == 0)
			return kiln_err(err, KILN_E_INVALID,
					"%s:%d:%d: base '%s' names a path on the build server: give a registry reference",
					file, n->start_line, n->col, base);
	return 0;
}

/* Parse and plan: the place of any error first; no server-side bases. */
static int check_dockerfile(const char *file, const char *text, const struct build_request *br, struct df_plan **keep,
			    kiln_error **err)
{
	struct df_ast *ast = NULL;
	struct df_plan *plan = NULL;
	struct df_plan_opts po = { .build_args = br->build_args, .n_build_args = br->n_build_args, .target = br->target };
	int ret = -1;

	if (df_parse(file, text, strlen(text), &ast, err) < 0 || df_plan_build(ast, &po, &plan, err) < 0)
		goto out;
	for (size_t k = 0; k < plan->n_order; k++) {
		const struct df_stage *st = &plan->stages[plan->order[k]];
		if (st->base_stage < 0 && strcmp(st->base, "scratch") != 0 && base_ok(file, st->node, st->base, err) < 0)
			goto out;
		for (size_t m = 0; m < st->n_steps; m++) {
			const struct df_step *sp = &st->steps[m];
			if (sp->from_image && base_ok(file, sp->node, sp->from_image, err) < 0)
				goto out;
			/* RUN --mount=...,from=IMAGE reads an image as COPY --from does */
			for (size_t mi = 0; mi < sp->n_mounts; mi++)
				if (sp->mounts[mi].from && sp->mounts[mi].from_stage < 0 &&
				    base_ok(file, sp->node, sp->mounts[mi].from, err) < 0)
					goto out;
		}
	}
	ret = 0;
out:
	if (ret == 0 && keep) {
		*keep = plan;
		plan = NULL;
	}
	df_plan_free(plan);
	df_ast_free(ast);
	return ret;
}

/* Each file's path and mode checked and its blob looked at once: its size
 * counts against context_max.  missing (when not NULL) gets the digests the
 * store lacks, once each, instead of an error. */
static int check_files(svc *s, const char *team, const json_t *files, kiln_strv *missing, kiln_error **err)
{
	kiln_cas *cas = NULL;
	uint64_t total = 0;
	json_t *f;
	size_t i;
	int ret = -1;

	if (!json_is_array(files))
		return kiln_err(err, KILN_E_INVALID, "files: want an array");
	if (json_array_size(files) > s->cfg.context_files)
		return kiln_err(err, KILN_E_LIMIT, "the context has %zu entries, more than the limit of %u",
				json_array_size(files), s->cfg.context_files);
	json_t *links = json_object(); /* the symlinks the list makes: nothing may be under one */
	json_array_foreach(files, i, f) {
		const char *path = json_string_value(json_object_get(f, "path"));
		if (path && S_ISLNK((mode_t)json_integer_value(json_object_get(f, "mode"))))
			json_object_set_new(links, path, json_true());
	}
	if (svc_team_cas(s, team, &cas, err) < 0) {
		json_decref(links);
		return -1;
	}
	json_array_foreach(files, i, f) {
		const char *path = json_string_value(json_object_get(f, "path"));
		const char *digest = json_string_value(json_object_get(f, "digest"));
		json_t *m = json_object_get(f, "mode");
		mode_t mode = (mode_t)json_integer_value(m);
		bool tar = json_is_true(json_object_get(f, "tar"));

		if (!svc_path_ok(path)) {
			kiln_err(err, KILN_E_INVALID, "files[%zu]: path '%s' must be relative, inside the context", i,
				 path ? path : "");
			goto out;
		}
		for (const char *sl = strchr(path, '/'); sl && json_object_size(links); sl = strchr(sl + 1, '/'))
			if (json_object_getn(links, path, (size_t)(sl - path))) {
				kiln_err(err, KILN_E_INVALID, "files[%zu] %s: inside %.*s, which the list makes a symlink", i,
					 path, (int)(sl - path), path);
				goto out;
			}
		if (!json_is_integer(m) || (!tar && !S_ISREG(mode) && !S_ISDIR(mode) && !S_ISLNK(mode))) {
			kiln_err(err, KILN_E_INVALID, "files[%zu] %s: mode must be a regular file, directory or symlink", i, path);
			goto out;
		}
		if (S_ISLNK(mode) && !json_string_value(json_object_get(f, "link"))) {
			kiln_err(err, KILN_E_INVALID, "files[%zu] %s: a symlink needs its link", i, path);
			goto out;
		}
		if (tar || S_ISREG(mode)) {
			struct stat sb;
			char *p = digest && svc_digest_ok(digest) ? kiln_cas_path(cas, digest) : NULL;
			int there = p && stat(p, &sb) == 0;
			free(p);
			if (p && !there && missing) {
				size_t k = 0;
				while (k < missing->n && strcmp(missing->v[k], digest) != 0)
					k++;
				if (k == missing->n)
					kiln_strv_push(missing, digest);
				continue;
			}
			if (!there) {
				kiln_err(err, KILN_E_NOTFOUND, "files[%zu] %s: content %s was not uploaded", i, path,
					 digest ? digest : "(none)");
				goto out;
			}
			total += (uint64_t)sb.st_size;
			if (total > s->cfg.context_max) {
				kiln_err(err, KILN_E_LIMIT, "the context is larger than the limit of %llu bytes",
					 (unsigned long long)s->cfg.context_max);
				goto out;
			}
		}
	}
	ret = 0;
out:
	json_decref(links);
	kiln_cas_close(cas);
	return ret;
}

/* The request just stored, kept parsed for this host's worker: a cached
 * rebuild's file list is the largest part of its request (23 KB for 203
 * files), parsed once instead of twice. */
void svc_fresh_keep(svc *s, const char *id, json_t *req)
{
	size_t cap = sizeof(s->fresh) / sizeof(*s->fresh);

	if (s->nfresh == cap) { /* claimed elsewhere (another host), or long queued: read then */
		json_decref(s->fresh[0].req);
		memmove(&s->fresh[0], &s->fresh[1], (cap - 1) * sizeof(*s->fresh));
		s->nfresh--;
	}
	snprintf(s->fresh[s->nfresh].id, SVC_ID_MAX, "%s", id);
	s->fresh[s->nfresh++].req = json_incref(req);
}

json_t *svc_fresh_take(svc *s, const char *id)
{
	json_t *req = NULL;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->nfresh; i++)
		if (strcmp(s->fresh[i].id, id) == 0) {
			req = s->fresh[i].req;
			memmove(&s->fresh[i], &s->fresh[i + 1], (s->nfresh - i - 1) * sizeof(*s->fresh));
			s->nfresh--;
			break;
		}
	pthread_mutex_unlock(&s->lock);
	return req;
}

/* The request's options checked (the build's by its codec, the name, time
 * limit and SOURCE_DATE_EPOCH here); *limit the build's time limit, *br the
 * build's fields (held by req). */
static int check_options(svc *s, const char *team, json_t *req, struct build_request *br, int64_t *limit,
			 kiln_error **err)
{
	const char *epoch = json_string_value(json_object_get(req, "source_date_epoch"));
	const json_t *tl = json_object_get(req, "time_limit_s");

	if (build_request_from_json(req, false, br, err) < 0)
		return -1;
	if (br->name) {
		struct kiln_ref r;
		int bad = kiln_ref_parse(br->name, &r, err) < 0 || r.digest || kiln_ref_has_host(br->name);
		kiln_ref_free(&r);
		if (bad) {
			if (*err == NULL)
				kiln_err(err, KILN_E_INVALID, "name '%s': want NAME[:TAG] (published as %s/NAME:TAG)",
					 br->name, team);
			return -1;
		}
	}
	if (build_request_wants_template(br))
		json_object_set_new(req, "template", json_true());
	/* provenance is attached by the signed push: without a key it would be
	 * recorded and never reach the registry */
	if (br->provenance && !kiln_json_str(s->cfg.team_sign_keys, team) && !s->cfg.sign_key)
		return kiln_err(err, KILN_E_INVALID,
				"provenance: this build service signs nothing of team %s's (no build.sign_key, no "
				"build.team_sign_keys entry), so it cannot attach provenance to the result", team);
	if (tl && (!json_is_integer(tl) || json_integer_value(tl) < 1))
		return kiln_err(err, KILN_E_INVALID, "time_limit_s: want a positive number");
	if (json_object_get(req, "source_date_epoch") &&
	    (epoch == NULL || !*epoch || strlen(epoch) > 19 || strspn(epoch, "0123456789") != strlen(epoch)))
		return kiln_err(err, KILN_E_INVALID, "source_date_epoch: want the seconds as a string of digits");
	*limit = s->cfg.time_limit_s;
	if (tl && json_integer_value(tl) < *limit)
		*limit = json_integer_value(tl);
	return 0;
}

/* The Dockerfile's text: given, or the step list rendered (and stored as the request's). */
static char *request_text(json_t *req, kiln_error **err)
{
	kiln_buf df = KILN_BUF_INIT;
	char *text;

	if (json_string_value(json_object_get(req, "dockerfile")))
		return kiln_xstrdup(json_string_value(json_object_get(req, "dockerfile")));
	if (!json_is_array(json_object_get(req, "steps"))) {
		kiln_err(err, KILN_E_INVALID, "a build request needs a dockerfile or steps");
		return NULL;
	}
	if (render_steps(req, &df, err) < 0) {
		kiln_buf_free(&df);
		return NULL;
	}
	text = kiln_buf_detach(&df);
	json_object_set_new(req, "dockerfile", json_string(text));
	return text;
}

/* 1: answered from an earlier build's record (id set).  0: it runs; the
 * request then carries its replay key for the worker.  Errors only warn: a
 * replay saves time, the build runs without it. */
static int try_replay(svc *s, const char *team, json_t *req, const struct df_plan *plan, int64_t limit,
		      const char *key, char id[SVC_ID_MAX])
{
	json_t *rp = NULL;
	kiln_error *e = NULL;
	int rk = svc_replay_key(s, team, req, plan, &rp, &e);

	if (rk == 1) {
		char *stored = json_dumps(req, JSON_COMPACT);
		rk = svc_replay_answer(s, team, json_string_value(json_object_get(rp, "key")), stored,
				       json_string_value(json_object_get(req, "request_id")), limit, key, id, &e);
		free(stored);
		json_object_set_new(req, "replay", rp);
	}
	if (rk < 0) {
		kiln_warn("build replay: %s", kiln_error_message(e));
		kiln_error_free(e);
	}
	return rk == 1;
}

/* The checked request into the queue, its secrets kept here (sec is taken). */
static int enqueue(svc *s, const char *team, json_t *req, struct svc_secrets *sec, int64_t limit, const char *key,
		   char id[SVC_ID_MAX], kiln_error **err)
{
	const char *name = json_string_value(json_object_get(req, "name"));
	int ret;

	if (sec) { /* their ids only: what the worker must be handed */
		json_t *ids = json_array();
		for (size_t i = 0; i < svc_secrets_count(sec); i++)
			json_array_append_new(ids, json_string(svc_secrets_id(sec, i)));
		json_object_set_new(req, "secret_ids", ids);
	} else {
		json_object_del(req, "secret_ids");
	}
	char *stored = json_dumps(req, JSON_COMPACT);
	svc_new_id(id);
	if (sec) /* kept before the row exists: a worker may claim it at once */
		svc_secrets_keep(s, id, sec);
	pthread_mutex_lock(&s->lock);
	svc_fresh_keep(s, id, req); /* likewise */
	pthread_mutex_unlock(&s->lock);
	ret = svc_q_insert(s, id, team, name, stored, limit, sec ? s->host_id : NULL, key, err);
	free(stored);
	if (ret < 0 && sec)
		svc_secrets_free(svc_secrets_claim(s, id));
	if (ret < 0)
		json_decref(svc_fresh_take(s, id));
	if (ret < 0 && key) { /* the same key queued meanwhile (its unique index): that build */
		kiln_error *e2 = NULL;
		if (svc_q_by_key(s, team, key, id, &e2) == 1) {
			kiln_error_clear(err);
			ret = 0;
		}
		kiln_error_free(e2);
	}
	if (ret == 0) {
		pthread_mutex_lock(&s->lock);
		pthread_cond_broadcast(&s->wake);
		pthread_mutex_unlock(&s->lock);
	}
	return ret;
}

int svc_submit_json(svc *s, const char *team, json_t *req, char id[SVC_ID_MAX], kiln_strv *missing, kiln_error **err)
{
	const char *file = json_string_value(json_object_get(req, "dockerfile_name"));
	struct svc_secrets *sec = NULL;
	struct df_plan *plan = NULL;
	struct build_request br = { 0 };
	char *text = NULL, *fname = NULL, key[65] = "";
	int64_t limit = 0;
	int ret = -1;

	if (!json_is_object(req))
		return kiln_err(err, KILN_E_INVALID, "a build request is a JSON object");
	if (svc_secrets_take_json(req, &sec, err) < 0)
		return -1;
	/* a client's key for this request: a retried submit answers with the
	 * build the first one queued (the transport retries after errors that
	 * may come after the server took it) */
	const char *k = json_string_value(json_object_get(req, "client_key"));
	if (k && (!*k || strlen(k) >= sizeof(key) || strspn(k, "0123456789abcdefABCDEF-") != strlen(k))) {
		kiln_err(err, KILN_E_INVALID, "client_key: want up to 64 hex digits or '-'");
		goto out;
	}
	if (k)
		snprintf(key, sizeof(key), "%s", k);
	json_object_del(req, "client_key");
	json_object_del(req, "replay"); /* the server's own (svc_replay_key) */
	int had = *key ? svc_q_by_key(s, team, key, id, err) : 0;
	if (had != 0) {
		ret = had < 0 ? -1 : 0;
		goto out;
	}
	/* copied: the object's own string is replaced below */
	fname = kiln_xstrdup(file && *file && !strchr(file, '/') && !strchr(file, ':') ? file : "Dockerfile");
	if (check_options(s, team, req, &br, &limit, err) < 0 || (text = request_text(req, err)) == NULL)
		goto out;
	json_object_set_new(req, "dockerfile_name", json_string(fname));
	if (!json_object_get(req, "files"))
		json_object_set_new(req, "files", json_array());
	if (check_dockerfile(fname, text, &br, &plan, err) < 0 ||
	    check_files(s, team, json_object_get(req, "files"), missing, err) < 0)
		goto out;
	if (missing && missing->n) {
		ret = 1; /* nothing queued: the client sends them, then the request again */
		goto out;
	}
	if (sec == NULL && try_replay(s, team, req, plan, limit, *key ? key : NULL, id)) {
		ret = 2;
		goto out;
	}
	/* a replay costs no build time: only a build that will run is counted */
	if (svc_quota_check_minutes(s, team, err) < 0)
		goto out;
	ret = enqueue(s, team, req, sec, limit, *key ? key : NULL, id, err);
	sec = NULL;
out:
	build_request_free(&br);
	df_plan_free(plan);
	svc_secrets_free(sec);
	free(text);
	free(fname);
	return ret;
}
