/* fuzz_plan.c — libFuzzer target for the semantic pass: arbitrary text is
 * parsed and, when it parses, planned (with build args and, picked by the
 * first byte, a target), then serialised, so the scoping, expansion and
 * stage-graph code sees every AST the parser accepts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/dockerfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct df_kv args[] = { { "VERSION", "1.0" }, { "BASE", "alpine" }, { "A", "a b" } };
	static const char *const targets[] = { NULL, "0", "1", "build", "app", "nope" };
	struct df_plan_opts o = { args, 3, NULL, NULL, NULL, NULL, NULL };
	struct df_ast *ast = NULL;
	struct df_plan *plan = NULL;
	kiln_error *err = NULL;

	if (size < 1 || size > 16384)
		return 0;
	o.target = targets[data[0] % 6];
	if (data[0] & 0x80)
		o.platform = "linux/arm64";
	if (df_parse("Dockerfile", (const char *)data + 1, size - 1, &ast, &err) == 0) {
		if (df_plan_build(ast, &o, &plan, &err) == 0) {
			json_t *j = df_plan_to_json(plan);
			char *s = json_dumps(j, JSON_PRESERVE_ORDER);
			free(s);
			json_decref(j);
			df_plan_free(plan);
		}
	}
	kiln_error_free(err);
	df_ast_free(ast);
	return 0;
}
