/* parse_line.c — one logical line to one AST node: instruction word,
 * leading --flags, then the argument parser BuildKit dispatches to (JSON or
 * shell form, words, key=value triples, ONBUILD's trigger), mirroring
 * split_command.go and line_parsers.go, quirks included. */
#include <string.h>

#include "dockerfile-parser/internal.h"

/* BuildKit's reWhitespace / tokenWhitespace: [\t\v\f\r ]+ */
static bool re_ws(char c)
{
	return c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == ' ';
}

/* extractBuilderFlags works on bytes, converting each to a rune: bytes 0x85
 * and 0xA0 count as spaces, and bytes >= 0x80 are re-encoded as Latin-1.
 * In NUL mode a C0 80 / C0 81 pair is one byte of the original (NUL / C0). */
static bool byte_isspace(unsigned char c)
{
	return df_go_isspace(c);
}

static unsigned char byte_at(const char *s, size_t len, size_t pos, bool nul, size_t *width)
{
	unsigned char c = (unsigned char)s[pos];

	*width = 1;
	if (nul && c == 0xC0 && pos + 1 < len) {
		*width = 2;
		return s[pos + 1] == (char)0x80 ? 0 : 0xC0;
	}
	return c;
}

/* Leading --flags; returns the rest of the line after them. */
static const char *extract_flags(const char *line, size_t len, bool nul, kiln_strv *flags, size_t *rest_len)
{
	enum { IN_SPACES, IN_WORD, IN_QUOTE } phase = IN_SPACES;
	kiln_buf word = KILN_BUF_INIT;
	bool blank_ok = false;
	unsigned char quote = 0, ch = 0;
	const char *rest = line + len;
	size_t w = 1;

	for (size_t pos = 0; pos <= len; pos += w) {
		w = 1;
		if (pos != len)
			ch = byte_at(line, len, pos, nul, &w);
		if (phase == IN_SPACES) {
			if (pos == len)
				break;
			if (byte_isspace(ch))
				continue;
			if (ch != '-' || pos + 1 == len || line[pos + 1] != '-') {
				rest = line + pos;
				goto out;
			}
			phase = IN_WORD;
		}
		if (pos == len) {
			if (strcmp(word.buf, "--") != 0 && (blank_ok || word.len > 0))
				kiln_strv_push(flags, word.buf);
			break;
		}
		if (phase == IN_WORD) {
			if (byte_isspace(ch)) {
				phase = IN_SPACES;
				if (strcmp(word.buf, "--") == 0) {
					rest = line + pos;
					goto out;
				}
				if (blank_ok || word.len > 0)
					kiln_strv_push(flags, word.buf);
				kiln_buf_reset(&word);
				blank_ok = false;
				continue;
			}
			if (ch == '\'' || ch == '"') {
				quote = ch;
				blank_ok = true;
				phase = IN_QUOTE;
				continue;
			}
			if (ch == '\\') {
				if (pos + 1 == len)
					continue;
				pos++;
				ch = byte_at(line, len, pos, nul, &w);
			}
			df_rune_put(&word, ch);
			continue;
		}
		/* IN_QUOTE */
		if (ch == quote) {
			phase = IN_WORD;
			continue;
		}
		if (ch == '\\') {
			if (pos + 1 == len) {
				phase = IN_WORD;
				continue;
			}
			pos++;
			ch = byte_at(line, len, pos, nul, &w);
		}
		df_rune_put(&word, ch);
	}
out:
	kiln_buf_free(&word);
	*rest_len = (size_t)(line + len - rest);
	return rest;
}

/* parseWords: words split on unicode spaces, quotes and escapes kept (they
 * are removed later, by the expansion pass). */
static void parse_words(const char *rest, size_t len, const struct df_lineopts *lo, kiln_strv *words)
{
	enum { IN_SPACES, IN_WORD, IN_QUOTE } phase = IN_SPACES;
	kiln_buf word = KILN_BUF_INIT;
	bool blank_ok = false;
	int32_t quote = 0, ch = 0;
	int w = 0;

	for (size_t pos = 0; pos <= len; pos += (size_t)w) {
		if (pos != len)
			ch = df_rune_at(rest + pos, len - pos, lo->nul, &w);
		if (phase == IN_SPACES) {
			if (pos == len)
				break;
			if (df_go_isspace(ch))
				continue;
			phase = IN_WORD;
		}
		if (pos == len) {
			if (blank_ok || word.len > 0)
				kiln_strv_push(words, word.buf);
			break;
		}
		if (phase == IN_WORD) {
			if (df_go_isspace(ch)) {
				phase = IN_SPACES;
				if (blank_ok || word.len > 0)
					kiln_strv_push(words, word.buf);
				kiln_buf_reset(&word);
				blank_ok = false;
				continue;
			}
			if (ch == '\'' || ch == '"') {
				quote = ch;
				blank_ok = true;
				phase = IN_QUOTE;
			}
			if (ch == lo->escape) {
				if (pos + (size_t)w == len)
					continue;
				df_rune_put(&word, ch);
				pos += (size_t)w;
				ch = df_rune_at(rest + pos, len - pos, lo->nul, &w);
			}
			df_rune_put(&word, ch);
			continue;
		}
		/* IN_QUOTE */
		if (ch == quote)
			phase = IN_WORD;
		if (ch == lo->escape && quote != '\'') {
			if (pos + (size_t)w == len) {
				phase = IN_WORD;
				continue;
			}
			pos += (size_t)w;
			df_rune_put(&word, ch);
			ch = df_rune_at(rest + pos, len - pos, lo->nul, &w);
		}
		df_rune_put(&word, ch);
	}
	kiln_buf_free(&word);
}

/* parseStringsWhitespaceDelimited: regexp.Split(rest, -1) on [\t\v\f\r ]+ */
static void split_ws(const char *rest, size_t len, kiln_strv *out)
{
	size_t start = 0, i = 0;

	if (len == 0)
		return;
	for (;;) {
		while (i < len && !re_ws(rest[i]))
			i++;
		kiln_strv_push_owned(out, kiln_xstrndup(rest + start, i - start));
		if (i == len)
			break;
		while (i < len && re_ws(rest[i]))
			i++;
		start = i;
		if (i == len) {
			kiln_strv_push(out, "");
			break;
		}
	}
}

enum json_result { JSON_OK, JSON_NOT_JSON, JSON_NOT_STRINGS, JSON_HAS_NUL };

/* parseJSON: a JSON array of strings and nothing after it (BuildKit uses
 * json.Unmarshal, which rejects trailing text: the line is then shell form).
 * A string holding \u0000 is JSON_HAS_NUL outside NUL mode; in NUL mode it is
 * kept, encoded. */
static enum json_result parse_json(const char *rest, size_t len, bool nul, kiln_strv *out)
{
	enum json_result res = JSON_NOT_JSON;
	json_t *arr = NULL;
	json_error_t jerr;
	char *raw = NULL, *utf8, *clean;
	size_t i;
	json_t *v;

	rest = df_trim_left_space(rest, &len);
	if (len == 0 || rest[0] != '[')
		return JSON_NOT_JSON;
	if (nul) {
		/* a raw NUL is never valid JSON; C0 81 is the byte C0 */
		if (memmem(rest, len, "\xC0\x80", 2) != NULL)
			return JSON_NOT_JSON;
		raw = df_nul_decode(rest, &len);
		rest = raw;
	}
	utf8 = df_utf8_sanitize(rest, len, NULL);
	free(raw);
	clean = df_json_fix_surrogates(utf8, strlen(utf8));
	free(utf8);
	arr = json_loads(clean, JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &jerr);
	free(clean);
	if (arr == NULL || !json_is_array(arr))
		goto out;
	json_array_foreach(arr, i, v) {
		if (!json_is_string(v)) {
			res = JSON_NOT_STRINGS;
			goto out;
		}
		if (!nul && strlen(json_string_value(v)) != json_string_length(v)) {
			res = JSON_HAS_NUL;
			goto out;
		}
	}
	json_array_foreach(arr, i, v) {
		size_t n;
		/* jansson's strings are valid UTF-8: no C0 byte to encode */
		char *enc = df_nul_encode(json_string_value(v), json_string_length(v), &n);
		kiln_strv_push_owned(out, enc);
	}
	res = JSON_OK;
out:
	json_decref(arr);
	return res;
}

static const char not_strings_msg[] = "when using JSON array syntax, arrays must be comprised of strings only";

static int parse_maybe_json(struct df_node *n, const char *rest, size_t len, bool to_list, const struct df_lineopts *lo,
			    kiln_error **err)
{
	if (len == 0 && !to_list)
		return 0;
	switch (parse_json(rest, len, lo->nul, &n->args)) {
	case JSON_OK:
		n->json = true;
		return 0;
	case JSON_NOT_STRINGS:
		return kiln_err(err, KILN_E_INVALID, "%s", not_strings_msg);
	case JSON_HAS_NUL:
		return -2; /* BuildKit keeps it: parse again in NUL mode */
	case JSON_NOT_JSON:
		break;
	}
	if (to_list)
		split_ws(rest, len, &n->args);
	else
		kiln_strv_push_owned(&n->args, kiln_xstrndup(rest, len));
	return 0;
}

/* parseNameVal: ENV and LABEL as (key, value, sep) triples. */
static int parse_name_val(struct df_node *n, const char *rest, size_t len, const struct df_lineopts *lo,
			  const char *what, kiln_error **err)
{
	kiln_strv words = KILN_STRV_INIT;
	int ret = 0;

	parse_words(rest, len, lo, &words);
	if (words.n == 0)
		goto out;
	if (strchr(words.v[0], '=') == NULL) {
		size_t k = 0, v;
		while (k < len && !re_ws(rest[k]))
			k++;
		if (k == len) {
			ret = kiln_err(err, KILN_E_INVALID, "%s must have two arguments", what);
			goto out;
		}
		v = k;
		while (v < len && re_ws(rest[v]))
			v++;
		kiln_strv_push_owned(&n->args, kiln_xstrndup(rest, k));
		kiln_strv_push_owned(&n->args, kiln_xstrndup(rest + v, len - v));
		kiln_strv_push(&n->args, "");
		goto out;
	}
	for (size_t i = 0; i < words.n; i++) {
		char *eq = strchr(words.v[i], '=');
		if (eq == NULL) {
			kiln_buf q = KILN_BUF_INIT;
			df_go_quote(&q, words.v[i], strlen(words.v[i]));
			ret = kiln_err(err, KILN_E_INVALID,
				       "Syntax error - can't find = in %s. Must be of the form: name=value", q.buf);
			kiln_buf_free(&q);
			goto out;
		}
		kiln_strv_push_owned(&n->args, kiln_xstrndup(words.v[i], (size_t)(eq - words.v[i])));
		kiln_strv_push(&n->args, eq + 1);
		kiln_strv_push(&n->args, "=");
	}
out:
	kiln_strv_free(&words);
	return ret;
}

/* parseHealthConfig: the type word, then CMD's arguments like parseMaybeJSON. */
static int parse_health(struct df_node *n, const char *rest, size_t len, const struct df_lineopts *lo,
			kiln_error **err)
{
	size_t sep = 0, next;

	while (sep < len && !byte_isspace((unsigned char)rest[sep]))
		sep++;
	next = sep;
	while (next < len && byte_isspace((unsigned char)rest[next]))
		next++;
	if (sep == 0)
		return 0;
	kiln_strv_push_owned(&n->args, kiln_xstrndup(rest, sep));
	return parse_maybe_json(n, rest + next, len - next, false, lo, err);
}

/* strings.ToLower of the instruction word; in NUL mode each NUL (ASCII to
 * Go) is kept and the text between is lowered as the original bytes. */
static char *lower_dup(const char *s, size_t len, bool nul)
{
	kiln_buf b = KILN_BUF_INIT;
	const char *p = s, *end = s + len;

	while (p <= end) {
		const char *z = nul ? memmem(p, (size_t)(end - p), "\xC0\x80", 2) : NULL;
		size_t seg = (size_t)((z ? z : end) - p);
		char *raw = nul ? df_nul_decode(p, &seg) : kiln_xstrndup(p, seg);
		char *low = df_go_lower(raw);
		size_t n;
		char *enc = df_nul_encode(low, strlen(low), &n);

		kiln_buf_add(&b, enc, n);
		free(raw);
		free(low);
		free(enc);
		if (!z)
			break;
		kiln_buf_add(&b, "\xC0\x80", 2);
		p = z + 2;
	}
	return kiln_buf_detach(&b);
}

static int dispatch(struct df_node *n, const char *rest, size_t len, const struct df_lineopts *lo, kiln_error **err)
{
	const char *c = n->name;

	if (!strcmp(c, "add") || !strcmp(c, "copy") || !strcmp(c, "volume"))
		return parse_maybe_json(n, rest, len, true, lo, err);
	if (!strcmp(c, "run") || !strcmp(c, "cmd") || !strcmp(c, "entrypoint") || !strcmp(c, "shell"))
		return parse_maybe_json(n, rest, len, false, lo, err);
	if (!strcmp(c, "env"))
		return parse_name_val(n, rest, len, lo, "ENV", err);
	if (!strcmp(c, "label"))
		return parse_name_val(n, rest, len, lo, "LABEL", err);
	if (!strcmp(c, "arg")) {
		parse_words(rest, len, lo, &n->args);
		return 0;
	}
	if (!strcmp(c, "expose") || !strcmp(c, "from")) {
		split_ws(rest, len, &n->args);
		return 0;
	}
	if (!strcmp(c, "healthcheck"))
		return parse_health(n, rest, len, lo, err);
	if (!strcmp(c, "maintainer") || !strcmp(c, "stopsignal") || !strcmp(c, "user") || !strcmp(c, "workdir")) {
		if (len > 0)
			kiln_strv_push_owned(&n->args, kiln_xstrndup(rest, len));
		return 0;
	}
	/* Unknown instruction: BuildKit's parseIgnore keeps one empty argument;
	 * pass 2 reports it. */
	kiln_strv_push(&n->args, "");
	return 0;
}

/* ONBUILD's trigger is parsed as a line of its own (BuildKit's
 * parseSubCommand, which recurses); a loop here, since a 64 KiB line can
 * chain thousands of them.  Only the instruction and its first trigger keep
 * their text (`original`): copies for every level would take memory
 * quadratic in the line. */
int df_node_from_line(const char *line, size_t len, const struct df_lineopts *lo, struct df_node *n,
		      kiln_error **err)
{
	for (int depth = 0;; depth++) {
		const char *s, *rest = NULL;
		size_t slen = len, cmdlen = 0, rest_len = 0;

		n->original = depth < 2 ? kiln_xstrndup(line, len) : NULL;
		s = df_trim_space(line, &slen);
		while (cmdlen < slen && !re_ws(s[cmdlen]))
			cmdlen++;
		n->name = lower_dup(s, cmdlen, lo->nul);
		if (cmdlen < slen) {
			size_t after = cmdlen;
			while (after < slen && re_ws(s[after]))
				after++;
			rest = extract_flags(s + after, slen - after, lo->nul, &n->flags, &rest_len);
			rest = df_trim_space(rest, &rest_len);
		} else {
			rest = s + slen;
		}
		if (strcmp(n->name, "onbuild") != 0)
			return dispatch(n, rest, rest_len, lo, err);
		if (rest_len == 0)
			return 0;
		n->sub = kiln_xcalloc(1, sizeof(*n->sub));
		n->sub->start_line = n->start_line;
		n->sub->end_line = n->end_line;
		n->sub->col = n->col;
		n = n->sub;
		line = rest;
		len = rest_len;
	}
}
