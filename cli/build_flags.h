/* build_flags.h — the flags `kiln build` and `kiln dockerfile plan` share,
 * parsed once with docker buildx's rules: --build-arg (both), --secret and
 * --ssh (build).  Each is the callback of an option table entry whose value
 * is a struct cli_build_flags; it prints its usage error and returns 2, else 0. */
#ifndef KILN_CLI_BUILD_FLAGS_H
#define KILN_CLI_BUILD_FLAGS_H

#include "builder/builder.h"
#include "builder/request.h"
#include "cli/cli.h"
#include "dockerfile-parser/dockerfile.h"

struct cli_build_flags {
	struct df_kv *args;
	size_t n_args;
	struct build_secret *secrets;
	size_t n_secrets;
	struct build_ssh *ssh;
	size_t n_ssh;
	kiln_strv strs; /* what they point to */
};

/* --build-arg K=V; a bare K takes $K, and is left out (the Dockerfile's
 * default applies) when K is not set, as buildx does. */
int cli_build_arg(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg);
/* --secret id=ID[,src=FILE|,env=VAR][,type=file|env]. */
int cli_build_secret(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg);
/* --ssh default|ID[=SOCKET] (default: $SSH_AUTH_SOCK). */
int cli_build_ssh(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg);
void cli_build_flags_free(struct cli_build_flags *f);

/* The options of the build request's table (builder/request.h) that have a
 * flag, pointing into r (--build-arg into f, for r once parsed); fills at
 * most build_nfields entries of out, returns how many. */
size_t cli_build_request_options(struct build_request *r, struct cli_build_flags *f, struct cli_option *out);

#define CLI_BUILD_ARG_OPTION(f)                                                                     \
	CLI_CALLBACK(0, "build-arg", (f), "K=V", cli_build_arg,                                     \
		     "set a build argument (repeatable; a bare K takes $K, and is\n"               \
		     "left out when K is not set: the Dockerfile's default applies)")

#endif
