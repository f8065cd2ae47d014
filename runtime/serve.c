/* serve.c — the route table of envd's Connect methods and the one function
 * that serves a request on it: decode by the route's kind, run the handler,
 * encode the answer (unary JSON or envelopes with the end-stream message);
 * also the /files reads and writes as the user. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

#define MAX_FILE_WRITE (1u << 30)

const struct rt_route rt_routes[] = {
	{ "/process.Process/Start", true, rt_process_start },
	{ "/process.Process/Connect", true, rt_process_connect },
	{ "/process.Process/List", false, rt_process_list },
	{ "/process.Process/SendInput", false, rt_process_send_input },
	{ "/process.Process/SendSignal", false, rt_process_send_signal },
	{ "/process.Process/CloseStdin", false, rt_process_close_stdin },
	{ "/process.Process/Update", false, rt_process_update },
	{ "/filesystem.Filesystem/Stat", false, rt_fs_stat },
	{ "/filesystem.Filesystem/ListDir", false, rt_fs_list_dir },
	{ "/filesystem.Filesystem/MakeDir", false, rt_fs_make_dir },
	{ "/filesystem.Filesystem/Move", false, rt_fs_move },
	{ "/filesystem.Filesystem/Remove", false, rt_fs_remove },
	{ "/filesystem.Filesystem/WatchDir", true, rt_fs_watch_dir },
	{ "/filesystem.Filesystem/CreateWatcher", false, rt_fs_create_watcher },
	{ "/filesystem.Filesystem/GetWatcherEvents", false, rt_fs_get_watcher_events },
	{ "/filesystem.Filesystem/RemoveWatcher", false, rt_fs_remove_watcher },
	{ NULL, false, NULL },
};

const struct rt_route *rt_route_find(const char *path)
{
	for (const struct rt_route *r = rt_routes; r->path; r++)
		if (strcmp(r->path, path) == 0)
			return r;
	return NULL;
}

int rt_stream_send(rt_stream *st, json_t *msg)
{
	kiln_buf b = KILN_BUF_INIT;

	if (!st->gone) {
		rt_envelope_encode_json(&b, msg);
		if (st->w->write(st->w->ctx, b.buf, b.len) < 0)
			st->gone = true;
	}
	kiln_buf_free(&b);
	json_decref(msg);
	return st->gone ? -1 : 0;
}

int rt_serve(rt_sandbox *sb, const struct rt_route *r, const struct rt_call *call, const void *body, size_t len,
	     const struct rt_writer *w)
{
	rt_stream st = { w, false };
	enum rt_code code = RT_UNKNOWN;
	kiln_error *err = NULL;
	json_t *msg, *reply = NULL;
	kiln_buf out = KILN_BUF_INIT;
	int rc = 0;

	msg = r->streaming ? rt_envelope_decode_request(body, len, RT_MAX_MESSAGE, &err)
			   : rt_unary_decode_request(body, len, RT_MAX_MESSAGE, &err);
	if (msg == NULL)
		code = err->kind == KILN_E_LIMIT ? RT_RESOURCE_EXHAUSTED : RT_INVALID_ARGUMENT;
	if (r->streaming) {
		/* a stream's errors travel in its end-stream message, with 200 */
		if (w->begin(w->ctx, 200, "application/connect+json") < 0)
			goto gone;
		if (msg && r->fn(sb, call, msg, &reply, &st, &code, &err) < 0 && st.gone)
			goto gone;
		rt_envelope_encode_end(&out, err ? code : RT_OK, err ? kiln_error_message(err) : NULL);
		if (w->write(w->ctx, out.buf, out.len) < 0)
			goto gone;
	} else {
		if (msg && r->fn(sb, call, msg, &reply, &st, &code, &err) == 0) {
			char *s = json_dumps(reply, JSON_COMPACT);
			if (w->begin(w->ctx, 200, "application/json") < 0 || w->write(w->ctx, s, strlen(s)) < 0)
				rc = -1;
			free(s);
		} else {
			char *s = rt_error_body(code, kiln_error_message(err));
			if (w->begin(w->ctx, rt_code_http_status(code), "application/json") < 0 ||
			    w->write(w->ctx, s, strlen(s)) < 0)
				rc = -1;
			free(s);
		}
	}
	goto out;
gone:
	rc = -1;
out:
	json_decref(msg);
	json_decref(reply);
	kiln_error_free(err);
	kiln_buf_free(&out);
	return rc;
}

int rt_file_write(rt_sandbox *sb, const char *user, const char *path, const void *data, size_t len, char **abs,
		  kiln_error **err)
{
	kiln_buf out = KILN_BUF_INIT;
	enum rt_code code = RT_OK;
	char *p = NULL;
	int rc;

	if (abs)
		*abs = NULL;
	if (len > MAX_FILE_WRITE)
		return kiln_err(err, KILN_E_LIMIT, "a file of %zu bytes, over the limit of %u", len, MAX_FILE_WRITE);
	user = user ? user : rt_user(sb, NULL);
	if (rt_fs_resolve(sb, user, path, &p, &code, err) < 0)
		return -1;
	rc = rt_fs_helper(sb, user, "write", p, NULL, data ? data : "", len, &out, &code, err);
	if (rc == 0 && code == RT_OK && abs)
		*abs = p;
	else
		free(p);
	if (rc < 0 && code == RT_NOT_FOUND)
		(*err)->kind = KILN_E_NOTFOUND;
	else if (rc < 0 && code == RT_PERMISSION_DENIED)
		(*err)->kind = KILN_E_USAGE;
	kiln_buf_free(&out);
	return rc;
}

int rt_file_read(rt_sandbox *sb, const char *user, const char *path, kiln_buf *out, kiln_error **err)
{
	enum rt_code code = RT_OK;
	char *p = NULL;
	int rc;

	kiln_buf_reset(out);
	user = user ? user : rt_user(sb, NULL);
	if (rt_fs_resolve(sb, user, path, &p, &code, err) < 0)
		return -1;
	rc = rt_fs_helper(sb, user, "read", p, NULL, NULL, 0, out, &code, err);
	free(p);
	if (rc < 0 && code == RT_NOT_FOUND)
		(*err)->kind = KILN_E_NOTFOUND;
	else if (rc < 0 && code == RT_PERMISSION_DENIED)
		(*err)->kind = KILN_E_USAGE;
	return rc;
}

int rt_sandbox_metrics(rt_sandbox *sb, struct rt_metrics *m, kiln_error **err)
{
	kiln_buf out = KILN_BUF_INIT;
	enum rt_code code = RT_OK;
	uint64_t busy = 0, total = 0;
	int rc;

	memset(m, 0, sizeof(*m));
	rc = rt_fs_helper(sb, "root", "metrics", "/", NULL, NULL, 0, &out, &code, err);
	for (char *line = out.buf, *next; rc == 0 && line && *line; line = next) {
		char key[32];
		unsigned long long v;
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (sscanf(line, "%31s %llu", key, &v) != 2)
			continue;
		uint64_t *slot = strcmp(key, "cpus") == 0 ? &m->cpus : strcmp(key, "mem_total") == 0 ? &m->mem_total
			       : strcmp(key, "mem_used") == 0 ? &m->mem_used : strcmp(key, "mem_cache") == 0 ? &m->mem_cache
			       : strcmp(key, "disk_total") == 0 ? &m->disk_total : strcmp(key, "disk_used") == 0 ? &m->disk_used
			       : strcmp(key, "cpu_busy") == 0 ? &busy : strcmp(key, "cpu_total") == 0 ? &total : NULL;
		if (slot)
			*slot = v;
	}
	kiln_buf_free(&out);
	if (rc < 0)
		return -1;
	if (total == 0)
		return kiln_err(err, KILN_E_IO, "the guest's metrics came without CPU times (an older agent?)");
	/* the busy share since the previous call (the first: since the guest booted) */
	pthread_mutex_lock(&sb->mu);
	uint64_t db = busy - sb->cpu_busy, dt = total - sb->cpu_total;
	if (busy < sb->cpu_busy || total <= sb->cpu_total)
		db = busy, dt = total;
	sb->cpu_busy = busy;
	sb->cpu_total = total;
	pthread_mutex_unlock(&sb->mu);
	m->cpu_pct = dt ? 100.0 * (double)db / (double)dt : 0;
	return 0;
}
