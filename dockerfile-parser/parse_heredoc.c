/* parse_heredoc.c — heredoc words (<<EOF, <<-EOF, 3<<"EOF") on a line as
 * BuildKit finds them: words from its shell lexer with quotes, escapes and
 * unset variables kept, matched against ^(\d*)<<(-?)\s*([^<]*)$, the
 * delimiter lexed with and without quotes to learn whether it was quoted. */
#include <ctype.h>
#include <string.h>

#include "dockerfile-parser/internal.h"

#define LEX_MAX_DEPTH 200 /* nested ${...}: BuildKit recurses without bound */

struct lex {
	const char *s;
	size_t len, pos;
	bool raw_quotes, raw_escapes;
	int depth;
	const char *errmsg;
	bool nul; /* NUL-mode text (struct df_ast.nul) */
};

struct words {
	kiln_buf word;
	kiln_strv *out; /* NULL: words are not wanted */
	bool in_word;
	bool nul;
};

static int32_t peek(struct lex *lx)
{
	int w;

	if (lx->pos >= lx->len)
		return -1;
	return df_rune_at(lx->s + lx->pos, lx->len - lx->pos, lx->nul, &w);
}

static int32_t next(struct lex *lx)
{
	int w;
	int32_t r;

	if (lx->pos >= lx->len)
		return -1;
	r = df_rune_at(lx->s + lx->pos, lx->len - lx->pos, lx->nul, &w);
	lx->pos += (size_t)w;
	return r;
}

static void w_raw_char(struct words *w, int32_t ch)
{
	df_rune_put(&w->word, ch);
	w->in_word = true;
}

static void w_char(struct words *w, int32_t ch)
{
	if (df_go_isspace(ch) && w->in_word) {
		if (w->word.len != 0) {
			if (w->out)
				kiln_strv_push(w->out, w->word.buf);
			kiln_buf_reset(&w->word);
			w->in_word = false;
		}
	} else if (!df_go_isspace(ch)) {
		w_raw_char(w, ch);
	}
}

static void w_string(struct words *w, const char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		int n;
		int32_t r = df_rune_at(s + i, len - i, w->nul, &n);
		w_char(w, r);
		i += (size_t)n;
	}
}

static void w_raw_string(struct words *w, const char *s, size_t len)
{
	kiln_buf_add(&w->word, s, len);
	w->in_word = true;
}

static int fail(struct lex *lx, const char *msg)
{
	lx->errmsg = msg;
	return -1;
}

static int process_stop_on(struct lex *lx, int32_t stop, kiln_buf *result, kiln_strv *words);

static int single_quote(struct lex *lx, kiln_buf *out)
{
	int32_t ch = next(lx);

	if (lx->raw_quotes)
		df_rune_put(out, ch);
	for (;;) {
		ch = next(lx);
		if (ch < 0)
			return fail(lx, "unexpected end of statement while looking for matching single-quote");
		if (ch == '\'') {
			if (lx->raw_quotes)
				df_rune_put(out, ch);
			return 0;
		}
		df_rune_put(out, ch);
	}
}

static int dollar(struct lex *lx, kiln_buf *out);

static int double_quote(struct lex *lx, kiln_buf *out)
{
	int32_t ch = next(lx);

	if (lx->raw_quotes)
		df_rune_put(out, ch);
	for (;;) {
		ch = peek(lx);
		if (ch < 0)
			return fail(lx, "unexpected end of statement while looking for matching double-quote");
		if (ch == '"') {
			next(lx);
			if (lx->raw_quotes)
				df_rune_put(out, ch);
			return 0;
		}
		if (ch == '$') {
			if (dollar(lx, out) < 0)
				return -1;
			continue;
		}
		ch = next(lx);
		if (ch == '\\') {
			int32_t p;
			if (lx->raw_escapes)
				df_rune_put(out, ch);
			p = peek(lx);
			if (p < 0)
				continue;
			if (p == '"' || p == '$' || p == '\\')
				ch = next(lx);
		}
		df_rune_put(out, ch);
	}
}

static bool is_letter_or_digit(int32_t r)
{
	if (r < 0x80)
		return isalnum(r);
	return r != 0xFFFD && !df_go_isspace(r);
}

static void process_name(struct lex *lx, kiln_buf *name)
{
	int32_t ch;

	while ((ch = peek(lx)) >= 0) {
		if (name->len == 0 && ch >= '0' && ch <= '9') {
			while ((ch = peek(lx)) >= '0' && ch <= '9')
				df_rune_put(name, next(lx));
			return;
		}
		if (name->len == 0 && ch > 0 && ch < 0x80 && strchr("@*#?-$!0", (int)ch) != NULL) {
			df_rune_put(name, next(lx));
			return;
		}
		if (!is_letter_or_digit(ch) && ch != '_')
			return;
		df_rune_put(name, next(lx));
	}
}

/* ${name<op>word}: with every variable unset and SkipUnsetEnv, BuildKit
 * gives back the expression as written, its word lexed. */
static int curly(struct lex *lx, kiln_buf *out)
{
	kiln_buf name = KILN_BUF_INIT, word = KILN_BUF_INIT, word2 = KILN_BUF_INIT;
	int32_t ch = peek(lx), op2 = 0;
	int ret = -1;

	if (ch < 0) {
		fail(lx, "syntax error: missing '}'");
		goto out;
	}
	if (ch == '{' || ch == '}' || ch == ':') {
		fail(lx, "syntax error: bad substitution");
		goto out;
	}
	process_name(lx, &name);
	ch = next(lx);
	switch (ch) {
	case '}':
		kiln_buf_addf(out, "${%s}", name.buf);
		ret = 0;
		goto out;
	case ':':
		op2 = next(lx);
		if (op2 != '+' && op2 != '-' && op2 != '?') {
			fail(lx, "unsupported modifier in substitution");
			goto out;
		}
		break;
	case '?':
		break;
	case '%':
	case '#':
		if (peek(lx) == ch)
			op2 = next(lx);
		break;
	case '/':
		if (peek(lx) == '/')
			op2 = next(lx);
		if (process_stop_on(lx, '/', &word2, NULL) < 0)
			goto out;
		break;
	default:
		fail(lx, "missing ':' in substitution");
		goto out;
	}
	if (process_stop_on(lx, '}', &word, NULL) < 0) {
		if (peek(lx) < 0)
			fail(lx, "syntax error: missing '}'");
		goto out;
	}
	kiln_buf_addf(out, "${%s", name.buf);
	df_rune_put(out, ch);
	if (op2)
		df_rune_put(out, op2);
	if (ch == '/') {
		kiln_buf_add(out, word2.buf, word2.len);
		kiln_buf_addc(out, '/');
	}
	kiln_buf_add(out, word.buf, word.len);
	kiln_buf_addc(out, '}');
	ret = 0;
out:
	kiln_buf_free(&name);
	kiln_buf_free(&word);
	kiln_buf_free(&word2);
	return ret;
}

static int dollar(struct lex *lx, kiln_buf *out)
{
	kiln_buf name = KILN_BUF_INIT;
	int ret = 0;

	next(lx);
	if (peek(lx) == '{') {
		next(lx);
		if (++lx->depth > LEX_MAX_DEPTH)
			return fail(lx, "substitutions nested too deeply");
		ret = curly(lx, out);
		lx->depth--;
		return ret;
	}
	process_name(lx, &name);
	kiln_buf_addc(out, '$');
	kiln_buf_add(out, name.buf, name.len);
	kiln_buf_free(&name);
	return ret;
}

/* An unquoted "<<" keeps the blanks right after it, so "<< EOF" stays one
 * word (BuildKit's processPossibleHeredoc). */
static void possible_heredoc(struct lex *lx, kiln_buf *out)
{
	int32_t ch;

	next(lx);
	if (peek(lx) != '<') {
		kiln_buf_addc(out, '<');
		return;
	}
	next(lx);
	kiln_buf_adds(out, "<<");
	while ((ch = peek(lx)) == ' ' || ch == '\t' || ch == '\r' || ch == '\n')
		kiln_buf_addc(out, (char)next(lx));
}

static int process_stop_on(struct lex *lx, int32_t stop, kiln_buf *result, kiln_strv *words)
{
	struct words w = { KILN_BUF_INIT, words, false, lx->nul };
	kiln_buf tmp = KILN_BUF_INIT;
	int ret = -1;
	int32_t ch;

	while ((ch = peek(lx)) >= 0) {
		if (stop >= 0 && ch == stop) {
			next(lx);
			ret = 0;
			goto out;
		}
		if (ch == '<') {
			kiln_buf_reset(&tmp);
			possible_heredoc(lx, &tmp);
			kiln_buf_add(result, tmp.buf, tmp.len);
			w_raw_string(&w, tmp.buf, tmp.len);
			continue;
		}
		if (ch == '\'' || ch == '"' || ch == '$') {
			kiln_buf_reset(&tmp);
			if ((ch == '\'' ? single_quote(lx, &tmp) : ch == '"' ? double_quote(lx, &tmp) : dollar(lx, &tmp)) < 0)
				goto out;
			kiln_buf_add(result, tmp.buf, tmp.len);
			if (ch == '$')
				w_string(&w, tmp.buf, tmp.len);
			else
				w_raw_string(&w, tmp.buf, tmp.len);
			continue;
		}
		ch = next(lx);
		if (ch == '\\') {
			if (lx->raw_escapes) {
				w_raw_char(&w, ch);
				df_rune_put(result, ch);
			}
			ch = next(lx);
			if (ch < 0)
				break;
			w_raw_char(&w, ch);
		} else {
			w_char(&w, ch);
		}
		df_rune_put(result, ch);
	}
	if (stop >= 0) {
		fail(lx, "unexpected end of statement while looking for matching closing character");
		goto out;
	}
	ret = 0;
out:
	if (ret == 0 && w.word.len > 0 && words)
		kiln_strv_push(words, w.word.buf);
	kiln_buf_free(&w.word);
	kiln_buf_free(&tmp);
	return ret;
}

/* ProcessWords with an empty environment and SkipUnsetEnv. */
static int lex_words(const char *s, size_t len, bool raw_quotes, bool raw_escapes, bool nul, kiln_strv *out,
		     const char **errmsg)
{
	struct lex lx = { s, len, 0, raw_quotes, raw_escapes, 0, NULL, nul };
	kiln_buf result = KILN_BUF_INIT;
	int ret = process_stop_on(&lx, -1, &result, out);

	kiln_buf_free(&result);
	if (ret < 0)
		*errmsg = lx.errmsg;
	return ret;
}

static size_t count_quotes(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s == '\'' || *s == '"';
	return n;
}

/* BuildKit's ParseHeredoc on one word: 1 = a heredoc, 0 = not, -1 = error. */
static int heredoc_from_word(const char *word, bool nul, struct df_heredoc *h, kiln_error **err)
{
	kiln_strv words = KILN_STRV_INIT, raw = KILN_STRV_INIT;
	const char *p = word, *rest, *msg = NULL;
	unsigned long long fd = 0;
	bool fd_overflow = false;
	int ret = 0;

	while (*p >= '0' && *p <= '9') {
		if (fd > (~0ULL - 9) / 10)
			fd_overflow = true;
		fd = fd * 10 + (unsigned)(*p - '0');
		p++;
	}
	if (p[0] != '<' || p[1] != '<')
		return 0;
	p += 2;
	h->chomp = *p == '-';
	if (h->chomp)
		p++;
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\f' || *p == '\r')
		p++;
	rest = p;
	if (*rest == '\0' || strchr(rest, '<') != NULL)
		return 0;
	if (lex_words(rest, strlen(rest), false, false, nul, &words, &msg) < 0)
		goto lexfail;
	if (words.n != 1)
		goto out;
	if (lex_words(rest, strlen(rest), true, false, nul, &raw, &msg) < 0)
		goto lexfail;
	if (raw.n != words.n) {
		ret = kiln_err(err, KILN_E_INVALID, "internal lexing of heredoc produced inconsistent results: %s", rest);
		goto out;
	}
	h->name = kiln_xstrdup(words.v[0]);
	h->expand = count_quotes(words.v[0]) == count_quotes(raw.v[0]);
	/* strconv.ParseUint errors leave 0, which BuildKit keeps */
	h->fd = fd_overflow || fd > 0x7fffffff ? 0 : (int)fd;
	ret = 1;
	goto out;
lexfail:
	{
		kiln_buf q = KILN_BUF_INIT;
		df_go_quote(&q, rest, strlen(rest));
		ret = kiln_err(err, KILN_E_INVALID, "failed to process %s: %s", q.buf, msg);
		kiln_buf_free(&q);
	}
out:
	kiln_strv_free(&words);
	kiln_strv_free(&raw);
	return ret;
}

int df_heredocs_from_line(const char *line, bool nul, struct df_heredoc **out, size_t *n_out, kiln_error **err)
{
	kiln_strv words = KILN_STRV_INIT;
	const char *msg = NULL;
	int ret = 0;

	*out = NULL;
	*n_out = 0;
	/* BuildKit ignores a lexing error here: such a line has no heredocs */
	if (lex_words(line, strlen(line), true, true, nul, &words, &msg) < 0)
		goto out;
	for (size_t i = 0; i < words.n; i++) {
		struct df_heredoc h = { 0 };
		int r = heredoc_from_word(words.v[i], nul, &h, err);
		if (r < 0) {
			ret = -1;
			goto out;
		}
		if (r == 0)
			continue;
		*out = kiln_xrealloc(*out, (*n_out + 1) * sizeof(**out));
		(*out)[(*n_out)++] = h;
	}
	ret = (int)*n_out;
out:
	if (ret < 0) {
		for (size_t i = 0; i < *n_out; i++)
			free((*out)[i].name);
		free(*out);
		*out = NULL;
		*n_out = 0;
	}
	kiln_strv_free(&words);
	return ret;
}

bool df_is_heredoc_word(const char *word)
{
	struct df_heredoc h = { 0 };
	kiln_error *err = NULL;
	int r = heredoc_from_word(word, false, &h, &err);

	/* MustParseHeredoc: an error counts as "not a heredoc" */
	kiln_error_free(err);
	free(h.name);
	return r == 1;
}
