/* plan_steps.c — one stage's instructions into steps: which words expand
 * (as BuildKit's instructions.*Command.Expand and dispatch* do), ARG and
 * ENV scoping (one ordered list, the last definition wins, ARG values taken
 * from --build-arg, then the default, then the global ARG), the WORKDIR,
 * USER and SHELL in effect, and ONBUILD triggers of a FROM <stage> base. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dockerfile-parser/internal.h"

static const char *const kind_names[] = {
	[DF_FROM] = "from", [DF_RUN] = "run", [DF_CMD] = "cmd", [DF_LABEL] = "label",
	[DF_MAINTAINER] = "maintainer", [DF_EXPOSE] = "expose", [DF_ENV] = "env", [DF_ADD] = "add",
	[DF_COPY] = "copy", [DF_ENTRYPOINT] = "entrypoint", [DF_VOLUME] = "volume", [DF_USER] = "user",
	[DF_WORKDIR] = "workdir", [DF_ARG] = "arg", [DF_ONBUILD] = "onbuild", [DF_STOPSIGNAL] = "stopsignal",
	[DF_HEALTHCHECK] = "healthcheck", [DF_SHELL] = "shell",
};

const char *df_kind_name(enum df_kind kind)
{
	if ((size_t)kind < sizeof(kind_names) / sizeof(kind_names[0]) && kind_names[kind])
		return kind_names[kind];
	return "?";
}

static int kind_of(const char *name)
{
	for (size_t i = 0; i < sizeof(kind_names) / sizeof(kind_names[0]); i++)
		if (kind_names[i] && strcmp(kind_names[i], name) == 0)
			return (int)i;
	return -1;
}

static int expand(struct dfp_ctx *c, const struct df_node *n, struct dfp_state *s, const char *word, unsigned opts,
		  char **out, kiln_strv *words, kiln_error **err)
{
	kiln_error *e = NULL;
	/* heredoc bodies always use backslash (BuildKit's ExpandRaw lexer) */
	char esc = (opts & DFX_SKIP_QUOTES) ? '\\' : c->ast->escape;

	if (dfx_process(word, esc, opts, dfp_env_lookup, &s->env, out, words, &e) < 0) {
		dfp_fail(c, n, err, "%s", kiln_error_message(e));
		kiln_error_free(e);
		return -1;
	}
	return 0;
}

static int expand_into(struct dfp_ctx *c, const struct df_node *n, struct dfp_state *s, const char *word,
		       kiln_strv *out, kiln_error **err)
{
	char *v = NULL;

	if (expand(c, n, s, word, 0, &v, NULL, err) < 0)
		return -1;
	kiln_strv_push_owned(out, v);
	return 0;
}

static void add_kv(struct df_step *step, const char *key, const char *value)
{
	step->kvs = kiln_xrealloc(step->kvs, (step->n_kvs + 1) * sizeof(*step->kvs));
	step->kvs[step->n_kvs].key = kiln_xstrdup(key);
	step->kvs[step->n_kvs].value = value ? kiln_xstrdup(value) : NULL;
	step->n_kvs++;
	kiln_strv_push_owned(&step->args, value ? kiln_xasprintf("%s=%s", key, value) : kiln_xstrdup(key));
}

char *dfp_path_clean_abs(const char *p)
{
	kiln_strv parts = KILN_STRV_INIT;
	kiln_buf out = KILN_BUF_INIT;
	char *dup = kiln_xstrdup(p), *save = NULL;

	for (char *t = strtok_r(dup, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
		if (!strcmp(t, "."))
			continue;
		if (!strcmp(t, "..")) {
			if (parts.n)
				free(parts.v[--parts.n]), parts.v[parts.n] = NULL;
			continue;
		}
		kiln_strv_push(&parts, t);
	}
	for (size_t i = 0; i < parts.n; i++)
		kiln_buf_addf(&out, "/%s", parts.v[i]);
	if (!out.len)
		kiln_buf_addc(&out, '/');
	kiln_strv_free(&parts);
	free(dup);
	return kiln_buf_detach(&out);
}

/* "<<-": leading tabs of every line go (BuildKit's ChompHeredocContent). */
static char *chomp(const char *s)
{
	kiln_buf b = KILN_BUF_INIT;
	bool bol = true;

	for (; *s; s++) {
		if (bol && *s == '\t')
			continue;
		bol = *s == '\n';
		kiln_buf_addc(&b, *s);
	}
	return kiln_buf_detach(&b);
}

static void copy_heredocs(struct df_step *step, const struct df_node *n)
{
	if (!n->n_heredocs)
		return;
	step->heredocs = kiln_xcalloc(n->n_heredocs, sizeof(*step->heredocs));
	step->n_heredocs = n->n_heredocs;
	for (size_t i = 0; i < n->n_heredocs; i++) {
		step->heredocs[i] = n->heredocs[i];
		step->heredocs[i].name = kiln_xstrdup(n->heredocs[i].name ? n->heredocs[i].name : "");
		step->heredocs[i].content = n->heredocs[i].chomp ? chomp(n->heredocs[i].content ? n->heredocs[i].content : "")
						: kiln_xstrdup(n->heredocs[i].content ? n->heredocs[i].content : "");
	}
}

static int one_arg(struct dfp_ctx *c, const struct df_node *n, kiln_error **err)
{
	if (n->args.n != 1)
		return dfp_fail(c, n, err, "%s requires exactly one argument", n->name);
	return 0;
}

static int do_env_label(struct dfp_ctx *c, const struct df_node *n, struct dfp_state *s, struct df_step *step, bool env,
			kiln_error **err)
{
	kiln_strv kv = KILN_STRV_INIT;
	int rc = -1;

	if (n->args.n == 0 || n->args.n % 3)
		return dfp_fail(c, n, err, "%s requires at least one key=value pair", env ? "ENV" : "LABEL");
	/* the whole instruction expands against the env before it (ENV a=1 b=$a
	 * sees the old a) */
	for (size_t i = 0; i < n->args.n; i += 3) {
		if (expand_into(c, n, s, n->args.v[i], &kv, err) < 0 ||
		    expand_into(c, n, s, n->args.v[i + 1], &kv, err) < 0)
			goto out;
		if (!*kv.v[kv.n - 2]) {
			dfp_fail(c, n, err, "%s names can not be blank", env ? "ENV" : "LABEL");
			goto out;
		}
	}
	for (size_t i = 0; i < kv.n; i += 2) {
		add_kv(step, kv.v[i], kv.v[i + 1]);
		if (env)
			dfp_env_set(&s->env, kv.v[i], kv.v[i + 1]);
	}
	rc = 0;
out:
	kiln_strv_free(&kv);
	return rc;
}

static int do_arg(struct dfp_ctx *c, const struct df_node *n, struct dfp_state *s, struct df_step *step,
		  kiln_error **err)
{
	if (n->args.n == 0)
		return dfp_fail(c, n, err, "ARG requires at least one argument");
	for (size_t i = 0; i < n->args.n; i++) {
		const char *w = n->args.v[i], *eq = strchr(w, '='), *over;
		char *raw = eq ? kiln_xstrndup(w, (size_t)(eq - w)) : kiln_xstrdup(w), *key = NULL, *value = NULL;
		int r = expand(c, n, s, raw, 0, &key, NULL, err);

		free(raw);
		if (r == 0 && !*key)
			r = dfp_fail(c, n, err, "ARG names can not be blank");
		if (r == 0 && eq)
			r = expand(c, n, s, eq + 1, 0, &value, NULL, err);
		if (r < 0) {
			free(key);
			free(value);
			return -1;
		}
		over = dfp_build_arg(c, key);
		if (over) {
			free(value);
			value = kiln_xstrdup(over);
		} else if (!eq) {
			/* ARG NAME inherits the global ARG's value */
			struct df_kv *g = dfp_env_find(&c->meta, key);
			if (g && g->value)
				value = kiln_xstrdup(g->value);
		}
		if (value)
			dfp_env_set(&s->env, key, value);
		add_kv(step, key, value);
		free(key);
		free(value);
	}
	return 0;
}

static int do_copy(struct dfp_ctx *c, int stage, const struct df_node *n, const struct df_node *hd, struct dfp_state *s,
		   struct df_step *step, kiln_error **err)
{
	bool copy = step->kind == DF_COPY;

	if (n->args.n < 2)
		return dfp_fail(c, n, err, "%s requires at least two arguments", copy ? "COPY" : "ADD");
	for (size_t i = 0; i < step->n_flags; i++) {
		const char *k = step->flags[i].key;
		if (copy && !strcmp(k, "from")) {
			if (dfp_resolve_from(c, n, stage, step->flags[i].value, false, &step->from_stage, err) < 0)
				return -1;
			if (step->from_stage < 0) {
				if (dfp_require_reference(c, n, step->flags[i].value, err) < 0)
					return -1;
				step->from_image = kiln_xstrdup(step->flags[i].value);
			}
		} else if (!strcmp(k, "chown") || !strcmp(k, "chmod") || !strcmp(k, "exclude") ||
			   (!copy && !strcmp(k, "checksum"))) {
			char *v = NULL;
			if (expand(c, n, s, step->flags[i].value, 0, &v, NULL, err) < 0)
				return -1;
			free(step->flags[i].value);
			step->flags[i].value = v;
		}
	}
	for (size_t i = 0; i < n->args.n; i++) {
		/* a heredoc source is a name, not a path */
		if (hd->n_heredocs && !strncmp(n->args.v[i], "<<", 2) && i + 1 < n->args.n)
			kiln_strv_push(&step->args, n->args.v[i]);
		else if (expand_into(c, n, s, n->args.v[i], &step->args, err) < 0)
			return -1;
	}
	copy_heredocs(step, hd);
	for (size_t i = 0; i < step->n_heredocs; i++) {
		char *v = NULL;
		if (!step->heredocs[i].expand)
			continue;
		if (expand(c, n, s, step->heredocs[i].content, DFX_SKIP_QUOTES, &v, NULL, err) < 0)
			return -1;
		free(step->heredocs[i].content);
		step->heredocs[i].content = v;
	}
	return 0;
}

/* RUN: its --mount flags parsed once into step->mounts (plan_mount.c); the
 * flags keep the values as written. */
static int do_run(struct dfp_ctx *c, int stage, const struct df_node *n, const struct df_node *hd, struct dfp_state *s,
		  struct df_step *step, kiln_error **err)
{
	unsigned n_ssh = 0;

	for (size_t i = 0; i < step->n_flags; i++) {
		struct df_mount m;

		if (strcmp(step->flags[i].key, "mount") != 0)
			continue;
		if (dfp_mount_parse(c, n, step->flags[i].value, &s->env, n_ssh, &m, err) < 0)
			return -1;
		n_ssh += m.type == DF_MOUNT_SSH;
		if (m.from &&
		    (dfp_resolve_from(c, n, stage, m.from, true, &m.from_stage, err) < 0 ||
		     (m.from_stage < 0 && dfp_require_reference(c, n, m.from, err) < 0))) {
			df_mount_free(&m);
			return -1;
		}
		if (m.from_stage >= 0 && step->from_stage < 0)
			step->from_stage = m.from_stage;
		step->mounts = kiln_xrealloc(step->mounts, (step->n_mounts + 1) * sizeof(*step->mounts));
		step->mounts[step->n_mounts++] = m;
	}
	for (size_t i = 0; i < n->args.n; i++)
		kiln_strv_push(&step->args, n->args.v[i]);
	copy_heredocs(step, hd);
	return 0;
}

static void snapshot(struct df_step *step, const struct dfp_state *s, struct dfp_ctx *c)
{
	static const char *const proxies[] = { "HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY" };

	for (size_t i = 0; i < s->env.n; i++)
		if (s->env.v[i].value)
			kiln_strv_push_owned(&step->env, kiln_xasprintf("%s=%s", s->env.v[i].key, s->env.v[i].value));
	/* proxy build args reach RUN without an ARG (BuildKit's WithProxy) */
	for (size_t i = 0; step->kind == DF_RUN && i < c->opts->n_build_args; i++) {
		const struct df_kv *ba = &c->opts->build_args[i];
		for (size_t k = 0; k < sizeof(proxies) / sizeof(proxies[0]); k++)
			if (!strcasecmp(ba->key, proxies[k]) && !dfp_env_find(&s->env, ba->key))
				kiln_strv_push_owned(&step->env,
						     kiln_xasprintf("%s=%s", ba->key, ba->value ? ba->value : ""));
	}
	step->workdir = s->workdir ? kiln_xstrdup(s->workdir) : NULL;
	step->user = s->user ? kiln_xstrdup(s->user) : NULL;
	for (size_t i = 0; i < s->shell.n; i++)
		kiln_strv_push(&step->shell, s->shell.v[i]);
}

/* `hd` holds the heredocs: the node itself, or for an ONBUILD trigger the
 * ONBUILD node (the parser attaches them there, as BuildKit does). */
static int dispatch(struct dfp_ctx *c, int stage, struct dfp_state *s, const struct df_node *n, const struct df_node *hd,
		    struct df_step *step, kiln_error **err)
{
	int kind = kind_of(n->name);
	char *v = NULL;

	step->node = n;
	step->from_stage = -1;
	step->exec_form = n->json;
	if (kind < 0)
		return dfp_fail(c, n, err, "unknown instruction: %s", n->name);
	step->kind = (enum df_kind)kind;
	dfp_parse_flags(n, &step->flags, &step->n_flags);
	switch (step->kind) {
	case DF_FROM:
		return dfp_fail(c, n, err, "FROM is not allowed here");
	case DF_RUN:
		if (do_run(c, stage, n, hd, s, step, err) < 0)
			return -1;
		break;
	case DF_CMD:
	case DF_ENTRYPOINT:
	case DF_HEALTHCHECK:
	case DF_MAINTAINER:
	case DF_SHELL:
		for (size_t i = 0; i < n->args.n; i++)
			kiln_strv_push(&step->args, n->args.v[i]);
		if (step->kind == DF_SHELL) {
			kiln_strv_free(&s->shell);
			for (size_t i = 0; i < n->args.n; i++)
				kiln_strv_push(&s->shell, n->args.v[i]);
		}
		break;
	case DF_ENV:
	case DF_LABEL:
		if (do_env_label(c, n, s, step, step->kind == DF_ENV, err) < 0)
			return -1;
		break;
	case DF_ARG:
		if (do_arg(c, n, s, step, err) < 0)
			return -1;
		break;
	case DF_ADD:
	case DF_COPY:
		if (do_copy(c, stage, n, hd, s, step, err) < 0)
			return -1;
		break;
	case DF_EXPOSE:
		for (size_t i = 0; i < n->args.n; i++)
			if (expand(c, n, s, n->args.v[i], 0, NULL, &step->args, err) < 0)
				return -1;
		break;
	case DF_VOLUME:
		for (size_t i = 0; i < n->args.n; i++) {
			if (expand_into(c, n, s, n->args.v[i], &step->args, err) < 0)
				return -1;
			if (!*step->args.v[i])
				return dfp_fail(c, n, err, "VOLUME specified can not be an empty string");
		}
		break;
	case DF_USER:
	case DF_WORKDIR:
	case DF_STOPSIGNAL:
		if (one_arg(c, n, err) < 0 || expand(c, n, s, n->args.v[0], 0, &v, NULL, err) < 0)
			return -1;
		if (step->kind == DF_USER) {
			free(s->user);
			s->user = kiln_xstrdup(v);
		} else if (step->kind == DF_WORKDIR) {
			char *wd;
			if (!*v) {
				free(v);
				return dfp_fail(c, n, err, "WORKDIR requires a non-empty path");
			}
			if (v[0] == '/') {
				wd = kiln_xstrdup(v);
			} else {
				char *joined = kiln_xasprintf("%s/%s", s->workdir ? s->workdir : "", v);
				wd = dfp_path_clean_abs(joined);
				free(joined);
			}
			free(s->workdir);
			s->workdir = wd;
		}
		kiln_strv_push_owned(&step->args, v);
		break;
	case DF_ONBUILD:
		if (!n->sub)
			return dfp_fail(c, n, err, "ONBUILD requires an instruction");
		kiln_strv_push(&step->args, n->sub->original ? n->sub->original : n->sub->name);
		s->onbuild = kiln_xrealloc(s->onbuild, (s->n_onbuild + 1) * sizeof(*s->onbuild));
		s->onbuild[s->n_onbuild++] = n;
		break;
	}
	snapshot(step, s, c);
	return 0;
}

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* A stage FROM an image starts with the image's config (when the caller can
 * tell) and always with a PATH (BuildKit's "make sure that PATH is always
 * set"); without the hook the image is taken to set nothing else, which is
 * true of scratch, debian, ubuntu, alpine, busybox... */
/* An image's ONBUILD trigger text as a one-instruction AST kept in the plan;
 * its lines are the FROM's so steps and errors point there. */
static const struct df_node *parse_trigger(struct dfp_ctx *c, struct df_stage *st, const char *text,
					   kiln_error **err)
{
	struct df_ast *ast = NULL;
	kiln_error *e = NULL;
	char *name = kiln_xasprintf("ONBUILD trigger of %s", st->base);
	struct df_node *n;

	if (df_parse(name, text, strlen(text), &ast, &e) < 0 || dfp_check_ast(ast, &c->plan->warnings, &e) < 0) {
		df_ast_free(ast);
		dfp_fail(c, st->node, err, "base image %s: %s", st->base, kiln_error_message(e));
		kiln_error_free(e);
		free(name);
		return NULL;
	}
	free(name);
	c->plan->triggers = kiln_xrealloc(c->plan->triggers, (c->plan->n_triggers + 1) * sizeof(*c->plan->triggers));
	c->plan->triggers[c->plan->n_triggers++] = ast;
	if (ast->n_nodes != 1) {
		dfp_fail(c, st->node, err, "base image %s: ONBUILD trigger should be a single expression: %s", st->base,
			 text);
		return NULL;
	}
	n = &ast->nodes[0];
	if (!strcmp(n->name, "from") || !strcmp(n->name, "onbuild") || !strcmp(n->name, "maintainer")) {
		dfp_fail(c, st->node, err, "base image %s: %s isn't allowed as an ONBUILD trigger", st->base, n->name);
		return NULL;
	}
	n->start_line = st->node->start_line;
	n->end_line = st->node->end_line;
	n->col = st->node->col;
	return n;
}

static int image_start(struct dfp_ctx *c, struct df_stage *st, struct dfp_state *s, kiln_strv *triggers,
		       kiln_error **err)
{
	struct df_image_config ic = { KILN_STRV_INIT, NULL, NULL, KILN_STRV_INIT, KILN_STRV_INIT };
	bool scratch = strcmp(st->base, "scratch") == 0;
	int rc = -1;

	if (!scratch && dfp_require_reference(c, st->node, st->base, err) < 0)
		return -1;
	if (!scratch && c->opts->image_config) {
		kiln_error *e = NULL;
		const struct df_kv *tp = dfp_env_find(&c->meta, "TARGETPLATFORM");
		const char *plat = st->platform ? st->platform : tp && tp->value ? tp->value : "linux/amd64";
		if (c->opts->image_config(c->opts->image_ctx, st->base, plat, &ic, &e) < 0) {
			dfp_fail(c, st->node, err, "base image %s: %s", st->base, e ? kiln_error_message(e) : "failed");
			kiln_error_free(e);
			goto out;
		}
		for (size_t i = 0; i < ic.env.n; i++) {
			char *eq = strchr(ic.env.v[i], '='), *k;
			k = eq ? kiln_xstrndup(ic.env.v[i], (size_t)(eq - ic.env.v[i])) : kiln_xstrdup(ic.env.v[i]);
			dfp_env_set(&s->env, k, eq ? eq + 1 : "");
			free(k);
		}
		s->workdir = ic.workdir && *ic.workdir ? kiln_xstrdup(ic.workdir) : NULL;
		s->user = ic.user && *ic.user ? kiln_xstrdup(ic.user) : NULL;
		for (size_t i = 0; i < ic.shell.n; i++)
			kiln_strv_push(&s->shell, ic.shell.v[i]);
		for (size_t i = 0; i < ic.onbuild.n; i++)
			kiln_strv_push(triggers, ic.onbuild.v[i]);
	}
	if (!dfp_env_find(&s->env, "PATH"))
		dfp_env_set(&s->env, "PATH", DEFAULT_PATH);
	rc = 0;
out:
	kiln_strv_free(&ic.env);
	free(ic.workdir);
	free(ic.user);
	kiln_strv_free(&ic.shell);
	kiln_strv_free(&ic.onbuild);
	return rc;
}

int dfp_dispatch_stage(struct dfp_ctx *c, int index, kiln_error **err)
{
	struct df_stage *st = &c->plan->stages[index];
	struct dfp_state *s = &c->final[index];
	const struct dfp_state *base = st->base_stage >= 0 ? &c->final[st->base_stage] : NULL;
	size_t n_trig = base ? base->n_onbuild : 0, n = c->end[index] - c->first[index];
	kiln_strv image_triggers = KILN_STRV_INIT;
	int rc = -1;

	if (base) {
		/* FROM <stage> continues that stage's state (BuildKit copies its
		 * llb state, whose env includes ARG values) */
		dfp_env_copy(&s->env, &base->env);
		s->workdir = base->workdir ? kiln_xstrdup(base->workdir) : NULL;
		s->user = base->user ? kiln_xstrdup(base->user) : NULL;
		for (size_t i = 0; i < base->shell.n; i++)
			kiln_strv_push(&s->shell, base->shell.v[i]);
	} else if (image_start(c, st, s, &image_triggers, err) < 0) {
		goto out;
	}
	st->steps = kiln_xcalloc(n_trig + image_triggers.n + n + 1, sizeof(*st->steps));
	/* the base's ONBUILD triggers run first: a stage's at its ONBUILD
	 * lines, an image's at the FROM line */
	for (size_t i = 0; i < n_trig; i++)
		if (dispatch(c, index, s, base->onbuild[i]->sub, base->onbuild[i], &st->steps[st->n_steps++], err) < 0)
			goto out;
	for (size_t i = 0; i < image_triggers.n; i++) {
		const struct df_node *t = parse_trigger(c, st, image_triggers.v[i], err);
		if (!t || dispatch(c, index, s, t, t, &st->steps[st->n_steps++], err) < 0)
			goto out;
	}
	for (size_t i = c->first[index]; i < c->end[index]; i++)
		if (dispatch(c, index, s, &c->ast->nodes[i], &c->ast->nodes[i], &st->steps[st->n_steps++], err) < 0)
			goto out;
	rc = 0;
out:
	kiln_strv_free(&image_triggers);
	return rc;
}
