/* e2b_templates.c — E2B's build trigger (the step list translated by
 * e2b_steps.c, the COPY files found by their hash, fromTemplate resolved to
 * the image a finished build published, then svc_submit) and the template
 * calls around it: list, get with builds, delete, alias check, tags. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "service/e2b.h"
#include "service/internal.h"

/* "NAME[:TAG]" of E2B into a repository name under the team and a tag. */
int e2b_split_name(const char *s, char **name, char **tag, kiln_error **err)
{
	const char *colon = strrchr(s, ':');

	*name = colon ? kiln_xstrndup(s, (size_t)(colon - s)) : kiln_xstrdup(s);
	*tag = colon ? kiln_xstrdup(colon + 1) : NULL;
	if (!kiln_ref_name_valid(*name) || strchr(*name, '/') || (*tag && !kiln_ref_tag_valid(*tag))) {
		kiln_err(err, KILN_E_INVALID, "template name \"%.128s\": want a lowercase name ([a-z0-9._-]) and "
			 "an optional :TAG", s);
		free(*name);
		free(*tag);
		*name = *tag = NULL;
		return -1;
	}
	return 0;
}

/* The status of the newest finished build of the team's template "NAME[:TAG]"
 * (what: how the message names the field): 1 with *out set, 0 when the team
 * has no template of that name (nothing set), -1 an error (none finished). */
static int ready_build(e2b *e, const char *team, const char *ref, const char *what, struct svc_status *out,
		       kiln_error **err)
{
	char *name = NULL, *tag = NULL, *build = NULL;
	struct e2b_template t = { 0 };
	struct e2b_build *bv = NULL;
	size_t nb = 0;
	int found, rc = -1;
	bool have = false;

	if (e2b_split_name(ref, &name, &tag, err) < 0)
		return -1;
	if ((found = e2b_db_template_find(e->db, team, name, &t, err)) <= 0) {
		rc = found;
		goto out;
	}
	if (tag && e2b_db_tag_get(e->db, t.id, tag, &build, err) < 0)
		goto out;
	if (e2b_db_builds(e->db, team, t.id, &bv, &nb, err) < 0)
		goto out;
	for (size_t i = 0; i < nb && !have; i++) {
		const char *state;

		if (build ? strcmp(bv[i].id, build) != 0 : (tag && strcmp(tag, "latest") != 0))
			continue;
		if ((state = e2b_build_state(e, &bv[i], out, err)) == NULL)
			goto out;
		if (strcmp(state, "ready") == 0 && out->image && out->image_digest && out->template_ref)
			have = true;
		else
			svc_status_free(out);
		kiln_error_clear(err);
	}
	if (have)
		rc = 1;
	else
		kiln_err(err, KILN_E_INVALID, "%s \"%s\": no finished build%s", what, ref, tag ? " with that tag" : "");
out:
	e2b_builds_free(bv, nb);
	e2b_template_free(&t);
	free(name);
	free(tag);
	free(build);
	return rc;
}

/* fromTemplate "NAME[:TAG]" of the team: the image its build published,
 * pinned by digest (HOST/TEAM/NAME@sha256:...). */
static char *template_base(e2b *e, const char *team, const char *ref, kiln_error **err)
{
	struct svc_status st;
	struct kiln_ref kr = { 0 };
	char *base = NULL;
	int found = ready_build(e, team, ref, "fromTemplate", &st, err);

	if (found == 0)
		kiln_err(err, KILN_E_INVALID, "fromTemplate \"%s\": no such template", ref);
	if (found <= 0)
		return NULL;
	if (kiln_ref_parse(st.image, &kr, err) == 0) {
		base = kr.host ? kiln_xasprintf("%s/%s@%s", kr.host, kr.name, st.image_digest)
			       : kiln_xasprintf("%s@%s", kr.name, st.image_digest);
		kiln_ref_free(&kr);
	}
	svc_status_free(&st);
	return base;
}

int e2b_sandbox_template(e2b *e, const char *team, const char *ref, char **out, kiln_error **err)
{
	struct svc_status st;
	kiln_error *e1 = NULL;
	int found;

	*out = NULL;
	/* a name E2B's rules refuse is no E2B template: the caller tries it as kiln's */
	if (e == NULL || (found = ready_build(e, team, ref, "templateID", &st, &e1)) == 0 ||
	    (found < 0 && e1->kind == KILN_E_INVALID && strstr(kiln_error_message(e1), "want a lowercase"))) {
		kiln_error_free(e1);
		return 0;
	}
	if (found < 0) {
		*err = e1;
		return -1;
	}
	*out = kiln_xstrdup(st.template_ref);
	svc_status_free(&st);
	return 1;
}

void h_trigger(e2b *e, reg_req *r, struct e2b_req *q, json_t *body)
{
	struct e2b_plan p = { 0 };
	struct e2b_build b = { 0 };
	struct e2b_template t = { 0 };
	struct svc_request req = { 0 };
	struct svc_file *files = NULL;
	char (*digests)[KILN_DIGEST_MAX] = NULL, id[SVC_ID_MAX], *base = NULL, *df = NULL, *name = NULL;
	char *lines = NULL;
	kiln_error *err = NULL;
	bool claimed = false;
	uint64_t total = 0;
	json_t *lj;
	int found;

	p.body = (kiln_buf)KILN_BUF_INIT;
	if ((found = e2b_db_build_get(e->db, q->team, E2B_ARG(q, 0), E2B_ARG(q, 1), &b, &err)) <= 0) {
		if (found < 0)
			e2b_reply_err(r, err, "build");
		else
			e2b_reply_error(r, 404, "build %s of template %s not found", E2B_ARG(q, 1), E2B_ARG(q, 0));
		goto out;
	}
	if (e2b_db_template_find(e->db, q->team, b.template_id, &t, &err) != 1) {
		e2b_reply_err(r, err ? err : (kiln_err(&err, KILN_E_NOTFOUND, "template deleted"), err), "build");
		goto out;
	}
	if (e2b_plan_parse(body, &p, &err) < 0) {
		e2b_reply_err(r, err, "template");
		goto out;
	}
	if ((found = e2b_db_build_claim(e->db, b.id, &err)) <= 0) {
		if (found < 0)
			e2b_reply_err(r, err, "build");
		else
			e2b_reply_error(r, 400, "build %s was already started", b.id);
		goto out;
	}
	claimed = true;
	/* every COPY's files, uploaded by this team */
	files = kiln_xcalloc(p.hashes.n + 1, sizeof(*files));
	digests = kiln_xcalloc(p.hashes.n + 1, sizeof(*digests));
	for (size_t i = 0; i < p.hashes.n; i++) {
		int64_t size = 0;
		if ((found = e2b_db_file_get(e->db, q->team, p.hashes.v[i], digests[i], &size, &err)) <= 0) {
			if (found == 0)
				kiln_err(&err, KILN_E_INVALID, "the files of hash %s were not uploaded (GET "
					 "/templates/%s/files/%s, then PUT them)", p.hashes.v[i], t.id, p.hashes.v[i]);
			goto fail;
		}
		/* what the context will hold once they are extracted, each within
		 * the limit (checked at upload) but not all of them together (the
		 * service counts a tarball by its own, compressed, size) */
		total += size > 0 ? (uint64_t)size : 0;
		if (total > e->svc->cfg.context_max) {
			kiln_err(&err, KILN_E_LIMIT, "the files of the COPY steps are more than the context limit of "
				 "%llu bytes", (unsigned long long)e->svc->cfg.context_max);
			goto fail;
		}
		files[i] = (struct svc_file){ .path = p.hashes.v[i], .mode = S_IFDIR | 0755, .digest = digests[i],
					      .tar = true };
	}
	base = p.from_image ? kiln_xstrdup(p.from_image) : template_base(e, q->team, p.from_template, &err);
	if (base == NULL)
		goto fail;
	df = e2b_plan_dockerfile(&p, base);
	name = kiln_xasprintf("%s:%.*s", t.name, (int)strcspn(b.tag, " "), b.tag);
	req.team = q->team;
	req.dockerfile = df;
	req.dockerfile_name = "template";
	req.files = files;
	req.nfiles = p.hashes.n;
	req.build.name = name;
	req.build.template_ = true;
	req.build.start_cmd = p.start_cmd;
	req.build.ready_cmd = p.ready_cmd;
	req.build.cpus = (unsigned)t.cpus;
	req.build.memory_mib = (unsigned)t.memory;
	req.build.no_cache = p.force;
	req.request_id = reg_req_id(r);
	if (svc_submit(e->svc, &req, id, &err) < 0)
		goto fail;
	lj = json_array();
	for (size_t i = 0; i < p.lines; i++)
		json_array_append_new(lj, json_integer(p.line_step[i]));
	lines = json_dumps(lj, JSON_COMPACT);
	json_decref(lj);
	if (e2b_db_build_started(e->db, b.id, id, lines, &err) < 0) {
		/* the service has it: cancel rather than leave an orphan */
		kiln_error *cerr = NULL;
		svc_cancel(e->svc, q->team, id, &cerr);
		kiln_error_free(cerr);
		goto fail;
	}
	reg_respond(r, 202, "", 0, NULL);
	goto out;
fail:
	if (claimed) {
		kiln_error *uerr = NULL;
		if (e2b_db_build_unclaim(e->db, b.id, kiln_error_message(err), &uerr) < 0)
			kiln_error_free(uerr);
	}
	e2b_reply_err(r, err, "build");
out:
	free(files);
	free(digests);
	free(base);
	free(df);
	free(name);
	free(lines);
	e2b_plan_free(&p);
	e2b_build_free(&b);
	e2b_template_free(&t);
}

/* E2B's Template (list) or TemplateWithBuilds (get) of t. */
static json_t *template_json(e2b *e, const struct e2b_template *t, bool with_builds, const char *host,
			     kiln_error **err)
{
	struct e2b_build *bv = NULL;
	size_t nb = 0;
	json_t *out = NULL, *builds = json_array();
	const char *last_ok = NULL, *state0 = "waiting";

	if (e2b_db_builds(e->db, t->team, t->id, &bv, &nb, err) < 0)
		goto out;
	for (size_t i = 0; i < nb; i++) {
		struct svc_status st;
		const char *state = e2b_build_state(e, &bv[i], &st, err);
		json_t *bj;

		if (state == NULL) {
			kiln_error_clear(err);
			state = "error";
		}
		if (i == 0)
			state0 = state;
		if (!last_ok && strcmp(state, "ready") == 0)
			last_ok = bv[i].id;
		bj = json_pack("{s:s,s:s,s:o,s:o,s:i,s:i}", "buildID", bv[i].id, "status", state, "createdAt",
			       e2b_json_time(bv[i].created), "updatedAt", e2b_json_time(bv[i].updated), "cpuCount",
			       bv[i].cpus ? bv[i].cpus : 2, "memoryMB", bv[i].memory ? bv[i].memory : 512);
		if (st.ended)
			json_object_set_new(bj, "finishedAt", e2b_json_time(st.ended));
		if (st.template_ref) {
			/* what `kiln run` takes: the registry this request reached */
			char *ref = host ? kiln_xasprintf("%s/%s", host, st.template_ref) : kiln_xstrdup(st.template_ref);
			json_object_set_new(bj, "kilnTemplate", json_string(ref));
			free(ref);
		}
		json_array_append_new(builds, bj);
		svc_status_free(&st);
	}
	out = json_pack("{s:s,s:[s],s:[s],s:b,s:o,s:o,s:n,s:i}", "templateID", t->id, "names", t->name, "aliases",
			t->name, "public", 0, "createdAt", e2b_json_time(t->created), "updatedAt",
			e2b_json_time(t->updated), "lastSpawnedAt", "spawnCount", 0);
	if (with_builds) {
		json_object_set(out, "builds", builds);
	} else {
		json_object_set_new(out, "buildID", json_string(last_ok ? last_ok : ""));
		json_object_set_new(out, "buildStatus", json_string(state0));
		json_object_set_new(out, "buildCount", json_integer((json_int_t)nb));
		json_object_set_new(out, "cpuCount", json_integer(t->cpus ? t->cpus : 2));
		json_object_set_new(out, "memoryMB", json_integer(t->memory ? t->memory : 512));
		json_object_set_new(out, "diskSizeMB", json_integer(0));
		json_object_set_new(out, "envdVersion", json_string(""));
		json_object_set_new(out, "createdBy", json_null());
	}
out:
	json_decref(builds);
	e2b_builds_free(bv, nb);
	return out;
}

void h_list(e2b *e, reg_req *r, struct e2b_req *q, json_t *body)
{
	struct e2b_template *tv = NULL;
	size_t n = 0;
	kiln_error *err = NULL;
	json_t *a = json_array();

	if (e2b_db_templates(e->db, q->team, &tv, &n, &err) < 0) {
		json_decref(a);
		return e2b_reply_err(r, err, "templates");
	}
	for (size_t i = 0; i < n && a; i++) {
		json_t *j = template_json(e, &tv[i], false, NULL, &err);
		if (j == NULL) {
			json_decref(a);
			a = NULL;
		} else {
			json_array_append_new(a, j);
		}
	}
	for (size_t i = 0; i < n; i++)
		e2b_template_free(&tv[i]);
	free(tv);
	if (a == NULL)
		return e2b_reply_err(r, err, "templates");
	e2b_reply_json(r, 200, a);
}

/* The template the path names (by id or name), or an answer given. */
static int find(e2b *e, reg_req *r, struct e2b_req *q, const char *id, struct e2b_template *t)
{
	kiln_error *err = NULL;
	int found = e2b_db_template_find(e->db, q->team, id, t, &err);

	if (found < 0)
		e2b_reply_err(r, err, "template");
	else if (found == 0)
		e2b_reply_error(r, 404, "template %s not found", id);
	return found;
}

void h_get(e2b *e, reg_req *r, struct e2b_req *q, json_t *body)
{
	struct e2b_template t;
	kiln_error *err = NULL;
	json_t *j;

	if (find(e, r, q, E2B_ARG(q, 0), &t) <= 0)
		return;
	j = template_json(e, &t, true, e2b_req_host(r), &err);
	e2b_template_free(&t);
	if (j == NULL)
		return e2b_reply_err(r, err, "template");
	e2b_reply_json(r, 200, j);
}

void h_delete(e2b *e, reg_req *r, struct e2b_req *q, json_t *body)
{
	struct e2b_template t;
	kiln_error *err = NULL;

	if (find(e, r, q, E2B_ARG(q, 0), &t) <= 0)
		return;
	if (e2b_db_template_delete(e->db, q->team, t.id, &err) < 0)
		e2b_reply_err(r, err, "template");
	else
		reg_respond(r, 204, "", 0, NULL);
	e2b_template_free(&t);
}

void h_alias(e2b *e, reg_req *r, struct e2b_req *q, json_t *body)
{
	struct e2b_template t;

	if (find(e, r, q, E2B_ARG(q, 0), &t) <= 0)
		return;
	e2b_reply_json(r, 200, json_pack("{s:s,s:b}", "templateID", t.id, "public", 0));
	e2b_template_free(&t);
}

void h_tags_list(e2b *e, reg_req *r, struct e2b_req *q, json_t *body)
{
	struct e2b_template t;
	kiln_error *err = NULL;
	json_t *a, *v;
	size_t i;

	if (find(e, r, q, E2B_ARG(q, 0), &t) <= 0)
		return;
	a = e2b_db_tags(e->db, t.id, &err);
	e2b_template_free(&t);
	if (a == NULL)
		return e2b_reply_err(r, err, "tags");
	json_array_foreach(a, i, v) {
		json_object_set_new(v, "createdAt", e2b_json_time(kiln_json_int(v, "created", 0)));
		json_object_del(v, "created");
	}
	e2b_reply_json(r, 200, a);
}

/* The tags of a body ("tags": [..] of valid tags), or an answer given. */
static const json_t *body_tags(reg_req *r, json_t *body)
{
	const json_t *tags = json_object_get(body, "tags");

	if (!json_is_array(tags) || json_array_size(tags) == 0 || json_array_size(tags) > 16) {
		e2b_reply_error(r, 400, "tags: want an array of 1 to 16 tags");
		return NULL;
	}
	for (size_t i = 0; i < json_array_size(tags); i++)
		if (!json_is_string(json_array_get(tags, i)) ||
		    !kiln_ref_tag_valid(json_string_value(json_array_get(tags, i)))) {
			e2b_reply_error(r, 400, "tags[%zu]: want a tag ([A-Za-z0-9_][A-Za-z0-9._-]*)", i);
			return NULL;
		}
	return tags;
}

/* POST /templates/tags {"target":"NAME:TAG","tags":[...]}: E2B's tags (this
 * API's, not the registry's: docs/e2b.md) on the build the target names. */
void h_tags_assign(e2b *e, reg_req *r, struct e2b_req *q, json_t *body)
{
	const char *target = kiln_json_str(body, "target");
	const json_t *tags = body_tags(r, body);
	char *name = NULL, *tag = NULL, *build = NULL;
	struct e2b_template t = { 0 };
	kiln_error *err = NULL;
	int found;

	if (tags == NULL)
		return;
	if (target == NULL || e2b_split_name(target, &name, &tag, &err) < 0) {
		if (err == NULL)
			kiln_err(&err, KILN_E_INVALID, "target: want \"NAME:TAG\"");
		return e2b_reply_err(r, err, "tags");
	}
	if (find(e, r, q, name, &t) <= 0)
		goto out;
	if ((found = e2b_db_tag_get(e->db, t.id, tag ? tag : "latest", &build, &err)) <= 0) {
		if (found < 0)
			e2b_reply_err(r, err, "tags");
		else
			e2b_reply_error(r, 404, "template %s has no finished build tagged %s", name,
					tag ? tag : "latest");
		goto out;
	}
	for (size_t i = 0; i < json_array_size(tags); i++)
		if (e2b_db_tag_set(e->db, t.id, json_string_value(json_array_get(tags, i)), build, &err) < 0) {
			e2b_reply_err(r, err, "tags");
			goto out;
		}
	e2b_reply_json(r, 201, json_pack("{s:s,s:O}", "buildID", build, "tags", tags));
out:
	free(name);
	free(tag);
	free(build);
	e2b_template_free(&t);
}

void h_tags_remove(e2b *e, reg_req *r, struct e2b_req *q, json_t *body)
{
	const char *name = kiln_json_str(body, "name");
	const json_t *tags = body_tags(r, body);
	struct e2b_template t;
	kiln_error *err = NULL;

	if (tags == NULL)
		return;
	if (name == NULL)
		return e2b_reply_error(r, 400, "name: the template's name is needed");
	if (find(e, r, q, name, &t) <= 0)
		return;
	for (size_t i = 0; i < json_array_size(tags); i++)
		if (e2b_db_tag_delete(e->db, t.id, json_string_value(json_array_get(tags, i)), &err) < 0) {
			e2b_template_free(&t);
			return e2b_reply_err(r, err, "tags");
		}
	e2b_template_free(&t);
	reg_respond(r, 204, "", 0, NULL);
}
