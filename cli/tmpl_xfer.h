/* tmpl_xfer.h — the template half of `kiln push` and `kiln pull`
 * (cli/tmpl_xfer.c), called by cmd_push.c and cmd_pull.c. */
#ifndef KILN_CLI_TMPL_XFER_H
#define KILN_CLI_TMPL_XFER_H

#include <stdbool.h>

struct cli_xfer_flags {
	bool json;          /* progress events and a final "done" event on stdout */
	unsigned parallel;  /* 0: the client's default */
	const char *name;   /* pull: the local template name (NULL: REPO:TAG) */
};

/* Whether ref names a local template. */
bool cli_is_template(const char *ref);
/* Push template ref to dest ([REGISTRY/]REPO[:TAG]); returns an exit code. */
int cli_tmpl_push(const char *ref, const char *dest, const struct cli_xfer_flags *f);
/* If src names a template artifact, pull it and return an exit code; else
 * return -1 (a plain image: the caller's path). */
int cli_tmpl_pull(const char *src, const struct cli_xfer_flags *f);

#endif
