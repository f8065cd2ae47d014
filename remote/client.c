/* client.c — the build service's client (remote.h): the context listed as
 * the local build sees it (.dockerignore, builder/tree.c), each file's sha256, the
 * server asked which it lacks, only those sent (zstd), the build submitted,
 * then its log followed — each event handed to the caller as the local
 * builder's struct build_event, so the same lines and --json events come
 * out — resuming at the cursor when the connection drops.  Every request
 * goes over the registry client's HTTP transport (regclient/http.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <zstd.h>

#include "builder/context.h"
#include "builder/event.h"
#include "builder/request.h"
#include "regclient/regclient.h"
#include "remote/remote.h"

struct http {
	long status;
	kiln_buf body; /* the answer's, 2xx or not */
};

struct cl {
	const struct remote_opts *o;
	char *base, *auth;
	rc_client *rc; /* the registry client's transport: keep-alive, retries with backoff */
	uint64_t sent;
};

/* The server's base URL and the credential: $KILN_TOKEN, else kiln login's for the host. */
static int client_init(struct cl *c, kiln_error **err)
{
	char *host, *user = NULL, *pass = NULL;
	int ret = 0;

	c->base = kiln_xstrdup(c->o->url);
	while (strlen(c->base) && c->base[strlen(c->base) - 1] == '/')
		c->base[strlen(c->base) - 1] = '\0';
	if (strncmp(c->base, "http://", 7) != 0 && strncmp(c->base, "https://", 8) != 0) {
		char *t = kiln_xasprintf("%s://%s", oci_host_insecure(c->base) ? "http" : "https", c->base);
		free(c->base);
		c->base = t;
	}
	host = kiln_xstrdup(strstr(c->base, "://") + 3);
	host[strcspn(host, "/")] = '\0';
	if (c->o->token && *c->o->token)
		c->auth = kiln_xasprintf("Authorization: Bearer %s", c->o->token);
	else if ((ret = rc_auth_lookup(host, &user, &pass, err)) == 1)
		c->auth = kiln_xasprintf("Authorization: Bearer %s", pass);
	/* the credential goes as the header above: the client itself has none */
	if (ret >= 0 && (c->rc = rc_client_new(host, &(struct rc_client_opts){ .anonymous = 1, .base = c->base }, err)) == NULL)
		ret = -1;
	free(user);
	free(pass);
	free(host);
	return ret < 0 ? -1 : 0;
}

static void client_free(struct cl *c)
{
	free(c->base);
	if (c->auth)
		explicit_bzero(c->auth, strlen(c->auth));
	free(c->auth);
	rc_client_free(c->rc);
}

/* One request with the service's headers.  token_request: the service's
 * own 401/403 come back as answers (with its error), not into the
 * registry's challenge flow. */
static void request(struct cl *c, struct rc_http *r, const char *method, const char *path, const char *enc)
{
	rc_http_init(r, c->rc, method, kiln_xasprintf("%s%s", c->base, path), NULL);
	r->token_request = 1;
	if (c->auth)
		r->headers = curl_slist_append(r->headers, c->auth);
	if (enc) {
		char *x = kiln_xasprintf("Content-Encoding: %s", enc);
		r->headers = curl_slist_append(r->headers, x);
		free(x);
	}
	r->headers = curl_slist_append(r->headers, "Content-Type: application/json");
}

static int call(struct cl *c, const char *method, const char *path, const void *body, size_t len, const char *enc,
		struct http *h, kiln_error **err)
{
	struct rc_http r;
	int ret;

	request(c, &r, method, path, enc);
	if (body) {
		r.body_mem = body;
		r.body_len = len;
		r.has_body = 1;
	}
	r.out_max = 64 << 20;
	ret = rc_http_do(&r, err);
	h->status = r.status;
	h->body = r.status >= 200 && r.status < 300 ? r.out : r.errbody;
	if (r.status >= 200 && r.status < 300)
		r.out = (kiln_buf)KILN_BUF_INIT;
	else
		r.errbody = (kiln_buf)KILN_BUF_INIT;
	rc_http_free(&r);
	if (ret < 0)
		return kiln_error_wrap(err, "build server %s", c->base);
	return 0;
}

/* The server's {"error"} for a non-2xx answer. */
static int answer_fail(struct cl *c, const char *what, struct http *h, kiln_error **err)
{
	json_t *j = json_loadb(h->body.buf ? h->body.buf : "", h->body.len, 0, NULL);
	const char *msg = json_string_value(json_object_get(j, "error"));
	int ret = kiln_err(err, h->status == 404 ? KILN_E_NOTFOUND : h->status == 400 ? KILN_E_INVALID : KILN_E_GENERIC,
			   "%s%s%s (HTTP %ld)", what ? what : "", what ? ": " : "", msg ? msg : "the build server refused",
			   h->status);

	json_decref(j);
	return ret;
}

static char *team_query(struct cl *c, const char *sep)
{
	return c->o->team ? kiln_xasprintf("%steam=%s", sep, c->o->team) : kiln_xstrdup("");
}

static int upload(struct cl *c, const char *path, const char *digest, kiln_error **err)
{
	char *data = NULL, *z = NULL, *q = team_query(c, "?"), *p = NULL;
	size_t len = 0, zlen;
	struct http h;
	int ret = -1;

	if (kiln_read_file(path, &data, &len, 0, err) < 0)
		goto out;
	z = kiln_xmalloc(ZSTD_compressBound(len));
	zlen = ZSTD_compress(z, ZSTD_compressBound(len), data, len, 3);
	if (ZSTD_isError(zlen)) {
		kiln_err(err, KILN_E_IO, "zstd: %s", ZSTD_getErrorName(zlen));
		goto out;
	}
	p = kiln_xasprintf("/build/v1/blobs/%s%s", digest, q);
	if (call(c, "PUT", p, z, zlen, "zstd", &h, err) < 0)
		goto out;
	if (h.status != 201) {
		answer_fail(c, path, &h, err);
		kiln_buf_free(&h.body);
		goto out;
	}
	kiln_buf_free(&h.body);
	c->sent += zlen;
	ret = 0;
out:
	free(p);
	free(q);
	free(z);
	free(data);
	return ret;
}

/* The context's regular files hashed by a few threads (this one too): on
 * the client, a cached build waits for nothing else. */
struct hashing {
	char **paths;
	char (*digests)[KILN_DIGEST_MAX];
	size_t n;
};

static int hash_one(void *ud, size_t i, unsigned worker, kiln_error **err)
{
	struct hashing *h = ud;

	(void)worker;
	return kiln_digest_file(KILN_SHA256, h->paths[i], h->digests[i], err);
}

static int hash_files(struct hashing *h, kiln_error **err)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t workers = cpus > 4 ? 4 : cpus > 1 ? (size_t)cpus : 1;

	if (workers > 1 + h->n / 16) /* a thread is worth it for 16 files or more */
		workers = 1 + h->n / 16;
	return kiln_parallel(h->n, (unsigned)workers, hash_one, h, err);
}

/* List and hash the context: files gets the request's array, byd each
 * digest's path (the first with that content). */
static int list_context(const char *dir, const char *dockerfile, json_t *files, json_t *byd,
			struct remote_result *res, kiln_error **err)
{
	build_ignore *ig = NULL;
	build_tree *t = NULL;
	char *igpath = strcmp(dockerfile, "-") ? kiln_xasprintf("%s.dockerignore", dockerfile) : kiln_xstrdup("");
	struct hashing h = { 0 };
	int ret = -1;

	if (!*igpath || access(igpath, F_OK) != 0) {
		free(igpath);
		igpath = kiln_path_join(dir, ".dockerignore");
	}
	if (build_ignore_load(igpath, &ig, err) < 0 || build_tree_open(dir, ig, &t, err) < 0)
		goto out;
	h.paths = kiln_xcalloc(build_tree_count(t) + 1, sizeof(*h.paths));
	h.digests = kiln_xcalloc(build_tree_count(t) + 1, sizeof(*h.digests));
	for (size_t i = 0; i < build_tree_count(t); i++)
		if (S_ISREG(build_tree_entry(t, i)->st.st_mode))
			h.paths[h.n++] = kiln_path_join(dir, build_tree_entry(t, i)->path);
	if (hash_files(&h, err) < 0)
		goto out;
	for (size_t i = 0, k = 0; i < build_tree_count(t); i++) {
		const struct build_entry *e = build_tree_entry(t, i);
		json_t *f = json_pack("{s:s,s:I}", "path", e->path, "mode", (json_int_t)e->st.st_mode);
		if (S_ISREG(e->st.st_mode)) {
			const char *d = h.digests[k], *full = h.paths[k];
			k++;
			json_object_set_new(f, "digest", json_string(d));
			if (!json_object_get(byd, d))
				json_object_set_new(byd, d, json_string(full));
		} else if (S_ISLNK(e->st.st_mode)) {
			json_object_set_new(f, "link", json_string(e->link));
		} else if (!S_ISDIR(e->st.st_mode)) {
			json_decref(f);
			continue; /* sockets, fifos, devices: a build context has none (docker skips them too) */
		}
		json_array_append_new(files, f);
	}
	res->files = json_array_size(files);
	ret = 0;
out:
	for (size_t i = 0; i < h.n; i++)
		free(h.paths[i]);
	free(h.paths);
	free(h.digests);
	build_tree_free(t);
	build_ignore_free(ig);
	free(igpath);
	return ret;
}

/* The blobs the server said it lacks (a 409 to a submit with ?missing=1),
 * sent by a few connections at once (this one too): a first build's 200
 * small files each wait for the server to make one durable, and those of
 * concurrent uploads share its disk's commits. */
struct sending {
	struct cl *conn[4];           /* worker k's connection (0: the caller's) */
	const char **paths, **digests;
	size_t done[4];
};

static int send_one(void *ud, size_t i, unsigned worker, kiln_error **err)
{
	struct sending *t = ud;

	if (upload(t->conn[worker], t->paths[i], t->digests[i], err) < 0)
		return -1;
	t->done[worker]++;
	return 0;
}

static int send_missing(struct cl *c, const struct http *h, const json_t *byd, struct remote_result *res,
			kiln_error **err)
{
	json_t *j = json_loadb(h->body.buf ? h->body.buf : "", h->body.len, 0, NULL), *d;
	size_t i, n = json_array_size(json_object_get(j, "missing"));
	struct sending t = { .conn = { c }, .paths = kiln_xcalloc(n + 1, sizeof(*t.paths)),
			     .digests = kiln_xcalloc(n + 1, sizeof(*t.digests)) };
	struct cl more[3];
	unsigned workers = 1;
	int ret = 0;

	if (!json_is_array(json_object_get(j, "missing")))
		ret = kiln_err(err, KILN_E_GENERIC, "build server %s: a 409 without the missing files", c->base);
	json_array_foreach(json_object_get(j, "missing"), i, d) {
		t.paths[i] = json_string_value(json_object_get(byd, json_string_value(d) ?: ""));
		t.digests[i] = json_string_value(d);
		if (t.paths[i] == NULL) {
			ret = kiln_err(err, KILN_E_GENERIC, "build server %s: asks for %s, not in the context", c->base,
				       json_string_value(d) ?: "?");
			break;
		}
	}
	for (; ret == 0 && n >= 16 && workers < 4; workers++) { /* one that cannot connect: fewer */
		kiln_error *e = NULL;
		more[workers - 1] = (struct cl){ .o = c->o };
		if (client_init(&more[workers - 1], &e) < 0) {
			kiln_error_free(e);
			client_free(&more[workers - 1]);
			break;
		}
		t.conn[workers] = &more[workers - 1];
	}
	if (ret == 0)
		ret = kiln_parallel(n, workers, send_one, &t, err);
	for (unsigned k = 0; k < workers; k++) {
		res->uploaded += t.done[k];
		if (k) {
			c->sent += more[k - 1].sent;
			client_free(&more[k - 1]);
		}
	}
	free(t.paths);
	free(t.digests);
	json_decref(j);
	res->bytes_sent = c->sent;
	return ret;
}

/* ---- following the log ---- */
struct follow {
	const struct remote_opts *o;
	kiln_buf part;
	int64_t cursor;     /* lines seen */
	int64_t url_cursor; /* the cursor the request asked from */
	int64_t skip;       /* lines a retried request gives again */
	unsigned attempt;
	struct remote_result *res;
	json_t *final; /* the service's last status event (done / failed / cancelled): the log ends there */
};

static void event(struct follow *f, const char *line)
{
	json_t *j = json_loads(line, 0, NULL);
	const char *ev = json_string_value(json_object_get(j, "event"));
	struct build_event be = { 0 };
	struct build_run_stats rs = { 0 };
	json_t *run;

	if (ev == NULL)
		goto out;
	be.step = (int)json_integer_value(json_object_get(j, "step"));
	be.total = (int)json_integer_value(json_object_get(j, "total"));
	be.stage = json_string_value(json_object_get(j, "stage")) ?: "0";
	be.instruction = json_string_value(json_object_get(j, "instruction")) ?: "";
	be.line = (int)json_integer_value(json_object_get(j, "line"));
	be.seconds = json_number_value(json_object_get(j, "seconds"));
	run = json_object_get(j, "run");
	if (strcmp(ev, "vm") == 0)
		run = j;
	if (run) {
		rs.ext4_ms = (int64_t)(json_number_value(json_object_get(run, "ext4_seconds")) * 1e3);
		rs.boot_ms = (int64_t)(json_number_value(json_object_get(run, "boot_seconds")) * 1e3);
		rs.sync_ms = (int64_t)(json_number_value(json_object_get(run, "sync_seconds")) * 1e3);
		rs.exec_ms = (int64_t)(json_number_value(json_object_get(run, "exec_seconds")) * 1e3);
		rs.capture_ms = (int64_t)(json_number_value(json_object_get(run, "capture_seconds")) * 1e3);
		rs.booted = json_is_true(json_object_get(run, "booted"));
		rs.restored = json_is_true(json_object_get(run, "restored"));
		rs.base_restored = json_is_true(json_object_get(run, "base_restored"));
		be.run = &rs;
	}
	if (strcmp(ev, "step") == 0) {
		be.kind = BUILD_EV_STEP;
	} else if (strcmp(ev, "step_done") == 0) {
		be.kind = BUILD_EV_STEP_DONE;
		be.has_cache = json_string_value(json_object_get(j, "cache")) != NULL;
		be.cached = be.has_cache && strcmp(json_string_value(json_object_get(j, "cache")), "hit") == 0;
		f->res->steps++;
		f->res->cached += be.cached;
	} else if (strcmp(ev, "vm") == 0) {
		be.kind = BUILD_EV_VM;
	} else if (strcmp(ev, "output") == 0) {
		be.kind = BUILD_EV_OUTPUT;
		be.data = json_string_value(json_object_get(j, "data")) ?: "";
		be.len = json_string_length(json_object_get(j, "data"));
	} else if (strcmp(ev, "done") == 0) {
		be.kind = BUILD_EV_DONE;
		be.step = (int)json_integer_value(json_object_get(j, "steps"));
		be.digest = json_string_value(json_object_get(j, "digest"));
		be.template_digest = json_string_value(json_object_get(j, "template"));
		snprintf(f->res->digest, sizeof(f->res->digest), "%s", be.digest ? be.digest : "");
		snprintf(f->res->template_digest, sizeof(f->res->template_digest), "%s",
			 be.template_digest ? be.template_digest : "");
	} else {
		const char *state = json_string_value(json_object_get(j, "state"));
		if (strcmp(ev, "status") == 0 && state &&
		    (strcmp(state, "done") == 0 || strcmp(state, "failed") == 0 || strcmp(state, "cancelled") == 0)) {
			json_decref(f->final);
			f->final = json_incref(j);
		}
		if (f->o->on_other)
			f->o->on_other(f->o->ud, j);
		goto out;
	}
	if (f->o->on_event)
		f->o->on_event(f->o->ud, &be);
out:
	json_decref(j);
}

/* The stream's bytes: events out as their lines complete.  A retry by the
 * transport starts the same URL over, so the lines it already gave are
 * skipped. */
static int on_log(void *ud, struct rc_http *r, const char *p, size_t n)
{
	struct follow *f = ud;
	char *nl;

	if (r->attempts != f->attempt) {
		f->attempt = r->attempts;
		f->skip = f->cursor - f->url_cursor;
		f->part.len = 0;
	}
	kiln_buf_add(&f->part, p, n);
	while ((nl = memchr(f->part.buf, '\n', f->part.len)) != NULL) {
		*nl = '\0';
		if (f->part.buf[0] && f->skip > 0) { /* an empty line is a keep-alive */
			f->skip--;
		} else if (f->part.buf[0]) {
			event(f, f->part.buf);
			f->cursor++;
		}
		if (f->final)
			return -1; /* the result is known: no need to wait for the stream's end */
		size_t used = (size_t)(nl - f->part.buf) + 1;
		memmove(f->part.buf, nl + 1, f->part.len - used);
		f->part.len -= used;
		f->part.buf[f->part.len] = '\0';
	}
	return 0;
}

/* *final: the build's last status event, when the stream carried it. */
static int follow(struct cl *c, const char *id, struct remote_result *res, json_t **final, kiln_error **err)
{
	struct follow f = { .o = c->o, .part = KILN_BUF_INIT, .res = res };
	char *q = team_query(c, "&");
	int ret = -1;

	/* the transport retries a failed connection itself; this loop resumes
	 * a stream that broke after it had given lines, at its cursor */
	for (int attempt = 0; attempt < 30 && ret < 0; attempt++) {
		struct rc_http r;
		kiln_error *e = NULL;
		char *path = kiln_xasprintf("/build/v1/builds/%s/logs?follow=1&cursor=%lld%s", id, (long long)f.cursor, q);

		request(c, &r, "GET", path, NULL);
		free(path);
		r.sink = on_log;
		r.sink_ud = &f;
		f.url_cursor = f.cursor;
		f.attempt = 0;
		int rc = rc_http_do(&r, &e);
		if (f.final || (rc == 0 && r.status == 200)) {
			ret = 0;
		} else if (rc == 0) {
			kiln_err(err, r.status == 404 ? KILN_E_NOTFOUND : KILN_E_GENERIC, "build %s: log: HTTP %ld", id,
				 r.status);
			rc_http_free(&r);
			kiln_error_free(e);
			break;
		} else {
			kiln_debug("build %s: log connection lost (%s), resuming at %lld", id, kiln_error_message(e),
				   (long long)f.cursor);
			sleep(1);
		}
		rc_http_free(&r);
		kiln_error_free(e);
	}
	if (ret < 0 && *err == NULL)
		kiln_err(err, KILN_E_IO, "build %s: lost the log stream", id);
	*final = f.final;
	kiln_buf_free(&f.part);
	free(q);
	return ret;
}

/* Secrets go over HTTPS, or plain HTTP to a host the user marked as such
 * (loopback, $KILN_INSECURE_REGISTRIES). */
static int secrets_transport_ok(const struct cl *c, kiln_error **err)
{
	if (strncmp(c->base, "http://", 7) != 0)
		return 0;
	char *host = kiln_xstrdup(c->base + 7);
	host[strcspn(host, "/")] = '\0';
	bool ok = oci_host_insecure(host);
	free(host);
	return ok ? 0 : kiln_err(err, KILN_E_INVALID, "--secret: %s is plain HTTP; secrets go only over HTTPS (or to "
				 "loopback and $KILN_INSECURE_REGISTRIES hosts)", c->base);
}

/* The secrets, base64, for the server's memory. */
static int add_secrets(struct cl *c, const struct remote_request *req, json_t *j, kiln_error **err)
{
	json_t *a = json_array();

	for (size_t i = 0; i < req->nsecrets; i++) {
		const struct remote_secret *sc = &req->secrets[i];
		size_t n = 4 * ((sc->len + 2) / 3) + 1;
		unsigned char *b = kiln_xmalloc(n);
		EVP_EncodeBlock(b, (const unsigned char *)sc->data, (int)sc->len);
		json_array_append_new(a, json_pack("{s:s,s:s}", "id", sc->id, "data", (const char *)b));
		explicit_bzero(b, n);
		free(b);
	}
	json_object_set_new(j, "secrets", a);
	return 0;
}

int remote_build(const struct remote_opts *o, const struct remote_request *req, const char *context,
		     const char *dockerfile, struct remote_result *res, kiln_error **err)
{
	struct cl c = { .o = o };
	char *dfpath = dockerfile ? kiln_xstrdup(dockerfile) : kiln_path_join(context, "Dockerfile");
	char *text = NULL, *q = NULL, *p = NULL, *body = NULL;
	size_t len = 0;
	json_t *j = NULL, *files = json_array(), *byd = json_object(), *st = NULL;
	struct http h = { 0 };
	int ret = -1;

	memset(res, 0, sizeof(*res));
	if (client_init(&c, err) < 0 || (req->nsecrets && secrets_transport_ok(&c, err) < 0))
		goto out;
	if (kiln_read_file(dfpath, &text, &len, 4 << 20, err) < 0)
		goto out;
	if (list_context(context, dfpath, files, byd, res, err) < 0)
		goto out;
	j = json_object();
	build_request_to_json(&req->build, j);
	if (req->source_date_epoch)
		json_object_set_new(j, "source_date_epoch", json_string(req->source_date_epoch));
	json_object_set_new(j, "dockerfile", json_stringn(text, len));
	json_object_set(j, "files", files);
	{
		const char *b = strrchr(dfpath, '/');
		json_object_set_new(j, "dockerfile_name",
				    json_string(strcmp(dfpath, "-") == 0 ? "<stdin>" : b ? b + 1 : dfpath));
	}
	if (req->nsecrets && add_secrets(&c, req, j, err) < 0)
		goto out;
	{ /* the transport may retry the submit: the server queues one build per key */
		unsigned char rnd[16];
		char key[33];
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
			kiln_err_errno(err, errno, "getrandom");
			goto out;
		}
		for (size_t i = 0; i < sizeof(rnd); i++)
			snprintf(key + 2 * i, 3, "%02x", rnd[i]);
		json_object_set_new(j, "client_key", json_string(key));
	}
	body = json_dumps(j, JSON_COMPACT);
	q = team_query(&c, "&");
	p = kiln_xasprintf("/build/v1/builds?missing=1%s", q);
	/* one request when the server has every file; else it names those it
	 * lacks, they are sent, and the request again */
	for (int round = 0;; round++) {
		res->bytes_request += strlen(body);
		if (call(&c, "POST", p, body, strlen(body), NULL, &h, err) < 0)
			goto out;
		if (h.status != 409 || round == 2)
			break;
		double t0 = kiln_now_ms();
		int smrc = send_missing(&c, &h, byd, res, err);
		res->upload_s += (kiln_now_ms() - t0) / 1e3;
		if (smrc < 0)
			goto out;
		kiln_buf_free(&h.body);
	}
	if (o->on_uploaded)
		o->on_uploaded(o->ud, res);
	free(q);
	q = team_query(&c, "?");
	if (h.status != 202) {
		answer_fail(&c, NULL, &h, err);
		goto out;
	}
	st = json_loadb(h.body.buf, h.body.len, 0, NULL);
	snprintf(res->id, sizeof(res->id), "%s", json_string_value(json_object_get(st, "id")) ?: "");
	json_decref(st);
	st = NULL;
	kiln_buf_free(&h.body);
	if (follow(&c, res->id, res, &st, err) < 0)
		goto out;
	if (st == NULL) { /* a stream without the service's final status: ask */
		free(p);
		p = kiln_xasprintf("/build/v1/builds/%s%s", res->id, q);
		if (call(&c, "GET", p, NULL, 0, NULL, &h, err) < 0)
			goto out;
		if (h.status != 200) {
			answer_fail(&c, res->id, &h, err);
			goto out;
		}
		st = json_loadb(h.body.buf, h.body.len, 0, NULL);
	}
	const char *state = json_string_value(json_object_get(st, "state"));
	if (state == NULL || strcmp(state, "done") != 0) {
		const char *why = json_string_value(json_object_get(st, "reason"));
		kiln_err(err, KILN_E_GENERIC, "%s", why ? why : state ? state : "the build did not finish");
		goto out;
	}
#define COPY(f, k) snprintf(res->f, sizeof(res->f), "%s", json_string_value(json_object_get(st, k)) ?: "")
	COPY(image, "image");
	COPY(template_ref, "template_ref");
#undef COPY
	ret = 0;
out:
	kiln_buf_free(&h.body);
	json_decref(st);
	{ /* the secrets' copies, wiped before they are freed */
		json_t *e;
		size_t i;
		json_array_foreach(json_object_get(j, "secrets"), i, e) {
			json_t *d = json_object_get(e, "data");
			explicit_bzero((char *)json_string_value(d), json_string_length(d));
		}
		if (body)
			explicit_bzero(body, strlen(body));
	}
	json_decref(j);
	json_decref(files);
	json_decref(byd);
	free(body);
	free(p);
	free(q);
	free(text);
	free(dfpath);
	if (c.rc) {
		const struct rc_client_stats *cs = rc_client_stats(c.rc);
		kiln_debug("build server %s: %llu requests over %llu connections, %llu retries", c.base,
			   (unsigned long long)cs->requests, (unsigned long long)cs->connects,
			   (unsigned long long)cs->retries);
	}
	client_free(&c);
	return ret;
}

int remote_prune(const struct remote_opts *o, uint64_t max_bytes, int64_t older_than_s,
		     struct remote_prune_stats *st, kiln_error **err)
{
	struct cl c = { .o = o };
	struct http h = { 0 };
	char *path = NULL, *q = NULL;
	json_t *j = NULL;
	int ret = -1;

	memset(st, 0, sizeof(*st));
	if (client_init(&c, err) < 0)
		goto out;
	q = team_query(&c, "&");
	char age[40] = "";
	if (older_than_s >= 0)
		snprintf(age, sizeof(age), "&older_than_s=%lld", (long long)older_than_s);
	path = kiln_xasprintf("/build/v1/cache/prune?max_bytes=%llu%s%s", (unsigned long long)max_bytes, age, q);
	if (call(&c, "POST", path, "", 0, NULL, &h, err) < 0)
		goto out;
	if (h.status != 200) {
		answer_fail(&c, "cache prune", &h, err);
		goto out;
	}
	j = json_loadb(h.body.buf, h.body.len, 0, NULL);
	st->entries_removed = (uint64_t)json_integer_value(json_object_get(j, "entries_removed"));
	st->bytes_before = (uint64_t)json_integer_value(json_object_get(j, "bytes_before"));
	st->bytes_after = (uint64_t)json_integer_value(json_object_get(j, "bytes_after"));
	st->files_removed = (uint64_t)json_integer_value(json_object_get(j, "files_removed"));
	ret = 0;
out:
	json_decref(j);
	kiln_buf_free(&h.body);
	free(path);
	free(q);
	client_free(&c);
	return ret;
}
