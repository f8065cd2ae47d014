/* e2b_http.c — E2B's template REST on `kiln serve --build`: the calls the
 * npm/Python SDKs make in Template.build() (create, upload links and the
 * uploads themselves, trigger, status with logs and logsOffset) and the
 * template list/get/delete/alias/tags calls, answered in E2B's JSON shapes
 * ({"code","message"} errors).  A build becomes a build of the service
 * (svc_submit) whose status and `kiln build --json` log this maps back. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "service/e2b.h"
#include "service/internal.h"

#define BODY_MAX (8u << 20)

/* ---- build state, mapped to E2B's ---- */

/* The E2B step (as the SDK numbers its stack traces: "base", then 1 + the
 * step's index, "finalize") of a failed build. */
static char *failed_step(const struct e2b_build *b, const struct svc_status *st)
{
	const char *loc = st->location, *colon;
	json_t *lines;
	long line;
	int step = -1;

	if (loc == NULL || (colon = strchr(loc, ':')) == NULL)
		return st->reason && strstr(st->reason, "ready") ? kiln_xstrdup("finalize") : NULL;
	line = strtol(colon + 1, NULL, 10);
	if (line <= 1)
		return kiln_xstrdup("base");
	lines = b->lines ? json_loads(b->lines, 0, NULL) : NULL;
	if (json_is_array(lines) && (size_t)(line - 2) < json_array_size(lines))
		step = (int)json_integer_value(json_array_get(lines, (size_t)(line - 2)));
	json_decref(lines);
	return step < 0 ? NULL : kiln_xasprintf("%d", step + 1);
}

static const char *str_or(const json_t *o, const char *key, const char *dflt)
{
	const char *s = kiln_json_str(o, key);
	return s ? s : dflt;
}

/* One `kiln build --json` event (or the service's own) as E2B's log entry. */
static json_t *log_entry(const char *line, const struct e2b_build *b, int64_t now)
{
	json_t *ev = json_loads(line, 0, NULL), *out;
	const char *kind = kiln_json_str(ev, "event"), *level = "info";
	kiln_buf msg = KILN_BUF_INIT;

	if (kind == NULL) {
		kiln_buf_adds(&msg, line);
		level = "debug";
	} else if (strcmp(kind, "step") == 0) {
		kiln_buf_addf(&msg, "[%lld/%lld] %s", (long long)kiln_json_int(ev, "step", 0),
			      (long long)kiln_json_int(ev, "total", 0), str_or(ev, "instruction", ""));
	} else if (strcmp(kind, "step_done") == 0) {
		const char *cache = kiln_json_str(ev, "cache");
		json_t *secs = json_object_get(ev, "seconds");
		kiln_buf_addf(&msg, "[%lld/%lld] ", (long long)kiln_json_int(ev, "step", 0),
			      (long long)kiln_json_int(ev, "total", 0));
		if (cache)
			kiln_buf_addf(&msg, "cache %s, ", cache);
		kiln_buf_addf(&msg, "%.2fs", json_number_value(secs));
	} else if (strcmp(kind, "output") == 0) {
		const char *d = str_or(ev, "data", "");
		size_t n = strlen(d);
		kiln_buf_add(&msg, d, n && d[n - 1] == '\n' ? n - 1 : n);
	} else if (strcmp(kind, "error") == 0) {
		kiln_buf_adds(&msg, str_or(ev, "message", "error"));
		level = "error";
	} else if (strcmp(kind, "done") == 0) {
		kiln_buf_addf(&msg, "built %s", str_or(ev, "digest", ""));
		if (kiln_json_str(ev, "template"))
			kiln_buf_addf(&msg, ", template %s", kiln_json_str(ev, "template"));
	} else if (strcmp(kind, "vm") == 0) {
		kiln_buf_addf(&msg, "builder VM %s in %.2fs", json_is_true(json_object_get(ev, "restored")) ? "restored"
											 : "booted",
			      json_number_value(json_object_get(ev, "boot_seconds")));
		level = "debug";
	} else if (strcmp(kind, "published") == 0) {
		kiln_buf_addf(&msg, "published %s %s (%s)", str_or(ev, "kind", ""), str_or(ev, "ref", ""),
			      str_or(ev, "digest", ""));
	} else {
		/* the service's own events: their text, else the line */
		const char *m = str_or(ev, "message", kiln_json_str(ev, "state"));
		kiln_buf_adds(&msg, m ? m : line);
	}
	out = json_pack("{s:o,s:s,s:s}", "timestamp",
			e2b_json_time(kiln_json_int(ev, "time", 0) > 0 ? kiln_json_int(ev, "time", 0) : now), "level", level,
			"message", msg.buf);
	if (kind && json_object_get(ev, "line") && b->lines) {
		json_t *lines = json_loads(b->lines, 0, NULL);
		json_int_t l = kiln_json_int(ev, "line", 0);
		if (l == 1)
			json_object_set_new(out, "step", json_string("base"));
		else if (json_is_array(lines) && l >= 2 && (size_t)(l - 2) < json_array_size(lines)) {
			char s[24];
			snprintf(s, sizeof(s), "%lld", (long long)json_integer_value(json_array_get(lines, l - 2)) + 1);
			json_object_set_new(out, "step", json_string(s));
		}
		json_decref(lines);
	}
	kiln_buf_free(&msg);
	json_decref(ev);
	return out;
}

/* ---- handlers ---- */

static long query_long(reg_req *r, const char *key, long dflt, long max)
{
	const char *s = reg_query(r, key);
	char *end;
	long v;

	if (s == NULL || *s == '\0')
		return dflt;
	v = strtol(s, &end, 10);
	return *end || v < 0 ? -1 : v > max ? max : v;
}

static void h_status_of(e2b *e, reg_req *r, struct e2b_req *q, bool logs_only)
{
	struct e2b_build b;
	struct svc_status st;
	kiln_error *err = NULL;
	kiln_strv lines = KILN_STRV_INIT;
	long offset = query_long(r, logs_only ? "cursor" : "logsOffset", 0, 1L << 40);
	long limit = query_long(r, "limit", 1000, 1000);
	int64_t next = 0;
	bool ended = false;
	const char *state;
	json_t *entries = json_array(), *out;
	int found = e2b_db_build_get(e->db, q->team, E2B_ARG(q, 0), E2B_ARG(q, 1), &b, &err);

	memset(&st, 0, sizeof(st));
	if (found <= 0) {
		json_decref(entries);
		if (found < 0)
			return e2b_reply_err(r, err, "build status");
		return e2b_reply_error(r, 404, "build %s of template %s not found", E2B_ARG(q, 1), E2B_ARG(q, 0));
	}
	if (offset < 0 || limit < 0) {
		json_decref(entries);
		e2b_build_free(&b);
		return e2b_reply_error(r, 400, "logsOffset, cursor and limit: want numbers");
	}
	if ((state = e2b_build_state(e, &b, &st, &err)) == NULL)
		goto fail;
	/* read from the offset: one read gives at most 1000 lines, so one from
	 * the start would leave every line past the 1000th unreachable */
	if (st.id[0] && svc_logs(e->svc, b.team, b.svc_id, offset, 0, &lines, &next, &ended, &err) < 0)
		goto fail;
	for (size_t i = 0; i < lines.n && json_array_size(entries) < (size_t)limit; i++)
		json_array_append_new(entries, log_entry(lines.v[i], &b, (int64_t)time(NULL)));
	if (logs_only) {
		out = json_pack("{s:o}", "logs", entries);
	} else {
		out = json_pack("{s:s,s:s,s:s,s:o,s:[]}", "templateID", b.template_id, "buildID", b.id, "status", state,
				"logEntries", entries, "logs");
		if (strcmp(state, "error") == 0) {
			char *step = b.error ? NULL : failed_step(&b, &st);
			json_t *reason = json_pack("{s:s,s:[]}", "message",
						   b.error ? b.error : st.reason ? st.reason : "the build failed",
						   "logEntries");
			if (step)
				json_object_set_new(reason, "step", json_string(step));
			free(step);
			json_object_set_new(out, "reason", reason);
		}
		/* E2B's tags follow finished builds */
		if (strcmp(state, "ready") == 0) {
			char *tags = kiln_xstrdup(b.tag), *save = NULL;
			for (char *t = strtok_r(tags, " ", &save); t; t = strtok_r(NULL, " ", &save))
				if (e2b_db_tag_set(e->db, b.template_id, t, b.id, &err) < 0)
					kiln_error_clear(&err);
			free(tags);
		}
	}
	e2b_reply_json(r, 200, out);
	goto out;
fail:
	json_decref(entries);
	e2b_reply_err(r, err, "build status");
out:
	kiln_strv_free(&lines);
	svc_status_free(&st);
	e2b_build_free(&b);
}

static int int_field(const json_t *body, const char *key, int lo, int hi, int *out, kiln_error **err)
{
	const json_t *v = json_object_get(body, key);

	*out = 0;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return kiln_err(err, KILN_E_INVALID, "%s: want a number from %d to %d", key, lo, hi);
	*out = (int)json_integer_value(v);
	return 0;
}

static void h_create(e2b *e, reg_req *r, struct e2b_req *q, json_t *body)
{
	const char *full = str_or(body, "name", kiln_json_str(body, "alias"));
	const json_t *tags = json_object_get(body, "tags");
	char *name = NULL, *tag = NULL, *bid = NULL;
	struct e2b_template t = { 0 };
	kiln_buf alltags = KILN_BUF_INIT;
	kiln_error *err = NULL;
	json_t *outtags = json_array();
	int cpus, mem;

	if (full == NULL) {
		e2b_reply_error(r, 400, "name: a template name is needed");
		goto out;
	}
	if (e2b_split_name(full, &name, &tag, &err) < 0 || int_field(body, "cpuCount", 1, 64, &cpus, &err) < 0 ||
	    int_field(body, "memoryMB", 128, 65536, &mem, &err) < 0) {
		e2b_reply_err(r, err, "template");
		goto out;
	}
	if (tags && !json_is_null(tags) && (!json_is_array(tags) || json_array_size(tags) > 16)) {
		e2b_reply_error(r, 400, "tags: want an array of at most 16 tags");
		goto out;
	}
	if (tag)
		json_array_append_new(outtags, json_string(tag));
	for (size_t i = 0; i < json_array_size(tags); i++) {
		const char *t1 = json_string_value(json_array_get(tags, i));
		if (t1 == NULL || !kiln_ref_tag_valid(t1)) {
			e2b_reply_error(r, 400, "tags[%zu]: want a tag ([A-Za-z0-9_][A-Za-z0-9._-]*)", i);
			goto out;
		}
		json_array_append_new(outtags, json_string(t1));
	}
	if (json_array_size(outtags) == 0)
		json_array_append_new(outtags, json_string("latest"));
	for (size_t i = 0; i < json_array_size(outtags); i++)
		kiln_buf_addf(&alltags, "%s%s", i ? " " : "", json_string_value(json_array_get(outtags, i)));
	if (e2b_db_template_ensure(e->db, q->team, name, cpus, mem, &t, &err) < 0 ||
	    e2b_db_build_new(e->db, &t, alltags.buf, &bid, &err) < 0) {
		e2b_reply_err(r, err, "template");
		goto out;
	}
	e2b_reply_json(r, 202, json_pack("{s:s,s:s,s:[s],s:[s],s:b,s:O}", "templateID", t.id, "buildID", bid, "names",
				     name, "aliases", name, "public", 0, "tags", outtags));
out:
	json_decref(outtags);
	kiln_buf_free(&alltags);
	e2b_template_free(&t);
	free(name);
	free(tag);
	free(bid);
}

static void h_file_link(e2b *e, reg_req *r, struct e2b_req *q, json_t *body)
{
	const char *hash = E2B_ARG(q, 1), *host = e2b_req_host(r);
	struct e2b_template t;
	char digest[KILN_DIGEST_MAX];
	kiln_error *err = NULL;
	int have;

	if (!e2b_hash_valid(hash))
		return e2b_reply_error(r, 400, "files hash \"%.80s\": want 64 hex digits", hash);
	if ((have = e2b_db_template_find(e->db, q->team, E2B_ARG(q, 0), &t, &err)) <= 0)
		return have < 0 ? e2b_reply_err(r, err, "upload link")
				: e2b_reply_error(r, 404, "template %s not found", E2B_ARG(q, 0));
	have = e2b_db_file_get(e->db, q->team, hash, digest, NULL, &err);
	if (have == 1) {
		/* the team's store may have been pruned since */
		const char *d = digest;
		kiln_strv missing = KILN_STRV_INIT;
		if (svc_blobs_missing(e->svc, q->team, &d, 1, &missing, &err) < 0)
			have = -1;
		else if (missing.n)
			have = 0;
		kiln_strv_free(&missing);
	}
	if (have < 0) {
		e2b_template_free(&t);
		return e2b_reply_err(r, err, "upload link");
	}
	if (have == 1) {
		e2b_reply_json(r, 201, json_pack("{s:b}", "present", 1));
	} else if (host == NULL) {
		e2b_reply_error(r, 400, "a Host header naming this server is needed for the upload link");
	} else {
		char *qs = e2b_upload_query(e->key, q->team, t.id, hash, E2B_UPLOAD_TTL_S);
		char *url = kiln_xasprintf("http://%s/templates/%s/files/%s?%s", host, t.id, hash, qs);
		e2b_reply_json(r, 201, json_pack("{s:b,s:s}", "present", 0, "url", url));
		free(url);
		free(qs);
	}
	e2b_template_free(&t);
}

static int blob_write(void *ud, const void *data, size_t len, kiln_error **err)
{
	return svc_blob_write(ud, data, len, err);
}

static void h_file_put(e2b *e, reg_req *r, struct e2b_req *q, json_t *body)
{
	char digest[KILN_DIGEST_MAX];
	svc_blob_writer *w = NULL;
	kiln_error *err = NULL;
	/* the files a build's context may hold: a tarball of more could never
	 * be built, and extracting it (a few KB of gzip can make GBs of zeros)
	 * would fill the server's disk first */
	uint64_t max = e->svc->cfg.context_max < E2B_MAX_UPLOAD ? e->svc->cfg.context_max : E2B_MAX_UPLOAD, files = 0;

	if (q->body_err)
		return e2b_reply_err(r, q->body_err, "upload"), (void)(q->body_err = NULL);
	if (e2b_spool_finish(q->spool, max, digest, &files, &err) < 0)
		return e2b_reply_err(r, err, "upload");
	if (svc_blob_begin(e->svc, q->team, digest, SVC_ENC_IDENTITY, E2B_MAX_UPLOAD, &w, &err) < 0 ||
	    e2b_spool_replay(q->spool, blob_write, w, &err) < 0) {
		svc_blob_abort(w);
		return e2b_reply_err(r, err, "upload");
	}
	if (svc_blob_commit(w, &err) < 0 ||
	    e2b_db_file_put(e->db, q->team, E2B_ARG(q, 1), digest, (int64_t)files, &err) < 0)
		return e2b_reply_err(r, err, "upload");
	reg_respond(r, 200, "", 0, NULL);
}

/* ---- routing ---- */

static void h_status(e2b *e, reg_req *r, struct e2b_req *q, json_t *body) { h_status_of(e, r, q, false); }
static void h_logs(e2b *e, reg_req *r, struct e2b_req *q, json_t *body) { h_status_of(e, r, q, true); }
static void h_reserved(e2b *e, reg_req *r, struct e2b_req *q, json_t *body)
{
	e2b_reply_error(r, 404, "/v2/templates/ is E2B's API on this server (kiln serve --build): the registry "
			"namespace \"templates\" is not served");
}

/* A route of E2B's template API: a JSON body is read whole (up to BODY_MAX)
 * and parsed before the handler runs; an upload's is spooled as it comes
 * and needs no API key (its link's signature is the grant); an open route
 * answers at once, without one either. */
struct e2b_route {
	struct svc_route rt;
	void (*h)(e2b *e, reg_req *r, struct e2b_req *q, json_t *body);
	enum { B_NONE, B_JSON, B_UPLOAD, B_OPEN } body;
};

static const struct e2b_route ROUTES[] = {
	{ { "POST", "/v3/templates" }, h_create, B_JSON },
	{ { "POST", "/v2/templates/{id}/builds/{build}" }, h_trigger, B_JSON },
	{ { "*", "/v2/{rest*}" }, h_reserved, B_OPEN },
	{ { "GET", "/templates" }, h_list, B_NONE },
	{ { "GET", "/templates/aliases/{alias}" }, h_alias, B_NONE },
	{ { "POST", "/templates/tags" }, h_tags_assign, B_JSON },
	{ { "DELETE", "/templates/tags" }, h_tags_remove, B_JSON },
	{ { "GET", "/templates/{id}" }, h_get, B_NONE },
	{ { "DELETE", "/templates/{id}" }, h_delete, B_NONE },
	{ { "GET", "/templates/{id}/tags" }, h_tags_list, B_NONE },
	{ { "GET", "/templates/{id}/files/{hash}" }, h_file_link, B_NONE },
	{ { "PUT", "/templates/{id}/files/{hash}" }, h_file_put, B_UPLOAD },
	{ { "GET", "/templates/{id}/builds/{build}/status" }, h_status, B_NONE },
	{ { "GET", "/templates/{id}/builds/{build}/logs" }, h_logs, B_NONE },
};

/* The route of METHOD PATH (one trailing slash ignored; no segment longer
 * than 128 bytes: no ID or hash of E2B's is), its captures into q->m. */
static const struct e2b_route *route_of(const char *method, const char *path, struct e2b_req *q)
{
	size_t len = strlen(path);
	char *p;
	const struct e2b_route *rt;

	for (const char *s = path; *s;) {
		size_t l = strcspn(s, "/");
		if (l > 128)
			return NULL;
		s += l + (s[l] == '/');
	}
	p = kiln_xstrndup(path, len > 1 && path[len - 1] == '/' ? len - 1 : len);
	rt = (const struct e2b_route *)SVC_ROUTE_FIND(ROUTES, method, p, &q->m);
	free(p);
	return rt;
}

static void dispatch(e2b *e, reg_req *r, struct e2b_req *q);

static void on_begin(void *ud, reg_req *r)
{
	e2b *e = ud;
	struct e2b_req *q = kiln_xcalloc(1, sizeof(*q));
	kiln_error *err = NULL;
	unsigned status = 500;

	reg_req_set_state(r, q);
	if (!svc_body_start(&q->body, r, BODY_MAX)) {
		char msg[96];
		return e2b_reply_error(r, 413, "%s", svc_body_limit_msg(&q->body, msg, sizeof(msg)));
	}
	q->route = route_of(reg_req_method(r), reg_req_path(r), q);
	if (q->route == NULL)
		return e2b_reply_error(r, 404, "no such endpoint: %s %.200s", reg_req_method(r), reg_req_path(r));
	if (q->route->body == B_OPEN)
		return q->route->h(e, r, q, NULL);
	if (q->route->body == B_UPLOAD) {
		/* the SDK sends no API key with an upload: the link's signature is the grant */
		const char *team = reg_query(r, "team");
		if (e2b_upload_check(e->key, team ? team : "", E2B_ARG(q, 0), E2B_ARG(q, 1), reg_query(r, "expires"),
				     reg_query(r, "signature"), &err) < 0 || !e2b_hash_valid(E2B_ARG(q, 1))) {
			if (err == NULL)
				kiln_err(&err, KILN_E_INVALID, "bad files hash");
			e2b_reply_error(r, 403, "%s", kiln_error_message(err));
			kiln_error_free(err);
			return;
		}
		q->team = kiln_xstrdup(team);
		if (e2b_spool_open(e->tmp, E2B_MAX_UPLOAD, &q->spool, &err) < 0)
			return e2b_reply_err(r, err, "upload");
		return;
	}
	if ((q->team = svc_auth_team(r, NULL, &status, &err)) == NULL) {
		if (status != 429) /* the registry answered that one */
			e2b_reply_error(r, status, "%s", err ? kiln_error_message(err) : "unauthorised");
		kiln_error_free(err);
		return;
	}
	if (q->route->body == B_NONE)
		dispatch(e, r, q);
}

static int on_body(void *ud, reg_req *r, const char *data, size_t len)
{
	struct e2b_req *q = reg_req_state(r);

	(void)ud;
	if (q->spool) {
		if (q->body_err == NULL && e2b_spool_write(q->spool, data, len, &q->body_err) < 0)
			e2b_reply_err(r, q->body_err, "upload"), q->body_err = NULL;
		return 0;
	}
	svc_body_add(&q->body, data, len);
	return 0;
}

static void on_end(void *ud, reg_req *r)
{
	struct e2b_req *q = reg_req_state(r);

	if (q && q->body.over) {
		char msg[96];
		e2b_reply_error(r, 413, "%s", svc_body_limit_msg(&q->body, msg, sizeof(msg)));
	} else if (q) {
		dispatch(ud, r, q);
	}
}

static void on_done(void *ud, reg_req *r)
{
	struct e2b_req *q = reg_req_state(r);

	(void)ud;
	if (q == NULL)
		return;
	svc_route_match_free(&q->m);
	free(q->team);
	svc_body_free(&q->body);
	e2b_spool_free(q->spool);
	kiln_error_free(q->body_err);
	free(q);
	reg_req_set_state(r, NULL);
}

static void dispatch(e2b *e, reg_req *r, struct e2b_req *q)
{
	json_t *body = NULL;
	kiln_error *err = NULL;

	if (q->team == NULL || q->route == NULL)
		return;
	if (q->route->body == B_JSON) {
		body = kiln_json_loadb(q->body.buf.buf, q->body.buf.len, "request body", &err);
		if (body == NULL)
			return e2b_reply_err(r, err, "request");
		if (!json_is_object(body)) {
			json_decref(body);
			return e2b_reply_error(r, 400, "request body: want a JSON object");
		}
	}
	q->route->h(e, r, q, body);
	json_decref(body);
}

static void e2b_stop(e2b *e);

static int e2b_start(svc *s, e2b **out, kiln_error **err)
{
	reg_server *srv = svc_registry(s);
	const struct reg_config *c = reg_server_config(srv);
	static const char *prefixes[3] = { "/templates", "/v3/templates", "/v2/templates/" };
	e2b *e = kiln_xcalloc(1, sizeof(*e));
	char *dbpath = NULL, *keypath = NULL;

	e->svc = s;
	e->dir = kiln_path_join(c->data_dir, "e2b");
	e->tmp = kiln_path_join(e->dir, "tmp");
	dbpath = kiln_path_join(e->dir, "e2b.db");
	keypath = kiln_path_join(e->dir, "key");
	if (kiln_mkdir_p(e->tmp, 0700, err) < 0 || e2b_key_load(keypath, e->key, err) < 0 ||
	    e2b_db_open(s->db, dbpath, &e->db, err) < 0)
		goto fail;
	for (int i = 0; i < 3; i++) {
		e->routes[i] = (struct reg_routes){ .prefix = prefixes[i], .name = "e2b", .ud = e, .begin = on_begin,
						    .body = on_body, .end = on_end, .done = on_done };
		if (reg_server_mount(srv, &e->routes[i], err) < 0)
			goto fail;
	}
	free(dbpath);
	free(keypath);
	*out = e;
	return 0;
fail:
	free(dbpath);
	free(keypath);
	kiln_error_wrap(err, "E2B API");
	e2b_stop(e);
	return -1;
}

static void e2b_stop(e2b *e)
{
	if (e == NULL)
		return;
	e2b_db_close(e->db);
	free(e->dir);
	free(e->tmp);
	free(e);
}

static int frontend_start(svc *s, void **state, kiln_error **err)
{
	e2b *e = NULL;
	int rc = e2b_start(s, &e, err);

	*state = e;
	return rc;
}

static void frontend_stop(void *state)
{
	e2b_stop(state);
}

const struct svc_frontend svc_e2b_frontend = { .name = "E2B API", .start = frontend_start, .stop = frontend_stop };
