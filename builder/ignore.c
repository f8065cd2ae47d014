/* ignore.c — .dockerignore and COPY --exclude patterns with the exact semantics
 * of moby's ignorefile.ReadAll + patternmatcher (clean like filepath.Clean, "**",
 * "!" exceptions, later lines win, parents match).  Patterns compile to a small
 * token program run as an NFA over code points, so matching is linear time. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "builder/builder.h"

enum tok_kind { T_LIT, T_STAR, T_ANY1, T_DSTAR_SLASH, T_DSTAR_END, T_CLASS };

struct range {
	uint32_t lo, hi;
};

struct tok {
	enum tok_kind kind;
	uint32_t ch;          /* T_LIT */
	bool negate;          /* T_CLASS */
	struct range *ranges; /* T_CLASS */
	size_t n_ranges;
};

/* patternmatcher's matchType: the fast paths are observable (a "**foo"
 * suffix match also matches "xfoo"), so they are kept as they are. */
enum match_type { M_EXACT, M_PREFIX, M_SUFFIX, M_REGEXP };

struct pattern {
	char *text;       /* cleaned, without "!" */
	bool exclusion;
	enum match_type type;
	struct tok *toks;
	size_t n_toks;
	size_t n_dirs;    /* components of text */
};

struct build_ignore {
	struct pattern *pats;
	size_t n;
	bool exclusions;
};

/* Decode one UTF-8 code point; invalid bytes decode as U+FFFD, one byte each,
 * as Go does. */
static uint32_t utf8_next(const char **sp)
{
	const unsigned char *s = (const unsigned char *)*sp;
	uint32_t c;
	int n;

	if (s[0] < 0x80) {
		*sp += 1;
		return s[0];
	}
	if ((s[0] & 0xE0) == 0xC0) {
		c = s[0] & 0x1F;
		n = 1;
	} else if ((s[0] & 0xF0) == 0xE0) {
		c = s[0] & 0x0F;
		n = 2;
	} else if ((s[0] & 0xF8) == 0xF0) {
		c = s[0] & 0x07;
		n = 3;
	} else {
		*sp += 1;
		return 0xFFFD;
	}
	for (int i = 1; i <= n; i++) {
		if ((s[i] & 0xC0) != 0x80) {
			*sp += 1;
			return 0xFFFD;
		}
		c = (c << 6) | (s[i] & 0x3F);
	}
	*sp += n + 1;
	return c;
}

/* One character of a class for filepath.Match validation and for the
 * class compiler: a literal or a backslash escape.  Returns false on the
 * cases Go's getEsc rejects. */
static bool class_char(const char **sp, uint32_t *c)
{
	const char *s = *sp;

	if (*s == '\0' || *s == '-' || *s == ']')
		return false;
	if (*s == '\\') {
		s++;
		if (*s == '\0')
			return false;
	}
	*c = utf8_next(&s);
	*sp = s;
	return true;
}

/* Parse "[...]" starting after '['; *sp is left after ']'.  Mirrors Go's
 * filepath.Match grammar, which is also what the regexp sees in practice. */
static bool parse_class(const char **sp, struct tok *t)
{
	const char *s = *sp;
	size_t cap = 0;

	t->kind = T_CLASS;
	if (*s == '^') {
		t->negate = true;
		s++;
	}
	for (;;) {
		struct range r;

		if (*s == ']' && t->n_ranges > 0) {
			s++;
			break;
		}
		if (!class_char(&s, &r.lo))
			return false;
		r.hi = r.lo;
		if (*s == '-') {
			s++;
			if (!class_char(&s, &r.hi))
				return false;
		}
		if (t->n_ranges == cap) {
			cap = cap ? 2 * cap : 4;
			t->ranges = kiln_xrealloc(t->ranges, cap * sizeof(*t->ranges));
		}
		t->ranges[t->n_ranges++] = r;
	}
	*sp = s;
	return true;
}

/* filepath.Match(p, ".") fails only for malformed patterns: an unclosed or
 * empty class, a bad range, or a trailing backslash. */
static bool pattern_valid(const char *p)
{
	while (*p) {
		if (*p == '\\') {
			if (p[1] == '\0')
				return false;
			p += 2;
		} else if (*p == '[') {
			struct tok t = { 0 };
			const char *s = p + 1;
			bool ok = parse_class(&s, &t);

			free(t.ranges);
			if (!ok)
				return false;
			p = s;
		} else {
			p++;
		}
	}
	return true;
}

static struct tok *push_tok(struct pattern *pt, size_t *cap, enum tok_kind kind)
{
	if (pt->n_toks == *cap) {
		*cap = *cap ? 2 * *cap : 8;
		pt->toks = kiln_xrealloc(pt->toks, *cap * sizeof(*pt->toks));
	}
	struct tok *t = &pt->toks[pt->n_toks++];
	memset(t, 0, sizeof(*t));
	t->kind = kind;
	return t;
}

static uint32_t escape_char(uint32_t c)
{
	/* Go's regexp gives these escapes a meaning; the rest are literal. */
	switch (c) {
	case 'a': return '\a';
	case 'f': return '\f';
	case 't': return '\t';
	case 'n': return '\n';
	case 'r': return '\r';
	case 'v': return '\v';
	default: return c;
	}
}

static void compile(struct pattern *pt)
{
	const char *s = pt->text;
	size_t cap = 0;
	enum match_type type = M_EXACT;

	for (int i = 0; *s; i++) {
		uint32_t ch = utf8_next(&s);

		if (ch == '*') {
			if (*s == '*') {
				s++;
				if (*s == '/')
					s++;
				if (*s == '\0') {
					if (type == M_EXACT) {
						type = M_PREFIX;
					} else {
						push_tok(pt, &cap, T_DSTAR_END);
						type = M_REGEXP;
					}
				} else {
					push_tok(pt, &cap, T_DSTAR_SLASH);
					type = M_REGEXP;
				}
				if (i == 0)
					type = M_SUFFIX;
			} else {
				push_tok(pt, &cap, T_STAR);
				type = M_REGEXP;
			}
		} else if (ch == '?') {
			push_tok(pt, &cap, T_ANY1);
			type = M_REGEXP;
		} else if (ch == '\\') {
			if (*s) {
				push_tok(pt, &cap, T_LIT)->ch = escape_char(utf8_next(&s));
				type = M_REGEXP;
			} else {
				push_tok(pt, &cap, T_LIT)->ch = '\\';
			}
		} else if (ch == '[') {
			struct tok *t = push_tok(pt, &cap, T_CLASS);
			if (!parse_class(&s, t)) {
				/* unreachable: validated first */
				t->kind = T_LIT;
				t->ch = '[';
			}
			type = M_REGEXP;
		} else {
			push_tok(pt, &cap, T_LIT)->ch = ch;
		}
	}
	pt->type = type;
}

static bool class_has(const struct tok *t, uint32_t c)
{
	bool in = false;

	for (size_t i = 0; i < t->n_ranges && !in; i++)
		in = c >= t->ranges[i].lo && c <= t->ranges[i].hi;
	return in != t->negate;
}

/* Each token i has two NFA states: 2i (entry) and 2i+1 (inside the double-star group). */
static void add_state(const struct pattern *pt, unsigned char *set, size_t st)
{
	if (set[st])
		return;
	set[st] = 1;
	if (st % 2)
		return;
	size_t i = st / 2;
	if (i >= pt->n_toks)
		return;
	switch (pt->toks[i].kind) {
	case T_STAR:
	case T_DSTAR_END:
		add_state(pt, set, st + 2);
		break;
	case T_DSTAR_SLASH:
		add_state(pt, set, st + 1);
		add_state(pt, set, st + 2);
		break;
	default:
		break;
	}
}

static bool regexp_match(const struct pattern *pt, const char *path)
{
	size_t nst = 2 * (pt->n_toks + 1);
	unsigned char *cur = kiln_xcalloc(nst, 1), *next = kiln_xcalloc(nst, 1);
	bool any = true, ok;

	add_state(pt, cur, 0);
	while (*path && any) {
		uint32_t c = utf8_next(&path);

		memset(next, 0, nst);
		any = false;
		for (size_t st = 0; st + 2 < nst; st++) {
			if (!cur[st])
				continue;
			const struct tok *t = &pt->toks[st / 2];
			if (st % 2) { /* inside the double-star group: '.' does not match newline in Go */
				if (c != '\n') {
					add_state(pt, next, st);
					if (c == '/')
						add_state(pt, next, st + 1);
				}
				any = true;
				continue;
			}
			switch (t->kind) {
			case T_LIT:
				if (c == t->ch)
					add_state(pt, next, st + 2);
				break;
			case T_STAR:
				if (c != '/')
					add_state(pt, next, st);
				break;
			case T_ANY1:
				if (c != '/')
					add_state(pt, next, st + 2);
				break;
			case T_DSTAR_END:
				if (c != '\n')
					add_state(pt, next, st);
				break;
			case T_CLASS:
				if (class_has(t, c))
					add_state(pt, next, st + 2);
				break;
			case T_DSTAR_SLASH:
				break;
			}
		}
		for (size_t st = 0; st < nst; st++)
			any |= next[st] != 0;
		unsigned char *tmp = cur;
		cur = next;
		next = tmp;
	}
	ok = *path == '\0' && cur[2 * pt->n_toks];
	free(cur);
	free(next);
	return ok;
}

static bool pattern_match(const struct pattern *pt, const char *path)
{
	size_t plen = strlen(path), tlen = strlen(pt->text);

	switch (pt->type) {
	case M_EXACT:
		return strcmp(path, pt->text) == 0;
	case M_PREFIX:
		return strncmp(path, pt->text, tlen - 2) == 0;
	case M_SUFFIX: {
		const char *suffix = pt->text + 2;
		size_t sl = tlen - 2;
		if (plen >= sl && strcmp(path + plen - sl, suffix) == 0)
			return true;
		return suffix[0] == '/' && strcmp(path, suffix + 1) == 0;
	}
	case M_REGEXP:
		return regexp_match(pt, path);
	}
	return false;
}

static size_t count_dirs(const char *s)
{
	size_t n = 1;

	for (; *s; s++)
		n += *s == '/';
	return n;
}

static void free_pattern(struct pattern *pt)
{
	for (size_t i = 0; i < pt->n_toks; i++)
		free(pt->toks[i].ranges);
	free(pt->toks);
	free(pt->text);
}

void build_ignore_free(build_ignore *ig)
{
	if (!ig)
		return;
	for (size_t i = 0; i < ig->n; i++)
		free_pattern(&ig->pats[i]);
	free(ig->pats);
	free(ig);
}

static char *trim_space(const char *s, size_t n)
{
	while (n > 0 && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n' || *s == '\v' || *s == '\f')) {
		s++;
		n--;
	}
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n' ||
			 s[n - 1] == '\v' || s[n - 1] == '\f'))
		n--;
	return kiln_xstrndup(s, n);
}

int build_ignore_new(const char *const *patterns, size_t n, const char *where, build_ignore **out,
		     kiln_error **err)
{
	build_ignore *ig = kiln_xcalloc(1, sizeof(*ig));
	int rc = -1;

	ig->pats = kiln_xcalloc(n ? n : 1, sizeof(*ig->pats));
	for (size_t i = 0; i < n; i++) {
		char *t = trim_space(patterns[i], strlen(patterns[i]));
		char *c;
		bool excl = false;

		if (*t == '\0') {
			free(t);
			continue;
		}
		c = kiln_path_clean(t);
		free(t);
		if (c[0] == '!') {
			if (c[1] == '\0') {
				free(c);
				kiln_err(err, KILN_E_INVALID, "%s: illegal exclusion pattern: \"!\"", where);
				goto out;
			}
			memmove(c, c + 1, strlen(c));
			excl = true;
			ig->exclusions = true;
		}
		if (!pattern_valid(c)) {
			kiln_err(err, KILN_E_INVALID, "%s: syntax error in pattern \"%s\"", where, c);
			free(c);
			goto out;
		}
		struct pattern *pt = &ig->pats[ig->n++];
		pt->text = c;
		pt->exclusion = excl;
		pt->n_dirs = count_dirs(c);
		compile(pt);
	}
	*out = ig;
	ig = NULL;
	rc = 0;
out:
	build_ignore_free(ig);
	return rc;
}

int build_ignore_parse(const char *text, size_t len, const char *where, build_ignore **out, kiln_error **err)
{
	kiln_strv lines = KILN_STRV_INIT;
	size_t pos = 0;
	int rc;

	if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
		pos = 3;
	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
		const char *line = text + pos;

		pos += n + (nl ? 1 : 0);
		/* bufio.ScanLines drops one trailing \r */
		if (n > 0 && line[n - 1] == '\r')
			n--;
		if (n > 0 && line[0] == '#')
			continue;
		char *pat = trim_space(line, n);
		if (*pat == '\0') {
			free(pat);
			continue;
		}
		bool invert = pat[0] == '!';
		if (invert) {
			char *rest = trim_space(pat + 1, strlen(pat + 1));
			free(pat);
			pat = rest;
		}
		if (*pat) {
			char *c = kiln_path_clean(pat);
			free(pat);
			pat = c;
			if (strlen(pat) > 1 && pat[0] == '/')
				memmove(pat, pat + 1, strlen(pat));
		}
		if (invert) {
			char *p2 = kiln_xasprintf("!%s", pat);
			free(pat);
			pat = p2;
		}
		kiln_strv_push_owned(&lines, pat);
	}
	rc = build_ignore_new((const char *const *)lines.v, lines.n, where, out, err);
	kiln_strv_free(&lines);
	return rc;
}

int build_ignore_load(const char *path, build_ignore **out, kiln_error **err)
{
	char *data = NULL;
	size_t len = 0;
	int rc;

	if (kiln_read_file(path, &data, &len, 16 << 20, err) < 0) {
		if ((*err)->errnum == ENOENT) {
			kiln_error_clear(err);
			return build_ignore_new(NULL, 0, path, out, err);
		}
		return -1;
	}
	rc = build_ignore_parse(data, len, path, out, err);
	free(data);
	return rc;
}

bool build_ignore_match(const build_ignore *ig, const char *path)
{
	bool matched = false;
	char *parent, *slash;

	if (!ig || ig->n == 0 || strcmp(path, ".") == 0)
		return false;
	parent = kiln_xstrdup(path);
	slash = strrchr(parent, '/');
	if (slash)
		*slash = '\0';
	for (size_t i = 0; i < ig->n; i++) {
		const struct pattern *pt = &ig->pats[i];
		bool m;

		if (pt->exclusion != matched)
			continue;
		m = pattern_match(pt, path);
		if (!m && slash) {
			/* any ancestor directory matching counts */
			for (char *q = parent;; q++) {
				if (*q == '/' || *q == '\0') {
					char save = *q;
					*q = '\0';
					m = pattern_match(pt, parent);
					*q = save;
					if (m || save == '\0')
						break;
				}
			}
		}
		if (m)
			matched = !pt->exclusion;
	}
	free(parent);
	return matched;
}

bool build_ignore_has_exclusions(const build_ignore *ig)
{
	return ig && ig->exclusions;
}

size_t build_ignore_count(const build_ignore *ig)
{
	return ig ? ig->n : 0;
}

bool build_glob_has_meta(const char *s)
{
	return strpbrk(s, "*?[\\") != NULL;
}

int build_glob_match(const char *pattern, const char *name)
{
	struct pattern pt = { 0 };
	const char *s = pattern;
	size_t cap = 0;
	int rc;

	if (!pattern_valid(pattern))
		return -1;
	while (*s) {
		uint32_t ch = utf8_next(&s);

		if (ch == '*')
			push_tok(&pt, &cap, T_STAR);
		else if (ch == '?')
			push_tok(&pt, &cap, T_ANY1);
		else if (ch == '\\')
			push_tok(&pt, &cap, T_LIT)->ch = utf8_next(&s);
		else if (ch == '[')
			parse_class(&s, push_tok(&pt, &cap, T_CLASS));
		else
			push_tok(&pt, &cap, T_LIT)->ch = ch;
	}
	pt.text = NULL;
	rc = regexp_match(&pt, name) ? 1 : 0;
	free_pattern(&pt);
	return rc;
}
