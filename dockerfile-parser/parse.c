/* parse.c — Dockerfile text to AST, line by line as BuildKit's parser.Parse
 * does: parser directives at the top, comments, line continuations (with
 * comment and blank lines inside them), heredoc bodies.  What BuildKit's
 * instructions.Parse rejects is left to parse_check.c, run by pass 2.
 * Errors are "FILE:LINE:COL: msg". */
#include <string.h>

#include "dockerfile-parser/internal.h"

/* bufio.Scanner's default limit, which BuildKit keeps. */
#define MAX_LINE 65536

struct scan {
	const char *text;
	size_t len, pos;
	bool nul;                /* NUL-mode text: a C0 byte starts a 2-byte pair */
	int line;                /* physical lines consumed so far */
	size_t *line_off;
	size_t n_off, cap_off;
};

/* Next physical line including its "\n"; false at end of input or when a
 * line is longer than BuildKit accepts (*too_long set). */
static bool scan_line(struct scan *sc, const char **p, size_t *n, bool *too_long)
{
	const char *nl;
	size_t avail;

	if (sc->pos >= sc->len)
		return false;
	avail = sc->len - sc->pos;
	nl = memchr(sc->text + sc->pos, '\n', avail);
	*n = nl ? (size_t)(nl - (sc->text + sc->pos)) + 1 : avail;
	size_t orig = *n; /* the length BuildKit's scanner sees */
	if (sc->nul)
		for (const char *q = sc->text + sc->pos; (q = memchr(q, 0xC0, (size_t)(sc->text + sc->pos + *n - q))); q++)
			orig--;
	if (orig > MAX_LINE || (!nl && orig >= MAX_LINE)) {
		*too_long = true;
		return false;
	}
	*p = sc->text + sc->pos;
	if (sc->n_off == sc->cap_off) {
		sc->cap_off = sc->cap_off ? sc->cap_off * 2 : 256;
		sc->line_off = kiln_xrealloc(sc->line_off, sc->cap_off * sizeof(*sc->line_off));
	}
	sc->line_off[sc->n_off++] = sc->pos;
	sc->pos += *n;
	sc->line++;
	return true;
}

static size_t trim_newline(const char *p, size_t n)
{
	while (n > 0 && (p[n - 1] == '\n' || p[n - 1] == '\r'))
		n--;
	return n;
}

static bool is_comment(const char *p, size_t n)
{
	p = df_trim_left_space(p, &n);
	return n > 0 && p[0] == '#';
}

/* BuildKit's directive parser state. */
struct directives {
	bool done;
	bool seen_syntax, seen_escape, seen_check;
	char escape;
};

static bool dir_space(char c)
{
	return c == '\t' || c == '\n' || c == '\f' || c == '\r' || c == ' ';
}

/* One line (already stripped of its newline) against
 * #\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$ ; returns 1 if it was a
 * directive, 0 if not, -1 on error. */
static int directive_line(struct directives *d, struct df_ast *ast, const char *p, size_t n, kiln_error **err)
{
	size_t k, ke, v, ve;
	char key[8];
	bool *seen;
	char **slot = NULL;

	if (d->done)
		return 0;
	if (n == 0 || p[0] != '#') {
		d->done = true;
		return 0;
	}
	p++;
	n--;
	p = df_trim_left_space(p, &n);
	k = 0;
	if (n == 0 || !((p[0] >= 'a' && p[0] <= 'z') || (p[0] >= 'A' && p[0] <= 'Z')))
		goto not_directive;
	while (k < n && ((p[k] >= 'a' && p[k] <= 'z') || (p[k] >= 'A' && p[k] <= 'Z') || (p[k] >= '0' && p[k] <= '9')))
		k++;
	ke = k;
	while (k < n && dir_space(p[k]))
		k++;
	if (k >= n || p[k] != '=')
		goto not_directive;
	v = k + 1;
	if (v >= n)
		goto not_directive;
	ve = n;
	while (ve > v && dir_space(p[ve - 1]))
		ve--;
	while (v < ve && dir_space(p[v]))
		v++;
	if (v == ve) /* only spaces after '=': the lazy (.+?) takes the last one */
		v = n - 1, ve = n;
	if (ke >= sizeof(key))
		goto not_directive;
	for (size_t i = 0; i < ke; i++)
		key[i] = (char)((p[i] >= 'A' && p[i] <= 'Z') ? p[i] + 32 : p[i]);
	key[ke] = '\0';
	if (strcmp(key, "syntax") == 0) {
		seen = &d->seen_syntax;
		slot = &ast->syntax;
	} else if (strcmp(key, "check") == 0) {
		seen = &d->seen_check;
		slot = &ast->check;
	} else if (strcmp(key, "escape") == 0) {
		seen = &d->seen_escape;
	} else {
		goto not_directive;
	}
	if (*seen)
		return kiln_err(err, KILN_E_INVALID, "only one %s parser directive can be used", key);
	*seen = true;
	if (slot) {
		*slot = kiln_xstrndup(p + v, ve - v);
		return 1;
	}
	if (ve - v != 1 || (p[v] != '\\' && p[v] != '`')) {
		char *val = kiln_xstrndup(p + v, ve - v);
		kiln_err(err, KILN_E_INVALID, "invalid escape token '%s' does not match ` or \\", val);
		free(val);
		return -1;
	}
	d->escape = p[v];
	ast->escape = p[v];
	return 1;
not_directive:
	d->done = true;
	return 0;
}

/* The line-continuation regex ([^E])E[ \t]*$|^E[ \t]*$ : true (and *n
 * shortened) when the line continues. */
static bool trim_continuation(const char *p, size_t *n, char esc)
{
	size_t e = *n;

	while (e > 0 && (p[e - 1] == ' ' || p[e - 1] == '\t'))
		e--;
	if (e == 0 || p[e - 1] != esc)
		return false;
	if (e >= 2 && p[e - 2] == esc)
		return false;
	*n = e - 1;
	return true;
}

static int loc_err(kiln_error **err, const char *file, int line, int col, const char *msg)
{
	return kiln_err(err, KILN_E_INVALID, "%s:%d:%d: %s", file, line < 1 ? 1 : line, col < 1 ? 1 : col, msg);
}

/* Re-raise a located error, keeping the cause's text. */
static int relocate(kiln_error **err, const char *file, int line, int col)
{
	char *msg = kiln_xstrdup(kiln_error_message(*err));
	int ret;

	kiln_error_clear(err);
	ret = loc_err(err, file, line, col, msg);
	free(msg);
	return ret;
}

static int col_of(const char *p, size_t n)
{
	size_t k = n;

	df_trim_left_space(p, &k);
	/* columns count characters, not bytes */
	int col = 1;
	for (size_t i = 0; i < n - k; i++)
		col += ((unsigned char)p[i] & 0xC0) != 0x80;
	return col;
}

static void add_comment(kiln_strv *comments, const char *raw, size_t n)
{
	size_t cl = n - 1;
	const char *c = df_trim_space(raw + 1, &cl);

	if (cl == 0) {
		kiln_strv_free(comments);
		return;
	}
	kiln_strv_push_owned(comments, kiln_xstrndup(c, cl));
}

static char *join_comments(const kiln_strv *c)
{
	kiln_buf b = KILN_BUF_INIT;

	if (c->n == 0)
		return NULL;
	for (size_t i = 0; i < c->n; i++) {
		if (i)
			kiln_buf_addc(&b, '\n');
		kiln_buf_adds(&b, c->v[i]);
	}
	return kiln_buf_detach(&b);
}

/* The instruction BuildKit looks heredocs up on: ONBUILD's trigger. */
static bool can_contain_heredoc(const struct df_node *n)
{
	if (strcmp(n->name, "onbuild") == 0 && n->sub)
		n = n->sub;
	if (strcmp(n->name, "run") && strcmp(n->name, "copy") && strcmp(n->name, "add"))
		return false;
	return !n->json;
}

static int read_heredocs(struct scan *sc, struct df_node *n, const char *file, bool *too_long, kiln_error **err)
{
	struct df_heredoc *docs = NULL;
	size_t nd = 0;
	int ret = df_heredocs_from_line(n->original, sc->nul, &docs, &nd, err);

	if (ret < 0)
		return relocate(err, file, n->start_line, n->col);
	n->heredocs = docs;
	n->n_heredocs = nd;
	for (size_t i = 0; i < nd; i++) {
		struct df_heredoc *h = &docs[i];
		kiln_buf body = KILN_BUF_INIT;
		size_t tl = strlen(h->name);
		bool done = false;
		const char *p;
		size_t len;

		while (scan_line(sc, &p, &len, too_long)) {
			size_t m = trim_newline(p, len);
			const char *t = p;
			if (h->chomp)
				while (m > 0 && *t == '\t')
					t++, m--;
			if (m == tl && memcmp(t, h->name, tl) == 0) {
				done = true;
				break;
			}
			kiln_buf_add(&body, p, len);
		}
		h->content = kiln_buf_detach(&body);
		n->end_line = sc->line;
		if (*too_long)
			return 0;
		if (!done)
			return loc_err(err, file, n->start_line, n->col, "unterminated heredoc");
	}
	return 0;
}

static struct df_node *new_node(struct df_ast *ast, size_t *cap)
{
	if (ast->n_nodes == *cap) {
		*cap = *cap ? *cap * 2 : 16;
		ast->nodes = kiln_xrealloc(ast->nodes, *cap * sizeof(*ast->nodes));
	}
	memset(&ast->nodes[ast->n_nodes], 0, sizeof(ast->nodes[0]));
	return &ast->nodes[ast->n_nodes++];
}

/* One pass over the text (already encoded when nul).  Returns -2 (no error
 * set) when a JSON string decodes to NUL outside NUL mode, with the node's
 * position in *nul_line, *nul_col. */
static int parse_text(struct df_ast *ast, const char *text, size_t len, bool nul, int *nul_line, int *nul_col,
		      kiln_error **err)
{
	struct scan sc = { .text = text, .len = len, .nul = nul };
	struct directives d = { .escape = '\\' };
	kiln_strv comments = KILN_STRV_INIT;
	kiln_buf line = KILN_BUF_INIT;
	size_t cap = 0;
	bool too_long = false;
	const char *p;
	size_t n;
	int ret = -1;

	while (scan_line(&sc, &p, &n, &too_long)) {
		bool first = sc.line == 1, end;
		int start = sc.line, col, r;
		struct df_node *node;
		bool empty_cont = false;
		int empty_cont_line = 0;

		if (first && n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
			p += 3, n -= 3;
		if (is_comment(p, n))
			add_comment(&comments, p, n);
		n = trim_newline(p, n);
		col = col_of(p, n);
		p = df_trim_left_space(p, &n);
		r = directive_line(&d, ast, p, n, err);
		if (r < 0) {
			relocate(err, ast->file, start, col);
			goto out;
		}
		if (r > 0 && comments.n > 0) {
			free(comments.v[comments.n - 1]);
			comments.v[--comments.n] = NULL;
		}
		if (is_comment(p, n))
			n = 0;
		end = !trim_continuation(p, &n, d.escape);
		if (end && n == 0)
			continue;
		kiln_buf_reset(&line);
		kiln_buf_add(&line, p, n);
		while (!end && scan_line(&sc, &p, &n, &too_long)) {
			n = trim_newline(p, n);
			if (directive_line(&d, ast, p, n, err) < 0) {
				relocate(err, ast->file, sc.line, 1);
				goto out;
			}
			if (is_comment(p, n))
				continue;
			size_t k = n;
			df_trim_left_space(p, &k);
			if (k == 0) {
				if (!empty_cont)
					empty_cont_line = sc.line;
				empty_cont = true;
				continue;
			}
			end = !trim_continuation(p, &n, d.escape);
			kiln_buf_add(&line, p, n);
		}
		if (too_long)
			break;
		if (empty_cont)
			kiln_strv_push_owned(&ast->warnings,
					     kiln_xasprintf("%s:%d:1: empty continuation line (empty continuation "
							    "lines will become errors in a future release)",
							    ast->file, empty_cont_line));
		node = new_node(ast, &cap);
		node->start_line = start;
		node->end_line = sc.line;
		node->col = col;
		{
			struct df_lineopts lo = { d.escape, nul };
			r = df_node_from_line(line.buf, line.len, &lo, node, err);
		}
		if (r == -2) {
			*nul_line = start;
			*nul_col = col;
			ret = -2;
			goto out;
		}
		if (r < 0) {
			relocate(err, ast->file, start, col);
			goto out;
		}
		node->comment = join_comments(&comments);
		kiln_strv_free(&comments);
		if (can_contain_heredoc(node) && strstr(node->original, "<<") != NULL) {
			if (read_heredocs(&sc, node, ast->file, &too_long, err) < 0)
				goto out;
			if (too_long)
				break;
		}
	}
	if (too_long) {
		loc_err(err, ast->file, sc.line + 1, 1, "dockerfile line greater than max allowed size of 65535");
		goto out;
	}
	if (ast->n_nodes == 0) {
		loc_err(err, ast->file, sc.line, 1, "file with no instructions");
		goto out;
	}
	ast->line_off = sc.line_off;
	ast->n_lines = sc.n_off;
	sc.line_off = NULL;
	ret = 0;
out:
	kiln_buf_free(&line);
	kiln_strv_free(&comments);
	free(sc.line_off);
	return ret;
}

static void ast_reset(struct df_ast *ast)
{
	for (size_t i = 0; i < ast->n_nodes; i++)
		df_node_clear(&ast->nodes[i]);
	free(ast->nodes);
	ast->nodes = NULL;
	ast->n_nodes = 0;
	free(ast->syntax);
	free(ast->check);
	ast->syntax = ast->check = NULL;
	ast->escape = '\\';
	kiln_strv_free(&ast->warnings);
}

/* BuildKit's parser.Parse.  A NUL byte, which BuildKit keeps like any other,
 * switches to NUL mode (struct df_ast.nul); so does a JSON "\u0000", found
 * by a first pass. */
int df_parse(const char *file, const char *text, size_t len, struct df_ast **out, kiln_error **err)
{
	struct df_ast *ast = kiln_xcalloc(1, sizeof(*ast));
	const char *z = memchr(text, '\0', len);
	int ret = -1, r;

	*out = NULL;
	ast->file = kiln_xstrdup(strcmp(file, "-") == 0 ? "<stdin>" : file);
	ast->escape = '\\';
	if (z) {
		const char *ls = text;
		ast->nul_line = 1;
		for (const char *q = text; q < z; q++)
			if (*q == '\n')
				ast->nul_line++, ls = q + 1;
		ast->nul_col = 1;
		for (const char *q = ls; q < z; q++)
			ast->nul_col += ((unsigned char)*q & 0xC0) != 0x80;
	}
	if (!z) {
		ast->text = kiln_xstrndup(text, len);
		ast->len = len;
		r = parse_text(ast, ast->text, len, false, &ast->nul_line, &ast->nul_col, err);
		if (r != -2) {
			if (r < 0)
				goto out;
			goto done;
		}
		ast_reset(ast);
		free(ast->text);
	}
	ast->nul = true;
	ast->text = df_nul_encode(text, len, &ast->len);
	if (parse_text(ast, ast->text, ast->len, true, &ast->nul_line, &ast->nul_col, err) < 0)
		goto out;
done:
	*out = ast;
	ast = NULL;
	ret = 0;
out:
	df_ast_free(ast);
	return ret;
}

int df_parse_file(const char *path, struct df_ast **out, kiln_error **err)
{
	char *data = NULL;
	size_t len = 0;
	int ret;

	*out = NULL;
	if (strcmp(path, "-") == 0)
		ret = kiln_read_file("/dev/stdin", &data, &len, 0, err);
	else
		ret = kiln_read_file(path, &data, &len, 0, err);
	if (ret < 0) {
		kiln_error_wrap(err, "read %s", strcmp(path, "-") == 0 ? "<stdin>" : path);
		return -1;
	}
	ret = df_parse(path, data, len, out, err);
	free(data);
	return ret;
}

/* The ONBUILD chain is freed in a loop: it can be thousands deep. */
void df_node_clear(struct df_node *n)
{
	struct df_node *sub = n->sub;

	free(n->name);
	free(n->original);
	kiln_strv_free(&n->flags);
	kiln_strv_free(&n->args);
	for (size_t i = 0; i < n->n_heredocs; i++) {
		free(n->heredocs[i].name);
		free(n->heredocs[i].content);
	}
	free(n->heredocs);
	free(n->comment);
	memset(n, 0, sizeof(*n));
	while (sub) {
		struct df_node *next = sub->sub;
		sub->sub = NULL;
		df_node_clear(sub);
		free(sub);
		sub = next;
	}
}

void df_ast_free(struct df_ast *ast)
{
	if (ast == NULL)
		return;
	for (size_t i = 0; i < ast->n_nodes; i++)
		df_node_clear(&ast->nodes[i]);
	free(ast->nodes);
	free(ast->file);
	free(ast->syntax);
	free(ast->check);
	kiln_strv_free(&ast->warnings);
	free(ast->text);
	free(ast->line_off);
	free(ast);
}
