/* test_df_parse.c — the syntax pass: directives, comments, continuations,
 * JSON vs shell form, words and key=value pairs, flags, ONBUILD, and the
 * dump format, each checked against what BuildKit's parser produces. */
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/dockerfile.h"
#include "dockerfile-parser/internal.h"
#include "test.h"

/* The dump of text, or "ERR: message" when it does not parse. */
static char *dump_of(const char *text)
{
	struct df_ast *ast = NULL;
	kiln_error *err = NULL;
	char *out;

	if (df_parse("Dockerfile", text, strlen(text), &ast, &err) < 0) {
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

#define CHECK_DUMP(text, want)                 \
	do {                                   \
		char *got_ = dump_of(text);    \
		CHECK_STR(got_, want);         \
		free(got_);                    \
	} while (0)

static struct df_ast *parse_ok(const char *text)
{
	struct df_ast *ast = NULL;
	kiln_error *err = NULL;

	if (df_parse("Dockerfile", text, strlen(text), &ast, &err) < 0) {
		printf("#   unexpected error: %s\n", kiln_error_message(err));
		kiln_error_free(err);
		return NULL;
	}
	return ast;
}

static void test_basic_instructions(void)
{
	CHECK_DUMP("FROM busybox\n", "(from \"busybox\")\n");
	CHECK_DUMP("from busybox AS Build\nrun echo hi\n", "(from \"busybox\" \"AS\" \"Build\")\n(run \"echo hi\")\n");
	CHECK_DUMP("FROM a\nCOPY --from=build a /b\n", "(from \"a\")\n(copy [\"--from=build\"] \"a\" \"/b\")\n");
	CHECK_DUMP("FROM a\nMAINTAINER Jane Doe <j@example.com>\n",
		   "(from \"a\")\n(maintainer \"Jane Doe <j@example.com>\")\n");
	CHECK_DUMP("FROM a\nEXPOSE 80/tcp   443\n", "(from \"a\")\n(expose \"80/tcp\" \"443\")\n");
	CHECK_DUMP("FROM a\nUSER app:app\nWORKDIR /srv/my app\nSTOPSIGNAL SIGTERM\n",
		   "(from \"a\")\n(user \"app:app\")\n(workdir \"/srv/my app\")\n(stopsignal \"SIGTERM\")\n");
	CHECK_DUMP("FROM a\nVOLUME /a /b\nVOLUME [\"/c\", \"/d\"]\n",
		   "(from \"a\")\n(volume \"/a\" \"/b\")\n(volume \"/c\" \"/d\")\n");
	CHECK_DUMP("FROM a\nARG A B=2 C=\"x y\"\n", "(from \"a\")\n(arg \"A\" \"B=2\" \"C=\\\"x y\\\"\")\n");
	CHECK_DUMP("FROM a\nSHELL [\"/bin/bash\", \"-c\"]\n", "(from \"a\")\n(shell \"/bin/bash\" \"-c\")\n");
	CHECK_DUMP("   FROM   a   \n\tRun\techo\n", "(from \"a\")\n(run \"echo\")\n");
}

static void test_env_label(void)
{
	CHECK_DUMP("FROM a\nENV a b\n", "(from \"a\")\n(env \"a\" \"b\" \"\")\n");
	CHECK_DUMP("FROM a\nENV PATH /usr/bin:$PATH  x\n", "(from \"a\")\n(env \"PATH\" \"/usr/bin:$PATH  x\" \"\")\n");
	CHECK_DUMP("FROM a\nENV a=b c=\"d e\" f='g h'\n",
		   "(from \"a\")\n(env \"a\" \"b\" \"=\" \"c\" \"\\\"d e\\\"\" \"=\" \"f\" \"'g h'\" \"=\")\n");
	CHECK_DUMP("FROM a\nENV a=b\\ c\n", "(from \"a\")\n(env \"a\" \"b\\\\ c\" \"=\")\n");
	CHECK_DUMP("FROM a\nLABEL org.opencontainers.image.title=\"kiln demo\" version=1\n",
		   "(from \"a\")\n(label \"org.opencontainers.image.title\" \"\\\"kiln demo\\\"\" \"=\" \"version\" \"1\" \"=\")\n");
	CHECK_DUMP("FROM a\nENV PATH\n", "ERR: Dockerfile:2:1: ENV must have two arguments");
	CHECK_DUMP("FROM a\nLABEL a=b c\n",
		   "ERR: Dockerfile:2:1: Syntax error - can't find = in \"c\". Must be of the form: name=value");
	CHECK_DUMP("FROM a\nENV\n", "PLAN: Dockerfile:2:1: ENV requires at least one argument");
	CHECK_DUMP("FROM a\nENV =x\n", "PLAN: Dockerfile:2:1: ENV names can not be blank");
	CHECK_DUMP("FROM a\nARG =x\n", "PLAN: Dockerfile:2:1: ARG names can not be blank");
}

static void test_json_forms(void)
{
	CHECK_DUMP("FROM a\nCMD [\"echo\", \"hi\"]\n", "(from \"a\")\n(cmd \"echo\" \"hi\")\n");
	/* not valid JSON: shell form, kept as written */
	CHECK_DUMP("FROM a\nCMD [\"echo\", hi]\n", "(from \"a\")\n(cmd \"[\\\"echo\\\", hi]\")\n");
	CHECK_DUMP("FROM a\nCMD ['echo']\n", "(from \"a\")\n(cmd \"['echo']\")\n");
	/* text after the array: not JSON either */
	CHECK_DUMP("FROM a\nCMD [\"echo\"] x\n", "(from \"a\")\n(cmd \"[\\\"echo\\\"] x\")\n");
	CHECK_DUMP("FROM a\nCMD []\n", "(from \"a\")\n(cmd)\n");
	CHECK_DUMP("FROM a\nENTRYPOINT [\"a\\u00e9\\n\"]\n", "(from \"a\")\n(entrypoint \"aé\\n\")\n");
	CHECK_DUMP("FROM a\nCOPY [\"a b\", \"/c\"]\n", "(from \"a\")\n(copy \"a b\" \"/c\")\n");
	CHECK_DUMP("FROM a\nCOPY [\"a\" \"/c\"]\n", "(from \"a\")\n(copy \"[\\\"a\\\"\" \"\\\"/c\\\"]\")\n");
	CHECK_DUMP("FROM a\nRUN [\"a\", 1]\n",
		   "ERR: Dockerfile:2:1: when using JSON array syntax, arrays must be comprised of strings only");
	CHECK_DUMP("FROM a\nSHELL sh -c\n", "PLAN: Dockerfile:2:1: SHELL requires the arguments to be in JSON form");
	CHECK_DUMP("FROM a\nSHELL []\n", "PLAN: Dockerfile:2:1: SHELL requires at least one argument");

	struct df_ast *ast = parse_ok("FROM a\nRUN [\"x\"]\nRUN x\n");
	CHECK(ast != NULL);
	if (ast) {
		CHECK(ast->nodes[1].json);
		CHECK(!ast->nodes[2].json);
		df_ast_free(ast);
	}
}

static void test_continuations(void)
{
	CHECK_DUMP("FROM a\nRUN a \\\n  b\n", "(from \"a\")\n(run \"a   b\")\n");
	/* comment and blank lines inside a continuation are skipped */
	CHECK_DUMP("FROM a\nRUN a \\\n# note\n\n  b \\\n   # more\n  c\n", "(from \"a\")\n(run \"a   b   c\")\n");
	/* continuation at end of file */
	CHECK_DUMP("FROM a\nRUN a \\", "(from \"a\")\n(run \"a\")\n");
	/* trailing blanks after the escape, CRLF endings */
	CHECK_DUMP("FROM a\r\nRUN a \\  \r\nb\r\n", "(from \"a\")\n(run \"a b\")\n");
	/* an escaped escape does not continue */
	CHECK_DUMP("FROM a\nRUN a \\\\\nRUN b\n", "(from \"a\")\n(run \"a \\\\\\\\\")\n(run \"b\")\n");
	struct df_ast *ast = parse_ok("FROM a\nRUN a \\\n\n b\n");
	CHECK(ast != NULL);
	if (ast) {
		CHECK_INT(ast->warnings.n, 1);
		CHECK_INT(ast->nodes[1].start_line, 2);
		CHECK_INT(ast->nodes[1].end_line, 4);
		df_ast_free(ast);
	}
}

static void test_directives(void)
{
	struct df_ast *ast = parse_ok("# syntax=docker/dockerfile:1\n# ESCAPE = `\n#check=skip=all\nFROM a\nRUN a `\n b\n");
	CHECK(ast != NULL);
	if (ast) {
		CHECK_STR(ast->syntax, "docker/dockerfile:1");
		CHECK_STR(ast->check, "skip=all");
		CHECK_INT(ast->escape, '`');
		CHECK_INT(ast->n_nodes, 2);
		CHECK_STR(ast->nodes[1].args.v[0], "a  b");
		df_ast_free(ast);
	}
	/* after a comment, a blank line or an instruction, it is a comment */
	ast = parse_ok("# hello\n# escape=`\nFROM a\nRUN a \\\n b\n");
	CHECK(ast != NULL);
	if (ast) {
		CHECK_INT(ast->escape, '\\');
		CHECK_STR(ast->nodes[0].comment, "hello\nescape=`");
		df_ast_free(ast);
	}
	ast = parse_ok("\n# escape=`\nFROM a\n");
	CHECK(ast != NULL);
	if (ast) {
		CHECK_INT(ast->escape, '\\');
		df_ast_free(ast);
	}
	CHECK_DUMP("# escape=x\nFROM a\n", "ERR: Dockerfile:1:1: invalid escape token 'x' does not match ` or \\");
	CHECK_DUMP("# syntax=a\n# syntax=b\nFROM a\n", "ERR: Dockerfile:2:1: only one syntax parser directive can be used");
	/* a BOM before the first directive */
	ast = parse_ok("\xEF\xBB\xBF# escape=`\nFROM a\n");
	CHECK(ast != NULL);
	if (ast) {
		CHECK_INT(ast->escape, '`');
		df_ast_free(ast);
	}
}

static void test_flags(void)
{
	CHECK_DUMP("FROM --platform=linux/arm64 a AS b\n", "(from [\"--platform=linux/arm64\"] \"a\" \"AS\" \"b\")\n");
	CHECK_DUMP("FROM a\nCOPY --link --chown=1:1 --chmod=644 -- --weird /d\n",
		   "(from \"a\")\n(copy [\"--link\" \"--chown=1:1\" \"--chmod=644\"] \"--weird\" \"/d\")\n");
	CHECK_DUMP("FROM a\nCOPY --exclude=*.md --exclude=\"a b\" . /d\n",
		   "(from \"a\")\n(copy [\"--exclude=*.md\" \"--exclude=a b\"] \".\" \"/d\")\n");
	CHECK_DUMP("FROM a\nRUN --mount=type=cache,target=/root/.cache --network=none make\n",
		   "(from \"a\")\n(run [\"--mount=type=cache,target=/root/.cache\" \"--network=none\"] \"make\")\n");
	CHECK_DUMP("FROM a\nCOPY --frm=x a b\n", "PLAN: Dockerfile:2:6: Unknown flag: frm");
	CHECK_DUMP("FROM a\nCOPY --from a b\n", "PLAN: Dockerfile:2:6: Missing a value on flag: from");
	CHECK_DUMP("FROM a\nCOPY --link=maybe a b\n",
		   "PLAN: Dockerfile:2:6: Expecting boolean value for flag link, not: maybe");
	CHECK_DUMP("FROM a\nCOPY --from=a --from=b a b\n", "PLAN: Dockerfile:2:15: Duplicate flag specified: from");
	CHECK_DUMP("FROM a\nWORKDIR --x=1 /a\n", "PLAN: Dockerfile:2:9: Unknown flag: x");
	CHECK_DUMP("FROM a\nADD --checksum=sha256:00 --keep-git-dir https://x/y.git /d\n",
		   "(from \"a\")\n(add [\"--checksum=sha256:00\" \"--keep-git-dir\"] \"https://x/y.git\" \"/d\")\n");
	CHECK_DUMP("FROM a\nADD --parents a b\n", "PLAN: Dockerfile:2:5: Unknown flag: parents");
	CHECK_DUMP("FROM a\nADD --unpack=false x.tar.gz /d\n", "(from \"a\")\n(add [\"--unpack=false\"] \"x.tar.gz\" \"/d\")\n");
	CHECK_DUMP("FROM a\nRUN \\\n  --network=bogus true\n", "PLAN: Dockerfile:3:3: unsupported network mode \"bogus\"");
	CHECK_DUMP("FROM a\nRUN --security=insecure true\n", "(from \"a\")\n(run [\"--security=insecure\"] \"true\")\n");
	CHECK_DUMP("FROM a\nRUN --security=root true\n", "PLAN: Dockerfile:2:5: unsupported security mode \"root\"");
}

static void test_mounts(void)
{
	CHECK_DUMP("FROM a\nRUN --mount=type=secret,id=tok,required cat /run/secrets/tok\n",
		   "(from \"a\")\n(run [\"--mount=type=secret,id=tok,required\"] \"cat /run/secrets/tok\")\n");
	CHECK_DUMP("FROM a\nRUN --mount=type=bind,from=build,source=/out,target=/in,rw true\n",
		   "(from \"a\")\n(run [\"--mount=type=bind,from=build,source=/out,target=/in,rw\"] \"true\")\n");
	CHECK_DUMP("FROM a\nRUN --mount=type=tmpfs,target=/t,size=64m --mount=type=ssh true\n",
		   "(from \"a\")\n(run [\"--mount=type=tmpfs,target=/t,size=64m\" \"--mount=type=ssh\"] \"true\")\n");
	CHECK_DUMP("FROM a\nRUN --mount=type=nfs,target=/x true\n", "PLAN: Dockerfile:2:5: unsupported mount type \"nfs\"");
	/* every flag is known before any mount is read, as in BuildKit */
	CHECK_DUMP("FROM a\nRUN --mount=type=nfs --bogus x\n", "PLAN: Dockerfile:2:22: Unknown flag: bogus");
	CHECK_DUMP("FROM a\nRUN --mount=type=cache,tgt=/x true\n",
		   "PLAN: Dockerfile:2:5: unexpected key 'tgt' in 'tgt=/x' (did you mean dst?)");
	CHECK_DUMP("FROM a\nRUN --mount=target=/x,required true\n",
		   "PLAN: Dockerfile:2:5: unexpected key 'required' for mount type 'bind'");
	CHECK_DUMP("FROM a\nRUN --mount=type=cache,target=/x,sharing=wide true\n",
		   "PLAN: Dockerfile:2:5: unsupported sharing value \"wide\"");
	CHECK_DUMP("FROM a\nRUN --mount=type=bind,target=/x,mode=0755 true\n",
		   "PLAN: Dockerfile:2:5: mode not allowed for \"bind\" type mounts");
	CHECK_DUMP("FROM a\nRUN --mount=type=secret true\n",
		   "PLAN: Dockerfile:2:5: invalid secret mount. one of source, target required");
	CHECK_DUMP("FROM a\nRUN --mount=type=cache,target=/x,uid=abc true\n",
		   "PLAN: Dockerfile:2:5: invalid value abc for uid");
	CHECK_DUMP("FROM a\nRUN --mount=type=bind,from=$X,target=/x true\n",
		   "PLAN: Dockerfile:2:5: 'from' doesn't support variable expansion, define alias stage instead");
	CHECK_DUMP("FROM a\nRUN --mount=type=$T,target=/x true\n",
		   "(from \"a\")\n(run [\"--mount=type=$T,target=/x\"] \"true\")\n");
	/* encoding/csv accepts an unterminated quoted field at the end */
	CHECK_DUMP("FROM a\nRUN --mount=target=/x,'\"'ro true\n",
		   "(from \"a\")\n(run [\"--mount=target=/x,\\\"ro\"] \"true\")\n");
	CHECK_DUMP("FROM a\nRUN --mount=target=/x,r'\"'o true\n",
		   "PLAN: Dockerfile:2:5: failed to parse csv mounts: parse error on line 1, column 12: bare \" in non-quoted field");
}

static void test_healthcheck(void)
{
	CHECK_DUMP("FROM a\nHEALTHCHECK NONE\n", "(from \"a\")\n(healthcheck \"NONE\")\n");
	CHECK_DUMP("FROM a\nHEALTHCHECK --interval=5s --start-interval=1s --retries=3 CMD curl -f http://localhost/\n",
		   "(from \"a\")\n(healthcheck [\"--interval=5s\" \"--start-interval=1s\" \"--retries=3\"] \"CMD\" "
		   "\"curl -f http://localhost/\")\n");
	CHECK_DUMP("FROM a\nHEALTHCHECK CMD [\"/bin/check\", \"-q\"]\n",
		   "(from \"a\")\n(healthcheck \"CMD\" \"/bin/check\" \"-q\")\n");
	CHECK_DUMP("FROM a\nHEALTHCHECK CONNECT TCP 7000\n",
		   "PLAN: Dockerfile:2:1: Unknown type \"CONNECT\" in HEALTHCHECK (try CMD)");
	CHECK_DUMP("FROM a\nHEALTHCHECK CMD\n", "PLAN: Dockerfile:2:1: Missing command after HEALTHCHECK CMD");
	CHECK_DUMP("FROM a\nHEALTHCHECK NONE x\n", "PLAN: Dockerfile:2:1: HEALTHCHECK NONE takes no arguments");
	CHECK_DUMP("FROM a\nHEALTHCHECK --interval=5 CMD x\n",
		   "PLAN: Dockerfile:2:13: time: missing unit in duration \"5\"");
	CHECK_DUMP("FROM a\nHEALTHCHECK --timeout=3y CMD x\n",
		   "PLAN: Dockerfile:2:13: time: unknown unit \"y\" in duration \"3y\"");
	CHECK_DUMP("FROM a\nHEALTHCHECK --timeout=100us CMD x\n",
		   "PLAN: Dockerfile:2:13: Interval \"timeout\" cannot be less than 1ms");
	CHECK_DUMP("FROM a\nHEALTHCHECK --retries=-1 CMD x\n",
		   "PLAN: Dockerfile:2:13: --retries cannot be negative (-1)");
	CHECK_DUMP("FROM a\nHEALTHCHECK --retries=0 CMD x\n", "(from \"a\")\n(healthcheck [\"--retries=0\"] \"CMD\" \"x\")\n");
	CHECK_DUMP("FROM a\nHEALTHCHECK --retries=2147483648 CMD x\n",
		   "PLAN: Dockerfile:2:13: strconv.ParseInt: parsing \"2147483648\": value out of range");
	CHECK_DUMP("FROM a\nHEALTHCHECK --retries=x CMD x\n",
		   "PLAN: Dockerfile:2:13: strconv.ParseInt: parsing \"x\": invalid syntax");
	CHECK_DUMP("FROM a\nHEALTHCHECK --interval=1m30.5s --timeout=0s CMD x\n",
		   "(from \"a\")\n(healthcheck [\"--interval=1m30.5s\" \"--timeout=0s\"] \"CMD\" \"x\")\n");
}

static void test_onbuild(void)
{
	CHECK_DUMP("FROM a\nONBUILD RUN echo\n", "(from \"a\")\n(onbuild (run \"echo\"))\n");
	CHECK_DUMP("FROM a\nONBUILD ADD --chown=1 . /app\n", "(from \"a\")\n(onbuild (add [\"--chown=1\"] \".\" \"/app\"))\n");
	CHECK_DUMP("FROM a\nONBUILD ENV a=b\n", "(from \"a\")\n(onbuild (env \"a\" \"b\" \"=\"))\n");
	CHECK_DUMP("FROM a\nONBUILD ONBUILD RUN x\n",
		   "PLAN: Dockerfile:2:1: Chaining ONBUILD via `ONBUILD ONBUILD` isn't allowed");
	CHECK_DUMP("FROM a\nONBUILD FROM b\n", "PLAN: Dockerfile:2:1: FROM isn't allowed as an ONBUILD trigger");
	CHECK_DUMP("FROM a\nonbuild maintainer me\n", "PLAN: Dockerfile:2:1: MAINTAINER isn't allowed as an ONBUILD trigger");
	CHECK_DUMP("FROM a\nONBUILD\n", "PLAN: Dockerfile:2:1: ONBUILD requires at least one argument");
	/* a bad trigger is only a warning of pass 2: BuildKit checks it when it runs */
	struct df_ast *ast = parse_ok("FROM a\nONBUILD BOGUS x\n");
	CHECK(ast != NULL);
	if (ast) {
		kiln_strv warn = KILN_STRV_INIT;
		kiln_error *err = NULL;
		CHECK_INT(ast->warnings.n, 0);
		CHECK_INT(dfp_check_ast(ast, &warn, &err), 0);
		CHECK_INT(warn.n, 1);
		kiln_strv_free(&warn);
		kiln_error_free(err);
		df_ast_free(ast);
	}
	/* BuildKit's parser nests any depth of ONBUILD: thousands fit in a line */
	{
		kiln_buf b = KILN_BUF_INIT, want = KILN_BUF_INIT;
		kiln_buf_adds(&b, "FROM a\n");
		kiln_buf_adds(&want, "(from \"a\")\n(");
		for (int i = 0; i < 8000; i++) {
			kiln_buf_adds(&b, "ONBUILD ");
			kiln_buf_adds(&want, i ? " (onbuild" : "onbuild");
		}
		kiln_buf_adds(&b, "RUN x\n");
		kiln_buf_adds(&want, " (run \"x\")");
		for (int i = 0; i < 8000; i++)
			kiln_buf_addc(&want, ')');
		kiln_buf_adds(&want, "\n");
		struct df_ast *deep = parse_ok(b.buf);
		char *got = deep ? df_ast_dump(deep, NULL) : NULL;
		CHECK(got != NULL && strcmp(got, want.buf) == 0);
		free(got);
		df_ast_free(deep);
		kiln_buf_free(&b);
		kiln_buf_free(&want);
	}
}

static void test_errors(void)
{
	CHECK_DUMP("", "ERR: Dockerfile:1:1: file with no instructions");
	CHECK_DUMP("# only a comment\n\n", "ERR: Dockerfile:2:1: file with no instructions");
	CHECK_DUMP("FROM a\n  FOO bar\n", "PLAN: Dockerfile:2:3: unknown instruction: FOO (did you mean from?)");
	CHECK_DUMP("FROM a\nBLAHBLAH x\n", "PLAN: Dockerfile:2:1: unknown instruction: BLAHBLAH");
	CHECK_DUMP("FROM a\nRUN --mount=type=cach true\n", "PLAN: Dockerfile:2:5: unsupported mount type \"cach\" (did you mean cache?)");
	CHECK_DUMP("FROM\n", "PLAN: Dockerfile:1:1: FROM requires either one or three arguments");
	CHECK_DUMP("FROM a b\n", "PLAN: Dockerfile:1:1: FROM requires either one or three arguments");
	CHECK_DUMP("FROM a AS 1x\n",
		   "PLAN: Dockerfile:1:11: invalid name for build stage: \"1x\", name can't start with a number or contain symbols");
	CHECK_DUMP("FROM a\nCOPY a\n",
		   "PLAN: Dockerfile:2:1: COPY requires at least two arguments, but only one was provided. Destination could not be determined.");
	CHECK_DUMP("FROM a\nUSER\n", "PLAN: Dockerfile:2:1: USER requires exactly one argument");
	CHECK_DUMP("FROM a\nEXPOSE\n", "PLAN: Dockerfile:2:1: EXPOSE requires at least one argument");
	CHECK_DUMP("FROM a\nVOLUME [\"\"]\n", "PLAN: Dockerfile:2:1: VOLUME specified can not be an empty string");
	{
		static const char nul[] = "FROM a\nRUN a\0b\n";
		struct df_ast *ast = NULL;
		kiln_error *err = NULL;
		/* BuildKit's parser keeps a NUL byte; pass 2 refuses it where it is */
		CHECK(df_parse("Dockerfile", nul, sizeof(nul) - 1, &ast, &err) == 0);
		if (ast) {
			size_t len = 0;
			char *d = df_ast_dump(ast, &len);
			CHECK_STR(d, "(from \"a\")\n(run \"a\\x00b\")\n");
			free(d);
			CHECK(dfp_check_ast(ast, &ast->warnings, &err) < 0);
			CHECK_STR(err ? kiln_error_message(err) : NULL, "Dockerfile:2:6: NUL byte in Dockerfile");
		}
		kiln_error_free(err);
		df_ast_free(ast);
	}
	/* the parser's errors come before instruction errors, as in BuildKit */
	CHECK_DUMP("FOO\nFROM a\nENV x\n", "ERR: Dockerfile:3:1: ENV must have two arguments");
}

static void test_heredocs(void)
{
	struct df_ast *ast = parse_ok("FROM a\nRUN <<EOF\necho hi\n  EOF\nEOF\nRUN 3<<-'X' cat <<\"Y\"\n\tone\n\tX\ntwo\nY\n");
	CHECK(ast != NULL);
	if (!ast)
		return;
	CHECK_INT(ast->n_nodes, 3);
	CHECK_INT(ast->nodes[1].n_heredocs, 1);
	CHECK_STR(ast->nodes[1].heredocs[0].name, "EOF");
	CHECK_STR(ast->nodes[1].heredocs[0].content, "echo hi\n  EOF\n");
	CHECK(ast->nodes[1].heredocs[0].expand);
	CHECK_INT(ast->nodes[1].start_line, 2);
	CHECK_INT(ast->nodes[1].end_line, 5);
	CHECK_INT(ast->nodes[2].n_heredocs, 2);
	CHECK_STR(ast->nodes[2].heredocs[0].name, "X");
	CHECK(!ast->nodes[2].heredocs[0].expand);
	CHECK(ast->nodes[2].heredocs[0].chomp);
	CHECK_INT(ast->nodes[2].heredocs[0].fd, 3);
	CHECK_STR(ast->nodes[2].heredocs[0].content, "\tone\n");
	CHECK_STR(ast->nodes[2].heredocs[1].name, "Y");
	CHECK(!ast->nodes[2].heredocs[1].expand);
	CHECK_STR(ast->nodes[2].heredocs[1].content, "two\n");
	df_ast_free(ast);

	/* JSON form and non-heredoc instructions take no heredoc */
	CHECK_DUMP("FROM a\nRUN [\"cat\", \"<<EOF\"]\nENV a=<<EOF\n", "(from \"a\")\n(run \"cat\" \"<<EOF\")\n(env \"a\" \"<<EOF\" \"=\")\n");
	/* COPY with two heredocs, the second quoted */
	ast = parse_ok("FROM a\nCOPY <<a.sh <<'b.sh' /bin/\necho $A\na.sh\necho $B\nb.sh\n");
	CHECK(ast != NULL);
	if (ast) {
		CHECK_INT(ast->nodes[1].n_heredocs, 2);
		CHECK(ast->nodes[1].heredocs[0].expand);
		CHECK(!ast->nodes[1].heredocs[1].expand);
		CHECK_STR(ast->nodes[1].heredocs[1].content, "echo $B\n");
		df_ast_free(ast);
	}
	/* a heredoc word inside quotes is not one */
	CHECK_DUMP("FROM a\nRUN echo '<<EOF'\n", "(from \"a\")\n(run \"echo '<<EOF'\")\n");
	CHECK_DUMP("FROM a\nRUN <<EOF\nno end\n", "ERR: Dockerfile:2:1: unterminated heredoc");
	CHECK_DUMP("FROM a\nCOPY <<A <<B\na\nA\nb\nB\n", "PLAN: Dockerfile:2:1: COPY cannot accept a heredoc as a destination");
	CHECK_DUMP("FROM a\nADD a <<-B\n\tB\n", "PLAN: Dockerfile:2:1: ADD cannot accept a heredoc as a destination");
	CHECK_DUMP("FROM a\nRUN <<EOF cat\nEOF\nRUN <<B\n", "ERR: Dockerfile:4:1: unterminated heredoc");
}

static void test_quoting(void)
{
	/* strconv.Quote: escapes, invalid UTF-8 as \x, non-printables as \u */
	CHECK_DUMP("FROM a\nRUN echo \"\\t\" \x01 \x7f \xff \xc3\xa9 \xc2\xa0x \xe2\x80\x8b \xf0\x9f\x98\x80\n",
		   "(from \"a\")\n(run \"echo \\\"\\\\t\\\" \\x01 \\x7f \\xff é \\u00a0x \\u200b 😀\")\n");
	CHECK_DUMP("FROM a\nRUN a\rb\vc\fd\ae\bf\n", "(from \"a\")\n(run \"a\\rb\\vc\\fd\\ae\\bf\")\n");
	CHECK_DUMP("FROM a\nRUN \xf3\xa0\x80\x81\n", "(from \"a\")\n(run \"\\U000e0001\")\n");
	/* format characters, private use and unassigned code points are escaped;
	 * trailing Unicode spaces are trimmed like any space */
	CHECK_DUMP("FROM a\nRUN x\xc2\xad\xef\xbb\xbf\xee\x80\x80\xcd\xb8\xef\xbf\xbd\xc2\x85\xc2\xa0\xe2\x80\xa8\n",
		   "(from \"a\")\n(run \"x\\u00ad\\ufeff\\ue000\\u0378\xef\xbf\xbd\")\n");
	CHECK_DUMP("FROM a\nRUN \xc2\x85x\xc2\x9f\n", "(from \"a\")\n(run \"x\\u009f\")\n");
}

static void test_json_output(void)
{
	struct df_ast *ast = parse_ok("# syntax=x\n# a note\nFROM a\nCOPY --link <<EOF /f\nhi\nEOF\n");
	json_t *j, *ins;

	CHECK(ast != NULL);
	if (!ast)
		return;
	j = df_ast_to_json(ast);
	CHECK_STR(kiln_json_str(j, "syntax"), "x");
	CHECK_STR(kiln_json_str(j, "escape"), "\\");
	ins = json_object_get(j, "instructions");
	CHECK_INT(json_array_size(ins), 2);
	CHECK_STR(kiln_json_str(json_array_get(ins, 0), "comment"), "a note");
	json_t *cp = json_array_get(ins, 1);
	CHECK_STR(kiln_json_str(cp, "instruction"), "copy");
	CHECK_STR(json_string_value(json_array_get(json_object_get(cp, "flags"), 0)), "--link");
	CHECK_STR(kiln_json_str(cp, "original"), "COPY --link <<EOF /f");
	CHECK_INT(kiln_json_int(cp, "start_line", 0), 4);
	CHECK_INT(kiln_json_int(cp, "end_line", 0), 6);
	CHECK_STR(kiln_json_str(json_array_get(json_object_get(cp, "heredocs"), 0), "content"), "hi\n");
	json_decref(j);
	df_ast_free(ast);
}

/* Both layers on one input: the syntax layer's dump (BuildKit's parser takes
 * it) and pass 2's error (BuildKit's instructions.Parse refuses it). */
static void check_layers(const char *text, size_t len, const char *want_dump, const char *want_err)
{
	struct df_ast *ast = NULL;
	kiln_error *err = NULL;

	if (df_parse("Dockerfile", text, len, &ast, &err) < 0) {
		CHECK_STR(kiln_error_message(err), "(parsed)");
		kiln_error_free(err);
		return;
	}
	char *d = df_ast_dump(ast, &len);
	char *q = kiln_xmalloc(len * 4 + 1), *o = q;
	for (size_t i = 0; i < len; i++) /* a raw NUL in the dump shows as \0 */
		if (d[i] == '\0')
			*o++ = '\\', *o++ = '0';
		else
			*o++ = d[i];
	*o = '\0';
	CHECK_STR(q, want_dump);
	free(q);
	free(d);
	struct df_plan *plan = NULL;
	CHECK(df_plan_build(ast, NULL, &plan, &err) < 0);
	CHECK_STR(err ? kiln_error_message(err) : NULL, want_err);
	kiln_error_free(err);
	df_plan_free(plan);
	df_ast_free(ast);
}

#define LAYERS(lit, dump, perr) check_layers(lit, sizeof(lit) - 1, dump, perr)

/* What kiln's syntax layer refused before and BuildKit's parser takes. */
static void test_buildkit_accepts(void)
{
	LAYERS("FROM a\nCOPY --user=me a b\n", "(from \"a\")\n(copy [\"--user=me\"] \"a\" \"b\")\n",
	       "Dockerfile:2:6: Unknown flag: user");
	LAYERS("FROM a\nHEALTHCHECK\n", "(from \"a\")\n(healthcheck)\n",
	       "Dockerfile:2:1: HEALTHCHECK requires at least one argument");
	LAYERS("FROM a\nHEALTHCHECK --interval=5 CMD x\n",
	       "(from \"a\")\n(healthcheck [\"--interval=5\"] \"CMD\" \"x\")\n",
	       "Dockerfile:2:13: time: missing unit in duration \"5\"");
	LAYERS("FROM a\nCMD [\"\\u0000\"]\n", "(from \"a\")\n(cmd \"\\x00\")\n",
	       "Dockerfile:2:1: a JSON string holds \\u0000, which no command argument can contain");
	LAYERS("FROM a\nFOO bar\n", "(from \"a\")\n(foo \"\")\n",
	       "Dockerfile:2:1: unknown instruction: FOO (did you mean from?)");
	LAYERS("FROM a\nONBUILD ONBUILD RUN x\n", "(from \"a\")\n(onbuild (onbuild (run \"x\")))\n",
	       "Dockerfile:2:1: Chaining ONBUILD via `ONBUILD ONBUILD` isn't allowed");
	LAYERS("FROM a\nCOPY a\n", "(from \"a\")\n(copy \"a\")\n",
	       "Dockerfile:2:1: COPY requires at least two arguments, but only one was provided. Destination could "
	       "not be determined.");
	LAYERS("FROM a\nSHELL /bin/sh\n", "(from \"a\")\n(shell \"/bin/sh\")\n",
	       "Dockerfile:2:1: SHELL requires the arguments to be in JSON form");
	LAYERS("FROM a b\n", "(from \"a\" \"b\")\n", "Dockerfile:1:1: FROM requires either one or three arguments");
	LAYERS("FROM a\nRUN --mount=type=nfs x\n", "(from \"a\")\n(run [\"--mount=type=nfs\"] \"x\")\n",
	       "Dockerfile:2:5: unsupported mount type \"nfs\"");
	/* NUL bytes, kept as BuildKit keeps them: in shell form, ENV words (rune
	 * by rune), flags (byte by byte, other bytes >= 0x80 as Latin-1), the
	 * instruction word (printed unquoted), next to a raw C0 byte */
	LAYERS("FROM a\nRUN a\0b\n", "(from \"a\")\n(run \"a\\x00b\")\n", "Dockerfile:2:6: NUL byte in Dockerfile");
	LAYERS("FROM a\nENV k=\0\xC0\n", "(from \"a\")\n(env \"k\" \"\\x00\xef\xbf\xbd\" \"=\")\n",
	       "Dockerfile:2:7: NUL byte in Dockerfile");
	LAYERS("FROM a\nCOPY --chown=\0\xC0 a b\n", "(from \"a\")\n(copy [\"--chown=\\x00\xc3\x80\"] \"a\" \"b\")\n",
	       "Dockerfile:2:14: NUL byte in Dockerfile");
	LAYERS("FROM a\nRU\0N \xC0\x80\n", "(from \"a\")\n(ru\\0n \"\")\n", "Dockerfile:2:3: NUL byte in Dockerfile");
	LAYERS("FROM a\nRUN [\"\\u0000\", \"\xC0\x80\"]\n", "(from \"a\")\n(run \"\\x00\" \"\xef\xbf\xbd\xef\xbf\xbd\")\n",
	       "Dockerfile:2:1: a JSON string holds \\u0000, which no command argument can contain");
	/* a NUL after a C0 byte still counts towards the 64 KiB line limit once */
	{
		kiln_buf b = KILN_BUF_INIT;
		struct df_ast *ast = NULL;
		kiln_error *err = NULL;
		kiln_buf_adds(&b, "FROM a\nRUN ");
		for (int i = 0; i < 65535 - 4 - 2; i++)
			kiln_buf_addc(&b, i % 2 ? '\0' : (char)0xC0);
		kiln_buf_adds(&b, "xy\n");
		CHECK(df_parse("Dockerfile", b.buf, b.len, &ast, &err) == 0);
		df_ast_free(ast);
		kiln_error_free(err);
		err = NULL;
		ast = NULL;
		kiln_buf_addc(&b, 'z');
		b.buf[b.len - 2] = 'z', b.buf[b.len - 1] = '\n';
		CHECK(df_parse("Dockerfile", b.buf, b.len, &ast, &err) < 0);
		CHECK_STR(err ? kiln_error_message(err) : NULL,
			  "Dockerfile:2:1: dockerfile line greater than max allowed size of 65535");
		kiln_error_free(err);
		df_ast_free(ast);
		kiln_buf_free(&b);
	}
	/* the JSON form shows the NUL as \u0000, heredoc bodies included */
	{
		static const char t[] = "FROM a\nCOPY <<E /x\na\0b\nE\n";
		struct df_ast *ast = NULL;
		kiln_error *err = NULL;
		CHECK(df_parse("Dockerfile", t, sizeof(t) - 1, &ast, &err) == 0);
		if (ast) {
			json_t *j = df_ast_to_json(ast);
			char *s = json_dumps(json_object_get(json_array_get(json_object_get(j, "instructions"), 1),
							     "heredocs"),
					     JSON_COMPACT);
			CHECK_STR(s, "[{\"name\":\"E\",\"content\":\"a\\u0000b\\n\",\"expand\":true,\"chomp\":false,\"fd\":0}]");
			free(s);
			json_decref(j);
		}
		kiln_error_free(err);
		df_ast_free(ast);
	}
}

int main(void)
{
	RUN(test_basic_instructions);
	RUN(test_env_label);
	RUN(test_json_forms);
	RUN(test_continuations);
	RUN(test_directives);
	RUN(test_flags);
	RUN(test_mounts);
	RUN(test_healthcheck);
	RUN(test_onbuild);
	RUN(test_errors);
	RUN(test_heredocs);
	RUN(test_quoting);
	RUN(test_json_output);
	RUN(test_buildkit_accepts);
	return test_done();
}
