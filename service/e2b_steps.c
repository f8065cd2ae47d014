/* e2b_steps.c — E2B's template step list (what the SDK's Template() builder
 * sends: COPY, RUN, ENV, WORKDIR, USER with E2B's argument conventions) as
 * Dockerfile instructions, with E2B's semantics where they differ from
 * Docker's: COPY owned by the current user, USER creating a missing user, a
 * RUN with a user of its own.  Every field is checked here, so a hostile body
 * is a 400 naming the step, never a Dockerfile that means something else. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "service/e2b.h"

bool e2b_hash_valid(const char *s)
{
	size_t n = 0;

	if (s == NULL)
		return false;
	for (; s[n]; n++)
		if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
			return false;
	return n == 64;
}

/* A JSON string of at most E2B_MAX_ARG bytes with no NUL in it. */
static const char *str_of(const json_t *v, const char *what, kiln_error **err)
{
	const char *s;

	if (!json_is_string(v)) {
		kiln_err(err, KILN_E_INVALID, "%s: want a string", what);
		return NULL;
	}
	s = json_string_value(v);
	if (json_string_length(v) != strlen(s)) {
		kiln_err(err, KILN_E_INVALID, "%s: contains a NUL byte", what);
		return NULL;
	}
	if (json_string_length(v) > E2B_MAX_ARG) {
		kiln_err(err, KILN_E_LIMIT, "%s: %zu bytes, more than the %u allowed", what, json_string_length(v),
			 E2B_MAX_ARG);
		return NULL;
	}
	return s;
}

static bool has_ctl(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

static bool has_ctl_but_tab(const char *s)
{
	for (; *s; s++)
		if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
			return true;
	return false;
}

/* A user as E2B's steps name one: NAME or NAME:GROUP, each a passwd-style
 * name or a number.  Nothing that could end the instruction or add a flag. */
static bool user_name_ok(const char *s, size_t len)
{
	if (len == 0 || len > 32 || s[0] == '-' || s[0] == '.')
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
		      c == '-' || c == '.'))
			return false;
	}
	return true;
}

static bool user_ok(const char *s)
{
	const char *colon = strchr(s, ':');

	if (colon == NULL)
		return user_name_ok(s, strlen(s));
	return user_name_ok(s, (size_t)(colon - s)) && user_name_ok(colon + 1, strlen(colon + 1));
}

static bool is_root(const char *user)
{
	return user == NULL || strcmp(user, "root") == 0 || strcmp(user, "0") == 0 || strncmp(user, "root:", 5) == 0 ||
	       strncmp(user, "0:", 2) == 0;
}

static bool all_digits(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return len > 0;
}

static bool env_key_ok(const char *s)
{
	if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
		return false;
	for (s++; *s; s++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
			return false;
	return true;
}

/* s as a JSON string literal (the exec form of COPY takes JSON). */
static void add_json_str(kiln_buf *b, const char *s)
{
	json_t *j = json_string(s);
	char *t = json_dumps(j, JSON_ENCODE_ANY);

	kiln_buf_adds(b, t);
	free(t);
	json_decref(j);
}

/* s inside double quotes for ENV: the Dockerfile's escapes for '"' and '\'.
 * '$' stays, so $VAR expands as E2B's shell evaluation of the value does. */
static void add_dquoted(kiln_buf *b, const char *s)
{
	kiln_buf_addc(b, '"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			kiln_buf_addc(b, '\\');
		kiln_buf_addc(b, *s);
	}
	kiln_buf_addc(b, '"');
}

/* s as one shell word in double quotes ($VAR still expands, as in WORKDIR). */
static void add_shell_dquoted(kiln_buf *b, const char *s)
{
	kiln_buf_addc(b, '"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\' || *s == '`')
			kiln_buf_addc(b, '\\');
		kiln_buf_addc(b, *s);
	}
	kiln_buf_addc(b, '"');
}

/* Would `RUN cmd` on one line be read as exactly cmd?  Not with a newline, a
 * heredoc marker, a trailing line continuation, a JSON-looking start, or a
 * leading '-': `RUN --mount=...`, `--network=`, `--security=` are the
 * instruction's flags, so a command "--mount=type=bind,from=IMAGE,... true"
 * would mount what it names (an image, a path the server reads) instead of
 * reaching the shell as the command it is. */
static bool run_one_line(const char *cmd)
{
	size_t n = strlen(cmd);

	/* the parser would also drop leading blanks */
	if (*cmd == ' ' || *cmd == '\t' || *cmd == '\0' || *cmd == '[' || *cmd == '-' || strchr(cmd, '\n') ||
	    strchr(cmd, '\r') || strstr(cmd, "<<"))
		return false;
	while (n > 0 && (cmd[n - 1] == ' ' || cmd[n - 1] == '\t'))
		n--;
	return n > 0 && cmd[n - 1] != '\\';
}

/* A delimiter no line of body equals. */
static char *heredoc_delim(const char *body)
{
	for (unsigned i = 0;; i++) {
		char *d = i ? kiln_xasprintf("E2B_EOF_%u", i) : kiln_xstrdup("E2B_EOF");
		size_t dl = strlen(d);
		bool clash = false;

		for (const char *p = body; p && *p;) {
			const char *eol = strchr(p, '\n');
			size_t len = eol ? (size_t)(eol - p) : strlen(p);
			if (len && p[len - 1] == '\r')
				len--;
			if (len == dl && memcmp(p, d, dl) == 0) {
				clash = true;
				break;
			}
			p = eol ? eol + 1 : NULL;
		}
		if (!clash)
			return d;
		free(d);
	}
}

static void add_run(kiln_buf *b, const char *cmd)
{
	if (run_one_line(cmd)) {
		kiln_buf_addf(b, "RUN %s\n", cmd);
		return;
	}
	char *d = heredoc_delim(cmd);
	size_t n = strlen(cmd);

	kiln_buf_addf(b, "RUN <<\"%s\"\n%s%s%s\n", d, cmd, n && cmd[n - 1] == '\n' ? "" : "\n", d);
	free(d);
}

struct tr {
	struct e2b_plan *p;
	char *user;   /* the current user: NULL = the image's own */
	char what[48];
};

/* Fetches args[] as strings; n in [min, max]. */
static int step_args(const json_t *step, struct tr *t, size_t min, size_t max, const char ***out, size_t *n,
		     kiln_error **err)
{
	const json_t *a = json_object_get(step, "args");
	size_t len = a ? json_array_size(a) : 0;

	*out = NULL;
	*n = 0;
	if (a && !json_is_array(a))
		return kiln_err(err, KILN_E_INVALID, "%s: args: want an array of strings", t->what);
	if (len < min || len > max) {
		if (min == max)
			return kiln_err(err, KILN_E_INVALID, "%s: want %zu argument%s, got %zu", t->what, min,
					min == 1 ? "" : "s", len);
		return kiln_err(err, KILN_E_INVALID, "%s: want %zu to %zu arguments, got %zu", t->what, min, max, len);
	}
	*out = kiln_xcalloc(len + 1, sizeof(**out));
	for (size_t i = 0; i < len; i++) {
		char what[80];
		snprintf(what, sizeof(what), "%s: args[%zu]", t->what, i);
		if (((*out)[i] = str_of(json_array_get(a, i), what, err)) == NULL) {
			free(*out);
			*out = NULL;
			return -1;
		}
	}
	*n = len;
	return 0;
}

/* The part of an E2B COPY source before its first glob: the SDK's tarball
 * holds only what the pattern matched, below that directory (E2B's server
 * takes the same prefix, doublestar.SplitPattern). */
static char *glob_base(const char *src)
{
	size_t meta = strcspn(src, "*?[{");
	char *head, *slash, *clean;

	if (src[meta] == '\0')
		return kiln_path_clean(src);
	head = kiln_xstrndup(src, meta);
	slash = strrchr(head, '/');
	if (slash)
		*slash = '\0';
	clean = kiln_path_clean(slash ? head : ".");
	free(head);
	return clean;
}

static int tr_copy(struct tr *t, const json_t *step, const char **a, size_t n, kiln_error **err)
{
	const char *hash = kiln_json_str(step, "filesHash");
	const char *src = a[0], *dest = a[1], *owner = n > 2 ? a[2] : "", *mode = n > 3 ? a[3] : "";
	char *clean = NULL, *base = NULL;
	kiln_buf *b = &t->p->body;
	bool seen = false;
	int rc = -1;

	if (!e2b_hash_valid(hash)) {
		kiln_err(err, KILN_E_INVALID, "%s: filesHash: want the 64 hex digits of the files' sha256", t->what);
		goto out;
	}
	if (!*src || has_ctl(src) || strchr(src, '\\')) {
		kiln_err(err, KILN_E_INVALID, "%s: source path: empty, or with a control character or backslash",
			 t->what);
		goto out;
	}
	clean = kiln_path_clean(src);
	if (src[0] == '/' || strcmp(clean, "..") == 0 || strncmp(clean, "../", 3) == 0) {
		kiln_err(err, KILN_E_INVALID, "%s: source path \"%s\" leaves the context (absolute or ..)", t->what,
			 src);
		goto out;
	}
	if (!*dest || has_ctl(dest)) {
		kiln_err(err, KILN_E_INVALID, "%s: destination: empty, or with a control character", t->what);
		goto out;
	}
	if (*owner && !user_ok(owner)) {
		kiln_err(err, KILN_E_INVALID, "%s: owner \"%.64s\": want USER or USER:GROUP", t->what, owner);
		goto out;
	}
	if (*mode && (strlen(mode) > 4 || strspn(mode, "01234567") != strlen(mode))) {
		kiln_err(err, KILN_E_INVALID, "%s: mode \"%.16s\": want up to 4 octal digits", t->what, mode);
		goto out;
	}
	base = glob_base(src);
	for (size_t i = 0; i < t->p->hashes.n; i++)
		seen |= strcmp(t->p->hashes.v[i], hash) == 0;
	if (!seen)
		kiln_strv_push(&t->p->hashes, hash);

	kiln_buf_adds(b, "COPY ");
	if (*owner)
		kiln_buf_addf(b, "--chown=%s ", owner);
	else if (!is_root(t->user))
		kiln_buf_addf(b, "--chown=%s ", t->user); /* E2B: the current user owns what COPY adds */
	if (*mode)
		kiln_buf_addf(b, "--chmod=%s ", mode);
	kiln_buf_adds(b, "[");
	{
		char *from = strcmp(base, ".") == 0 ? kiln_xasprintf("%s/", hash) : kiln_xasprintf("%s/%s", hash, base);
		add_json_str(b, from);
		free(from);
	}
	kiln_buf_adds(b, ", ");
	add_json_str(b, dest);
	kiln_buf_adds(b, "]\n");
	rc = 0;
out:
	free(clean);
	free(base);
	return rc;
}

static int tr_run(struct tr *t, const char **a, size_t n, kiln_error **err)
{
	const char *cmd = a[0], *user = n > 1 ? a[1] : "";
	kiln_buf *b = &t->p->body;
	bool own = *user && !(t->user ? strcmp(user, t->user) == 0 : is_root(user));

	if (strspn(cmd, " \t\r\n") == strlen(cmd))
		return kiln_err(err, KILN_E_INVALID, "%s: empty command", t->what);
	if (*user && !user_ok(user))
		return kiln_err(err, KILN_E_INVALID, "%s: user \"%.64s\": want USER or USER:GROUP", t->what, user);
	if (own)
		kiln_buf_addf(b, "USER %s\n", user);
	add_run(b, cmd);
	/* Back to the current user; before any setUser that is taken as root
	 * (the image's own USER is not known here: docs/e2b.md). */
	if (own)
		kiln_buf_addf(b, "USER %s\n", t->user ? t->user : "root");
	return 0;
}

static int tr_env(struct tr *t, const char **a, size_t n, kiln_error **err)
{
	kiln_buf *b = &t->p->body;

	if (n % 2)
		return kiln_err(err, KILN_E_INVALID, "%s: want key/value pairs, got %zu arguments", t->what, n);
	for (size_t i = 0; i < n; i += 2) {
		if (!env_key_ok(a[i]))
			return kiln_err(err, KILN_E_INVALID, "%s: key \"%.64s\": want [A-Za-z_][A-Za-z0-9_]*", t->what,
					a[i]);
		if (has_ctl_but_tab(a[i + 1]))
			return kiln_err(err, KILN_E_INVALID, "%s: value of %s has a newline or control character",
					t->what, a[i]);
	}
	kiln_buf_adds(b, "ENV");
	for (size_t i = 0; i < n; i += 2) {
		kiln_buf_addf(b, " %s=", a[i]);
		add_dquoted(b, a[i + 1]);
	}
	kiln_buf_addc(b, '\n');
	return 0;
}

static int tr_workdir(struct tr *t, const char **a, kiln_error **err)
{
	const char *dir = a[0];
	kiln_buf *b = &t->p->body;

	if (!*dir || has_ctl(dir) || dir[0] == ' ' || dir[strlen(dir) - 1] == ' ')
		return kiln_err(err, KILN_E_INVALID, "%s: path: empty, padded, or with a control character", t->what);
	/* E2B makes the directory as the current user; WORKDIR alone would make
	 * it root's, and the user's next RUN could not write there. */
	if (!is_root(t->user)) {
		kiln_buf_adds(b, "RUN mkdir -p ");
		add_shell_dquoted(b, dir);
		kiln_buf_addc(b, '\n');
	}
	kiln_buf_addf(b, "WORKDIR %s\n", dir);
	return 0;
}

static int tr_user(struct tr *t, const char **a, size_t n, kiln_error **err)
{
	const char *user = a[0], *colon = strchr(user, ':');
	size_t nl = colon ? (size_t)(colon - user) : strlen(user);
	kiln_buf *b = &t->p->body;
	bool sudo = n > 1 && strcmp(a[1], "true") == 0;

	if (!user_ok(user))
		return kiln_err(err, KILN_E_INVALID, "%s: user \"%.64s\": want USER or USER:GROUP", t->what, user);
	if (n > 1 && strcmp(a[1], "true") != 0 && strcmp(a[1], "false") != 0)
		return kiln_err(err, KILN_E_INVALID, "%s: args[1]: want \"true\" or \"false\" (add to sudoers)", t->what);
	/* E2B creates a user that does not exist yet (busybox adduser, else
	 * useradd); a number names no one to create. */
	if (!is_root(user) && !all_digits(user, nl)) {
		char *name = kiln_xstrndup(user, nl);
		if (!is_root(t->user))
			kiln_buf_adds(b, "USER root\n");
		kiln_buf_addf(b,
			      "RUN id -u %s >/dev/null 2>&1 || adduser -D -g '' %s 2>/dev/null || useradd -m %s",
			      name, name, name);
		if (sudo)
			kiln_buf_addf(b, "; mkdir -p /etc/sudoers.d && echo '%s ALL=(ALL:ALL) NOPASSWD: ALL' "
				      ">/etc/sudoers.d/%s",
				      name, name);
		kiln_buf_addc(b, '\n');
		free(name);
	}
	kiln_buf_addf(b, "USER %s\n", user);
	free(t->user);
	t->user = kiln_xstrdup(user);
	return 0;
}

static int tr_step(struct tr *t, const json_t *step, kiln_error **err)
{
	static const struct {
		const char *type;
		size_t min, max;
	} kinds[] = {
		{ "COPY", 2, 4 }, { "RUN", 1, 2 }, { "ENV", 2, E2B_MAX_ARGS }, { "WORKDIR", 1, 1 }, { "USER", 1, 2 },
	};
	const json_t *tv = json_object_get(step, "type"), *force = json_object_get(step, "force");
	const char *type, **a = NULL;
	size_t k, n;
	int rc;

	if (!json_is_object(step))
		return kiln_err(err, KILN_E_INVALID, "%s: want an object", t->what);
	if ((type = str_of(tv, "type", err)) == NULL)
		return kiln_error_wrap(err, "%s", t->what);
	if (force && !json_is_boolean(force))
		return kiln_err(err, KILN_E_INVALID, "%s: force: want true or false", t->what);
	t->p->force |= json_is_true(force);
	for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		if (strcasecmp(type, kinds[k].type) == 0)
			break;
	if (k == sizeof(kinds) / sizeof(kinds[0]))
		return kiln_err(err, KILN_E_INVALID, "%s: unknown step type \"%.32s\" (kiln takes COPY, RUN, ENV, "
				"WORKDIR, USER)", t->what, type);
	snprintf(t->what, sizeof(t->what), "steps[%zu] (%s)", t->p->steps, kinds[k].type);
	if (step_args(step, t, kinds[k].min, kinds[k].max, &a, &n, err) < 0)
		return -1;
	switch (k) {
	case 0: rc = tr_copy(t, step, a, n, err); break;
	case 1: rc = tr_run(t, a, n, err); break;
	case 2: rc = tr_env(t, a, n, err); break;
	case 3: rc = tr_workdir(t, a, err); break;
	default: rc = tr_user(t, a, n, err); break;
	}
	free(a);
	return rc;
}

/* An optional string member: absent or null is NULL, "" counts as absent. */
static int opt_str(const json_t *body, const char *key, char **out, kiln_error **err)
{
	const json_t *v = json_object_get(body, key);
	const char *s;

	*out = NULL;
	if (v == NULL || json_is_null(v))
		return 0;
	if ((s = str_of(v, key, err)) == NULL)
		return -1;
	if (*s)
		*out = kiln_xstrdup(s);
	return 0;
}

int e2b_plan_parse(const json_t *body, struct e2b_plan *out, kiln_error **err)
{
	struct tr t = { .p = out };
	const json_t *steps, *force;
	struct kiln_ref ref = { 0 };
	size_t mark = 0;
	int rc = -1;

	memset(out, 0, sizeof(*out));
	out->body = (kiln_buf)KILN_BUF_INIT;
	if (!json_is_object(body)) {
		kiln_err(err, KILN_E_INVALID, "want a JSON object");
		goto out;
	}
	if (opt_str(body, "fromImage", &out->from_image, err) < 0 ||
	    opt_str(body, "fromTemplate", &out->from_template, err) < 0 ||
	    opt_str(body, "startCmd", &out->start_cmd, err) < 0 || opt_str(body, "readyCmd", &out->ready_cmd, err) < 0)
		goto out;
	if (!out->from_image == !out->from_template) {
		kiln_err(err, KILN_E_INVALID, "give exactly one of fromImage and fromTemplate");
		goto out;
	}
	if (json_object_get(body, "fromImageRegistry") && !json_is_null(json_object_get(body, "fromImageRegistry"))) {
		kiln_err(err, KILN_E_INVALID, "fromImageRegistry (registry credentials) is not supported: push the "
			 "base image to this kiln registry and name it in fromImage");
		goto out;
	}
	if (kiln_ref_parse(out->from_image ? out->from_image : out->from_template, &ref, err) < 0) {
		kiln_error_wrap(err, "%s", out->from_image ? "fromImage" : "fromTemplate");
		goto out;
	}
	if (out->from_template && ref.host) {
		kiln_err(err, KILN_E_INVALID, "fromTemplate \"%s\": want a template name of this server, no host",
			 out->from_template);
		goto out;
	}
	force = json_object_get(body, "force");
	if (force && !json_is_boolean(force)) {
		kiln_err(err, KILN_E_INVALID, "force: want true or false");
		goto out;
	}
	out->force = json_is_true(force);
	steps = json_object_get(body, "steps");
	if (steps && !json_is_null(steps) && !json_is_array(steps)) {
		kiln_err(err, KILN_E_INVALID, "steps: want an array");
		goto out;
	}
	if (json_array_size(steps) > E2B_MAX_STEPS) {
		kiln_err(err, KILN_E_LIMIT, "steps: %zu of them, more than the %d allowed", json_array_size(steps),
			 E2B_MAX_STEPS);
		goto out;
	}
	for (size_t i = 0; i < json_array_size(steps); i++) {
		out->steps = i;
		snprintf(t.what, sizeof(t.what), "steps[%zu]", i);
		if (tr_step(&t, json_array_get(steps, i), err) < 0)
			goto out;
		for (const char *c = out->body.buf + mark; *c; c++)
			if (*c == '\n') {
				out->line_step = kiln_xrealloc(out->line_step, (out->lines + 1) * sizeof(int));
				out->line_step[out->lines++] = (int)i;
			}
		mark = out->body.len;
		if (out->body.len > E2B_MAX_DOCKERFILE) {
			kiln_err(err, KILN_E_LIMIT, "steps: the Dockerfile they make is over %u bytes",
				 E2B_MAX_DOCKERFILE);
			goto out;
		}
	}
	out->steps = json_array_size(steps);
	rc = 0;
out:
	kiln_ref_free(&ref);
	free(t.user);
	if (rc < 0)
		e2b_plan_free(out);
	return rc;
}

char *e2b_plan_dockerfile(const struct e2b_plan *p, const char *base)
{
	return kiln_xasprintf("FROM %s\n%s", base, p->body.buf);
}

int e2b_plan_step_of_line(const struct e2b_plan *p, long line)
{
	return line >= 2 && (size_t)(line - 2) < p->lines ? p->line_step[line - 2] : -1;
}

void e2b_plan_free(struct e2b_plan *p)
{
	free(p->line_step);
	free(p->from_image);
	free(p->from_template);
	free(p->start_cmd);
	free(p->ready_cmd);
	kiln_strv_free(&p->hashes);
	kiln_buf_free(&p->body);
	memset(p, 0, sizeof(*p));
	p->body = (kiln_buf)KILN_BUF_INIT;
}
