/* cmd_dockerfile.c — `kiln dockerfile SUBCOMMAND`: look inside a Dockerfile
 * without building it.  Each sub-command is one entry of `subcommands`;
 * `parse` prints the syntax tree (JSON, or BuildKit's dump format), `plan`
 * the build plan of the semantic pass. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/build_flags.h"
#include "cli/cli.h"
#include "dockerfile-parser/dockerfile.h"

static void print_warnings(const struct df_ast *ast)
{
	for (size_t i = 0; i < ast->warnings.n; i++)
		fprintf(stderr, "kiln: warning: %s\n", ast->warnings.v[i]);
}

/* --json / --dump: the last one given counts */
static int set_format(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	(void)cmd, (void)arg;
	*(bool *)opt->value = strcmp(opt->long_name, "dump") == 0;
	return 0;
}

static int run_parse(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	struct df_ast *ast = NULL;
	bool dump = false;
	int i, rc;
	const struct cli_option opts[] = {
		CLI_CALLBACK(0, "json", &dump, NULL, set_format, "the tree as JSON: per instruction its flags, arguments, heredocs,\n"
								 "original text and lines (the default)"),
		CLI_CALLBACK(0, "dump", &dump, NULL, set_format, "BuildKit's dump format, one s-expression per instruction"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i >= argc)
		return cli_usage_error(cmd, "missing FILE (use - for standard input)");
	if (i + 1 < argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[i + 1]);
	if (df_parse_file(argv[i], &ast, &err) < 0)
		return cli_fail(err);
	print_warnings(ast);
	if (dump) {
		size_t len;
		char *s = df_ast_dump(ast, &len);
		fwrite(s, 1, len, stdout);
		free(s);
	} else {
		/* one write of the whole text: json_dumpf writes token by token */
		json_t *j = df_ast_to_json(ast);
		char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		json_decref(j);
		if (s == NULL) {
			df_ast_free(ast);
			kiln_err(&err, KILN_E_GENERIC, "cannot serialise the syntax tree as JSON");
			return cli_fail(err);
		}
		fputs(s, stdout);
		fputc('\n', stdout);
		free(s);
	}
	df_ast_free(ast);
	if (fflush(stdout) != 0) {
		kiln_err_errno(&err, errno, "write output");
		return cli_fail(err);
	}
	return KILN_EXIT_OK;
}

static const struct kiln_command sub_parse = {
	.name = "dockerfile parse",
	.summary = "print a Dockerfile's syntax tree",
	.usage = "Usage: kiln dockerfile parse [--json | --dump] FILE|-\n\n"
		 "Parse a Dockerfile (- reads standard input) and print its syntax tree.\n"
		 "Syntax errors are reported as FILE:LINE:COL: message, exit status 1.\n",
	.run = run_parse,
};

static int run_plan(const struct kiln_command *cmd, int argc, char **argv)
{
	struct df_plan_opts po = { 0 };
	struct cli_build_flags bf = { 0 };
	kiln_error *err = NULL;
	struct df_ast *ast = NULL;
	struct df_plan *plan = NULL;
	int i, rc;
	const struct cli_option opts[] = {
		CLI_BUILD_ARG_OPTION(&bf),
		CLI_STRING(0, "target", &po.target, "T", "build stage T (name or index) and what it needs; default\n"
							 "the last stage"),
		CLI_STRING(0, "platform", &po.platform, "P", "target platform os/arch[/variant] (default linux/amd64)"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		goto out;
	rc = KILN_EXIT_USAGE;
	if (i >= argc) {
		rc = cli_usage_error(cmd, "missing FILE (use - for standard input)");
		goto out;
	}
	if (i + 1 < argc) {
		rc = cli_usage_error(cmd, "unexpected argument '%s'", argv[i + 1]);
		goto out;
	}
	po.build_args = bf.args;
	po.n_build_args = bf.n_args;
	if (df_parse_file(argv[i], &ast, &err) < 0 || df_plan_build(ast, &po, &plan, &err) < 0) {
		rc = cli_fail(err);
		goto out;
	}
	print_warnings(ast);
	for (size_t w = 0; w < plan->warnings.n; w++)
		fprintf(stderr, "kiln: warning: %s\n", plan->warnings.v[w]);
	json_t *j = df_plan_to_json(plan);
	json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
	json_decref(j);
	if (fflush(stdout) != 0) {
		kiln_err_errno(&err, errno, "write output");
		rc = cli_fail(err);
		goto out;
	}
	rc = KILN_EXIT_OK;
out:
	df_plan_free(plan);
	df_ast_free(ast);
	cli_build_flags_free(&bf);
	return rc;
}

static const struct kiln_command sub_plan = {
	.name = "dockerfile plan",
	.summary = "print a Dockerfile's expanded build plan",
	.usage = "Usage: kiln dockerfile plan [--build-arg K=V]... [--target T] [--platform P] FILE|-\n\n"
		 "Parse a Dockerfile (- reads standard input), apply BuildKit's semantics and print\n"
		 "the build plan as JSON: stages, their dependencies and build order, and per\n"
		 "instruction the expanded arguments, flags and the environment in effect.\n"
		 "Errors in the Dockerfile are reported as FILE:LINE:COL: message, exit status 1;\n"
		 "build args no ARG uses are reported as warnings.  See docs/dockerfile-plan.md.\n",
	.run = run_plan,
};

/* One entry per sub-command. */
static const struct kiln_command *const subcommands[] = {
	&sub_parse,
	&sub_plan,
	NULL,
};

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	return cli_dispatch(cmd, subcommands, argc, argv);
}

const struct kiln_command kiln_cmd_dockerfile = {
	.name = "dockerfile",
	.summary = "inspect Dockerfiles (parse, plan)",
	.usage = "Usage: kiln dockerfile SUBCOMMAND [OPTIONS] FILE|-\n\n"
		 "Sub-commands:\n"
		 "  parse   print the syntax tree (JSON, or BuildKit's dump format with --dump)\n"
		 "  plan    print the expanded build plan as JSON (--build-arg, --target, --platform)\n\n"
		 "Run 'kiln dockerfile SUBCOMMAND --help' for its options.\n",
	.run = run,
};
