/* filesystem.c — filesystem.Filesystem: Stat, ListDir, MakeDir, Move, Remove,
 * WatchDir and the watcher trio, each one run of the agent's `--fs` helper as
 * the caller's user; entries become envd's EntryInfo. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/internal.h"

#define MAX_WATCHERS 64
#define MAX_WATCH_EVENTS 10000

struct rt_watcher {
	uint32_t id;
	struct rt_proc *p;
	struct rt_sub *s;
	kiln_buf pending; /* helper output not yet a whole event */
	json_t *events;
	struct rt_watcher *next;
};

static void add_out(void *user, const void *data, size_t len)
{
	if (((kiln_buf *)user)->len < 4096)
		kiln_buf_add(user, data, len);
}

/* envd's path rule: "" is the home, ~ and ~/x in it, relative to it; the
 * helper needs it absolute, so the home is asked of the guest once per call
 * only when needed (through the user's own HOME). */
int rt_fs_resolve(rt_sandbox *sb, const char *user, const char *path, char **out, enum rt_code *code,
		   kiln_error **err)
{
	kiln_buf home = KILN_BUF_INIT;

	if (path && path[0] == '/') {
		*out = kiln_xstrdup(path);
		return 0;
	}
	/* the home as the user's process sees it: the agent sets HOME from
	 * the guest's /etc/passwd (no shell needed in the template) */
	const char *argv[] = { "/proc/self/exe", "--fs", "home", "/", NULL };
	struct guest_exec_opts o;
	struct guest_result res;
	guest_exec_opts_init(&o);
	o.argv = argv;
	o.run_as = user;
	o.on_stdout = add_out;
	o.user = &home;
	pthread_mutex_lock(&sb->mu);
	int rc = rt_check_locked(sb, err) < 0 ? -1 : guest_exec(sb->conn, &o, NULL, 0, 30000, &res, err);
	pthread_mutex_unlock(&sb->mu);
	if (rc < 0 || home.len == 0 || home.buf[0] != '/') {
		kiln_buf_free(&home);
		*code = RT_UNAUTHENTICATED;
		if (rc == 0)
			kiln_err(err, KILN_E_INVALID, "user %s has no home directory", user);
		return -1;
	}
	if (path == NULL || *path == '\0' || strcmp(path, "~") == 0)
		*out = kiln_buf_detach(&home);
	else
		*out = kiln_xasprintf("%s/%s", home.buf, strncmp(path, "~/", 2) == 0 ? path + 2 : path);
	kiln_buf_free(&home);
	return 0;
}

static json_t *entry_json(char *const f[GUEST_FS_FIELDS])
{
	unsigned long mode = strtoul(f[4], NULL, 8);
	time_t sec = (time_t)strtoll(f[7], NULL, 10);
	char perm[11], when[64];
	struct tm tm;
	const char *type = f[1][0] == 'd' ? "FILE_TYPE_DIRECTORY" : f[1][0] == 'f' ? "FILE_TYPE_FILE"
				: f[1][0] == 'l'			  ? "FILE_TYPE_SYMLINK"
									  : "FILE_TYPE_UNSPECIFIED";
	static const char rwx[] = "rwxrwxrwx";

	/* Go's FileMode.String(), which envd sends */
	perm[0] = (mode & 0170000) == 0040000 ? 'd' : (mode & 0170000) == 0120000 ? 'L' : '-';
	for (int i = 0; i < 9; i++)
		perm[i + 1] = mode & (1u << (8 - i)) ? rwx[i] : '-';
	perm[10] = '\0';
	gmtime_r(&sec, &tm);
	size_t n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(when + n, sizeof(when) - n, ".%09lluZ", strtoull(f[8], NULL, 10) % 1000000000ull);
	json_t *e = json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:s, s:s}", "name", f[0], "type", type, "path", f[2],
			      "size", f[3], "mode", (json_int_t)(mode & 0777), "permissions", perm, "owner", f[5],
			      "group", f[6], "modifiedTime", when);
	if (*f[9])
		json_object_set_new(e, "symlinkTarget", json_string(f[9]));
	return e;
}

/* Split helper output into entries; NULL if malformed. */
static json_t *entries(const kiln_buf *out, kiln_error **err)
{
	json_t *list = json_array();
	char *f[GUEST_FS_FIELDS];
	size_t off = 0;

	while (off < out->len) {
		for (int i = 0; i < GUEST_FS_FIELDS; i++) {
			char *nul = off < out->len ? memchr(out->buf + off, 0, out->len - off) : NULL;
			if (nul == NULL) {
				json_decref(list);
				kiln_err(err, KILN_E_INVALID, "the agent's file helper sent a malformed entry");
				return NULL;
			}
			f[i] = out->buf + off;
			off = (size_t)(nul - out->buf) + 1;
		}
		json_array_append_new(list, entry_json(f));
	}
	return list;
}

/* One helper call answering {entry} (or {} with no_entry). */
static int entry_call(rt_sandbox *sb, const struct rt_call *call, const char *op, const char *path_in,
		      const char *arg, bool no_entry, json_t **reply, enum rt_code *code, kiln_error **err)
{
	const char *user = rt_user(sb, call);
	kiln_buf out = KILN_BUF_INIT;
	char *path = NULL;
	json_t *list = NULL;
	int rc = -1;

	if (rt_fs_resolve(sb, user, path_in, &path, code, err) < 0 ||
	    rt_fs_helper(sb, user, op, path, arg, NULL, 0, &out, code, err) < 0)
		goto out;
	if (no_entry) {
		*reply = json_object();
	} else {
		if ((list = entries(&out, err)) == NULL || json_array_size(list) != 1) {
			*code = RT_INTERNAL;
			if (list)
				kiln_err(err, KILN_E_INVALID, "the agent's file helper sent no entry");
			goto out;
		}
		*reply = json_pack("{s:O}", "entry", json_array_get(list, 0));
	}
	rc = 0;
out:
	json_decref(list);
	kiln_buf_free(&out);
	free(path);
	return rc;
}

int rt_fs_stat(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply, rt_stream *st,
	       enum rt_code *code, kiln_error **err)
{
	const char *path;
	*code = RT_INVALID_ARGUMENT;
	if (rt_get_string(msg, "path", false, &path, err) < 0)
		return -1;
	return entry_call(sb, call, "stat", path, NULL, false, reply, code, err);
}

int rt_fs_make_dir(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply, rt_stream *st,
		   enum rt_code *code, kiln_error **err)
{
	const char *path;
	*code = RT_INVALID_ARGUMENT;
	if (rt_get_string(msg, "path", true, &path, err) < 0)
		return -1;
	return entry_call(sb, call, "mkdir", path, NULL, false, reply, code, err);
}

int rt_fs_remove(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply, rt_stream *st,
		 enum rt_code *code, kiln_error **err)
{
	const char *path;
	*code = RT_INVALID_ARGUMENT;
	if (rt_get_string(msg, "path", true, &path, err) < 0)
		return -1;
	return entry_call(sb, call, "remove", path, NULL, true, reply, code, err);
}

int rt_fs_move(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply, rt_stream *st,
	       enum rt_code *code, kiln_error **err)
{
	const char *src, *dst;
	char *dst_abs = NULL;
	int rc = -1;

	*code = RT_INVALID_ARGUMENT;
	if (rt_get_string(msg, "source", true, &src, err) < 0 || rt_get_string(msg, "destination", true, &dst, err) < 0)
		return -1;
	if (rt_fs_resolve(sb, rt_user(sb, call), dst, &dst_abs, code, err) == 0)
		rc = entry_call(sb, call, "move", src, dst_abs, false, reply, code, err);
	free(dst_abs);
	return rc;
}

int rt_fs_list_dir(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply, rt_stream *st,
		   enum rt_code *code, kiln_error **err)
{
	const char *path, *user = rt_user(sb, call);
	kiln_buf out = KILN_BUF_INIT;
	char *abs = NULL, depth_s[16];
	json_t *list;
	int64_t depth;
	int rc = -1;

	*code = RT_INVALID_ARGUMENT;
	if (rt_get_string(msg, "path", false, &path, err) < 0 || rt_get_int(msg, "depth", 1, &depth, err) < 0)
		return -1;
	if (depth < 0 || depth > 64)
		return kiln_err(err, KILN_E_INVALID, "depth %lld is not from 1 to 64", (long long)depth);
	snprintf(depth_s, sizeof(depth_s), "%lld", (long long)(depth ? depth : 1));
	if (rt_fs_resolve(sb, user, path, &abs, code, err) < 0 ||
	    rt_fs_helper(sb, user, "list", abs, depth_s, NULL, 0, &out, code, err) < 0)
		goto out;
	if ((list = entries(&out, err)) == NULL) {
		*code = RT_INTERNAL;
		goto out;
	}
	*reply = json_pack("{s:o}", "entries", list);
	rc = 0;
out:
	kiln_buf_free(&out);
	free(abs);
	return rc;
}

static const char *event_type(const char *t)
{
	return strcmp(t, "create") == 0 ? "EVENT_TYPE_CREATE" : strcmp(t, "write") == 0 ? "EVENT_TYPE_WRITE"
		: strcmp(t, "remove") == 0 ? "EVENT_TYPE_REMOVE" : strcmp(t, "rename") == 0 ? "EVENT_TYPE_RENAME"
		: strcmp(t, "chmod") == 0 ? "EVENT_TYPE_CHMOD" : NULL;
}

/* Whole events of pending moved to fn (1 for the "start" record). */
static int take_events(kiln_buf *pending, void (*fn)(void *u, json_t *ev), void *u)
{
	size_t off = 0;
	int started = 0;

	for (;;) {
		char *f[3];
		size_t o = off;
		int i;
		for (i = 0; i < 3; i++) {
			char *nul = o < pending->len ? memchr(pending->buf + o, 0, pending->len - o) : NULL;
			if (!nul)
				break;
			f[i] = pending->buf + o;
			o = (size_t)(nul - pending->buf) + 1;
		}
		if (i < 3)
			break;
		off = o;
		if (strcmp(f[0], "start") == 0)
			started = 1;
		else if (event_type(f[0]))
			fn(u, json_pack("{s:s, s:s}", "name", f[1], "type", event_type(f[0])));
	}
	memmove(pending->buf, pending->buf + off, pending->len - off);
	pending->len -= off;
	if (pending->cap)
		pending->buf[pending->len] = 0;
	return started;
}

static struct rt_proc *watch_start(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, struct rt_sub **s,
				   enum rt_code *code, kiln_error **err)
{
	const char *path;
	char *abs = NULL;
	bool recursive;
	struct rt_proc *p = NULL;

	*code = RT_INVALID_ARGUMENT;
	if (rt_get_string(msg, "path", true, &path, err) < 0 || rt_get_bool(msg, "recursive", false, &recursive, err) < 0)
		return NULL;
	if (rt_fs_resolve(sb, rt_user(sb, call), path, &abs, code, err) < 0)
		return NULL;
	const char *argv[] = { "/proc/self/exe", "--fs", "watch", abs, recursive ? "1" : "0", NULL };
	struct guest_exec_opts o;
	guest_exec_opts_init(&o);
	o.argv = argv;
	o.run_as = rt_user(sb, call);
	pthread_mutex_lock(&sb->mu);
	if ((p = rt_proc_start_locked(sb, &o, s, err)) != NULL) {
		p->is_watch = true;
	} else {
		*code = RT_UNAVAILABLE;
	}
	pthread_mutex_unlock(&sb->mu);
	free(abs);
	return p;
}

/* Collect a watcher's events (until "start" when waiting for it). */
static int watch_collect_locked(rt_sandbox *sb, struct rt_proc *p, struct rt_sub *s, kiln_buf *pending,
				void (*fn)(void *, json_t *), void *u, bool until_start, enum rt_code *code,
				kiln_error **err)
{
	uint64_t deadline = (uint64_t)kiln_now_ms() + 10000;

	for (;;) {
		struct rt_ev *e;
		int started = 0;
		while ((e = rt_sub_take_locked(s))) {
			if (e->kind == RT_EV_STDOUT && pending->len < (1u << 20))
				kiln_buf_add(pending, e->data.buf, e->data.len);
			rt_ev_free(e);
		}
		started = take_events(pending, fn, u);
		if (!until_start || started)
			return 0;
		if (p->ended || (uint64_t)kiln_now_ms() >= deadline) {
			*code = p->ended && p->res.exit_code == GUEST_FS_EXIT_NOTFOUND ? RT_NOT_FOUND
				: p->ended && p->res.exit_code == GUEST_FS_EXIT_INVALID ? RT_INVALID_ARGUMENT
											 : RT_UNKNOWN;
			return kiln_err(err, KILN_E_IO, "the directory cannot be watched (agent helper exit %d)",
					p->res.exit_code);
		}
		rt_wait_locked(sb, p, s, deadline);
	}
}

static void ignore_ev(void *u, json_t *ev)
{
	json_decref(ev);
}

static void keep_ev(void *u, json_t *ev)
{
	json_t *events = u;
	if (json_array_size(events) < MAX_WATCH_EVENTS)
		json_array_append_new(events, ev);
	else
		json_decref(ev);
}

struct send_ctx {
	rt_stream *st;
	int rc;
};

static void send_ev(void *u, json_t *ev)
{
	struct send_ctx *c = u;
	if (c->rc == 0)
		c->rc = rt_stream_send(c->st, json_pack("{s:o}", "filesystem", ev));
	else
		json_decref(ev);
}

int rt_fs_watch_dir(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply, rt_stream *st,
		    enum rt_code *code, kiln_error **err)
{
	struct rt_sub *s = NULL;
	struct rt_proc *p = watch_start(sb, call, msg, &s, code, err);
	kiln_buf pending = KILN_BUF_INIT;
	struct send_ctx c = { st, 0 };
	uint64_t deadline = call->timeout_ms ? (uint64_t)kiln_now_ms() + call->timeout_ms : 0;
	uint64_t keep = call->keepalive_s ? call->keepalive_s * 1000ull : 90000, next_keep;
	int rc = -1;

	if (p == NULL)
		return -1;
	pthread_mutex_lock(&sb->mu);
	if (watch_collect_locked(sb, p, s, &pending, ignore_ev, NULL, true, code, err) < 0)
		goto out;
	pthread_mutex_unlock(&sb->mu);
	c.rc = rt_stream_send(st, json_pack("{s:{}}", "start"));
	pthread_mutex_lock(&sb->mu);
	next_keep = (uint64_t)kiln_now_ms() + keep;
	while (c.rc == 0 && !p->ended) {
		uint64_t now = (uint64_t)kiln_now_ms();
		if (deadline && now >= deadline) {
			*code = RT_DEADLINE_EXCEEDED;
			kiln_err(err, KILN_E_IO, "the watch reached its deadline");
			goto out;
		}
		rt_wait_locked(sb, p, s, deadline && deadline < next_keep ? deadline : next_keep);
		json_t *batch = json_array();
		watch_collect_locked(sb, p, s, &pending, keep_ev, batch, false, code, err);
		/* sent unlocked: a slow client must not hold the sandbox up */
		pthread_mutex_unlock(&sb->mu);
		for (size_t i = 0; i < json_array_size(batch); i++)
			send_ev(&c, json_incref(json_array_get(batch, i)));
		json_decref(batch);
		if (c.rc == 0 && (uint64_t)kiln_now_ms() >= next_keep) {
			c.rc = rt_stream_send(st, json_pack("{s:{}}", "keepalive"));
			next_keep = (uint64_t)kiln_now_ms() + keep;
		}
		pthread_mutex_lock(&sb->mu);
	}
	if (c.rc < 0)
		goto out;
	*code = RT_NOT_FOUND;
	kiln_err(err, KILN_E_NOTFOUND, "the watched directory is gone");
out:
	if (!p->ended) {
		kiln_error *e = NULL;
		if (guest_proc_kill(p->gp, 9, &e) < 0)
			kiln_error_free(e);
	}
	rt_sub_drop_locked(p, s);
	pthread_mutex_unlock(&sb->mu);
	kiln_buf_free(&pending);
	return c.rc < 0 ? -1 : rc;
}

static struct rt_watcher *watcher_find_locked(rt_sandbox *sb, const json_t *msg, struct rt_watcher ***link,
					      enum rt_code *code, kiln_error **err)
{
	const char *id;

	*code = RT_INVALID_ARGUMENT;
	if (rt_get_string(msg, "watcherId", true, &id, err) < 0)
		return NULL;
	for (struct rt_watcher **pp = &sb->watchers; *pp; pp = &(*pp)->next) {
		char name[16];
		snprintf(name, sizeof(name), "w%u", (*pp)->id);
		if (strcmp(name, id) == 0) {
			if (link)
				*link = pp;
			return *pp;
		}
	}
	*code = RT_NOT_FOUND;
	kiln_err(err, KILN_E_NOTFOUND, "no watcher %.32s%s", id, strlen(id) > 32 ? "..." : "");
	return NULL;
}

static void watcher_free_locked(struct rt_watcher *w)
{
	if (!w->p->ended) {
		kiln_error *e = NULL;
		if (guest_proc_kill(w->p->gp, 9, &e) < 0)
			kiln_error_free(e);
	}
	rt_sub_drop_locked(w->p, w->s);
	kiln_buf_free(&w->pending);
	json_decref(w->events);
	free(w);
}

void rt_watchers_free(rt_sandbox *sb)
{
	while (sb->watchers) {
		struct rt_watcher *w = sb->watchers;
		sb->watchers = w->next;
		watcher_free_locked(w);
	}
}

int rt_fs_create_watcher(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply,
			 rt_stream *st, enum rt_code *code, kiln_error **err)
{
	struct rt_watcher *w;
	size_t n = 0;

	pthread_mutex_lock(&sb->mu);
	for (w = sb->watchers; w; w = w->next)
		n++;
	pthread_mutex_unlock(&sb->mu);
	if (n >= MAX_WATCHERS) {
		*code = RT_RESOURCE_EXHAUSTED;
		return kiln_err(err, KILN_E_LIMIT, "the sandbox has %d watchers, the limit", MAX_WATCHERS);
	}
	w = kiln_xcalloc(1, sizeof(*w));
	w->pending = (kiln_buf)KILN_BUF_INIT;
	w->events = json_array();
	if ((w->p = watch_start(sb, call, msg, &w->s, code, err)) == NULL) {
		json_decref(w->events);
		free(w);
		return -1;
	}
	pthread_mutex_lock(&sb->mu);
	if (watch_collect_locked(sb, w->p, w->s, &w->pending, keep_ev, w->events, true, code, err) < 0) {
		watcher_free_locked(w);
		pthread_mutex_unlock(&sb->mu);
		return -1;
	}
	w->id = ++sb->next_watcher;
	w->next = sb->watchers;
	sb->watchers = w;
	pthread_mutex_unlock(&sb->mu);
	char id[16];
	snprintf(id, sizeof(id), "w%u", w->id); /* envd's shape */
	*reply = json_pack("{s:s}", "watcherId", id);
	return 0;
}

int rt_fs_get_watcher_events(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply,
			     rt_stream *st, enum rt_code *code, kiln_error **err)
{
	struct rt_watcher *w;
	int rc = -1;

	pthread_mutex_lock(&sb->mu);
	if ((w = watcher_find_locked(sb, msg, NULL, code, err)) != NULL) {
		watch_collect_locked(sb, w->p, w->s, &w->pending, keep_ev, w->events, false, code, err);
		*reply = json_pack("{s:o}", "events", w->events);
		w->events = json_array();
		rc = 0;
	}
	pthread_mutex_unlock(&sb->mu);
	return rc;
}

int rt_fs_remove_watcher(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply,
			 rt_stream *st, enum rt_code *code, kiln_error **err)
{
	struct rt_watcher *w, **link = NULL;
	int rc = -1;

	pthread_mutex_lock(&sb->mu);
	if ((w = watcher_find_locked(sb, msg, &link, code, err)) != NULL) {
		*link = w->next;
		watcher_free_locked(w);
		*reply = json_object();
		rc = 0;
	}
	pthread_mutex_unlock(&sb->mu);
	return rc;
}
