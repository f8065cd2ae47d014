/* cli.h — the contract between kiln's entry point and its subcommands.  Each
 * cli/cmd_NAME.c defines one `const struct kiln_command kiln_cmd_NAME`; the
 * Makefile generates the table from the file names.  Only cli/ prints to the
 * user or decides exit codes: 0 success, 1 runtime error, 2 usage error. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <stdbool.h>

#include "kiln.h"

enum { KILN_EXIT_OK = 0, KILN_EXIT_FAIL = 1, KILN_EXIT_USAGE = 2 };

struct kiln_command {
	const char *name;
	const char *summary; /* one line for `kiln --help` */
	/* `kiln NAME --help` up to its options (which cli_parse prints from the
	 * table): "Usage: kiln NAME ..." and what it does */
	const char *usage;
	/* argv[0] is the command name; returns an exit code. */
	int (*run)(const struct kiln_command *cmd, int argc, char **argv);
};

/* One option of a command's table (git's parse-options model): the table
 * is what the parser reads and what --help, the man pages and the bash
 * completion print, so they cannot drift apart.  Tables are arrays ending
 * with CLI_END, usually local to the command's run() and pointing at its
 * variables. */
enum cli_opt_type {
	CLI_OPT_END = 0,
	CLI_OPT_BOOL,     /* bool *value = true */
	CLI_OPT_STRING,   /* const char **value = the argument (the last one given) */
	CLI_OPT_STRV,     /* kiln_strv *value gets each argument (repeatable) */
	CLI_OPT_UINT,     /* unsigned *value, a decimal number from min to max */
	CLI_OPT_CALLBACK, /* cb(cmd, opt, arg): arg is NULL when argh is NULL (a flag) */
};

struct cli_option {
	enum cli_opt_type type;
	char short_name;       /* 0: none */
	const char *long_name; /* without the leading -- */
	void *value;
	const char *argh;      /* the value's name in --help ("FILE"); NULL: takes none */
	const char *help;      /* one line per '\n' */
	unsigned min, max;     /* CLI_OPT_UINT */
	/* 0, or the exit code to return (after cli_usage_error) */
	int (*cb)(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg);
};

#define CLI_BOOL(s, l, v, h) { CLI_OPT_BOOL, (s), (l), (v), NULL, (h), 0, 0, NULL }
#define CLI_STRING(s, l, v, a, h) { CLI_OPT_STRING, (s), (l), (v), (a), (h), 0, 0, NULL }
#define CLI_STRV(s, l, v, a, h) { CLI_OPT_STRV, (s), (l), (v), (a), (h), 0, 0, NULL }
#define CLI_UINT(s, l, v, a, lo, hi, h) { CLI_OPT_UINT, (s), (l), (v), (a), (h), (lo), (hi), NULL }
#define CLI_CALLBACK(s, l, v, a, fn, h) { CLI_OPT_CALLBACK, (s), (l), (v), (a), (h), 0, 0, (fn) }
/* --NAME NAME=VALUE into a kiln_strv (NAME non-empty) */
#define CLI_ENV(s, l, v, h) CLI_CALLBACK(s, l, v, "NAME=VALUE", cli_opt_env, h)
#define CLI_END { CLI_OPT_END, 0, NULL, NULL, NULL, NULL, 0, 0, NULL }

/* --data DIR / --config FILE: the registry a command administers */
#define CLI_REGISTRY_OPTIONS(data, config)                                                            \
	CLI_STRING('d', "data", (data), "DIR", "the registry's data directory (as for kiln serve)"),   \
		CLI_STRING('c', "config", (config), "FILE", "its JSON config file (as for kiln serve)")

int cli_opt_env(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg);
/* The registry's settings from --config FILE and --data DIR (registry_quota.c). */
struct reg_config;
int cli_registry_config(struct reg_config *cfg, const char *data, const char *config, kiln_error **err);
extern const struct kiln_command kiln_cmd_registry_quota, kiln_cmd_registry_usage;

enum { CLI_PARSE_PERMUTE = 1 /* operands may come between options (else options end at the first) */ };

/* Parse argv[1...] by the table opts (NULL: only --help) with kiln's
 * conventions: -h/--help print the help; "-fVALUE", "-f VALUE", "--file=VALUE",
 * "--file VALUE", bundled flags "-ab", a unique prefix of a long name; "--"
 * ends the options; an unknown option or a missing value is a usage error.
 * `CMD --list-options` prints the long names (for the completion).  Returns
 * the index in argv of the first operand, or -1 with *rc the exit code the
 * command returns (0 after --help). */
int cli_parse(const struct kiln_command *cmd, const struct cli_option *opts, int argc, char **argv, unsigned flags,
	      int *rc);

/* Print "kiln NAME: message" and the command's usage (and options, once it
 * parsed them) to stderr; returns 2. */
int cli_usage_error(const struct kiln_command *cmd, const char *fmt, ...) KILN_PRINTF(2, 3);
/* Print the command's usage (and options) to stdout; returns 0. */
int cli_help(const struct kiln_command *cmd);
/* Print the error as one line "kiln: message" to stderr, free it; returns 1
 * (2 for a usage error). */
int cli_fail(kiln_error *err);

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

/* `kiln registry retain` (cli/registry_retain.c), a subcommand of cmd_registry.c. */
extern const struct kiln_command cli_registry_retain;

#endif
