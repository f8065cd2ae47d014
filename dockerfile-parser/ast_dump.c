/* ast_dump.c — the AST in BuildKit's Node.Dump() format, one s-expression
 * per instruction: `(copy ["--from=build"] "a" "/b")`, strings quoted as
 * Go's strconv.Quote quotes them, so kiln's output diffs cleanly against
 * BuildKit's dumper on the same Dockerfile. */
#include <string.h>

#include "dockerfile-parser/internal.h"

static void dump_node(kiln_buf *b, const struct df_node *n)
{
	kiln_buf_adds(b, n->name);
	if (n->flags.n > 0) {
		/* fmt's %q on a []string: [elem elem] */
		kiln_buf_adds(b, " [");
		for (size_t i = 0; i < n->flags.n; i++) {
			if (i)
				kiln_buf_addc(b, ' ');
			df_go_quote(b, n->flags.v[i], strlen(n->flags.v[i]));
		}
		kiln_buf_addc(b, ']');
	}
	if (n->sub) {
		kiln_buf_adds(b, " (");
		dump_node(b, n->sub);
		kiln_buf_addc(b, ')');
	}
	for (size_t i = 0; i < n->args.n; i++) {
		kiln_buf_addc(b, ' ');
		df_go_quote(b, n->args.v[i], strlen(n->args.v[i]));
	}
}

char *df_ast_dump(const struct df_ast *ast)
{
	kiln_buf b = KILN_BUF_INIT;

	for (size_t i = 0; i < ast->n_nodes; i++) {
		kiln_buf_addc(&b, '(');
		dump_node(&b, &ast->nodes[i]);
		kiln_buf_adds(&b, ")\n");
	}
	return kiln_buf_detach(&b);
}
