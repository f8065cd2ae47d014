/* ast_dump.c — the AST in BuildKit's Node.Dump() format, one s-expression
 * per instruction: `(copy ["--from=build"] "a" "/b")`, strings quoted as
 * Go's strconv.Quote quotes them, so kiln's output diffs cleanly against
 * BuildKit's dumper on the same Dockerfile. */
#include <string.h>

#include "dockerfile-parser/internal.h"

/* strconv.Quote of a tree string (NUL mode: of the bytes it stands for). */
static void quote(kiln_buf *b, const char *s, bool nul)
{
	size_t len = strlen(s);
	char *raw;

	if (!nul) {
		df_go_quote(b, s, len);
		return;
	}
	raw = df_nul_decode(s, &len);
	df_go_quote(b, raw, len);
	free(raw);
}

/* ONBUILD nests its trigger: `(onbuild (onbuild (run "x")))`; written in a
 * loop, closing the parentheses at the end. */
static void dump_node(kiln_buf *b, const struct df_node *n, bool nul)
{
	size_t depth = 0;

	for (;;) {
		if (nul) {
			size_t len = strlen(n->name);
			char *raw = df_nul_decode(n->name, &len);
			kiln_buf_add(b, raw, len); /* Dump prints the word unquoted */
			free(raw);
		} else {
			kiln_buf_adds(b, n->name);
		}
		if (n->flags.n > 0) {
			/* fmt's %q on a []string: [elem elem] */
			kiln_buf_adds(b, " [");
			for (size_t i = 0; i < n->flags.n; i++) {
				if (i)
					kiln_buf_addc(b, ' ');
				quote(b, n->flags.v[i], nul);
			}
			kiln_buf_addc(b, ']');
		}
		if (!n->sub)
			break;
		kiln_buf_adds(b, " (");
		depth++;
		n = n->sub;
	}
	for (size_t i = 0; i < n->args.n; i++) {
		kiln_buf_addc(b, ' ');
		quote(b, n->args.v[i], nul);
	}
	while (depth--)
		kiln_buf_addc(b, ')');
}

char *df_ast_dump(const struct df_ast *ast, size_t *len)
{
	kiln_buf b = KILN_BUF_INIT;

	for (size_t i = 0; i < ast->n_nodes; i++) {
		kiln_buf_addc(&b, '(');
		dump_node(&b, &ast->nodes[i], ast->nul);
		kiln_buf_adds(&b, ")\n");
	}
	if (len)
		*len = b.len;
	return kiln_buf_detach(&b);
}
