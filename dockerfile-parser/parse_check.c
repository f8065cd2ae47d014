/* parse_check.c — what BuildKit's instructions.Parse rejects before any
 * variable is expanded: unknown instructions, argument counts, each
 * instruction's flags (BFlags rules), RUN --network/--security, HEALTHCHECK
 * options, SHELL's JSON form, ONBUILD triggers.  Messages are BuildKit's. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/internal.h"

int df_check_errf(const struct df_src *src, const struct df_node *n, const char *needle, kiln_error **err,
		  const char *fmt, ...)
{
	kiln_buf msg = KILN_BUF_INIT;
	va_list ap;
	int line = n->start_line, col = n->col;

	if (needle)
		df_locate(src, n, needle, &line, &col);
	va_start(ap, fmt);
	kiln_buf_vaddf(&msg, fmt, ap);
	va_end(ap);
	kiln_err(err, KILN_E_INVALID, "%s:%d:%d: %s", src->file, line, col, msg.buf);
	kiln_buf_free(&msg);
	return -1;
}

static bool locate(const struct df_src *src, const struct df_node *n, const char *needle, size_t nl, int *line,
		   int *col);

void df_locate(const struct df_src *src, const struct df_node *n, const char *needle, int *line, int *col)
{
	const char *eq;

	*line = n->start_line;
	*col = n->col;
	if (locate(src, n, needle, strlen(needle), line, col))
		return;
	/* a flag written with quotes or escapes: look for its name */
	if (strncmp(needle, "--", 2) == 0 && (eq = strchr(needle, '=')) != NULL)
		locate(src, n, needle, (size_t)(eq - needle), line, col);
}

static bool locate(const struct df_src *src, const struct df_node *n, const char *needle, size_t nl, int *line,
		   int *col)
{

	for (int ln = n->start_line; ln >= 1 && ln <= n->end_line && (size_t)ln <= src->n_lines; ln++) {
		size_t a = src->line_off[ln - 1];
		size_t b = (size_t)ln < src->n_lines ? src->line_off[ln] : src->len;
		const char *hit = nl ? memmem(src->text + a, b - a, needle, nl) : NULL;
		if (hit) {
			int c = 1;
			for (const char *q = src->text + a; q < hit; q++)
				c += ((unsigned char)*q & 0xC0) != 0x80;
			*line = ln;
			*col = c;
			return true;
		}
	}
	return false;
}

/* Levenshtein distance over bytes, two rows. */
static size_t distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), *prev, *cur, d;

	if (la > 64 || lb > 64) /* no option is that long: never a suggestion */
		return SIZE_MAX;
	prev = kiln_xcalloc(lb + 1, sizeof(*prev));
	cur = kiln_xcalloc(lb + 1, sizeof(*cur));
	for (size_t j = 0; j <= lb; j++)
		prev[j] = j;
	for (size_t i = 1; i <= la; i++) {
		cur[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
			size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
			cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
		}
		size_t *t = prev;
		prev = cur;
		cur = t;
	}
	d = prev[lb];
	free(prev);
	free(cur);
	return d;
}

const char *df_suggest(const char *val, const char *const *opts)
{
	const char *match = NULL;
	size_t best = 3; /* BuildKit's util/suggest threshold */

	for (size_t i = 0; opts[i]; i++) {
		size_t d;
		if (strcmp(val, opts[i]) == 0)
			return NULL;
		d = distance(val, opts[i]);
		if (d < best) {
			best = d;
			match = opts[i];
		}
	}
	return match;
}

/* ---- flags (BuildKit's BFlags) ------------------------------------------ */

int df_parse_flags(const struct df_src *src, const struct df_node *n, const struct df_flagspec *spec,
		   struct df_flagval *vals, kiln_error **err)
{
	for (size_t i = 0; spec[i].name; i++)
		vals[i] = (struct df_flagval){ 0 };
	for (size_t f = 0; f < n->flags.n; f++) {
		const char *arg = n->flags.v[f], *eq, *value = "";
		char *name;
		size_t i;

		if (strncmp(arg, "--", 2) != 0)
			return df_check_errf(src, n, arg, err, "Arg should start with -- : %s", arg);
		if (strcmp(arg, "--") == 0)
			return 0;
		arg += 2;
		eq = strchr(arg, '=');
		name = eq ? kiln_xstrndup(arg, (size_t)(eq - arg)) : kiln_xstrdup(arg);
		if (eq)
			value = eq + 1;
		for (i = 0; spec[i].name; i++)
			if (strcmp(spec[i].name, name) == 0)
				break;
		if (!spec[i].name) {
			df_check_errf(src, n, n->flags.v[f], err, "Unknown flag: %s", name);
			goto fail;
		}
		if (vals[i].used && spec[i].type != DF_FLAG_STRINGS) {
			df_check_errf(src, n, n->flags.v[f], err, "Duplicate flag specified: %s", name);
			goto fail;
		}
		vals[i].used = true;
		switch (spec[i].type) {
		case DF_FLAG_BOOL:
			if (eq && *value == '\0') {
				df_check_errf(src, n, n->flags.v[f], err, "Missing a value on flag: %s", name);
				goto fail;
			}
			if (*value && strcasecmp(value, "true") != 0 && strcasecmp(value, "false") != 0) {
				df_check_errf(src, n, n->flags.v[f], err, "Expecting boolean value for flag %s, not: %s",
					      name, value);
				goto fail;
			}
			vals[i].value = *value == '\0' || strcasecmp(value, "true") == 0 ? "true" : "false";
			break;
		case DF_FLAG_STRING:
		case DF_FLAG_STRINGS:
			if (!eq) {
				df_check_errf(src, n, n->flags.v[f], err, "Missing a value on flag: %s", name);
				goto fail;
			}
			vals[i].value = value;
			vals[i].index = f;
			break;
		}
		free(name);
		continue;
fail:
		free(name);
		return -1;
	}
	/* values are checked once every flag is known, as BuildKit's RUN hooks do */
	for (size_t f = 0; f < n->flags.n; f++) {
		const char *arg = n->flags.v[f] + 2, *eq = strchr(arg, '=');
		if (strcmp(n->flags.v[f], "--") == 0)
			break;
		for (size_t i = 0; eq && spec[i].name; i++)
			if (spec[i].check && strlen(spec[i].name) == (size_t)(eq - arg) &&
			    strncmp(spec[i].name, arg, (size_t)(eq - arg)) == 0 &&
			    spec[i].check(src, n, n->flags.v[f], eq + 1, err) < 0)
				return -1;
	}
	return 0;
}

/* ---- RUN --network / --security ------------------------------------------ */

static int check_choice(const struct df_src *src, const struct df_node *n, const struct df_flagval *v,
			const char *flag, const char *what, const char *const *allowed, kiln_error **err)
{
	if (!v->used || strchr(v->value, '$'))
		return 0;
	for (size_t i = 0; allowed[i]; i++)
		if (strcmp(allowed[i], v->value) == 0)
			return 0;
	kiln_buf q = KILN_BUF_INIT;
	df_go_quote(&q, v->value, strlen(v->value));
	df_check_errf(src, n, flag, err, "unsupported %s mode %s", what, q.buf);
	kiln_buf_free(&q);
	return -1;
}

/* ---- the instructions ------------------------------------------------------ */

static const struct df_flagspec no_flags[] = { { NULL, 0, NULL } };
static const struct df_flagspec from_flags[] = { { "platform", DF_FLAG_STRING, NULL }, { NULL, 0, NULL } };
static const struct df_flagspec run_flags[] = {
	{ "mount", DF_FLAG_STRINGS, df_check_mount },
	{ "network", DF_FLAG_STRING, NULL },
	{ "security", DF_FLAG_STRING, NULL },
	{ NULL, 0, NULL },
};
static const struct df_flagspec copy_flags[] = {
	{ "from", DF_FLAG_STRING, NULL },   { "chown", DF_FLAG_STRING, NULL }, { "chmod", DF_FLAG_STRING, NULL },
	{ "link", DF_FLAG_BOOL, NULL },     { "parents", DF_FLAG_BOOL, NULL }, { "exclude", DF_FLAG_STRINGS, NULL },
	{ NULL, 0, NULL },
};
static const struct df_flagspec add_flags[] = {
	{ "chown", DF_FLAG_STRING, NULL },       { "chmod", DF_FLAG_STRING, NULL },
	{ "link", DF_FLAG_BOOL, NULL },          { "keep-git-dir", DF_FLAG_BOOL, NULL },
	{ "checksum", DF_FLAG_STRING, NULL },    { "exclude", DF_FLAG_STRINGS, NULL },
	{ "unpack", DF_FLAG_BOOL, NULL },        { NULL, 0, NULL },
};
static const struct df_flagspec health_flags[] = {
	{ "interval", DF_FLAG_STRING, NULL },     { "timeout", DF_FLAG_STRING, NULL },
	{ "start-period", DF_FLAG_STRING, NULL }, { "start-interval", DF_FLAG_STRING, NULL },
	{ "retries", DF_FLAG_STRING, NULL },      { NULL, 0, NULL },
};

#define MAX_FLAGS 8

static int flags_only(const struct df_src *src, const struct df_node *n, kiln_error **err)
{
	struct df_flagval v[MAX_FLAGS];

	return df_parse_flags(src, n, no_flags, v, err);
}

static int exactly_one(const struct df_src *src, const struct df_node *n, const char *what, kiln_error **err)
{
	if (n->args.n != 1)
		return df_check_errf(src, n, NULL, err, "%s requires exactly one argument", what);
	return flags_only(src, n, err);
}

static int at_least_one(const struct df_src *src, const struct df_node *n, const char *what, kiln_error **err)
{
	if (n->args.n == 0)
		return df_check_errf(src, n, NULL, err, "%s requires at least one argument", what);
	return 0;
}

static int check_kvps(const struct df_src *src, const struct df_node *n, const char *what, kiln_error **err)
{
	if (flags_only(src, n, err) < 0)
		return -1;
	if (at_least_one(src, n, what, err) < 0)
		return -1;
	for (size_t i = 0; i < n->args.n; i += 3)
		if (n->args.v[i][0] == '\0')
			return df_check_errf(src, n, NULL, err, "%s names can not be blank", what);
	return 0;
}

/* strings.EqualFold(s, "as"): Unicode simple folding also matches the
 * long s (U+017F) with 's'. */
static bool equal_fold_as(const char *s)
{
	if (s[0] != 'a' && s[0] != 'A')
		return false;
	if ((s[1] == 's' || s[1] == 'S') && s[2] == '\0')
		return true;
	return strcmp(s + 1, "\xc5\xbf") == 0;
}

static int check_from(const struct df_src *src, const struct df_node *n, kiln_error **err)
{
	struct df_flagval v[MAX_FLAGS];

	if (n->args.n == 3 && equal_fold_as(n->args.v[1])) {
		const char *s = n->args.v[2];
		char *low = df_go_lower(s);
		bool ok = low[0] >= 'a' && low[0] <= 'z';
		for (const char *p = low; *p && ok; p++)
			ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.';
		free(low);
		if (!ok) {
			kiln_buf q = KILN_BUF_INIT;
			df_go_quote(&q, s, strlen(s));
			df_check_errf(src, n, s, err,
				      "invalid name for build stage: %s, name can't start with a number or contain symbols",
				      q.buf);
			kiln_buf_free(&q);
			return -1;
		}
	} else if (n->args.n != 1) {
		return df_check_errf(src, n, NULL, err, "FROM requires either one or three arguments");
	}
	return df_parse_flags(src, n, from_flags, v, err);
}

static int check_copy(const struct df_src *src, const struct df_node *n, const char *what,
		      const struct df_flagspec *spec, kiln_error **err)
{
	struct df_flagval v[MAX_FLAGS];

	if (n->args.n < 2)
		return df_check_errf(src, n, NULL, err,
				     "%s requires at least two arguments, but only one was provided. Destination could "
				     "not be determined.",
				     what);
	if (df_parse_flags(src, n, spec, v, err) < 0)
		return -1;
	if (df_is_heredoc_word(n->args.v[n->args.n - 1]))
		return df_check_errf(src, n, NULL, err, "%s cannot accept a heredoc as a destination", what);
	return 0;
}

static int check_run(const struct df_src *src, const struct df_node *n, kiln_error **err)
{
	static const char *const networks[] = { "default", "none", "host", NULL };
	static const char *const security[] = { "sandbox", "insecure", NULL };
	struct df_flagval v[MAX_FLAGS];

	if (df_parse_flags(src, n, run_flags, v, err) < 0)
		return -1;
	if (check_choice(src, n, &v[1], "--network", "network", networks, err) < 0)
		return -1;
	return check_choice(src, n, &v[2], "--security", "security", security, err);
}

static int check_shell(const struct df_src *src, const struct df_node *n, kiln_error **err)
{
	if (flags_only(src, n, err) < 0)
		return -1;
	if (n->args.n == 0)
		return df_check_errf(src, n, NULL, err, "SHELL requires at least one argument");
	if (!n->json)
		return df_check_errf(src, n, NULL, err, "SHELL requires the arguments to be in JSON form");
	return 0;
}

static int check_volume(const struct df_src *src, const struct df_node *n, kiln_error **err)
{
	if (at_least_one(src, n, "VOLUME", err) < 0 || flags_only(src, n, err) < 0)
		return -1;
	for (size_t i = 0; i < n->args.n; i++) {
		size_t len = strlen(n->args.v[i]);
		df_trim_space(n->args.v[i], &len);
		if (len == 0)
			return df_check_errf(src, n, NULL, err, "VOLUME specified can not be an empty string");
	}
	return 0;
}

static int check_arg(const struct df_src *src, const struct df_node *n, kiln_error **err)
{
	if (at_least_one(src, n, "ARG", err) < 0)
		return -1;
	for (size_t i = 0; i < n->args.n; i++)
		if (n->args.v[i][0] == '=')
			return df_check_errf(src, n, NULL, err, "ARG names can not be blank");
	return flags_only(src, n, err);
}

static int check_healthcheck(const struct df_src *src, const struct df_node *n, kiln_error **err)
{
	struct df_flagval v[MAX_FLAGS];
	char typ[16];
	size_t tl;

	if (at_least_one(src, n, "HEALTHCHECK", err) < 0)
		return -1;
	tl = strlen(n->args.v[0]);
	for (size_t i = 0; i < tl && i < sizeof(typ) - 1; i++)
		typ[i] = (char)toupper((unsigned char)n->args.v[0][i]);
	typ[tl < sizeof(typ) - 1 ? tl : sizeof(typ) - 1] = '\0';
	if (tl < sizeof(typ) && strcmp(typ, "NONE") == 0) {
		if (n->args.n != 1)
			return df_check_errf(src, n, NULL, err, "HEALTHCHECK NONE takes no arguments");
		return 0;
	}
	if (df_parse_flags(src, n, health_flags, v, err) < 0)
		return -1;
	if (!(tl < sizeof(typ) && strcmp(typ, "CMD") == 0)) {
		kiln_buf up = KILN_BUF_INIT, q = KILN_BUF_INIT;
		for (const char *p = n->args.v[0]; *p; p++)
			kiln_buf_addc(&up, (char)toupper((unsigned char)*p));
		df_go_quote(&q, up.buf, up.len);
		df_check_errf(src, n, NULL, err, "Unknown type %s in HEALTHCHECK (try CMD)", q.buf);
		kiln_buf_free(&up);
		kiln_buf_free(&q);
		return -1;
	}
	if (n->args.n < 2)
		return df_check_errf(src, n, NULL, err, "Missing command after HEALTHCHECK CMD");
	for (int i = 0; i < 4; i++)
		if (v[i].used && df_check_duration(src, n, health_flags[i].name, v[i].value, err) < 0)
			return -1;
	if (v[4].used && v[4].value[0] != '\0')
		return df_check_retries(src, n, v[4].value, err);
	return 0;
}

static int check_one(const struct df_src *src, const struct df_node *n, kiln_strv *warnings, kiln_error **err);

static int check_onbuild(const struct df_src *src, const struct df_node *n, kiln_strv *warnings, kiln_error **err)
{
	kiln_error *sub_err = NULL;
	char up[16];
	size_t i;

	if (n->sub == NULL)
		return df_check_errf(src, n, NULL, err, "ONBUILD requires at least one argument");
	if (flags_only(src, n, err) < 0)
		return -1;
	for (i = 0; n->sub->name[i] && i < sizeof(up) - 1; i++)
		up[i] = (char)toupper((unsigned char)n->sub->name[i]);
	up[i] = '\0';
	if (strcmp(up, "ONBUILD") == 0)
		return df_check_errf(src, n, NULL, err, "Chaining ONBUILD via `ONBUILD ONBUILD` isn't allowed");
	if (strcmp(up, "MAINTAINER") == 0 || strcmp(up, "FROM") == 0)
		return df_check_errf(src, n, NULL, err, "%s isn't allowed as an ONBUILD trigger", up);
	/* BuildKit checks the trigger only when a child image runs it: warn now. */
	if (check_one(src, n->sub, warnings, &sub_err) < 0) {
		kiln_strv_push_owned(warnings, kiln_xasprintf("%s (in an ONBUILD trigger, checked when it runs)",
							      kiln_error_message(sub_err)));
		kiln_error_free(sub_err);
	}
	return 0;
}

static int check_one(const struct df_src *src, const struct df_node *n, kiln_strv *warnings, kiln_error **err)
{
	const char *c = n->name;

	if (!strcmp(c, "from"))
		return check_from(src, n, err);
	if (!strcmp(c, "run"))
		return check_run(src, n, err);
	if (!strcmp(c, "cmd") || !strcmp(c, "entrypoint"))
		return flags_only(src, n, err);
	if (!strcmp(c, "label"))
		return check_kvps(src, n, "LABEL", err);
	if (!strcmp(c, "env"))
		return check_kvps(src, n, "ENV", err);
	if (!strcmp(c, "maintainer"))
		return exactly_one(src, n, "MAINTAINER", err);
	if (!strcmp(c, "expose"))
		return at_least_one(src, n, "EXPOSE", err) < 0 ? -1 : flags_only(src, n, err);
	if (!strcmp(c, "add"))
		return check_copy(src, n, "ADD", add_flags, err);
	if (!strcmp(c, "copy"))
		return check_copy(src, n, "COPY", copy_flags, err);
	if (!strcmp(c, "volume"))
		return check_volume(src, n, err);
	if (!strcmp(c, "user"))
		return exactly_one(src, n, "USER", err);
	if (!strcmp(c, "workdir"))
		return exactly_one(src, n, "WORKDIR", err);
	if (!strcmp(c, "arg"))
		return check_arg(src, n, err);
	if (!strcmp(c, "onbuild"))
		return check_onbuild(src, n, warnings, err);
	if (!strcmp(c, "stopsignal"))
		return exactly_one(src, n, "STOPSIGNAL", err);
	if (!strcmp(c, "healthcheck"))
		return check_healthcheck(src, n, err);
	if (!strcmp(c, "shell"))
		return check_shell(src, n, err);
	{
		static const char *const names[] = { "add", "arg", "cmd", "copy", "entrypoint", "env", "expose",
						     "from", "healthcheck", "label", "maintainer", "onbuild", "run",
						     "shell", "stopsignal", "user", "volume", "workdir", NULL };
		kiln_buf up = KILN_BUF_INIT;
		const char *hint = df_suggest(c, names);
		for (const char *p = c; *p; p++)
			kiln_buf_addc(&up, (char)toupper((unsigned char)*p));
		if (hint)
			df_check_errf(src, n, NULL, err, "unknown instruction: %s (did you mean %s?)", up.buf, hint);
		else
			df_check_errf(src, n, NULL, err, "unknown instruction: %s", up.buf);
		kiln_buf_free(&up);
		return -1;
	}
}

int df_check_node(const struct df_src *src, const struct df_node *n, kiln_strv *warnings, kiln_error **err)
{
	return check_one(src, n, warnings, err);
}

int df_check_ast(const struct df_ast *ast, kiln_strv *warnings, kiln_error **err)
{
	struct df_src src = { ast->file, ast->text, ast->line_off, ast->n_lines, ast->len };

	for (size_t i = 0; i < ast->n_nodes; i++)
		if (df_check_node(&src, &ast->nodes[i], warnings, err) < 0)
			return -1;
	return 0;
}
