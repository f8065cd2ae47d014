/* ast_json.c — the AST as JSON for `kiln dockerfile parse --json` and for
 * tools: every field of every instruction, line numbers included.  Strings
 * that are not valid UTF-8 get U+FFFD in place of each bad byte, as Go's
 * encoding/json would write them; a NUL (NUL mode) is "\u0000". */
#include <string.h>

#include "dockerfile-parser/internal.h"

/* A tree string as JSON: invalid UTF-8 bytes as U+FFFD; in NUL mode the
 * bytes it stands for, so a NUL is written "\u0000". */
static json_t *jstr(const char *s, bool nul)
{
	char *raw = NULL, *clean;
	size_t len;
	json_t *v;

	if (s == NULL)
		return json_null();
	len = strlen(s);
	if (nul) {
		raw = df_nul_decode(s, &len);
		s = raw;
	}
	clean = df_utf8_sanitize(s, len, &len);
	v = json_stringn(clean ? clean : "", clean ? len : 0);
	free(clean);
	free(raw);
	return v ? v : json_string("");
}

static json_t *jstrv(const kiln_strv *sv, bool nul)
{
	json_t *a = json_array();

	for (size_t i = 0; i < sv->n; i++)
		json_array_append_new(a, jstr(sv->v[i], nul));
	return a;
}

static json_t *node_json(const struct df_node *n, bool nul)
{
	json_t *o = json_object(), *docs = json_array();

	json_object_set_new(o, "instruction", jstr(n->name, nul));
	json_object_set_new(o, "flags", jstrv(&n->flags, nul));
	json_object_set_new(o, "args", jstrv(&n->args, nul));
	json_object_set_new(o, "json", json_boolean(n->json));
	for (size_t i = 0; i < n->n_heredocs; i++) {
		const struct df_heredoc *h = &n->heredocs[i];
		json_t *d = json_object();
		json_object_set_new(d, "name", jstr(h->name, nul));
		json_object_set_new(d, "content", jstr(h->content, nul));
		json_object_set_new(d, "expand", json_boolean(h->expand));
		json_object_set_new(d, "chomp", json_boolean(h->chomp));
		json_object_set_new(d, "fd", json_integer(h->fd));
		json_array_append_new(docs, d);
	}
	json_object_set_new(o, "heredocs", docs);
	json_object_set_new(o, "original", jstr(n->original, nul));
	json_object_set_new(o, "start_line", json_integer(n->start_line));
	json_object_set_new(o, "end_line", json_integer(n->end_line));
	json_object_set_new(o, "col", json_integer(n->col));
	json_object_set_new(o, "comment", jstr(n->comment, nul));
	return o;
}

/* An instruction and its ONBUILD chain, each trigger under "trigger": built
 * from the innermost out, in a loop (a chain can be thousands deep). */
static json_t *chain_json(const struct df_node *n, bool nul)
{
	const struct df_node **chain = NULL;
	size_t depth = 0;
	json_t *inner = NULL;

	for (const struct df_node *p = n; p; p = p->sub) {
		chain = kiln_xrealloc(chain, (depth + 1) * sizeof(*chain));
		chain[depth++] = p;
	}
	while (depth--) {
		json_t *o = node_json(chain[depth], nul);
		if (inner)
			json_object_set_new(o, "trigger", inner);
		inner = o;
	}
	free(chain);
	return inner;
}

json_t *df_ast_to_json(const struct df_ast *ast)
{
	json_t *o = json_object(), *ins = json_array();
	char esc[2] = { ast->escape, '\0' };

	json_object_set_new(o, "file", jstr(ast->file, false));
	json_object_set_new(o, "escape", jstr(esc, false));
	json_object_set_new(o, "syntax", jstr(ast->syntax, ast->nul));
	json_object_set_new(o, "check", jstr(ast->check, ast->nul));
	for (size_t i = 0; i < ast->n_nodes; i++)
		json_array_append_new(ins, chain_json(&ast->nodes[i], ast->nul));
	json_object_set_new(o, "instructions", ins);
	json_object_set_new(o, "warnings", jstrv(&ast->warnings, ast->nul));
	return o;
}
