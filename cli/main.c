/* main.c — kiln's entry point: global options, the command table (generated
 * from cli/cmd_*.c by the Makefile) and dispatch.  Commands parse their own
 * arguments (cli/options.c) and call into the stage libraries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "distrib/distrib.h"
#include "service/service.h"
#include "snapshots/snapshots.h"
#include "vm/vm.h"

#define KILN_CMD(n) extern const struct kiln_command kiln_cmd_##n;
#include "commands.h"
#undef KILN_CMD

static const struct kiln_command *const commands[] = {
#define KILN_CMD(n) &kiln_cmd_##n,
#include "commands.h"
#undef KILN_CMD
	NULL,
};

static void print_main_usage(FILE *out)
{
	fprintf(out, "Usage: kiln [--log LEVEL] [--unconfined] COMMAND [ARGS...]\n\n"
		     "kiln builds sandbox templates from Dockerfiles and serves them.\n\n"
		     "Commands:\n");
	for (size_t i = 0; commands[i] != NULL; i++)
		fprintf(out, "  %-12s %s\n", commands[i]->name, commands[i]->summary);
	fprintf(out, "  %-12s %s\n", "help", "show help for kiln or for a command");
	fprintf(out, "\nGlobal options:\n"
		     "  --log LEVEL  log level: error, warn (default), info, debug, trace (or KILN_LOG)\n"
		     "  --unconfined run VMs without their jail (own uid, namespaces, cgroup, seccomp:\n"
		     "               docs/security.md), or KILN_UNCONFINED=1; flagged in the output\n"
		     "  -h, --help   show this help\n"
		     "  --version    print the version\n\n"
		     "Run 'kiln COMMAND --help' for a command's options.\n");
}

int cli_fail(kiln_error *err)
{
	int code = err && err->kind == KILN_E_USAGE ? KILN_EXIT_USAGE : KILN_EXIT_FAIL;
	const char *msg = kiln_error_message(err);

	/* The chain as one "outer: inner: cause" line (a cause that holds
	 * newlines, such as a guest's output, is printed as it is). */
	fprintf(stderr, "kiln: %s\n", msg);
	kiln_error_free(err);
	return code;
}

void cli_print_json(const json_t *v)
{
	json_dumpf(v, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
	fputc('\n', stdout);
}

const struct kiln_command *cli_find(const struct kiln_command *const *table, const char *name)
{
	for (size_t i = 0; table[i] != NULL; i++)
		if (strcmp(table[i]->name, name) == 0)
			return table[i];
	return NULL;
}

/* A sub-command's own name: "ls" for one named "ls" or "cache ls". */
static const char *sub_name(const struct kiln_command *cmd, const struct kiln_command *sub)
{
	size_t plen = strlen(cmd->name);
	const char *n = sub->name;

	return strncmp(n, cmd->name, plen) == 0 && n[plen] == ' ' ? n + plen + 1 : n;
}

int cli_list_commands(const struct kiln_command *const *table)
{
	for (size_t i = 0; table[i] != NULL; i++) {
		const char *n = strrchr(table[i]->name, ' ');
		printf("%s\t%s\n", n ? n + 1 : table[i]->name, table[i]->summary ? table[i]->summary : "");
	}
	return KILN_EXIT_OK;
}

int cli_dispatch(const struct kiln_command *cmd, const struct kiln_command *const *subs, int argc, char **argv)
{
	if (argc < 2)
		return cli_usage_error(cmd, "missing sub-command");
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0)
		return cli_help(cmd);
	if (strcmp(argv[1], "--list-commands") == 0)
		return cli_list_commands(subs);
	for (size_t i = 0; subs[i] != NULL; i++) {
		const char *n = sub_name(cmd, subs[i]);
		if (strcmp(n, argv[1]) == 0)
			return subs[i]->run(subs[i], argc - 1, argv + 1);
	}
	return cli_usage_error(cmd, "unknown sub-command '%s'", argv[1]);
}

int main(int argc, char **argv)
{
	const struct kiln_command *cmd;
	int i = 1;

	/* lazily pulled templates are served from the chunk store */
	static const struct snap_serve_ops serve = { .files = dist_chunkfs_files,
						     .record_start = dist_chunkfs_record_start,
						     .record_end = dist_chunkfs_record_end };
	snap_set_serve_ops(&serve);
	/* a build service's child started ahead (service/child.c): its command
	 * line, environment and directory come on stdin, the exec already paid */
	kiln_strv job = KILN_STRV_INIT;
	if (argc == 2 && strcmp(argv[1], "--wait-job") == 0) {
		kiln_error *err = NULL;
		int w = svc_child_wait(0, &job, &err);
		if (w != 0)
			return w < 0 ? cli_fail(err) : KILN_EXIT_OK;
		argc = (int)job.n;
		argv = job.v;
	}
	while (i < argc && argv[i][0] == '-') {
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			print_main_usage(stdout);
			return KILN_EXIT_OK;
		} else if (strcmp(argv[i], "--list-commands") == 0) {
			return cli_list_commands(commands);
		} else if (strcmp(argv[i], "--version") == 0) {
			printf("kiln %s\n", KILN_VERSION);
			return KILN_EXIT_OK;
		} else if (strcmp(argv[i], "--unconfined") == 0) {
			vm_set_unconfined(true);
		} else if (strcmp(argv[i], "--log") == 0 || strncmp(argv[i], "--log=", 6) == 0) {
			const char *lvl = argv[i][5] == '=' ? argv[i] + 6 : (i + 1 < argc ? argv[++i] : NULL);
			enum kiln_loglevel level;
			if (lvl == NULL || kiln_log_parse_level(lvl, &level) < 0) {
				fprintf(stderr, "kiln: --log wants one of error, warn, info, debug, trace\n");
				print_main_usage(stderr);
				return KILN_EXIT_USAGE;
			}
			kiln_log_set_level(level);
		} else {
			fprintf(stderr, "kiln: unknown option %s\n", argv[i]);
			print_main_usage(stderr);
			return KILN_EXIT_USAGE;
		}
		i++;
	}
	if (i >= argc) {
		print_main_usage(stderr);
		return KILN_EXIT_USAGE;
	}
	if (strcmp(argv[i], "help") == 0) {
		if (i + 1 >= argc) {
			print_main_usage(stdout);
			return KILN_EXIT_OK;
		}
		cmd = cli_find(commands, argv[i + 1]);
		if (cmd == NULL) {
			fprintf(stderr, "kiln: unknown command '%s'\n", argv[i + 1]);
			return KILN_EXIT_USAGE;
		}
		/* the command prints its help, with the options of its table */
		char *help_argv[] = { argv[i + 1], (char *)"--help", NULL };
		return cmd->run(cmd, 2, help_argv);
	}
	cmd = cli_find(commands, argv[i]);
	if (cmd == NULL) {
		fprintf(stderr, "kiln: unknown command '%s'\n\n", argv[i]);
		print_main_usage(stderr);
		return KILN_EXIT_USAGE;
	}
	return cmd->run(cmd, argc - i, argv + i);
}
