/* cli.h — the contract between kiln's entry point and its subcommands.  Each
 * cli/cmd_NAME.c defines one `const struct kiln_command kiln_cmd_NAME`; the
 * Makefile generates the table from the file names.  Only cli/ prints to the
 * user or decides exit codes: 0 success, 1 runtime error, 2 usage error. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <getopt.h>
#include <stdbool.h>

#include "kiln.h"

enum { KILN_EXIT_OK = 0, KILN_EXIT_FAIL = 1, KILN_EXIT_USAGE = 2 };

struct kiln_command {
	const char *name;
	const char *summary; /* one line for `kiln --help` */
	const char *usage;   /* full text for `kiln NAME --help`, starting "Usage: kiln NAME ..." */
	/* argv[0] is the command name; returns an exit code. */
	int (*run)(const struct kiln_command *cmd, int argc, char **argv);
};

/* Print "kiln NAME: message" and the command's usage to stderr; returns 2. */
int cli_usage_error(const struct kiln_command *cmd, const char *fmt, ...) KILN_PRINTF(2, 3);
/* Print the command's usage to stdout; returns 0. */
int cli_help(const struct kiln_command *cmd);
/* Print the error as one line "kiln: message" to stderr, free it; returns 1
 * (2 for a usage error). */
int cli_fail(kiln_error *err);

/* getopt_long with kiln's conventions: "--help"/"-h" print the usage (returns
 * 'h'), an unknown option or a missing argument is a usage error (returns '?'
 * after printing).  Options are not permuted past the first operand. */
int cli_getopt(const struct kiln_command *cmd, int argc, char **argv, const char *shortopts,
	       const struct option *longopts);

/* For listing commands whose only option is --json (and no operands):
 * returns -1 when the command should go on, else the exit code to return. */
int cli_list_opts(const struct kiln_command *cmd, int argc, char **argv, bool *json);
/* Print v on stdout as indented, key-sorted JSON and a newline. */
void cli_print_json(const json_t *v);

/* Find a subcommand by name in a NULL-terminated table (for "kiln dockerfile parse"). */
const struct kiln_command *cli_find(const struct kiln_command *const *table, const char *name);
/* Run the sub-command named by argv[1] from `subs` (named "NAME" or "CMD NAME"),
 * with argv shifted by one; no sub-command or an unknown one is a usage error,
 * "-h", "--help" and "help" print cmd's usage. */
int cli_dispatch(const struct kiln_command *cmd, const struct kiln_command *const *subs, int argc, char **argv);
/* "NAME\tSUMMARY" per line for `kiln --list-commands` and `kiln CMD
 * --list-commands` (cli_dispatch answers it): what the man pages and the bash
 * completion are generated from (cli/gen-man.sh, cli/gen-completion.sh). */
int cli_list_commands(const struct kiln_command *const *table);

#endif
