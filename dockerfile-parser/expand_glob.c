/* expand_glob.c — the shell patterns of ${v#p} ${v%p} ${v/p/r}: `*`, `?`
 * and backslash escapes as BuildKit's convertShellPatternToRegex accepts
 * them, matched rune by rune with a set-of-states walk (linear in the
 * pattern per character, so hostile patterns cannot make it explode). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/internal.h"

enum { T_LIT, T_ANY, T_STAR };

struct tok {
	int type;
	const char *lit; /* T_LIT: one rune */
	size_t len;
};

/* A subject string as runes (BuildKit works on runes: `?` is one rune). */
struct runes {
	const char **at;
	size_t *len;
	size_t n;
};

static size_t rune_len(const unsigned char *s, size_t avail)
{
	size_t want;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0)
		want = 2;
	else if ((s[0] & 0xf0) == 0xe0)
		want = 3;
	else if ((s[0] & 0xf8) == 0xf0)
		want = 4;
	else
		return 1;
	if (want > avail)
		return 1;
	for (size_t i = 1; i < want; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 1;
	return want;
}

static void runes_init(struct runes *r, const char *s, bool reverse)
{
	size_t len = strlen(s), n = 0;

	r->at = kiln_xcalloc(len + 1, sizeof(*r->at));
	r->len = kiln_xcalloc(len + 1, sizeof(*r->len));
	for (size_t i = 0; i < len; n++) {
		r->at[n] = s + i;
		r->len[n] = rune_len((const unsigned char *)s + i, len - i);
		i += r->len[n];
	}
	r->n = n;
	if (reverse) {
		for (size_t i = 0; i < n / 2; i++) {
			const char *a = r->at[i];
			size_t l = r->len[i];
			r->at[i] = r->at[n - 1 - i];
			r->len[i] = r->len[n - 1 - i];
			r->at[n - 1 - i] = a;
			r->len[n - 1 - i] = l;
		}
	}
}

static void runes_free(struct runes *r)
{
	free(r->at);
	free(r->len);
}

static int compile(const char *pat, struct tok **out, size_t *n_out, char **emsg)
{
	size_t len = strlen(pat), n = 0, i = 0;
	struct tok *t = kiln_xcalloc(len + 1, sizeof(*t));

	while (i < len) {
		char c = pat[i];
		if (c == '*' || c == '?') {
			t[n++].type = c == '*' ? T_STAR : T_ANY;
			i++;
		} else if (c == '\\') {
			/* "\}" and "\/" only protect the ${} syntax: the
			 * character that follows is an ordinary literal */
			if (i + 1 < len && (pat[i + 1] == '}' || pat[i + 1] == '/')) {
				i++;
				continue;
			}
			if (i + 1 >= len || !strchr("*?\\", pat[i + 1])) {
				*emsg = i + 1 >= len ? kiln_xstrdup("invalid escape at end of pattern")
						     : kiln_xasprintf("invalid escape '\\%c'", pat[i + 1]);
				free(t);
				return -1;
			}
			t[n++] = (struct tok){ T_LIT, pat + i + 1, 1 };
			i += 2;
		} else {
			size_t rl = rune_len((const unsigned char *)pat + i, len - i);
			t[n++] = (struct tok){ T_LIT, pat + i, rl };
			i += rl;
		}
	}
	*out = t;
	*n_out = n;
	return 0;
}

static void closure(const struct tok *t, size_t nt, bool *st)
{
	for (size_t p = 0; p < nt; p++)
		if (st[p] && t[p].type == T_STAR)
			st[p + 1] = true;
}

/* End (rune index) of the shortest or longest match of the pattern starting
 * at rune `start`, or -1.  Like Go's regexp `.`, wildcards skip newlines. */
static long match_at(const struct tok *t, size_t nt, const struct runes *r, size_t start, bool longest)
{
	bool *cur = kiln_xcalloc(nt + 1, 1), *nxt = kiln_xcalloc(nt + 1, 1);
	long best = -1;

	cur[0] = true;
	closure(t, nt, cur);
	if (cur[nt]) {
		best = (long)start;
		if (!longest)
			goto out;
	}
	for (size_t j = start; j < r->n; j++) {
		bool any = false, nl = r->len[j] == 1 && r->at[j][0] == '\n';
		bool *tmp;

		memset(nxt, 0, nt + 1);
		for (size_t p = 0; p < nt; p++) {
			if (!cur[p])
				continue;
			if (t[p].type == T_STAR && !nl)
				nxt[p] = any = true;
			else if (t[p].type == T_ANY && !nl)
				nxt[p + 1] = any = true;
			else if (t[p].type == T_LIT && t[p].len == r->len[j] && !memcmp(t[p].lit, r->at[j], t[p].len))
				nxt[p + 1] = any = true;
		}
		if (!any)
			break;
		closure(t, nt, nxt);
		tmp = cur;
		cur = nxt;
		nxt = tmp;
		if (cur[nt]) {
			best = (long)j + 1;
			if (!longest)
				break;
		}
	}
out:
	free(cur);
	free(nxt);
	return best;
}

static void reverse_tokens(struct tok *t, size_t n)
{
	for (size_t i = 0; i < n / 2; i++) {
		struct tok x = t[i];
		t[i] = t[n - 1 - i];
		t[n - 1 - i] = x;
	}
}

char *dfx_glob_trim(const char *value, const char *pattern, bool suffix, bool greedy, char **emsg)
{
	struct tok *t;
	struct runes r;
	size_t nt;
	long end;
	char *res;

	if (compile(pattern, &t, &nt, emsg) < 0)
		return NULL;
	/* a suffix match is a prefix match of both reversed */
	if (suffix)
		reverse_tokens(t, nt);
	runes_init(&r, value, suffix);
	end = match_at(t, nt, &r, 0, greedy);
	if (end < 0)
		res = kiln_xstrdup(value);
	else if (!suffix)
		res = kiln_xstrdup((size_t)end < r.n ? r.at[end] : "");
	else
		res = kiln_xstrndup(value, (size_t)end < r.n ? (size_t)(r.at[end] + r.len[end] - value) : 0);
	runes_free(&r);
	free(t);
	return res;
}

static size_t offset(const struct runes *r, const char *base, size_t i)
{
	return i < r->n ? (size_t)(r->at[i] - base) : strlen(base);
}

/* Leftmost-longest match starting at or after rune `from`: one pass where
 * each state remembers the earliest start that reaches it (an earlier start
 * always wins, so later ones are dropped once a match is known). */
static bool find_leftmost(const struct tok *t, size_t nt, const struct runes *r, size_t from, size_t *a, size_t *b)
{
	long *cur = kiln_xcalloc(nt + 1, sizeof(long)), *nxt = kiln_xcalloc(nt + 1, sizeof(long));
	long best_a = -1, best_b = -1;

	for (size_t p = 0; p <= nt; p++)
		cur[p] = -1;
	for (size_t j = from;; j++) {
		bool alive = false, nl;
		long *tmp;

		if (best_a < 0 && (cur[0] < 0 || cur[0] > (long)j))
			cur[0] = (long)j;
		for (size_t p = 0; p < nt; p++)
			if (cur[p] >= 0 && t[p].type == T_STAR && (cur[p + 1] < 0 || cur[p] < cur[p + 1]))
				cur[p + 1] = cur[p];
		if (cur[nt] >= 0 && (best_a < 0 || cur[nt] < best_a || (cur[nt] == best_a && (long)j > best_b))) {
			best_a = cur[nt];
			best_b = (long)j;
		}
		if (j >= r->n)
			break;
		nl = r->len[j] == 1 && r->at[j][0] == '\n';
		for (size_t p = 0; p <= nt; p++)
			nxt[p] = -1;
		for (size_t p = 0; p < nt; p++) {
			size_t to;
			if (cur[p] < 0 || (best_a >= 0 && cur[p] > best_a))
				continue;
			if (t[p].type == T_STAR && !nl)
				to = p;
			else if (t[p].type == T_ANY && !nl)
				to = p + 1;
			else if (t[p].type == T_LIT && t[p].len == r->len[j] && !memcmp(t[p].lit, r->at[j], t[p].len))
				to = p + 1;
			else
				continue;
			if (nxt[to] < 0 || cur[p] < nxt[to])
				nxt[to] = cur[p];
			alive = true;
		}
		tmp = cur;
		cur = nxt;
		nxt = tmp;
		if (!alive && best_a >= 0)
			break;
	}
	free(cur);
	free(nxt);
	if (best_a < 0)
		return false;
	*a = (size_t)best_a;
	*b = (size_t)best_b;
	return true;
}

char *dfx_glob_replace(const char *value, const char *pattern, const char *repl, bool all, char **emsg)
{
	struct tok *t;
	struct runes r;
	size_t nt, search = 0, last = 0, a, b;
	kiln_buf out = KILN_BUF_INIT;
	char *res = NULL;

	if (compile(pattern, &t, &nt, emsg) < 0)
		return NULL;
	runes_init(&r, value, false);
	/* Go's Regexp.ReplaceAllString loop: leftmost match from `search`, no
	 * replacement for an empty match right after the previous one */
	while (search <= r.n && find_leftmost(t, nt, &r, search, &a, &b)) {
		kiln_buf_add(&out, value + offset(&r, value, last), offset(&r, value, a) - offset(&r, value, last));
		if (b > last || a == 0)
			kiln_buf_adds(&out, repl);
		if (out.len > DFX_MAX_LEN) {
			*emsg = kiln_xasprintf("result longer than %d bytes", DFX_MAX_LEN);
			goto out;
		}
		last = b;
		if (!all)
			break;
		search = b > search ? b : search + 1;
	}
	kiln_buf_adds(&out, value + offset(&r, value, last));
	res = kiln_buf_detach(&out);
out:
	kiln_buf_free(&out);
	runes_free(&r);
	free(t);
	return res;
}
