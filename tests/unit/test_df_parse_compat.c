/* test_df_parse_compat.c — corner cases where BuildKit's parser has a
 * particular behaviour (continuation indentation, JSON edge cases, line
 * numbers, directive rules, flag quoting, Go's Unicode case mapping, the
 * 64 KiB line limit), reproduced in Dockerfiles written for these tests. */
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/dockerfile.h"
#include "dockerfile-parser/internal.h"
#include "test.h"

static char *dump_of(const char *text, size_t len)
{
	struct df_ast *ast = NULL;
	kiln_error *err = NULL;
	char *out;

	if (df_parse("Dockerfile", text, len, &ast, &err) < 0) {
		out = kiln_xasprintf("ERR: %s", kiln_error_message(err));
		kiln_error_free(err);
		return out;
	}
	/* the syntax layer took it: what BuildKit's instructions.Parse refuses
	 * is refused by pass 2 ("PLAN: ") */
	if (dfp_check_ast(ast, &ast->warnings, &err) < 0) {
		out = kiln_xasprintf("PLAN: %s", kiln_error_message(err));
		kiln_error_free(err);
		df_ast_free(ast);
		return out;
	}
	out = df_ast_dump(ast, NULL);
	df_ast_free(ast);
	return out;
}

#define CHECK_DUMP(text, want)                             \
	do {                                               \
		char *got_ = dump_of(text, strlen(text));  \
		CHECK_STR(got_, want);                     \
		free(got_);                                \
	} while (0)

static void test_continuation_indent(void)
{
	/* leading blanks of continuation lines are kept, the escape removed */
	CHECK_DUMP("FROM debian:12\n"
		   "RUN printf one\\\n  two\\\n  three  \\\n  four\\\n  fi\\\nve\n"
		   "RUN printf a  \\\n  b\n"
		   "RUN printf c  \\\nd\n"
		   "RUN printf e \\\nf\\\ng\n"
		   "RUN printf h \\\n \\\n i \\\n\\\n j\\\n\\\nk\n",
		   "(from \"debian:12\")\n"
		   "(run \"printf one  two  three    four  five\")\n"
		   "(run \"printf a    b\")\n"
		   "(run \"printf c  d\")\n"
		   "(run \"printf e fg\")\n"
		   "(run \"printf h   i  jk\")\n");
}

static void test_add_copy_json(void)
{
	CHECK_DUMP("FROM\tdebian:12\n"
		   "ADD\t\t.\t/srv\n"
		   "COPY\t[ \"notes.txt\", \"/tmp\" ]\n"
		   "ADD\t\t[ \"my file\", \"/tmp/my file\" ]\n"
		   "COPY\t\t[\"a\", b]\n",
		   "(from \"debian:12\")\n"
		   "(add \".\" \"/srv\")\n"
		   "(copy \"notes.txt\" \"/tmp\")\n"
		   "(add \"my file\" \"/tmp/my file\")\n"
		   "(copy \"[\\\"a\\\",\" \"b]\")\n");
	/* JSON escapes, whitespace around the array, empty strings */
	CHECK_DUMP("FROM a\nCMD \t[ \"\" , \"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\" ]\t\n",
		   "(from \"a\")\n(cmd \"\" \"\\\" \\\\ / \\b \\f \\n \\r \\t\")\n");
	CHECK_DUMP("FROM a\nCMD [\"\xe2\x99\xa5\", \"\\u2603\"]\n", "(from \"a\")\n(cmd \"\xe2\x99\xa5\" \"\xe2\x98\x83\")\n");
	static const char *const not_strings[] = {
		"[\"a\",42,\"b\"]", "[\"a\",1.5,\"b\"]", "[\"a\",{},\"b\"]", "[\"a\",[\"c\"],\"b\"]",
		"[\"a\",true,\"b\"]", "[\"a\",null,\"b\"]",
	};
	for (size_t i = 0; i < sizeof(not_strings) / sizeof(not_strings[0]); i++) {
		char *df = kiln_xasprintf("FROM a\nENTRYPOINT %s\n", not_strings[i]);
		CHECK_DUMP(df, "ERR: Dockerfile:2:1: when using JSON array syntax, arrays must be comprised of strings only");
		free(df);
	}
	/* a lone surrogate escape is U+FFFD, a proper pair one rune (Go's decoder) */
	CHECK_DUMP("FROM a\nCMD [\"\\ud800\", \"\\udc00x\", \"\\ud83d\\ude00\", \"\\ud800\\u0041\", \"\\ud800\\ud800\\udc00\"]\n",
		   "(from \"a\")\n(cmd \"\xef\xbf\xbd\" \"\xef\xbf\xbdx\" \"\xf0\x9f\x98\x80\" \"\xef\xbf\xbd" "A\" \"\xef\xbf\xbd\xf0\x90\x80\x80\")\n");
	/* invalid UTF-8 inside a JSON string becomes U+FFFD, as Go decodes it */
	CHECK_DUMP("FROM a\nCMD [\"a\xff\"]\n", "(from \"a\")\n(cmd \"a\xef\xbf\xbd\")\n");
}

static void test_line_numbers(void)
{
	static const char df[] = "# escape=\\\n\n\n\nFROM a\n\n\n# note\n\n\nENV GOPATH \\\n/go\n\n\n\n# build\n"
				 "RUN a \\\n\t&& b \\\n\n\n    && c \\\n    && d \\\n\n\t&& e\n\n\n";
	struct df_ast *ast = NULL;
	kiln_error *err = NULL;

	CHECK(df_parse("Dockerfile", df, strlen(df), &ast, &err) == 0);
	kiln_error_free(err);
	if (!ast)
		return;
	CHECK_INT(ast->n_nodes, 3);
	CHECK_INT(ast->nodes[0].start_line, 5);
	CHECK_INT(ast->nodes[0].end_line, 5);
	CHECK_INT(ast->nodes[1].start_line, 11);
	CHECK_INT(ast->nodes[1].end_line, 12);
	CHECK_INT(ast->nodes[2].start_line, 17);
	CHECK_INT(ast->nodes[2].end_line, 24);
	CHECK_STR(ast->nodes[2].comment, "build");
	CHECK_STR(ast->nodes[1].original, "ENV GOPATH /go");
	CHECK_INT(ast->warnings.n, 1);
	df_ast_free(ast);
}

static void test_directive_rules(void)
{
	struct df_ast *ast = NULL;
	kiln_error *err = NULL;
	static const char df[] = "  #  SYNTAX  =  example.com/frontend:1 extra  \n#check=error=true\n#escape=`\nFROM a\n";

	CHECK(df_parse("Dockerfile", df, strlen(df), &ast, &err) == 0);
	kiln_error_free(err);
	if (ast) {
		CHECK_STR(ast->syntax, "example.com/frontend:1 extra");
		CHECK_STR(ast->check, "error=true");
		CHECK_INT(ast->escape, '`');
		CHECK(ast->nodes[0].comment == NULL);
		df_ast_free(ast);
	}
	/* an unknown directive ends the directives: escape= after it is a comment */
	CHECK_DUMP("# foo=bar\n# escape=`\nFROM a\nRUN x \\\n y\n", "(from \"a\")\n(run \"x  y\")\n");
	/* a key with a hyphen is not a directive either */
	CHECK_DUMP("# x-y=1\n# escape=`\nFROM a\nRUN x \\\n y\n", "(from \"a\")\n(run \"x  y\")\n");
	CHECK_DUMP("# check=a\n# CHECK=b\nFROM a\n", "ERR: Dockerfile:2:1: only one check parser directive can be used");
	CHECK_DUMP("# escape=\\\\\nFROM a\n", "ERR: Dockerfile:1:1: invalid escape token '\\\\' does not match ` or \\");
	/* directives end at the first instruction */
	CHECK_DUMP("FROM a\n# escape=`\nRUN x \\\n y\n", "(from \"a\")\n(run \"x  y\")\n");
}

static void test_flag_quirks(void)
{
	/* quotes and backslashes inside flags are removed; -- ends the flags */
	CHECK_DUMP("FROM a\nCOPY --chown=\"app user\" --exclude='*.md' --chmod=7\\55 a b\n",
		   "(from \"a\")\n(copy [\"--chown=app user\" \"--exclude=*.md\" \"--chmod=755\"] \"a\" \"b\")\n");
	CHECK_DUMP("FROM a\nRUN -- --not-a-flag\n", "(from \"a\")\n(run \"--not-a-flag\")\n");
	CHECK_DUMP("FROM a\nRUN --network=none -x\n", "(from \"a\")\n(run [\"--network=none\"] \"-x\")\n");
	/* a lone -- at the end: no flags, no arguments left */
	CHECK_DUMP("FROM a\nCOPY --\n",
		   "PLAN: Dockerfile:2:1: COPY requires at least two arguments, but only one was provided. Destination could not be determined.");
	/* flag bytes >= 0x80 are taken as Latin-1, as BuildKit's byte loop does */
	CHECK_DUMP("FROM a\nCOPY --chown=\xc3\xa9 a b\n", "(from \"a\")\n(copy [\"--chown=\xc3\x83\xc2\xa9\"] \"a\" \"b\")\n");
	/* flags are case-sensitive */
	CHECK_DUMP("FROM a\nCOPY --FROM=x a b\n", "PLAN: Dockerfile:2:6: Unknown flag: FROM");
	CHECK_DUMP("FROM a\nCOPY --link=FALSE --parents=True a b\n",
		   "(from \"a\")\n(copy [\"--link=FALSE\" \"--parents=True\"] \"a\" \"b\")\n");
	CHECK_DUMP("FROM a\nCOPY --link= a b\n", "PLAN: Dockerfile:2:6: Missing a value on flag: link");
	CHECK_DUMP("FROM a\nCMD --x=1 true\n", "PLAN: Dockerfile:2:5: Unknown flag: x");
}

static void test_unicode_case(void)
{
	/* Go's ToLower maps U+0130 to 'i' and the Kelvin sign to 'k' */
	CHECK_DUMP("FROM a\nWOR\xe2\x84\xaa" "D\xc4\xb0R /x\n", "(from \"a\")\n(workdir \"/x\")\n");
	CHECK_DUMP("FROM a a\xc5\xbf b\n", "(from \"a\" \"a\xc5\xbf\" \"b\")\n");
	CHECK_DUMP("FROM a AS \xe2\x84\xaa\n", "(from \"a\" \"AS\" \"\xe2\x84\xaa\")\n");
	/* ...but not in flags, whose bytes were re-read as Latin-1 first */
	CHECK_DUMP("FROM a\nRUN --mount=type=cache,target=/c,sharing=loc\xe2\x84\xaa" "ed true\n",
		   "PLAN: Dockerfile:2:5: unsupported sharing value \"loc\xc3\xa2\\u0084\xc2\xaa" "ed\"");
	/* words split on Unicode spaces; invalid UTF-8 in words becomes U+FFFD */
	CHECK_DUMP("FROM a\nARG x=\xc3\xa0\xc3\xb6\xc3\xbb y=1\xe2\x80\x83z=2 w=\xff\n",
		   "(from \"a\")\n(arg \"x=\xc3\xa0\xc3\xb6\xc3\xbb\" \"y=1\" \"z=2\" \"w=\xef\xbf\xbd\")\n");
	/* an unknown instruction word is dumped as strings.ToLower gives it:
	 * Unicode's simple lowercase mapping, an invalid byte as U+FFFD */
	{
		static const char t[] = "FROM a\nR\xc3\x9cN x\n\xce\xa3\xce\x91\xce\xa3 y\nFR\xffOM z\n\xc3\x85\xc4\x80\xc4\x81 w\n";
		struct df_ast *ast = NULL;
		kiln_error *err = NULL;
		CHECK(df_parse("Dockerfile", t, sizeof(t) - 1, &ast, &err) == 0);
		char *d = ast ? df_ast_dump(ast, NULL) : NULL;
		CHECK_STR(d, "(from \"a\")\n(r\xc3\xbcn \"\")\n(\xcf\x83\xce\xb1\xcf\x83 \"\")\n(fr\xef\xbf\xbdom \"\")\n"
			     "(\xc3\xa5\xc4\x81\xc4\x81 \"\")\n");
		free(d);
		kiln_error_free(err);
		df_ast_free(ast);
	}
}

static void test_long_lines(void)
{
	size_t n = 70000;
	char *big = malloc(n + 64);
	int len = snprintf(big, 64, "FROM a\nLABEL x=");

	memset(big + len, 'a', n);
	memcpy(big + len + n, "\n", 2);
	char *got = dump_of(big, strlen(big));
	CHECK_STR(got, "ERR: Dockerfile:2:1: dockerfile line greater than max allowed size of 65535");
	free(got);
	/* the longest accepted line: 65535 bytes and its newline */
	len = snprintf(big, 64, "FROM a\nLABEL x=");
	memset(big + len, 'b', 65535 - (size_t)(len - 7));
	memcpy(big + 7 + 65535, "\n", 2);
	got = dump_of(big, strlen(big));
	CHECK(strncmp(got, "(from \"a\")\n(label \"x\" \"bbb", strlen("(from \"a\")\n(label \"x\" \"bbb")) == 0);
	free(got);
	/* a long logical line made of many continuation lines is fine */
	kiln_buf b = KILN_BUF_INIT;
	kiln_buf_adds(&b, "FROM a\nRUN true");
	for (int i = 0; i < 20000; i++)
		kiln_buf_adds(&b, " \\\n && echo 0123456789");
	kiln_buf_adds(&b, "\n");
	got = dump_of(b.buf, b.len);
	CHECK(strncmp(got, "(from \"a\")\n(run \"true  && echo", strlen("(from \"a\")\n(run \"true  && echo")) == 0);
	free(got);
	kiln_buf_free(&b);
	free(big);
}

static void test_heredoc_words(void)
{
	struct df_ast *ast = NULL;
	kiln_error *err = NULL;
	/* <<\EOF and <<E"O"F: escapes do not count as quoting, quotes do */
	static const char df[] = "FROM a\nRUN <<\\EOF cat\nx\nEOF\nRUN <<E\"O\"F cat\ny\nEOF\n"
				 "RUN echo \"<<NOT\" '<<NOT' <<\"\" ${X:-<<NOT}\n"
				 "RUN cat <<EOF1 <<-EOF2 a<<NOT\nfirst\nEOF1\n\t\tsecond\n\tEOF2\n";

	CHECK(df_parse("Dockerfile", df, strlen(df), &ast, &err) == 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_free(err);
	if (!ast)
		return;
	CHECK_INT(ast->n_nodes, 5);
	CHECK_INT(ast->nodes[1].n_heredocs, 1);
	CHECK_STR(ast->nodes[1].heredocs[0].name, "EOF");
	CHECK(ast->nodes[1].heredocs[0].expand);
	CHECK_INT(ast->nodes[2].n_heredocs, 1);
	CHECK_STR(ast->nodes[2].heredocs[0].name, "EOF");
	CHECK(!ast->nodes[2].heredocs[0].expand);
	CHECK_INT(ast->nodes[3].n_heredocs, 0);
	CHECK_INT(ast->nodes[4].n_heredocs, 2);
	CHECK_STR(ast->nodes[4].heredocs[1].content, "\t\tsecond\n");
	CHECK_INT(ast->nodes[4].end_line, 13);
	df_ast_free(ast);
}

/* BuildKit's heredoc word rules: blanks after "<<", unset variables kept,
 * escaped quotes not quoting, quoted blanks, bodies read in order. */
static void test_heredoc_names(void)
{
	static const char df[] = "FROM a\n"
				 "RUN <<  EOF\nEOF\n"
				 "RUN <<  EOF  > out\nEOF\n"
				 "RUN << -EOF\n-EOF\n"
				 "RUN <<$EOF\n$EOF\n"
				 "RUN <<eo\\'f\nbody\neo'f\n"
				 "RUN <<'e'o\\'f\nbody\neo'f\n"
				 "RUN <<'one two'\nbody\none two\n"
				 "COPY <<X <<Y /dest\nY\nX\nX\nY\n"
				 "RUN <<<EOF cat\n";
	static const struct {
		const char *name, *content;
		bool expand;
	} want[] = {
		{ "EOF", "", true },         { "EOF", "", true },          { "-EOF", "", true },
		{ "$EOF", "", true },        { "eo'f", "body\n", true },   { "eo'f", "body\n", false },
		{ "one two", "body\n", false }, { "X", "Y\n", true },       { "Y", "X\n", true },
	};
	struct df_ast *ast = NULL;
	kiln_error *err = NULL;
	size_t k = 0;

	CHECK(df_parse("Dockerfile", df, strlen(df), &ast, &err) == 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_free(err);
	if (!ast)
		return;
	CHECK_INT(ast->n_nodes, 10);
	for (size_t i = 1; i < ast->n_nodes; i++) {
		for (size_t j = 0; j < ast->nodes[i].n_heredocs && k < 9; j++, k++) {
			CHECK_STR(ast->nodes[i].heredocs[j].name, want[k].name);
			CHECK_STR(ast->nodes[i].heredocs[j].content, want[k].content);
			CHECK(ast->nodes[i].heredocs[j].expand == want[k].expand);
		}
	}
	CHECK_INT(k, 9);
	CHECK_INT(ast->nodes[9].n_heredocs, 0); /* <<<EOF is not a heredoc */
	df_ast_free(ast);
}

int main(void)
{
	RUN(test_continuation_indent);
	RUN(test_add_copy_json);
	RUN(test_line_numbers);
	RUN(test_directive_rules);
	RUN(test_flag_quirks);
	RUN(test_unicode_case);
	RUN(test_long_lines);
	RUN(test_heredoc_words);
	RUN(test_heredoc_names);
	return test_done();
}
