/* ast_json.c — the AST as JSON for `kiln dockerfile parse --json` and for
 * tools: every field of every instruction, line numbers included.  Strings
 * that are not valid UTF-8 get U+FFFD in place of each bad byte, as Go's
 * encoding/json would write them. */
#include <string.h>

#include "dockerfile-parser/internal.h"

static json_t *jstr(const char *s)
{
	json_t *v;
	char *clean;

	if (s == NULL)
		return json_null();
	v = json_string(s);
	if (v != NULL)
		return v;
	clean = df_utf8_sanitize(s, strlen(s));
	v = json_string(clean);
	free(clean);
	return v ? v : json_string("");
}

static json_t *jstrv(const kiln_strv *sv)
{
	json_t *a = json_array();

	for (size_t i = 0; i < sv->n; i++)
		json_array_append_new(a, jstr(sv->v[i]));
	return a;
}

static json_t *node_json(const struct df_node *n)
{
	json_t *o = json_object(), *docs = json_array();

	json_object_set_new(o, "instruction", jstr(n->name));
	json_object_set_new(o, "flags", jstrv(&n->flags));
	json_object_set_new(o, "args", jstrv(&n->args));
	json_object_set_new(o, "json", json_boolean(n->json));
	for (size_t i = 0; i < n->n_heredocs; i++) {
		const struct df_heredoc *h = &n->heredocs[i];
		json_t *d = json_object();
		json_object_set_new(d, "name", jstr(h->name));
		json_object_set_new(d, "content", jstr(h->content));
		json_object_set_new(d, "expand", json_boolean(h->expand));
		json_object_set_new(d, "chomp", json_boolean(h->chomp));
		json_object_set_new(d, "fd", json_integer(h->fd));
		json_array_append_new(docs, d);
	}
	json_object_set_new(o, "heredocs", docs);
	json_object_set_new(o, "original", jstr(n->original));
	json_object_set_new(o, "start_line", json_integer(n->start_line));
	json_object_set_new(o, "end_line", json_integer(n->end_line));
	json_object_set_new(o, "col", json_integer(n->col));
	json_object_set_new(o, "comment", jstr(n->comment));
	if (n->sub)
		json_object_set_new(o, "trigger", node_json(n->sub));
	return o;
}

json_t *df_ast_to_json(const struct df_ast *ast)
{
	json_t *o = json_object(), *ins = json_array();
	char esc[2] = { ast->escape, '\0' };

	json_object_set_new(o, "file", jstr(ast->file));
	json_object_set_new(o, "escape", jstr(esc));
	json_object_set_new(o, "syntax", jstr(ast->syntax));
	json_object_set_new(o, "check", jstr(ast->check));
	for (size_t i = 0; i < ast->n_nodes; i++)
		json_array_append_new(ins, node_json(&ast->nodes[i]));
	json_object_set_new(o, "instructions", ins);
	json_object_set_new(o, "warnings", jstrv(&ast->warnings));
	return o;
}
