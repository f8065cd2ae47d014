/* access_log.c — one line per request on stderr as it ends (`kiln serve
 * --log-format text|json`): its id (also sent back in X-Request-Id), client,
 * team, route class, method, path, status, bytes in and out, duration.  One
 * write(2) per line, so lines of concurrent requests never interleave. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "registry/internal.h"

int reg_access_log_parse(const char *s, enum reg_access_log *out, kiln_error **err)
{
	static const char *const names[] = { [REG_LOG_OFF] = "off", [REG_LOG_TEXT] = "text", [REG_LOG_JSON] = "json" };

	for (int i = 0; i < 3; i++)
		if (strcmp(s, names[i]) == 0) {
			*out = (enum reg_access_log)i;
			return 0;
		}
	return kiln_err(err, KILN_E_INVALID, "access log format '%.40s': want text, json or off", s);
}

static bool id_ok(const char *v)
{
	size_t n = v ? strlen(v) : 0;

	return n >= 1 && n <= 64 &&
	       strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

void reg_req_take_id(reg_req *r)
{
	const char *given = reg_req_header(r, "X-Request-Id");
	unsigned char b[8];

	if (id_ok(given)) { /* a proxy's or client's id: one id across their logs and ours */
		snprintf(r->id, sizeof(r->id), "%s", given);
		return;
	}
	if (getrandom(b, sizeof(b), GRND_NONBLOCK) != (ssize_t)sizeof(b)) {
		/* no entropy yet: still unique within this process */
		static uint64_t seq;
		uint64_t v = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED) ^ (uint64_t)getpid() << 40;
		memcpy(b, &v, sizeof(b));
	}
	for (size_t i = 0; i < sizeof(b); i++)
		snprintf(r->id + 2 * i, 3, "%02x", b[i]);
}

const char *reg_req_id(const reg_req *r)
{
	return r->id;
}

void reg_req_set_team(reg_req *r, const char *team)
{
	free(r->team);
	r->team = team ? kiln_xstrdup(team) : NULL;
}

/* The team a registry request is about: its repository's first segment. */
static void team_of(const reg_req *r, char *out, size_t cap)
{
	const char *slash;

	if (r->team) {
		snprintf(out, cap, "%s", r->team);
	} else if (r->name) {
		slash = strchr(r->name, '/');
		snprintf(out, cap, "%.*s", (int)(slash ? (size_t)(slash - r->name) : strlen(r->name)), r->name);
	} else {
		out[0] = '\0';
	}
}

/* A text field: bytes outside printable ASCII, spaces and quotes as %XX, so
 * one field stays one token of one line whatever a client sent. */
static void add_text(kiln_buf *b, const char *v)
{
	if (*v == '\0') {
		kiln_buf_add(b, "-", 1);
		return;
	}
	for (; *v; v++) {
		unsigned char c = (unsigned char)*v;
		if (c <= 0x20 || c >= 0x7f || c == '"' || c == '%' || c == '\\')
			kiln_buf_addf(b, "%%%02X", c);
		else
			kiln_buf_add(b, v, 1);
	}
}

void reg_access_log(reg_req *r)
{
	enum reg_access_log fmt = r->srv->cfg.access_log;
	char when[KILN_TIME_MAX], team[128];
	unsigned status = r->resp ? r->status : 0;
	unsigned long long in = r->received + r->discarded, out = r->resp ? r->sent : 0;
	double ms = kiln_now_ms() - r->t0_ms;
	const char *path = r->url ? r->url : "";
	kiln_buf b = KILN_BUF_INIT;

	if (fmt == REG_LOG_OFF || !r->begun)
		return;
	kiln_time_rfc3339(time(NULL), when);
	team_of(r, team, sizeof(team));
	if (fmt == REG_LOG_JSON) {
		/* jansson escapes what the client sent; a path of invalid UTF-8 is kept as bytes %XX */
		kiln_buf esc = KILN_BUF_INIT;
		json_t *p = json_string(path);
		if (p == NULL) {
			add_text(&esc, path);
			p = json_string(esc.buf);
		}
		json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:o,s:i,s:I,s:I,s:f}", "time", when, "id", r->id,
				      "client", r->client, "team", team, "route", reg_metrics_route_name(r), "method",
				      r->method, "path", p, "status", (int)status, "in", (json_int_t)in, "out",
				      (json_int_t)out, "ms", ms);
		char *line = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
		if (line)
			kiln_buf_addf(&b, "%s\n", line);
		free(line);
		json_decref(j);
		kiln_buf_free(&esc);
	} else {
		kiln_buf_addf(&b, "access %s id=%s client=", when, r->id);
		add_text(&b, r->client);
		kiln_buf_add(&b, " team=", 6);
		add_text(&b, team);
		kiln_buf_addf(&b, " route=%s method=", reg_metrics_route_name(r));
		add_text(&b, r->method);
		kiln_buf_add(&b, " path=", 6);
		add_text(&b, path);
		kiln_buf_addf(&b, " status=%u in=%llu out=%llu ms=%.1f\n", status, in, out, ms);
	}
	/* a log that cannot be written does not fail the request */
	if (b.len && write(STDERR_FILENO, b.buf, b.len) < 0)
		errno = 0;
	kiln_buf_free(&b);
}
