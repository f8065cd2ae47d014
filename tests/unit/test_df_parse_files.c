/* test_df_parse_files.c — the real-world-shaped Dockerfiles under
 * tests/data/dockerfiles/ parsed under the sanitizers: each dump equals its
 * reviewed .dump file, and a few facts per file (lines, heredocs, stages,
 * JSON form) are checked on the tree itself. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/dockerfile.h"
#include "test.h"

#define DATA "tests/data/dockerfiles"

static struct df_ast *parse_data(const char *name)
{
	struct df_ast *ast = NULL;
	kiln_error *err = NULL;
	char *path = kiln_xasprintf("%s/%s.Dockerfile", DATA, name);

	if (df_parse_file(path, &ast, &err) < 0) {
		printf("#   %s: %s\n", path, kiln_error_message(err));
		kiln_error_free(err);
	}
	free(path);
	return ast;
}

static size_t count(const struct df_ast *ast, const char *name)
{
	size_t n = 0;

	for (size_t i = 0; i < ast->n_nodes; i++)
		n += strcmp(ast->nodes[i].name, name) == 0;
	return n;
}

static void test_dumps_match(void)
{
	DIR *d = opendir(DATA);
	struct dirent *e;
	int files = 0;

	CHECK(d != NULL);
	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);
		if (l < 12 || strcmp(e->d_name + l - 11, ".Dockerfile") != 0)
			continue;
		char *name = kiln_xstrndup(e->d_name, l - 11);
		char *want_path = kiln_xasprintf("%s/%s.dump", DATA, name), *want = NULL;
		size_t want_len = 0;
		kiln_error *err = NULL;
		struct df_ast *ast = parse_data(name);
		CHECK(ast != NULL);
		CHECK(kiln_read_file(want_path, &want, &want_len, 0, &err) == 0);
		kiln_error_free(err);
		if (ast && want) {
			char *got = df_ast_dump(ast, NULL);
			if (strcmp(got, want) != 0) {
				printf("#   %s: dump differs from %s\n", name, want_path);
				test_checks_failed++;
			}
			free(got);
		}
		files++;
		df_ast_free(ast);
		free(want);
		free(want_path);
		free(name);
	}
	closedir(d);
	CHECK(files >= 5);
}

static void test_go_multistage(void)
{
	struct df_ast *ast = parse_data("go-multistage");

	CHECK(ast != NULL);
	if (!ast)
		return;
	CHECK_STR(ast->syntax, "docker/dockerfile:1.7");
	CHECK_INT(count(ast, "from"), 3);
	CHECK_INT(count(ast, "arg"), 3);
	/* the RUN with two cache mounts spans four lines */
	for (size_t i = 0; i < ast->n_nodes; i++) {
		const struct df_node *n = &ast->nodes[i];
		if (strcmp(n->name, "run") == 0 && n->flags.n == 2) {
			CHECK_INT(n->end_line - n->start_line, 3);
			CHECK_STR(n->flags.v[1], "--mount=type=cache,target=/root/.cache/go-build");
		}
		if (strcmp(n->name, "healthcheck") == 0) {
			CHECK(n->json);
			CHECK_INT(n->flags.n, 4);
			CHECK_STR(n->args.v[0], "CMD");
		}
	}
	df_ast_free(ast);
}

static void test_official_shaped(void)
{
	struct df_ast *ast = parse_data("official-shaped");

	CHECK(ast != NULL);
	if (!ast)
		return;
	CHECK_INT(ast->n_nodes, 16);
	/* the comment inside the first RUN's continuation is dropped */
	CHECK(strstr(ast->nodes[2].args.v[0], "home directory") == NULL);
	CHECK_INT(ast->nodes[2].start_line, 6);
	CHECK_INT(ast->nodes[2].end_line, 11);
	CHECK_STR(ast->nodes[2].comment, "explicitly set user/group IDs");
	/* old-style ENV has an empty separator, new-style "=" */
	CHECK_STR(ast->nodes[3].args.v[2], "");
	CHECK_INT(ast->nodes[6].args.n, 9);
	CHECK_STR(ast->nodes[6].args.v[5], "=");
	df_ast_free(ast);
}

static void test_heredocs_file(void)
{
	struct df_ast *ast = parse_data("heredocs");
	size_t docs = 0;

	CHECK(ast != NULL);
	if (!ast)
		return;
	for (size_t i = 0; i < ast->n_nodes; i++)
		docs += ast->nodes[i].n_heredocs;
	CHECK_INT(docs, 6);
	CHECK_INT(count(ast, "run"), 3);
	CHECK(ast->nodes[1].json); /* SHELL [...] */
	df_ast_free(ast);
}

static void test_arg_heavy(void)
{
	struct df_ast *ast = parse_data("arg-heavy");
	size_t before_from = 0;

	CHECK(ast != NULL);
	if (!ast)
		return;
	while (before_from < ast->n_nodes && strcmp(ast->nodes[before_from].name, "arg") == 0)
		before_from++;
	CHECK_INT(before_from, 7);
	CHECK_INT(ast->nodes[3].start_line, 7);
	CHECK_INT(ast->nodes[3].end_line, 8);
	CHECK_INT(ast->nodes[3].args.n, 2);
	CHECK_STR(ast->nodes[7].flags.v[0], "--platform=${TARGETPLATFORM:-linux/amd64}");
	CHECK_INT(count(ast, "arg"), 17);
	df_ast_free(ast);
}

int main(void)
{
	RUN(test_dumps_match);
	RUN(test_go_multistage);
	RUN(test_official_shaped);
	RUN(test_heredocs_file);
	RUN(test_arg_heavy);
	return test_done();
}
