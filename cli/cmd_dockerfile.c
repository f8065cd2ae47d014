/* cmd_dockerfile.c — `kiln dockerfile SUBCOMMAND`: look inside a Dockerfile
 * without building it.  Each sub-command is one entry of `subcommands`;
 * `parse` prints the syntax tree (JSON, or BuildKit's dump format). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "dockerfile-parser/dockerfile.h"

static void print_warnings(const struct df_ast *ast)
{
	for (size_t i = 0; i < ast->warnings.n; i++)
		fprintf(stderr, "kiln: warning: %s\n", ast->warnings.v[i]);
}

static int run_parse(const struct kiln_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "dump", no_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	kiln_error *err = NULL;
	struct df_ast *ast = NULL;
	bool dump = false;
	int c;

	while ((c = cli_getopt(cmd, argc, argv, "h", opts)) != -1) {
		switch (c) {
		case 'j':
			dump = false;
			break;
		case 'd':
			dump = true;
			break;
		case 'h':
			return KILN_EXIT_OK;
		default:
			return KILN_EXIT_USAGE;
		}
	}
	if (optind >= argc)
		return cli_usage_error(cmd, "missing FILE (use - for standard input)");
	if (optind + 1 < argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + 1]);
	if (df_parse_file(argv[optind], &ast, &err) < 0)
		return cli_fail(err);
	print_warnings(ast);
	if (dump) {
		char *s = df_ast_dump(ast);
		fputs(s, stdout);
		free(s);
	} else {
		json_t *j = df_ast_to_json(ast);
		json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		fputc('\n', stdout);
		json_decref(j);
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
		 "Parse a Dockerfile (- reads standard input) and print its syntax tree.\n\n"
		 "Options:\n"
		 "  --json   the tree as JSON: per instruction its flags, arguments, heredocs,\n"
		 "           original text and lines (the default)\n"
		 "  --dump   BuildKit's dump format, one s-expression per instruction\n"
		 "  -h, --help\n\n"
		 "Syntax errors are reported as FILE:LINE:COL: message, exit status 1.\n",
	.run = run_parse,
};

/* One entry per sub-command. */
static const struct kiln_command *const subcommands[] = {
	&sub_parse,
	NULL,
};

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	const struct kiln_command *sub;
	char *key;

	if (argc < 2)
		return cli_usage_error(cmd, "missing sub-command");
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0)
		return cli_help(cmd);
	key = kiln_xasprintf("dockerfile %s", argv[1]);
	sub = cli_find(subcommands, key);
	free(key);
	if (sub == NULL)
		return cli_usage_error(cmd, "unknown sub-command '%s'", argv[1]);
	optind = 0;
	return sub->run(sub, argc - 1, argv + 1);
}

const struct kiln_command kiln_cmd_dockerfile = {
	.name = "dockerfile",
	.summary = "inspect Dockerfiles (parse)",
	.usage = "Usage: kiln dockerfile SUBCOMMAND [OPTIONS] FILE|-\n\n"
		 "Sub-commands:\n"
		 "  parse   print the syntax tree (JSON, or BuildKit's dump format with --dump)\n\n"
		 "Run 'kiln dockerfile SUBCOMMAND --help' for its options.\n",
	.run = run,
};
