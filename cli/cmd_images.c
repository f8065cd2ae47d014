/* cmd_images.c — `kiln images`: the images in the local store by name. */
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "builder/store.h"
#include "cli/cli.h"

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	build_store *s = NULL;
	json_t *images = NULL;
	bool json;
	int c;

	if ((c = cli_list_opts(cmd, argc, argv, &json)) >= 0)
		return c;
	if (build_store_open(NULL, &s, &err) < 0 || !(images = build_store_images(s, &err))) {
		build_store_close(s);
		return cli_fail(err);
	}
	if (json) {
		cli_print_json(images);
	} else {
		const char *name;
		json_t *v;
		void *tmp;
		printf("%-40s %-71s %s\n", "NAME", "DIGEST", "CREATED");
		json_object_foreach_safe(images, tmp, name, v) {
			char when[KILN_TIME_MAX];
			const char *d = kiln_json_str(v, "digest");
			printf("%-40s %-71s %s\n", name, d ? d : "?", kiln_time_rfc3339(kiln_json_int(v, "created", 0), when));
		}
	}
	json_decref(images);
	build_store_close(s);
	if (fflush(stdout) != 0) {
		kiln_err_errno(&err, errno, "write output");
		return cli_fail(err);
	}
	return KILN_EXIT_OK;
}

const struct kiln_command kiln_cmd_images = {
	.name = "images",
	.summary = "list the images in the local store",
	.usage = "Usage: kiln images [--json]\n\n"
		 "List the images `kiln build -t` stored under $KILN_HOME: name, manifest\n"
		 "digest and when the name was set.\n",
	.run = run,
};
