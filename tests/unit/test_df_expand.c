/* test_df_expand.c — the word lexer against BuildKit's expectations: a
 * table of words and results in the style of its envVarTest / wordsTest
 * files (our own table), the ${v:?} messages, patterns and the backtick
 * escape. */
#include <stdlib.h>

#include "dockerfile-parser/dockerfile.h"
#include "tests/unit/test.h"

/* NULL value = unset; "NULL" is set but empty, as in BuildKit's tests. */
static const char *env_lookup(void *ctx, const char *name)
{
	const char *const *kv = ctx;

	for (size_t i = 0; kv[i]; i += 2)
		if (strcmp(kv[i], name) == 0)
			return kv[i + 1];
	return NULL;
}

static const char *const base_env[] = { "PWD", "/home", "SHELL", "bash", "KOREAN", "한국어", "NULL", "", NULL };

struct wcase {
	const char *in;
	const char *want; /* NULL: must fail */
};

static const struct wcase word_cases[] = {
	{ "hello", "hello" },
	{ "he'll'o", "hello" },
	{ "he'llo", NULL },
	{ "he\\'llo", "he'llo" },
	{ "he\\\\'llo", NULL },
	{ "abc\\tdef", "abctdef" },
	{ "\"abc\\tdef\"", "abc\\tdef" },
	{ "\"abc\\\\tdef\"", "abc\\tdef" },
	{ "'abc\\tdef'", "abc\\tdef" },
	{ "hello\\", "hello" },
	{ "hello\\\\", "hello\\" },
	{ "\"hello", NULL },
	{ "\"hello\\\"", NULL },
	{ "\"hel'lo\"", "hel'lo" },
	{ "'hello", NULL },
	{ "'hello\\'", "hello\\" },
	{ "'hello\\there'", "hello\\there" },
	{ "'hello\\\\there'", "hello\\\\there" },
	{ "\"''\"", "''" },
	{ "$.", "$." },
	{ "he$1x", "hex" },
	{ "he$.x", "he$.x" },
	{ "he$pwd.", "he." },
	{ "he$PWD", "he/home" },
	{ "he\\$PWD", "he$PWD" },
	{ "he\\\\$PWD", "he\\/home" },
	{ "\"he\\$PWD\"", "he$PWD" },
	{ "\"he\\\\$PWD\"", "he\\/home" },
	{ "\\${}", "${}" },
	{ "\\${}aaa", "${}aaa" },
	{ "he\\${}", "he${}" },
	{ "he\\${}xx", "he${}xx" },
	{ "${}", NULL },
	{ "${}aaa", NULL },
	{ "he${}", NULL },
	{ "he${}xx", NULL },
	{ "he${hi}", "he" },
	{ "he${hi}xx", "hexx" },
	{ "he${PWD}", "he/home" },
	{ "he${.}", NULL },
	{ "he${XXX:-000}xx", "he000xx" },
	{ "he${PWD:-000}xx", "he/homexx" },
	{ "he${XXX:-$PWD}xx", "he/homexx" },
	{ "he${XXX:-${PWD:-yyy}}xx", "he/homexx" },
	{ "he${XXX:-${YYY:-yyy}}xx", "heyyyxx" },
	{ "he${XXX:YYY}", NULL },
	{ "he${XXX?}", NULL },
	{ "he${XXX:?}", NULL },
	{ "he${PWD?}", "he/home" },
	{ "he${PWD:?}", "he/home" },
	{ "he${NULL?}", "he" },
	{ "he${NULL:?}", NULL },
	{ "he${XXX:+${PWD}}xx", "hexx" },
	{ "he${PWD:+${XXX}}xx", "hexx" },
	{ "he${PWD:+${SHELL}}xx", "hebashxx" },
	{ "he${XXX:+000}xx", "hexx" },
	{ "he${PWD:+000}xx", "he000xx" },
	{ "'he${XX}'", "he${XX}" },
	{ "\"he${PWD}\"", "he/home" },
	{ "\"he'$PWD'\"", "he'/home'" },
	{ "\"$PWD\"", "/home" },
	{ "'$PWD'", "$PWD" },
	{ "'\\$PWD'", "\\$PWD" },
	{ "'\"hello\"'", "\"hello\"" },
	{ "'he\\$PWD'", "he\\$PWD" },
	{ "he${PWD", NULL },
	{ "he${PWD:=000}xx", NULL },
	{ "he${PWD:+${PWD}:}xx", "he/home:xx" },
	{ "he${XXX:-\\$PWD:}xx", "he$PWD:xx" },
	{ "he${XXX:-\\${PWD}z}xx", "he${PWDz}xx" },
	{ "$KOREAN", "한국어" },
	{ "안녕$KOREAN", "안녕한국어" },
	{ "${{aaa}", NULL },
	{ "${aaa}}", "}" },
	{ "${aaa}}}", "}}" },
	{ "${aaa:-bbb}}", "bbb}" },
	{ "${aaa:-bbb}}}", "bbb}}" },
	{ "${aaa:-bbb", NULL },
	{ "${aaa:-bbb}", "bbb" },
	{ "${:}", NULL },
	{ "${:aaa}", NULL },
	{ "$", "$" },
	{ "a$", "a$" },
	{ "$ a", "$ a" },
	{ "${NULL-x}", "" },
	{ "${NULL:-x}", "x" },
	{ "${NULL+x}", "x" },
	{ "${NULL:+x}", "" },
	{ "${XXX-x}", "x" },
	{ "${XXX+x}", "" },
	/* spaces survive in a single word */
	{ "a  b", "a  b" },
	{ "  a b  ", "  a b  " },
	{ "\"a  b\"", "a  b" },
	/* patterns */
	{ "${PWD#/}", "home" },
	{ "${PWD#*o}", "me" },
	{ "${PWD##*o}", "me" },
	{ "${SHELL%?}", "bas" },
	{ "${SHELL%%a*}", "b" },
	{ "${SHELL%a*}", "b" },
	{ "${SHELL/a/A}", "bAsh" },
	{ "${SHELL//[/x}", "bash" },
	{ "${PWD/#/x}", "/home" },
	{ "${PWD#\\x}", NULL },
	{ "${KOREAN#?}", "국어" },
	{ "${KOREAN%?}", "한국" },
	{ "${XXX/a/b}", "" },
	{ "${PWD/", NULL },
	{ "${PWD/a", NULL },
	{ "${PWD/o/0", NULL },
	{ "$@x", "x" },
	{ "${#}", "" },
};

static void test_word_table(void)
{
	for (size_t i = 0; i < sizeof(word_cases) / sizeof(word_cases[0]); i++) {
		const struct wcase *c = &word_cases[i];
		kiln_error *err = NULL;
		char *out = NULL;
		int rc = df_expand_word(c->in, '\\', env_lookup, (void *)base_env, &out, &err);

		if (c->want == NULL) {
			if (rc == 0)
				printf("#   %s: want an error, got \"%s\"\n", c->in, out);
			CHECK(rc < 0 && err != NULL);
		} else {
			if (rc < 0)
				printf("#   %s: %s\n", c->in, kiln_error_message(err));
			CHECK_INT(rc, 0);
			if (rc == 0 && strcmp(out, c->want) != 0)
				printf("#   input: %s\n", c->in);
			if (rc == 0)
				CHECK_STR(out, c->want);
		}
		free(out);
		kiln_error_free(err);
	}
}

/* BuildKit's lex_test.go TestProcessWithMatches expectations. */
struct pcase {
	const char *in;
	const char *env[8];
	const char *want;
};

static const struct pcase pattern_cases[] = {
	{ "x ${FOO}", { "FOO", "y" }, "x y" },
	{ "${FOO-aaa} ${BAR-bbb} ${BAZ-ccc}", { "FOO", "xxx", "BAR", "" }, "xxx  ccc" },
	{ "${FOO:-aaa} ${BAR:-bbb} ${BAZ:-ccc}", { "FOO", "xxx", "BAR", "" }, "xxx bbb ccc" },
	{ "${FOO+aaa} ${BAR+bbb} ${BAZ+ccc}", { "FOO", "xxx", "BAR", "" }, "aaa bbb " },
	{ "${FOO:+aaa} ${BAR:+bbb} ${BAZ:+ccc}", { "FOO", "xxx", "BAR", "" }, "aaa  " },
	{ "${BAR?bbb}", { "BAR", "" }, "" },
	{ "${BAZ?ccc}", { "FOO", "x" }, NULL },
	{ "${BAR:?bbb}", { "BAR", "" }, NULL },
	{ "${FOO=aaa}", { "FOO", "xxx" }, NULL },
	{ "${FOO=:aaa}", { "FOO", "xxx" }, NULL },
	{ "${FOO=}", { NULL }, NULL },
	{ "${FOO#()[]{\\}^$.\\*\\?|\\\\}", { "FOO", "()[]{}^$.*?|\\x" }, "x" },
	{ "${FOO%%\\**}", { "FOO", "xx**" }, "xx" },
	{ "${FOO#*x*y}", { "FOO", "xxyy" }, "y" },
	{ "${FOO#*}", { "FOO", "xxyy" }, "xxyy" },
	{ "${FOO#$BAR}", { "FOO", "xxyy", "BAR", "x" }, "xyy" },
	{ "${FOO#$BAR}", { "FOO", "xxyy", "BAR", "" }, "xxyy" },
	{ "${FOO#}", { "FOO", "xxyy" }, "xxyy" },
	{ "${FOO##*x}", { "FOO", "xxyy" }, "yy" },
	{ "${FOO##}", { "FOO", "xxyy" }, "xxyy" },
	{ "${FOO#?\\?}", { "FOO", "???y" }, "?y" },
	{ "${ABC:-.}${FOO%x}${ABC:-.}", { "FOO", "xxyy" }, ".xxyy." },
	{ "${FOO%%\\**\\*}", { "FOO", "a***yy*" }, "a" },
	{ "${FOO%}", { "FOO", "xxyy" }, "xxyy" },
	{ "${FOO%%$BAR}", { "FOO", "xxyy", "BAR", "" }, "xxyy" },
	{ "${FOO/$NEEDLE/.} - ${FOO//$NEEDLE/.}", { "FOO", "/foo*/*/*.txt", "NEEDLE", "\\*/" },
	  "/foo.*/*.txt - /foo..*.txt" },
	{ "${FOO/$NEEDLE/} - ${FOO//$NEEDLE/}", { "FOO", "/tmp/tmp/bar.txt", "NEEDLE", "/tmp" }, "/tmp/bar.txt - /bar.txt" },
	{ "${FOO/$NEEDLE/$REPLACEMENT} - ${FOO//$NEEDLE/$REPLACEMENT}",
	  { "FOO", "/a/foo/b/c.txt", "NEEDLE", "/?/", "REPLACEMENT", "/" }, "/foo/b/c.txt - /foo/c.txt" },
	{ "${FOO/$NEEDLE/$REPLACEMENT}", { "FOO", "http://google.de", "NEEDLE", "http://", "REPLACEMENT", "https://" },
	  "https://google.de" },
	{ "${FOO//\\//\\/}", { "FOO", "/tmp/foo.txt" }, "\\/tmp\\/foo.txt" },
	{ "${FOO/$BAR/ww}", { "FOO", "xxyy", "BAR", "" }, "wwxxyy" },
	{ "${FOO//ww}", { "FOO", "xxyy" }, NULL },
	{ "${FOO//}", { "FOO", "xxyy" }, NULL },
	{ "${FOO///}", { "FOO", "xxyy" }, "xxyy" },
	{ "${FOO///}", { NULL }, "" },
	{ "something-${VERSION}.${TARGETOS}-${TARGETARCH}${TARGETVARIANT:+-${TARGETVARIANT}}.tar.gz",
	  { "VERSION", "v1.2.3", "TARGETOS", "linux", "TARGETARCH", "arm", "TARGETVARIANT", "v7" },
	  "something-v1.2.3.linux-arm-v7.tar.gz" },
	{ "something-${VERSION}.${TARGETOS}-${TARGETARCH}${TARGETVARIANT:+-${TARGETVARIANT}}.tar.gz",
	  { "VERSION", "v1.2.3", "TARGETOS", "linux", "TARGETARCH", "amd64", "TARGETVARIANT", "" },
	  "something-v1.2.3.linux-amd64.tar.gz" },
};

static void test_pattern_table(void)
{
	for (size_t i = 0; i < sizeof(pattern_cases) / sizeof(pattern_cases[0]); i++) {
		const struct pcase *c = &pattern_cases[i];
		const char *env[10] = { 0 };
		kiln_error *err = NULL;
		char *out = NULL;
		int rc;

		for (size_t k = 0; k < 8 && c->env[k]; k++)
			env[k] = c->env[k];
		rc = df_expand_word(c->in, '\\', env_lookup, env, &out, &err);
		if (c->want == NULL) {
			CHECK(rc < 0);
		} else {
			if (rc < 0)
				printf("#   %s: %s\n", c->in, kiln_error_message(err));
			else if (strcmp(out, c->want))
				printf("#   input: %s\n", c->in);
			CHECK_INT(rc, 0);
			if (rc == 0)
				CHECK_STR(out, c->want);
		}
		free(out);
		kiln_error_free(err);
	}
}

/* Word splitting (ProcessWords), wordsTest style: expected words joined by ",". */
static const struct wcase split_cases[] = {
	{ "hello", "hello" },
	{ "hello${hi}bye", "hellohibye" },
	{ "hello${space}bye", "helloabc,defbye" },
	{ "hello\"${space}\"bye", "helloabc  defbye" },
	{ "hello \"${space}\"bye", "hello,abc  defbye" },
	{ "hello${leading}def", "hello,ab,cdef" },
	{ "hello\"${leading}\" def", "hello  ab c,def" },
	{ "hello\"${leading}\"", "hello  ab c" },
	{ "hello${leading}", "hello,ab,c" },
	{ "hello${trailing}", "helloab,c" },
	{ "hello${trailing}d", "helloab,c,d" },
	{ "hello\"${trailing}\"d", "helloab c   d" },
	{ "hello${tab}", "helloab,c" },
	{ "hello\"${tab}\"", "helloab\tc" },
	{ "hello\"  ${tab}\"", "hello  ab\tc" },
	{ "hello${tab}  ", "helloab,c" },
	{ "  a   b  ", "a,b" },
	{ "a\\ b c", "a b,c" },
	{ "'a b' \"c d\"", "a b,c d" },
	{ "\"\" a", "a" },
	{ "80/tcp ${ports}", "80/tcp,8080,9090/udp" },
	{ "", "" },
	{ "'unterminated", NULL },
};

static void test_split_table(void)
{
	static const char *const env[] = { "hi", "hi", "space", "abc  def", "leading", "  ab c", "trailing",
					   "ab c   ", "tab", "ab\tc", "ports", " 8080  9090/udp ", NULL };

	for (size_t i = 0; i < sizeof(split_cases) / sizeof(split_cases[0]); i++) {
		const struct wcase *c = &split_cases[i];
		kiln_strv words = KILN_STRV_INIT;
		kiln_error *err = NULL;
		int rc = df_expand_words(c->in, '\\', env_lookup, (void *)env, &words, &err);

		if (c->want == NULL) {
			CHECK(rc < 0);
		} else {
			kiln_buf joined = KILN_BUF_INIT;
			CHECK_INT(rc, 0);
			for (size_t k = 0; k < words.n; k++)
				kiln_buf_addf(&joined, "%s%s", k ? "," : "", words.v[k]);
			if (strcmp(joined.buf, c->want))
				printf("#   input: %s\n", c->in);
			CHECK_STR(joined.buf, c->want);
			kiln_buf_free(&joined);
		}
		kiln_strv_free(&words);
		kiln_error_free(err);
	}
}

static void test_required_messages(void)
{
	static const char *const set[] = { "VAR", "plain", "ARG", "x", NULL };
	static const char *const empty[] = { "VAR", "", "ARG", "x", NULL };
	static const char *const unset[] = { "ARG", "x", NULL };
	kiln_error *err = NULL;
	char *out = NULL;

	CHECK_INT(df_expand_word("${VAR:?message here$ARG}", '\\', env_lookup, (void *)set, &out, &err), 0);
	CHECK_STR(out, "plain");
	free(out);
	out = NULL;
	CHECK(df_expand_word("${VAR:?message here$ARG}", '\\', env_lookup, (void *)empty, &out, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "VAR: message herex"));
	kiln_error_clear(&err);
	CHECK(df_expand_word("${VAR:?message here$ARG}", '\\', env_lookup, (void *)unset, &out, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "VAR: message herex"));
	kiln_error_clear(&err);
	CHECK_INT(df_expand_word("${VAR?message here$ARG}", '\\', env_lookup, (void *)empty, &out, &err), 0);
	CHECK_STR(out, "");
	free(out);
	out = NULL;
	CHECK(df_expand_word("${VAR?}", '\\', env_lookup, (void *)unset, &out, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "VAR: is not allowed to be unset"));
	kiln_error_clear(&err);
	CHECK(df_expand_word("${VAR:?}", '\\', env_lookup, (void *)empty, &out, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "VAR: is not allowed to be empty"));
	kiln_error_clear(&err);
	CHECK(df_expand_word("a${}b", '\\', env_lookup, (void *)empty, &out, &err) < 0);
	CHECK_STR(kiln_error_message(err), "failed to process \"a${}b\": syntax error: bad substitution");
	kiln_error_clear(&err);
	CHECK(df_expand_word("${x", '\\', env_lookup, (void *)empty, &out, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "missing '}'"));
	kiln_error_clear(&err);
	CHECK(df_expand_word("${x:x}", '\\', env_lookup, (void *)empty, &out, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "unsupported modifier (:x) in substitution"));
	kiln_error_clear(&err);
	CHECK(df_expand_word("${x#\\a}", '\\', env_lookup, (void *)empty, &out, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "invalid pattern"));
	kiln_error_clear(&err);
}

/* With "# escape=`" the backtick escapes and a backslash is ordinary
 * (Windows paths). */
static void test_backtick_escape(void)
{
	static const struct wcase cases[] = {
		{ "c:\\windows\\$PWD", "c:\\windows\\/home" },
		{ "`$PWD", "$PWD" },
		{ "\"`$PWD\"", "$PWD" },
		{ "\"a`\"b\"", "a\"b" },
		{ "\"a\\\"", "a\\" },
		{ "a` b", "a b" },
		{ "``", "`" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		kiln_error *err = NULL;
		char *out = NULL;
		CHECK_INT(df_expand_word(cases[i].in, '`', env_lookup, (void *)base_env, &out, &err), 0);
		CHECK_STR(out, cases[i].want);
		free(out);
		kiln_error_free(err);
	}
}

static void test_deep_nesting(void)
{
	kiln_buf w = KILN_BUF_INIT;
	kiln_error *err = NULL;
	char *out = NULL;

	for (int i = 0; i < 5000; i++)
		kiln_buf_adds(&w, "${a:-");
	CHECK(df_expand_word(w.buf, '\\', env_lookup, (void *)base_env, &out, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "nested"));
	kiln_error_free(err);
	kiln_buf_free(&w);
}

static void test_null_lookup(void)
{
	kiln_error *err = NULL;
	char *out = NULL;

	CHECK_INT(df_expand_word("a${X:-b}$Y", '\\', NULL, NULL, &out, &err), 0);
	CHECK_STR(out, "ab");
	free(out);
}

int main(void)
{
	RUN(test_word_table);
	RUN(test_pattern_table);
	RUN(test_split_table);
	RUN(test_required_messages);
	RUN(test_backtick_escape);
	RUN(test_deep_nesting);
	RUN(test_null_lookup);
	return test_done();
}
