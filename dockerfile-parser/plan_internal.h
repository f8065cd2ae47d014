/* plan_internal.h — what the semantic pass's files (expand*.c, plan*.c)
 * share and nobody else needs: the lexer with its BuildKit options, and the
 * stage-graph step of df_plan_build. */
#ifndef KILN_DF_PLAN_INTERNAL_H
#define KILN_DF_PLAN_INTERNAL_H

#include "dockerfile-parser/dockerfile.h"

/* Longest result of one expansion: nested ${v//p/r} could otherwise grow
 * without bound. */
#define DFX_MAX_LEN (256 * 1024)

/* Lexer options, as BuildKit's shell.Lex fields. */
enum {
	DFX_SKIP_QUOTES = 1 << 0, /* quotes are ordinary characters (heredoc bodies) */
};

/* The whole lexer: expands `word`; *out gets the single-word result (if out
 * is non-NULL) and *words the split words (if words is non-NULL). */
int dfx_process(const char *word, char escape, unsigned opts, df_lookup_fn lookup, void *ctx, char **out,
		kiln_strv *words, kiln_error **err);

/* Shell patterns of ${v#p} ${v%p} ${v/p/r} (* ? and \-escapes, no
 * brackets).  Both return a new string, or NULL with *emsg set for a bad
 * pattern.  trim: remove the shortest (greedy: longest) matching prefix, or
 * suffix.  replace: the first (all: every) leftmost-longest match. */
char *dfx_glob_trim(const char *value, const char *pattern, bool suffix, bool greedy, char **emsg);
char *dfx_glob_replace(const char *value, const char *pattern, const char *repl, bool all, char **emsg);

/* An ordered variable list; setting an existing key replaces it in place.
 * A NULL value means declared without a value (global ARGs only). */
struct dfp_env {
	struct df_kv *v;
	size_t n, cap;
};

void dfp_env_set(struct dfp_env *e, const char *key, const char *value);
struct df_kv *dfp_env_find(const struct dfp_env *e, const char *key);
void dfp_env_copy(struct dfp_env *dst, const struct dfp_env *src);
void dfp_env_free(struct dfp_env *e);
/* df_lookup_fn over a struct dfp_env (ctx). */
const char *dfp_env_lookup(void *ctx, const char *name);

/* What a stage carries from one instruction to the next, and hands to the
 * stages built FROM it. */
struct dfp_state {
	struct dfp_env env;
	char *workdir;
	char *user;
	kiln_strv shell;
	const struct df_node **onbuild; /* ONBUILD triggers declared in this stage */
	size_t n_onbuild;
};

/* An edge of the stage graph: stage `from` needs stage `to` because of `node`. */
struct dfp_edge {
	int from, to;
	const struct df_node *node;
};

struct dfp_ctx {
	const struct df_ast *ast;
	const struct df_plan_opts *opts;
	struct df_plan *plan;
	struct dfp_env meta;   /* global ARGs incl. the predefined platform ARGs */
	bool *consumed;        /* per opts->build_args entry: some ARG declared it */
	size_t *first, *end;   /* node range [first, end) of each stage's instructions */
	struct dfp_edge *edges;
	size_t n_edges, cap_edges;
	struct dfp_state *final; /* per stage, after its last instruction */
};

/* "FILE:LINE:COL: " for a node (freed by the caller). */
char *dfp_where(const struct df_ast *ast, const struct df_node *node);
/* Set *err to "FILE:LINE:COL: message" at node; returns -1. */
int dfp_fail(const struct dfp_ctx *c, const struct df_node *node, kiln_error **err, const char *fmt, ...)
	KILN_PRINTF(4, 5);

/* The value given with --build-arg for key, marking it consumed; NULL if none. */
const char *dfp_build_arg(struct dfp_ctx *c, const char *key);
/* A stage named (case-insensitively) `name`, or -1. */
int dfp_stage_by_name(const struct df_plan *plan, const char *name);
/* Resolve COPY --from / --mount from= at stage `cur`: *stage gets the stage
 * index, or -1 when ref names an image. */
int dfp_resolve_from(const struct dfp_ctx *c, const struct df_node *n, int cur, const char *ref, int *stage,
		     kiln_error **err);
/* The value of a mount spec's from= field, or NULL (caller frees). */
char *dfp_mount_from(const char *spec);
/* "--name=value" -> {name, value}. */
void dfp_parse_flags(const struct df_node *n, struct df_kv **out, size_t *n_out);

/* Expand the instructions of stage `index` into steps (plan_steps.c). */
int dfp_dispatch_stage(struct dfp_ctx *c, int index, kiln_error **err);

/* Stage graph (plan_graph.c): deps from c->edges, cycle check, target,
 * build order and reachability. */
int dfp_graph(struct dfp_ctx *c, kiln_error **err);

#endif
