/* tmpl_xfer.h — the template half of `kiln push` and `kiln pull`
 * (cli/tmpl_xfer.c), called by cmd_push.c and cmd_pull.c. */
#ifndef KILN_CLI_TMPL_XFER_H
#define KILN_CLI_TMPL_XFER_H

#include <stdbool.h>

#include "registry/registry.h"

struct cli_xfer_flags {
	bool json;          /* one JSON object on stdout at the end */
	unsigned parallel;  /* 0: the client's default */
};

/* Whether ref names a local template. */
bool cli_is_template(const char *ref);
/* Push template ref to dest ([REGISTRY/]REPO[:TAG]); returns an exit code. */
int cli_tmpl_push(const char *ref, const char *dest, const struct cli_xfer_flags *f);
/* Pull the template whose manifest m came from r's repository, as local
 * template name (NULL: REPO:TAG); returns an exit code. */
int cli_tmpl_pull(reg_client *c, const struct reg_imgref *r, const struct reg_doc *m, const char *name,
		  const struct cli_xfer_flags *f);

#endif
