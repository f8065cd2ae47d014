/* plan_internal.h — what the semantic pass's files (expand*.c, plan*.c)
 * share and nobody else needs: the lexer with its BuildKit options, and the
 * stage-graph step of df_plan_build. */
#ifndef KILN_DF_PLAN_INTERNAL_H
#define KILN_DF_PLAN_INTERNAL_H

#include "dockerfile-parser/dockerfile.h"

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

/* "FILE:LINE:COL: " prefix for a node. */
char *dfp_where(const struct df_ast *ast, const struct df_node *node);

/* Stage graph: fills deps (already collected per stage in plan->stages),
 * checks cycles, resolves the target and computes the build order. */
int dfp_graph(const struct df_ast *ast, struct df_plan *plan, const char *target, kiln_error **err);

#endif
