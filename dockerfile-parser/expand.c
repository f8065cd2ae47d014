/* expand.c — Dockerfile word expansion, the behaviour of BuildKit's shell
 * lexer (frontend/dockerfile/shell/lex.go): quotes, the escape character,
 * $v and ${v...} with the modifiers - + ? # % / and word splitting.  The
 * glob patterns of # % / are matched in expand_glob.c. */
#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/internal.h"

#define LEX_EOF (-1)
/* Each ${...} recurses; a hostile word must not exhaust the stack. */
#define LEX_MAX_DEPTH 100

struct lex {
	const unsigned char *s;
	size_t len, pos;
	int esc;
	unsigned opts;
	bool raw;          /* keep escape characters in the output (# % / patterns) */
	int depth;
	df_lookup_fn lookup;
	void *ctx;
	char *msg;         /* first error, without the "failed to process" frame */
};

/* Word splitting state (BuildKit's wordsStruct): characters produced by a
 * $ substitution or unquoted text split on whitespace; quoted or escaped
 * ones never do. */
struct words {
	kiln_buf word;
	bool in_word;
	kiln_strv *out;
};

static void lex_error(struct lex *lx, const char *fmt, ...) KILN_PRINTF(2, 3);
static void lex_error(struct lex *lx, const char *fmt, ...)
{
	kiln_buf b = KILN_BUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	kiln_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	free(lx->msg);
	lx->msg = kiln_buf_detach(&b);
}

static int peek(const struct lex *lx)
{
	return lx->pos < lx->len ? lx->s[lx->pos] : LEX_EOF;
}

static int next(struct lex *lx)
{
	return lx->pos < lx->len ? lx->s[lx->pos++] : LEX_EOF;
}

static bool is_space(int c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static void words_raw(struct words *w, int c)
{
	if (!w)
		return;
	kiln_buf_addc(&w->word, (char)c);
	w->in_word = true;
}

static void words_char(struct words *w, int c)
{
	if (!w)
		return;
	if (is_space(c)) {
		if (w->in_word && w->word.len) {
			kiln_strv_push(w->out, w->word.buf);
			kiln_buf_reset(&w->word);
			w->in_word = false;
		}
	} else {
		words_raw(w, c);
	}
}

static void words_string(struct words *w, const kiln_buf *s, bool raw)
{
	if (!w)
		return;
	if (raw) {
		kiln_buf_add(&w->word, s->buf, s->len);
		w->in_word = true;
		return;
	}
	for (size_t i = 0; i < s->len; i++)
		words_char(w, (unsigned char)s->buf[i]);
}

static int stop_on(struct lex *lx, int stop, bool raw, kiln_buf *res, struct words *w);

static int single_quote(struct lex *lx, kiln_buf *res)
{
	next(lx);
	for (;;) {
		int ch = next(lx);
		if (ch == LEX_EOF) {
			lex_error(lx, "unexpected end of statement while looking for matching single-quote");
			return -1;
		}
		if (ch == '\'')
			return 0;
		kiln_buf_addc(res, (char)ch);
	}
}

static int dollar(struct lex *lx, kiln_buf *res);

/* Inside "...": only $ and the escape character are special, and the escape
 * only before " $ or itself (like sh's backslash). */
static int double_quote(struct lex *lx, kiln_buf *res)
{
	next(lx);
	for (;;) {
		int ch = peek(lx);
		if (ch == LEX_EOF) {
			lex_error(lx, "unexpected end of statement while looking for matching double-quote");
			return -1;
		}
		if (ch == '"') {
			next(lx);
			return 0;
		}
		if (ch == '$') {
			if (dollar(lx, res) < 0)
				return -1;
			continue;
		}
		ch = next(lx);
		if (ch == lx->esc) {
			int n = peek(lx);
			if (lx->raw)
				kiln_buf_addc(res, (char)ch);
			if (n == LEX_EOF)
				continue;
			if (n == '"' || n == '$' || n == lx->esc)
				ch = next(lx);
		}
		kiln_buf_addc(res, (char)ch);
	}
}

static bool is_special_param(int c)
{
	return c != LEX_EOF && strchr("@*#?-$!0", c) != NULL;
}

/* A variable name: [A-Za-z0-9_]+ (bytes >= 0x80 count as letters, so UTF-8
 * names work), a run of digits, or one special parameter. */
static char *process_name(struct lex *lx)
{
	kiln_buf name = KILN_BUF_INIT;

	while (peek(lx) != LEX_EOF) {
		int ch = peek(lx);
		if (name.len == 0 && isdigit(ch)) {
			while (peek(lx) != LEX_EOF && isdigit(peek(lx)))
				kiln_buf_addc(&name, (char)next(lx));
			break;
		}
		if (name.len == 0 && is_special_param(ch)) {
			kiln_buf_addc(&name, (char)next(lx));
			break;
		}
		if (!(isalnum(ch) || ch == '_' || ch >= 0x80))
			break;
		kiln_buf_addc(&name, (char)next(lx));
	}
	return kiln_buf_detach(&name);
}

static const char *getenv_lx(struct lex *lx, const char *name)
{
	return lx->lookup ? lx->lookup(lx->ctx, name) : NULL;
}

/* The part of ${name<op>word} after the operator: the word is itself
 * expanded, up to the closing brace. */
static int modifier(struct lex *lx, const char *name, int op, bool null_is_unset, const char *opstr, kiln_buf *res)
{
	kiln_buf word = KILN_BUF_INIT;
	const char *value;
	bool set;
	int rc = -1;

	if (stop_on(lx, '}', op == '#' || op == '%', &word, NULL) < 0) {
		if (peek(lx) == LEX_EOF)
			lex_error(lx, "syntax error: missing '}'");
		goto out;
	}
	value = getenv_lx(lx, name);
	set = value != NULL;
	if (!value)
		value = "";
	switch (op) {
	case '-':
		kiln_buf_adds(res, (!set || (null_is_unset && !*value)) ? word.buf : value);
		break;
	case '+':
		if (set && !(null_is_unset && !*value))
			kiln_buf_add(res, word.buf, word.len);
		break;
	case '?':
		if (!set) {
			lex_error(lx, "%s: %s", name, word.len ? word.buf : "is not allowed to be unset");
			goto out;
		}
		if (null_is_unset && !*value) {
			lex_error(lx, "%s: %s", name, word.len ? word.buf : "is not allowed to be empty");
			goto out;
		}
		kiln_buf_adds(res, value);
		break;
	case '#':
	case '%': {
		/* # and % take the shortest match, ## and %% the longest */
		const char *pat = word.buf;
		bool greedy = word.len && word.buf[0] == op;
		char *emsg = NULL;
		char *trimmed;

		if (greedy)
			pat++;
		trimmed = dfx_glob_trim(value, pat, op == '%', greedy, &emsg);
		if (!trimmed) {
			lex_error(lx, "invalid pattern (%s) in substitution: %s", pat, emsg);
			free(emsg);
			goto out;
		}
		kiln_buf_adds(res, trimmed);
		free(trimmed);
		break;
	}
	default:
		lex_error(lx, "unsupported modifier (%s) in substitution", opstr);
		goto out;
	}
	rc = 0;
out:
	kiln_buf_free(&word);
	return rc;
}

/* ${name/pattern/replacement} and ${name//pattern/replacement}. */
static int replace(struct lex *lx, const char *name, kiln_buf *res)
{
	kiln_buf pat = KILN_BUF_INIT, repl = KILN_BUF_INIT;
	bool all = false;
	const char *value;
	char *emsg = NULL, *out = NULL;
	int rc = -1;

	if (peek(lx) == '/') {
		next(lx);
		all = true;
	}
	if (stop_on(lx, '/', true, &pat, NULL) < 0) {
		if (peek(lx) == LEX_EOF)
			lex_error(lx, "syntax error: missing '/' in ${}");
		goto out;
	}
	if (stop_on(lx, '}', true, &repl, NULL) < 0) {
		if (peek(lx) == LEX_EOF)
			lex_error(lx, "syntax error: missing '}'");
		goto out;
	}
	value = getenv_lx(lx, name);
	out = dfx_glob_replace(value ? value : "", pat.buf, repl.buf, all, &emsg);
	if (!out) {
		lex_error(lx, "invalid pattern (%s) in substitution: %s", pat.buf, emsg);
		free(emsg);
		goto out;
	}
	kiln_buf_adds(res, out);
	rc = 0;
out:
	free(out);
	kiln_buf_free(&pat);
	kiln_buf_free(&repl);
	return rc;
}

static int dollar(struct lex *lx, kiln_buf *res)
{
	char *name = NULL;
	int ch, rc = -1;

	next(lx); /* '$' */
	if (peek(lx) != '{') {
		name = process_name(lx);
		if (!*name) {
			kiln_buf_addc(res, '$');
		} else {
			const char *v = getenv_lx(lx, name);
			kiln_buf_adds(res, v ? v : "");
		}
		rc = 0;
		goto out;
	}
	next(lx);
	switch (peek(lx)) {
	case LEX_EOF:
		lex_error(lx, "syntax error: missing '}'");
		goto out;
	case '{':
	case '}':
	case ':':
		lex_error(lx, "syntax error: bad substitution");
		goto out;
	}
	name = process_name(lx);
	ch = next(lx);
	switch (ch) {
	case LEX_EOF:
		lex_error(lx, "syntax error: missing '}'");
		goto out;
	case '}': {
		const char *v = getenv_lx(lx, name);
		kiln_buf_adds(res, v ? v : "");
		rc = 0;
		goto out;
	}
	case ':': {
		/* ':' makes an empty value count as unset; whatever follows is
		 * the operator (BuildKit falls through with any character) */
		int op = next(lx);
		char opstr[3] = { ':', op == LEX_EOF ? '\0' : (char)op, '\0' };
		rc = modifier(lx, name, op, true, opstr, res);
		goto out;
	}
	case '+':
	case '-':
	case '?':
	case '#':
	case '%': {
		char opstr[2] = { (char)ch, '\0' };
		rc = modifier(lx, name, ch, false, opstr, res);
		goto out;
	}
	case '/':
		rc = replace(lx, name, res);
		goto out;
	default:
		lex_error(lx, "unsupported modifier (%c) in substitution", ch);
		goto out;
	}
out:
	free(name);
	return rc;
}

/* Process up to `stop` (consumed) or the end of input (stop == LEX_EOF). */
static int stop_on(struct lex *lx, int stop, bool raw, kiln_buf *res, struct words *w)
{
	bool saved = lx->raw;
	int rc = -1;

	lx->raw = raw;
	if (++lx->depth > LEX_MAX_DEPTH) {
		lex_error(lx, "substitutions nested more than %d deep", LEX_MAX_DEPTH);
		goto out;
	}
	while (peek(lx) != LEX_EOF) {
		int ch = peek(lx);

		if (stop != LEX_EOF && ch == stop) {
			next(lx);
			rc = 0;
			goto out;
		}
		if (ch == '$' || (!(lx->opts & DFX_SKIP_QUOTES) && (ch == '\'' || ch == '"'))) {
			kiln_buf tmp = KILN_BUF_INIT;
			int r = ch == '$' ? dollar(lx, &tmp) : ch == '\'' ? single_quote(lx, &tmp) : double_quote(lx, &tmp);
			if (r < 0) {
				kiln_buf_free(&tmp);
				goto out;
			}
			kiln_buf_add(res, tmp.buf, tmp.len);
			words_string(w, &tmp, ch != '$');
			kiln_buf_free(&tmp);
			if (res->len > DFX_MAX_LEN) {
				lex_error(lx, "expansion longer than %d bytes", DFX_MAX_LEN);
				goto out;
			}
			continue;
		}
		next(lx);
		if (ch == lx->esc) {
			if (lx->raw) {
				words_raw(w, ch);
				kiln_buf_addc(res, (char)ch);
			}
			ch = next(lx);
			if (ch == LEX_EOF)
				break; /* a trailing escape is dropped */
			words_raw(w, ch);
		} else {
			words_char(w, ch);
		}
		kiln_buf_addc(res, (char)ch);
	}
	if (stop != LEX_EOF) {
		lex_error(lx, "unexpected end of statement while looking for matching %c", stop);
		goto out;
	}
	rc = 0;
out:
	lx->depth--;
	lx->raw = saved;
	return rc;
}

int dfx_process(const char *word, char escape, unsigned opts, df_lookup_fn lookup, void *ctx, char **out,
		kiln_strv *words, kiln_error **err)
{
	struct lex lx = { (const unsigned char *)word, strlen(word), 0, (unsigned char)escape, opts, false, 0,
			  lookup, ctx, NULL };
	struct words w = { KILN_BUF_INIT, false, words };
	kiln_buf res = KILN_BUF_INIT;
	int rc = -1;

	if (escape != '\\' && escape != '`') {
		kiln_err(err, KILN_E_INVALID, "invalid escape character '%c'", escape);
		goto out;
	}
	if (stop_on(&lx, LEX_EOF, false, &res, words ? &w : NULL) < 0) {
		kiln_err(err, KILN_E_INVALID, "failed to process \"%s\": %s", word, lx.msg);
		goto out;
	}
	if (words && w.word.len)
		kiln_strv_push(words, w.word.buf);
	if (out)
		*out = kiln_buf_detach(&res);
	rc = 0;
out:
	free(lx.msg);
	kiln_buf_free(&w.word);
	kiln_buf_free(&res);
	return rc;
}

int df_expand_word(const char *word, char escape, df_lookup_fn lookup, void *ctx, char **out, kiln_error **err)
{
	return dfx_process(word, escape, 0, lookup, ctx, out, NULL, err);
}

int df_expand_words(const char *word, char escape, df_lookup_fn lookup, void *ctx, kiln_strv *out, kiln_error **err)
{
	kiln_strv words = KILN_STRV_INIT;

	if (dfx_process(word, escape, 0, lookup, ctx, NULL, &words, err) < 0) {
		kiln_strv_free(&words);
		return -1;
	}
	for (size_t i = 0; i < words.n; i++)
		kiln_strv_push(out, words.v[i]);
	kiln_strv_free(&words);
	return 0;
}
