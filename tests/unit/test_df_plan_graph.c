/* test_df_plan_graph.c — the stage graph: named (case-insensitive) and
 * numbered stages, FROM <stage>, COPY --from=<stage|index|image>, RUN
 * --mount from=, --target, build order, cycles and bad references, ONBUILD
 * triggers of a stage base, and the JSON document. */
#include <stdlib.h>

#include "dockerfile-parser/dockerfile.h"
#include "tests/unit/test.h"

static struct df_ast *g_ast;

static struct df_plan *plan_of(const char *text, const char *target, kiln_error **err)
{
	struct df_plan_opts o = { NULL, 0, target, NULL, NULL, NULL, NULL };
	struct df_plan *p = NULL;

	df_ast_free(g_ast);
	g_ast = NULL;
	if (df_parse("Dockerfile", text, strlen(text), &g_ast, err) < 0)
		return NULL;
	if (df_plan_build(g_ast, &o, &p, err) < 0)
		return NULL;
	return p;
}

static void done(struct df_plan *p)
{
	df_plan_free(p);
	df_ast_free(g_ast);
	g_ast = NULL;
}

static char *order_str(const struct df_plan *p)
{
	kiln_buf b = KILN_BUF_INIT;
	for (size_t i = 0; i < p->n_order; i++)
		kiln_buf_addf(&b, "%s%d", i ? "," : "", p->order[i]);
	return kiln_buf_detach(&b);
}

static const char multi[] = "FROM golang:1.22 AS Build\n"              /* 0 */
			    "RUN go build -o /out/app\n"
			    "FROM alpine AS unused\n"                   /* 1 */
			    "RUN false\n"
			    "FROM build AS test\n"                      /* 2: base stage 0 */
			    "RUN go test\n"
			    "FROM debian AS tools\n"                    /* 3 */
			    "FROM alpine\n"                             /* 4 */
			    "COPY --from=BUILD /out/app /app\n"
			    "COPY --from=0 /etc/passwd /etc/passwd\n"
			    "COPY --from=nginx:latest /etc/nginx /etc/nginx\n"
			    "RUN --mount=type=bind,from=tools,source=/bin,target=/t ls /t\n";

static void test_default_target(void)
{
	kiln_error *err = NULL;
	struct df_plan *p = plan_of(multi, NULL, &err);
	char *o;

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_INT(p->n_stages, 5);
	CHECK_STR(p->stages[0].name, "build");
	CHECK(p->stages[4].name == NULL);
	CHECK_INT(p->stages[2].base_stage, 0);
	CHECK_INT(p->stages[4].base_stage, -1);
	CHECK_INT(p->target, 4);
	o = order_str(p);
	CHECK_STR(o, "0,3,4");
	free(o);
	CHECK_INT(p->stages[4].n_deps, 2);
	CHECK_INT(p->stages[4].deps[0], 0);
	CHECK_INT(p->stages[4].deps[1], 3);
	CHECK(!p->stages[1].reachable);
	CHECK_INT(p->stages[1].n_steps, 0);
	CHECK_INT(p->stages[4].steps[0].from_stage, 0);
	CHECK_INT(p->stages[4].steps[1].from_stage, 0);
	CHECK_INT(p->stages[4].steps[2].from_stage, -1);
	CHECK_STR(p->stages[4].steps[2].from_image, "nginx:latest");
	CHECK_INT(p->stages[4].steps[3].from_stage, 3);
	done(p);
	/* a mount's from= is never an index: "0" is an image, as in BuildKit */
	p = plan_of("FROM alpine\nFROM alpine\nRUN --mount=from=0,target=/x true\n", NULL, &err);
	CHECK(p != NULL);
	if (p) {
		CHECK_INT(p->stages[1].steps[0].from_stage, -1);
		CHECK_INT(p->stages[1].n_deps, 0);
	}
	done(p);
}

static void test_targets(void)
{
	kiln_error *err = NULL;
	struct df_plan *p;
	char *o;

	p = plan_of(multi, "TEST", &err);
	CHECK(p != NULL);
	if (p) {
		CHECK_INT(p->target, 2);
		o = order_str(p);
		CHECK_STR(o, "0,2");
		free(o);
		CHECK_INT(p->stages[2].n_deps, 1);
	}
	done(p);
	p = plan_of(multi, "1", &err);
	CHECK(p != NULL);
	if (p) {
		o = order_str(p);
		CHECK_STR(o, "1");
		free(o);
	}
	done(p);
	p = plan_of(multi, "nope", &err);
	CHECK(p == NULL);
	CHECK(err && err->kind == KILN_E_NOTFOUND);
	CHECK(err && strstr(kiln_error_message(err), "target stage \"nope\" could not be found"));
	CHECK(err && strstr(kiln_error_message(err), "build, unused, test, tools, 4 (unnamed)"));
	kiln_error_clear(&err);
	done(NULL);
}

static void expect_error(const char *df, const char *want)
{
	kiln_error *err = NULL;
	struct df_plan *p = plan_of(df, NULL, &err);

	CHECK(p == NULL);
	if (err && !strstr(kiln_error_message(err), want))
		printf("#   got:  %s\n#   want: ...%s...\n", kiln_error_message(err), want);
	CHECK(err && strstr(kiln_error_message(err), want));
	kiln_error_free(err);
	done(p);
}

static void test_cycles_and_bad_refs(void)
{
	expect_error("FROM busybox AS stage0\nCOPY --from=stage0 f1 /sub/\n",
		     "Dockerfile:2:1: circular dependency detected on stage: stage0 (stage0 -> stage0)");
	expect_error("FROM busybox AS stage0\n"
		     "COPY --from=stage2 f1 /sub/\n"
		     "FROM busybox AS stage1\n"
		     "COPY --from=stage0 f2 /sub/\n"
		     "FROM busybox AS stage2\n"
		     "COPY --from=stage1 f2 /sub/\n",
		     "Dockerfile:4:1: circular dependency detected on stage: stage0 (stage0 -> stage2 -> stage1 -> stage0)");
	expect_error("FROM busybox AS a\nRUN --mount=from=b,target=/x true\nFROM a AS b\n",
		     "circular dependency detected on stage: a");
	expect_error("FROM alpine\nCOPY --from=1 a b\nFROM alpine\n",
		     "Dockerfile:2:1: invalid stage index 1: --from=<index> must refer to an earlier stage");
	expect_error("FROM alpine\nFROM alpine\nCOPY --from=7 a b\n", "Dockerfile:3:1: invalid stage index 7");
	expect_error("FROM alpine AS x\nFROM debian AS X\n", "Dockerfile:2:1: duplicate stage name \"x\"");
	expect_error("RUN true\nFROM alpine\n", "Dockerfile:1:1: no build stage in current context");
	expect_error("ARG A=1\n", "no build stage in current context");
}

/* A later stage may be named by COPY --from (BuildKit allows it) as long as
 * there is no cycle; the order still puts it first. */
static void test_forward_reference(void)
{
	kiln_error *err = NULL;
	struct df_plan *p = plan_of("FROM alpine\nCOPY --from=later /x /x\nFROM busybox AS later\nRUN true\n", "0", &err);
	char *o;

	CHECK(p != NULL);
	if (!p)
		return;
	o = order_str(p);
	CHECK_STR(o, "1,0");
	free(o);
	done(p);
}

static void test_onbuild_trigger(void)
{
	kiln_error *err = NULL;
	struct df_plan *p = plan_of("FROM alpine AS base\n"
				    "ENV X=base\n"
				    "ONBUILD RUN echo $X\n"
				    "ONBUILD COPY <<EOF /f\n"
				    "hi $X\n"
				    "EOF\n"
				    "FROM base\n"
				    "RUN echo child\n"
				    "FROM base AS again\n",
				    "1", &err);

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_INT(p->stages[1].n_steps, 3);
	CHECK_INT(p->stages[1].steps[0].kind, DF_RUN);
	CHECK_INT(p->stages[1].steps[0].node->start_line, 3);
	CHECK_STR(p->stages[1].steps[0].args.v[0], "echo $X");
	CHECK_INT(p->stages[1].steps[1].kind, DF_COPY);
	CHECK_INT(p->stages[1].steps[1].n_heredocs, 1);
	if (p->stages[1].steps[1].n_heredocs)
		CHECK_STR(p->stages[1].steps[1].heredocs[0].content, "hi base\n");
	CHECK_STR(p->stages[1].steps[2].env.v[1], "X=base");
	/* the ONBUILD line itself is a step of the stage that declares it */
	CHECK_INT(p->stages[0].steps[1].kind, DF_ONBUILD);
	done(p);
}

static void test_json(void)
{
	kiln_error *err = NULL;
	struct df_plan *p = plan_of(multi, "test", &err);
	json_t *j, *st;
	char *a, *b;

	CHECK(p != NULL);
	if (!p)
		return;
	j = df_plan_to_json(p);
	CHECK_INT(json_integer_value(json_object_get(j, "target")), 2);
	CHECK_STR(json_string_value(json_object_get(j, "target_name")), "test");
	CHECK_INT(json_array_size(json_object_get(j, "order")), 2);
	st = json_array_get(json_object_get(j, "stages"), 2);
	CHECK_STR(json_string_value(json_object_get(st, "base")), "build");
	CHECK_INT(json_integer_value(json_object_get(st, "base_stage")), 0);
	CHECK(json_is_true(json_object_get(st, "reachable")));
	CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(st, "steps"), 0), "instruction")),
		  "run");
	a = json_dumps(j, JSON_PRESERVE_ORDER);
	json_decref(j);
	j = df_plan_to_json(p);
	b = json_dumps(j, JSON_PRESERVE_ORDER);
	CHECK_STR(a, b);
	free(a);
	free(b);
	json_decref(j);
	done(p);
}

int main(void)
{
	RUN(test_default_target);
	RUN(test_targets);
	RUN(test_cycles_and_bad_refs);
	RUN(test_forward_reference);
	RUN(test_onbuild_trigger);
	RUN(test_json);
	return test_done();
}
