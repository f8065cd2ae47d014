/* sandbox.h — what cli/cmd_sandbox.c shares with the files of its other
 * subcommands (sandbox_files.c: cp, logs; sandbox_state.c: timeout, pause,
 * resume, commit). */
#ifndef KILN_CLI_SANDBOX_H
#define KILN_CLI_SANDBOX_H

#include "cli/cli.h"

extern const struct kiln_command cli_sb_cp, cli_sb_logs, cli_sb_timeout, cli_sb_pause, cli_sb_resume,
	cli_sb_commit;
/* A --timeout or a `kiln sandbox timeout` DURATION in seconds (90s, 30m, 12h, 7d, 0). */
int cli_parse_timeout(const char *s, int64_t *out, kiln_error **err);
/* Options: only --help; returns -1 to go on with exactly n operands from
 * argv[*first], else the exit code. */
int cli_sb_plain_opts(const struct kiln_command *cmd, int argc, char **argv, int n, int *first);

#endif
