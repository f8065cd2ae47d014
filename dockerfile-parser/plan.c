/* plan.c — df_plan_build, the semantic pass: global ARGs and the predefined
 * platform ARGs, stages from FROM lines (expanded with the global ARGs only,
 * as BuildKit does), the edges of the stage graph, then the per-stage
 * expansion (plan_steps.c) in build order and the unused --build-arg check. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dockerfile-parser/internal.h"

/* ---- variable lists ------------------------------------------------------ */

struct df_kv *dfp_env_find(const struct dfp_env *e, const char *key)
{
	for (size_t i = 0; i < e->n; i++)
		if (strcmp(e->v[i].key, key) == 0)
			return &e->v[i];
	return NULL;
}

void dfp_env_set(struct dfp_env *e, const char *key, const char *value)
{
	struct df_kv *kv = dfp_env_find(e, key);

	if (!kv) {
		if (e->n == e->cap) {
			e->cap = e->cap ? e->cap * 2 : 8;
			e->v = kiln_xrealloc(e->v, e->cap * sizeof(*e->v));
		}
		kv = &e->v[e->n++];
		kv->key = kiln_xstrdup(key);
		kv->value = NULL;
	}
	free(kv->value);
	kv->value = value ? kiln_xstrdup(value) : NULL;
}

void dfp_env_copy(struct dfp_env *dst, const struct dfp_env *src)
{
	for (size_t i = 0; i < src->n; i++)
		dfp_env_set(dst, src->v[i].key, src->v[i].value);
}

void dfp_env_free(struct dfp_env *e)
{
	for (size_t i = 0; i < e->n; i++) {
		free(e->v[i].key);
		free(e->v[i].value);
	}
	free(e->v);
	e->v = NULL;
	e->n = e->cap = 0;
}

const char *dfp_env_lookup(void *ctx, const char *name)
{
	struct df_kv *kv = dfp_env_find(ctx, name);
	return kv ? kv->value : NULL;
}

/* In FROM lines a global ARG declared without a value counts as set to ""
 * (BuildKit's metaArgsToMap). */
struct meta_ctx {
	const struct dfp_env *env;
	kiln_strv *missing; /* names looked up but not declared, or NULL */
};

static const char *meta_lookup(void *ctx, const char *name)
{
	struct meta_ctx *m = ctx;
	struct df_kv *kv = dfp_env_find(m->env, name);

	if (!kv && m->missing) {
		bool seen = false;
		for (size_t i = 0; i < m->missing->n; i++)
			seen |= strcmp(m->missing->v[i], name) == 0;
		if (!seen)
			kiln_strv_push(m->missing, name);
	}
	return kv ? (kv->value ? kv->value : "") : NULL;
}

/* ---- small shared helpers ----------------------------------------------- */

char *dfp_where(const struct df_ast *ast, const struct df_node *node)
{
	const char *file = ast && ast->file ? ast->file : "Dockerfile";

	if (!node)
		return kiln_xasprintf("%s:1:1: ", file);
	return kiln_xasprintf("%s:%d:%d: ", file, node->start_line > 0 ? node->start_line : 1,
			      node->col > 0 ? node->col : 1);
}

int dfp_fail(const struct dfp_ctx *c, const struct df_node *node, kiln_error **err, const char *fmt, ...)
{
	kiln_buf msg = KILN_BUF_INIT;
	char *where = dfp_where(c->ast, node);
	va_list ap;

	va_start(ap, fmt);
	kiln_buf_vaddf(&msg, fmt, ap);
	va_end(ap);
	kiln_err(err, KILN_E_INVALID, "%s%s", where, msg.buf);
	kiln_buf_free(&msg);
	free(where);
	return -1;
}

const char *dfp_build_arg(struct dfp_ctx *c, const char *key)
{
	const char *v = NULL;

	/* the last --build-arg of a name wins */
	for (size_t i = 0; i < c->opts->n_build_args; i++) {
		if (strcmp(c->opts->build_args[i].key, key) == 0) {
			c->consumed[i] = true;
			v = c->opts->build_args[i].value ? c->opts->build_args[i].value : "";
		}
	}
	return v;
}

int dfp_stage_by_name(const struct df_plan *plan, const char *name)
{
	for (size_t i = 0; i < plan->n_stages; i++)
		if (plan->stages[i].name && strcasecmp(plan->stages[i].name, name) == 0)
			return (int)i;
	return -1;
}

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return false;
	return true;
}

int dfp_resolve_from(const struct dfp_ctx *c, const struct df_node *n, int cur, const char *ref, bool mount,
		     int *stage, kiln_error **err)
{
	if (!*ref)
		return dfp_fail(c, n, err, "--from requires a stage name, index or image");
	if (strchr(ref, '$'))
		return dfp_fail(c, n, err,
				"'from' doesn't support variable expansion, define alias stage instead (--from=%s)", ref);
	/* a mount's from= is a stage name or an image, never an index
	 * (BuildKit's detectRunMount) */
	if (all_digits(ref) && !mount) {
		unsigned long idx = strtoul(ref, NULL, 10);
		if (strlen(ref) > 9 || idx >= c->plan->n_stages)
			return dfp_fail(c, n, err, "invalid stage index %s: the Dockerfile has %zu stages", ref,
					c->plan->n_stages);
		if ((int)idx >= cur)
			return dfp_fail(c, n, err, "invalid stage index %s: --from=<index> must refer to an earlier stage",
					ref);
		*stage = (int)idx;
		return 0;
	}
	*stage = dfp_stage_by_name(c->plan, ref);
	return 0;
}

void dfp_parse_flags(const struct df_node *n, struct df_kv **out, size_t *n_out)
{
	*out = n->flags.n ? kiln_xcalloc(n->flags.n, sizeof(**out)) : NULL;
	*n_out = n->flags.n;
	for (size_t i = 0; i < n->flags.n; i++) {
		const char *f = n->flags.v[i], *eq;
		while (*f == '-')
			f++;
		eq = strchr(f, '=');
		(*out)[i].key = eq ? kiln_xstrndup(f, (size_t)(eq - f)) : kiln_xstrdup(f);
		(*out)[i].value = kiln_xstrdup(eq ? eq + 1 : "");
	}
}

/* ---- platforms ------------------------------------------------------------ */

struct platform {
	char *os, *arch, *variant, *full;
};

static void platform_free(struct platform *p)
{
	free(p->os);
	free(p->arch);
	free(p->variant);
	free(p->full);
}

/* "os/arch[/variant]" normalised the way containerd's platforms package does
 * for the common cases (x86_64 -> amd64, aarch64 -> arm64, arm -> arm/v7). */
static int platform_parse(const char *s, const char *what, struct platform *p, kiln_error **err)
{
	char *dup = kiln_xstrdup(s), *parts[4] = { 0 }, *save = NULL, *tok;
	int n = 0, rc = -1;

	memset(p, 0, sizeof(*p));
	for (char *q = dup; *q; q++)
		*q = (char)tolower((unsigned char)*q);
	for (tok = strtok_r(dup, "/", &save); tok && n < 4; tok = strtok_r(NULL, "/", &save))
		parts[n++] = tok;
	if (n < 1 || n > 3 || strchr(s, ' ') || s[strlen(s) - 1] == '/' || strstr(s, "//") || s[0] == '/') {
		kiln_err(err, KILN_E_USAGE, "invalid %s \"%s\": want os/arch[/variant], e.g. linux/amd64", what, s);
		goto out;
	}
	if (n == 1) {
		/* containerd: a lone OS gets the host's arch, a lone arch the
		 * host's OS (kiln's host is linux/amd64) */
		static const char *const oses[] = { "linux", "windows", "darwin", "freebsd", "netbsd", "openbsd",
						    "solaris", "illumos", "aix", "android", "ios", "plan9",
						    "dragonfly", "js", "wasip1", NULL };
		bool is_os = false;
		for (size_t i = 0; oses[i]; i++)
			is_os |= strcmp(oses[i], parts[0]) == 0;
		parts[1] = is_os ? "amd64" : parts[0];
		parts[0] = is_os ? parts[0] : "linux";
		n = 2;
	}
	p->os = kiln_xstrdup(parts[0]);
	if (!strcmp(parts[1], "x86_64") || !strcmp(parts[1], "x86-64"))
		p->arch = kiln_xstrdup("amd64");
	else if (!strcmp(parts[1], "aarch64"))
		p->arch = kiln_xstrdup("arm64");
	else
		p->arch = kiln_xstrdup(parts[1]);
	p->variant = kiln_xstrdup(n == 3 ? parts[2] : "");
	if (!strcmp(p->arch, "arm64") && !strcmp(p->variant, "v8")) {
		free(p->variant);
		p->variant = kiln_xstrdup("");
	} else if (!strcmp(p->arch, "arm") && !*p->variant) {
		free(p->variant);
		p->variant = kiln_xstrdup("v7");
	}
	p->full = *p->variant ? kiln_xasprintf("%s/%s/%s", p->os, p->arch, p->variant)
			      : kiln_xasprintf("%s/%s", p->os, p->arch);
	rc = 0;
out:
	free(dup);
	return rc;
}

/* BuildKit's getPlatformArgs, each overridable with --build-arg. */
static int init_meta(struct dfp_ctx *c, kiln_error **err)
{
	struct platform t, b;
	int rc = -1;

	if (platform_parse(c->opts->platform ? c->opts->platform : "linux/amd64", "platform", &t, err) < 0)
		return -1;
	if (platform_parse(c->opts->build_platform ? c->opts->build_platform : "linux/amd64", "build platform", &b,
			   err) < 0) {
		platform_free(&t);
		return -1;
	}
	const char *kv[] = { "TARGETPLATFORM", t.full, "TARGETOS", t.os, "TARGETARCH", t.arch, "TARGETVARIANT",
			     t.variant, "BUILDPLATFORM", b.full, "BUILDOS", b.os, "BUILDARCH", b.arch, "BUILDVARIANT",
			     b.variant };
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i += 2) {
		const char *over = dfp_build_arg(c, kv[i]);
		dfp_env_set(&c->meta, kv[i], over ? over : kv[i + 1]);
	}
	rc = 0;
	platform_free(&t);
	platform_free(&b);
	return rc;
}

/* ---- global ARGs and stages ---------------------------------------------- */

/* Expand with the global ARGs; in FROM lines (from == true) a name no ARG
 * declares gets BuildKit's UndefinedArgInFrom warning. */
static int expand_meta(struct dfp_ctx *c, const struct df_node *n, const char *word, bool from, char **out,
		       kiln_error **err)
{
	kiln_strv missing = KILN_STRV_INIT;
	struct meta_ctx m = { &c->meta, from ? &missing : NULL };
	kiln_error *e = NULL;
	int rc = -1;

	if (df_expand_word(word, c->ast->escape, meta_lookup, &m, out, &e) < 0) {
		dfp_fail(c, n, err, "%s", kiln_error_message(e));
		kiln_error_free(e);
		goto out;
	}
	for (size_t i = 0; i < missing.n && !c->lint_skip; i++) {
		char *where = dfp_where(c->ast, n);
		char *w = kiln_xasprintf("%sFROM argument '%s' is not declared (UndefinedArgInFrom)", where, missing.v[i]);
		if (!c->lint_first)
			c->lint_first = kiln_xstrdup(w);
		kiln_strv_push_owned(&c->plan->warnings, w);
		free(where);
	}
	rc = 0;
out:
	kiln_strv_free(&missing);
	return rc;
}

static int global_arg(struct dfp_ctx *c, const struct df_node *n, kiln_error **err)
{
	if (n->args.n == 0)
		return dfp_fail(c, n, err, "ARG requires at least one argument");
	for (size_t i = 0; i < n->args.n; i++) {
		const char *w = n->args.v[i], *eq = strchr(w, '=');
		char *key = eq ? kiln_xstrndup(w, (size_t)(eq - w)) : kiln_xstrdup(w), *value = NULL;
		const char *over;

		if (!*key) {
			free(key);
			return dfp_fail(c, n, err, "ARG names can not be blank");
		}
		/* the default is expanded (and may fail) even when overridden */
		if (eq && expand_meta(c, n, eq + 1, false, &value, err) < 0) {
			free(key);
			return -1;
		}
		over = dfp_build_arg(c, key);
		/* a bare re-declaration (ARG TARGETPLATFORM) keeps the value */
		if (!eq && !over && dfp_env_find(&c->meta, key)) {
			free(key);
			continue;
		}
		dfp_env_set(&c->meta, key, over ? over : value);
		free(key);
		free(value);
	}
	return 0;
}

static bool valid_stage_name(const char *s)
{
	if (!islower((unsigned char)*s))
		return false;
	for (s++; *s; s++)
		if (!islower((unsigned char)*s) && !isdigit((unsigned char)*s) && !strchr("-_.", *s))
			return false;
	return true;
}

static int add_stage(struct dfp_ctx *c, const struct df_node *n, size_t node_index, kiln_error **err)
{
	struct df_plan *p = c->plan;
	struct df_stage *st;
	struct df_kv *flags = NULL;
	size_t n_flags = 0;
	int rc = -1;

	p->stages = kiln_xrealloc(p->stages, (p->n_stages + 1) * sizeof(*p->stages));
	c->first = kiln_xrealloc(c->first, (p->n_stages + 1) * sizeof(*c->first));
	c->end = kiln_xrealloc(c->end, (p->n_stages + 1) * sizeof(*c->end));
	st = &p->stages[p->n_stages];
	memset(st, 0, sizeof(*st));
	st->index = (int)p->n_stages;
	st->node = n;
	st->base_stage = -1;
	c->first[p->n_stages] = node_index + 1;
	c->end[p->n_stages] = node_index + 1;
	p->n_stages++;

	if (n->args.n != 1 && !(n->args.n == 3 && strcasecmp(n->args.v[1], "as") == 0))
		return dfp_fail(c, n, err, "FROM requires either one or three arguments");
	if (n->args.n == 3) {
		st->name = kiln_xstrdup(n->args.v[2]);
		for (char *q = st->name; *q; q++)
			*q = (char)tolower((unsigned char)*q);
		if (!valid_stage_name(st->name))
			return dfp_fail(c, n, err, "invalid name for build stage: \"%s\", name can't start with a number or contain symbols",
					n->args.v[2]);
		for (size_t i = 0; i + 1 < p->n_stages; i++)
			if (p->stages[i].name && !strcmp(p->stages[i].name, st->name))
				return dfp_fail(c, n, err, "duplicate stage name \"%s\" (first defined at line %d)",
						st->name, p->stages[i].node->start_line);
	}
	if (expand_meta(c, n, n->args.v[0], true, &st->base, err) < 0)
		return -1;
	if (!*st->base)
		return dfp_fail(c, n, err, "base name (%s) should not be blank", n->args.v[0]);
	/* only stages defined above can be a base (BuildKit's addState) */
	for (size_t i = 0; i + 1 < p->n_stages; i++)
		if (p->stages[i].name && strcasecmp(p->stages[i].name, st->base) == 0)
			st->base_stage = (int)i;
	dfp_parse_flags(n, &flags, &n_flags);
	for (size_t i = 0; i < n_flags; i++) {
		struct platform plat;
		kiln_error *e = NULL;

		if (strcmp(flags[i].key, "platform") != 0)
			continue;
		free(st->platform);
		st->platform = NULL;
		if (expand_meta(c, n, flags[i].value, true, &st->platform, err) < 0)
			goto out;
		if (platform_parse(st->platform, "platform", &plat, &e) < 0) {
			dfp_fail(c, n, err, "failed to parse platform %s: %s", st->platform, kiln_error_cause(e));
			kiln_error_free(e);
			goto out;
		}
		platform_free(&plat);
	}
	rc = 0;
out:
	for (size_t i = 0; i < n_flags; i++) {
		free(flags[i].key);
		free(flags[i].value);
	}
	free(flags);
	return rc;
}

static void add_edge(struct dfp_ctx *c, int from, int to, const struct df_node *n)
{
	if (c->n_edges == c->cap_edges) {
		c->cap_edges = c->cap_edges ? c->cap_edges * 2 : 16;
		c->edges = kiln_xrealloc(c->edges, c->cap_edges * sizeof(*c->edges));
	}
	c->edges[c->n_edges++] = (struct dfp_edge){ from, to, n };
}

/* COPY --from and RUN --mount from= edges, from the flags as written
 * (BuildKit does not expand --from). */
static int collect_edges(struct dfp_ctx *c, kiln_error **err)
{
	for (size_t s = 0; s < c->plan->n_stages; s++) {
		struct df_stage *st = &c->plan->stages[s];

		if (st->base_stage >= 0)
			add_edge(c, (int)s, st->base_stage, st->node);
		for (size_t i = c->first[s]; i < c->end[s]; i++) {
			const struct df_node *n = &c->ast->nodes[i];
			bool copy = !strcmp(n->name, "copy"), run = !strcmp(n->name, "run");

			if (!copy && !run)
				continue;
			for (size_t f = 0; f < n->flags.n; f++) {
				const char *fl = n->flags.v[f];
				char *ref = NULL;
				int to = -1, rc;

				if (copy && !strncmp(fl, "--from=", 7))
					ref = kiln_xstrdup(fl + 7);
				else if (run && !strncmp(fl, "--mount=", 8)) {
					struct df_mount m;
					if (dfp_mount_parse(c, n, fl + 8, NULL, 0, &m, err) < 0)
						return -1;
					ref = m.from;
					m.from = NULL;
					df_mount_free(&m);
				}
				if (!ref)
					continue;
				rc = dfp_resolve_from(c, n, (int)s, ref, run, &to, err);
				free(ref);
				if (rc < 0)
					return -1;
				if (to >= 0)
					add_edge(c, (int)s, to, n);
			}
		}
	}
	return 0;
}

/* BuildKit's check directive ("skip=Rule1,Rule2;error=true"), overridden
 * by the BUILDKIT_DOCKERFILE_CHECK build arg.  The only lint rule of this
 * pass is UndefinedArgInFrom. */
static void parse_check(struct dfp_ctx *c)
{
	const char *v = c->ast->check;
	char *dup, *save = NULL;

	for (size_t i = 0; i < c->opts->n_build_args; i++)
		if (!strcmp(c->opts->build_args[i].key, "BUILDKIT_DOCKERFILE_CHECK"))
			v = c->opts->build_args[i].value;
	if (!v)
		return;
	dup = kiln_xstrdup(v);
	for (char *part = strtok_r(dup, ";", &save); part; part = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(part, '='), *save2 = NULL;
		while (*part == ' ')
			part++;
		if (!eq)
			continue;
		*eq = '\0';
		if (!strcasecmp(part, "error")) {
			c->lint_error = !strcasecmp(eq + 1, "true");
		} else if (!strcasecmp(part, "skip")) {
			for (char *r = strtok_r(eq + 1, ",", &save2); r; r = strtok_r(NULL, ",", &save2)) {
				while (*r == ' ')
					r++;
				if (!strcasecmp(r, "all") || !strcasecmp(r, "UndefinedArgInFrom"))
					c->lint_skip = true;
			}
		}
	}
	free(dup);
}

static bool predefined_arg(const char *key)
{
	static const char *const names[] = { "HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY",
					     "SOURCE_DATE_EPOCH", "BUILDKIT_DOCKERFILE_CHECK", NULL };
	for (size_t i = 0; names[i]; i++)
		if (strcasecmp(names[i], key) == 0)
			return true;
	return strncmp(key, "BUILDKIT_", 9) == 0;
}

static void free_state(struct dfp_state *s)
{
	dfp_env_free(&s->env);
	free(s->workdir);
	free(s->user);
	kiln_strv_free(&s->shell);
	free(s->onbuild);
}

/* What BuildKit's instructions.Parse refuses, over the whole file, before
 * anything is expanded (parse_check*.c); first a tree holding NUL, which no
 * argument, path or file name kiln hands on can carry. */
int dfp_check_ast(const struct df_ast *ast, kiln_strv *warnings, kiln_error **err)
{
	if (ast->nul)
		return kiln_err(err, KILN_E_INVALID, "%s:%d:%d: %s", ast->file, ast->nul_line, ast->nul_col,
				memmem(ast->text, ast->len, "\xC0\x80", 2) != NULL
					? "NUL byte in Dockerfile"
					: "a JSON string holds \\u0000, which no command argument can contain");
	return df_check_ast(ast, warnings, err);
}

int df_plan_build(const struct df_ast *ast, const struct df_plan_opts *opts, struct df_plan **out, kiln_error **err)
{
	static const struct df_plan_opts no_opts;
	struct dfp_ctx c = { 0 };
	size_t i;
	int rc = -1;

	*out = NULL;
	c.ast = ast;
	c.opts = opts ? opts : &no_opts;
	c.plan = kiln_xcalloc(1, sizeof(*c.plan));
	c.plan->target = -1;
	c.consumed = kiln_xcalloc(c.opts->n_build_args + 1, sizeof(*c.consumed));
	for (i = 0; i < c.opts->n_build_args; i++)
		if (!c.opts->build_args[i].key || !*c.opts->build_args[i].key) {
			kiln_err(err, KILN_E_USAGE, "build arg %zu has an empty name", i + 1);
			goto out;
		}
	if (dfp_check_ast(ast, &c.plan->warnings, err) < 0)
		goto out;
	if (init_meta(&c, err) < 0)
		goto out;
	parse_check(&c);
	for (i = 0; i < ast->n_nodes && strcmp(ast->nodes[i].name, "from") != 0; i++) {
		if (strcmp(ast->nodes[i].name, "arg") != 0) {
			dfp_fail(&c, &ast->nodes[i], err, "no build stage in current context: %s before the first FROM",
				 ast->nodes[i].name);
			goto out;
		}
		if (global_arg(&c, &ast->nodes[i], err) < 0)
			goto out;
	}
	if (i == ast->n_nodes) {
		dfp_fail(&c, ast->n_nodes ? &ast->nodes[ast->n_nodes - 1] : NULL, err,
			 "no build stage in current context: the Dockerfile has no FROM");
		goto out;
	}
	for (; i < ast->n_nodes; i++) {
		if (strcmp(ast->nodes[i].name, "from") == 0) {
			if (add_stage(&c, &ast->nodes[i], i, err) < 0)
				goto out;
		} else {
			c.end[c.plan->n_stages - 1] = i + 1;
		}
	}
	c.plan->global_args = kiln_xcalloc(c.meta.n + 1, sizeof(*c.plan->global_args));
	for (i = 0; i < c.meta.n; i++) {
		c.plan->global_args[i].key = kiln_xstrdup(c.meta.v[i].key);
		c.plan->global_args[i].value = c.meta.v[i].value ? kiln_xstrdup(c.meta.v[i].value) : NULL;
	}
	c.plan->n_global_args = c.meta.n;
	if (c.lint_error && c.lint_first) {
		kiln_err(err, KILN_E_INVALID, "%s; lint violation with check=error=true", c.lint_first);
		goto out;
	}
	if (collect_edges(&c, err) < 0 || dfp_graph(&c, err) < 0)
		goto out;
	c.final = kiln_xcalloc(c.plan->n_stages, sizeof(*c.final));
	for (i = 0; i < c.plan->n_order; i++)
		if (dfp_dispatch_stage(&c, c.plan->order[i], err) < 0)
			goto out;
	for (i = 0; i < c.opts->n_build_args; i++) {
		const char *k = c.opts->build_args[i].key;
		bool dup = false;
		for (size_t j = i + 1; j < c.opts->n_build_args; j++)
			dup |= strcmp(c.opts->build_args[j].key, k) == 0;
		if (!c.consumed[i] && !dup && !predefined_arg(k))
			kiln_strv_push_owned(&c.plan->warnings,
					     kiln_xasprintf("build-arg %s was not consumed by any ARG instruction", k));
	}
	*out = c.plan;
	c.plan = NULL;
	rc = 0;
out:
	if (c.final)
		for (i = 0; i < (c.plan ? c.plan->n_stages : (*out)->n_stages); i++)
			free_state(&c.final[i]);
	free(c.final);
	df_plan_free(c.plan);
	dfp_env_free(&c.meta);
	free(c.consumed);
	free(c.lint_first);
	free(c.first);
	free(c.end);
	free(c.edges);
	return rc;
}
