/* serve_only.c — kiln serve's library closure, linked alone: the registry
 * server and only the folders under it (common, oci, regclient, registry) as
 * object files, so any reference into another folder (vm, snapshots,
 * builder, distrib) fails the link.  Run: starts a server on DIR, stops it. */
#include <stdio.h>
#include <stdlib.h>

#include "registry/registry.h"

int main(int argc, char **argv)
{
	struct reg_config c;
	kiln_error *err = NULL;
	reg_server *s;

	if (argc != 2) {
		fprintf(stderr, "usage: serve-only DATA_DIR\n");
		return 2;
	}
	reg_config_init(&c);
	free(c.data_dir);
	c.data_dir = kiln_xstrdup(argv[1]);
	c.port = 0;
	if (!(s = reg_server_start(&c, &err))) {
		fprintf(stderr, "serve-only: %s\n", kiln_error_message(err));
		kiln_error_free(err);
		reg_config_free(&c);
		return 1;
	}
	printf("serve-only: listening on port %u\n", (unsigned)reg_server_port(s));
	reg_server_stop(s);
	reg_config_free(&c);
	return 0;
}
