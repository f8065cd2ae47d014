/* fuzz_dockerignore.c — .dockerignore parsing and matching: any bytes as the
 * file, its last line also used as a path to match (and as a glob). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "builder/builder.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	build_ignore *ig = NULL;
	kiln_error *err = NULL;
	char *text = kiln_xstrndup((const char *)data, size);
	const char *last = strrchr(text, '\n');

	last = last ? last + 1 : text;
	if (build_ignore_parse(text, strlen(text), "fuzz", &ig, &err) == 0) {
		char *clean = kiln_path_clean(last);
		build_ignore_match(ig, clean);
		build_ignore_match(ig, "a/b/c");
		free(clean);
		build_ignore_free(ig);
	} else {
		kiln_error_free(err);
	}
	build_glob_match(text, last);
	free(text);
	return 0;
}
