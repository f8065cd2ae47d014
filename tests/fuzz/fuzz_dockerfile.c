/* fuzz_dockerfile.c — libFuzzer target for the Dockerfile syntax pass:
 * arbitrary bytes are parsed, and whatever parses is dumped both ways, so a
 * crash, leak or sanitizer report anywhere in the pass shows up. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/dockerfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct df_ast *ast = NULL;
	kiln_error *err = NULL;

	if (df_parse("fuzz", (const char *)data, size, &ast, &err) < 0) {
		/* every error names its place */
		const char *msg = kiln_error_message(err);
		if (strncmp(msg, "fuzz:", 5) != 0)
			abort();
		kiln_error_free(err);
		return 0;
	}
	char *dump = df_ast_dump(ast, NULL);
	json_t *j = df_ast_to_json(ast);
	char *s = json_dumps(j, JSON_COMPACT);
	if (s == NULL || dump == NULL)
		abort();
	free(s);
	free(dump);
	json_decref(j);
	df_ast_free(ast);
	return 0;
}
